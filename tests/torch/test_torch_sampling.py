"""Sharding plans: every record exactly once across ranks x workers, for every kind of file."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.torch_data import COMPRESSED, INDEXED, MIXED, UNINDEXED, ids_of, write_files  # noqa: E402

from tfrecord_beam.torch import TFRecordDataset, sampling  # noqa: E402

GRID = [(ranks, workers) for ranks in (1, 2, 3) for workers in (1, 2, 3, 4)]


def _shards(ds_factory, ranks, workers, **kwargs):
    """{(rank, worker): ids} reading each shard directly (no DataLoader, to stay fast)."""
    out = {}
    for rank in range(ranks):
        ds = ds_factory(rank=rank, world_size=ranks, **kwargs)
        for worker in range(workers):
            out[rank, worker] = ids_of(ds.iter_worker(worker, workers))
    return out


@pytest.mark.parametrize(
    "layout", [MIXED, INDEXED, UNINDEXED, COMPRESSED], ids=["mixed", "indexed", "unindexed", "compressed"]
)
def test_every_record_exactly_once_over_the_grid(tmp_path, layout):
    paths, indexes, ids = write_files(tmp_path, layout)

    def factory(**kw):
        return TFRecordDataset(paths, indexes, description=["id"], **kw)

    for ranks, workers in GRID:
        shards = _shards(factory, ranks, workers)
        union = Counter(i for got in shards.values() for i in got)
        assert union == Counter(ids), (ranks, workers)


def test_indexed_shards_get_equal_counts(tmp_path):
    paths, indexes, ids = write_files(tmp_path, INDEXED)
    for ranks, workers in GRID:
        shards = _shards(lambda **kw: TFRecordDataset(paths, indexes, description=["id"], **kw), ranks, workers)
        sizes = [len(v) for v in shards.values()]
        assert max(sizes) - min(sizes) <= 1, (ranks, workers, sizes)


def test_exactly_once_with_shuffle_and_batches(tmp_path):
    paths, indexes, ids = write_files(tmp_path, MIXED)
    for ranks, workers in [(2, 3), (3, 4)]:
        shards = _shards(
            lambda **kw: TFRecordDataset(paths, indexes, ["id"], shuffle_queue_size=7, seed=5, batch_size=4, **kw),
            ranks,
            workers,
        )
        assert Counter(i for got in shards.values() for i in got) == Counter(ids)


def test_byte_ranges_resync_inside_big_records(tmp_path):
    # Records of a few hundred bytes and many shards: most byte cuts fall inside a record.
    paths, _, ids = write_files(tmp_path, [("big.tfrecord", 60, False)])
    infos = [sampling.FileInfo(False, 1, None)]
    assert sampling.plan_shards(infos, 1)[0][0].kind == sampling.BYTES
    for shards in (7, 12):
        got = []
        ds = TFRecordDataset(paths, None, ["id"], rank=0, world_size=1)
        for worker in range(shards):
            got.extend(ids_of(ds.iter_worker(worker, shards)))
        assert sorted(got) == ids


def test_plan_prefers_whole_compressed_files_when_there_are_enough():
    infos = [sampling.FileInfo(True, 100 * (k + 1), None) for k in range(5)]
    plan = sampling.plan_shards(infos, 3)
    assert all(p.kind == sampling.WHOLE for pieces in plan for p in pieces)
    assert sorted(p.file for pieces in plan for p in pieces) == list(range(5))
    plan = sampling.plan_shards(infos, 8)
    assert all(p.kind == sampling.STRIDE for pieces in plan for p in pieces)


def test_plan_uses_whole_files_where_the_slices_cover_them():
    infos = [sampling.FileInfo(False, 10, 10) for _ in range(4)]
    plan = sampling.plan_shards(infos, 2)
    assert [[(p.file, p.start, p.stop) for p in pieces] for pieces in plan] == [
        [(0, 0, 10), (1, 0, 10)],
        [(2, 0, 10), (3, 0, 10)],
    ]


def test_plan_follows_the_given_file_order():
    infos = [sampling.FileInfo(False, 10, 10) for _ in range(3)]
    plan = sampling.plan_shards(infos, 1, order=[2, 0, 1])
    assert [p.file for p in plan[0]] == [2, 0, 1]


def test_topology_explicit_or_default():
    assert sampling.resolve_topology(None, None) == (0, 1)
    assert sampling.resolve_topology(2, 3) == (2, 3)
    with pytest.raises(ValueError, match="rank 3"):
        sampling.resolve_topology(3, 3)


def test_topology_from_torch_distributed(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        assert sampling.resolve_topology() == (0, 1)
        assert sampling.resolve_topology(rank=0, world_size=None) == (0, 1)
    finally:
        dist.destroy_process_group()


def test_rng_is_private_and_keyed():
    before = np.random.get_state()[1].copy()
    a = sampling.rng(1, 2, 3).random(4)
    assert np.array_equal(a, sampling.rng(1, 2, 3).random(4))
    assert not np.array_equal(a, sampling.rng(1, 2, 4).random(4))
    assert np.array_equal(before, np.random.get_state()[1])


def test_mixer_draws_in_proportion_to_weights():
    weights = [0.6, 0.3, 0.1]
    mixer = sampling.WeightedMixer(weights, sampling.rng(7))
    streams = [iter(lambda k=k: k, None) for k in range(3)]  # endless constant streams
    draws = 30000
    counts = np.bincount([next(mixer_iter) for mixer_iter in [mixer.mix(streams)] for _ in range(draws)], minlength=3)
    expected = np.asarray(weights) * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 13.82, (counts.tolist(), chi2)  # 99.9th percentile of chi-square with 2 dof


def test_mixer_state_resumes_the_same_draws():
    def streams(skip_finite=0):
        return [iter(lambda: 0, None), iter(range(100 + skip_finite, 105)), iter(lambda: 2, None)]

    def take(it, n):
        return [next(it) for _ in range(n)]

    full = take(sampling.WeightedMixer([1, 1, 1], sampling.rng(3)).mix(streams()), 40)
    first = sampling.WeightedMixer([1, 1, 1], sampling.rng(3))
    head = take(first.mix(streams()), 10)
    state = first.state()
    used = sum(1 for x in head if x >= 100)
    rest = take(sampling.WeightedMixer([1, 1, 1], sampling.rng(999), state=state).mix(streams(used)), 30)
    assert head + rest == full
    assert sorted(x for x in full if x >= 100) == list(range(100, 105))  # the finite stream ran out and was dropped


def test_mixer_rejects_bad_weights():
    for bad in ([], [0, 0], [1, -1], [float("nan")]):
        with pytest.raises(ValueError, match="weights"):
            sampling.WeightedMixer(bad, sampling.rng(0))
