"""Record boundaries in uncompressed TFRecord bytes without an index (the resync of byte-range reads).

A *candidate* is a position whose 8 bytes carry their masked CRC32C in the next 4 (found in C
by `find_length_crc`). `Resync.find(offset)` returns the first candidate at or after `offset`
that it accepts:

* rejected when a record with both CRCs valid, starting up to RESYNC_LOOKBACK (1 MiB) before
  it, spans over it (record-like bytes inside that record's payload);
* else accepted when its own record passes both CRCs and valid headers tile the next
  RESYNC_LOOKAHEAD bytes (or the rest of the file, ending exactly at its end);
* else (its record or that chain is damaged) still accepted, so the reader reaches the damage
  and reports it, unless a record with both CRCs valid starting up to RESYNC_DEEP_LOOKBACK
  (64 MiB) before it spans over it.

Each decision depends on the candidate alone (never on where the search began), so a search
from any offset between two accepted candidates lands on the same one: that is what lets
byte ranges that tile a file agree on who owns each record, and what `check_split` relies on.

Linear time: the look-backs are sliding windows (candidates found in C a block at a time,
filtered in numpy; a monotonic deque holds the valid records that may still span a later
candidate), and chain walks run as one C scan of length CRCs and remember where they broke,
so a `Resync` asked for increasing offsets validates each candidate a bounded number of times,
whatever the damage (`bench/bench_resync.py`'s crafted-damage case). Its memory is bounded by
the windows, not the file. One `Resync` serves all the searches of one reader over one file.
Only a candidate's own record is CRC-checked in full, so a crafted file of many candidates
each claiming a long record that fits costs their lengths in CRC work.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import BinaryIO, Deque, Dict, Iterator, Optional, Tuple

import numpy as np

from . import _engine
from ._engine._common import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    STATUS_BAD_LENGTH_CRC,
    STATUS_INCOMPLETE,
    VERIFY_LENGTHS,
)
from .errors import SplitPointError

RESYNC_LOOKAHEAD = 1 << 20  # bytes of valid headers a boundary must start
RESYNC_LOOKBACK = 1 << 20  # bytes searched for a record spanning a candidate
RESYNC_DEEP_LOOKBACK = 1 << 26  # the same, for a candidate whose own record or chain is damaged

_BLOCK = 1 << 20  # bytes read at a time to find candidates and walk chains
_FIRST_BLOCK = 1 << 12  # the first read of a candidate search (it grows to _BLOCK)
_READ_AHEAD = 1 << 16  # bytes read at once for small reads
_MEMO_LIMIT = 1 << 18  # entries kept by each memo before it is cleared (results never depend on it)
_SMALL_STEP = 1 << 12  # window steps up to this many bytes enumerate candidates one at a time
_FAST_WALKS = 32  # chain walks done in one C scan before breaks make the Python walk take over
_HEADER = struct.Struct("<QI")
_U64 = struct.Struct("<Q")


def header_length(buf, pos: int = 0) -> Optional[int]:
    """The payload length in the 12-byte header at `buf[pos:]` when its length CRC is valid,
    else None (also when fewer than 12 bytes are there)."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    length, length_crc = _HEADER.unpack_from(buf, pos)
    return length if _engine.masked_crc32c(memoryview(buf)[pos : pos + 8]) == length_crc else None


class _SpanWindow:
    """Answers "does a valid record starting in [c - span, c) span over c?" for increasing c.

    Candidates are enumerated once as the window slides, and validated only when their length
    reaches past the query (queries only grow); the deque keeps (start, end) of valid records
    with decreasing ends, so its head is the furthest-reaching record in the window.
    A query behind the previous one, or past the window, starts the window afresh.
    """

    def __init__(self, resync: "Resync", span: int) -> None:
        self._resync = resync
        self._span = span
        self._cursor = -1  # candidates below it have been enumerated (-1: nothing yet)
        self._last = -1
        self._records: Deque[Tuple[int, int]] = deque()

    def spans(self, c: int) -> bool:
        low = max(0, c - self._span)
        if c < self._last or low > self._cursor:
            self._records.clear()
            self._cursor = low
        self._last = c
        records = self._records
        resync = self._resync
        # A record ending at or before this query ends before every later one: skip it unchecked.
        if c - self._cursor <= _SMALL_STEP:  # a short step: numpy's per-call cost would dominate
            reaching = [h for h in resync.candidates(self._cursor, c) if resync.claimed_end(h) > c]
        else:
            reaching = []
            for positions, lengths in resync.candidate_blocks(self._cursor, c):
                room = c - positions - FRAME_OVERHEAD  # the most length that still ends at or before c
                keep = (room < 0) | (lengths > np.maximum(room, 0).astype(np.uint64))
                reaching += positions[keep].tolist()
        for h in reaching:
            end = resync.record_end(h)
            if end:
                while records and records[-1][1] <= end:
                    records.pop()
                records.append((h, end))
        self._cursor = max(self._cursor, c)
        while records and records[0][0] < low:
            records.popleft()
        return bool(records) and records[0][1] > c


