"""The compiled per-record encoders (`{name: (value, kind)}` -> Example / SequenceExample bytes)
against their pure twin, the protobuf path, and the write buffer of `RecordWriter.write`.

Whenever the compiled encoder returns bytes they must be the protobuf path's bytes; whenever
it declines (None) the protobuf path decides (a value or the user-facing error). Inputs mix
every value type users pass, including the ones the compiled side declines.
"""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from helpers.parity import NATIVE, needs_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_beam as tfb
from tfrecord_beam import _writer, example, index, records
from tfrecord_beam._engine import _framing

KINDS = ["byte", "float", "int", "bytes", "int64", "float32", " Int", "BYTES", "x"]

ints = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 70), 1 << 70), st.booleans())
floats = st.one_of(st.floats(width=32, allow_nan=True), st.floats(allow_nan=True), st.integers(-(1 << 60), 1 << 60))
texts = st.one_of(st.binary(max_size=12), st.text(max_size=6), st.just("\ud800"))


def _arrays(draw):
    dtype = draw(
        st.sampled_from(
            [np.float32, np.float64, np.int64, np.int32, np.uint8, np.uint64, np.bool_, np.float16, ">f4", object]
        )
    )
    shape = draw(st.sampled_from([(0,), (1,), (3,), (2, 2), ()]))
    raw = draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    if dtype is object:
        return np.array([b"a"] * int(np.prod(shape)), dtype=object).reshape(shape)
    size = np.dtype(dtype).itemsize
    arr = np.array(raw, dtype=np.uint64).reshape(-1)
    out = arr.view(np.uint8).reshape(-1, 8)[:, :size].copy().reshape(-1).view(dtype).reshape(shape)
    return out[::-1] if out.ndim == 1 else out  # non-contiguous too


@st.composite
def values(draw):
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(ints)
    if choice == 1:
        return draw(floats)
    if choice == 2:
        return draw(texts)
    if choice == 3:
        return draw(st.lists(ints, max_size=5))
    if choice == 4:
        return draw(st.lists(floats, max_size=5))
    if choice == 5:
        return draw(st.lists(texts, max_size=4))
    if choice == 6:
        return _arrays(draw)
    if choice == 7:
        return tuple(draw(st.lists(st.one_of(ints, floats, texts), max_size=3)))
    if choice == 8:
        return draw(
            st.sampled_from(
                [
                    np.float32(1.5),
                    np.int64(-3),
                    np.bool_(True),
                    np.uint64(1 << 63),
                    None,
                    bytearray(b"ab"),
                    memoryview(b"cd"),
                    [[1, 2], [3, 4]],
                    [np.int64(2)],
                ]
            )
        )
    return (draw(values()), draw(st.sampled_from(KINDS)))


datums = st.dictionaries(st.one_of(st.text(max_size=4), st.just("")), values(), max_size=5)


def outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the class is what both paths must agree on
        return type(exc)


def _same_or_declined(fast, slow):
    if fast is None:
        return True  # declined: the protobuf path's answer is the answer
    return isinstance(slow, bytes) and fast == slow


def _representatives() -> list:
    """One of each value users pass (each branch of `values()` above, at its edges): every
    scalar type, lists of each, arrays of every dtype and shape (strided too), mixed tuples."""
    scalars = [0, -1, (1 << 63) - 1, -(1 << 63), 1 << 63, -(1 << 70), True, 1.5, -0.0, float("nan"), 1e300]
    scalars += [float("inf"), 1 << 60, b"", b"ab", "", "\u00e9", "\ud800"]
    arrays = [np.array([b"a", b"b"], dtype=object)]
    for dtype in (np.float32, np.float64, np.int64, np.int32, np.uint8, np.uint64, np.bool_, np.float16, ">f4"):
        raw = np.array([1, 0xFFFFFFFFFFFFFFFF, 1 << 63, 0x7F800001], dtype=np.uint64)
        flat = raw.view(np.uint8).reshape(-1, 8)[:, : np.dtype(dtype).itemsize].copy().reshape(-1).view(dtype)
        arrays += [flat[:0], flat[:1], flat[::-1][:3], flat[:4].reshape(2, 2), flat[0].reshape(())]
    lists = [[], [1, -(1 << 63), True], [1.5, float("nan"), 1 << 60], [b"a", "b", "\ud800"], [1, b"a"], [1, 1.5]]
    odd = [np.float32(1.5), np.int64(-3), np.bool_(True), np.uint64(1 << 63), None, bytearray(b"ab")]
    odd += [memoryview(b"cd"), [[1, 2], [3, 4]], [np.int64(2)], (1, 1.5, b"x"), ()]
    return scalars + lists + arrays + odd


