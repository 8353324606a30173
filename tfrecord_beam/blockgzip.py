"""Block-gzip TFRecord files: whole records per gzip member, and a member table to seek by.

A block-gzip file is an ordinary GZIP TFRecord file (every gzip reader, TensorFlow's
`TFRecordDataset(compression_type="GZIP")` included, reads the members back to back as one
stream) whose members each hold whole records, about `block_bytes` (1 MiB) of uncompressed
records apiece. Knowing where each member starts, in the file and in the uncompressed stream,
a reader can seek to the member that holds an uncompressed offset and inflate from there.

The member table travels at the end of the file's `.tfindex`, as comment lines that the
index's other readers skip (the `tfrecord` package reads indexes with `np.loadtxt`, which
drops `#` lines; DALI stops at the first line that is not two numbers):

    0 120                       <- the usual "offset length" lines (uncompressed stream)
    120 96
    #block-gzip 1               <- format marker and version
    #m 0 0                      <- one per member: compressed offset, uncompressed offset
    #m 31877 1048700
    #end 52011 1702344          <- file size on disk, uncompressed size

The `#end` line lets a reader load the table from the index's last few KiB and find a stale
one (data rewritten since): its compressed size must be the data file's size. Each member
also names its own compressed and uncompressed sizes in a gzip FEXTRA subfield ("TB",
16 bytes, two little-endian uint64), so the table can be rebuilt from the data alone
(`scan_members`).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Callable, List, Optional, Tuple

import numpy as np

from . import fs
from ._streams import DEFAULT_INFLATER, INFLATERS, InflatingReader
from ._tfindex import default_index_path
from .errors import CorruptRecordError, IndexMismatchError

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "MARKER",
    "EXTRA_ID",
    "HEADER_PREFIX",
    "HEADER_SIZE",
    "MemberTable",
    "from_members",
    "parse_trailer",
    "load_member_table",
    "member_table_for",
    "member_ranges",
    "open_at",
    "inflate_member",
    "read_member",
    "scan_members",
    "matches_index",
    "checked_member_table",
    "table_from_data",
    "layout",
]

DEFAULT_BLOCK_BYTES = 1 << 20
MARKER = "#block-gzip 1"
EXTRA_ID = b"TB"
_EXTRA = struct.Struct("<QQ")  # member size on disk, uncompressed size
# ID1 ID2 CM FLG(FEXTRA) MTIME(0) XFL OS(unknown) XLEN, then SI1 SI2 LEN and the subfield
HEADER_PREFIX = (
    b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff"
    + struct.pack("<H", 4 + _EXTRA.size)
    + EXTRA_ID
    + struct.pack("<H", _EXTRA.size)
)
HEADER_SIZE = len(HEADER_PREFIX) + _EXTRA.size
_TAIL_READ = 1 << 16


@dataclass(frozen=True)
class MemberTable:
    """Where each gzip member of a block-gzip file starts.

    `compressed` and `uncompressed` are int64 arrays of n + 1 entries: member i covers file
    bytes [compressed[i], compressed[i+1]) and uncompressed bytes [uncompressed[i],
    uncompressed[i+1]); the last entries are the file's size and the uncompressed size.
    """

    compressed: np.ndarray
    uncompressed: np.ndarray

    def __len__(self) -> int:
        return len(self.compressed) - 1

    @property
    def file_size(self) -> int:
        return int(self.compressed[-1])

    @property
    def data_size(self) -> int:
        return int(self.uncompressed[-1])

    def member_at(self, offset: int) -> int:
        """The member holding uncompressed byte `offset` (the last one for offsets past the end)."""
        m = int(np.searchsorted(self.uncompressed, offset, side="right")) - 1
        return min(max(m, 0), max(len(self) - 1, 0))

    def first_at_or_after(self, compressed_offset: int) -> int:
        """The first member starting at or after file byte `compressed_offset` (len when none)."""
        return int(np.searchsorted(self.compressed[:-1], compressed_offset, side="left"))

    def window(self, first: int, stop: int) -> "MemberTable":
        """The table of members first .. stop-1 only (n + 1 entries, ending where member `stop`
        starts): what a reader of just those members needs (`open_at` stops inflating at its
        end), and small enough to travel with a unit of work."""
        return MemberTable(self.compressed[first : stop + 1].copy(), self.uncompressed[first : stop + 1].copy())

    def ranges(self) -> List[Tuple[int, int, int]]:
        """(uncompressed start, uncompressed end, compressed member offset) of every member."""
        u, c = self.uncompressed.tolist(), self.compressed.tolist()
        return [(u[i], u[i + 1], c[i]) for i in range(len(self))]

    def format(self) -> bytes:
        """The table as `.tfindex` trailer lines (see the module docstring)."""
        pairs = np.stack([self.compressed[:-1], self.uncompressed[:-1]], axis=1).reshape(-1).tolist()
        body = ("#m %d %d\n" * len(self)) % tuple(pairs)
        return f"{MARKER}\n{body}#end {self.file_size} {self.data_size}\n".encode("ascii")

    def check(self, file_size: Optional[int], index_path=None, data_path=None) -> "MemberTable":
        """Raise IndexMismatchError unless the table ends at the data file's size on disk."""
        if file_size is not None and file_size != self.file_size:
            raise IndexMismatchError(
                None if index_path is None else os.fspath(index_path),
                None,
                None,
                f"gzip member table ends at byte {self.file_size} but {data_path} has {file_size} bytes (stale index)",
            )
        return self


