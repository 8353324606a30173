"""The drop-in loaders' per-record values built from decoded columns (compiled `example_rows` /
`sequence_rows` and their pure twins) against the one-record-at-a-time decoder: same values,
dtypes and types, and the same errors at the same records."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.parity import NATIVE, needs_native, same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_beam as tfb
from tfrecord_beam import _proto, columnar, compat, example, records
from tfrecord_beam._engine import _rows


def _feature(draw, kind):
    f = _proto.Feature()
    if kind == "none":
        return f
    n = draw(st.integers(0, 3))
    if kind == "byte":
        f.bytes_list.value.extend(draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n)))
    elif kind == "float":
        f.float_list.value.extend(draw(st.lists(st.floats(width=32), min_size=n, max_size=n)))
    else:
        f.int64_list.value.extend(draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=n, max_size=n)))
    return f


KIND_OF = {"a": "byte", "b": "float", "c": "int"}


@st.composite
def sequence_records(draw, mismatch=False):
    out = []
    for _ in range(draw(st.integers(1, 12))):
        m = _proto.SequenceExample()
        for name, kind in KIND_OF.items():
            if draw(st.booleans()):
                k = draw(st.sampled_from([kind, "none"] + (["int" if kind != "int" else "float"] if mismatch else [])))
                m.context.feature[name].CopyFrom(_feature(draw, k))
            if draw(st.booleans()):
                fl = m.feature_lists.feature_list[name]
                for _ in range(draw(st.integers(0, 3))):
                    k = draw(st.sampled_from([kind, "none"] + (["byte"] if mismatch and kind != "byte" else [])))
                    fl.feature.append(_feature(draw, k))
        payload = m.SerializeToString(deterministic=True)
        if mismatch and draw(st.integers(0, 9)) == 0:
            payload = b"\x0a\x05junk"
        out.append(payload)
    return out


def _outcome(make):
    try:
        return list(make())
    except Exception as exc:  # noqa: BLE001 - class and message must agree
        return (type(exc), str(exc))


DESC = dict(KIND_OF)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(sequence_records(mismatch=True))
def test_sequence_loader_chunks_match_one_by_one(tmp_path, payloads):
    path = str(tmp_path / "s.tfrecord")
    records.write_records(path, payloads)
    fast = _outcome(lambda: tfb.sequence_loader(path, None, DESC, DESC))
    slow = _outcome(
        lambda: (
            example.decode_sequence_example(p, DESC, DESC, path=path, offset=o, record_number=i)
            for i, (o, p) in enumerate(records.RecordReader(path).records_with_offsets())
        )
    )
    if isinstance(slow, tuple):
        assert fast == slow
    else:
        assert same(fast, slow)


@needs_native
@settings(max_examples=60, deadline=None)
@given(sequence_records(), st.booleans())
def test_compiled_rows_match_the_pure_twins(payloads, pick):
    rows = list(range(0, len(payloads), 2)) if pick else None
    cols = columnar.decode_examples(
        [columnar.encode_examples({"x": columnar.Column.from_rows("x", "int", [[1]])})[0]] * 3,
        {"x": "int", "y": "byte"},
    )
    assert same(list(columnar.to_records(cols)), list(_rows.example_rows(*columnar._column_args(cols, False), 3, None)))
    context, lists = columnar.decode_sequence_examples(payloads, DESC, DESC)
    native = list(columnar.to_sequence_records(context, lists, rows))
    pure = list(
        _rows.sequence_rows(
            *columnar._column_args(context, False), *columnar._column_args(lists, True), len(payloads), rows
        )
    )
    assert same(native, pure)
    native_ex = list(columnar.to_records(context, rows))
    assert same(native_ex, list(_rows.example_rows(*columnar._column_args(context, False), len(payloads), rows)))
    buf = b"".join(payloads)
    lengths = np.array([len(p) for p in payloads], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    args = (
        buf,
        [k.encode() for k in DESC],
        [columnar.KIND_CODE[k] for k in DESC.values()],
        offsets,
        lengths,
        list(DESC),
        rows,
    )
    (fast, ferr), (slow, serr) = NATIVE.decode_example_rows(*args), _rows.decode_example_rows(*args)
    assert ferr == serr and (ferr is not None or same(list(fast), list(slow)))


@needs_native
def test_rows_reject_inconsistent_columns():
    values = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError):
        NATIVE.example_rows(["x"], [3], [(values, np.array([0, 5], np.int64), None, None)], 1, None)
    with pytest.raises(ValueError):
        NATIVE.example_rows(["x"], [3], [(values, np.array([0, 1, 2], np.int64), None, None)], 1, None)
    with pytest.raises(IndexError):
        NATIVE.example_rows(["x"], [3], [(values, np.array([0, 3], np.int64), None, None)], 1, [1])
    with pytest.raises(ValueError):
        NATIVE.sequence_rows(
            [],
            [],
            [],
            ["s"],
            [3],
            [(values, np.array([0, 1], np.int64), np.array([0, 9], np.int64), None, None)],
            1,
            None,
        )


def test_kept_records_own_their_values(tmp_path):
    path = str(tmp_path / "k.tfrecord")
    records.write_records(
        path, [example.encode_sequence_example({"c": [i]}, {"s": ([[i, i]], "int")}) for i in range(5)]
    )
    got = list(tfb.sequence_loader(path, None, {"c": "int"}, {"s": "int"}))
    assert [ctx["c"].tolist() for ctx, _ in got] == [[i] for i in range(5)]
    assert all(ctx["c"].base is None and seq["s"][0].base is None for ctx, seq in got)


def test_iterator_shards_and_views(tmp_path):
    path = str(tmp_path / "i.tfrecord")
    records.write_records(path, [bytes([i]) * i for i in range(10)])
    assert [bytes(m) for m in compat.tfrecord_iterator(path)] == [bytes([i]) * i for i in range(10)]
    assert [bytes(m) for m in compat.tfrecord_iterator(path, shard=(1, 3))] == [bytes([i]) * i for i in (1, 4, 7)]


@st.composite
def example_records(draw):
    out = []
    for _ in range(draw(st.integers(0, 10))):
        m = _proto.Example()
        for name, kind in KIND_OF.items():
            if draw(st.booleans()):
                m.features.feature[name].CopyFrom(_feature(draw, draw(st.sampled_from([kind, "none"]))))
        out.append(m.SerializeToString(deterministic=True))
    return out


@settings(max_examples=80, deadline=None)
@given(example_records(), st.booleans(), st.booleans())
def test_records_cut_from_the_buffer_match_the_columns(payloads, pick, mismatch):
    """decode_example_records (bytes values cut straight from the file buffer) gives what
    decode_examples + to_records give, errors included."""
    buf = b"".join(payloads) + b"tail"
    lengths = np.array([len(p) for p in payloads], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(payloads) else lengths
    desc = {"a": "float" if mismatch else "byte", "b": "float", "c": "int", "d": "byte"}
    rows = list(range(0, len(payloads), 2)) if pick else None

    def fast():
        return list(columnar.decode_example_records(buf, desc, offsets=offsets, lengths=lengths, path="p", rows=rows))

    def slow():
        return list(
            columnar.to_records(columnar.decode_examples(buf, desc, offsets=offsets, lengths=lengths, path="p"), rows)
        )

    a, b = _outcome(fast), _outcome(slow)
    assert a == b if isinstance(b, tuple) else same(a, b)
