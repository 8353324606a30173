"""elastic=True: one global order per epoch whatever the ranks x workers, and a state taken at
one topology (and batch size) that resumes at another with every remaining record exactly once,
in the order an uninterrupted run would have delivered them."""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# ---------------------------------------------------------------------------------------------
# Real DataLoader workers


def _loaders(make, ranks, workers, state=None, stateful=True, **kw):
    from torchdata.stateful_dataloader import StatefulDataLoader

    datasets = [make(rank=r, world_size=ranks, **kw) for r in range(ranks)]
    if state is not None:
        for ds in datasets:
            ds.load_state_dict(state)
    cls = StatefulDataLoader if stateful else torch.utils.data.DataLoader
    return datasets, [cls(ds, batch_size=None, num_workers=workers) for ds in datasets]


def _steps(iterators, steps=None):
    """Ids of `steps` lockstep steps (None: to the end) over the ranks' loader iterators."""
    out, step = [], 0
    while steps is None or step < steps:
        got = False
        for it in iterators:
            item = next(it, None)
            if item is not None:
                out.extend(ids_of([item]))
                got = True
        if not got:
            break
        step += 1
    return out


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("before,after", [((2, 2), (2, 3)), ((1, 2), (1, 3)), ((2, 4), (1, 4))])
def test_stateful_dataloader_resumes_on_other_ranks_and_workers(files, before, after):
    pytest.importorskip("torchdata.stateful_dataloader")
    paths, indexes, ids = files
    make = factory(paths, indexes, batch_size=3, shuffle_queue_size=9, shuffle_block=4)
    reference, _ = lockstep(make, 1, 1)
    _, loaders = _loaders(make, *before)
    iterators = [iter(loader) for loader in loaders]
    head = _steps(iterators, 3)
    state = pickle.loads(pickle.dumps(loaders[0].state_dict()))
    del iterators, loaders
    _, loaders = _loaders(make, *after, state=state)
    rest = _steps([iter(loader) for loader in loaders])
    assert head + rest == reference
    assert Counter(head + rest) == Counter(ids)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_stateful_dataloader_chain_with_records_and_a_batch_size_change(files):
    """Records batched by the DataLoader (slot_size = its batch_size), resumed twice: 2 workers,
    then 3 with dataset batches of 5, then none."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    paths, indexes, _ = files
    reference, _ = lockstep(factory(paths, indexes, shuffle_queue_size=9, shuffle_block=4), 1, 1)
    first = factory(paths, indexes, shuffle_queue_size=9, shuffle_block=4, slot_size=4)()
    loader = StatefulDataLoader(first, batch_size=4, num_workers=2)
    it = iter(loader)
    head = ids_of([next(it) for _ in range(5)])
    state = loader.state_dict()
    del it
    second = factory(paths, indexes, shuffle_queue_size=9, shuffle_block=4, batch_size=5)()
    second.load_state_dict(state)
    loader = StatefulDataLoader(second, batch_size=None, num_workers=3)
    it = iter(loader)
    middle = ids_of([next(it) for _ in range(4)])
    state = loader.state_dict()
    del it
    third = factory(paths, indexes, shuffle_queue_size=9, shuffle_block=4)()
    third.load_state_dict(state)
    assert head + middle + ids_of(third) == reference


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_stateful_dataloader_same_workers_through_the_loader(files):
    """The loader's own load_state_dict (same workers): each worker resumes its own share."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    paths, indexes, _ = files
    make = factory(paths, indexes, batch_size=2, shuffle_queue_size=5)
    reference, _ = lockstep(make, 1, 1)
    loader = StatefulDataLoader(make(), batch_size=None, num_workers=2)
    it = iter(loader)
    head = ids_of([next(it) for _ in range(7)])
    state = loader.state_dict()
    del it
    again = StatefulDataLoader(make(), batch_size=None, num_workers=2)
    again.load_state_dict(state)
    assert head + ids_of(again) == reference


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_plain_dataloader_counts_its_batches(files):
    paths, indexes, _ = files
    make = factory(paths, indexes, batch_size=4, shuffle_queue_size=9, shuffle_block=4)
    reference, _ = lockstep(make, 1, 1)
    datasets, loaders = _loaders(make, 2, 2, stateful=False)
    iterators = [iter(loader) for loader in loaders]
    head = _steps(iterators, 3)
    state = datasets[1].state_after(3)  # any rank: each has handed out 3 batches
    assert state == datasets[0].state_after(3) and state["elastic"]["start"] == 3 * 2 * 4
    del iterators
    _, loaders = _loaders(make, 3, 2, state=state, stateful=False)
    assert head + _steps([iter(loader) for loader in loaders]) == reference


