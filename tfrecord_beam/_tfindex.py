"""The `.tfindex` format: one "offset length" line per record, as the `tfrecord` package and DALI
use; its names, text, loading and checks, and index lines streamed as frames are written.

`offset` is where the record's 12-byte header starts and `length` is the whole frame
(12 + payload + 4). For GZIP/ZLIB files both count bytes of the *uncompressed* stream; a
block-gzip file's member table follows the records as `#` lines (`blockgzip`), which the
`tfrecord` package and DALI do not read. This module sits below `records` (which writes
indexes beside data) and `index` (which builds and verifies them from data files).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO, Iterator, Optional, Tuple, Union

import numpy as np

from . import _engine, _mix, fs
from ._engine import _index_text
from .errors import IndexMismatchError, OverwriteRefusedError

if TYPE_CHECKING:  # blockgzip finds a data file's index by `default_index_path`: it imports us
    from .blockgzip import MemberTable

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


_FORMAT_ROWS = 1 << 16  # rows formatted at a time by `write_index`


def format_index(index: np.ndarray) -> bytes:
    """The `.tfindex` text of an (n, 2) array."""
    flat = np.asarray(index).reshape(-1).tolist()
    return (("%d %d\n" * (len(flat) // 2)) % tuple(flat)).encode("ascii")  # one C-level format


_INDEX_BYTES = frozenset(b"0123456789 \t\r\n")
_SNIFF_BYTES = 1 << 16


def looks_like_index(path) -> bool:
    """Whether an existing file may be replaced by an index: its first 64 KiB hold only index
    text (lines of digits and spaces, or `#` lines such as a block-gzip member table).

    Decided by the bytes, never by the name: an index named the DALI way (`x.tfrecord.idx`)
    is an index, and a TFRecord file is never index text whatever its name (its first 8 bytes,
    a little-endian length, hold a 0x00 byte; a compressed one starts with its codec's magic).
    Only an empty file says nothing by its bytes (an empty index, or an empty shard): it is
    taken for data when its name holds a data word anywhere (`.tfrecord`, `.tfrecords`,
    `.tfrec`, `.records`, any case: `x.tfrecord`, `x.tfrecord.gz`, TFDS's
    `x.tfrecord-00001-of-00002`), so `tfrecord2idx a.tfrecord-0000*` (an unquoted glob) leaves
    an empty second shard alone; unless the name ends as an index's (`idx`, `index`, as in
    `x.tfrecord.idx`, `x.tfindex`): an empty file named after its data as an index is a failed
    index and is rebuilt."""
    with fs.open_input(path) as handle:
        head = handle.read(_SNIFF_BYTES)
    if not head:
        return not _data_file_name(os.fspath(path))
    lines = head.split(b"\n")
    return all(set(line) <= _INDEX_BYTES or line.startswith(b"#") for line in lines[:-1]) and (
        set(lines[-1]) <= _INDEX_BYTES or lines[-1].startswith(b"#")
    )


_DATA_WORDS = (".tfrec", ".records")  # `.tfrec` is in `.tfrecord` and `.tfrecords` too
_INDEX_ENDINGS = ("idx", "index")  # `x.tfrecord.idx`, `x.tfindex`, `x.tfrecords-index`


def _data_file_name(path: str) -> bool:
    """Whether an (empty) file's name says data: a data word anywhere in its last component
    (`.tfrecord`, `.tfrecords`, `.tfrec`, `.records`, any case), so TFDS's
    `x.tfrecord-00001-of-00002` and `x.tfrecord.gz-00001-of-00002` count, while a name that
    ends as an index's (`x.tfrecord.idx`, `x.tfindex`) does not."""
    name = os.path.basename(fs.split_query(path)[0].rstrip("/")).lower()
    if name.endswith(_INDEX_ENDINGS):
        return False
    return any(word in name for word in _DATA_WORDS)


