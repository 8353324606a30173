"""Building and verifying `.tfindex` files from data files (walking frame headers).

The format itself (names, text, loading, checks, shard ranges) is `_tfindex`, below `records`;
its public names are re-exported here, where users have always imported them. For GZIP/ZLIB
files offsets count bytes of the *uncompressed* stream; only a block-gzip file's member table
lets a reader enter the stream mid-way (`blockgzip`).
"""

from __future__ import annotations

import os
import struct
from typing import Iterator, Optional, Tuple

import numpy as np

from . import _diagnose, _engine, fs
from . import compression as _compression
from ._engine._common import (
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    VERIFY_ALL,
    VERIFY_LENGTHS,
    WALK_BAD_LENGTH_CRC,
    WALK_DONE,
    WALK_PAST_END,
    WALK_SHORT_HEADER,
)
from ._tfindex import (  # noqa: F401 - the format's names, re-exported where users import them
    INDEX_SUFFIX,
    check_index,
    check_index_target,
    default_index_path,
    first_difference,
    format_index,
    frame_index,
    load_index,
    looks_like_index,
    shard_range,
    write_index,
)
from .blockgzip import table_from_data
from .errors import CorruptRecordError, IndexMismatchError, TruncatedRecordError
from .records import RecordReader

__all__ = [
    "build_index",
    "create_index",
    "verify_index",
    "iter_frames",
    "iter_frame_arrays",
    "INDEX_SUFFIX",
    "check_index",
    "check_index_target",
    "default_index_path",
    "first_difference",
    "format_index",
    "frame_index",
    "load_index",
    "looks_like_index",
    "shard_range",
    "write_index",
]


# How many bytes of a local uncompressed file one header walk covers: a chunk holds at most
# WALK_WINDOW / 16 records (the smallest frame is 16 bytes), so walking, counting and iterating
# hold memory bounded by the window, never by the file (a record larger than the window gets
# a window of its own).
WALK_WINDOW = 1 << 20
# Rows converted to Python tuples at a time by `iter_frames`.
_TUPLE_ROWS = 1 << 14


def _frame_arrays(data_path, compression: Optional[str], verify: bool) -> Iterator[np.ndarray]:
    """(k, 2) arrays of (offset, frame length), one per chunk read, each of bounded size.

    Every length CRC is checked (framing must be sound for an index to mean anything);
    payload CRCs only with `verify`, which reads the whole file. Without it a local,
    uncompressed file is walked header to header (`_walk`): payloads are never read.
    """
    level = VERIFY_ALL if verify else VERIFY_LENGTHS
    if hasattr(data_path, "read"):  # an open file (Beam's file layer): read it
        source = data_path
    else:
        source = path = os.fspath(data_path)
        filesystem, inner = fs._split_uri(path)
        plain = _compression.resolve(path, compression) is None
        if not verify and filesystem is None and plain and _size_is_true(inner):
            yield from _walk(path, inner)
            return
    for chunk in RecordReader(source, compression, verify=level).chunks():
        yield chunk.frames()


def _size_is_true(local: str) -> bool:
    """Whether stat's size of a local file is its length, which `_walk` goes by: not for a
    file that stat calls empty yet holds bytes (/proc and /sys files, whose size is made when
    they are read): those are read to their end, as `RecordReader` does."""
    if os.stat(local).st_size > 0:
        return True
    with open(local, "rb", buffering=0) as handle:
        return not handle.read(1)


