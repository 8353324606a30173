"""`.tfindex` files: one "offset length" line per record, as the `tfrecord` package and DALI use.

`offset` is where the record's 12-byte header starts and `length` is the whole frame
(12 + payload + 4). For GZIP/ZLIB files both count bytes of the *uncompressed* stream: such
an index tells record boundaries and counts, but reading at an offset still inflates from the
start of the file (compressed streams cannot be entered mid-way).
"""

from __future__ import annotations

import os
from typing import Iterable, Optional, Tuple, Union

import numpy as np

from . import fs
from ._framing_py import FRAME_OVERHEAD, VERIFY_ALL, VERIFY_LENGTHS
from .errors import IndexMismatchError
from .records import RecordReader

INDEX_SUFFIX = ".tfindex"
_DATA_SUFFIXES = (".tfrecord", ".tfrecords")


def default_index_path(data_path: Union[str, "os.PathLike[str]"]) -> str:
    """`x.tfrecord` -> `x.tfindex` (the `tfrecord` convention); any other name gets `.tfindex` added.

    Compressed files keep their full name (`x.tfrecord.gz` -> `x.tfrecord.gz.tfindex`) so that
    a plain and a compressed copy side by side get different indexes.
    """
    path, query = fs.split_query(os.fspath(data_path))  # s3://b/x.tfrecord?endpoint_override=...
    for suffix in _DATA_SUFFIXES:
        if path.endswith(suffix):
            return fs.with_query(path[: -len(suffix)] + INDEX_SUFFIX, query)
    return fs.with_query(path + INDEX_SUFFIX, query)


def _frame_arrays(data_path, compression: Optional[str], verify: bool) -> Iterable[np.ndarray]:
    """(k, 2) arrays of (offset, frame length), one per chunk read.

    Every length CRC is checked (framing must be sound for an index to mean anything);
    payload CRCs only with `verify`. Reading the file in 1 MiB chunks and scanning the headers
    in C measured faster than seeking from header to header, even for 16 KiB records.
    """
    level = VERIFY_ALL if verify else VERIFY_LENGTHS
    source = data_path if hasattr(data_path, "read") else os.fspath(data_path)  # a path or an open file
    for chunk in RecordReader(source, compression, verify=level).chunks():
        yield np.stack([chunk.record_offsets, chunk.payload_lengths + FRAME_OVERHEAD], axis=1)


def iter_frames(data_path, compression: Optional[str] = "auto", verify: bool = False) -> Iterable[Tuple[int, int]]:
    """Yield (offset, frame length) of every record (see `build_index`)."""
    for frames in _frame_arrays(data_path, compression, verify):
        yield from map(tuple, frames.tolist())


def build_index(data_path, compression: Optional[str] = "auto", verify: bool = False) -> np.ndarray:
    """The index of a data file as an (n, 2) int64 array of (offset, frame length).

    Length CRCs are always checked, payload CRCs with `verify`; a corrupt or truncated file
    raises CorruptRecordError / TruncatedRecordError naming the record.
    """
    parts = list(_frame_arrays(data_path, compression, verify))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros((0, 2), dtype=np.int64)