# ---------------------------------------------------------------------------------------------
# What it needs, and wrong states


def test_block_gzip_files_take_part(tmp_path):
    from helpers.torch_data import payload

    from tfrecord_beam import index
    from tfrecord_beam.records import RecordWriter

    paths, indexes = [], []
    for name, ids in [("a.tfrecord.gz", range(0, 120)), ("b.tfrecord.gz", range(120, 150))]:
        with RecordWriter(str(tmp_path / name), index_path=True, block_bytes=2048) as writer:
            writer.write_many([payload(i) for i in ids])
        paths.append(str(tmp_path / name))
        indexes.append(index.default_index_path(paths[-1]))
    make = factory(paths, indexes, batch_size=4, shuffle_queue_size=16, shuffle_block=8)
    reference, _ = lockstep(make, 1, 1)
    assert sorted(reference) == list(range(150))
    head, state = lockstep(make, 2, 2, steps=4)
    assert head + lockstep(make, 3, 1, state=state)[0] == reference


def test_files_without_what_the_order_needs_are_refused(tmp_path, files):
    paths, indexes, _ = files
    plain, _, _ = write_files(tmp_path / "plain", [("u.tfrecord", 5, False)])
    with pytest.raises(ValueError, match=r"u\.tfrecord: elastic=True needs an index"):
        TFRecordDataset([paths[0], plain[0]], [indexes[0], None], elastic=True)
    gz, gz_index, _ = write_files(tmp_path / "gz", [("z.tfrecord.gz", 5, True)])
    with pytest.raises(ValueError, match=r"z\.tfrecord\.gz: .*compressed without a gzip member table"):
        TFRecordDataset(gz, gz_index, elastic=True)
    TFRecordDataset(plain, None)  # without elastic=True nothing changes: read as before


def test_wrong_states_are_refused(files):
    paths, indexes, _ = files
    make = factory(paths, indexes, batch_size=2)
    _, worker_states = lockstep(make, 1, 2, steps=3)
    with pytest.raises(ValueError, match="elastic=False"):
        TFRecordDataset(paths, indexes, seed=7).load_state_dict(worker_states[0])
    with pytest.raises(ValueError, match="elastic=True"):
        make().load_state_dict(TFRecordDataset(paths, indexes, seed=7).state_dict())
    with pytest.raises(ValueError, match="seed"):
        TFRecordDataset(paths, indexes, elastic=True, seed=8).load_state_dict(worker_states)
    one = make()
    one.load_state_dict(worker_states[0])  # one worker's state: only for that worker of that topology
    with pytest.raises(ValueError, match="whole state_dict"):
        next(one.iter_worker(0, 3))
    with pytest.raises(ValueError, match="all of its 2 DataLoader workers"):
        make().load_state_dict(worker_states[:1])
    skewed = [dict(worker_states[0]), dict(worker_states[1])]
    skewed[1] = pickle.loads(pickle.dumps(skewed[1]))
    skewed[1]["elastic"]["consumed"] += 4  # worker 1 two items ahead: no in-order loader does that
    with pytest.raises(ValueError, match="in-order DataLoader"):
        make().load_state_dict(skewed)
    with pytest.raises(ValueError, match="slot_size"):
        TFRecordDataset(paths, indexes, elastic=True, batch_size=2, slot_size=2)


