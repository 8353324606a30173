"""elastic=True: one global order per epoch whatever the ranks x workers, and a state taken at
one topology (and batch size) that resumes at another with every remaining record exactly once,
in the order an uninterrupted run would have delivered them."""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.torch_data import INDEXED, ids_of, write_files  # noqa: E402

from tfrecord_beam.torch import MultiTFRecordDataset, TFRecordDataset  # noqa: E402
from tfrecord_beam.torch.elastic import Lane, Mix, SourceOrder  # noqa: E402

LAYOUT = [(f"e{k}.tfrecord", n, True) for k, n in enumerate([41, 3, 0, 26, 17])]  # 87 records


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("elastic"), LAYOUT)


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic_splits")
    write_files(root / "a", INDEXED[:2], first_id=0)  # 33 records
    write_files(root / "b", INDEXED[2:], first_id=1000)  # 26 records
    write_files(root / "c", LAYOUT[3:4], first_id=5000)  # 26 records
    return str(root / "{}" / "*.tfrecord"), str(root / "{}" / "*.tfindex")


def lockstep(make, ranks: int, workers: int, steps: Optional[int] = None, state: Any = None) -> Tuple[List[int], Any]:
    """Run `ranks` ranks, each an in-order DataLoader over `workers` workers (one dataset copy per
    worker, as DataLoader workers have), for `steps` items each (None: to the end). Returns the
    ids in global order (step by step, rank by rank within a step) and the list of rank 0's
    workers' states."""
    copies: Dict[Tuple[int, int], Any] = {}
    streams = {}
    for r in range(ranks):
        for w in range(workers):
            ds = make(rank=r, world_size=ranks)
            if state is not None:
                ds.load_state_dict(pickle.loads(pickle.dumps(state)))  # states are plain picklable data
            copies[r, w] = ds
            streams[r, w] = ds.iter_worker(w, workers)
    turn = {r: 0 for r in range(ranks)}
    alive = {key: True for key in streams}
    out: List[int] = []
    step = 0
    while steps is None or step < steps:
        delivered = False
        for r in range(ranks):
            for _ in range(workers):  # the DataLoader skips exhausted workers, in turn
                w = turn[r]
                turn[r] = (w + 1) % workers
                if not alive[r, w]:
                    continue
                try:
                    item = next(streams[r, w])
                except StopIteration:
                    alive[r, w] = False
                    continue
                out.extend(ids_of([item]))
                delivered = True
                break
        if not delivered:
            break
        step += 1
    return out, [copies[0, w].state_dict() for w in range(workers)]


def factory(paths, indexes, **kw):
    def make(**where):
        return TFRecordDataset(paths, indexes, ["id"], elastic=True, seed=7, **kw, **where)

    return make


SHUFFLES = [
    pytest.param({}, id="in-order"),
    pytest.param({"shuffle_queue_size": 9, "shuffle_block": 4}, id="shuffled"),
]


@pytest.mark.parametrize("shuffle", SHUFFLES)
@pytest.mark.parametrize("batch", [None, 4])
def test_one_global_order_for_every_topology(files, shuffle, batch):
    paths, indexes, ids = files
    make = factory(paths, indexes, batch_size=batch, **shuffle)
    reference, _ = lockstep(make, 1, 1)
    assert Counter(reference) == Counter(ids)
    for ranks, workers in [(1, 2), (2, 1), (2, 3), (3, 2), (4, 4)]:
        got, _ = lockstep(make, ranks, workers)
        assert got == reference, (ranks, workers)
    if shuffle:
        assert reference != sorted(reference)
        other, _ = lockstep(
            lambda **w: TFRecordDataset(paths, indexes, ["id"], elastic=True, seed=8, **shuffle, **w), 1, 1
        )
        assert other != reference  # the seed decides the order


RESUMES = [((2, 4), (4, 1)), ((2, 4), (1, 4)), ((2, 2), (3, 2)), ((2, 2), (2, 3)), ((1, 2), (3, 1)), ((2, 1), (1, 3))]


@pytest.mark.parametrize("before,after", RESUMES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in RESUMES])
@pytest.mark.parametrize("shuffle", SHUFFLES)
def test_resume_on_another_topology(files, before, after, shuffle):
    paths, indexes, ids = files
    make = factory(paths, indexes, batch_size=3, **shuffle)
    reference, _ = lockstep(make, 1, 1)
    for steps in (0, 1, 2, 5):
        head, state = lockstep(make, *before, steps=steps)
        rest, _ = lockstep(make, *after, state=state)
        assert head + rest == reference, steps
        assert Counter(head + rest) == Counter(ids)


