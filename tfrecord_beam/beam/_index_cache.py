"""Record offsets from the `.tfindex` beside a data file, for starting split reads.

A split reader needs one answer from the index: the first record at or after a byte offset
(and its number). The index is loaded with `_tfindex.load_index_starts` (one compiled pass
over the memory-mapped text; it checks that entries start at 0 and follow each other; only
the offsets are kept, 8 bytes a record) and `check_end` (it must end where the data does),
and cached per process. An index of the right size can still be stale: readers check
what they read against it (`Offsets.check_*`, over `tfrecord_beam._index_check`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Optional, Tuple

import numpy as np

from .. import _index_check, fs
from .._tfindex import check_end, default_index_path, load_index_starts

_CACHE_SIZE = 16  # indexes kept per process
_CACHE_BYTES = 256 << 20  # and at most this much of their offsets (8 bytes a record), the newest always
_cache: "OrderedDict[Tuple[str, int, int, Optional[int]], Offsets]" = OrderedDict()
_lock = threading.Lock()


class Offsets:
    """Record boundaries of one data file, from its index, and the checks of data against it."""

    def __init__(self, table: np.ndarray, index_path: Optional[str] = None, data_path: Optional[str] = None) -> None:
        self._table = table
        self.index_path = index_path
        self.data_path = data_path

    def __len__(self) -> int:
        return len(self._table)

    @property
    def nbytes(self) -> int:
        """The memory the offsets hold."""
        return int(self._table.nbytes)

    def first_at_or_after(self, offset: int, total: int) -> Tuple[int, int]:
        """(record number, header offset) of the first record starting at or after `offset`
        (`(len, total)` when none does)."""
        number = int(np.searchsorted(self._table, offset, side="left"))
        return number, (int(self._table[number]) if number < len(self._table) else total)

    def first_after(self, offset: int, total: int) -> Tuple[int, int]:
        """As `first_at_or_after`, for the first record starting strictly after `offset`."""
        return self.first_at_or_after(offset + 1, total)

    def check_entry(self, raw, number: int, total: int) -> None:
        """The header of record `number` agrees with the index (else IndexMismatchError)."""
        _index_check.check_entry(raw, self._table, number, total, self.index_path, self.data_path)

    def check_records(self, first_number: int, record_offsets) -> None:
        """Records read in a row from `first_number` on sit where the index says."""
        _index_check.check_records(
            self._table, first_number, np.asarray(record_offsets, dtype=np.int64), self.index_path, self.data_path
        )

    def check_next(self, stop: int, next_start: int, total: int) -> None:
        """The records read before `stop` continue at the index's first record at or after it."""
        number, _ = self.first_at_or_after(stop, total)
        _index_check.check_next(self._table, number, next_start, total, self.index_path, self.data_path)

    def check_damage(self, raw, number: Optional[int], offset: int, total: int) -> None:
        """A reader found damage at `offset` as record `number`: that is where the index puts
        that record, and the data around it agrees with the index (else IndexMismatchError)."""
        if number is None:
            return
        _index_check.check_next(self._table, number, offset, total, self.index_path, self.data_path)
        self.check_entry(raw, number, total)


def _cached_bytes() -> int:
    return sum(offsets.nbytes for offsets in _cache.values())


def _mtime(path: str) -> Optional[int]:
    """Modification time (ns) of a local index, so a rewritten one is not served from cache."""
    if fs.is_remote(path):
        return None
    return os.stat(path[len("file://") :] if path.startswith("file://") else path).st_mtime_ns


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
    table, end = load_index_starts(index_path)
    check_end(end, data_size, index_path, data_path)
    offsets = Offsets(table, index_path, data_path)
    with _lock:
        _cache[key] = offsets
        while len(_cache) > _CACHE_SIZE or (len(_cache) > 1 and _cached_bytes() > _CACHE_BYTES):
            _cache.popitem(last=False)
    return offsets
