"""A read-only file object over a remote object that reads ahead in large blocks.

A reader is given the byte range it will read, `[start, stop)`, planned from an index (the
records of a shard's piece, or the gzip members holding them). It asks for the grid blocks
(`RangeSource`) covering that range in order, `readahead_requests` of them in flight on a
thread pool, and serves `read` / `seek` from them: one request per `readahead_bytes`, never one
per record, and memory bounded by the blocks in flight plus the two last read (a record that
straddles two blocks is read again from the earlier one without a new request). Reads outside
the planned range (a peek past its end, a resync) fetch the block they need, once. Blocks
read ahead go into the cache on its writer thread; `close` waits until they are written.

A `ReadAheadPlan` is that read-ahead over several ranges read one after another (a worker's
pieces, in its order): the requests in flight run on past the end of one range into the next
ones, so a reader that opens the next range finds its first blocks fetched or under way, not a
round trip and a whole block away (on a link of 20 ms and 100 MB/s, a 16 MiB block is 0.2 s:
per file, that was the wait). A block two consecutive ranges share is fetched once. The
requests in flight start at one and grow by one with each block handed out: at the start of
an epoch the first block has the link to itself (2 workers x 3 requests of 16 MiB at once
made the first batch wait for 96 MiB).

The record readers (`RecordReader`, `SkippingReader`, `blockgzip.open_at`) read it as any
seekable binary file, so CRC checks, error messages and skipping stay theirs.
"""

from __future__ import annotations

import collections
import io
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Deque, List, Optional, Sequence, Tuple, Union

from ._ranges import RangeSource

__all__ = ["ReadAheadFile", "ReadAheadPlan"]

_RECENT = 2  # blocks kept after they were read (records straddling a block boundary)
_STITCH_MIN = 16  # read_view: fewer bytes left in a block than a record header: stitched
_STITCH_EXTRA = 64 << 10  # read_view: a stitch with no record length known yet takes this much more
_POOL_THREADS = 32
_pool: Tuple[int, Optional[ThreadPoolExecutor]] = (-1, None)


def _executor() -> ThreadPoolExecutor:
    """This process's pool (a forked child makes its own: the parent's threads are not there)."""
    global _pool
    pid, pool = _pool
    if pool is None or pid != os.getpid():
        pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="tfrb-readahead")
        _pool = (os.getpid(), pool)
    return pool


class ReadAheadPlan:
    """Blocks of consecutive ranges `[(source, start, stop)]` (stop None: to the end), fetched
    in that order, `in_flight` requests at a time across the ranges' boundaries. Each range's
    reader is a `ReadAheadFile(..., plan=(this plan, its range's number))`; it takes its blocks
    from here. A block asked for ahead of the requests in flight makes the plan skip to it (a
    resumed piece starts past its first records); the blocks it skips are dropped."""

    def __init__(self, ranges: Sequence[Tuple[Optional[RangeSource], int, Optional[int]]], in_flight: int) -> None:
        self._blocks: List[Tuple[RangeSource, int]] = []
        self._ranges: List[Tuple[int, int, int]] = []  # (first position, first block, last block)
        for source, start, stop in ranges:
            if source is None:  # a range read otherwise (a local file): none of its blocks
                self._ranges.append((len(self._blocks), 0, -1))
                continue
            stop = source.size if stop is None else min(int(stop), source.size)
            start = max(0, min(int(start), stop))
            first, last = start // source.block, (stop - 1) // source.block
            if stop <= start:
                first, last = 0, -1
            shared = bool(self._blocks) and self._blocks[-1] == (source, first) and last >= first
            self._ranges.append((len(self._blocks) - shared, first, last))
            self._blocks.extend((source, g) for g in range(first + shared, last + 1))
        self._next = 0  # the first position not yet asked for
        self._queue: Deque[Tuple[int, Future]] = collections.deque()  # (position, its block)
        self._in_flight = max(1, int(in_flight))
        self._handed = 0  # blocks handed out: the requests in flight ramp up with them
        self._taken: Tuple[int, Optional[bytes]] = (-1, None)  # the last block handed out: a
        # range that starts in the block the one before it ended in asks for it again

    def take(self, slot: int, g: int) -> Optional[bytes]:
        """Block `g` of range `slot` when the plan has it at or ahead of the requests in flight
        (the ones before it are dropped); None when it is behind them (the caller reads it)."""
        at, first, last = self._ranges[slot]
        if not first <= g <= last:
            return None
        position = at + g - first
        if self._taken[0] == position:
            return self._taken[1]
        queue = self._queue
        while queue and queue[0][0] < position:
            queue.popleft()[1].cancel()
        if not queue and position >= self._next:
            self._next = position
        self._fill()
        if not queue or queue[0][0] != position:
            return None
        data = queue.popleft()[1].result()
        self._taken = (position, data)
        self._handed += 1
        self._fill()
        return data

    def _fill(self) -> None:
        # One request first, one more per block handed out, up to `in_flight`: requests in
        # flight share the link, so the first block, which the reader waits for, arrives
        # `in_flight` times sooner than if all started at once (and those of other workers).
        limit = min(self._in_flight, 1 + self._handed)
        pool = None
        while len(self._queue) < limit and self._next < len(self._blocks):
            pool = pool or _executor()
            source, g = self._blocks[self._next]
            self._queue.append((self._next, pool.submit(source.read_block, g, True)))
            self._next += 1

    def close(self) -> None:
        """Drop the requests not yet under way (those under way end on their own)."""
        for _, future in self._queue:
            future.cancel()
        self._queue.clear()
        self._next = len(self._blocks)
        self._taken = (-1, None)