def from_members(sizes: List[Tuple[int, int]]) -> MemberTable:
    """A table from (size on disk, uncompressed size) of each member, in file order."""
    arr = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    zero = np.zeros(1, np.int64)
    return MemberTable(np.concatenate([zero, np.cumsum(arr[:, 0])]), np.concatenate([zero, np.cumsum(arr[:, 1])]))


def parse_trailer(text: str, index_path=None) -> Optional[MemberTable]:
    """The member table in the `#` lines of an index's text (or of its tail), or None without one.

    Only the text after the last `MARKER` line counts; a marker without a complete `#end`
    line (a cut file) raises IndexMismatchError.
    """
    at = text.rfind(MARKER + "\n")
    if at < 0 or (at > 0 and text[at - 1] != "\n"):
        return None
    lines = text[at + len(MARKER) + 1 :].split("\n")
    members = [line.split() for line in lines if line.startswith("#m ")]
    end = [line.split() for line in lines if line.startswith("#end ")]
    try:
        if len(end) != 1 or len(end[0]) != 3 or any(len(m) != 3 for m in members):
            raise ValueError
        table = np.array([m[1:] for m in members] + [end[0][1:]], dtype=np.int64).reshape(-1, 2)
    except (ValueError, OverflowError):
        raise IndexMismatchError(
            None if index_path is None else os.fspath(index_path),
            None,
            None,
            "malformed gzip member table (lines '#m C U' then '#end C U')",
        ) from None
    result = MemberTable(np.ascontiguousarray(table[:, 0]), np.ascontiguousarray(table[:, 1]))
    starts_at_zero = len(result) >= 1 and result.compressed[0] == 0 and result.uncompressed[0] == 0
    if not starts_at_zero or np.any(np.diff(result.compressed) <= 0) or np.any(np.diff(result.uncompressed) < 0):
        raise IndexMismatchError(
            None if index_path is None else os.fspath(index_path),
            None,
            None,
            "gzip member table does not start at 0 or does not increase",
        )
    return result


def load_member_table(index_path, opener: Callable[[str], BinaryIO] = fs.open_input) -> Optional[MemberTable]:
    """The member table at the end of `index_path`, or None when the index has none (or is missing).

    Reads only the index's tail (64 KiB, more for very long tables), so asking costs little
    even for indexes of millions of records. `opener` opens a path for reading (Beam code
    passes its FileSystems opener).
    """
    path = os.fspath(index_path)
    try:
        handle = opener(path)
    except (FileNotFoundError, OSError):
        return None
    with handle:
        size = handle.seek(0, os.SEEK_END)
        window = _TAIL_READ
        while True:
            start = max(0, size - window)
            handle.seek(start)
            text = handle.read(size - start).decode("ascii", errors="replace")
            if not text.rstrip().split("\n")[-1].startswith("#end "):
                return None
            if start == 0 or MARKER + "\n" in text[text.find("\n") + 1 :]:
                return parse_trailer(text if start == 0 else text[text.find("\n") + 1 :], path)
            window *= 4


