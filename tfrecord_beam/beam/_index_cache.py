"""Per-process cache of `.tfindex` offsets, so each split of a file does not re-parse its index."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional, Tuple

import numpy as np

from .. import fs
from ..errors import IndexMismatchError
from ..index import default_index_path, load_index

_CACHE_SIZE = 16
_cache: "OrderedDict[Tuple[str, int, int], np.ndarray]" = OrderedDict()
_lock = threading.Lock()


def record_offsets(data_path: str, data_size: int) -> Optional[np.ndarray]:
    """Header offsets (int64) of every record of `data_path` from the index beside it, or None.

    Raises IndexMismatchError when the index does not end where the data does (a stale index
    left beside rewritten data): splitting by it would cut records apart.
    """
    index_path = default_index_path(data_path)
    if not fs.exists(index_path):
        return None
    key = (index_path, int(data_size), fs.file_size(index_path))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    index = load_index(index_path)
    end = int(index[-1, 0] + index[-1, 1]) if len(index) else 0
    if end != data_size:
        raise IndexMismatchError(
            index_path, None, None,
            f"index covers {end} bytes but {data_path} has {data_size} (stale index: rebuild it "
            "with tfrecord_beam.index.create_index, or read with use_index=False)",
        )
    offsets = np.ascontiguousarray(index[:, 0])
    with _lock:
        _cache[key] = offsets
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return offsets
