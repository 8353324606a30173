"""Index building by header walk (payloads skipped) against the reader's full scan: the same
index, and the same error (class, offset, record, message) on damaged files, on both engines,
whatever the walk's window (windows ending inside headers, payloads and footers, records
larger than a window); counting walks in bounded memory."""

from __future__ import annotations

import os
import struct
import tracemalloc

import numpy as np
import pytest
from helpers.parity import NATIVE, both

from tfrecord_beam import index, records
from tfrecord_beam._engine import _framing
from tfrecord_beam.cli.inspection import count_records
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.tools import tfrecord2idx

WALKERS = [pytest.param(_framing.walk_headers, id="pure")]
if NATIVE is not None:
    WALKERS.append(pytest.param(NATIVE.walk_headers, id="native"))


def _by_reader(path):
    """What the index was before the walk: every chunk read, length CRCs checked."""
    parts = [
        np.stack([c.record_offsets, c.payload_lengths + 16], axis=1)
        for c in records.RecordReader(str(path), None, verify=_framing.VERIFY_LENGTHS).chunks()
    ]
    return np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except TFRecordError as exc:
        return (type(exc), exc.path, exc.offset, exc.record_number, str(exc))


def _data(rng):
    sizes = [0, 1, 5, 100, 3000, 9000, 20000, 70000, 10, 300000, 0, 7]
    return [rng.bytes(int(s)) for s in rng.permutation(sizes)] + [rng.bytes(int(n)) for n in rng.integers(0, 50, 400)]


DAMAGE = [
    "none",
    "empty",
    "cut header",
    "cut payload",
    "cut footer",
    "bad length crc",
    "late bad length crc",
    "huge length",
    "junk tail",
]
# the default window (the whole of these files), windows ending anywhere in a record, and
# windows smaller than a header (each record needs windows of its own size)
WINDOWS = [index.WALK_WINDOW, 1000, 7]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_walk_matches_the_full_scan(tmp_path, monkeypatch, walker, damage, window):
    monkeypatch.setattr(index, "WALK_WINDOW", window)
    rng = np.random.default_rng(DAMAGE.index(damage))
    path = tmp_path / "d.tfrecord"
    payloads = _data(rng)
    records.write_records(str(path), payloads)
    raw = bytearray(path.read_bytes())
    starts = np.cumsum([0] + [len(p) + 16 for p in payloads])
    victim = int(starts[7])  # a record after the big ones
    if damage == "empty":
        raw = bytearray()
    elif damage == "cut header":
        raw = raw[: victim + 5]
    elif damage == "cut payload":
        raw = raw[: victim + 14]
    elif damage == "cut footer":
        raw = raw[: int(starts[8]) - 2]
    elif damage == "bad length crc":
        raw[victim + 9] ^= 0xFF
    elif damage == "late bad length crc":  # far beyond the first windows (record 300 of 412)
        raw[int(starts[300]) + 9] ^= 0xFF
    elif damage == "huge length":
        raw[victim : victim + 12] = _framing.frame_header(1 << 40)
    elif damage == "junk tail":
        raw += b"\x01\x02\x03"
    path.write_bytes(bytes(raw))
    expected = _outcome(_by_reader, path)
    monkeypatch.setattr(index._engine, "walk_headers", walker)
    got = _outcome(index.build_index, str(path))
    if isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray) and np.array_equal(got, expected)
        assert count_records(str(path), use_index=False) == (len(expected), "scan")
        assert list(index.iter_frames(str(path))) == [tuple(row) for row in expected.tolist()]
    else:
        assert got == expected
        assert _outcome(lambda p: count_records(p, use_index=False), str(path)) == expected
    assert _outcome(tfrecord2idx.create_index, str(path), str(tmp_path / "x.tfindex")) == (
        len(expected) if isinstance(expected, np.ndarray) else expected
    )
    if not isinstance(expected, np.ndarray):
        assert not os.path.exists(tmp_path / "x.tfindex")


