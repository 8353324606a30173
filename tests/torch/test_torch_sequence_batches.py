"""TFRecordDataset(sequence_description=..., batch_size=N): SequenceExample batches.

Every batch row is checked against the per-record decoder (`decode_sequence_example`), found
by the record's context `id`, so the same check holds for shuffled, sharded, multi-worker
and resumed runs; with the compiled core and with its pure-Python twins.
"""

from __future__ import annotations

import copy
import itertools
import os
import pickle
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import zygote  # noqa: E402
from helpers.fixtures import FIXTURES, REPO, TESTS  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tfrecord_beam import _engine  # noqa: E402
from tfrecord_beam._engine import _decode, _encode, _framing, _rows  # noqa: E402
from tfrecord_beam.errors import FeatureKindError  # noqa: E402
from tfrecord_beam.example import decode_sequence_example, encode_sequence_example, normalize_description  # noqa: E402
from tfrecord_beam.index import create_index  # noqa: E402
from tfrecord_beam.records import write_records  # noqa: E402
from tfrecord_beam.torch import MultiTFRecordDataset, SequenceBatch, TFRecordDataset  # noqa: E402

# these tests describe features absent from their files on purpose (they must decode as missing);
# the warning that names such features is tested in test_described_features and test_torch_sample_collate
pytestmark = pytest.mark.filterwarnings("ignore::tfrecord_beam._described.FeatureNameWarning")

CONTEXT = {"id": "int", "label": "float", "name": "byte", "tags": "byte"}
LISTS = {"tokens": "int", "weights": "float", "words": "byte", "nowhere": "float", "nothing": "byte"}


# -- data ------------------------------------------------------------------------------------


def seq_payload(uid: int) -> bytes:
    """A SequenceExample with ragged steps, empty steps, empty and missing lists, bytes lists."""
    rng = np.random.default_rng(uid)
    context: Dict[str, Any] = {
        "id": ([uid], "int"),
        "label": (rng.random(uid % 3).astype(np.float32), "float"),
        "name": (b"r%d" % uid, "byte"),
        "tags": ([b"t%d" % k for k in range(uid % 3)], "byte"),
    }
    lists: Dict[str, Any] = {
        # uid % 4 steps (0: present but empty), steps of 0-3 values (some empty)
        "tokens": ([list(rng.integers(-5, 1000, (uid + t) % 4)) for t in range(uid % 4)], "int"),
        "words": (
            [
                [bytes(rng.integers(0, 256, (uid + k) % 4, dtype=np.uint8)) for k in range((uid + t) % 3)]
                for t in range((uid * 7) % 5)
            ],
            "byte",
        ),
    }
    if uid % 3:  # missing in every third record
        lists["weights"] = (
            [rng.standard_normal((uid + 2 * t) % 3).astype(np.float32) for t in range(uid % 5)],
            "float",
        )
    if uid % 5 == 0:
        del lists["words"]
    return encode_sequence_example(context, lists)


def write_seq_files(root: Path, layout, first_id: int = 0):
    """Files named in `layout` as (name, record count, indexed) -> (paths, index paths, {id: payload})."""
    root.mkdir(parents=True, exist_ok=True)
    paths, indexes, payloads = [], [], {}
    uid = first_id
    for name, count, indexed in layout:
        path = str(root / name)
        batch = {i: seq_payload(i) for i in range(uid, uid + count)}
        uid += count
        write_records(path, list(batch.values()))
        if indexed:
            create_index(path, path + ".tfindex")
        paths.append(path)
        indexes.append(path + ".tfindex" if indexed else None)
        payloads.update(batch)
    return paths, indexes, payloads