def test_resume_after_a_batch_size_change(files):
    paths, indexes, ids = files
    reference, _ = lockstep(factory(paths, indexes, shuffle_queue_size=11, shuffle_block=5), 1, 1)
    for first, second in [(3, 5), (8, 1), (None, 4), (4, None)]:
        head, state = lockstep(
            factory(paths, indexes, batch_size=first, shuffle_queue_size=11, shuffle_block=5), 2, 2, 3
        )
        rest, _ = lockstep(
            factory(paths, indexes, batch_size=second, shuffle_queue_size=11, shuffle_block=5), 3, 1, state=state
        )
        assert head + rest == reference, (first, second)


@pytest.mark.parametrize("infinite", [False, True])
def test_weighted_mix_resumes_on_another_topology(splits, infinite):
    data, index = splits

    def make(batch=2, **where):
        return MultiTFRecordDataset(
            data,
            index,
            {"a": 0.5, "b": 0.3, "c": 0.2},
            ["id"],
            shuffle_queue_size=6,
            infinite=infinite,
            seed=3,
            batch_size=batch,
            elastic=True,
            shuffle_block=3,
            **where,
        )

    reference, _ = lockstep(make, 1, 1, steps=None if not infinite else 150)
    if not infinite:
        assert len(reference) == 85 and len(set(reference)) == 85  # every record of every split once
    else:
        assert Counter(i // 1000 for i in reference).keys() == {0, 1, 5}
    spread, _ = lockstep(make, 3, 2, steps=None if not infinite else 25)
    assert spread == reference[: len(spread)] and len(spread) == (150 if infinite else 85)
    for before, after in [((2, 4), (4, 1)), ((2, 2), (3, 2)), ((1, 2), (3, 1))]:
        head, state = lockstep(make, *before, steps=3)
        rest, _ = lockstep(lambda **w: make(batch=3, **w), *after, steps=None if not infinite else 10, state=state)
        assert head + rest == reference[: len(head + rest)], (before, after)
        if not infinite:
            assert len(head + rest) == len(reference)


def test_mix_is_in_proportion_and_a_function_of_the_seed():
    sizes = [10_000, 10_000, 10_000]
    mix = Mix([0.6, 0.3, 0.1], sizes, True, 5, 0)
    sources, indices, taken = mix.walk(0, [0, 0, 0], 30_000)
    shares = np.bincount(sources, minlength=3) / 30_000
    assert np.allclose(shares, [0.6, 0.3, 0.1], atol=0.02)
    again = Mix([0.6, 0.3, 0.1], sizes, True, 5, 0)
    head = again.walk(0, [0, 0, 0], 12_345)
    tail = again.walk(12_345, head[2], 30_000)
    assert np.array_equal(np.concatenate([head[0], tail[0]]), sources)  # addressable from any position
    assert np.array_equal(np.concatenate([head[1], tail[1]]), indices)
    assert tail[2] == taken
    finite = Mix([0.9, 0.1, 0.0], [50, 500, 7], False, 5, 0)
    assert finite.total == 550  # weight 0: never drawn
    s, i, t = finite.walk(0, [0, 0, 0], 10_000)
    assert len(s) == 550 and t == [50, 500, 0]
    for c, n in [(0, 50), (1, 500)]:
        assert sorted(i[s == c].tolist()) == list(range(n))  # each record once, in order within the source


def test_source_order_is_a_permutation_keeping_blocks():
    order = SourceOrder([10, 0, 7, 25], True, 4, 0, 1, 2, 3)
    records = order.records(0, np.arange(42))
    assert sorted(records.tolist()) == list(range(42))
    file_of, number = order.locate(records)
    p = 0
    while p < len(records):  # whole blocks of 4 contiguous records of one file, in some order
        assert number[p] % 4 == 0, p
        length = min(4, int(order.counts[file_of[p]] - number[p]))
        assert records[p : p + length].tolist() == list(range(records[p], records[p] + length))
        p += length
    assert not np.array_equal(order.records(1, np.arange(42)), records)  # a new pass, a new order
    windowed = SourceOrder([10, 0, 7, 25], True, 4, 8, 1, 2, 3)
    got = windowed.records(0, np.arange(42))
    assert sorted(got.tolist()) == list(range(42))
    for k in range(0, 42, 8):  # a window permutes the block order's positions among themselves
        assert sorted(got[k : k + 8].tolist()) == sorted(records[k : k + 8].tolist())


def test_lanes_share_every_slot_once():
    for ranks, workers, unit, n in [(2, 3, 4, 50), (3, 1, 1, 7), (4, 2, 5, 3)]:
        owned = []
        for r in range(ranks):
            for w in range(workers):
                lane = Lane(r, ranks, w, workers, unit)
                owned += [lane.slot(j) for j in range(lane.slots_in(n) or 0)]
        assert sorted(owned) == list(range(-(-n // unit)))