def test_verify_still_reads_payloads(tmp_path):
    path = tmp_path / "d.tfrecord"
    records.write_records(str(path), [b"a" * 100, b"b" * 100])
    raw = bytearray(path.read_bytes())
    raw[20] ^= 1  # inside the first payload: only its CRC sees it
    path.write_bytes(bytes(raw))
    assert len(index.build_index(str(path))) == 2
    with pytest.raises(records.CorruptRecordError, match="payload CRC"):
        index.build_index(str(path), verify=True)


@pytest.mark.parametrize("walker", WALKERS)
def test_walk_reads_headers_only_for_large_records(tmp_path, walker):
    """With big records the walk reads a small block at each header, not the payloads."""
    path = tmp_path / "big.tfrecord"
    records.write_records(str(path), [bytes(200_000)] * 20)
    fd = os.open(path, os.O_RDONLY)
    reads = []
    real = os.pread

    def counting(f, n, at):
        reads.append(n)
        return real(f, n, at)

    try:
        if walker is _framing.walk_headers:
            os.pread = counting
        offsets, lengths, footers, stop, status = walker(fd, 0, os.fstat(fd).st_size)
    finally:
        os.pread = real
        os.close(fd)
    assert status == 0 and stop == path.stat().st_size and len(offsets) == 20
    assert np.array_equal(lengths, [200_000] * 20)
    assert footers.tolist() == [_framing.masked_crc32c(bytes(200_000))] * 20
    if reads:
        assert sum(reads) < 20 * 70_000  # far less than the 4 MB of payloads
        # after the first block: one read a header, of it and the footer before it; one for the last footer
        assert reads[1:] == [16] * 19 + [4]


@pytest.mark.parametrize("walker", WALKERS)
def test_count_holds_a_window_not_the_file(tmp_path, monkeypatch, walker):
    """Counting allocates about one window's rows (tracemalloc sees numpy's arrays and Python's
    objects), not the file's: the whole-file walk held 16 B of rows per record, the pure one
    a Python list of them, then count made one Python list per record."""
    n, window, factor = 1_000_000, index.WALK_WINDOW, 4  # 20 MB; measured: 2 windows (native)
    if walker is _framing.walk_headers:  # a Python loop under tracemalloc: fewer records, smaller windows
        n, window, factor = 10_000, 8192, 10  # measured: ~6 windows (its lists of ints)
        monkeypatch.setattr(index, "WALK_WINDOW", window)
    path = tmp_path / "many.tfrecord"
    path.write_bytes(_framing.frame_records([b"abcd"]) * n)  # 20-byte frames: windows end mid-record
    monkeypatch.setattr(index._engine, "walk_headers", walker)
    assert 16 * n > factor * window  # the whole file's rows alone would break the bound
    tracemalloc.start()
    try:
        assert count_records(str(path), use_index=False) == (n, "scan")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < factor * window, peak


