"""Record offsets from the `.tfindex` beside a data file, for split reads: each range parses
only the part of the index that describes it.

A split reader needs, around its byte range, the indexed record offsets: where its first
record starts, that the records it reads sit where the index says, and where they continue
after it. A worker reading part of a file used to parse the whole index (8 bytes of offsets
a record, in every worker, for every file it touched: 0.6 s and 400 MB per worker for 50 M
records). Now the index text is memory-mapped once per process (`IndexText`, cached), and a
range finds its entries by a binary search over the text and parses only them, with a few
entries of margin on each side (`Window`): work and memory in proportion to the range.

The record numbers that errors give are counted only when an error needs one (the entries
before a window are not parsed otherwise). Each window checks its own entries (grammar, the
chain of offsets, and for the first one the start at 0); the windows of a file's ranges
overlap, so together they check all of it. The index must end where the data does
(`check_end`, from its last line, when it is opened). An index of the right size can still be
stale: readers check what they read against it (`Window.check_*`, over `_index_check`).
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections import OrderedDict
from typing import BinaryIO, Optional, Tuple, Union

import numpy as np

from .. import _engine, _index_check, fs
from .._engine import _index_text
from .._tfindex import _raise_chain_fault, _raise_parse_error, check_end, default_index_path
from ..errors import IndexMismatchError
from . import _fs

_CACHE_SIZE = 16  # index texts kept open per process
_CACHE_BYTES = 256 << 20  # and at most this much of remote ones' text, read whole (the newest always)
_MARGIN = 9  # entries parsed beyond a range on each side: `_index_check`'s neighbours, and the next one
_PIECE = 16 << 20  # bytes of index text counted at a time for error messages
_cache: "OrderedDict[Tuple[str, int, int, Optional[int]], IndexText]" = OrderedDict()
_lock = threading.Lock()

Text = Union[bytes, mmap.mmap]
_UNPARSED = (1 << 63) - 1  # the offset a line that is not an entry counts as (sorts last)


class IndexText:
    """The text of one data file's index, mapped (or, remote, read) once per process."""

    def __init__(
        self, text: Text, index_path: str, data_path: str, data_size: int, handle: Optional[BinaryIO] = None
    ) -> None:
        self.text, self.index_path, self.data_path, self.data_size = text, index_path, data_path, data_size
        self.size = len(text)
        self._handle = handle  # a mapped file's, to see it truncated under the mapping
        if handle is not None:
            weakref.finalize(self, handle.close)  # evicted, collected or at exit: closed
        first = self._entry_at(0)
        self.first_entry = self.size if first is None else first[0]  # a window from here checks the start at 0
        end = self._last_end()
        if end is not None:  # (a last line that does not parse: the last range's window reports it)
            check_end(end, data_size, index_path, data_path)

    @property
    def resident_bytes(self) -> int:
        """The memory the text holds of its own (a mapped file's pages are the page cache's)."""
        return self.size if isinstance(self.text, bytes) else 0

    def check_unchanged(self) -> None:
        """A mapped index rewritten in place (not replaced by rename) must not be read through
        the old mapping: reading past a truncated end would kill the process (SIGBUS)."""
        if self._handle is not None and os.fstat(self._handle.fileno()).st_size != self.size:
            raise IndexMismatchError(
                self.index_path, None, None, "the index was rewritten in place while it was read (rebuild it; rerun)"
            )

    def _last_end(self) -> Optional[int]:
        """Where the last entry ends (0 without entries), from the last entry line; None when
        that line is not an entry. Each line is looked at once."""
        pos = self.size
        while pos > 0:
            start = self.text.rfind(b"\n", 0, pos - 1) + 1 if pos > 1 else 0
            entry = self._line_entry(start)
            if entry is not None:
                return None if entry[0] == _UNPARSED else entry[0] + entry[1]
            pos = start
        return 0

    def _line_entry(self, pos: int) -> Optional[Tuple[int, int]]:
        """(offset, length) of the line at line start `pos`; None for a blank or `#` line. A
        line that is not two numbers below 2**63 counts as an entry at offset 2**63 - 1, so
        searches stop at it and the window holding it reports it (as the grammar does)."""
        stop = self.text.find(b"\n", pos)
        line = _index_text.entry_text(self.text[pos : self.size if stop < 0 else stop])
        if line is None:
            return None
        pair = _index_text.line_pair(line)
        return pair if pair is not None and pair[0] < _UNPARSED else (_UNPARSED, 0)

    def _entry_at(self, pos: int) -> Optional[Tuple[int, int, int]]:
        """(line start, offset, length) of the first entry line starting at or after line
        start `pos`, or None when none does (`_line_entry`)."""
        while pos < self.size:
            entry = self._line_entry(pos)
            if entry is not None:
                return (pos,) + entry
            stop = self.text.find(b"\n", pos)
            pos = self.size if stop < 0 else stop + 1
        return None

    def _line_start(self, pos: int) -> int:
        """`pos` when it starts a line, else the start of the next line."""
        if pos <= 0 or self.text[pos - 1 : pos] == b"\n":
            return max(pos, 0)
        nxt = self.text.find(b"\n", pos)
        return self.size if nxt < 0 else nxt + 1

    def _first_line_at_or_after(self, offset: int) -> int:
        """The text position of the first entry line whose offset is >= `offset` (the text's
        size when none is): a binary search over text positions (entries are sorted)."""

        def reached(pos: int) -> bool:
            entry = self._entry_at(self._line_start(pos))
            return entry is None or entry[1] >= offset

        lo, hi = 0, self.size
        while lo < hi:
            mid = (lo + hi) // 2
            if reached(mid):
                hi = mid
            else:
                lo = mid + 1
        entry = self._entry_at(self._line_start(lo))
        return self.size if entry is None else entry[0]

    def _entries(self, pos: int, count: int, forward: bool) -> int:
        """The line start of the entry `count` entries after (or before) the entry line at
        `pos` (blank and `#` lines do not count); the text's end (or start) past the last (first)."""
        for _ in range(count):
            if forward:
                if pos >= self.size:
                    return self.size
                nxt = self.text.find(b"\n", pos)
                entry = self._entry_at(self.size if nxt < 0 else nxt + 1)
                pos = self.size if entry is None else entry[0]
            else:
                while True:
                    if pos <= 0:
                        return 0
                    pos = self.text.rfind(b"\n", 0, pos - 1) + 1
                    if self._line_entry(pos) is not None:
                        break
        return pos

    def window(self, start: int, stop: int) -> "Window":
        """The entries describing data bytes [start, stop), with `_MARGIN` entries on each side."""
        self.check_unchanged()
        first = self._first_line_at_or_after(start)
        last = self._first_line_at_or_after(stop) if stop < self.data_size else self.size
        a = self._entries(first, _MARGIN, forward=False)
        b = self._entries(last, _MARGIN, forward=True)
        if b < self.size:  # end after the margin's last entry line
            nxt = self.text.find(b"\n", b)
            b = self.size if nxt < 0 else nxt + 1
        return Window(self, a, b)

    def _pieces(self, pos: int):
        """The text before line start `pos`, in line-aligned pieces of about `_PIECE` bytes."""
        self.check_unchanged()
        start = 0
        while start < pos:
            stop = min(pos, self._line_start(start + _PIECE))
            yield self.text[start:stop]
            start = stop

    def entries_before(self, pos: int) -> int:
        """How many entries the text holds before line start `pos` (for error messages only:
        counted piece by piece, in bounded memory)."""
        count = 0
        for piece in self._pieces(pos):
            starts, _, error, _ = _engine.index_starts(piece)
            if error is None:
                count += len(starts)
            else:  # a malformed line: count entry-like lines the way the grammar skips lines
                count += sum(1 for line in piece.split(b"\n") if _index_text.entry_text(line) is not None)
        return count

    def lines_before(self, pos: int) -> int:
        """How many lines end before line start `pos` (for error messages only)."""
        return sum(piece.count(b"\n") for piece in self._pieces(pos))