def _walk(path: str, local: str) -> Iterator[np.ndarray]:
    """The (k, 2) index rows of a local uncompressed file from its 12-byte headers alone (length
    CRCs checked, payloads skipped), one array per window of `WALK_WINDOW` bytes; errors as
    `RecordReader` reports them (record numbers count from the file's start).

    `walk_headers(fd, start, end)` takes `end` for the end of the file, so a window that ends
    inside a record stops there (short header, or the frame runs past `end`); the next window
    starts at that record, made long enough to hold its frame. Only the last window's status
    (or a bad length CRC, or the file shrinking under the walk) is an error.
    """
    fd = os.open(local, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        total = os.fstat(fd).st_size
        pos = number = 0
        reach = max(WALK_WINDOW, FRAME_OVERHEAD)
        while True:
            end = min(total, pos + reach)
            offsets, lengths, _footers, stop, status = _engine.walk_headers(fd, pos, end)
            number += len(offsets)
            if len(offsets):
                yield np.stack([offsets, lengths + FRAME_OVERHEAD], axis=1)
            if status == WALK_DONE and end == total:
                return
            header = os.pread(fd, HEADER_SIZE, stop) if status else b""
            shrank = status == WALK_SHORT_HEADER and end - stop >= HEADER_SIZE  # a short read
            if end == total or status == WALK_BAD_LENGTH_CRC or shrank:
                break
            pos, reach = stop, max(WALK_WINDOW, FRAME_OVERHEAD)
            if status == WALK_PAST_END:  # past this window's end, not the file's: give it room
                reach = max(reach, FRAME_OVERHEAD + struct.unpack_from("<Q", header)[0])
    finally:
        os.close(fd)
    if status == WALK_SHORT_HEADER:  # the reader's words for the same bytes (`_diagnose`)
        raise TruncatedRecordError(path, stop, number, _diagnose.short_tail(header, at_start=stop == 0))
    if status == WALK_BAD_LENGTH_CRC:
        raise CorruptRecordError(path, stop, number, _diagnose.bad_length_crc(stop, header))
    (length,) = struct.unpack_from("<Q", header)  # WALK_PAST_END
    raise TruncatedRecordError(
        path,
        stop,
        number,
        f"length field says {length} payload bytes, so {length + FOOTER_SIZE} bytes must follow the header, "
        f"but only {max(total - stop - HEADER_SIZE, 0)} do (truncated or corrupted record)",
    )


def iter_frame_arrays(data_path, compression: Optional[str] = "auto", verify: bool = False) -> Iterator[np.ndarray]:
    """The index of a data file as (k, 2) int64 arrays of (offset, frame length), in order, each
    of bounded size (see `build_index`): what counting or comparing needs, without holding
    the whole index."""
    return _frame_arrays(data_path, compression, verify)


def iter_frames(data_path, compression: Optional[str] = "auto", verify: bool = False) -> Iterator[Tuple[int, int]]:
    """Yield (offset, frame length) of every record (see `build_index`)."""
    for frames in _frame_arrays(data_path, compression, verify):
        for lo in range(0, len(frames), _TUPLE_ROWS):
            yield from map(tuple, frames[lo : lo + _TUPLE_ROWS].tolist())


def build_index(data_path, compression: Optional[str] = "auto", verify: bool = False) -> np.ndarray:
    """The index of a data file as an (n, 2) int64 array of (offset, frame length).

    Length CRCs are always checked, payload CRCs with `verify`; a corrupt or truncated file
    raises CorruptRecordError / TruncatedRecordError naming the record.
    """
    # One array grown in place (realloc: large blocks move by remapping, not copying) by a
    # quarter at a time: the index once in memory plus its slack, never the chunks as well.
    index = np.zeros((0, 2), dtype=np.int64)
    n = 0
    for part in _frame_arrays(data_path, compression, verify):
        if n + len(part) > len(index):
            index.resize((max(n + len(part), len(index) * 5 // 4, 1024), 2), refcheck=False)
        index[n : n + len(part)] = part
        n += len(part)
    index.resize((n, 2), refcheck=False)
    return index


def create_index(data_path, index_path=None, compression: Optional[str] = "auto", verify: bool = False) -> np.ndarray:
    """Build the index of `data_path` and write it (beside the data by default); returns it.

    A corrupt or truncated data file raises before anything is written, so no partial index
    is left behind. A block-gzip file's member table is rebuilt from its members' headers.
    """
    index_path = index_path or default_index_path(data_path)
    check_index_target(index_path, data_path)  # before the (possibly long) build
    index = build_index(data_path, compression, verify)
    seekable = _compression.seeks_by_members(_compression.resolve(os.fspath(data_path), compression))
    members = table_from_data(data_path, index) if seekable else None  # block-gzip: keep it seekable
    write_index(index, index_path, members)
    return index


def verify_index(index_path, data_path, compression: Optional[str] = "auto", verify_crc: bool = False) -> np.ndarray:
    """Check that an index describes its data file exactly; returns the index.

    Raises IndexMismatchError naming the first record that differs (a stale index after the
    data was rewritten, say), or the data file's own CorruptRecordError.
    """
    index = load_index(index_path)
    name, difference, rows = os.fspath(data_path), None, 0
    for frames in _frame_arrays(data_path, compression, verify_crc):  # to the end: the data's errors come first
        if difference is None:
            difference = first_difference(index, frames, name, False, first=rows)
        rows += len(frames)
    if difference is None:
        difference = first_difference(index, np.zeros((0, 2), np.int64), name, True, first=rows)
    if difference is not None:
        record, what = difference
        offset = int(index[record, 0]) if record < len(index) else None
        raise IndexMismatchError(os.fspath(index_path), offset, record, f"{what} (stale index)")
    return index
