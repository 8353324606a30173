"""Record offsets from the `.tfindex` beside a data file, for starting split reads.

A split reader needs one answer from the index: the first record at or after a byte offset
(and its number). The index is loaded with `index.load_index` (vectorised; it checks that
entries start at 0 and follow each other) and `index.check_index` (it must end where the data
does), and cached per process.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Optional, Tuple

import numpy as np

from .. import fs
from ..index import check_index, default_index_path, load_index

_CACHE_SIZE = 16
_cache: "OrderedDict[Tuple[str, int, int, Optional[int]], Offsets]" = OrderedDict()
_lock = threading.Lock()


class Offsets:
    """Record boundaries of one data file, from its index."""

    def __init__(self, table: np.ndarray) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def first_at_or_after(self, offset: int, total: int) -> Tuple[int, int]:
        """(record number, header offset) of the first record starting at or after `offset`
        (`(len, total)` when none does)."""
        number = int(np.searchsorted(self._table, offset, side="left"))
        return number, (int(self._table[number]) if number < len(self._table) else total)

    def first_after(self, offset: int, total: int) -> Tuple[int, int]:
        """As `first_at_or_after`, for the first record starting strictly after `offset`."""
        return self.first_at_or_after(offset + 1, total)


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
    index = check_index(load_index(index_path), data_size, index_path, data_path)
    table = np.ascontiguousarray(index[:, 0])
    offsets = Offsets(table)
    with _lock:
        _cache[key] = offsets
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return offsets