def test_state_is_small_and_a_finished_epoch_resumes_to_nothing(files):
    paths, indexes, ids = files
    make = factory(paths, indexes, batch_size=5, shuffle_queue_size=9)
    _, states = lockstep(make, 2, 1, steps=2)
    ds = make(rank=0, world_size=2)
    ds.load_state_dict(states)
    assert len(pickle.dumps(ds.state_dict())) < 600  # positions and the identity's few entries per source
    assert ds.state_dict()["elastic"]["start"] == 2 * 2 * 5
    _, states = lockstep(make, 2, 3)
    assert lockstep(make, 4, 1, state=states)[0] == []
    nxt = make()
    nxt.load_state_dict(states)
    nxt.set_epoch(1)  # a new epoch: the saved position belongs to epoch 0
    assert sorted(ids_of(nxt)) == sorted(ids)


# ---------------------------------------------------------------------------------------------
# Property: any topology, any cut, any new topology and batch size

_REFERENCES: Dict[Any, List[int]] = {}


@given(
    before=st.tuples(st.integers(1, 4), st.integers(1, 4), st.sampled_from([None, 1, 2, 3, 7])),
    after=st.tuples(st.integers(1, 4), st.integers(1, 4), st.sampled_from([None, 1, 2, 5])),
    steps=st.integers(0, 12),
    shuffle=st.sampled_from([None, 1, 6, 40]),
    weighted=st.booleans(),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_resume_delivers_the_uninterrupted_order(files, splits, before, after, steps, shuffle, weighted):
    paths, indexes, _ = files
    data, index = splits

    def maker(batch):
        def make(**where):
            common = dict(shuffle_queue_size=shuffle, seed=4, batch_size=batch, elastic=True, shuffle_block=3)
            if weighted:
                return MultiTFRecordDataset(
                    data, index, {"a": 2, "b": 1, "c": 1}, ["id"], infinite=False, **common, **where
                )
            return TFRecordDataset(paths, indexes, ["id"], **common, **where)

        return make

    key = (shuffle, weighted)
    if key not in _REFERENCES:
        _REFERENCES[key] = lockstep(maker(None), 1, 1)[0]
    reference = _REFERENCES[key]
    head, state = lockstep(maker(before[2]), before[0], before[1], steps=steps)
    rest, _ = lockstep(maker(after[2]), after[0], after[1], state=state)
    assert head + rest == reference
    assert len(set(reference)) == len(reference) == (85 if weighted else 87)


def test_corrupt_records_keep_their_place_in_the_order(tmp_path):
    """skip_corrupt: a corrupt record's position is consumed without a record; the others keep
    their places (and without skip_corrupt it raises, naming the record)."""
    from tfrecord_beam.errors import CorruptRecordError
    from tfrecord_beam.index import load_index

    paths, indexes, ids = write_files(tmp_path, LAYOUT)
    offset, length = (int(v) for v in load_index(indexes[0])[5])
    with open(paths[0], "r+b") as f:  # flip a payload byte of record 5 of the first file (id 5)
        f.seek(offset + 12 + 3)
        byte = f.read(1)
        f.seek(offset + 12 + 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    make = factory(paths, indexes, batch_size=3, shuffle_queue_size=9, shuffle_block=4, skip_corrupt=True)
    reference, _ = lockstep(make, 1, 1)
    assert sorted(reference) == sorted(set(ids) - {5})
    head, state = lockstep(make, 2, 2, steps=4)
    assert head + lockstep(make, 3, 1, state=state)[0] == reference
    with pytest.raises(CorruptRecordError, match="e0.tfrecord"):
        lockstep(factory(paths, indexes, batch_size=3), 1, 1)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_stateful_dataloader_snapshots_every_few_steps(files):
    """snapshot_every_n_steps=3: the items handed out since the last snapshot count too."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    paths, indexes, _ = files
    make = factory(paths, indexes, batch_size=2, shuffle_queue_size=9, shuffle_block=4)
    reference, _ = lockstep(make, 1, 1)
    loader = StatefulDataLoader(make(), batch_size=None, num_workers=2, snapshot_every_n_steps=3)
    it = iter(loader)
    head = ids_of([next(it) for _ in range(5)])
    state = loader.state_dict()
    assert state["_steps_since_snapshot"] == 2
    del it
    ds = make()
    ds.load_state_dict(state)
    assert head + ids_of(ds) == reference
