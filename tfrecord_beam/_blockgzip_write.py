"""Writing block-gzip files: records gathered into ~`block_bytes` members, each one gzip member.

Deflating uses ISA-L (`isal`, ~10x zlib's speed at the same size here) when it is installed,
else zlib; `TFRECORD_BEAM_DEFLATE=zlib` forces zlib. The format is in `blockgzip`.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import BinaryIO, List, Sequence, Tuple, Union

import numpy as np

from . import compression as _compression
from ._streams import INFLATERS
from .blockgzip import _EXTRA, DEFAULT_BLOCK_BYTES, HEADER_PREFIX, MemberTable, from_members

DEFAULT_DEFLATER = os.environ.get("TFRECORD_BEAM_DEFLATE") or ("isal" if "isal" in INFLATERS else "zlib")
_TRAILER = struct.Struct("<II")


def _isal_level(level: int) -> int:
    """zlib's level scale (-1 default, 1-9) on ISA-L's 1-3: 1-3 -> 1, default and 4-6 -> 2, 7-9 -> 3."""
    return 2 if level < 0 else 1 if level <= 3 else 2 if level <= 6 else 3


def deflate_member(data: bytes, level: int = -1, engine: str = DEFAULT_DEFLATER) -> bytes:
    """`data` as one gzip member carrying our FEXTRA subfield (its own sizes).

    Level 0 stores (zlib, no compression); other levels go to ISA-L when it is the engine.
    """
    if engine == "isal" and level != 0:
        body = INFLATERS["isal"].compress(data, _isal_level(level), wbits=-15)
    else:
        body = zlib.compress(data, level, wbits=-15)
    crc = INFLATERS[engine if engine in INFLATERS else "zlib"].crc32(data)
    size = len(HEADER_PREFIX) + _EXTRA.size + len(body) + _TRAILER.size
    return b"".join(
        [HEADER_PREFIX, _EXTRA.pack(size, len(data)), body, _TRAILER.pack(crc & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)]
    )


class BlockCompressor:
    """Gathers framed records and writes them as gzip members of whole records.

    A member is closed at the first record end at or past `block_bytes` of uncompressed
    records, so members hold whole records and a record larger than a block gets a member
    of its own (with the records before it). Holds at most one member's records in memory.
    """

    def __init__(self, out: BinaryIO, block_bytes: int, level: int = -1) -> None:
        if int(block_bytes) < 1:
            raise ValueError(f"block_bytes must be >= 1, got {block_bytes}")
        self._out = out
        self.block_bytes = int(block_bytes)
        self.level = level
        self._pending: List[memoryview] = []
        self._pending_bytes = 0
        self._sizes: List[Tuple[int, int]] = []  # (size on disk, uncompressed size) per member

    def add(self, framed: Union[bytes, memoryview], record_sizes: Union[Sequence[int], np.ndarray]) -> None:
        """Add whole frames (`record_sizes` their sizes, adding up to len(framed))."""
        view = memoryview(framed)
        ends = np.cumsum(np.asarray(record_sizes, dtype=np.int64))
        pos = 0
        while pos < len(view):
            room = self.block_bytes - self._pending_bytes
            i = int(np.searchsorted(ends, pos + room, side="left"))
            if i >= len(ends):
                self._pending.append(view[pos:])
                self._pending_bytes += len(view) - pos
                return
            cut = int(ends[i])
            self._pending.append(view[pos:cut])
            self._pending_bytes += cut - pos
            self._flush_member()
            pos = cut

    def _flush_member(self) -> None:
        data = b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        member = deflate_member(data, self.level)
        self._out.write(member)
        self._sizes.append((len(member), len(data)))

    def finish(self) -> MemberTable:
        """Write the last member (one empty member for a file without records); return the table."""
        if self._pending_bytes or not self._sizes:
            self._flush_member()
        return from_members(self._sizes)


def compressor_for(
    out: BinaryIO, compression, with_index: bool, block_bytes, level: int, path: str = ""
) -> "BlockCompressor | None":
    """The BlockCompressor a RecordWriter uses, or None for one plain stream (or no compression).

    `block_bytes` None means blocks of DEFAULT_BLOCK_BYTES when an index is written (that
    is where the member table goes), else one stream; 0 means one stream.
    """
    if compression is None:
        return None
    members = _compression.seeks_by_members(compression)
    if block_bytes is None:
        block_bytes = DEFAULT_BLOCK_BYTES if members and with_index else 0
    if not block_bytes:
        return None
    if not members:
        raise ValueError(f"{path}: block_bytes needs GZIP compression (got {compression}, which has no members)")
    return BlockCompressor(out, block_bytes, level)