@needs_native
def test_compiled_encoders_on_every_value_type_and_kind():
    """Each representative value, bare and with each kind spelling (valid, odd case, unknown),
    as an Example feature, a context feature and a feature list's steps: the compiled encoders
    give the protobuf path's bytes or decline. The generated tests below sample the same space
    at random; this walks it."""
    for value in _representatives():
        for datum in [{"v": value}] + [{"v": (value, kind)} for kind in KINDS]:
            fast = NATIVE.encode_example(datum)
            slow = outcome(example.encode_example_message, datum)
            assert _same_or_declined(fast, slow), (datum, fast, slow)
            assert outcome(example.encode_example, datum) == slow
            for ctx, lists in ((datum, None), (None, {"s": [datum["v"], value]}), (None, {"s": [value] * 2})):
                fast = NATIVE.encode_sequence_example(ctx, lists)
                slow = outcome(example.encode_sequence_example_message, ctx, lists)
                assert _same_or_declined(fast, slow), (ctx, lists, fast, slow)
            for kind in KINDS:
                lists = {"s": ([value, value], kind)}
                fast = NATIVE.encode_sequence_example(None, lists)
                slow = outcome(example.encode_sequence_example_message, None, lists)
                assert _same_or_declined(fast, slow), (lists, fast, slow)
                assert outcome(example.encode_sequence_example, None, lists) == slow


# Generated datums: the walk above covers each value type and kind alone; these mix several
# features and nested values per datum. Nearly all their CPU is hypothesis drawing the datums
# (400 + 300 examples took 5.5 CPU s); 100 each still mix every branch of values() many times
# (each datum holds up to 5 features, each a 1-in-10 choice of branch).
@needs_native
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datums)
def test_compiled_example_encoder_gives_protobuf_bytes_or_declines(datum):
    fast = NATIVE.encode_example(datum)
    slow = outcome(example.encode_example_message, datum)
    assert _same_or_declined(fast, slow), (datum, fast, slow)
    assert outcome(example.encode_example, datum) == slow  # what users get: the protobuf path's answer


steps = st.one_of(st.lists(values(), max_size=4), st.just([]), st.just([[], [1.5]]))
lists = st.dictionaries(st.text(max_size=3), st.one_of(steps, st.tuples(steps, st.sampled_from(KINDS))), max_size=3)


@needs_native
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(datums, st.none()), st.one_of(lists, st.none()))
def test_compiled_sequence_encoder_gives_protobuf_bytes_or_declines(context, feature_lists):
    fast = NATIVE.encode_sequence_example(context, feature_lists)
    slow = outcome(example.encode_sequence_example_message, context, feature_lists)
    assert _same_or_declined(fast, slow), (context, feature_lists, fast, slow)
    assert outcome(example.encode_sequence_example, context, feature_lists) == slow


@needs_native
def test_common_inputs_are_taken_by_the_compiled_encoder():
    """The fast path really runs for what the `tfrecord` package's users write (and D1-D3)."""
    image = np.frombuffer(b"\x89PNG" * 10, np.uint8)
    datum = {
        "image": (image, "byte"),
        "label": (0.25, "float"),
        "index": (7, "int"),
        "tokens": (np.arange(20), "int"),
        "name": (b"x", "byte"),
        "text": ("héllo", "byte"),
        "vec": (np.ones(3, np.float64), "float"),
        "bare_list": [1, 2, 3],
        "bare_str": "s",
        "flag": True,
        "np_scalar": np.float32(2.0),
    }
    assert NATIVE.encode_example(datum) == example.encode_example_message(datum)
    ctx, seq = (
        {"length": (3, "int")},
        {"tokens": ([[1, 2], [3]], "int"), "f": ([[0.5]], "float"), "w": ([[b"a"]], "byte")},
    )
    assert NATIVE.encode_sequence_example(ctx, seq) == example.encode_sequence_example_message(ctx, seq)
    framed = NATIVE.encode_example(datum, True)
    assert framed == _framing.frame_records([example.encode_example_message(datum)])


@needs_native
def test_ndarray_subclasses_are_left_to_the_python_path():
    """Converting a subclass may run Python code; the compiled side must not."""
    datum = {"x": (np.ma.array([1, 2, 3]), "int")}
    assert NATIVE.encode_example(datum) is None
    assert example.encode_example(datum) == example.encode_example_message(datum)
    assert NATIVE.encode_sequence_example({}, {"s": (np.ma.array([[1.5]]), "float")}) is None


@needs_native
def test_signalling_nans_are_quieted_as_protobuf_does():
    snan = np.array([0x7F800001, 0xFFA00000, 0x7FC00000], np.uint32).view(np.float32)
    datum = {"x": (snan, "float")}
    assert NATIVE.encode_example(datum) == example.encode_example_message(datum)


