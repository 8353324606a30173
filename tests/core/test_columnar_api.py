"""The public columnar API (tfrecord_beam.columnar) on the engine in use: statuses, strict mode,
dense/ragged views, errors naming records, encode round trips, batched file readers."""

import numpy as np
import pytest
from helpers.fixtures import FIXTURES

from tfrecord_beam import columnar
from tfrecord_beam._engine import _framing
from tfrecord_beam._proto import Example, SequenceExample
from tfrecord_beam.errors import DecodeError


def example(**features) -> bytes:
    ex = Example()
    ex.features.SetInParent()
    for name, (kind, values) in features.items():
        f = ex.features.feature[name]
        f.SetInParent()
        if kind:
            getattr(f, kind).value.extend(values)
            getattr(f, kind).SetInParent()
    return ex.SerializeToString()


RECORDS = [
    example(x=("int64_list", [1, 2]), s=("bytes_list", [b"a"]), f=("float_list", [0.5])),
    example(x=("int64_list", []), s=("bytes_list", [b"", b"bc"])),
    example(x=(None, []), f=("float_list", [1.5])),
]


def test_status_tells_missing_no_kind_and_empty():
    cols = columnar.decode_examples(RECORDS, {"x": "int64", "s": " bytes ", "f": "float32"})
    x, s, f = cols["x"], cols["s"], cols["f"]
    assert x.status.tolist() == [columnar.PRESENT, columnar.PRESENT, columnar.NO_KIND]
    assert f.status.tolist() == [columnar.PRESENT, columnar.MISSING, columnar.PRESENT]
    assert x.to_list() == [[1, 2], [], []]
    assert x.row_splits.tolist() == [0, 2, 2, 2] and x.values.dtype == np.int64
    assert s.to_list() == [[b"a"], [b"", b"bc"], []]
    assert s.value_offsets.tolist() == [0, 1, 1, 3] and s.values.tobytes() == b"abc"
    assert f.values.dtype == np.float32 and f.to_list() == [[0.5], [], [1.5]]


def test_strict_names_feature_and_record():
    with pytest.raises(KeyError, match=r"record 2: feature 'x' has no kind set"):
        columnar.decode_examples(RECORDS, {"x": "int"}, strict=True)
    with pytest.raises(KeyError, match=r"record 1: feature 'f' is missing"):
        columnar.decode_examples(RECORDS, {"f": "float"}, strict=True)


def test_kind_mismatch_and_malformed_name_the_record():
    with pytest.raises(columnar.FeatureKindError, match=r"record 5: feature 'x' holds int values, described as float"):
        columnar.decode_examples(RECORDS, {"x": "float"}, first_record_number=5, path="p.tfrecord")
    with pytest.raises(DecodeError, match=r"record 1: not a valid Example"):
        columnar.decode_examples([RECORDS[0], b"\x0a\x05\x01"], {"x": "int"})


def test_dense_ragged_and_rows():
    rows = [example(t=("int64_list", [i, i + 1, i + 2])) for i in range(4)]
    col = columnar.decode_examples(rows, {"t": "int"})["t"]
    dense = col.to_numpy()
    assert dense.shape == (4, 3) and dense[3].tolist() == [3, 4, 5]
    ragged = columnar.decode_examples(RECORDS, {"x": "int"})["x"]
    values, splits = ragged.to_numpy()
    assert values.tolist() == [1, 2] and splits.tolist() == [0, 2, 2, 2]
    with pytest.raises(ValueError):
        ragged.to_dense()
    s = columnar.decode_examples(RECORDS, {"s": "byte"})["s"]
    assert s.row(1) == [b"", b"bc"] and s.flat_values().tolist() == [b"a", b"", b"bc"]


def test_kinds_inferred_from_records():
    cols = columnar.decode_examples(RECORDS, ["x", "s", "f", "nowhere"])
    assert {k: c.kind for k, c in cols.items()} == {"x": "int", "s": "byte", "f": "float", "nowhere": "int"}


def test_buffer_with_offsets_is_the_same_as_a_list():
    framed = _framing.frame_records(RECORDS)
    offs, lens, _, _ = _framing.scan_frames(framed)
    a = columnar.decode_examples(framed, {"x": "int", "s": "byte"}, offsets=offs, lengths=lens)
    b = columnar.decode_examples(RECORDS, {"x": "int", "s": "byte"})
    assert all(a[k].to_list() == b[k].to_list() for k in a)


def test_encode_round_trip_and_upb_identity():
    cols = columnar.decode_examples(RECORDS, {"x": "int", "s": "byte", "f": "float"})
    payloads = columnar.encode_examples(cols)
    again = columnar.decode_examples(payloads, {"x": "int", "s": "byte", "f": "float"})
    for k in cols:
        assert again[k].to_list() == cols[k].to_list()
        assert again[k].status.tolist() == cols[k].status.tolist()
    for p in payloads:
        assert Example.FromString(p).SerializeToString(deterministic=True) == p
    framed = columnar.encode_examples(cols, framed=True)
    assert framed == _framing.frame_records(payloads)


