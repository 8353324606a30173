"""Pure-Python twin of the compiled framing hot paths: scan frames, check CRCs, frame payloads,
find candidate headers, walk the headers of a file.

The compiled module (`tfrecord_beam._native._core`) exposes the same functions with the same
results; `tfrecord_beam._engine` picks one of the two in one place. The constants both share
(frame layout, status codes, verify levels) are in `tfrecord_beam._engine._common`.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import List, Sequence, Tuple

import google_crc32c
import numpy as np

from ._common import (
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    MASK_DELTA,
    STATUS_BAD_DATA_CRC,
    STATUS_BAD_LENGTH_CRC,
    STATUS_INCOMPLETE,
    STATUS_OK,
    VERIFY_ALL,
    VERIFY_LENGTHS,
    VERIFY_NONE,
    WALK_BAD_LENGTH_CRC,
    WALK_DONE,
    WALK_PAST_END,
    WALK_SHORT_HEADER,
)

__all__ = [
    "masked_crc32c",
    "scan_frames",
    "find_length_crc",
    "find_length_crcs",
    "frame_header",
    "frame_records",
    "append_frame",
    "walk_headers",
    "slice_payloads",
]

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_HEADER = struct.Struct("<QI")


def masked_crc32c(data) -> int:
    """TFRecord's masked CRC32C of `data` (bytes-like)."""
    if not isinstance(data, bytes):
        data = bytes(data)  # google_crc32c.value rejects memoryview slices
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def scan_frames(buf, verify: int = VERIFY_ALL, max_records: int = -1) -> Tuple[np.ndarray, np.ndarray, int, int]:
    """Find the complete records at the start of `buf`.

    `verify`: VERIFY_ALL (True) checks both CRCs, VERIFY_LENGTHS only the length CRCs,
    VERIFY_NONE (False) neither.

    Returns `(payload_offsets, payload_lengths, consumed, status)`: offsets (int64) of each
    payload inside `buf`, their lengths, the number of bytes those frames cover, and why the
    scan stopped: STATUS_OK (end of `buf` or `max_records` reached), STATUS_INCOMPLETE (`buf`
    ends inside the frame starting at `consumed`), STATUS_BAD_LENGTH_CRC / STATUS_BAD_DATA_CRC
    (the frame starting at `consumed` fails a CRC; only when `verify`).
    """
    if verify not in (VERIFY_NONE, VERIFY_ALL, VERIFY_LENGTHS):
        raise ValueError(f"verify must be 0, 1 (True) or 2 (lengths only), not {verify!r}")
    check_payloads = verify == VERIFY_ALL
    view = memoryview(buf).cast("B")
    size = len(view)
    if verify == VERIFY_NONE and max_records < 0:
        return _scan_unverified(view, size)
    offsets: List[int] = []
    lengths: List[int] = []
    pos = 0
    status = STATUS_OK
    while pos < size and (max_records < 0 or len(offsets) < max_records):
        if size - pos < HEADER_SIZE:
            status = STATUS_INCOMPLETE
            break
        length, length_crc = _HEADER.unpack_from(view, pos)
        if verify and masked_crc32c(view[pos : pos + 8]) != length_crc:
            status = STATUS_BAD_LENGTH_CRC
            break
        if length > size - pos - FRAME_OVERHEAD:
            status = STATUS_INCOMPLETE
            break
        start = pos + HEADER_SIZE
        if check_payloads:
            (data_crc,) = _U32.unpack_from(view, start + length)
            if masked_crc32c(view[start : start + length]) != data_crc:
                status = STATUS_BAD_DATA_CRC
                break
        offsets.append(start)
        lengths.append(length)
        pos = start + length + FOOTER_SIZE
    return (
        np.asarray(offsets, dtype=np.int64),
        np.asarray(lengths, dtype=np.int64),
        pos,
        status,
    )


def _scan_unverified(view: memoryview, size: int) -> Tuple[np.ndarray, np.ndarray, int, int]:
    """`scan_frames(buf, VERIFY_NONE)`: only the lengths are read, offsets follow from them."""
    unpack = _U64.unpack_from
    lengths: list = []
    append = lengths.append
    pos, status = 0, STATUS_OK
    while pos < size:
        if size - pos < HEADER_SIZE:
            status = STATUS_INCOMPLETE
            break
        end = pos + unpack(view, pos)[0] + FRAME_OVERHEAD
        if end > size:
            status = STATUS_INCOMPLETE
            break
        append(end - pos - FRAME_OVERHEAD)
        pos = end
    lens = np.asarray(lengths, dtype=np.int64)
    offsets = np.full(len(lens), HEADER_SIZE, dtype=np.int64)
    if len(lens) > 1:
        offsets[1:] += np.cumsum(lens[:-1] + FRAME_OVERHEAD)
    return offsets, lens, pos, status