def test_errors_come_from_the_python_path(tmp_path):
    with pytest.raises(ValueError, match="'big'.*int64"):
        example.encode_example({"big": (1 << 64, "int")})
    with pytest.raises(TypeError, match="'e'.*empty list"):
        example.encode_example({"e": []})
    with pytest.raises(TypeError, match="non-integral"):
        example.encode_example({"f": (1.5, "int")})
    with pytest.raises(TypeError, match="feature list 's'"):
        example.encode_sequence_example({}, {"s": [[], []]})
    assert example.encode_example({"k": (2, " Int ")}) == example.encode_example({"k": (2, "int")})
    with tfb.TFRecordWriter(str(tmp_path / "w.tfrecord")) as writer:
        with pytest.raises(ValueError, match="int64"):
            writer.write({"big": (1 << 64, "int")})
        writer.write({"ok": (1, "int")})
    assert list(tfb.tfrecord_loader(str(tmp_path / "w.tfrecord"), None, {"ok": "int"}))[0]["ok"].tolist() == [1]


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_buffered_writes_keep_order_counts_offsets_and_index(tmp_path, compression, monkeypatch):
    """Single writes (buffered), batches (unbuffered) and records larger than the buffer, mixed:
    the file holds them in call order, and the index, offset and count agree."""
    monkeypatch.setattr(_writer, "WRITE_BUFFER_SIZE", 256)
    path = tmp_path / ("d.tfrecord" + (".gz" if compression else ""))
    rng = np.random.default_rng(0)
    expected = []
    with records.RecordWriter(str(path), index_path=True) as writer:
        for step in range(300):
            choice = step % 5
            if choice == 3:
                batch = [rng.bytes(int(rng.integers(0, 40))) for _ in range(3)]
                writer.write_many(batch)
                expected += batch
            elif choice == 4:
                writer.write(rng.bytes(1000))  # larger than the buffer
                expected.append(None)
            elif step % 7 == 0:
                datum = {"i": (step, "int"), "s": (rng.bytes(5), "byte")}
                tfb.TFRecordWriter.write(_Adapter(writer), datum)
                expected.append(example.encode_example(datum))
            else:
                payload = rng.bytes(int(rng.integers(0, 60)))
                writer.write(memoryview(payload) if step % 2 else payload)
                expected.append(payload)
            assert writer.records_written == len(expected)
        offset = writer.offset
    got = list(records.RecordReader(str(path)))
    assert len(got) == len(expected)
    assert all(e is None or g == e for g, e in zip(got, expected))
    raw = gzip.decompress(path.read_bytes()) if compression else path.read_bytes()
    assert offset == len(raw)
    idx = index.load_index(index.default_index_path(str(path)))
    assert np.array_equal(idx, index.build_index(str(path)))


class _Adapter:
    """A TFRecordWriter over an existing RecordWriter (to mix its writes with raw ones)."""

    def __init__(self, writer):
        self._writer = writer


def test_writes_after_close_and_non_bytes_payloads_fail(tmp_path):
    writer = records.RecordWriter(str(tmp_path / "c.tfrecord"))
    with pytest.raises(TypeError):
        writer.write("text")
    writer.write(b"x")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"y")
    tfw = tfb.TFRecordWriter(str(tmp_path / "t.tfrecord"))
    tfw.close()
    with pytest.raises(ValueError, match="closed"):
        tfw.write({"a": (1, "int")})
    assert list(records.RecordReader(str(tmp_path / "c.tfrecord"))) == [b"x"]


def test_an_aborted_writer_leaves_nothing(tmp_path):
    path = tmp_path / "a.tfrecord"
    with pytest.raises(RuntimeError):
        with tfb.TFRecordWriter(str(path), index_path=True) as writer:
            writer.write({"a": (1, "int")})
            raise RuntimeError
    assert list(tmp_path.iterdir()) == []


def test_pure_append_frame_matches_the_frame_format():
    buf = bytearray(40)
    end = _framing.append_frame(buf, 3, b"hello")
    assert end == 3 + 5 + 16
    assert bytes(buf[3:end]) == _framing.frame_records([b"hello"])
    assert struct.unpack_from("<Q", buf, 3)[0] == 5
    assert _framing.append_frame(buf, 30, b"hello") == -1 and buf[30:] == bytearray(10)
    if NATIVE is not None:
        nbuf = bytearray(40)
        assert NATIVE.append_frame(nbuf, 3, b"hello") == end and nbuf == buf
        assert NATIVE.append_frame(nbuf, 30, b"hello") == -1


@needs_native
def test_zero_dimensional_array_steps_encode_as_in_the_compiled_encoder():
    """A 0-d array step is one value on both paths (the protobuf path once failed on len())."""
    lists = {"x": [0.0, np.array(0.5, dtype=np.float32)], "y": ([np.zeros(0), [1.0]], "float")}
    assert example.encode_sequence_example_message(None, lists) == NATIVE.encode_sequence_example(None, lists)