def check_index_target(index_path, data_path=None) -> None:
    """Raise OverwriteRefusedError when writing an index to `index_path` would replace a file
    that is not an index (a data file named by an unquoted glob, the data file itself)."""
    target = os.fspath(index_path)
    if data_path is not None and os.path.abspath(target) == os.path.abspath(os.fspath(data_path)):
        raise OverwriteRefusedError(target, None, None, "the index path is the data file itself")
    if fs.exists(target) and not looks_like_index(target):
        raise OverwriteRefusedError(
            target,
            None,
            None,
            "refusing to write an index over this file: it is not a .tfindex file (it holds data or "
            "other bytes). To index several files, quote the glob or pass a directory: "
            "tfrecord2idx 'train-*.tfrecord'",
        )


def write_index(
    index: np.ndarray,
    index_path,
    members: Optional["MemberTable"] = None,
    *,
    atomic_output: Optional[AtomicOutput] = None,
) -> None:
    """Write an index atomically (temporary name, then rename), never over a non-index file; a
    block-gzip file's member table (`blockgzip`) goes after the records as `#` lines.

    `atomic_output` is the file layer's `atomic_output` (default the core's `fs`); Beam code
    passes `tfrecord_beam.beam._fs.atomic_output` so that its writes go through Beam.
    """
    if atomic_output is None:
        check_index_target(index_path)
    with (atomic_output or fs.atomic_output)(os.fspath(index_path)) as (handle, commit):
        for lo in range(0, len(index), _FORMAT_ROWS):  # a slice at a time: the text of all rows at once
            handle.write(format_index(index[lo : lo + _FORMAT_ROWS]))  # costs ~100 B a record
        if members is not None:
            handle.write(members.format())
        commit()


def load_index(index_path) -> np.ndarray:
    """Read a `.tfindex` file of 0, 1 or N lines into an (n, 2) int64 array (blank and `#`
    lines, such as a block-gzip member table, are skipped).

    The text is parsed in one pass by the engine's `index_starts` (compiled, or its numpy twin
    `_engine._index_text`, which also states the grammar); a malformed line is an
    IndexMismatchError naming the file, the line number and what is wrong. The entries must
    start at offset 0 and follow each other (each offset the previous one plus its length);
    `check_index` also compares the end with the data file's size.
    """
    starts, end = load_index_starts(index_path)
    index = np.empty((len(starts), 2), dtype=np.int64)
    index[:, 0] = starts
    if len(starts):  # the chain holds, so each length is where the next entry starts, less its own start
        np.subtract(starts[1:], starts[:-1], out=index[:-1, 1])
        index[-1, 1] = end - int(starts[-1])
    return index


def load_index_starts(index_path) -> Tuple[np.ndarray, int]:
    """`load_index` as (each entry's offset, where the last entry ends): the same checks and
    errors, half the memory (8 bytes a record), for readers that only seek by the index. A
    local index is memory-mapped, not read into a buffer of its own."""
    path = os.fspath(index_path)
    with fs.mapped_input(path) as data:
        starts, end, error, fault = _engine.index_starts(data)
        if error is not None:
            _raise_parse_error(path, data, len(starts), error)
        if fault is not None:
            _raise_chain_fault(path, data, fault)
    return starts, end


INDEX_PIECE = 1 << 20  # bytes of index text `iter_index_starts` parses at a time (4 MiB: +16 MiB RssAnon)


