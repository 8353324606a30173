"""RecordReader / RecordWriter: framing, compression, CRCs, offsets, resync, atomic writes."""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib

import numpy as np
import pytest
from helpers import codecs
from helpers.fixtures import FIXTURES

from tfrecord_beam import records
from tfrecord_beam._engine import _framing
from tfrecord_beam.errors import CorruptRecordError, TruncatedRecordError
from tfrecord_beam.records import RecordReader, RecordWriter, find_record_start, resolve_compression

PAYLOADS = [b"", b"a", b"hello world" * 3, bytes(range(256)) * 40, b"\x00" * 5000]


@pytest.mark.parametrize("compression", codecs.ALL)
def test_round_trip_each_compression(tmp_path, compression):
    path = tmp_path / "data.tfrecord"
    with RecordWriter(path, compression) as writer:
        for p in PAYLOADS:
            writer.write(p)
    assert list(RecordReader(path, compression)) == PAYLOADS


@pytest.mark.parametrize("suffix,kind", [*codecs.SUFFIXES, (".tfrecord", None), (".GZ", "gzip")])
def test_auto_compression_from_the_name(tmp_path, suffix, kind):
    assert resolve_compression("x" + suffix, "auto") == kind
    path = tmp_path / ("data" + suffix)
    records.write_records(str(path), PAYLOADS)
    raw = path.read_bytes()
    if kind == "gzip":
        assert raw[:2] == b"\x1f\x8b"
        raw = gzip.decompress(raw)  # another tool's reader reads it
    elif kind == "zlib":
        raw = zlib.decompress(raw)
    elif kind == "zstd":
        import zstandard

        assert raw[:4] == b"\x28\xb5\x2f\xfd"
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    assert raw == _framing.frame_records(PAYLOADS)
    assert list(records.read_records(path)) == PAYLOADS


def test_unknown_compression_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown compression 'lz4'"):
        resolve_compression("x", "lz4")


def test_framing_is_byte_identical_to_tensorflow(tmp_path):
    for name in ("examples.tfrecord", "large_record.tfrecord", "hand_encoded.tfrecord", "sequence_examples.tfrecord"):
        payloads = list(RecordReader(FIXTURES / name))
        out = tmp_path / name
        records.write_records(str(out), payloads)
        assert out.read_bytes() == (FIXTURES / name).read_bytes()


@pytest.mark.parametrize("name", ["examples.tfrecord.gz", "examples.tfrecord.zlib"])
def test_compressed_writes_decompress_to_tensorflows_stream(tmp_path, name):
    payloads = list(RecordReader(FIXTURES / name))
    out = tmp_path / name
    records.write_records(str(out), payloads)
    decompress = gzip.decompress if name.endswith(".gz") else zlib.decompress
    assert decompress(out.read_bytes()) == (FIXTURES / "examples.tfrecord").read_bytes()


def test_concatenated_gzip_members_are_read(tmp_path):
    path = tmp_path / "cat.tfrecord.gz"
    path.write_bytes(
        gzip.compress(_framing.frame_records(PAYLOADS[:2])) + gzip.compress(_framing.frame_records(PAYLOADS[2:]))
    )
    assert list(RecordReader(path)) == PAYLOADS


def test_garbage_gzip_is_an_error(tmp_path):
    path = tmp_path / "bad.tfrecord.gz"
    path.write_bytes(b"\x1f\x8bnot really gzip data")
    with pytest.raises(CorruptRecordError, match="bad.tfrecord.gz.*invalid gzip data"):
        list(RecordReader(path))


def test_every_inflater_gives_the_same_bytes(tmp_path):
    from tfrecord_beam import _streams

    raw = _framing.frame_records(PAYLOADS * 50)
    for compression, compress in (("gzip", gzip.compress), ("zlib", zlib.compress)):
        blob = compress(raw)
        outs = []
        for name in sorted(_streams.INFLATERS):
            reader = _streams.InflatingReader(io.BytesIO(blob), compression, inflater=name)
            outs.append(b"".join(iter(lambda r=reader: r.read(1000), b"")))
        assert all(o == raw for o in outs), compression