LAYOUT = [
    ("a.tfrecord", 29, True),
    ("b.tfrecord", 4, False),
    ("c.tfrecord.gz", 17, False),
    ("d.tfrecord", 0, True),
    ("e.tfrecord", 13, True),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_seq_files(tmp_path_factory.mktemp("seq"), LAYOUT)


@pytest.fixture(params=["default", "pure"])
def engine(request, monkeypatch):
    """Run with the default engine (compiled where built) and with the pure-Python twins."""
    if request.param == "pure":
        for mod, names in (
            (_framing, ("scan_frames", "frame_records", "masked_crc32c")),
            (_decode, ("decode_examples", "decode_sequence_examples")),
            (_encode, ("encode_examples",)),
            (_rows, ("example_rows", "decode_example_rows", "sequence_rows")),
        ):
            for name in names:
                monkeypatch.setattr(_engine, name, getattr(mod, name))
    return request.param


# -- the check -------------------------------------------------------------------------------


def _check_context(context, refs: List[Dict[str, Any]], names: List[str]) -> None:
    """Context features laid out exactly as Example batches: padded [B, L] + lengths, bytes rows."""
    for name in names:
        got = context[name]
        if isinstance(got, np.ndarray):  # bytes: `bytes` for one value, else a list
            assert got.dtype == object and got.shape == (len(refs),)
            for row, ref in zip(got.tolist(), refs):
                value = ref.get(name)
                if isinstance(value, bytes):
                    assert row == value
                else:
                    assert isinstance(row, list) and row == ([] if value is None else list(value))
            continue
        lengths = context[name + "_lengths"].numpy()
        dense = got.numpy()
        want_len = [0 if r.get(name) is None else len(r[name]) for r in refs]
        assert lengths.tolist() == want_len and dense.shape == (len(refs), max(want_len, default=0))
        for i, ref in enumerate(refs):
            want = np.zeros(dense.shape[1], dense.dtype)
            want[: want_len[i]] = ref.get(name, [])
            np.testing.assert_array_equal(dense[i], want)


def _check_lists(sequences, refs: List[Dict[str, Any]], names: List[str]) -> None:
    """Numeric lists: [B, T, L] + steps [B] + lengths [B, T]; bytes lists: nested lists."""
    for name in names:
        got = sequences[name]
        # a missing list has no steps; a kind-less step (None when undescribed) has no values
        steps_of = [[[] if v is None else v for v in ref.get(name, [])] for ref in refs]
        if isinstance(got, np.ndarray):
            assert got.dtype == object and got.shape == (len(refs),) and name + "_steps" not in sequences
            for row, steps in zip(got.tolist(), steps_of):
                assert isinstance(row, list)
                assert row == [s if isinstance(s, bytes) else list(s) for s in steps]
            continue
        steps = sequences[name + "_steps"].numpy()
        lengths = sequences[name + "_lengths"].numpy()
        dense = got.numpy()
        most = max((len(s) for s in steps_of), default=0)
        longest = max((len(v) for s in steps_of for v in s), default=0)
        assert steps.dtype == lengths.dtype == np.int64
        assert steps.tolist() == [len(s) for s in steps_of]
        assert dense.shape == (len(refs), most, longest) and lengths.shape == (len(refs), most)
        for i, record_steps in enumerate(steps_of):
            want = np.zeros((most, longest), dense.dtype)
            want_lengths = np.zeros(most, np.int64)
            for t, values in enumerate(record_steps):
                want[t, : len(values)] = values
                want_lengths[t] = len(values)
                assert isinstance(values, list) or values.dtype == dense.dtype  # float32 / int64 as per record
            np.testing.assert_array_equal(dense[i], want)
            assert lengths[i].tolist() == want_lengths.tolist()


def check_batch(batch, payloads: List[bytes], description=CONTEXT, sequence_description=LISTS) -> None:
    """`batch` holds exactly what `decode_sequence_example` gives for `payloads`, row by row."""
    assert isinstance(batch, SequenceBatch) and isinstance(batch, tuple)
    context, sequences = batch
    decoded = [decode_sequence_example(p, description, sequence_description) for p in payloads]
    refs_c = [c for c, _ in decoded]
    refs_s = [s for _, s in decoded]
    desc = normalize_description(description)
    sdesc = normalize_description(sequence_description)
    cnames = list(desc) if desc is not None else list(dict.fromkeys(n for r in refs_c for n in r))
    snames = list(sdesc) if sdesc is not None else list(dict.fromkeys(n for r in refs_s for n in r))
    assert set(context) == {
        k for n in cnames for k in ([n] if isinstance(context[n], np.ndarray) else [n, n + "_lengths"])
    }
    assert set(sequences) == {
        k for n in snames for k in ([n] if isinstance(sequences[n], np.ndarray) else [n, n + "_steps", n + "_lengths"])
    }
    _check_context(context, refs_c, cnames)
    _check_lists(sequences, refs_s, snames)


def ids_in(batch) -> List[int]:
    return batch.context["id"][:, 0].tolist()


def check_all(batches, by_id: Dict[int, bytes], **descriptions) -> List[int]:
    """Check every batch against the per-record decode; the ids in order of appearance."""
    seen: List[int] = []
    for batch in batches:
        ids = ids_in(batch)
        check_batch(batch, [by_id[i] for i in ids], **descriptions)
        seen.extend(ids)
    return seen


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 3, 8, 64])
def test_batches_match_the_per_record_decode(files, engine, batch_size):
    paths, indexes, by_id = files
    ds = TFRecordDataset(paths, indexes, CONTEXT, sequence_description=LISTS, batch_size=batch_size)
    batches = list(ds)
    assert check_all(batches, by_id) == list(by_id)  # file order, each record once
    sizes = [len(ids_in(b)) for b in batches]
    assert sizes[:-1] == [batch_size] * (len(sizes) - 1) and 0 < sizes[-1] <= batch_size