def _window_crc_tables() -> Tuple[int, np.ndarray]:
    """CRC32C of 8 bytes is affine over GF(2): crc(x) = crc(0^8) ^ T[0][x0] ^ ... ^ T[7][x7].

    Returns (crc(0^8), T as an (8, 256) uint32 array), so the CRC of every 8-byte window of a
    buffer is 8 gathers and XORs in numpy.
    """
    zero = google_crc32c.value(bytes(8))
    tables = np.zeros((8, 256), dtype=np.uint32)
    for k in range(8):
        for b in range(256):
            window = bytearray(8)
            window[k] = b
            tables[k, b] = google_crc32c.value(bytes(window)) ^ zero
    return zero, tables


_WINDOW_CRC = None
_FIND_BLOCK = 1 << 8  # candidates are dense in record data: start small, grow 4x per block


def _length_crc_hits(data: np.ndarray, pos: int, n: int) -> np.ndarray:
    """Offsets (from `pos`) of the positions in [pos, pos + n) whose 8 bytes carry their
    masked CRC32C in the next 4; `data` must hold n + 11 bytes from `pos`."""
    global _WINDOW_CRC
    if _WINDOW_CRC is None:
        _WINDOW_CRC = _window_crc_tables()
    zero, tables = _WINDOW_CRC
    crc = np.full(n, zero, dtype=np.uint32)
    for k in range(8):
        crc ^= tables[k][data[pos + k : pos + k + n]]
    masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(MASK_DELTA)
    stored = np.zeros(n, dtype=np.uint32)
    for k in range(4):
        stored |= data[pos + 8 + k : pos + 8 + k + n].astype(np.uint32) << np.uint32(8 * k)
    return np.flatnonzero(masked == stored)


def find_length_crc(buf, start: int = 0) -> int:
    """The first position >= start whose 8 bytes carry their masked CRC32C in the next 4 (a
    candidate record header), or -1 when none does before the end of `buf`.

    Vectorised over blocks of positions (see `_window_crc_tables`), growing from 256.
    """
    if start < 0:
        raise ValueError("start must be >= 0")
    data = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
    last = len(data) - HEADER_SIZE  # the last position a header fits at
    pos, block = start, _FIND_BLOCK
    while pos <= last:
        n = min(block, last + 1 - pos)
        hits = _length_crc_hits(data, pos, n)
        if len(hits):
            return pos + int(hits[0])
        pos += n
        block *= 4
    return -1


def find_length_crcs(buf, start: int = 0) -> np.ndarray:
    """Every position >= start that `find_length_crc` would find, in order (int64)."""
    if start < 0:
        raise ValueError("start must be >= 0")
    data = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
    last = len(data) - HEADER_SIZE
    parts = [np.zeros(0, dtype=np.int64)]
    for pos in range(start, last + 1, 1 << 20):
        n = min(1 << 20, last + 1 - pos)
        parts.append(_length_crc_hits(data, pos, n).astype(np.int64) + pos)
    return np.concatenate(parts)


def frame_header(length: int) -> bytes:
    """The 12-byte header of a record of `length` payload bytes."""
    raw = _U64.pack(length)
    return raw + _U32.pack(masked_crc32c(raw))


def _mask(crc: np.ndarray) -> np.ndarray:
    """TFRecord's CRC mask over a uint32 array (rotate right by 15, add MASK_DELTA, wrapping)."""
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(MASK_DELTA)


def frame_records(payloads: Sequence[bytes]) -> bytes:
    """Frame many payloads (header, payload, footer each) into one buffer.

    The headers' CRCs are computed for all records at once (`_window_crc_tables`), the
    payloads' by google-crc32c one call each: 2x the record-by-record loop.
    """
    payloads = [p if isinstance(p, bytes) else bytes(memoryview(p).cast("B")) for p in payloads]
    n = len(payloads)
    if not n:
        return b""
    global _WINDOW_CRC
    if _WINDOW_CRC is None:
        _WINDOW_CRC = _window_crc_tables()
    zero, tables = _WINDOW_CRC
    lengths = np.fromiter(map(len, payloads), dtype="<u8", count=n)
    length_bytes = lengths.view(np.uint8).reshape(n, 8)
    crc = np.full(n, zero, dtype=np.uint32)
    for k in range(8):
        crc ^= tables[k][length_bytes[:, k]]
    heads = np.empty((n, 12), dtype=np.uint8)
    heads[:, :8] = length_bytes
    heads[:, 8:] = _mask(crc).astype("<u4").view(np.uint8).reshape(n, 4)
    feet = _mask(np.fromiter(map(google_crc32c.value, payloads), dtype=np.uint32, count=n)).astype("<u4").tobytes()
    head_bytes = heads.tobytes()
    parts: list = [b""] * (3 * n)
    parts[0::3] = [head_bytes[i : i + HEADER_SIZE] for i in range(0, HEADER_SIZE * n, HEADER_SIZE)]
    parts[1::3] = payloads
    parts[2::3] = [feet[i : i + FOOTER_SIZE] for i in range(0, FOOTER_SIZE * n, FOOTER_SIZE)]
    return b"".join(parts)


