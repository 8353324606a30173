"""Reading TFRecord framing: `RecordReader` and `RecordChunk` (re-exported by `records`).

A record on disk is `uint64 length | uint32 masked_crc32c(length) | payload | uint32
masked_crc32c(payload)`, little-endian. A compressed file (the codecs of `compression`)
compresses that whole stream; offsets (in errors, indexes and `start_offset`) are always
offsets in the *uncompressed* stream.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass, fields, replace
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _diagnose, _engine, blockgzip, fs
from . import compression as _compression
from ._engine._common import (
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    STATUS_BAD_DATA_CRC,
    STATUS_BAD_LENGTH_CRC,
    STATUS_INCOMPLETE,
)
from ._resync import Resync
from ._streams import DecodingReader, skip_bytes
from .errors import CorruptRecordError, CorruptStreamError, TruncatedRecordError

__all__ = [
    "RecordReader",
    "ReadSpan",
    "RecordChunk",
    "Source",
    "BadPayload",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_RECORD_SIZE",
]

Source = Union[str, "os.PathLike[str]", BinaryIO]
BadPayload = Callable[[int, Optional[int], str, int], None]  # (offset, record number, reason, frame end)

DEFAULT_CHUNK_SIZE = 1 << 20
# Protobuf refuses messages of 2 GiB or more, so no Example or SequenceExample is longer.
DEFAULT_MAX_RECORD_SIZE = (1 << 31) - 1
_TOO_LARGE = -1  # a scan status of our own: a record longer than max_record_size
_U64 = struct.Struct("<Q")


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


@dataclass(frozen=True)
class ReadSpan:
    """Which bytes of a file a `RecordReader` reads, and how: its keyword arguments (each field
    means what the argument of that name does there) as one frozen value.

    A reader that opens several `RecordReader`s over one file (`SkippingReader`, going on after
    damage) or a caller that reads the same span with or without skipping (`jobs._copy`) builds
    one span and passes it down whole, moving it with `at(...)`, instead of repeating a keyword
    list at every level. `RecordReader.over(source, span)` reads it.
    """

    compression: Optional[str] = "auto"
    verify: Union[bool, int] = True
    start_offset: int = 0
    end_offset: Optional[int] = None
    first_record_number: Optional[int] = None
    resync: bool = False
    members: Union[None, bool, "blockgzip.MemberTable"] = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    check_end: bool = True
    allow_truncated_tail: bool = False
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE

    def at(self, start_offset: int, first_record_number: Optional[int], resync: bool = False) -> "ReadSpan":
        """The same span read from another record boundary (or, with `resync`, byte offset) on."""
        return replace(self, start_offset=start_offset, first_record_number=first_record_number, resync=resync)

    def keywords(self) -> Dict[str, Any]:
        """`RecordReader`'s keyword arguments (the member table as it is, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


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
        self.compression = _compression.resolve(self.path, compression)
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

    @classmethod
    def over(cls, source: Source, span: ReadSpan, on_bad_payload: Optional[BadPayload] = None) -> "RecordReader":
        """A reader of `span` (a `ReadSpan`: the keyword arguments as one value) of `source`."""
        return cls(source, on_bad_payload=on_bad_payload, **span.keywords())

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
            skip_bytes(stream, start - at)
            return stream, total
        stream = _compression.open_reader(raw, self.compression, self.path)
        skip_bytes(stream, start)
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
                    # Near the range's end, only up to the next range's first header: a range
                    # never reads a chunk of the next one (mix reads its 16 MiB blocks as
                    # ranges: a whole 4 MiB chunk past each end was 25% more input read).
                    size = self.chunk_size if end is None else min(self.chunk_size, end - pos + HEADER_SIZE)
                    size = max(size, need or 0)
                buf, eof = self._fill(stream, buf, keep, pos, size, reread, number, need or 0, total)
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
                self.path, here, number, _diagnose.bad_length_crc(here, bytes(buf[consumed : consumed + 16]))
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
            reason = _diagnose.short_tail(bytes(buf[len(buf) - keep :]) if keep else b"", at_start=here == 0)
        else:
            reason = "data ends inside the record's payload or footer (truncated record)"
        raise TruncatedRecordError(self.path, here, number, reason)

    def _fill(
        self,
        stream,
        buf: bytes,
        keep: int,
        pos: int,
        size: int,
        reread: bool,
        number: Optional[int],
        need: int = 0,
        total: Optional[int] = None,
    ) -> Tuple[bytes, bool]:
        """The next chunk: the last `keep` bytes of `buf` (an unfinished record at stream offset
        `pos`) followed by more data, `size` bytes in all (fewer only at the end), as one
        buffer; and whether the data ended. A file that hands out views of its buffers
        (`read_view`: a remote object's read-ahead blocks) gives the chunk as a view, ending at
        most at its block's end (then fewer bytes, not the end: the position says): the records
        are scanned and decoded in place, and only one spanning two blocks (`need` bytes) is
        copied, stitched."""
        if reread:
            if keep:
                stream.seek(pos)  # read the unfinished record again rather than copy it
            read_view = getattr(stream, "read_view", None)
            if read_view is not None and total is not None:
                data = read_view(size, need)
                return data, len(data) < size and stream.tell() >= total
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
        boundary is taken for an index split (the next range starts there without a search), or
        its caller says the next one follows the chain (`check_end=False`): no search. So a
        reader of byte ranges opens every one with `resync`, the first too (from 0 it searches
        nothing): a frame in the record before a boundary can move the next range's search past
        the record there, and only the end check sees it."""
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