def test_without_descriptions_every_feature_of_the_batch(files, engine):
    paths, indexes, by_id = files
    for description, sequence_description in [(None, []), ([], []), (["id"], []), (None, {"tokens": "int"})]:
        ds = TFRecordDataset(paths, indexes, description, sequence_description=sequence_description, batch_size=5)
        assert check_all(ds, by_id, description=description, sequence_description=sequence_description) == list(by_id)


def test_numeric_layout_by_hand(tmp_path, engine):
    path = str(tmp_path / "n.tfrecord")
    write_records(
        path,
        [
            encode_sequence_example({"id": ([0], "int")}, {"s": ([[1, 2, 3], [], [4]], "int")}),
            encode_sequence_example({"id": ([1], "int")}, {"s": ([[5]], "int")}),
            encode_sequence_example({"id": ([2], "int")}, {}),  # missing: 0 steps
            encode_sequence_example({"id": ([3], "int")}, {"s": ([], "int")}),  # present, 0 steps
        ],
    )
    ((context, seqs),) = TFRecordDataset(
        path, None, ["id"], sequence_description={"s": "int", "f": "float"}, batch_size=4
    )
    assert seqs["s"].dtype == torch.int64 and seqs["s"].tolist() == [
        [[1, 2, 3], [0, 0, 0], [4, 0, 0]],
        [[5, 0, 0], [0, 0, 0], [0, 0, 0]],
        [[0, 0, 0]] * 3,
        [[0, 0, 0]] * 3,
    ]
    assert seqs["s_steps"].tolist() == [3, 1, 0, 0]
    assert seqs["s_lengths"].tolist() == [[3, 0, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert seqs["f"].dtype == torch.float32 and tuple(seqs["f"].shape) == (4, 0, 0)  # described, in no record
    assert seqs["f_steps"].tolist() == [0] * 4 and tuple(seqs["f_lengths"].shape) == (4, 0)
    assert context["id"].tolist() == [[0], [1], [2], [3]]


def test_bytes_layout_by_hand(tmp_path, engine):
    path = str(tmp_path / "b.tfrecord")
    write_records(
        path,
        [
            encode_sequence_example({"id": ([0], "int")}, {"w": ([[b"a"], [], [b"b", b"c"], [b""]], "byte")}),
            encode_sequence_example({"id": ([1], "int")}, {}),
            encode_sequence_example({"id": ([2], "int")}, {"w": ([], "byte")}),
            encode_sequence_example({"id": ([3], "int")}, {"w": ([[b"x"]], "byte")}),
        ],
    )
    for size in (4, 1):
        batches = list(TFRecordDataset(path, None, ["id"], sequence_description={"w": "byte"}, batch_size=size))
        assert all(seqs["w"].dtype == object and seqs["w"].shape == (size,) for _, seqs in batches)
        rows = [row for _, seqs in batches for row in seqs["w"].tolist()]
        assert rows == [[b"a", [], [b"b", b"c"], b""], [], [], [b"x"]]


def test_lengths_and_steps_key_clashes_are_errors(tmp_path):
    path = str(tmp_path / "c.tfrecord")
    for lists in (
        {"s": ([[1]], "int"), "s_steps": ([[1]], "int")},
        {"s": ([[1.0]], "float"), "s_lengths": ([[2]], "int")},
    ):
        write_records(path, [encode_sequence_example({}, lists)])
        with pytest.raises(ValueError, match="clashes"):
            list(TFRecordDataset(path, None, sequence_description=[], batch_size=1))


def test_kind_mismatch_names_the_file_and_record(tmp_path, engine):
    path = str(tmp_path / "k.tfrecord")
    write_records(
        path,
        [encode_sequence_example({}, {"s": ([[1]], "int")}), encode_sequence_example({}, {"s": ([[1.5]], "float")})],
    )
    with pytest.raises(FeatureKindError, match=r"k\.tfrecord.*record 1|record 1.*k\.tfrecord"):
        list(TFRecordDataset(path, None, sequence_description={"s": "int"}, batch_size=2))


def test_drop_last_and_batch_transform(files):
    paths, indexes, by_id = files
    ds = TFRecordDataset(
        paths, indexes, CONTEXT, sequence_description=LISTS, batch_size=8, drop_last=True, transform=count_steps
    )
    got = list(ds)
    assert len(got) == len(by_id) // 8
    ids = [i for batch, _ in got for i in ids_in(batch)]
    assert ids == list(by_id)[: len(got) * 8]
    for batch, total in got:  # the transform saw whole SequenceBatches
        assert total == int(batch.sequences["tokens_steps"].sum())


def count_steps(batch):
    """A picklable per-batch transform: the batch and its number of `tokens` steps."""
    assert isinstance(batch, SequenceBatch)
    return batch, int(batch.sequences["tokens_steps"].sum())


def test_batches_pickle_and_copy(files):
    paths, indexes, by_id = files
    batch = next(iter(TFRecordDataset(paths, indexes, CONTEXT, sequence_description=LISTS, batch_size=8)))
    clone = pickle.loads(pickle.dumps(batch))
    assert type(clone) is SequenceBatch and type(clone.context) is type(batch.context)
    for mine, theirs in zip(batch, clone):
        assert list(mine) == list(theirs)
        for key, value in mine.items():
            if isinstance(value, torch.Tensor):
                assert isinstance(theirs[key], torch.Tensor) and torch.equal(value, theirs[key])
            else:
                assert theirs[key].dtype == object and theirs[key].tolist() == value.tolist()
    shallow = copy.copy(batch.sequences)
    assert all(shallow[k] is batch.sequences[k] for k in batch.sequences)


def test_dataloader_two_workers_shuffled(files, engine):
    paths, indexes, by_id = files
    ds = TFRecordDataset(
        paths, indexes, CONTEXT, sequence_description=LISTS, batch_size=6, shuffle_queue_size=10, seed=5
    )
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert all(type(b) is SequenceBatch and isinstance(b.sequences["tokens"], torch.Tensor) for b in batches)
    seen = check_all(batches, by_id)
    assert Counter(seen) == Counter(list(by_id)) and seen != list(by_id)


def test_ranks_and_workers_read_each_record_once(files):
    paths, indexes, by_id = files
    seen = []
    for rank in range(2):
        ds = TFRecordDataset(
            paths,
            indexes,
            CONTEXT,
            sequence_description=LISTS,
            batch_size=4,
            rank=rank,
            world_size=2,
            shuffle_queue_size=3,
            seed=1,
        )
        for worker in range(3):
            seen.extend(check_all(ds.iter_worker(worker, 3), by_id))
    assert Counter(seen) == Counter(list(by_id))


@pytest.mark.parametrize("shuffle", [None, 7])
def test_resume_mid_epoch(files, shuffle):
    paths, indexes, by_id = files

    def make():
        return TFRecordDataset(
            paths, indexes, CONTEXT, sequence_description=LISTS, batch_size=5, shuffle_queue_size=shuffle, seed=2
        )

    full = check_all(make(), by_id)
    first = make()
    head = check_all(itertools.islice(iter(first), 3), by_id)
    state = pickle.loads(pickle.dumps(first.state_dict()))
    second = make()
    second.load_state_dict(state)
    rest = check_all(second, by_id)
    assert head + rest == full and len(head) == 15


def test_multi_dataset_batches(tmp_path, engine):
    a = write_seq_files(tmp_path / "a", [("x.tfrecord", 9, True)], first_id=0)
    b = write_seq_files(tmp_path / "b", [("y.tfrecord", 14, False)], first_id=100)
    by_id = {**a[2], **b[2]}
    ds = MultiTFRecordDataset(
        str(tmp_path / "{}" / "*.tfrecord"),
        None,
        {"a": 1, "b": 2},
        CONTEXT,
        sequence_description=LISTS,
        infinite=False,
        batch_size=4,
        seed=3,
    )
    assert Counter(check_all(ds, by_id)) == Counter(list(by_id))


def test_golden_file(tmp_path, engine):
    source = FIXTURES / "sequence_examples.tfrecord"
    path = tmp_path / "sequence_examples.tfrecord"  # read a copy: never touch the shared folder
    shutil.copy(source, path)
    payloads = _payloads(str(path))
    assert payloads
    described = (
        {"length": "int", "name": "byte", "score": "float"},
        {"tokens": "int", "weights": "float", "words": "byte", "empty_steps": "int", "absent": "float"},
    )
    for description, sequence_description in [(None, []), described]:
        for size in (1, 2, 3, len(payloads)):
            ds = TFRecordDataset(
                str(path), None, description, sequence_description=sequence_description, batch_size=size
            )
            start = 0
            for batch in ds:
                n = min(size, len(payloads) - start)  # unshuffled: full batches, then the rest
                check_batch(batch, payloads[start : start + n], description, sequence_description)
                start += n
            assert start == len(payloads)


def _payloads(path: str) -> List[bytes]:
    from tfrecord_beam.records import RecordReader

    return list(RecordReader(path))


def test_pure_engine_in_a_fresh_process(tmp_path):
    """TFRECORD_BEAM_PURE=1 as users set it: the whole check, 2 DataLoader workers included."""
    env = dict(
        os.environ,
        TFRECORD_BEAM_PURE="1",
        PYTHONPATH=os.pathsep.join(
            [str(REPO), str(TESTS), str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]
        ),  # this module, imported by the script
    )
    script = (
        "import sys, pathlib, collections\n"
        "from tfrecord_beam import _engine\n"
        "assert _engine.ENGINE == 'pure', _engine.ENGINE\n"
        "import test_torch_sequence_batches as t\n"
        "from torch.utils.data import DataLoader\n"
        "paths, indexes, by_id = t.write_seq_files(pathlib.Path(sys.argv[1]), t.LAYOUT)\n"
        "ds = t.TFRecordDataset(paths, indexes, t.CONTEXT, sequence_description=t.LISTS, batch_size=7,\n"
        "                       shuffle_queue_size=5, seed=1)\n"
        "seen = t.check_all(DataLoader(ds, batch_size=None, num_workers=2), by_id)\n"
        "assert collections.Counter(seen) == collections.Counter(list(by_id))\n"
        "print('checked', len(seen))\n"
    )
    # a clean process (this one has imported the compiled engine): forked from the worker's zygote
    proc = zygote.run([sys.executable, "-c", script, str(tmp_path)], text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"checked {len(seq_ids())}" in proc.stdout


def seq_ids() -> List[int]:
    return list(range(sum(count for _, count, _ in LAYOUT)))