def test_huge_length_field_errors_before_allocating(tmp_path):
    header = struct.pack("<Q", 1 << 63)
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(header + struct.pack("<I", _framing.masked_crc32c(header)) + b"x" * 100)
    with pytest.raises(TruncatedRecordError) as info:
        list(RecordReader(path))
    assert info.value.offset == 0 and info.value.record_number == 0
    assert str(1 << 63) in str(info.value)


def test_huge_length_in_a_gzip_stream_is_truncation_not_a_memory_error(tmp_path):
    header = struct.pack("<Q", 1 << 62)
    path = tmp_path / "huge.tfrecord.gz"
    path.write_bytes(gzip.compress(header + struct.pack("<I", _framing.masked_crc32c(header)) + b"x" * 10))
    with pytest.raises(TruncatedRecordError):
        list(RecordReader(path))


def test_small_chunks_and_records_larger_than_a_chunk(tmp_path):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), PAYLOADS * 3)
    assert list(RecordReader(path, chunk_size=64)) == PAYLOADS * 3
    assert list(RecordReader(path, "gzip" if False else None, chunk_size=7000)) == PAYLOADS * 3


def test_offsets_and_ranges(tmp_path):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), PAYLOADS)
    pairs = list(RecordReader(path).records_with_offsets())
    offsets = [o for o, _ in pairs]
    assert offsets[0] == 0
    assert offsets[1:] == list(np.cumsum([len(p) + 16 for p in PAYLOADS])[:-1])
    middle = list(RecordReader(path, start_offset=offsets[1], end_offset=offsets[3]))
    assert middle == PAYLOADS[1:3]
    # end_offset inside a record still reads that record (its header starts before the end)
    assert list(RecordReader(path, start_offset=offsets[1], end_offset=offsets[1] + 1)) == PAYLOADS[1:2]
    assert list(RecordReader(path, start_offset=offsets[4])) == PAYLOADS[4:]


@pytest.mark.parametrize("compression", codecs.COMPRESSED)
def test_start_offset_in_a_compressed_stream(tmp_path, compression):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), PAYLOADS, compression=compression)
    offsets = [o for o, _ in RecordReader(path, compression).records_with_offsets()]
    assert list(RecordReader(path, compression, start_offset=offsets[2], end_offset=offsets[4])) == PAYLOADS[2:4]


def test_record_numbers_in_errors_after_a_start_offset(tmp_path):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), PAYLOADS)
    offsets = [o for o, _ in RecordReader(path).records_with_offsets()]
    data = bytearray(path.read_bytes())
    data[offsets[3] + 12] ^= 1  # flip a payload bit of record 3
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        list(RecordReader(path, start_offset=offsets[1], first_record_number=1))
    assert (info.value.record_number, info.value.offset) == (3, offsets[3])
    assert "payload CRC" in info.value.reason


def test_resync_finds_the_next_record_even_past_lookalike_bytes(tmp_path):
    inner = _framing.frame_records([b"fake record inside a payload"])
    payloads = [b"head" + inner + b"tail", inner, b"x" * 100, inner * 3]
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), payloads)
    offsets = [o for o, _ in RecordReader(path).records_with_offsets()]
    size = path.stat().st_size
    with open(path, "rb") as raw:
        for start in range(0, size):
            want = next((o for o in offsets if o >= start), size)
            assert find_record_start(raw, start, size) == want, start