def test_encode_accepts_arrays_pairs_and_lists():
    payloads = columnar.encode_examples(
        {
            "dense": np.arange(6, dtype=np.int64).reshape(3, 2),
            "scalar": np.array([0.5, 1.5, 2.5], dtype=np.float32),
            "pair": (np.array([1, 2, 3]), np.array([0, 0, 1, 3])),
            "lists": [[b"a"], [], [b"b", b"c"]],
        }
    )
    cols = columnar.decode_examples(payloads, {"dense": "int", "scalar": "float", "pair": "int", "lists": "byte"})
    assert cols["dense"].to_dense().tolist() == [[0, 1], [2, 3], [4, 5]]
    assert cols["scalar"].to_list() == [[0.5], [1.5], [2.5]]
    assert cols["pair"].to_list() == [[], [1], [2, 3]]
    assert cols["lists"].to_list() == [[b"a"], [], [b"b", b"c"]]
    with pytest.raises(ValueError):
        columnar.encode_examples({"a": np.zeros(2), "b": np.zeros(3)})


def test_sequence_examples_two_levels():
    ex = SequenceExample()
    ex.context.feature["n"].int64_list.value.append(2)
    fl = ex.feature_lists.feature_list["tok"].feature
    fl.add().int64_list.value.extend([1, 2])
    fl.add()  # a step with no kind: no values
    fl.add().int64_list.value.extend([3])
    empty = SequenceExample()
    ctx, lists = columnar.decode_sequence_examples(
        [ex.SerializeToString(), empty.SerializeToString()], {"n": "int"}, {"tok": "int"}
    )
    assert ctx["n"].to_list() == [[2], []]
    tok = lists["tok"]
    assert tok.to_list() == [[[1, 2], [], [3]], []]
    assert tok.row_splits.tolist() == [0, 3, 3] and tok.step_splits.tolist() == [0, 2, 2, 3]
    assert tok.status.tolist() == [columnar.PRESENT, columnar.MISSING]
    with pytest.raises(KeyError, match="record 1: feature 'tok' is missing"):
        columnar.decode_sequence_examples(
            [ex.SerializeToString(), empty.SerializeToString()], {}, {"tok": "int"}, strict=True
        )


@pytest.mark.parametrize("batch_size", [1, 3, 7, 100])
def test_read_example_batches_across_chunks(batch_size):
    path = FIXTURES / "examples.tfrecord"
    desc = {"bytes_utf8": "byte", "floats_edge": "float", "ints_edge": "int"}
    whole = columnar.decode_examples(
        path.read_bytes(),
        desc,
        offsets=_framing.scan_frames(path.read_bytes())[0],
        lengths=_framing.scan_frames(path.read_bytes())[1],
    )
    got = {k: [] for k in desc}
    sizes = []
    for batch in columnar.read_example_batches(str(path), desc, batch_size, chunk_size=100):
        sizes.append(len(batch["ints_edge"]))
        for k, col in batch.items():
            got[k].append((col.values.tobytes(), col.lengths().tolist()))
    assert sizes[:-1] == [batch_size] * (len(sizes) - 1) and sum(sizes) == 7
    for k in desc:  # compare bits: the floats include NaNs
        assert b"".join(v for v, _ in got[k]) == whole[k].values.tobytes()
        assert sum((lens for _, lens in got[k]), []) == whole[k].lengths().tolist()


def test_read_batches_error_names_file_record():
    path = FIXTURES / "examples.tfrecord"
    with pytest.raises(columnar.FeatureKindError) as info:
        list(columnar.read_example_batches(str(path), {"ints_edge": "float"}, 2))
    assert info.value.record_number == 0 and info.value.path == str(path) and info.value.offset == 0


def test_read_sequence_example_batches():
    path = FIXTURES / "sequence_examples.tfrecord"
    n = 0
    for ctx, lists in columnar.read_sequence_example_batches(str(path), ["length"], ["tokens"], 3):
        n += len(ctx["length"])
        assert len(lists["tokens"]) == len(ctx["length"])
    assert n == 7


def test_record_chunks_decode_directly_and_errors_name_them():
    from tfrecord_beam.records import RecordReader

    path = FIXTURES / "examples.tfrecord"
    chunks = list(RecordReader(str(path), chunk_size=300).chunks())
    assert len(chunks) > 1
    total = sum(len(columnar.decode_examples(c, {"ints_edge": "int"})["ints_edge"]) for c in chunks)
    assert total == 7
    raised = 0
    for chunk in chunks:
        try:
            columnar.decode_examples(chunk, {"ints_edge": "float"}, path=str(path))
        except columnar.FeatureKindError as exc:
            i = exc.record_number - chunk.first_record_number
            assert 0 <= i < len(chunk) and exc.offset == int(chunk.record_offsets[i]) and exc.path == str(path)
            raised += 1
    assert raised >= 1


def test_bytes_column_without_offsets_is_a_clear_error():
    col = columnar.Column("s", "byte", np.frombuffer(b"ab", np.uint8), np.array([0, 1], np.int64))
    for view in (col.to_list, col.flat_values, lambda: col.row(0)):
        with pytest.raises(ValueError, match="'s': bytes columns need value_offsets"):
            view()
