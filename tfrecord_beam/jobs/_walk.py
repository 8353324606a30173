"""Walk the frames of a TFRecord file by their headers: where each record starts, how big it
is and its payload CRC, without reading payloads unless asked to.

This is what planned jobs (build_index, unshuffled reshard, mix) need from their inputs: record
counts and byte ranges per file, and a cheap order-independent fingerprint of the records.

Every length CRC is checked, so a flipped length can never shift the frames that follow it
(issue 10 item 10); payload CRCs too with `verify=VERIFY_ALL`. Uncompressed local files are
walked adaptively: small records in 4 MiB reads scanned in C, records of
`SEEK_FRAME_BYTES` or more by the header walk `walk_headers` (one small positional read per
record from 4 bytes before its header: the previous footer and the header), seeking over the
payload, until the records are small again. Everything else (compressed or remote files, payload
verification) goes through `RecordReader.chunks`. Any problem is reported by `RecordReader`
itself (re-read from the record at fault), so the errors, which name the file, the record and
its offset, are the reader's.

`walk_frames_skipping` is the walk of `--skip_corrupt`: every byte read, both CRCs checked,
and each corrupt record reported and stepped over by `skipping.SkippingReader` (its resync
after damage, the rest of a damaged compressed file lost) instead of raised.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Callable, Iterator, NamedTuple, Optional, Tuple

import numpy as np

from .. import _engine
from .. import digest as _digest
from .._engine._common import FRAME_OVERHEAD, HEADER_SIZE, STATUS_OK, VERIFY_ALL, VERIFY_LENGTHS, WALK_DONE
from ..errors import CorruptRecordError
from ..records import ReadSpan, RecordChunk, RecordReader
from ..skipping import OnCorrupt, SkippingReader

READ_BYTES = 1 << 22  # one positional read while scanning small records
SEEK_FRAME_BYTES = 1 << 13  # frames at least this big are walked by seeking over their payload
BLOCK_RECORDS = 1 << 14  # frames per FrameBlock in seek mode
_HEADER = struct.Struct("<QI")


class FrameBlock(NamedTuple):
    """Consecutive frames of one file: record numbers first_record .. first_record + len - 1."""

    first_record: int
    offsets: np.ndarray  # int64: where each frame's header starts (uncompressed stream)
    sizes: np.ndarray  # int64: frame sizes (HEADER + payload + FOOTER)
    footers: np.ndarray  # uint32: each payload's masked CRC32C as stored in its footer

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def end(self) -> int:
        """Where the frame after the block starts."""
        return int(self.offsets[-1] + self.sizes[-1]) if len(self.offsets) else 0


def chunk_footers(chunk: RecordChunk) -> np.ndarray:
    """The stored payload CRCs (uint32) of a RecordChunk's records, read from its buffer."""
    return footers_at(chunk.buffer, chunk.payload_offsets + chunk.payload_lengths)


footers_at = _digest.footers_at


def chunk_block(chunk: RecordChunk, first_record: int) -> FrameBlock:
    """A RecordChunk's frames as a FrameBlock."""
    return FrameBlock(
        first_record,
        chunk.record_offsets.astype(np.int64),
        chunk.payload_lengths.astype(np.int64) + FRAME_OVERHEAD,
        chunk_footers(chunk),
    )


def walk_frames(
    raw: BinaryIO,
    compression: Optional[str],
    path: Optional[str],
    *,
    verify: int = VERIFY_LENGTHS,
    start_offset: int = 0,
    first_record: Optional[int] = 0,
    end_offset: Optional[int] = None,
    members=None,
) -> Iterator[FrameBlock]:
    """Yield the frames of a file, from the record boundary `start_offset` to its end.

    `raw` is the open (compressed) file; `verify` is VERIFY_LENGTHS (length CRCs, the
    default: payloads are skipped where possible) or VERIFY_ALL (both CRCs: every byte is
    read). A bad CRC or a truncated file raises CorruptRecordError / TruncatedRecordError
    naming `path`, the record number and its offset. With `end_offset` the walk stops before
    the first record starting at or after it; `members` (a block-gzip `MemberTable`, or a
    window of one) lets a compressed walk start at a member and inflate only up to
    `end_offset` (as `RecordReader` does). `first_record` None: the record numbers are not
    known (a part of a file walked on its own): blocks count from 0, errors name offsets.
    """
    fileno = _fileno(raw) if compression is None and verify != VERIFY_ALL and end_offset is None else None
    if fileno is None or first_record is None:  # the local walk names record numbers: it needs them
        yield from _reader_blocks(raw, compression, path, verify, start_offset, first_record, end_offset, members)
    else:
        yield from _walk_local(raw, fileno, path, start_offset, first_record)


