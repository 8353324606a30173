"""Stream planned pieces of input files into one output shard, copying framed bytes.

Each piece is read from its checkpoint by `RecordReader.chunks` with both CRCs checked (by
`SkippingReader` for a `--skip_corrupt` survey's pieces: see `_plan`); the
frames that belong to the piece are written as they are (no re-framing, no per-record Python
objects) and the shard's `.tfindex` is written from the frame sizes as it goes. Memory is a
read chunk (or one record, when larger) plus a chunk of index lines, whatever the sizes of
the inputs and of the shard.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import BinaryIO, Callable, Iterable, Optional, Tuple, Union

import numpy as np

from .. import blockgzip
from .. import compression as _compression
from .._engine._common import FRAME_OVERHEAD
from ..errors import CorruptRecordError
from ..fs import AtomicOutput
from ..records import ReadSpan, RecordReader, RecordWriter
from ..skipping import SkippingReader
from ._plan import Piece
from ._walk import add_digests, chunk_footers, frame_digest
from ._written import check_written

COPY_READ_BYTES = 1 << 22
Opener = Callable[[str], BinaryIO]


def piece_members(piece: Piece, raw: BinaryIO, open_input: Opener):
    """The member table to enter a GZIP piece by (`RecordReader(members=...)`): the block-gzip
    table of the file's index (checked against the file's size, as every reader checks it),
    or False (a piece from the file's start, another compression, or a plain gzip stream:
    inflated from the start)."""
    if not _compression.seeks_by_members(piece.compression) or (piece.from_offset == 0 and piece.to_offset is None):
        return False
    size = raw.seek(0, os.SEEK_END)
    raw.seek(0)
    return blockgzip.member_table_for(piece.path, opener=open_input, file_size=size) or False


def piece_chunks(piece: Piece, open_input: Opener) -> Iterable[Tuple[memoryview, np.ndarray, np.ndarray]]:
    """(framed bytes, frame sizes, footers) of a piece's records, both CRCs checked, in order.

    A block-gzip piece inflates its own members only (from the one holding its first record).
    A piece of a `--skip_corrupt` survey is read by the same skipping reader (its reports are
    the survey's, already listed, so they are dropped here), which steps over the same damage.
    A records piece whose file ends before its last record fails: the file changed since it
    was surveyed.
    """
    stop = piece.hi if piece.unit == "bytes" else piece.to_offset
    raw = None
    try:
        reader: Union[RecordReader, SkippingReader]
        span = ReadSpan(
            piece.compression,
            verify=True,
            start_offset=piece.from_offset,
            end_offset=stop,
            first_record_number=piece.from_record,
            chunk_size=COPY_READ_BYTES,
            check_end=False,  # the next piece follows the chain from a checkpoint
        )
        if piece.skip_corrupt:
            reader = SkippingReader(piece.path, span, open_file=lambda: open_input(piece.path), skip_corrupt=True)
        else:
            raw = open_input(piece.path)
            reader = RecordReader.over(raw, replace(span, members=piece_members(piece, raw, open_input)))
            reader.path = piece.path
        number = piece.from_record
        ended = piece.from_offset  # where the records read so far end (the stream's offset)
        for chunk in reader.chunks():
            n = len(chunk)
            ended = int(chunk.record_offsets[-1] + chunk.payload_lengths[-1]) + FRAME_OVERHEAD
            if piece.unit == "records":
                a, b = max(piece.lo - number, 0), min(piece.hi - number, n)
            else:
                a = int(np.searchsorted(chunk.record_offsets, piece.lo, side="left"))
                b = n
            number += n
            if a < b:
                offsets, lengths = chunk.payload_offsets[a:b], chunk.payload_lengths[a:b]
                start = int(offsets[0]) - 12
                end = int(offsets[-1] + lengths[-1]) + 4
                sizes = lengths.astype(np.int64) + 16
                footers = chunk_footers(chunk)[a:b]
                yield memoryview(chunk.buffer)[start:end], sizes, footers
            if piece.unit == "records" and number >= piece.hi:
                return
        if piece.unit == "records":
            raise CorruptRecordError(
                piece.path,
                ended,
                number,
                f"the file ends here, before the {piece.hi} records its survey found: it changed while the job ran",
            )
    finally:
        if raw is not None:
            raw.close()


def copy_pieces(
    pieces: Iterable[Piece],
    data_path: str,
    index_path: Optional[str],
    compression: Optional[str],
    open_input: Opener,
    atomic_output: AtomicOutput,
    progress: Optional[Callable[[int, int], None]] = None,
    file_size: Optional[Callable[[str], int]] = None,
) -> dict:
    """Copy the pieces, in order, into one new file (and its index); returns its stats:
    records, bytes (payload bytes), checksum (see `_walk.frame_digest`), stream_bytes,
    file_bytes and groups (records per source group). Nothing is left behind on failure.

    The records, bytes and checksum are those the writer wrote (`RecordWriter.digest`, from
    the footers of the frames it handed to the file), checked equal to those read, and the
    file's size on disk (`file_size`, default `os.path.getsize`) equal to what the writer
    wrote (`_written.check_written`): a shard that lost, doubled or cut off records fails here,
    named, before any commit."""
    # the writer streams its own index (GZIP shards with an index are block-gzip)
    writer = RecordWriter(data_path, compression, index_path=index_path, atomic_output=atomic_output)
    digest = (0, 0, 0)
    groups: dict = {}
    try:
        for piece in pieces:
            for framed, sizes, footers in piece_chunks(piece, open_input):
                writer.write_framed(framed, sizes)
                part = frame_digest(footers, sizes)
                digest = add_digests(digest, part)
                groups[piece.group] = groups.get(piece.group, 0) + part[0]
                if progress is not None:
                    progress(part[0], len(framed))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    digest, file_bytes = check_written(data_path, writer, file_size or os.path.getsize, meant=digest)
    width = max(groups) + 1 if groups else 0
    return {
        "records": digest[0],
        "bytes": digest[1],
        "checksum": digest[2],
        "stream_bytes": writer.offset,
        "file_bytes": file_bytes,
        "groups": [groups.get(g, 0) for g in range(width)],
    }