def member_table_for(
    data_path, index_path=None, opener: Callable[[str], BinaryIO] = fs.open_input, file_size: Optional[int] = None
) -> Optional[MemberTable]:
    """The checked member table of a GZIP data file from its index (default: beside it), or None."""
    ipath = os.fspath(index_path) if index_path is not None else default_index_path(data_path)
    table = load_member_table(ipath, opener)
    if table is None:
        return None
    return table.check(fs.file_size(data_path) if file_size is None else file_size, ipath, data_path)


def member_ranges(
    data_path, index_path=None, split_bytes: Optional[int] = None
) -> Optional[List[Tuple[int, int, int]]]:
    """(uncompressed start, uncompressed end, compressed member offset) of each gzip member of a
    block-gzip file, from its index; None for a file without a member table.

    For planners: each range is a set of whole records that `RecordReader(path, "gzip",
    start_offset=start, end_offset=end)` reads by inflating that range's members only. With
    `split_bytes`, consecutive members are merged into ranges of at least that many bytes on
    disk (the last may be shorter); the offset is then that of the range's first member.
    """
    table = member_table_for(data_path, index_path)
    if table is None:
        return None
    ranges = table.ranges()
    if not split_bytes or not ranges:
        return ranges
    merged = [list(ranges[0])]
    for start, end, offset in ranges[1:]:
        if offset - merged[-1][2] >= split_bytes:
            merged.append([start, end, offset])
        else:
            merged[-1][1] = end
    return [(a, b, c) for a, b, c in merged]


# -- reading ------------------------------------------------------------------------------------
def open_at(
    raw: BinaryIO, table: MemberTable, offset: int, path: Optional[str] = None, end: Optional[int] = None
) -> Tuple[InflatingReader, int]:
    """An inflating stream that starts at the member holding uncompressed `offset`, and the
    uncompressed offset it starts at (skip `offset - that` bytes to reach `offset`).

    With `end` (an uncompressed offset), the stream stops after the member holding `end`
    (or just before the member starting at `end`), or at the table's end: a range read
    inflates its own members only, so damage beyond them is the next range's to find. A
    `MemberTable.window` of some members is read the same way, `end` given.
    """
    m = table.member_at(offset)
    start, at = int(table.compressed[m]), int(table.uncompressed[m])
    raw.seek(start)
    if end is not None:
        if end >= table.data_size:
            stop = table.file_size
        else:
            last = table.member_at(end)
            stop = int(table.compressed[last if int(table.uncompressed[last]) == end else last + 1])
        raw = _Window(raw, start, stop)  # type: ignore[assignment]
    stream = InflatingReader(raw, "gzip", path, uncompressed_offset=at, compressed_offset=start)
    return stream, at


class _Window:
    """File bytes [start, stop) of a binary file positioned at `start`, as a file that ends at
    `stop`: `tell` and `seek` use the file's own offsets, and seeking to the end lands on
    `stop`, so a reader over it sees a file of `stop` bytes (bounds what it can inflate to,
    and lets it re-read a member after damage)."""

    def __init__(self, raw: BinaryIO, start: int, stop: int) -> None:
        self._raw, self._start, self._stop = raw, int(start), max(int(stop), int(start))
        self._pos = self._start

    def read(self, n: int = -1) -> bytes:
        left = self._stop - self._pos
        n = left if n is None or n < 0 else min(n, left)
        data = self._raw.read(n) if n > 0 else b""
        self._pos += len(data)
        return data

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._stop}[whence]
        target = min(max(base + int(offset), self._start), self._stop)
        self._raw.seek(target)
        self._pos = target
        return target

    def close(self) -> None:
        self._raw.close()