def test_byte_ranges_with_resync_partition_the_records(tmp_path):
    inner = _framing.frame_records([b"lookalike"])
    payloads = [bytes([i]) * (i * 7) + inner for i in range(60)]
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), payloads)
    size = path.stat().st_size
    for parts in (1, 2, 3, 7, 50):
        bounds = [size * i // parts for i in range(parts + 1)]
        got = []
        for a, b in zip(bounds, bounds[1:]):
            got.extend(RecordReader(path, start_offset=a, end_offset=b, resync=True))
        assert got == payloads, parts


def _read_ranges(path, parts):
    size = path.stat().st_size
    bounds = [size * i // parts for i in range(parts + 1)]
    got = []
    for a, b in zip(bounds, bounds[1:]):
        got.extend(RecordReader(path, start_offset=a, end_offset=b, resync=True))
    return got


@pytest.mark.parametrize("damage", ["payload", "length", "truncated"])
def test_byte_ranges_report_damage_near_split_points_instead_of_skipping_it(tmp_path, damage):
    # 24 records (the cut loop below tries every byte, two readers each: 40 records cost 2.5 CPU
    # s for the three cases): damage mid-file, and ranges from half the file to under a record
    payloads = [bytes([i]) * (20 + i) for i in range(24)]
    clean = tmp_path / "clean.tfrecord"
    records.write_records(str(clean), payloads)
    offsets = [o for o, _ in RecordReader(clean).records_with_offsets()]
    data = bytearray(clean.read_bytes())
    if damage == "payload":
        data[offsets[12] + 14] ^= 1
    elif damage == "length":
        data[offsets[12] + 1] ^= 1
    else:
        data = data[: offsets[23] + 20]
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(data))
    expected_error = TruncatedRecordError if damage == "truncated" else CorruptRecordError
    for parts in (2, 3, 5, 8, 13, 24, 97):
        with pytest.raises(expected_error):
            _read_ranges(path, parts)
    # wherever a split falls: the damage is reported by one of the two ranges, and a range
    # that does not raise returns exactly its records
    size = len(data)
    for cut in range(1, size):
        outcomes = []
        for kwargs in ({"end_offset": cut}, {"start_offset": cut, "resync": True}):
            try:
                outcomes.append(list(RecordReader(path, **kwargs)))
            except expected_error:
                outcomes.append(None)
        assert None in outcomes, cut
        if outcomes[0] is not None:
            assert outcomes[0] == [p for o, p in zip(offsets, payloads) if o < cut], cut


def test_resync_refuses_compressed_files(tmp_path):
    with pytest.raises(ValueError, match="resync needs an uncompressed file"):
        RecordReader(tmp_path / "x.tfrecord.gz", resync=True)


def test_reading_from_open_file_objects_and_file_uris(tmp_path):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), PAYLOADS)
    with open(path, "rb") as handle:
        assert list(RecordReader(handle)) == PAYLOADS
    assert list(RecordReader(io.BytesIO(path.read_bytes()))) == PAYLOADS
    assert list(RecordReader(f"file://{path}")) == PAYLOADS
    assert list(RecordReader(io.BytesIO(gzip.compress(path.read_bytes())), "gzip")) == PAYLOADS


def test_pyarrow_filesystem_uri(tmp_path):
    # a URI scheme resolved by pyarrow.fs (the same code path as gs:// and s3://)
    pytest.importorskip("pyarrow.fs")
    path = tmp_path / "d.tfrecord"
    records.write_records(f"file://{path}", PAYLOADS)
    assert list(RecordReader(f"file://{path}")) == PAYLOADS


def test_writer_index_in_the_same_pass(tmp_path):
    from tfrecord_beam import index

    for compression in (None, "gzip"):
        path = tmp_path / f"d-{compression}.tfrecord"
        with RecordWriter(path, compression, index_path=True) as writer:
            writer.write_many(PAYLOADS)
        idx_path = index.default_index_path(str(path))
        assert np.array_equal(index.load_index(idx_path), index.build_index(path, compression))


