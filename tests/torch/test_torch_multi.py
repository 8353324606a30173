"""MultiTFRecordDataset: globbed splits, weighted sampling, finite and infinite modes."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.torch_data import ids_of, write_files  # noqa: E402

from tfrecord_beam.torch import MultiTFRecordDataset  # noqa: E402

SPLIT_BASE = {"a": 0, "b": 1000, "c": 2000}


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = tmp_path_factory.mktemp("splits")
    ids = {}
    for split, base in SPLIT_BASE.items():
        layout = [(f"{split}{k}.tfrecord", n, True) for k, n in enumerate([12, 7, 0, 9][: 2 + (split == "a") * 2])]
        ids[split] = write_files(root / split, layout, first_id=base)[2]
    return str(root / "{}" / "*.tfrecord"), str(root / "{}" / "*.tfindex"), ids


def _split_of(uid):
    return max(s for s, base in SPLIT_BASE.items() if uid >= base)


def test_infinite_mode_samples_in_proportion(splits):
    data, index, _ = splits
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    ds = MultiTFRecordDataset(data, index, weights, ["id"], seed=17)
    draws = 6000
    counts = Counter(_split_of(u) for u in ids_of(itertools.islice(iter(ds), draws)))
    observed = np.array([counts[s] for s in weights])
    expected = np.array(list(weights.values())) * draws
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 13.82, (observed.tolist(), chi2)  # 99.9th percentile of chi-square, 2 dof


def test_infinite_mode_cycles_each_split_whole(splits):
    data, index, ids = splits
    ds = MultiTFRecordDataset(data, index, {"b": 1.0}, ["id"], shuffle_queue_size=4, seed=1)
    n = len(ids["b"])
    got = ids_of(itertools.islice(iter(ds), 3 * n))
    for lap in range(3):
        assert sorted(got[lap * n : (lap + 1) * n]) == ids["b"]
    assert got[:n] != got[n : 2 * n]  # each pass is shuffled anew


def test_finite_mode_reads_every_record_once_then_ends(splits):
    data, index, ids = splits
    everything = sorted(i for v in ids.values() for i in v)
    ds = MultiTFRecordDataset(data, index, {"a": 0.7, "b": 0.2, "c": 0.1}, ["id"], infinite=False, seed=3)
    assert sorted(ids_of(ds)) == everything
    batches = MultiTFRecordDataset(data, index, {"a": 1, "b": 1, "c": 1}, ["id"], infinite=False, batch_size=10)
    assert sorted(ids_of(batches)) == everything


def test_finite_mode_exactly_once_over_ranks_and_workers(splits):
    data, index, ids = splits
    everything = sorted(i for v in ids.values() for i in v)
    for ranks, workers in [(2, 2), (3, 1)]:
        seen = []
        for rank in range(ranks):
            ds = MultiTFRecordDataset(
                data,
                None,
                {"a": 1, "b": 2, "c": 1},
                ["id"],
                infinite=False,
                shuffle_queue_size=3,
                rank=rank,
                world_size=ranks,
            )
            for worker in range(workers):
                seen.extend(ids_of(ds.iter_worker(worker, workers)))
        assert sorted(seen) == everything


def test_zero_weight_split_is_never_read(splits):
    data, index, ids = splits
    ds = MultiTFRecordDataset(data, index, {"a": 1, "c": 0}, ["id"], infinite=False)
    assert sorted(ids_of(ds)) == ids["a"]


def test_same_seed_same_mix_and_global_rng_untouched(splits):
    data, index, _ = splits
    state = np.random.get_state()[1].copy()

    def run(seed):
        ds = MultiTFRecordDataset(data, index, {"a": 1, "b": 1}, ["id"], shuffle_queue_size=4, seed=seed)
        return ids_of(itertools.islice(iter(ds), 200))

    assert run(5) == run(5) and run(5) != run(6)
    assert np.array_equal(np.random.get_state()[1], state)


def test_bad_splits(splits):
    data, index, _ = splits
    with pytest.raises(ValueError, match="at least one split"):
        MultiTFRecordDataset(data, index, {})
    with pytest.raises(ValueError, match="weights"):
        MultiTFRecordDataset(data, index, {"a": -1, "b": 1})
    with pytest.raises(FileNotFoundError, match="no TFRecord files"):
        MultiTFRecordDataset(data, index, {"nope": 1})