def inflate_member(data: bytes, path: Optional[str], uncompressed_offset: int, expected: int) -> bytes:
    """One whole gzip member inflated (CRC32 and size checked by zlib), of `expected` bytes."""
    engine = INFLATERS[DEFAULT_INFLATER]
    try:
        out = engine.decompress(data, 16 + zlib.MAX_WBITS)
    except engine.error as exc:
        raise CorruptRecordError(
            path, uncompressed_offset, None, f"invalid gzip member at uncompressed offset {uncompressed_offset}: {exc}"
        ) from None
    if len(out) != expected:
        raise CorruptRecordError(
            path,
            uncompressed_offset,
            None,
            f"gzip member inflates to {len(out)} bytes but the member table says {expected} (stale index)",
        )
    return out


def read_member(raw: BinaryIO, table: MemberTable, m: int, path: Optional[str] = None) -> bytes:
    """The uncompressed bytes of member `m` (one seek, one read, one inflate)."""
    start, stop = int(table.compressed[m]), int(table.compressed[m + 1])
    raw.seek(start)
    data = raw.read(stop - start)
    return inflate_member(
        data, path, int(table.uncompressed[m]), int(table.uncompressed[m + 1] - table.uncompressed[m])
    )


def scan_members(raw: BinaryIO, path: Optional[str] = None) -> Optional[MemberTable]:
    """Rebuild the member table from the members' own headers (one small read per member), or
    None when the file is not block-gzip (a member without our FEXTRA subfield)."""
    total = raw.seek(0, os.SEEK_END)
    sizes: List[Tuple[int, int]] = []
    pos = 0
    while pos < total:
        raw.seek(pos)
        head = raw.read(HEADER_SIZE)
        if len(head) < HEADER_SIZE or head[: len(HEADER_PREFIX)] != HEADER_PREFIX:
            return None
        size, usize = _EXTRA.unpack_from(head, len(HEADER_PREFIX))
        if size < HEADER_SIZE + 8 or pos + size > total:
            return None
        sizes.append((size, usize))
        pos += size
    return from_members(sizes) if sizes else None


def matches_index(table: MemberTable, index: np.ndarray) -> bool:
    """Whether the members cover the index's records exactly and start at record boundaries."""
    end = int(index[-1].sum()) if len(index) else 0
    starts = table.uncompressed[:-1]
    at = np.searchsorted(index[:, 0], starts) if len(index) else np.zeros(len(starts), np.int64)
    inside = at < len(index)
    return (
        table.data_size == end
        and np.array_equal(index[at[inside], 0], starts[inside])
        and not np.any(starts[~inside] != end)
    )


def checked_member_table(
    data_path, index_path, index: np.ndarray, opener: Callable[[str], BinaryIO] = fs.open_input
) -> Optional[MemberTable]:
    """`member_table_for`, also checked against the loaded index (`matches_index`, else
    IndexMismatchError)."""
    table = member_table_for(data_path, index_path, opener)
    if table is not None and not matches_index(table, index):
        raise IndexMismatchError(
            os.fspath(index_path),
            None,
            None,
            f"gzip member table of {data_path} does not match the index's records (stale index)",
        )
    return table


def table_from_data(data_path, index: np.ndarray) -> Optional[MemberTable]:
    """The member table of a block-gzip file rebuilt from its members' headers, when they agree
    with `index` (its records, built from the data); None for other files."""
    with fs.open_input(os.fspath(data_path)) as raw:
        table = scan_members(raw)
    return table if table is not None and matches_index(table, index) else None


def layout(data_path, index_path=None) -> Tuple[str, Optional[int], str]:
    """How a GZIP file is laid out, for `inspect`: (state, member count or None, detail).

    state: "indexed" (block-gzip with a member table in its index: splits and seeks),
    "unindexed" (block-gzip members, but the index has no table: `index.create_index`
    rebuilds it), "stale" (the table does not match the data), or "stream" (an ordinary
    gzip file: read whole).
    """
    try:
        table = member_table_for(data_path, index_path)
    except IndexMismatchError as exc:
        return "stale", None, str(exc)
    if table is not None:
        return "indexed", len(table), ""
    with fs.open_input(os.fspath(data_path)) as raw:
        scanned = scan_members(raw)
    if scanned is not None:
        return "unindexed", len(scanned), "block-gzip members but no member table in the index"
    return "stream", None, ""
