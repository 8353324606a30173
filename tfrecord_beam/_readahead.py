"""A read-only file object over a remote object that reads ahead in large blocks.

A reader is given the byte range it will read, `[start, stop)`, planned from an index (the
records of a shard's piece, or the gzip members holding them). It asks for the grid blocks
(`RangeSource`) covering that range in order, `readahead_requests` of them in flight on a
thread pool, and serves `read` / `seek` from them: one request per `readahead_bytes`, never one
per record, and memory bounded by the blocks in flight plus the two last read (a record that
straddles two blocks is read again from the earlier one without a new request). Reads outside
the planned range (a peek past its end, a resync) fetch the block they need, once. Blocks
read ahead go into the cache on its writer thread; `close` waits until they are written.

The record readers (`RecordReader`, `SkippingReader`, `blockgzip.open_at`) read it as any
seekable binary file, so CRC checks, error messages and skipping stay theirs.
"""

from __future__ import annotations

import collections
import io
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Deque, Optional, Tuple

from ._ranges import RangeSource

__all__ = ["ReadAheadFile"]

_RECENT = 2  # blocks kept after they were read (records straddling a block boundary)
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


class ReadAheadFile(io.RawIOBase):
    """Seekable binary reads of `source`, reading ahead over `[start, stop)` (see module)."""

    def __init__(self, source: RangeSource, start: int = 0, stop: Optional[int] = None, readahead: bool = True) -> None:
        super().__init__()
        self.source = source
        self.name = source.path
        size = source.size
        stop = size if stop is None else min(int(stop), size)
        start = max(0, min(int(start), size))
        block = source.block
        self._first, self._last = start // block, (stop - 1) // block if stop > start and readahead else -1
        self._next = self._first
        self._queue: Deque[Tuple[int, Future]] = collections.deque()
        self._recent: "collections.OrderedDict[int, bytes]" = collections.OrderedDict()
        self._in_flight = int(source.options.readahead_requests)
        self._pos = start

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
            piece = data[at : at + want]
            if not piece:
                break
            parts.append(piece)
            self._pos += len(piece)
            want -= len(piece)
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def readinto(self, buffer) -> int:  # io.RawIOBase's contract, for io.BufferedReader
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        for _, future in self._queue:
            future.cancel()
        self._queue.clear()
        self._recent.clear()
        if not self.closed:
            self.source.flush()  # what was fetched is in the cache before the next reader looks
        super().close()

    # -- blocks --------------------------------------------------------------------------------
    def _block(self, g: int) -> bytes:
        recent = self._recent.get(g)
        if recent is not None:
            self._recent.move_to_end(g)
            return recent
        queue = self._queue
        while queue and queue[0][0] < g:  # skipped over (a shard skips pieces it resumes past)
            queue.popleft()[1].cancel()
        if not queue and self._first <= g <= self._last and g >= self._next:
            self._next = g
        self._fill()
        if queue and queue[0][0] == g:
            data = queue.popleft()[1].result()
            self._fill()
        else:  # outside the plan: this block alone, now
            data = self.source.read_block(g)
        self._recent[g] = data
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)
        return data

    def _fill(self) -> None:
        pool = None
        while len(self._queue) < self._in_flight and self._next <= self._last:
            pool = pool or _executor()
            self._queue.append((self._next, pool.submit(self.source.read_block, self._next, True)))
            self._next += 1
