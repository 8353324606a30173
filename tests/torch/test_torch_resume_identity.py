"""Issue 34 item 3: a state loads only into a dataset whose records and order its position
means (`torch/_identity.py`), on the per-shard path as on the elastic one.

A state saved with one `shuffle_queue_size` (or seed, weights, ...) and loaded into a dataset
with another resumed silently and lost about as many records as it repeated. Every parameter
of the order is now refused by name with both values, whichever dataset, path and loader; the
same parameters resume exactly, and so do the ones positions do not depend on."""

from __future__ import annotations

import itertools
import pickle
import re
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from helpers.torch_data import ids_of, write_files  # noqa: E402

from tfrecord_beam.torch import MultiTFRecordDataset, TFRecordDataset  # noqa: E402

ENTRIES = [
    "files",
    "indexes",
    "compression",
    "seed",
    "shuffle_queue_size",
    "shuffle_block",
    "weights",
    "infinite",
    "skip_corrupt",
    "elastic",
]
LAYOUT = [(f"q{k}.tfrecord", n, True) for k, n in enumerate([70, 55, 0, 64, 51])]  # 240 records


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("identity"), LAYOUT)


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity_splits")
    write_files(root / "a", LAYOUT[:2], first_id=0)  # 125 records
    write_files(root / "b", LAYOUT[3:], first_id=1000)  # 115 records
    return str(root / "{}" / "*.tfrecord"), str(root / "{}" / "*.tfindex")


def _single(data, **kw):
    paths, indexes, _ = data
    index = kw.pop("index", True)
    drop = kw.pop("drop_file", False)
    if drop:
        paths, indexes = paths[:-1], indexes[:-1]
    return TFRecordDataset(paths, indexes if index else None, ["id"], **kw)


def _multi(splits, **kw):
    data, index = splits
    weights = kw.pop("mix", {"a": 0.5, "b": 0.5})
    return MultiTFRecordDataset(data, index, weights, ["id"], **kw)


def _halves(saved, loaded, cut):
    """Ids handed out by `saved` up to a state taken after `cut` items, then by `loaded`
    resumed from that state to the end of the epoch (finite datasets only)."""
    first = saved()
    head = ids_of(itertools.islice(first.iter_worker(0, 1), cut))
    state = pickle.loads(pickle.dumps(first.state_dict()))  # as saved with a checkpoint
    second = loaded()
    second.load_state_dict(state)
    return head, ids_of(second.iter_worker(0, 1))


def _named(message: str):
    """The identity entries a refusal names."""
    return {name for name in ENTRIES if re.search(rf"\b{name}=.* when saved, {name}=", message)}


# -- the reported loss -----------------------------------------------------------------------


@pytest.mark.parametrize("after", [32, None, 0])
@pytest.mark.parametrize("batch", [None, 8])
def test_a_changed_shuffle_queue_size_resumes_exactly_or_is_refused(data, after, batch):
    """The report: 64 -> 32 (or None) loaded silently and lost ~as many records as it
    repeated. Every record exactly once across both halves, or a refusal naming both sizes."""
    _, _, ids = data

    def make(queue):
        return lambda: _single(data, shuffle_queue_size=queue, seed=3, batch_size=batch)

    try:
        head, rest = _halves(make(64), make(after), 12 if batch else 100)
    except ValueError as error:
        assert _named(str(error)) == {"shuffle_queue_size"}, error
        assert f"shuffle_queue_size=64 when saved, shuffle_queue_size={after or None} now" in str(error)
    else:
        assert Counter(head + rest) == Counter(ids)