class Window:
    """The parsed entries of one stretch of an index (`IndexText.window`), and the checks of
    data against them. Numbers here count from the window's first entry; `number` gives the
    record number in the file (counted on demand)."""

    def __init__(self, text: IndexText, a: int, b: int) -> None:
        self._text, self._a = text, a
        self.index_path, self.data_path = text.index_path, text.data_path
        first = text._entry_at(a) if a > text.first_entry else None  # from mid-file: its chain starts there
        view = memoryview(text.text)[a:b]  # parsed in place: no copy of the text
        try:
            starts, end, error, fault = _engine.index_starts(view, 0 if first is None else first[1])
        finally:
            view.release()
        if error is not None or fault is not None:  # the file's line and entry numbers, not the window's
            data, lines, entries = text.text[a:b], text.lines_before(a), text.entries_before(a)
            if error is not None:
                code, line, line_start = error
                _raise_parse_error(text.index_path, data, entries + len(starts), (code, line + lines, line_start))
            assert fault is not None
            _raise_chain_fault(text.index_path, data, fault, lines, entries)
        self.starts = starts
        self.total = end if b < text.size else text.data_size  # where the window's records end
        self._base: Optional[int] = None

    def number(self, i: int) -> int:
        """The file's record number of window entry `i`."""
        if self._base is None:
            self._base = self._text.entries_before(self._a)
        return self._base + i

    def __len__(self) -> int:
        return len(self.starts)

    def first_at_or_after(self, offset: int) -> Tuple[int, int]:
        """(window entry, header offset) of the first record starting at or after `offset`
        (`(len, total)` when none does)."""
        i = int(np.searchsorted(self.starts, offset, side="left"))
        return i, (int(self.starts[i]) if i < len(self.starts) else self.total)

    def first_after(self, offset: int) -> Tuple[int, int]:
        """As `first_at_or_after`, for the first record starting strictly after `offset`."""
        return self.first_at_or_after(offset + 1)

    def check_entry(self, raw, i: int) -> None:
        """The header of window entry `i` agrees with the index (else IndexMismatchError)."""
        _index_check.check_entry(raw, self.starts, i, self.total, self.index_path, self.data_path, self.number)

    def check_records(self, first: int, record_offsets) -> None:
        """Records read in a row from window entry `first` on sit where the index says."""
        offsets = np.asarray(record_offsets, dtype=np.int64)
        _index_check.check_records(self.starts, first, offsets, self.index_path, self.data_path, self.number)

    def check_next(self, stop: int, next_start: int) -> None:
        """The records read before `stop` continue at the index's first record at or after it."""
        i, _ = self.first_at_or_after(stop)
        _index_check.check_next(self.starts, i, next_start, self.total, self.index_path, self.data_path, self.number)

    def check_damage(self, raw, i: Optional[int], offset: int) -> None:
        """A reader found damage at `offset` as window entry `i`: that is where the index puts
        that record, and the data around it agrees with the index (else IndexMismatchError)."""
        if i is None:
            return
        _index_check.check_next(self.starts, i, offset, self.total, self.index_path, self.data_path, self.number)
        self.check_entry(raw, i)


