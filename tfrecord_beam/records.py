"""TFRecord framing: RecordReader / RecordWriter, compression, masked CRC32C, clear errors.

A record on disk is `uint64 length | uint32 masked_crc32c(length) | payload | uint32
masked_crc32c(payload)`, little-endian. A compressed file (GZIP, ZLIB, ZSTD: the codecs of
`compression`) compresses that whole stream; offsets
(in errors, indexes and `start_offset`) are always offsets in the *uncompressed* stream.
"""

from __future__ import annotations

import atexit
import io
import os
import struct
import sys
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _blockgzip_write, _diagnose, _engine, _tfindex, blockgzip, fs
from . import compression as _compression
from ._engine._common import (
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    STATUS_BAD_DATA_CRC,
    STATUS_BAD_LENGTH_CRC,
    STATUS_INCOMPLETE,
)
from ._resync import (  # noqa: F401  (re-exported: the resync's public names)
    RESYNC_DEEP_LOOKBACK,
    RESYNC_LOOKAHEAD,
    RESYNC_LOOKBACK,
    Resync,
    find_record_start,
    header_length,
)
from ._streams import DecodingReader
from .errors import CorruptRecordError, CorruptStreamError, TruncatedRecordError, UnclosedWriterWarning

__all__ = [
    "RecordReader",
    "RecordWriter",
    "RecordChunk",
    "read_records",
    "write_records",
    "resolve_compression",
    "normalize_compression",
    "Source",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_RECORD_SIZE",
    "WRITE_BUFFER_SIZE",
    "Resync",
    "find_record_start",
    "header_length",
    "RESYNC_LOOKBACK",
    "RESYNC_DEEP_LOOKBACK",
    "RESYNC_LOOKAHEAD",
    "FRAME_OVERHEAD",
    "HEADER_SIZE",
    "FOOTER_SIZE",
]

Source = Union[str, "os.PathLike[str]", BinaryIO]
BadPayload = Callable[[int, Optional[int], str, int], None]  # (offset, record number, reason, frame end)

DEFAULT_CHUNK_SIZE = 1 << 20
# Protobuf refuses messages of 2 GiB or more, so no Example or SequenceExample is longer.
DEFAULT_MAX_RECORD_SIZE = (1 << 31) - 1
_TOO_LARGE = -1  # a scan status of our own: a record longer than max_record_size
WRITE_BUFFER_SIZE = 1 << 17  # RecordWriter.write's buffer: small, as many writers may be open at once
_EMPTY_BUFFER = bytearray()  # a writer's buffer until its first single-record write
_SYNC_FILES = (io.BufferedWriter, io.FileIO)
_U64 = struct.Struct("<Q")


def normalize_compression(compression: Optional[str]) -> Optional[str]:
    """A codec name, None or "auto" for any accepted spelling (`compression.normalize`)."""
    return _compression.normalize(compression)


def resolve_compression(path: Optional[str], compression: Optional[str] = "auto") -> Optional[str]:
    """The codec name (or None) of one file; "auto" from its suffix (`compression.resolve`)."""
    return _compression.resolve(path, compression)


def _source_name(source: Source) -> Optional[str]:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return getattr(source, "name", None) if isinstance(getattr(source, "name", None), str) else None


@dataclass
class RecordChunk:
    """Many records from one read: one buffer plus where each payload lies in it.

    `payload_offsets` / `payload_lengths` index `buffer`; `record_offsets` are the header
    offsets in the uncompressed stream; `first_record_number` counts from the file's start
    (None when reading began mid-file without knowing it).
    """

    buffer: bytes
    payload_offsets: np.ndarray
    payload_lengths: np.ndarray
    record_offsets: np.ndarray
    first_record_number: Optional[int]

    def __len__(self) -> int:
        return len(self.payload_offsets)

    def frames(self) -> np.ndarray:
        """The chunk's rows of an index: (n, 2) int64 (header offset, frame length)."""
        return np.stack([self.record_offsets, self.payload_lengths + FRAME_OVERHEAD], axis=1).astype(np.int64)

    def payloads(self) -> List[bytes]:
        """Each payload as its own bytes object (`_engine.slice_payloads`: one C loop)."""
        return _engine.slice_payloads(self.buffer, self.payload_offsets, self.payload_lengths)


