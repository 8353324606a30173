"""Damage and hostile lengths inside GZIP/ZLIB streams (issue 10 items 1 and 3).

Every record that inflated intact comes out before the error, the error names the uncompressed
offset where the damage begins, and no length field makes the reader allocate more than one
record plus its read buffer. Each case runs on both engines and both inflaters.
"""

from __future__ import annotations

import functools
import gzip
import io
import random
import re
import struct
import tracemalloc
import zlib

import pytest
from helpers import codecs

from tfrecord_beam import _streams, records
from tfrecord_beam._engine import _framing
from tfrecord_beam.compression import suffix
from tfrecord_beam.errors import CorruptRecordError, TruncatedRecordError
from tfrecord_beam.records import RecordReader

COMPRESS = {"gzip": gzip.compress, "zlib": zlib.compress}
SUFFIX = {"gzip": ".tfrecord.gz", "zlib": ".tfrecord.zlib"}  # the deflate streams (zstd: test_zstd)


def _read_until_error(path, **kwargs):
    """(payloads read before the error, the error or None)."""
    got = []
    try:
        for payload in RecordReader(path, **kwargs):
            got.append(payload)
    except CorruptRecordError as exc:
        return got, exc
    return got, None


def _header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", _framing.masked_crc32c(raw))


# -- item 1: damage keeps the records before it ---------------------------------------------------


@pytest.mark.parametrize("compression", codecs.COMPRESSED)
def test_garbage_after_the_stream_keeps_every_record_before_it(tmp_path, engine, inflater, compression):
    payloads = [b"record-%02d-" % i * 7 for i in range(10)]
    stream = _framing.frame_records(payloads)
    path = tmp_path / ("d.tfrecord" + suffix(compression))
    blob = codecs.compress(compression, stream)
    path.write_bytes(blob + b"GARBAGE-GARBAGE")
    got, err = _read_until_error(path)
    assert got == payloads
    assert isinstance(err, CorruptRecordError) and not isinstance(err, TruncatedRecordError)
    assert (err.path, err.offset, err.record_number) == (str(path), len(stream), 10)
    assert f"compressed offset {len(blob)}" in err.reason
    # the chunk and index paths see the same records before the same error
    chunks = []
    with pytest.raises(CorruptRecordError) as info:
        for chunk in RecordReader(path).chunks():
            chunks.extend(chunk.payloads())
    assert chunks == payloads and info.value.offset == len(stream)


def _stored_blocks(data: bytes, block: int) -> bytes:
    """Raw deflate of `data` as stored blocks of `block` bytes (so damage can be put exactly)."""
    out = bytearray()
    for start in range(0, len(data), block):
        piece = data[start : start + block]
        final = start + block >= len(data)
        out += bytes([1 if final else 0]) + struct.pack("<HH", len(piece), len(piece) ^ 0xFFFF) + piece
    return bytes(out)