class ReadAheadFile(io.RawIOBase):
    """Seekable binary reads of `source`, reading ahead over `[start, stop)` (see module)."""

    def __init__(
        self,
        source: RangeSource,
        start: int = 0,
        stop: Optional[int] = None,
        readahead: bool = True,
        plan: Optional[Tuple[ReadAheadPlan, int]] = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.name = source.path
        self._pos = max(0, min(int(start), source.size))
        self._recent: "collections.OrderedDict[int, bytes]" = collections.OrderedDict()
        self._own = plan is None  # a plan of its own range alone, closed with the file
        if plan is None:
            in_flight = int(source.options.readahead_requests)
            plan = (ReadAheadPlan([(source if readahead else None, start, stop)], in_flight), 0)
        self._plan, self._slot = plan

    # -- io.RawIOBase --------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.source.size}[whence]
        target = base + int(offset)
        if target < 0:
            raise ValueError(f"{self.name}: negative seek position {target}")
        self._pos = target
        return target

    def read(self, size: int = -1) -> bytes:
        total = self.source.size
        want = total - self._pos if size is None or size < 0 else min(int(size), total - self._pos)
        parts = []
        block = self.source.block
        while want > 0:
            g = self._pos // block
            data = self._block(g)
            at = self._pos - g * block
            piece = memoryview(data)[at : at + want]  # a view: the bytes are copied once, below
            if not piece:
                break
            parts.append(piece)
            self._pos += len(piece)
            want -= len(piece)
        if len(parts) == 1:
            return parts[0].tobytes()
        return b"".join(parts)

    def read_view(self, size: int, need: int = 0) -> Union[memoryview, bytes]:
        """Up to `size` bytes from the position without copying them: a view of the block they
        lie in, ending at most at the block's end (so fewer than `size` bytes do not mean the end
        of the file: `tell()` says where it is). Only when the block ends within the next
        `need` bytes (a record that spans two blocks; at least a record header) are they
        stitched into one bytes object, `need` bytes or a little more: the only copy. The view
        keeps its block alive; the record readers decode records in place from it."""
        total = self.source.size
        size = min(int(size), total - self._pos)
        if size <= 0:
            return b""
        block = self.source.block
        g = self._pos // block
        data = self._block(g)
        at = self._pos - g * block
        rest = len(data) - at
        if rest >= size or rest >= max(int(need), _STITCH_MIN):
            view = memoryview(data)[at : at + min(size, rest)]
            self._pos += len(view)
            return view
        return self.read(min(size, max(int(need), rest + _STITCH_EXTRA)))

    def readinto(self, buffer) -> int:  # io.RawIOBase's contract, for io.BufferedReader
        out = memoryview(buffer).cast("B")
        total = self.source.size
        want = min(len(out), max(0, total - self._pos))
        got = 0
        block = self.source.block
        while got < want:
            g = self._pos // block
            data = self._block(g)
            at = self._pos - g * block
            piece = memoryview(data)[at : at + want - got]
            if not piece:
                break
            out[got : got + len(piece)] = piece
            got += len(piece)
            self._pos += len(piece)
        return got

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        self._recent.clear()
        if not self.closed:
            if self._own:
                self._plan.close()
            self.source.flush()  # what was fetched is in the cache before the next reader looks
        super().close()

    # -- blocks --------------------------------------------------------------------------------
    def _block(self, g: int) -> bytes:
        recent = self._recent.get(g)
        if recent is not None:
            self._recent.move_to_end(g)
            return recent
        data = self._plan.take(self._slot, g)
        if data is None:  # outside the plan, or behind it: this block alone, now
            data = self.source.read_block(g)
        self._recent[g] = data
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)
        return data