def test_interrupted_write_leaves_nothing(tmp_path):
    path = tmp_path / "d.tfrecord"
    with pytest.raises(RuntimeError):
        with RecordWriter(path, index_path=True) as writer:
            writer.write(b"one")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_nothing_appears_before_close_and_abort_removes_it(tmp_path):
    path = tmp_path / "d.tfrecord"
    writer = RecordWriter(path)
    writer.write(b"x")
    writer.flush()
    assert not path.exists()
    writer.abort()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"y")


def test_write_framed_checks_sizes(tmp_path):
    framed = _framing.frame_records([b"ab", b"c"])
    with RecordWriter(tmp_path / "d.tfrecord", index_path=True) as writer:
        with pytest.raises(ValueError, match="add up"):
            writer.write_framed(framed, [18])
        writer.write_framed(framed, [18, 17])
    assert list(RecordReader(tmp_path / "d.tfrecord")) == [b"ab", b"c"]
    assert (tmp_path / "d.tfindex").read_text() == "0 18\n18 17\n"


def test_errors_are_picklable():
    import pickle

    err = CorruptRecordError("f", 10, 2, "payload CRC mismatch")
    again = pickle.loads(pickle.dumps(err))
    assert (again.path, again.offset, again.record_number, str(again)) == ("f", 10, 2, str(err))


def test_resync_on_a_non_seekable_source_is_refused(tmp_path):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), PAYLOADS)

    class Stream(io.RawIOBase):
        def __init__(self, data):
            self._inner = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            return self._inner.readinto(b)

        def seek(self, *a):
            raise io.UnsupportedOperation("not seekable")

    with pytest.raises(ValueError, match="resync needs a seekable file"):
        list(RecordReader(Stream(path.read_bytes()), None, start_offset=5, resync=True))
    assert list(RecordReader(Stream(path.read_bytes()), None)) == PAYLOADS


def test_an_empty_range_owns_nothing(tmp_path):
    path = tmp_path / "d.tfrecord"
    path.write_bytes(_framing.frame_records([b"abc"])[:5])  # cut inside record 0's header
    assert list(RecordReader(path, start_offset=0, end_offset=0)) == []
    with pytest.raises(TruncatedRecordError):
        list(RecordReader(path, start_offset=0, end_offset=1))


def test_zero_padding_after_a_gzip_stream_is_ignored(tmp_path):
    path = tmp_path / "padded.tfrecord.gz"
    path.write_bytes(gzip.compress(_framing.frame_records(PAYLOADS)) + b"\0" * 4096)
    assert list(RecordReader(path)) == PAYLOADS
    path.write_bytes(gzip.compress(_framing.frame_records(PAYLOADS)) + b"\0" * 8 + b"junk")
    with pytest.raises(CorruptRecordError):
        list(RecordReader(path))


def test_resync_inside_a_big_record_with_a_header_like_run_deep_in_it(tmp_path):
    # 12 bytes that pass the length CRC, 2 MiB into a 3 MiB payload (beyond the 1 MiB look-back)
    planted = _framing.frame_header(1 << 40)
    big = bytearray(os.urandom(3 << 20))
    big[2 << 20 : (2 << 20) + 12] = planted
    payloads = [b"first", bytes(big), b"after"]
    path = tmp_path / "big.tfrecord"
    records.write_records(str(path), payloads)
    offsets = [o for o, _ in RecordReader(path).records_with_offsets()]
    cut = offsets[1] + 1000
    assert list(RecordReader(path, start_offset=cut, resync=True)) == [b"after"]
    assert list(RecordReader(path, end_offset=cut)) == payloads[:2]


def test_resync_skips_a_small_fake_frame_inside_a_payload(tmp_path):
    fake = _framing.frame_header(28) + b"x" * 28  # a header whose record would not check out
    payloads = [b"a" * 10, fake, b"b" * 10]
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), payloads)
    offsets = [o for o, _ in RecordReader(path).records_with_offsets()]
    for cut in range(offsets[1] + 1, offsets[2] + 1):
        assert list(RecordReader(path, start_offset=cut, resync=True)) == [b"b" * 10], cut
