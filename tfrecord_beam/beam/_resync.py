"""Finding the next true record boundary in an uncompressed file without an index.

A byte-range split can start inside a record. As text sources skip to the next newline, we
skip to the next *valid* record: the core's `records.find_record_start` finds a frame whose
length CRC and payload CRC hold and which is followed by a valid header (or the end of the
file). Payloads can themselves hold framed TFRecords, so here a candidate must also start a
chain of valid frames for `RESYNC_LOOKAHEAD` bytes (or to the end of the file):

* the chain breaks on a bad *length* CRC  -> the candidate was inside a payload: keep looking;
* it breaks on a bad *payload* CRC        -> accept: the reader reports that corrupt record;
* it ends in a fragment at end of file    -> a false chain inside the last record when such a
  record encloses the candidate (checked), else a truncated file: accept, the reader reports it.

Every reader of the same file reaches the same answer for the same bytes, which is what keeps
split readers consistent. Nested framed data longer than the lookahead can still fool it;
files with a `.tfindex` (the sink writes them) are split exactly and never resync.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

from .. import _engine
from .._framing_py import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    STATUS_BAD_LENGTH_CRC,
    STATUS_INCOMPLETE,
)
from ..records import find_record_start

RESYNC_LOOKAHEAD = 1 << 18


def next_record_start(raw: BinaryIO, offset: int, total: int, lookahead: int = RESYNC_LOOKAHEAD) -> int:
    """The offset of the first true record boundary at or after `offset` (`total` when none)."""
    if offset <= 0:
        return 0
    pos = offset
    while pos < total:
        candidate = find_record_start(raw, pos, total)
        if candidate >= total or _chain_holds(raw, candidate, total, lookahead):
            return candidate
        pos = candidate + 1
    return total


def _chain_holds(raw: BinaryIO, start: int, total: int, lookahead: int) -> bool:
    raw.seek(start)
    buf = raw.read(min(lookahead, total - start))
    _, _, consumed, status = _engine.scan_frames(buf, True)
    end = start + consumed
    if end == total:
        return True
    if status == STATUS_BAD_LENGTH_CRC:
        return False
    if status == STATUS_INCOMPLETE and start + len(buf) == total:
        return not _inside_last_record(raw, start, total, lookahead)
    return True


def _inside_last_record(raw: BinaryIO, candidate: int, total: int, lookahead: int) -> bool:
    """True when a valid record that ends exactly at end of file encloses `candidate`."""
    first = max(0, candidate - lookahead)
    raw.seek(first)
    before = raw.read(candidate - first)
    for header in range(len(before) - HEADER_SIZE, -1, -1):
        (length,) = struct.unpack_from("<Q", before, header)
        at = first + header
        if at + FRAME_OVERHEAD + length != total:
            continue
        raw.seek(at)
        frame = raw.read(FRAME_OVERHEAD + length)
        _, _, consumed, _ = _engine.scan_frames(frame, True, 1)
        if consumed == len(frame):
            return True
    return False