def walk_frames_skipping(
    open_file: Callable[[], BinaryIO],
    compression: Optional[str],
    path: str,
    on_corrupt: OnCorrupt,
    *,
    chunk_size: int = READ_BYTES,
) -> Iterator[FrameBlock]:
    """Yield the intact frames of a file, both CRCs checked; every corrupt record (bad length
    or payload CRC, impossible length, truncated tail, damaged compressed stream) goes to
    `on_corrupt(path, offset, reason)` and is stepped over by `SkippingReader`'s rules.

    Record numbers (`FrameBlock.first_record`) count intact records only. Where the reader
    goes on after damage depends on the damage alone, so a `SkippingReader` started at any
    record boundary this walk passed (a survey checkpoint) steps over the same damage to the
    same records: that is how planned copies of a damaged file (`_copy.piece_chunks`) get
    exactly the records the survey counted.
    """
    reader = SkippingReader(
        path,
        ReadSpan(compression, verify=True, chunk_size=chunk_size),
        open_file=open_file,
        skip_corrupt=True,
        on_corrupt=on_corrupt,
    )
    number = 0
    for chunk in reader.chunks():
        yield chunk_block(chunk, number)
        number += len(chunk)


def _fileno(raw) -> Optional[int]:
    try:
        return raw.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _reader_blocks(
    raw, compression, path, verify, start_offset, first_record, end_offset=None, members=None
) -> Iterator[FrameBlock]:
    reader = RecordReader(
        raw,
        compression,
        verify=verify,
        start_offset=start_offset,
        end_offset=end_offset,
        first_record_number=first_record,
        chunk_size=READ_BYTES,
        members=members,
    )
    reader.path = reader.path or path
    number = first_record or 0
    for chunk in reader.chunks():
        yield chunk_block(chunk, number)
        number += len(chunk)


def _report(raw, path, offset: int, number: int) -> None:
    """Let RecordReader describe the problem with the record at `offset` (it raises)."""
    reader = RecordReader(raw, None, verify=VERIFY_LENGTHS, start_offset=offset, first_record_number=number)
    reader.path = reader.path or path
    for _ in reader.chunks():
        break
    raise CorruptRecordError(path, offset, number, "invalid record framing")  # pragma: no cover


def _walk_local(raw, fd: int, path, pos: int, number: int) -> Iterator[FrameBlock]:
    size = os.fstat(fd).st_size
    scan = _engine.scan_frames
    crc = _engine.masked_crc32c
    seek_mode = False
    while pos < size:
        if not seek_mode:
            buf = os.pread(fd, READ_BYTES, pos)
            offsets, lengths, consumed, status = scan(buf, VERIFY_LENGTHS)
            n = len(offsets)
            if n:
                yield FrameBlock(
                    number, offsets - HEADER_SIZE + pos, lengths + FRAME_OVERHEAD, footers_at(buf, offsets + lengths)
                )
                number += n
                pos += consumed
            if pos >= size:
                return
            if status != STATUS_OK:
                head = buf[consumed : consumed + HEADER_SIZE]
                if len(head) < HEADER_SIZE:  # the read ended inside a header
                    head = os.pread(fd, HEADER_SIZE, pos)
                if len(head) < HEADER_SIZE:
                    _report(raw, path, pos, number)  # the file ends inside a header
                length, length_crc = _HEADER.unpack_from(head)
                if crc(head[:8]) != length_crc or length > size - pos - FRAME_OVERHEAD:
                    _report(raw, path, pos, number)
                # a big frame, or one larger than a read: walk it by its header (else the read cut it)
                seek_mode = n == 0 or length + FRAME_OVERHEAD >= SEEK_FRAME_BYTES
            elif n and consumed >= n * SEEK_FRAME_BYTES:
                seek_mode = True
            continue
        # big frames: the header walk (a small read from 4 bytes before each header: the
        # previous footer and this header), a block of records at a time
        offsets, lengths, footers, pos, status = _engine.walk_headers(fd, pos, size, BLOCK_RECORDS)
        if len(offsets):
            yield FrameBlock(number, offsets, lengths + FRAME_OVERHEAD, footers)
            number += len(offsets)
        if status != WALK_DONE:  # a bad length CRC, a frame past the end, a file ending in a header
            _report(raw, path, pos, number)
        seek_mode = bool(len(lengths)) and int(lengths[-1]) + FRAME_OVERHEAD >= SEEK_FRAME_BYTES


# ---------------------------------------------------------------------------------------------
# The order-independent proof that an output holds exactly some records


def frame_digest(footers: np.ndarray, sizes: np.ndarray) -> Tuple[int, int, int]:
    """`digest.frame_digest` of frames given their footers and frame sizes."""
    return _digest.frame_digest(footers, np.asarray(sizes, dtype=np.int64) - FRAME_OVERHEAD)


add_digests = _digest.add_digests