class Resync:
    """The deterministic boundary search over one seekable, uncompressed file (module docstring).

    `raw` is shared: every method seeks before it reads.
    """

    def __init__(self, raw: BinaryIO, total: int, path: Optional[str] = None) -> None:
        self.raw = raw
        self.total = int(total)
        self.path = path
        self._ends: Dict[int, int] = {}  # candidate -> end of its valid record, or 0
        self._chains: Dict[int, Tuple[int, bool]] = {}  # chain position -> (reached, broken there)
        self._block_base = 0
        self._block = b""
        self._fast_failures = 0
        self._shallow = _SpanWindow(self, RESYNC_LOOKBACK)
        self._deep = _SpanWindow(self, RESYNC_DEEP_LOOKBACK)

    # -- the search --------------------------------------------------------------------------
    def find(self, offset: int) -> int:
        """The first record boundary at or after `offset` (`total` when none)."""
        for c in self.candidates(max(int(offset), 0), self.total):
            if self._shallow.spans(c):
                continue
            if self.record_end(c) and self._chain_is_sound(c):
                return c
            if not self._deep.spans(c):
                return c
        return self.total

    def after_bad(self, offset: int, record: Optional[int] = None) -> Tuple[int, Optional[int], bool]:
        """Where reading goes on after a corrupt record at `offset` (record number `record`):
        (next boundary, its record number or None, whether exactly that one record was skipped).

        When the record's length field passes its CRC (only the payload is damaged) the frame
        is skipped whole; otherwise the next boundary the search finds (`total` when none).
        The one rule for every reader that skips corrupt records (`skipping`, the Beam source's
        ranges, `verify`); with an index, readers go to the next indexed record instead.
        """
        length = self.header_at(offset)
        if length is not None and offset + FRAME_OVERHEAD + length <= self.total:
            return offset + FRAME_OVERHEAD + length, None if record is None else record + 1, True
        return self.find(offset + 1), None, False

    def check_split(self, end: int, next_start: int) -> None:
        """Raise SplitPointError unless the search from `end` lands on `next_start`.

        A reader of the byte range [.., end) that followed the record chain knows that the
        first record at or after `end` starts at `next_start`; the reader of the next range
        only has the search. When they disagree, a payload holds a frame that passes for a
        boundary, and byte-range splitting would duplicate or drop records.
        """
        if end >= self.total or end <= 0:
            return
        found = self.find(end)
        if found != next_start:
            what = "inside the record before it" if found < next_start else "past it"
            raise SplitPointError(
                self.path,
                end,
                None,
                f"the records read up to this split point continue at byte offset {next_start}, but "
                f"the resync from it lands at {found} ({what}): a payload embeds record-like frames, "
                "so this file cannot be split by byte ranges: it needs an index to be split (build one "
                "with `tfrecord2idx` or pipelines.build_index), or read it whole",
            )

    # -- the pieces (each a function of its position alone) ----------------------------------
    def candidate_blocks(self, low: int, high: int) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """The positions in [low, high) whose 8 bytes carry a valid length CRC, block by block
        in order, each as (positions int64, their length fields uint64)."""
        pos = low
        size = _FIRST_BLOCK  # most searches end near where they start: read little, then more
        while pos < high and pos + HEADER_SIZE <= self.total:
            n = min(size, high - pos)
            size = min(size * 4, _BLOCK)
            block = self.read_at(pos, n + HEADER_SIZE - 1)
            found = _engine.find_length_crcs(block)
            found = found[found < n]
            if len(found):
                data = np.frombuffer(block, dtype=np.uint8)
                lengths = data[found[:, None] + np.arange(8)].view("<u8").ravel()
                yield found + pos, lengths
            pos += n

    def candidates(self, low: int, high: int) -> Iterator[int]:
        """Positions in [low, high) whose 8 bytes carry a valid length CRC, in order, found one
        at a time (a search usually stops at one of the first)."""
        pos = low
        size = _FIRST_BLOCK
        while pos < high and pos + HEADER_SIZE <= self.total:
            n = min(size, high - pos)
            size = min(size * 4, _BLOCK)
            block = self.read_at(pos, n + HEADER_SIZE - 1)
            i = _engine.find_length_crc(block, 0)
            while 0 <= i < n:
                yield pos + i
                i = _engine.find_length_crc(block, i + 1)
            pos += n

    def claimed_end(self, h: int) -> int:
        """Where the record at candidate `h` would end by its length field (unchecked)."""
        (length,) = _U64.unpack_from(self.read_at(h, 8))
        return h + FRAME_OVERHEAD + length

    def record_end(self, h: int) -> int:
        """Where the record at `h` ends when both its CRCs are valid and it fits the file, else 0."""
        end = self._ends.get(h)
        if end is None:
            end = self._check_record(h)
            if len(self._ends) >= _MEMO_LIMIT:
                self._ends.clear()
            self._ends[h] = end
        return end

    def _check_record(self, h: int) -> int:
        length = self.header_at(h)
        if length is None or length > self.total - h - FRAME_OVERHEAD:
            return 0
        frame = self.read_at(h, FRAME_OVERHEAD + length)
        _, _, consumed, _ = _engine.scan_frames(frame, True, 1)
        return h + len(frame) if consumed == FRAME_OVERHEAD + length else 0

    def read_at(self, pos: int, n: int, ahead: int = _READ_AHEAD) -> bytes:
        """`n` bytes at `pos` (fewer at the end of the file), through one block read ahead:
        searches read many small pieces close together, and seeks cost more than slices."""
        rel = pos - self._block_base
        if rel < 0 or rel + n > len(self._block) and self._block_base + len(self._block) < self.total:
            self.raw.seek(pos)
            self._block_base, self._block = pos, self.raw.read(max(n, ahead))
            rel = 0
        if rel == 0 and n >= len(self._block):
            return self._block  # no copy of a whole record
        return self._block[rel : rel + n]

    def header_at(self, pos: int) -> Optional[int]:
        """`header_length` of the header at file position `pos`."""
        return header_length(self.read_at(pos, HEADER_SIZE))

    def _header_at_for_walk(self, pos: int) -> Optional[int]:
        return header_length(self.read_at(pos, HEADER_SIZE, _BLOCK + HEADER_SIZE))

    def _chain_is_sound(self, c: int) -> bool:
        """Whether valid headers (length CRCs) tile the file from `c` for RESYNC_LOOKAHEAD bytes.

        The chain must stay within the file: one that reaches the end of the file must end
        exactly there. Payload CRCs after the first record are not needed: a false start inside
        a payload breaks at the header level. Walks remember, for every header they pass, how
        far the chain was followed and whether it broke there, so overlapping walks share work.
        """
        limit = c + RESYNC_LOOKAHEAD
        if c not in self._chains and self._fast_failures < _FAST_WALKS:
            sound = self._chain_in_c(c, limit)
            if sound is not None:
                return sound
        visited = []
        p, broken = c, False
        while p < limit and p != self.total:
            known = self._chains.get(p)
            if known is not None:
                p, broken = known
                if broken:
                    break
                continue
            visited.append(p)
            length = self._header_at_for_walk(p)
            if length is None or length > self.total - p - FRAME_OVERHEAD:
                broken = True  # a damaged header, or a frame running past the end of the file
                break
            p += FRAME_OVERHEAD + length
        if len(self._chains) + len(visited) > _MEMO_LIMIT:
            self._chains.clear()
        for v in visited:
            self._chains[v] = (p, broken)
        return not broken

    def _chain_in_c(self, c: int, limit: int) -> Optional[bool]:
        """The same walk as one C scan of length CRCs; None when it cannot tell (the Python
        walk then decides). A walk that breaks counts against _FAST_WALKS and is remembered:
        a crafted file of many long broken chains falls back to the linear Python walk."""
        block = self.read_at(c, RESYNC_LOOKAHEAD + HEADER_SIZE, RESYNC_LOOKAHEAD + HEADER_SIZE)
        offsets, _, consumed, status = _engine.scan_frames(block, VERIFY_LENGTHS)
        p = c + consumed
        if p >= limit or p == self.total:
            return True
        if status == STATUS_INCOMPLETE and len(block) - consumed >= HEADER_SIZE:
            (length,) = _U64.unpack_from(block, consumed)  # its length CRC is valid (checked first)
            if length <= self.total - p - FRAME_OVERHEAD:
                return True  # a frame that fits the file, reaching past the block: past `limit`
        elif status not in (STATUS_BAD_LENGTH_CRC, STATUS_INCOMPLETE):
            return None
        self._fast_failures += 1
        if len(self._chains) + len(offsets) > _MEMO_LIMIT:
            self._chains.clear()
        self._chains.update(dict.fromkeys((offsets - HEADER_SIZE + c).tolist(), (p, True)))
        self._chains[p] = (p, True)
        return False


def find_record_start(raw: BinaryIO, offset: int, total: int, path: Optional[str] = None) -> int:
    """The offset of the first record boundary at or after `offset` (`total` when none).

    One search; readers that search many times in one file keep a `Resync` instead (it shares
    the work between searches). See this module's docstring for the rule.
    """
    return Resync(raw, total, path).find(offset)
