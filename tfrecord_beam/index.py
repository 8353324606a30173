"""`.tfindex` files: one "offset length" line per record, as the `tfrecord` package and DALI use.

`offset` is where the record's 12-byte header starts and `length` is the whole frame
(12 + payload + 4). For GZIP/ZLIB files both count bytes of the *uncompressed* stream: such
an index tells record boundaries and counts, but reading at an offset still inflates from the
start of the file (compressed streams cannot be entered mid-way).
"""

from __future__ import annotations

import os
import struct
from typing import Iterable, Optional, Tuple, Union

import numpy as np

from . import _diagnose, _engine, fs
from .blockgzip import MemberTable, strip_trailer, table_from_data
from ._engine._common import (
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    VERIFY_ALL,
    VERIFY_LENGTHS,
    WALK_BAD_LENGTH_CRC,
    WALK_PAST_END,
    WALK_SHORT_HEADER,
)
from .errors import CorruptRecordError, IndexMismatchError, OverwriteRefusedError, TruncatedRecordError
from .records import RecordReader, resolve_compression

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
    payload CRCs only with `verify`, which reads the whole file. Without it a local,
    uncompressed file is walked header to header (`_walk`): payloads are never read.
    """
    level = VERIFY_ALL if verify else VERIFY_LENGTHS
    if hasattr(data_path, "read"):  # an open file (Beam's file layer): read it
        source = data_path
    else:
        source = path = os.fspath(data_path)
        filesystem, inner = fs._split_uri(path)
        if not verify and filesystem is None and resolve_compression(path, compression) is None:
            yield _walk(path, inner)
            return
    for chunk in RecordReader(source, compression, verify=level).chunks():
        yield np.stack([chunk.record_offsets, chunk.payload_lengths + FRAME_OVERHEAD], axis=1)


def _walk(path: str, local: str) -> np.ndarray:
    """The (n, 2) index of a local uncompressed file from its 12-byte headers alone (length
    CRCs checked, payloads skipped); errors as `RecordReader` reports them."""
    fd = os.open(local, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        total = os.fstat(fd).st_size
        offsets, lengths, stop, status = _engine.walk_headers(fd, 0, total)
        header = os.pread(fd, HEADER_SIZE, stop) if status else b""
    finally:
        os.close(fd)
    number = len(offsets)
    if status == WALK_SHORT_HEADER:  # the reader's words for the same bytes (`_diagnose`)
        raise TruncatedRecordError(path, stop, number, _diagnose.short_tail(header, at_start=stop == 0))
    if status == WALK_BAD_LENGTH_CRC:
        raise CorruptRecordError(path, stop, number, _diagnose.bad_length_crc(stop, header))
    if status == WALK_PAST_END:
        (length,) = struct.unpack_from("<Q", header)
        raise TruncatedRecordError(
            path, stop, number,
            f"length field says {length} payload bytes, so {length + FOOTER_SIZE} bytes must follow the header, "
            f"but only {max(total - stop - HEADER_SIZE, 0)} do (truncated or corrupted record)",
        )
    return np.stack([offsets, lengths + FRAME_OVERHEAD], axis=1)


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


_INDEX_BYTES = frozenset(b"0123456789 \t\r\n")
_SNIFF_BYTES = 1 << 16


def looks_like_index(path) -> bool:
    """Whether an existing file may be replaced by an index: its name is not a data file's
    (`*.tfrecord*`) and its first 64 KiB hold only index text (lines of digits and spaces, or
    `#` lines such as a block-gzip member table)."""
    name = os.path.basename(os.fspath(path).split("?", 1)[0])
    if ".tfrecord" in name and not name.endswith(INDEX_SUFFIX):
        return False
    with fs.open_input(path) as handle:
        head = handle.read(_SNIFF_BYTES)
    lines = head.split(b"\n")
    return all(set(line) <= _INDEX_BYTES or line.startswith(b"#") for line in lines[:-1]) and (
        set(lines[-1]) <= _INDEX_BYTES or lines[-1].startswith(b"#"))


def check_index_target(index_path, data_path=None) -> None:
    """Raise OverwriteRefusedError when writing an index to `index_path` would replace a file
    that is not an index (a data file named by an unquoted glob, the data file itself)."""
    target = os.fspath(index_path)
    if data_path is not None and os.path.abspath(target) == os.path.abspath(os.fspath(data_path)):
        raise OverwriteRefusedError(target, None, None, "the index path is the data file itself")
    if fs.exists(target) and not looks_like_index(target):
        raise OverwriteRefusedError(
            target, None, None,
            "refusing to write an index over this file: it is not a .tfindex file (it holds data or "
            "other bytes). To index several files, quote the glob or pass a directory: "
            "tfrecord2idx 'train-*.tfrecord'",
        )


def write_index(index: np.ndarray, index_path, members: Optional["MemberTable"] = None, *,
                atomic_output=None) -> None:
    """Write an index atomically (temporary name, then rename), never over a non-index file; a
    block-gzip file's member table (`blockgzip`) goes after the records as `#` lines.

    `atomic_output` is the file layer's `atomic_output` (default the core's `fs`); Beam code
    passes `tfrecord_beam.beam._fs.atomic_output` so that its writes go through Beam.
    """
    if atomic_output is None:
        check_index_target(index_path)
    with (atomic_output or fs.atomic_output)(os.fspath(index_path)) as (handle, commit):
        handle.write(format_index(index))
        if members is not None:
            handle.write(members.format())
        commit()


def create_index(data_path, index_path=None, compression: Optional[str] = "auto", verify: bool = False) -> np.ndarray:
    """Build the index of `data_path` and write it (beside the data by default); returns it.

    A corrupt or truncated data file raises before anything is written, so no partial index
    is left behind. A block-gzip file's member table is rebuilt from its members' headers.
    """
    index_path = index_path or default_index_path(data_path)
    check_index_target(index_path, data_path)  # before the (possibly long) build
    index = build_index(data_path, compression, verify)
    gzip = resolve_compression(os.fspath(data_path), compression) == "gzip"
    members = table_from_data(data_path, index) if gzip else None  # block-gzip: keep it seekable
    write_index(index, index_path, members)
    return index


def load_index(index_path) -> np.ndarray:
    """Read a `.tfindex` file of 0, 1 or N lines into an (n, 2) int64 array (`#` lines, such
    as a block-gzip member table, are skipped).

    The entries must start at offset 0 and follow each other (each offset the previous one
    plus its length); `check_index` also compares the end with the data file's size.
    """
    path = os.fspath(index_path)
    with fs.open_input(path) as handle:
        text = strip_trailer(handle.read().decode("ascii", errors="replace"))
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
            if len(parts) == 2 and all(p.isdigit() for p in parts) and not all(int(p) < 1 << 63 for p in parts):
                raise IndexMismatchError(path, None, number, f"index line {number + 1} ({line.strip()}): a number "
                                         "does not fit in 64 bits (a corrupt index)") from None
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise IndexMismatchError(path, None, number, f"index line {number + 1} is not 'offset length': {line!r}") from None
        raise
    overflow = np.flatnonzero(index[:, 1] > np.iinfo(np.int64).max - index[:, 0]) if len(index) else []
    if len(overflow):
        bad = int(overflow[0])
        raise IndexMismatchError(
            path, None, bad,
            f"index line {bad + 1} ({index[bad, 0]} {index[bad, 1]}): offset + length overflows 64 bits "
            "(a corrupt index)",
        )
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
    end = int(index[-1, 0]) + int(index[-1, 1]) if len(index) else 0  # Python ints: no int64 overflow
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