def _wrap(deflate: bytes, data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        return head + deflate + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return b"\x78\x01" + deflate + struct.pack(">I", zlib.adler32(data))


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_damage_mid_stream_of_a_multi_mib_file_keeps_every_intact_record(tmp_path, engine, inflater, compression):
    payloads = [bytes([i % 251]) * (700 + 37 * (i % 50)) for i in range(4000)]  # ~4.2 MB of records
    stream = _framing.frame_records(payloads)
    block = 60_000
    blob = bytearray(_wrap(_stored_blocks(stream, block), stream, compression))
    head = 10 if compression == "gzip" else 2
    bad_block = 45  # its NLEN no longer matches: inflating stops exactly at 45 * 60,000 bytes
    at = head + bad_block * (5 + block) + 3
    blob[at] ^= 0xFF
    path = tmp_path / ("big" + SUFFIX[compression])
    path.write_bytes(bytes(blob))
    damage = bad_block * block
    ends = [o + _framing.FRAME_OVERHEAD + len(p) for o, p in records_offsets(payloads)]
    intact = sum(1 for e in ends if e <= damage)
    got, err = _read_until_error(path)
    assert got == payloads[:intact] and intact > 1500
    assert (err.offset, err.record_number) == (damage, intact)
    where = int(re.search(r"\(compressed offset (\d+)\)", err.reason).group(1))
    assert at - 3 <= where <= at + 2  # the stored block whose header is damaged


def test_damage_in_a_later_gzip_member_keeps_the_earlier_members_and_its_intact_start(tmp_path, engine, inflater):
    first = [b"first-%04d" % i * 30 for i in range(3000)]
    second = [b"second-%04d" % i * 30 for i in range(3000)]
    s1, s2 = _framing.frame_records(first), _framing.frame_records(second)
    member2 = bytearray(_wrap(_stored_blocks(s2, 50_000), s2, "gzip"))
    member2[10 + 7 * 50_005 + 3] ^= 0xFF  # the 8th stored block of member 2
    path = tmp_path / "cat.tfrecord.gz"
    path.write_bytes(gzip.compress(s1) + bytes(member2))
    damage = len(s1) + 7 * 50_000
    intact = sum(1 for o, p in records_offsets(first + second) if o + _framing.FRAME_OVERHEAD + len(p) <= damage)
    got, err = _read_until_error(path)
    assert got == (first + second)[:intact] and intact > len(first)
    assert (err.offset, err.record_number) == (damage, intact)


def records_offsets(payloads):
    offset = 0
    for p in payloads:
        yield offset, p
        offset += _framing.FRAME_OVERHEAD + len(p)


def test_damage_in_a_stream_that_cannot_be_re_read_is_still_reported_after_the_good_records(engine):
    payloads = [b"x" * 100] * 10
    stream = _framing.frame_records(payloads)

    class Pipe(io.RawIOBase):  # read() only: no seek, no tell
        def __init__(self, data):
            self._data = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            return self._data.readinto(b)

    got, err = _read_until_error(Pipe(gzip.compress(stream) + b"GARBAGE-GARBAGE"), compression="gzip")
    assert got == payloads and err.offset == len(stream) and err.record_number == 10


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_beam_skip_corrupt_keeps_the_records_before_compressed_damage(tmp_path, engine, compression):
    pytest.importorskip("apache_beam")
    from apache_beam.io import source_test_utils

    from tfrecord_beam.beam import CorruptRecord
    from tfrecord_beam.beam.source import _TFRecordSource

    payloads = [b"payload-%03d" % i * 20 for i in range(300)]
    stream = _framing.frame_records(payloads)
    path = tmp_path / ("d" + SUFFIX[compression])
    path.write_bytes(COMPRESS[compression](stream) + b"GARBAGE-GARBAGE")
    source = _TFRecordSource(str(path), compression_type=compression, skip_corrupt=True)
    got = source_test_utils.read_from_source(source)
    assert got[:-1] == payloads
    bad = got[-1]
    assert isinstance(bad, CorruptRecord) and bad.file == str(path) and bad.offset == len(stream)
    assert sum(isinstance(g, CorruptRecord) for g in got) == 1


# -- item 3: hostile lengths do not allocate --------------------------------------------------------


def _hostile_gzip(tmp_path, claimed: int, zeros: int, compression: str = "gzip"):
    """Two good records, then a header claiming `claimed` bytes (valid length CRC), then zeros."""
    path = tmp_path / ("hostile" + SUFFIX[compression])
    path.write_bytes(_hostile_blob(claimed, zeros, compression))
    return path, 2 * (_framing.FRAME_OVERHEAD + 50)


@functools.lru_cache(maxsize=None)
def _hostile_blob(claimed: int, zeros: int, compression: str) -> bytes:
    good = _framing.frame_records([b"a" * 50, b"b" * 50])
    comp = zlib.compressobj(9, zlib.DEFLATED, _streams.WBITS[compression])
    parts = [comp.compress(good + _header(claimed))]
    block = bytes(1 << 20)
    for _ in range(zeros >> 20):
        parts.append(comp.compress(block))
    parts.append(comp.flush())
    return b"".join(parts)


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_a_hostile_length_in_a_compressed_stream_errors_before_allocating(tmp_path, engine, compression):
    path, good = _hostile_gzip(tmp_path, 1 << 62, 64 << 20, compression)  # ~65 KB on disk
    seen = []

    def read():
        with pytest.raises(TruncatedRecordError) as info:
            for payload in RecordReader(path):
                seen.append(payload)
        assert (info.value.offset, info.value.record_number) == (good, 2)
        assert str(1 << 62) in str(info.value) and "can inflate to at most" in str(info.value)

    assert _peak_bytes(read) < 12 << 20  # the 64 MB of zeros are never held
    assert seen == [b"a" * 50, b"b" * 50]


def test_the_maximum_record_size_bounds_a_stream_of_unknown_size(tmp_path, engine):
    path, good = _hostile_gzip(tmp_path, 1 << 62, 32 << 20)

    def read(**kwargs):
        with open(path, "rb") as fh:
            pipe = io.BufferedReader(_NoSeek(fh))
            with pytest.raises(CorruptRecordError) as info:
                list(RecordReader(pipe, "gzip", **kwargs))
            return info.value

    err = read()
    assert (err.offset, err.record_number) == (good, 2) and "max_record_size" in err.reason
    assert _peak_bytes(read) < 12 << 20
    # a claim under the maximum reads what is there (one record at most), then reports the cut
    path2, _ = _hostile_gzip(tmp_path, 1 << 30, 8 << 20)
    with open(path2, "rb") as fh, pytest.raises(TruncatedRecordError):
        list(RecordReader(io.BufferedReader(_NoSeek(fh)), "gzip"))


class _NoSeek(io.RawIOBase):
    def __init__(self, fh):
        self._fh = fh

    def readable(self):
        return True

    def readinto(self, b):
        return self._fh.readinto(b)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_records_over_max_record_size_are_errors_after_the_records_before(tmp_path, engine, compression):
    payloads = [b"s" * 100, b"t" * 200, b"u" * 5000, b"v" * 100]
    path = tmp_path / ("d" + (SUFFIX[compression] if compression else ".tfrecord"))
    records.write_records(str(path), payloads)
    for chunk_size in (64, 1 << 20):  # the long record cut by the chunk, or whole inside it
        got, err = _read_until_error(path, max_record_size=1000, chunk_size=chunk_size)
        assert got == payloads[:2]
        assert (err.offset, err.record_number) == (2 * 16 + 300, 2) and "max_record_size (1000)" in err.reason
    assert list(RecordReader(path, max_record_size=5000)) == payloads
    with pytest.raises(ValueError):
        RecordReader(path, max_record_size=-1)


def _inflates_before_damage(blob: bytes, compression: str) -> bytes:
    """Reference: what zlib inflates fed one byte at a time, up to the first byte it rejects."""
    z = zlib.decompressobj(_streams.WBITS[compression])
    out = []
    for i in range(len(blob)):
        try:
            out.append(z.decompress(blob[i : i + 1]))
        except zlib.error:
            break
        if z.eof:
            break
    return b"".join(out)


@functools.lru_cache(maxsize=None)
def _random_damage_cases(seed: int) -> list:
    """Six damaged streams of a seed and what the reference inflates intact from each: the same
    for every engine and inflater, so drawn and inflated byte by byte once (the reference and
    the drawing were ~80% of the test's CPU when each of the 4 engine x inflater cases redid them)."""
    rng = random.Random(seed)
    cases = []
    for case in range(6):
        payloads = [bytes(rng.randrange(6) for _ in range(rng.randrange(10, 300))) for _ in range(200)]
        stream = _framing.frame_records(payloads)
        compression = rng.choice(["gzip", "zlib"])
        blob = bytearray(COMPRESS[compression](stream))
        for _ in range(rng.randrange(1, 4)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        good = _inflates_before_damage(bytes(blob), compression)
        offsets, lengths, _, _ = _framing.scan_frames(good)
        expected = [good[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist())]
        damaged = len(good) < len(stream) or good != stream
        cases.append((case, compression, bytes(blob), expected, damaged, rng.choice([64, 1000, 1 << 20])))
    return cases


@pytest.mark.parametrize("seed", range(3))
def test_random_damage_delivers_exactly_the_records_that_inflate_intact(tmp_path, engine, inflater, seed):
    for case, compression, blob, expected, damaged, chunk_size in _random_damage_cases(seed):
        path = tmp_path / f"{case}{SUFFIX[compression]}"
        path.write_bytes(blob)
        got, err = _read_until_error(path, chunk_size=chunk_size)
        assert got == expected, (seed, case)
        if damaged:
            assert err is not None  # damage is always reported


def test_mid_stream_damage_in_a_stream_that_cannot_be_re_read_keeps_every_intact_record(engine):
    payloads = [bytes([i % 251]) * 900 for i in range(3000)]
    stream = _framing.frame_records(payloads)
    blob = bytearray(_wrap(_stored_blocks(stream, 40_000), stream, "gzip"))
    blob[10 + 30 * 40_005 + 3] ^= 0xFF  # stored block 30's NLEN
    with io.BytesIO(bytes(blob)) as fh:
        got, err = _read_until_error(io.BufferedReader(_NoSeek(fh)), compression="gzip")
    intact = sum(1 for o, p in records_offsets(payloads) if o + _framing.FRAME_OVERHEAD + len(p) <= 30 * 40_000)
    assert got == payloads[:intact] and (err.offset, err.record_number) == (30 * 40_000, intact)