def iter_index_starts(index_path) -> Iterator[Tuple[np.ndarray, int]]:
    """`load_index_starts` a piece at a time: `(starts, end)` of each line-aligned piece of about
    `INDEX_PIECE` bytes that holds entries (their offsets, where the last one ends), each
    piece's chain continuing the last. Memory is bounded by a piece (a local index is mapped),
    where `load_index` holds 24 B a record.

    Raises what `load_index` raises, with the same message and the file's line and entry
    numbers: a malformed line when its piece is reached (nothing after it is parsed, as in
    `load_index`), a chain fault after the last piece (an overflow anywhere wins over an
    earlier gap, as in `index_starts`). The pieces before an error have been yielded."""
    path = os.fspath(index_path)
    with fs.mapped_input(path) as data:
        size, pos, end, entries = len(data), 0, 0, 0
        overflow: Optional[IndexMismatchError] = None
        fault_error: Optional[IndexMismatchError] = None
        while pos < size:
            stop = size if size - pos <= INDEX_PIECE else data.rfind(b"\n", pos, pos + INDEX_PIECE) + 1
            if stop <= pos:  # a line longer than a piece: up to its end
                newline = data.find(b"\n", pos + INDEX_PIECE)
                stop = size if newline < 0 else newline + 1
            view = memoryview(data)[pos:stop]
            try:
                starts, piece_end, error, fault = _engine.index_starts(view, end)
            finally:
                view.release()
            if error is not None:  # the file's line and entry numbers, not the piece's
                code, line, line_start = error
                lines = _lines_before(data, pos)
                _raise_parse_error(path, data[pos:stop], entries + len(starts), (code, line + lines, line_start))
            if fault is not None and (
                overflow is None if fault[0] == _index_text.CHAIN_OVERFLOW else fault_error is None
            ):
                if fault[0] == _index_text.CHAIN_NOT_AT_ZERO and entries:  # the entry before is the last piece's
                    fault = (_index_text.CHAIN_GAP, fault[1], fault[2], fault[3], end)
                try:
                    _raise_chain_fault(path, data[pos:stop], fault, _lines_before(data, pos), entries)
                except IndexMismatchError as exc:
                    if fault[0] == _index_text.CHAIN_OVERFLOW:
                        overflow = exc
                    else:
                        fault_error = exc
            if len(starts):
                entries, end = entries + len(starts), piece_end
                yield starts, piece_end
            pos = stop
    if overflow is not None or fault_error is not None:
        raise overflow or fault_error  # type: ignore[misc]


def _lines_before(data, pos: int) -> int:
    """How many lines end before `pos` in index text (for error messages only: counted in
    bounded slices)."""
    return sum(data[a : min(pos, a + INDEX_PIECE)].count(b"\n") for a in range(0, pos, INDEX_PIECE))


def _raise_chain_fault(
    path: str, data, fault: Tuple[int, int, int, int, int], lines_before: int = 0, entries_before: int = 0
) -> None:
    """IndexMismatchError for `index_starts`'s chain fault `(code, entry, offset, length, previous end)`
    in `data`, a stretch of the index text after `lines_before` lines and `entries_before` entries."""
    code, bad, offset, length, previous_end = fault
    line = _index_text.entry_line(data, bad) + lines_before
    bad += entries_before
    if code == _index_text.CHAIN_OVERFLOW:
        raise IndexMismatchError(
            path,
            None,
            bad,
            f"index line {line} ({offset} {length}): offset + length overflows 64 bits (a corrupt index)",
        )
    if code == _index_text.CHAIN_NOT_AT_ZERO:
        raise IndexMismatchError(
            path, offset, 0, f"index line {line}: index does not start at offset 0 (lines missing)"
        )
    raise IndexMismatchError(
        path,
        offset,
        bad,
        f"index line {line}: index entries are not contiguous (offset {offset}, but the entry before ends at "
        f"{previous_end})",
    )


def _raise_parse_error(path: str, data, entries: int, error: Tuple[int, int, int]) -> None:
    """IndexMismatchError for `index_starts`'s `(code, line, line start)`."""
    code, line, start = error
    stop = data.find(b"\n", start)
    text = data[start : stop if stop >= 0 else len(data)].decode("ascii", errors="replace")
    shown = text if len(text) <= 80 else text[:77] + "..."
    if code == _index_text.ERROR_TOO_BIG:
        reason = f"index line {line} ({shown.strip()}): a number does not fit in 64 bits (a corrupt index)"
    else:
        reason = f"index line {line} is not 'offset length': {shown!r}"
    raise IndexMismatchError(path, None, entries, reason)


def check_index(index: np.ndarray, data_size: Optional[int], index_path=None, data_path=None) -> np.ndarray:
    """Cheap staleness check of a loaded index against its uncompressed data file's size.

    The last entry must end exactly at the end of the file (a file that grew or shrank since
    the index was written fails); returns the index. `data_size` None (compressed) skips it.
    """
    end = int(index[-1, 0]) + int(index[-1, 1]) if len(index) else 0  # Python ints: no int64 overflow
    check_end(end, data_size, index_path, data_path)
    return index