def _mtime(path: str) -> Optional[int]:
    """Modification time (ns) of a local index, so a rewritten one is not served from cache."""
    if fs.is_remote(path):
        return None
    return os.stat(path[len("file://") :] if path.startswith("file://") else path).st_mtime_ns


def _map(path: str) -> Tuple[Union[bytes, mmap.mmap], Optional[BinaryIO]]:
    """A local index memory-mapped (`fs.map_input`, no copy); a remote one read whole through
    Beam's FileSystems, so the pipeline's options (`--s3_endpoint_url`, keys) apply."""
    if fs.is_remote(path):
        return _fs.read_bytes(path), None
    return fs.map_input(path)


def index_text(data_path: str, data_size: int) -> Optional[IndexText]:
    """The index text of `data_path` (cached per process), or None without one.

    Raises IndexMismatchError when the index does not end where the data does (a stale index
    left beside rewritten data): splitting by it would cut records apart.
    """
    index_path = default_index_path(data_path)
    if not _fs.exists(index_path):
        return None
    key = (index_path, int(data_size), _fs.file_size(index_path), _mtime(index_path))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    raw, handle = _map(index_path)  # kept open while cached: the size is watched
    try:
        text = IndexText(raw, index_path, data_path, int(data_size), handle)
    except BaseException:  # a stale index: nothing stays open
        if handle is not None:
            handle.close()
        raise
    with _lock:
        _cache[key] = text
        while len(_cache) > _CACHE_SIZE or (len(_cache) > 1 and _resident() > _CACHE_BYTES):
            _cache.popitem(last=False)
    return text


def _resident() -> int:
    """The memory the cached texts hold of their own (remote ones, read whole)."""
    return sum(text.resident_bytes for text in _cache.values())