def test_a_parameter_changed_on_the_dataset_after_construction_counts(data):
    """The identity is taken from the attributes when a state is saved or loaded, not kept
    from construction: `ds.shuffle_queue_size = 32` is the same change."""
    first = _single(data, shuffle_queue_size=64, seed=3)
    list(itertools.islice(first.iter_worker(0, 1), 50))
    state = first.state_dict()
    second = _single(data, shuffle_queue_size=64, seed=3)
    second.load_state_dict(state)  # builds (and keeps) the identity of 64
    second.shuffle_queue_size = 32
    with pytest.raises(ValueError, match="shuffle_queue_size=64 when saved, shuffle_queue_size=32 now"):
        second.load_state_dict(state)
    second.shuffle_queue_size, second.seed = 64, 4
    with pytest.raises(ValueError, match="seed=3 when saved, seed=4 now"):
        second.load_state_dict(state)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_a_changed_shuffle_queue_size_is_refused_through_a_stateful_dataloader(data):
    """With DataLoader workers the state is each worker's, loaded in the worker: refused there."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader(queue):
        ds = _single(data, shuffle_queue_size=queue, seed=3, batch_size=8)
        return stateful.StatefulDataLoader(ds, batch_size=None, num_workers=2)

    first = loader(64)
    it = iter(first)
    head = ids_of(next(it) for _ in range(5))
    state = first.state_dict()
    del it
    same = loader(64)
    same.load_state_dict(state)
    assert Counter(head + ids_of(same)) == Counter(data[2])  # the same parameters: every record once
    other = loader(32)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle_queue_size=64 when saved, shuffle_queue_size=32 now"):
        list(other)


# -- every parameter of the order, refused by name -------------------------------------------

PER_SHARD_SINGLE = [
    ("shuffle 64->32", dict(shuffle_queue_size=64), dict(shuffle_queue_size=32), {"shuffle_queue_size"}),
    ("shuffle 64->None", dict(shuffle_queue_size=64), dict(shuffle_queue_size=None), {"shuffle_queue_size"}),
    ("shuffle None->16", dict(), dict(shuffle_queue_size=16), {"shuffle_queue_size"}),
    ("seed", dict(shuffle_queue_size=16, seed=1), dict(shuffle_queue_size=16, seed=2), {"seed"}),
    ("skip_corrupt", dict(), dict(skip_corrupt=True), {"skip_corrupt"}),
    ("index use", dict(), dict(index=False), {"indexes"}),
    ("a file fewer", dict(), dict(drop_file=True), {"files", "indexes"}),
    ("elastic", dict(), dict(elastic=True), {"elastic"}),
    ("two at once", dict(shuffle_queue_size=8, seed=1), dict(seed=2), {"shuffle_queue_size", "seed"}),
]
ELASTIC_SINGLE = [
    ("shuffle 16->8", dict(shuffle_queue_size=16), dict(shuffle_queue_size=8), {"shuffle_queue_size"}),
    ("shuffle 16->None", dict(shuffle_queue_size=16), dict(), {"shuffle_queue_size", "shuffle_block"}),
    (
        "shuffle_block",
        dict(shuffle_queue_size=16, shuffle_block=4),
        dict(shuffle_queue_size=16, shuffle_block=8),
        {"shuffle_block"},
    ),
    ("seed", dict(seed=1), dict(seed=2), {"seed"}),
    ("skip_corrupt", dict(), dict(skip_corrupt=True), {"skip_corrupt"}),
    ("a file fewer", dict(), dict(drop_file=True), {"files", "indexes"}),
    ("not elastic", dict(), dict(elastic=False), {"elastic"}),
]
MULTI = [
    ("weights", dict(), dict(mix={"a": 0.7, "b": 0.3}), {"weights"}),
    ("splits swapped", dict(), dict(mix={"b": 0.5, "a": 0.5}), {"files", "indexes", "weights"}),
    ("infinite", dict(infinite=False), dict(infinite=True), {"infinite"}),
    ("shuffle", dict(shuffle_queue_size=16), dict(shuffle_queue_size=4), {"shuffle_queue_size"}),
    ("seed", dict(seed=1), dict(seed=2), {"seed"}),
]
CASES = (
    [pytest.param("single", False, *c[1:], id=f"per-shard-{c[0]}") for c in PER_SHARD_SINGLE]
    + [pytest.param("single", True, *c[1:], id=f"elastic-{c[0]}") for c in ELASTIC_SINGLE]
    + [pytest.param("multi", False, *c[1:], id=f"multi-per-shard-{c[0]}") for c in MULTI]
    + [pytest.param("multi", True, *c[1:], id=f"multi-elastic-{c[0]}") for c in MULTI]
)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("kind, elastic, before, after, named", CASES)
def test_each_parameter_of_the_order_is_refused_by_name(data, splits, kind, elastic, before, after, named, workers):
    """One process's state, or (workers=2) DataLoader workers' states: each worker's own on the
    per-shard path (loaded in the worker), the list of a rank's workers with elastic=True."""

    def make(kw):
        kw = dict(dict(elastic=elastic, infinite=False) if kind == "multi" else dict(elastic=elastic), **kw)
        return lambda: _single(data, **kw) if kind == "single" else _multi(splits, **kw)

    states = []
    for worker in range(workers):  # each worker has its own copy of the dataset, as DataLoader workers do
        copy = make(before)()
        list(itertools.islice(copy.iter_worker(worker, workers), 15))
        states.append(pickle.loads(pickle.dumps(copy.state_dict())))
    # a list of worker states goes into an elastic dataset only (a plain one says so: tested apart)
    state = states if elastic and after.get("elastic", True) and workers > 1 else states[-1]
    with pytest.raises(ValueError) as refused:
        make(after)().load_state_dict(state)
    assert _named(str(refused.value)) == named, refused.value
    make(before)().load_state_dict(state)  # the same parameters load


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_an_elastic_loader_state_of_another_order_is_refused_by_name(data):
    """Elastic with workers: the StatefulDataLoader's whole state goes into the dataset."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    ds = _single(data, elastic=True, shuffle_queue_size=16, batch_size=4)
    first = stateful.StatefulDataLoader(ds, batch_size=None, num_workers=2)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    del it
    with pytest.raises(ValueError, match="shuffle_queue_size=16 when saved, shuffle_queue_size=32 now"):
        _single(data, elastic=True, shuffle_queue_size=32, batch_size=4).load_state_dict(state)
    _single(data, elastic=True, shuffle_queue_size=16, batch_size=8).load_state_dict(state)  # batch: any


def test_another_rank_or_world_size_is_refused_on_the_per_shard_path(data):
    """The topology is checked where the workers are known: the first iteration."""
    first = _single(data, shuffle_queue_size=16, rank=1, world_size=2)
    list(itertools.islice(first.iter_worker(0, 1), 10))
    state = first.state_dict()
    for where in (dict(rank=0, world_size=2), dict(rank=1, world_size=3)):
        other = _single(data, shuffle_queue_size=16, **where)
        other.load_state_dict(state)
        with pytest.raises(ValueError, match=r"saved by rank 1/2, worker 0/1 but is loaded into rank"):
            next(other.iter_worker(0, 1))


# -- what still resumes exactly --------------------------------------------------------------

SAME = [
    pytest.param("single", dict(), id="per-shard-in-order"),
    pytest.param("single", dict(shuffle_queue_size=64, seed=3), id="per-shard-shuffled"),
    pytest.param("single", dict(shuffle_queue_size=64, index=False), id="per-shard-unindexed"),
    pytest.param("single", dict(shuffle_queue_size=16, elastic=True), id="elastic-shuffled"),
    pytest.param("multi", dict(shuffle_queue_size=8, infinite=False), id="multi-per-shard"),
    pytest.param("multi", dict(shuffle_queue_size=8, infinite=False, elastic=True), id="multi-elastic"),
]


@pytest.mark.parametrize("kind, kw", SAME)
def test_the_same_parameters_resume_exactly(data, splits, kind, kw):
    def make():
        return _single(data, **kw) if kind == "single" else _multi(splits, **kw)

    full = ids_of(make().iter_worker(0, 1))
    assert Counter(full) == Counter(data[2] if kind == "single" else [*range(125), *range(1000, 1115)])
    for cut in (1, 77, 239):
        head, rest = _halves(make, make, cut)
        assert head + rest == full, cut


@pytest.mark.parametrize("elastic", [False, True])
def test_another_batch_size_resumes_exactly(data, elastic):
    """Positions count records, not batches: the batch size is not part of the identity."""

    def make(batch):
        return lambda: _single(data, shuffle_queue_size=32, seed=5, batch_size=batch, elastic=elastic)

    full = ids_of(make(None)().iter_worker(0, 1))
    head, rest = _halves(make(8), make(5), 6)
    assert head + rest == full


def test_the_same_files_elsewhere_and_an_explicit_codec_resume(tmp_path):
    """The identity does not refuse what does not change the records: a copy of the files in
    another directory, or `compression_type` naming the codec the file names already give."""
    paths, _, ids = write_files(tmp_path / "here", [("z0.tfrecord.gz", 30, False), ("z1.tfrecord.gz", 20, False)])
    copies, _, _ = write_files(tmp_path / "there", [("z0.tfrecord.gz", 30, False), ("z1.tfrecord.gz", 20, False)])

    def make(where, codec):
        return lambda: TFRecordDataset(where, None, ["id"], shuffle_queue_size=8, compression_type=codec, seed=1)

    head, rest = _halves(make(paths, None), make(copies, "gzip"), 17)
    assert Counter(head + rest) == Counter(ids)


# -- states saved by the previous version ----------------------------------------------------


def _v1_order(counts, queue, block, weights, infinite):
    """The elastic order digest version-1 states saved (the previous `_identity.order_id`, verbatim)."""
    import hashlib

    parts = (
        [list(c) for c in counts],
        queue,
        block if queue else 0,
        None if weights is None else [float(w) for w in weights],
        bool(infinite),
    )
    return [[sum(c) for c in counts], hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()]


def _as_v1(state, order=None):
    """`state` as the previous version wrote it: version 1, `files`, no identity (elastic: `order`)."""
    old = pickle.loads(pickle.dumps(state))
    identity = old.pop("identity")
    old.update(version=1, files=identity["files"], seed=identity["seed"])
    if order is not None:
        old["elastic"]["order"] = order
    return old


def test_a_per_shard_state_of_the_previous_version_is_refused_saying_why(data):
    first = _single(data, shuffle_queue_size=64)
    list(itertools.islice(first.iter_worker(0, 1), 20))
    old = _as_v1(first.state_dict())
    with pytest.raises(ValueError, match=r"state version 1.*does not record shuffle_queue_size"):
        _single(data, shuffle_queue_size=64).load_state_dict(old)


def test_an_elastic_state_of_the_previous_version_resumes_when_its_order_is_provably_the_same(data):
    counts = [[n for _, n, _ in LAYOUT]]

    def make(queue):
        return lambda: _single(data, elastic=True, shuffle_queue_size=queue, shuffle_block=4, seed=2)

    full = ids_of(make(16)().iter_worker(0, 1))
    first = make(16)()
    head = ids_of(itertools.islice(first.iter_worker(0, 1), 50))
    old = _as_v1(first.state_dict(), _v1_order(counts, 16, 4, None, False))
    resumed = make(16)()
    resumed.load_state_dict(old)
    assert resumed.state_dict()["version"] == 2 and "order" not in resumed.state_dict()["elastic"]  # saved anew
    assert head + ids_of(resumed.iter_worker(0, 1)) == full
    with pytest.raises(ValueError, match=r"state version 1\) over another order"):
        make(8)().load_state_dict(old)
    with pytest.raises(ValueError, match=r"state version 1\) over another order"):  # the digest of another order
        make(16)().load_state_dict(_as_v1(first.state_dict(), _v1_order(counts, 8, 4, None, False)))