def check_end(end: int, data_size: Optional[int], index_path=None, data_path=None) -> None:
    """`check_index` given where the index's last entry ends."""
    if data_size is not None and end != data_size:
        raise IndexMismatchError(
            None if index_path is None else os.fspath(index_path),
            None,
            None,
            f"index ends at byte {end} but {data_path} has {data_size} bytes (stale index)",
        )


def first_difference(
    index: np.ndarray, frames: np.ndarray, data_name: str, complete: bool = True, first: int = 0
) -> Optional[Tuple[int, str]]:
    """How an index first differs from the (n, 2) rows read from its data, records `first` on
    (all of the rest when `complete`): (record number, what differs, calling the data
    `data_name`), or None when they agree. The one entry-by-entry comparison (`index.verify_index`,
    `inspect`, `verify`); a caller that reads the data a chunk at a time compares each chunk
    with `first` = the records before it, then an empty one with `complete` for the count."""
    frames = np.asarray(frames, dtype=np.int64).reshape(-1, 2)
    return part_difference(
        index[first : first + len(frames)], frames, data_name, first, len(index) if complete else None
    )


def part_difference(
    part: np.ndarray, frames: np.ndarray, data_name: str, first: int, listed: Optional[int] = None
) -> Optional[Tuple[int, str]]:
    """`first_difference` given only the index's rows from record `first` on (`part`: as many
    as the index has, up to len(frames)), and with `listed`, how many entries it has in all
    (for the count check): for callers that read the index a piece at a time."""
    frames = np.asarray(frames, dtype=np.int64).reshape(-1, 2)
    common = len(part)
    diff = np.flatnonzero(np.any(part != frames[:common], axis=1))
    if len(diff):
        k = int(diff[0])
        i = first + k
        return i, (
            f"record {i}: index says offset {part[k, 0]} length {part[k, 1]} but {data_name} "
            f"has offset {frames[k, 0]} length {frames[k, 1]}"
        )
    if listed is not None and listed != first + len(frames):
        return min(listed, first + len(frames)), (
            f"index lists {listed} records but {data_name} holds {first + len(frames)}"
        )
    return None


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


def frame_index(sizes, start: int = 0) -> np.ndarray:
    """The (n, 2) index of frames of `sizes` bytes written back to back from offset `start`."""
    sizes = np.asarray(sizes, dtype=np.int64)
    return np.stack([np.cumsum(sizes) - sizes + start, sizes], axis=1)


AtomicOutput = fs.AtomicOutput


class IndexStream:
    """Writes `.tfindex` lines for frames as they are written, under a temporary name beside
    the index (nothing held in memory); `finish`, then the commit's `move`, puts it in place.

    It keeps the proof of what it wrote, as `RecordWriter` does (`jobs.check_written` reads
    both): `digest`, the `digest.index_digest` of the entries it handed to its file, and
    `file_bytes`, the bytes it handed to it."""

    def __init__(self, path: str, atomic_output: Optional[AtomicOutput] = None) -> None:
        self._cm = (atomic_output or fs.atomic_output)(path)
        self._handle: BinaryIO
        self._commit: fs.Commit
        self._handle, self._commit = self._cm.__enter__()
        self.offset = 0
        self.digest: Tuple[int, int, int] = (0, 0, 0)
        self.file_bytes = 0

    def add(self, sizes) -> None:
        """Index frames of `sizes` bytes that follow those indexed so far."""
        if len(sizes):
            index = frame_index(sizes, self.offset)
            self._write(format_index(index))
            self.digest = _mix.add_digests(self.digest, _mix.index_digest(index[:, 0], index[:, 1]))
            self.offset = int(index[-1, 0] + index[-1, 1])

    def _write(self, text: bytes) -> None:
        self._handle.write(text)
        self.file_bytes += len(text)

    def finish(self, members: Optional["MemberTable"] = None) -> fs.Commit:
        """Finish the temporary file (with a block-gzip member table after the records) without
        moving it; returns the commit whose `move()` puts it in place (`_publish` orders moves)."""
        if members is not None:
            self._write(members.format())
        self._commit.finish()
        return self._commit

    def abort(self) -> None:
        """Drop the temporary index."""
        self._cm.__exit__(RuntimeError, RuntimeError("aborted"), None)