def test_create_index_holds_the_index_once(tmp_path, monkeypatch):
    """Building and writing an index allocates the index (16 B a record, a quarter of slack
    while it grows) and one slice's text: not the chunks and their concatenation as well, nor
    the whole index as Python ints and text (old code: 3x the bound here)."""
    from tfrecord_beam import _tfindex

    n = 100_000
    monkeypatch.setattr(_tfindex, "_FORMAT_ROWS", 4096)
    path = tmp_path / "many.tfrecord"
    path.write_bytes(_framing.frame_records([b"abcd"]) * n)
    tracemalloc.start()
    try:
        built = index.create_index(str(path), str(tmp_path / "many.tfindex"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(built, index.frame_index([20] * n))
    assert np.array_equal(index.load_index(str(tmp_path / "many.tfindex")), built)
    assert peak < 16 * n * 5 // 4 + (1 << 20), peak


# Frames (payload + 16) around the walk's read sizes: a big record's read (_framing.WALK_SMALL,
# its footer and the next header), a page, the big-record threshold (WALK_BLOCK / 8) and the
# 64 KiB block, and tiny ones between them.
EDGES = [_framing.WALK_SMALL, 4096, _framing.WALK_BLOCK // 8, _framing.WALK_BLOCK]
EDGE_SIZES = [max(edge - 16 + d, 0) for edge in EDGES for d in (-5, -4, -1, 0, 1, 4)] + [0, 1, 3, 200]


def _walk_oracle(raw: bytes, start: int, size: int, limit: int):
    """The walk's answer read straight from the file's bytes (a plain sequential walk)."""
    offsets, lengths, footers, pos = [], [], [], start
    status = _framing.WALK_DONE
    while pos < size and len(offsets) < limit:
        if size - pos < 12:
            status = _framing.WALK_SHORT_HEADER
            break
        length, length_crc = struct.unpack_from("<QI", raw, pos)
        if _framing.masked_crc32c(raw[pos : pos + 8]) != length_crc:
            status = _framing.WALK_BAD_LENGTH_CRC
            break
        if length > size - pos - 16:
            status = _framing.WALK_PAST_END
            break
        offsets.append(pos)
        lengths.append(length)
        footers.append(struct.unpack_from("<I", raw, pos + 12 + length)[0])
        pos += 16 + length
    return (np.array(offsets, np.int64), np.array(lengths, np.int64), np.array(footers, np.uint32), pos, status)


def _edge_file(path, damage: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.permutation(EDGE_SIZES * 2)]
    raw = bytearray(_framing.frame_records([rng.bytes(s) for s in sizes]))
    starts = np.cumsum([0] + [s + 16 for s in sizes])
    victim = int(starts[len(sizes) // 2])
    if damage == "bad length crc":
        raw[victim + 3] ^= 0x40
    elif damage == "huge length":
        raw[victim : victim + 12] = _framing.frame_header(1 << 40)
    elif damage.startswith("cut"):  # in a header, a payload, a footer, just after a frame
        raw = raw[: {"cut header": victim + 7, "cut payload": victim + 20, "cut footer": victim - 2}[damage]]
    path.write_bytes(bytes(raw))
    return bytes(raw)


@pytest.mark.parametrize("damage", ["none", "bad length crc", "huge length", "cut header", "cut payload", "cut footer"])
def test_walk_headers_parity_and_footers(tmp_path, damage):
    """Both engines give the oracle's offsets, lengths, footers (the 4 bytes before each next
    header, the last record's at its frame's end), stop and status: whole files, windows ending
    anywhere (inside headers, payloads, footers), starts at record boundaries, record limits."""
    path = tmp_path / "e.tfrecord"
    raw = _edge_file(path, damage, seed=len(damage))
    starts = [0] + _walk_oracle(raw, 0, len(raw), 1 << 30)[0].tolist()
    rng = np.random.default_rng(7)
    cases = [(0, len(raw), 1 << 30), (0, len(raw), 1), (0, len(raw), 5)]
    cases += [(int(s), len(raw), 1 << 30) for s in rng.choice(starts, 6)]
    cases += [(0, int(e), int(k)) for e, k in zip(rng.integers(0, len(raw) + 1, 40), rng.integers(1, 40, 40))]
    cases += [
        (0, int(s) + d, 1 << 30) for s in starts[1:12] for d in (-4, -3, -1, 0, 1, 11, 12) if 0 <= s + d <= len(raw)
    ]
    fd = os.open(path, os.O_RDONLY)
    try:
        for start, size, limit in cases:
            got = both("walk_headers", fd, start, size, limit)
            want = _walk_oracle(raw, start, size, limit)
            assert len(got) == 5 and all(
                np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got[:3], want[:3])
            ), (start, size, limit)
            assert got[3:] == want[3:], (start, size, limit)
    finally:
        os.close(fd)


def test_walk_headers_bad_arguments_and_a_shrunk_file(tmp_path):
    path = tmp_path / "s.tfrecord"
    payloads = [bytes(20_000), b"x" * 9000]
    path.write_bytes(_framing.frame_records(payloads)[:-2])
    fd = os.open(path, os.O_RDONLY)
    try:
        assert both("walk_headers", fd, 0, 10, 0) is ValueError
        assert both("walk_headers", fd, 5, 4) is ValueError
        # told the file is 2 bytes longer than it is: the last record's footer cannot be read (the
        # file shrank under the walk): that record is dropped, and the walk stops at it, past the end
        got = both("walk_headers", fd, 0, 20_016 + 9000 + 16, 1 << 30)
        assert got[0].tolist() == [0] and got[3:] == (20_016, _framing.WALK_PAST_END)
    finally:
        os.close(fd)