def format_index(index: np.ndarray) -> bytes:
    """The `.tfindex` text of an (n, 2) array."""
    flat = np.asarray(index).reshape(-1).tolist()
    return (("%d %d\n" * (len(flat) // 2)) % tuple(flat)).encode("ascii")  # one C-level format


def write_index(index: np.ndarray, index_path, *, atomic_output=None) -> None:
    """Write an index atomically (temporary name, then rename).

    `atomic_output` is the file layer's `atomic_output` (default the core's `fs`); Beam code
    passes `tfrecord_beam.beam._fs.atomic_output` so that its writes go through Beam.
    """
    with (atomic_output or fs.atomic_output)(os.fspath(index_path)) as (handle, commit):
        handle.write(format_index(index))
        commit()


def create_index(data_path, index_path=None, compression: Optional[str] = "auto", verify: bool = False) -> np.ndarray:
    """Build the index of `data_path` and write it (beside the data by default); returns it.

    A corrupt or truncated data file raises before anything is written, so no partial index
    is left behind.
    """
    index = build_index(data_path, compression, verify)
    write_index(index, index_path or default_index_path(data_path))
    return index


def load_index(index_path) -> np.ndarray:
    """Read a `.tfindex` file of 0, 1 or N lines into an (n, 2) int64 array.

    The entries must start at offset 0 and follow each other (each offset the previous one
    plus its length); `check_index` also compares the end with the data file's size.
    """
    path = os.fspath(index_path)
    with fs.open_input(path) as handle:
        text = handle.read().decode("ascii", errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    tokens = text.split()
    try:
        if len(tokens) != 2 * len(lines):
            raise ValueError
        index = np.array(tokens, dtype=np.int64).reshape(-1, 2)
        if np.any(index < 0):
            raise ValueError
    except (ValueError, OverflowError):
        for number, line in enumerate(lines):  # slow path only to name the bad line
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() and int(p) < 1 << 63 for p in parts):
                raise IndexMismatchError(path, None, number, f"index line {number + 1} is not 'offset length': {line!r}") from None
        raise
    if len(index) and index[0, 0] != 0:
        raise IndexMismatchError(path, int(index[0, 0]), 0, "index does not start at offset 0 (lines missing)")
    if len(index) > 1 and np.any(index[1:, 0] != index[:-1, 0] + index[:-1, 1]):
        bad = int(np.flatnonzero(index[1:, 0] != index[:-1, 0] + index[:-1, 1])[0]) + 1
        raise IndexMismatchError(path, int(index[bad, 0]), bad, "index entries are not contiguous")
    return index


def check_index(index: np.ndarray, data_size: Optional[int], index_path=None, data_path=None) -> np.ndarray:
    """Cheap staleness check of a loaded index against its uncompressed data file's size.

    The last entry must end exactly at the end of the file (a file that grew or shrank since
    the index was written fails); returns the index. `data_size` None (compressed) skips it.
    """
    end = int(index[-1].sum()) if len(index) else 0
    if data_size is not None and end != data_size:
        raise IndexMismatchError(
            None if index_path is None else os.fspath(index_path), None, None,
            f"index ends at byte {end} but {data_path} has {data_size} bytes (stale index)",
        )
    return index


def verify_index(index_path, data_path, compression: Optional[str] = "auto", verify_crc: bool = False) -> np.ndarray:
    """Check that an index describes its data file exactly; returns the index.

    Raises IndexMismatchError naming the first record that differs (a stale index after the
    data was rewritten, say), or the data file's own CorruptRecordError.
    """
    index = load_index(index_path)
    actual = build_index(data_path, compression, verify_crc)
    ipath = os.fspath(index_path)
    common = min(len(index), len(actual))
    diff = np.flatnonzero(np.any(index[:common] != actual[:common], axis=1))
    if len(diff):
        i = int(diff[0])
        raise IndexMismatchError(
            ipath, int(index[i, 0]), i,
            f"index says offset {index[i, 0]} length {index[i, 1]} but {os.fspath(data_path)} has "
            f"offset {actual[i, 0]} length {actual[i, 1]} (stale index)",
        )
    if len(index) != len(actual):
        raise IndexMismatchError(
            ipath, None, common,
            f"index lists {len(index)} records but {os.fspath(data_path)} holds {len(actual)} (stale index)",
        )
    return index


def shard_range(index: np.ndarray, shard: int, num_shards: int) -> Tuple[int, int, int, Optional[int]]:
    """Records [first, last) and byte range [start, end) of shard `shard` of `num_shards`.

    Record ranges are balanced by count: shard i gets records n*i//k .. n*(i+1)//k.
    """
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} is not in [0, {num_shards})")
    n = len(index)
    first = n * shard // num_shards
    last = n * (shard + 1) // num_shards
    start = int(index[first, 0]) if first < n else (int(index[-1].sum()) if n else 0)
    end = int(index[last, 0]) if last < n else None
    return first, last, start, end