class RecordReader:
    """Iterate over the payloads of one TFRecord file, checking both CRCs of every record.

    Args:
        source: a path, `file://` or remote URI (pyarrow.fs), or an open binary file object.
        compression: None (uncompressed), a codec name ("gzip", "zlib", "zstd", any spelling
            `compression.normalize` accepts) or "auto" (from the file name).
        verify: check the masked CRC32C of lengths and payloads (default True); or a
            scan level of `_engine._common` (VERIFY_LENGTHS: the length CRCs only).
        start_offset: uncompressed offset of the first record to read (a record boundary,
            unless `resync` is set).
        end_offset: stop before the first record whose header starts at or after it. When it
            is not where the records read continue (an uncompressed file cut between record
            boundaries), the resync from it must land there too, with or without `resync`
            (else SplitPointError), so that the next range's resync neither repeats nor drops a
            record; `check_end=False` leaves that out when the caller knows the next range starts
            where this one's records continue (it follows the chain, or an index), not by a resync.
        first_record_number: the number of the record at `start_offset`, for error messages.
        allow_truncated_tail: end quietly, instead of raising TruncatedRecordError, when the
            data ends inside the last record (a file still being written, say).
        resync: [start_offset, end_offset) is a byte range that need not fall on record
            boundaries: skip from `start_offset` to the next record boundary
            (`find_record_start`), and at the end always check that the resync from `end_offset`
            lands where the records read continue (else SplitPointError: the file needs an index
            to be split). Uncompressed only.
        members: a block-gzip file's `blockgzip.MemberTable`, so that a range read inflates
            from the member holding `start_offset` up to the one holding `end_offset` only.
            None: looked up in the index beside a GZIP file named by path; False: never.
        on_bad_payload: called as `(header offset, record number, reason, frame end)` for a
            record of the range whose payload alone fails its CRC (its length passes its own),
            and reading goes on right after that record in the same stream, instead of raising
            (default None: raise). A compressed stream then never has to be inflated again from
            its start to get past payload damage.
        max_record_size: the longest payload accepted (default 2 GiB - 1, protobuf's own limit).
            A length field above it is a `CorruptRecordError` before anything is allocated, as
            is one longer than the data that can still follow (the rest of an uncompressed
            file, or what the rest of a compressed one can inflate to), so memory stays
            within one record plus the read buffer whatever the length fields say.

    Damage inside a compressed stream does not lose the records before it: every record that
    inflated intact is delivered, then a `CorruptStreamError` (a CorruptRecordError) names the uncompressed offset
    where the damage begins (and the compressed offset in its reason).
    """

    def __init__(
        self,
        source: Source,
        compression: Optional[str] = "auto",
        *,
        verify: Union[bool, int] = True,
        start_offset: int = 0,
        end_offset: Optional[int] = None,
        first_record_number: Optional[int] = None,
        allow_truncated_tail: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        resync: bool = False,
        members: Union[None, bool, "blockgzip.MemberTable"] = None,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        on_bad_payload: Optional[BadPayload] = None,
        check_end: bool = True,
    ) -> None:
        self.source = source
        self.path = _source_name(source)
        self.compression = resolve_compression(self.path, compression)
        self.verify = verify
        self.start_offset = int(start_offset)
        self.end_offset = None if end_offset is None else int(end_offset)
        if first_record_number is None and self.start_offset == 0:
            first_record_number = 0
        self.first_record_number = first_record_number
        self.allow_truncated_tail = allow_truncated_tail
        self.chunk_size = max(int(chunk_size), 64)
        self.resync = resync
        self.members = members
        self.max_record_size = int(max_record_size)
        self.on_bad_payload = on_bad_payload
        self.check_end = check_end
        if self.max_record_size < 0:
            raise ValueError(f"max_record_size must be >= 0, not {max_record_size!r}")
        if resync and self.compression is not None:
            raise ValueError(f"{self.path}: resync needs an uncompressed file (got {self.compression})")

    # -- public iteration -------------------------------------------------------------------
    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks():
            yield from chunk.payloads()

    def records_with_offsets(self) -> Iterator[Tuple[int, bytes]]:
        """Yield (uncompressed header offset, payload) pairs."""
        for chunk in self.chunks():
            yield from zip(chunk.record_offsets.tolist(), chunk.payloads())

    def chunks(self) -> Iterator[RecordChunk]:
        """Yield the records as `RecordChunk`s: the unit the columnar decoders consume."""
        raw, owned = self._open_raw()
        try:
            yield from self._scan(raw)
        finally:
            if owned:
                raw.close()

    # -- internals --------------------------------------------------------------------------
    def _open_raw(self) -> Tuple[BinaryIO, bool]:
        if hasattr(self.source, "read"):
            return self.source, False  # type: ignore[return-value]
        if self.path is None:
            raise TypeError(f"source must be a path or a binary file object, not {type(self.source).__name__}")
        return fs.open_input(self.path), True

    def _position(self, raw: BinaryIO):
        """Open the uncompressed stream at `start_offset`; return (stream, total size or None)."""
        start = self.start_offset
        total = None
        if self.compression is None:
            try:
                total = raw.seek(0, io.SEEK_END)
            except (OSError, AttributeError, io.UnsupportedOperation):
                if self.resync and start > 0:
                    raise ValueError(f"{self.path}: resync needs a seekable file") from None
            else:
                if self.resync and start > 0:
                    start = Resync(raw, total, self.path).find(start)
                    self.start_offset = start
                raw.seek(start)
                return raw, total
        members = self._member_table(start)
        if members is not None:
            stream, at = blockgzip.open_at(raw, members, start, self.path, self.end_offset)
            _skip(stream, start - at)
            return stream, total
        stream = _compression.open_reader(raw, self.compression, self.path)
        _skip(stream, start)
        return stream, total

    def _member_table(self, start: int):
        """The block-gzip member table to seek by, or None (inflate from the start)."""
        if (
            not _compression.seeks_by_members(self.compression)
            or (start <= 0 and self.end_offset is None)
            or self.members is False
        ):
            return None
        if self.members is None and isinstance(self.source, (str, os.PathLike)):
            self.members = blockgzip.member_table_for(self.path) or False
        return self.members or None

    def _scan(self, raw: BinaryIO) -> Iterator[RecordChunk]:
        """Chunks of the records whose header starts in [start_offset, end_offset): read a
        chunk, scan its frames (`_engine.scan_frames`, both CRCs), yield them, then act on
        where the scan stopped (`_after_chunk`)."""
        if self.end_offset is not None and self.start_offset >= self.end_offset:
            return  # an empty range owns no record
        stream, total = self._position(raw)
        # A seekable uncompressed file: read the unfinished record at the end of a chunk again
        # with the next chunk instead of copying it, so every chunk is one read into one buffer.
        reread = stream is raw and total is not None
        pos = self.start_offset  # stream offset of buf[0]
        number = self.first_record_number
        end = self.end_offset
        buf = b""
        keep = 0  # bytes at the end of buf that start the next chunk (buf[-keep:])
        need: Optional[int] = 0
        eof = False
        while True:
            if not eof:
                if end is not None and pos >= end:
                    size = keep + HEADER_SIZE  # only the next range's first header, to check it
                else:
                    # Chunks of one size (unless a record is longer): the allocator then reuses
                    # the last chunk's memory (varying sizes cost page faults, 2-3x the read).
                    size = max(self.chunk_size, need or 0)
                buf, eof = self._fill(stream, buf, keep, pos, size, reread, number)
            offsets, lengths, consumed, status = self._scan_buffer(buf)
            if len(offsets):
                record_offsets = offsets - HEADER_SIZE + pos
                if end is not None and record_offsets[-1] >= end:  # the range ends in this chunk
                    count = int(np.searchsorted(record_offsets, end, side="left"))
                    if count:
                        yield RecordChunk(buf, offsets[:count], lengths[:count], record_offsets[:count], number)
                    self._check_split(raw, total, int(record_offsets[count]))
                    return
                yield RecordChunk(buf, offsets, lengths, record_offsets, number)
                if number is not None:
                    number += len(offsets)
            here = pos + consumed
            keep = len(buf) - consumed
            frame = self._step_over(buf, consumed, here, number) if status == STATUS_BAD_DATA_CRC else None
            if frame is not None:  # (the frame is whole in buf: its CRC was checked)
                pos, keep = here + frame, keep - frame
                number = None if number is None else number + 1
                if eof:  # no chunk follows: scan what is left of this one
                    buf = buf[len(buf) - keep :]
                need = 0
                continue
            need = self._after_chunk(raw, stream, total, buf, consumed, status, here, number, eof)
            if need is None:
                return
            pos = here

    def _step_over(self, buf, consumed: int, here: int, number: Optional[int]) -> Optional[int]:
        """The size of the frame to go on past, at `here` (stream offset; `buf[consumed:]`),
        whose payload failed its CRC: reported to `on_bad_payload` when there is one and the
        record is this range's (a record past `end_offset` is the next range's to report);
        None: raise as usual."""
        if self.on_bad_payload is None or (self.end_offset is not None and here >= self.end_offset):
            return None
        frame = FRAME_OVERHEAD + _U64.unpack_from(buf, consumed)[0]
        self.on_bad_payload(here, number, "payload CRC mismatch (corrupted record)", here + frame)
        return frame

    def _scan_buffer(self, buf) -> Tuple[np.ndarray, np.ndarray, int, int]:
        """(payload offsets, payload lengths, bytes consumed, status) of the whole frames at the
        start of `buf`, stopping before a record longer than `max_record_size` (`_TOO_LARGE`)."""
        offsets, lengths, consumed, status = _engine.scan_frames(buf, self.verify)
        if len(offsets) and self.max_record_size < len(buf) and int(lengths.max()) > self.max_record_size:
            count = int(np.argmax(lengths > self.max_record_size))
            return offsets[:count], lengths[:count], int(offsets[count]) - HEADER_SIZE, _TOO_LARGE
        return offsets, lengths, consumed, status

    def _after_chunk(
        self, raw, stream, total, buf, consumed: int, status: int, here: int, number: Optional[int], eof: bool
    ) -> Optional[int]:
        """Act on where the scan of a chunk stopped (stream offset `here`, `buf[consumed:]`):
        raise for a bad record of this range, None when the range or the data is done, else
        how many bytes the next chunk must hold at least (0: any)."""
        past_end = self.end_offset is not None and here >= self.end_offset
        if past_end and status in (STATUS_BAD_DATA_CRC, _TOO_LARGE):
            self._check_split(raw, total, here)
            return None  # the next range's record (its header is sound): that range reports it
        if status == STATUS_BAD_LENGTH_CRC:
            raise CorruptRecordError(
                self.path, here, number, _diagnose.bad_length_crc(here, buf[consumed : consumed + 16])
            )
        if status == STATUS_BAD_DATA_CRC:
            raise CorruptRecordError(self.path, here, number, "payload CRC mismatch (corrupted record)")
        if status == _TOO_LARGE:
            (length,) = _U64.unpack_from(buf, consumed)
            raise self._too_large(length, here, number)
        keep = len(buf) - consumed
        if status == STATUS_INCOMPLETE:
            return self._unfinished_record(raw, stream, total, buf, consumed, here, number, eof, past_end)
        if eof:
            self._raise_stream_damage(stream, number, here, keep)
            if isinstance(stream, DecodingReader) and not stream.complete:
                assert self.compression is not None  # a DecodingReader reads a compressed stream
                trailing = stream.trailing
                reason = (
                    f"{self.compression} stream ends early (truncated file)"
                    if trailing is None
                    else _diagnose.gzip_trailing(self.compression, trailing)
                )
                raise TruncatedRecordError(self.path, here, number, reason)
            self._check_split(raw, total, here)
            return None
        return 0

    def _unfinished_record(
        self, raw, stream, total, buf, consumed: int, here: int, number: Optional[int], eof: bool, past_end: bool
    ) -> Optional[int]:
        """The chunk ends inside a record at `here`: the bytes the next chunk needs, None when
        the record is the next range's or a truncated tail allowed to end the file; else raise."""
        keep = len(buf) - consumed
        if past_end and keep >= HEADER_SIZE:
            # The next range's record: its header is sound (the scan checked its length CRC),
            # so that range's resync lands on it and reports anything wrong with it.
            self._check_split(raw, total, here)
            return None
        need = 0
        if keep >= HEADER_SIZE:
            (length,) = _U64.unpack_from(buf, consumed)
            if self._cannot_follow(length, here, number, total, stream, keep):
                return None
            need = HEADER_SIZE + length + FOOTER_SIZE
        if not eof:
            return need
        self._raise_stream_damage(stream, number, here, keep)
        if self.allow_truncated_tail:
            return None
        if keep < HEADER_SIZE:
            reason = _diagnose.short_tail(buf[len(buf) - keep :] if keep else b"", at_start=here == 0)
        else:
            reason = "data ends inside the record's payload or footer (truncated record)"
        raise TruncatedRecordError(self.path, here, number, reason)

    def _fill(
        self, stream, buf: bytes, keep: int, pos: int, size: int, reread: bool, number: Optional[int]
    ) -> Tuple[bytes, bool]:
        """The next chunk: the last `keep` bytes of `buf` (an unfinished record at stream offset
        `pos`) followed by more data, `size` bytes in all (fewer only at the end), as one
        buffer; and whether the data ended."""
        if reread:
            if keep:
                stream.seek(pos)  # read the unfinished record again rather than copy it
            data = _read_at_least(stream, size)
            return data, len(data) < size
        rest = buf[len(buf) - keep :] if keep else b""
        try:
            data = _read_at_least(stream, size - keep, rest)
        except CorruptRecordError as err:  # damage in a compressed stream, met after the good bytes
            if err.offset is None or not isinstance(stream, DecodingReader):
                raise
            raise self._damage_error(err, number, pos, keep) from None
        return data, len(data) < size

    def _damage_error(self, err: CorruptRecordError, number: Optional[int], pos: int, keep: int) -> CorruptRecordError:
        """The stream's damage report (a CorruptStreamError), with the record it falls in (or before)."""
        reason = err.reason
        if keep:
            reason += f"; the record at uncompressed offset {pos} runs into it"
        return CorruptStreamError(self.path, err.offset, number, reason)

    def _check_split(self, raw: BinaryIO, total: Optional[int], next_start: int) -> None:
        """A range with an `end_offset` knows that its records continue at `next_start`: the
        resync from `end_offset` must land there too (`Resync.check_split`), or the next range's
        reader, when it resyncs, would duplicate or drop records. Whatever this reader's own
        `resync` flag: the next range's decides. A range without `resync` that ends on a record
        boundary (an index split), or whose caller says the next one follows the chain
        (`check_end=False`), needs no search."""
        if self.end_offset is None or total is None:
            return
        if self.resync or (self.check_end and next_start != self.end_offset):
            Resync(raw, total, self.path).check_split(self.end_offset, next_start)

    def _raise_stream_damage(self, stream, number: Optional[int], pos: int, keep: int) -> None:
        """At the end of the data: when a compressed stream ended at damage, raise it."""
        damage = getattr(stream, "damage", None) if isinstance(stream, DecodingReader) else None
        if damage is not None:
            raise self._damage_error(damage, number, pos, keep)

    def _too_large(self, length: int, here: int, number: Optional[int]) -> CorruptRecordError:
        return CorruptRecordError(
            self.path,
            here,
            number,
            f"length field says {length} payload bytes, more than max_record_size ({self.max_record_size}); "
            "corrupted record, or pass a larger max_record_size",
        )

    def _cannot_follow(
        self, length: int, here: int, number: Optional[int], total: Optional[int], stream, keep: int
    ) -> bool:
        """Check an unfinished record's length field before reading its payload: raise when the
        payload cannot follow (True to end quietly where `allow_truncated_tail` allows it)."""
        if total is not None:
            room = total - here - HEADER_SIZE  # what follows the header in the file
        elif isinstance(stream, DecodingReader) and (inflatable := stream.max_remaining()) is not None:
            room = keep - HEADER_SIZE + inflatable  # what the rest can inflate to
        else:
            room = None
        if room is not None and length > room - FOOTER_SIZE:
            self._raise_stream_damage(stream, number, here, keep)
            if self.allow_truncated_tail:
                return True
            if total is not None:
                why = f"only {max(room, 0)} do"
            else:
                why = f"the rest of the {self.compression} stream can inflate to at most {max(room, 0)}"
            raise TruncatedRecordError(
                self.path,
                here,
                number,
                f"length field says {length} payload bytes, so {length + FOOTER_SIZE} bytes must follow "
                f"the header, but {why} (truncated or corrupted record)",
            )
        if length > self.max_record_size:
            raise self._too_large(length, here, number)
        return False