def append_frame(buf: bytearray, pos: int, payload) -> int:
    """Write the frame of `payload` into `buf` at `pos` (the buffer keeps its size); return
    where the frame ends, or -1 (nothing written) when it does not fit."""
    end = pos + len(memoryview(payload).cast("B")) + FRAME_OVERHEAD
    if pos < 0 or pos > len(buf):
        raise ValueError("position outside the buffer")
    if end > len(buf):
        return -1
    buf[pos:end] = frame_records([payload if isinstance(payload, bytes) else bytes(memoryview(payload).cast("B"))])
    return end


WALK_BLOCK = 64 * 1024
WALK_SMALL = FOOTER_SIZE + HEADER_SIZE  # a big record's read: the footer before its header, and the header


def walk_headers(
    fd: int, start: int, size: int, max_records: int = sys.maxsize
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The records of an uncompressed file (descriptor `fd`, `size` bytes) from `start`, read by
    their headers alone, at most `max_records` of them: `(header offsets, payload lengths,
    footers, stop, status)`; footers (uint32) are the payload CRCs as stored.

    Payloads are skipped (a small read at each header once records are large, a block of
    headers while they are small); each read starts 4 bytes before its header, so it brings
    the previous record's footer too. Every length CRC is checked, payload CRCs are not.
    status: WALK_DONE (reached `size`, or `max_records`: then `stop` < `size` is where the next
    record starts), WALK_SHORT_HEADER (fewer than 12 bytes left at `stop`), WALK_BAD_LENGTH_CRC
    or WALK_PAST_END (the frame at `stop` runs past `size`, or its footer is missing: the file
    shrank under the walk).
    """
    if start < 0 or size < start:
        raise ValueError(f"bad range {start}..{size}")
    if max_records < 1:
        raise ValueError(f"max_records must be at least 1, not {max_records}")
    offsets: List[int] = []
    lengths: List[int] = []
    footers: List[int] = []
    pos, want, status, due = start, WALK_BLOCK, WALK_DONE, False
    while (pos < size and len(offsets) < max_records) or due:
        base = pos - FOOTER_SIZE if due else pos
        ask = want if pos < size and len(offsets) < max_records else FOOTER_SIZE  # only the last footer left
        block = os.pread(fd, min(ask, size - base), base)
        if due and len(block) < FOOTER_SIZE:  # the file shrank under us: drop the footless record
            pos = offsets.pop()
            lengths.pop()
            status = WALK_PAST_END
            break
        had = len(offsets)
        while True:
            if due and pos - base >= FOOTER_SIZE and pos - base <= len(block):  # the footer before pos
                footers.append(_U32.unpack_from(block, pos - base - FOOTER_SIZE)[0])
                due = False
            if not (len(offsets) < max_records and pos - base + HEADER_SIZE <= len(block)):
                break
            length, length_crc = _HEADER.unpack_from(block, pos - base)
            if masked_crc32c(block[pos - base : pos - base + 8]) != length_crc:
                status = WALK_BAD_LENGTH_CRC
                break
            if length > size - pos - FRAME_OVERHEAD:
                status = WALK_PAST_END
                break
            offsets.append(pos)
            lengths.append(length)
            due = True
            pos += FRAME_OVERHEAD + length
        if status != WALK_DONE:
            break
        if len(offsets) == had and pos < size and len(offsets) < max_records:  # no header at pos
            status = WALK_SHORT_HEADER
            break
        if len(offsets) > had:
            want = WALK_SMALL if lengths[-1] + FRAME_OVERHEAD >= WALK_BLOCK // 8 else WALK_BLOCK
    return (
        np.asarray(offsets, dtype=np.int64),
        np.asarray(lengths, dtype=np.int64),
        np.asarray(footers, dtype=np.uint32),
        pos,
        status,
    )


def slice_payloads(buffer, offsets, lengths) -> List[bytes]:
    """`buffer[offsets[i] : offsets[i] + lengths[i]]` for each i, as bytes (a chunk's payloads);
    ValueError for a slice outside the buffer."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if len(offsets) != len(lengths):
        raise ValueError("offsets and lengths differ in length")
    size = len(buffer)
    bad = np.flatnonzero((offsets < 0) | (lengths < 0) | (offsets > size) | (lengths > size - offsets))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"payload {i} (offset {offsets[i]}, length {lengths[i]}) is outside the {size}-byte buffer")
    if not isinstance(buffer, bytes):  # a view (of a read-ahead block): not the whole of it copied
        view = memoryview(buffer).cast("B")
        return [view[o : o + n].tobytes() for o, n in zip(offsets.tolist(), lengths.tolist())]
    return [buffer[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist())]
