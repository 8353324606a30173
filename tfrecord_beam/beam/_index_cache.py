"""Record offsets from the `.tfindex` beside a data file, for starting split reads.

A split reader needs one answer from the index: the first record at or after a byte offset
(and its number). Parsing a whole index costs about 1.3 microseconds a record (0.4 s for 300k
records, in every worker process), so a well-formed index (what our writers produce: one
"offset length\n" line per record) is searched in place instead: its newlines are located with
numpy and a binary search parses about 20 lines. Anything else is parsed in full by
`index.load_index`, which names a malformed line. Either way it is cached per process.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from .. import fs
from ..errors import IndexMismatchError
from ..index import default_index_path, load_index

_CACHE_SIZE = 16
_cache: "OrderedDict[Tuple[str, int, int, Optional[int]], Offsets]" = OrderedDict()
_lock = threading.Lock()


class _IndexText(Sequence[int]):
    """The header offsets of a well-formed index text, parsed on access."""

    def __init__(self, path: str, data: bytes) -> None:
        self._path = path
        self._data = data
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
        self._starts = np.concatenate(([0], newlines[:-1] + 1)).astype(np.int64)

    def __len__(self) -> int:
        return len(self._starts)

    def line(self, i: int) -> Tuple[int, int]:
        start = int(self._starts[i])
        text = self._data[start : self._data.index(b"\n", start)]
        parts = text.split(b" ")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise IndexMismatchError(self._path, None, i, f"index line {i + 1} is not 'offset length': {text!r}")
        return int(parts[0]), int(parts[1])

    def __getitem__(self, i):  # type: ignore[override]
        return self.line(i)[0]


class Offsets:
    """Record boundaries of one data file, from its index."""

    def __init__(self, table: Union[_IndexText, np.ndarray]) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def first_at_or_after(self, offset: int, total: int) -> Tuple[int, int]:
        """(record number, header offset) of the first record starting at or after `offset`
        (`(len, total)` when none does)."""
        number = bisect.bisect_left(self._table, offset)
        return number, (int(self._table[number]) if number < len(self._table) else total)

    def first_after(self, offset: int, total: int) -> Tuple[int, int]:
        """As `first_at_or_after`, for the first record starting strictly after `offset`."""
        return self.first_at_or_after(offset + 1, total)


_ALLOWED = np.zeros(256, dtype=bool)
_ALLOWED[[ord(c) for c in "0123456789 \n"]] = True


def _well_formed(data: bytes) -> bool:
    """Every line is exactly "digits space digits\n" (checked vectorized, no line parsing)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if not data.endswith(b"\n") or not _ALLOWED[raw].all():
        return False
    if b"\n\n" in data or b" \n" in data or b"\n " in data or data[:1] in (b" ", b"\n"):
        return False
    spaces = np.flatnonzero(raw == ord(" "))
    newlines = np.flatnonzero(raw == ord("\n"))
    return len(spaces) == len(newlines) and bool(np.all(np.searchsorted(newlines, spaces) == np.arange(len(spaces))))


def _mtime(path: str) -> Optional[int]:
    """Modification time (ns) of a local index, so a rewritten one is not served from cache."""
    if fs.is_remote(path):
        return None
    return os.stat(path[len("file://"):] if path.startswith("file://") else path).st_mtime_ns


def record_offsets(data_path: str, data_size: int) -> Optional[Offsets]:
    """The record boundaries of `data_path` from the index beside it, or None without one.

    Raises IndexMismatchError when the index does not end where the data does (a stale index
    left beside rewritten data): splitting by it would cut records apart.
    """
    index_path = default_index_path(data_path)
    if not fs.exists(index_path):
        return None
    key = (index_path, int(data_size), fs.file_size(index_path), _mtime(index_path))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    with fs.open_input(index_path) as handle:
        data = handle.read()
    if not data:
        table, end = np.zeros(0, dtype=np.int64), 0
    elif _well_formed(data):
        table = _IndexText(index_path, data)
        last_offset, last_length = table.line(len(table) - 1)
        end = last_offset + last_length
    else:
        index = load_index(index_path)
        table = np.ascontiguousarray(index[:, 0])
        end = int(index[-1, 0] + index[-1, 1]) if len(index) else 0
    if end != data_size:
        raise IndexMismatchError(
            index_path, None, None,
            f"index covers {end} bytes but {data_path} has {data_size} (stale index: rebuild it "
            "with tfrecord_beam.index.create_index, or read with use_index=False)",
        )
    offsets = Offsets(table)
    with _lock:
        _cache[key] = offsets
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return offsets