def _read_at_least(stream, want: int, prefix: bytes = b"") -> bytes:
    """`prefix` and then the next `want` bytes of `stream` (fewer only at its end), as one
    bytes object joined once (no join at all for a single read).

    Callers bound `want` by what the length fields may claim (`RecordReader._cannot_follow`),
    so a corrupt length costs an error, not an allocation of that length.
    """
    parts = [prefix] if prefix else []
    if isinstance(stream, DecodingReader):  # short only at the end of the data or at damage
        parts.extend(stream.read_pieces(want))
    else:
        got = 0
        while got < want:
            data = stream.read(want - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def _skip(stream, count: int) -> None:
    if count <= 0:
        return
    if isinstance(stream, DecodingReader):
        stream.skip(count)
        return
    while count > 0:
        got = stream.read(min(count, DEFAULT_CHUNK_SIZE))
        if not got:
            return
        count -= len(got)


class RecordWriter:
    """Write payloads as TFRecords, optionally with a `.tfindex` written in the same pass.

    The data (and index) go to temporary names beside the targets and are renamed on
    `close()`; an exception inside the `with` block, or `abort()`, removes them, so an
    interrupted write leaves nothing that looks complete.

    Args:
        dest: a path, `file://` or remote URI.
        compression: None (uncompressed), a codec name ("gzip", "zlib", "zstd", any spelling
            `compression.normalize` accepts) or "auto" (from the file name).
        index_path: where to write the `.tfindex` (offsets of the uncompressed stream); None
            for no index, True for the default name beside the data (`index.default_index_path`).
        compression_level: the codec's level, -1 its default (zlib's 1-9, as TensorFlow; zstd's
            1-22, default 3). Block-gzip
            members are deflated by ISA-L when installed, levels mapped onto its 1-3.
        block_bytes: GZIP only: write block-gzip (`blockgzip`): gzip members of whole records,
            about this many uncompressed bytes each, whose table goes at the end of the index,
            so readers can seek. None (default): 1 MiB blocks when an index is written, else
            one gzip stream; 0: one stream. Ignored for uncompressed files.
        commit_unclosed: what happens to a writer that is garbage-collected, or still open at
            interpreter exit, without `close()`: False (default) drops its data, True commits
            it (the `tfrecord` package's behaviour, used by `TFRecordWriter`); either way an
            `UnclosedWriterWarning` names the file. Nothing is committed when the interpreter
            ends on an uncaught exception, nor when a `with` block exits on one.
        atomic_output: the file layer to write through (default the core's
            `fs.atomic_output`; Beam code passes `tfrecord_beam.beam._fs.atomic_output`). Such a
            writer writes into a job's fresh staging directory: it neither checks the index
            path for an existing non-index file nor removes a stale index beside the data.
    """

    def __init__(
        self,
        dest: Union[str, "os.PathLike[str]"],
        compression: Optional[str] = "auto",
        index_path: Union[None, bool, str] = None,
        compression_level: int = -1,
        *,
        block_bytes: Optional[int] = None,
        commit_unclosed: bool = False,
        atomic_output: Optional[fs.AtomicOutput] = None,
    ) -> None:
        self.path = os.fspath(dest)
        self.compression = resolve_compression(self.path, compression)
        if index_path is True:
            index_path = _tfindex.default_index_path(self.path)
        self.index_path = os.fspath(index_path) if index_path else None
        self._atomic_output = atomic_output or fs.atomic_output
        self._own_layer = atomic_output is None  # the core's files: check and clean up beside the data
        if self.index_path is not None and self._own_layer:
            _tfindex.check_index_target(self.index_path, self.path)
        self._data_cm = self._atomic_output(self.path)
        self._file: BinaryIO
        self._commit: fs.Commit
        self._file, self._commit = self._data_cm.__enter__()
        self._deflater = None
        self._index: Optional[_tfindex.IndexStream] = None
        try:
            self._blocks = _blockgzip_write.compressor_for(
                self._file, self.compression, bool(self.index_path), block_bytes, compression_level, self.path
            )
            if self.compression is not None and self._blocks is None:
                self._deflater = _compression.compressor(self.compression, compression_level, self.path)
            # index lines go to a temporary file as frames are handed on: nothing per record is kept
            if self.index_path:
                self._index = _tfindex.IndexStream(self.index_path, self._atomic_output)
        except BaseException:  # e.g. the index's folder is missing: leave no temporary data file
            self._commit.abort()
            raise
        self._offset = 0  # uncompressed bytes handed on (to the compressor or the file)
        self._records = 0  # records handed on
        self._buf = _EMPTY_BUFFER  # frames of single writes, handed on when full (see `write`)
        self._pos = 0
        self.closed = False
        self.members: Optional[blockgzip.MemberTable] = None  # after close: the block-gzip member table written, if any
        self._commit_unclosed = commit_unclosed
        self._pid = os.getpid()
        _open_writers.add(self)

    @property
    def offset(self) -> int:
        """Uncompressed bytes written so far (the offset the next record will have)."""
        return self._offset + self._pos

    @property
    def records_written(self) -> int:
        """Records written so far."""
        return self._records + (
            len(_engine.scan_frames(memoryview(self._buf)[: self._pos], False)[0]) if self._pos else 0
        )

    def write(self, payload: bytes) -> None:
        """Frame and write one serialized record.

        Frames go into a write buffer (WRITE_BUFFER_SIZE bytes, allocated by the first call)
        that is handed to the compressor or the file when full, so a per-record loop costs
        one compiled call per record; a record larger than the buffer is written on its own.
        """
        if self.closed:
            raise ValueError(f"{self.path}: write to a closed RecordWriter")
        try:
            pos = _engine.append_frame(self._buf, self._pos, payload)
        except (TypeError, BufferError, ValueError):  # not a plain buffer: as write_many takes it
            self.write_many([payload])
            return
        if pos < 0:
            self._make_room()
            pos = _engine.append_frame(self._buf, 0, payload)
            if pos < 0:
                payload = payload if isinstance(payload, bytes) else bytes(memoryview(payload).cast("B"))
                self.write_framed(_engine.frame_records([payload]), [FRAME_OVERHEAD + len(payload)])
                return
        self._pos = pos

    def append_record(self, append: Callable[..., Optional[int]], *args: Any) -> bool:
        """Let a compiled encoder write one whole frame straight into the write buffer.

        `append(buffer, position, *args)` returns where its frame ends, -1 when the frame does
        not fit (nothing written), or None when it declines the input. Returns False (nothing
        written) when it declined or the record is larger than the buffer: the caller then
        encodes the record itself and calls `write`.
        """
        if self.closed:
            raise ValueError(f"{self.path}: write to a closed RecordWriter")
        pos = append(self._buf, self._pos, *args)
        if pos is None:
            return False
        if pos < 0:
            self._make_room()
            pos = append(self._buf, 0, *args)
            if pos is None or pos < 0:
                return False
        self._pos = pos
        return True

    def _make_room(self) -> None:
        """An empty write buffer: the buffered frames handed on (or the buffer made)."""
        self._drain()
        if self._buf is _EMPTY_BUFFER:
            self._buf = bytearray(WRITE_BUFFER_SIZE)

    def _drain(self) -> None:
        """Hand the buffered frames on, in order, before any other bytes (and at close)."""
        pos = self._pos
        if not pos:
            return
        view = memoryview(self._buf)[:pos]
        lengths = _engine.scan_frames(view, False)[1]
        if self._index is not None:
            self._index.add(lengths + FRAME_OVERHEAD)
        if self._blocks is not None:  # block-gzip members: the compressor keeps what it is given
            self._blocks.add(bytes(view), lengths + FRAME_OVERHEAD)
        else:  # local files copy (or write) synchronously; other streams may keep what they are given
            self._emit(view if self._deflater is not None or isinstance(self._file, _SYNC_FILES) else bytes(view))
        view.release()
        self._offset += pos
        self._records += len(lengths)
        self._pos = 0

    def write_many(self, payloads: Iterable[bytes]) -> None:
        """Frame and write many serialized records in one buffer (fast path for batches)."""
        payloads = [p if isinstance(p, bytes) else bytes(p) for p in payloads]
        if payloads:
            self.write_framed(_engine.frame_records(payloads), [FRAME_OVERHEAD + len(p) for p in payloads])

    def write_framed(self, framed: Union[bytes, memoryview], record_sizes: Iterable[int]) -> None:
        """Write bytes that are already whole frames; `record_sizes` are their frame sizes."""
        if self.closed:
            raise ValueError(f"{self.path}: write to a closed RecordWriter")
        sizes = np.asarray(
            record_sizes if isinstance(record_sizes, (np.ndarray, list)) else list(record_sizes), dtype=np.int64
        )  # an int64 array passes through without a copy
        if int(sizes.sum()) != len(framed):
            raise ValueError(f"{self.path}: record sizes add up to {int(sizes.sum())}, not {len(framed)} bytes")
        self._drain()
        if self._index is not None:
            self._index.add(sizes)
        if self._blocks is not None:
            self._blocks.add(framed, sizes)
        else:
            self._emit(framed)
        self._offset += len(framed)
        self._records += len(sizes)

    def _emit(self, data: Union[bytes, memoryview]) -> None:
        if self._deflater is not None:
            data = self._deflater.compress(data)
        if data:
            self._file.write(data)

    def flush(self) -> None:
        """Flush buffered bytes to the temporary file (the target appears only on close)."""
        if not self.closed:
            self._drain()
        self._file.flush()

    def close(self) -> None:
        """Finish the file and its index and move both into place in `_publish`'s order (old
        index out, data in, new index in), so a crash or a full disk never leaves data beside
        an index of other data. A stale index at the data's default index name is removed
        when no new index is written."""
        if self.closed:
            return
        from . import _publish

        index_commit = None
        try:
            self._drain()  # the write buffer's frames come first
            if self._deflater is not None:
                self._file.write(self._deflater.flush())
            members = self.members = self._blocks.finish() if self._blocks is not None else None
            if self._index is not None:
                index_final = self.index_path
            elif self._own_layer:  # a stale index at the default name goes; a non-index file is never touched
                index_final = _tfindex.default_index_path(self.path)
                if fs.exists(index_final) and not _tfindex.looks_like_index(index_final):
                    index_final = None
            else:
                index_final = None
            # the old index goes first: an object store's object appears as soon as it is finished
            if index_final is not None and self._own_layer:
                _publish.remove_old_indexes([index_final], exists=fs.exists, delete=fs.delete)
            self._commit.finish()
            if self._index is not None:
                index_commit = self._index.finish(members)
            self._commit.move()
            if index_commit is not None:
                assert index_final is not None  # an index is written only under an index path
                _publish.move_new_indexes(
                    [index_commit], [index_final], rename=lambda commits, _finals: [c.move() for c in commits]
                )
        except BaseException:
            self._commit.abort()
            if self._index is not None:
                self._index.abort()
            raise
        finally:
            self.closed = True
            _open_writers.discard(self)

    def abort(self) -> None:
        """Drop everything written so far; neither the data nor the index appears."""
        if not self.closed:
            self._commit.abort()
            if self._index is not None:
                self._index.abort()
            self.closed = True
            _open_writers.discard(self)

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        try:
            self._unclosed(at_exit=False)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def _unclosed(self, at_exit: bool) -> None:
        """A writer dropped (or left open at exit) without `close()`: commit it when it was made
        with `commit_unclosed=True` and the interpreter is not ending on an uncaught exception,
        otherwise drop its data; either way warn, naming the file."""
        if self.closed or self._pid != os.getpid():  # a forked child's copy is its parent's to settle
            return
        failed = at_exit and (
            getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None
        )
        if self._commit_unclosed and not failed:
            warnings.warn(
                f"{self.path}: writer was never closed; committing its {self.records_written} "
                "records now (call close() or use `with`)",
                UnclosedWriterWarning,
                stacklevel=2,
            )
            self.close()
        else:
            why = "the program ended on an uncaught exception" if failed else "it was never closed"
            warnings.warn(
                f"{self.path}: {why}; its {self.records_written} records were discarded (call close() or use `with`)",
                UnclosedWriterWarning,
                stacklevel=2,
            )
            self.abort()


_open_writers: "weakref.WeakSet[RecordWriter]" = weakref.WeakSet()


@atexit.register
def _settle_open_writers() -> None:
    """At interpreter exit, settle every writer still open (see `RecordWriter._unclosed`)."""
    for writer in list(_open_writers):
        try:
            writer._unclosed(at_exit=True)
        except Exception as exc:  # noqa: BLE001 - report and go on with the others
            sys.stderr.write(f"tfrecord_beam: could not settle unclosed writer {writer.path}: {exc}\n")


def read_records(path: Source, compression: Optional[str] = "auto", **kwargs) -> Iterator[bytes]:
    """Convenience: iterate over the payloads of one file (`RecordReader` arguments)."""
    return iter(RecordReader(path, compression, **kwargs))


def write_records(
    path: str, payloads: Iterable[bytes], compression: Optional[str] = "auto", index_path: Union[None, bool, str] = None
) -> int:
    """Convenience: write payloads to one file atomically; returns the record count."""
    with RecordWriter(path, compression, index_path=index_path) as writer:
        for payload in payloads:
            writer.write(payload)
        return writer.records_written
