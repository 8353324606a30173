"""TFRecord framing: RecordReader / RecordWriter, compression, masked CRC32C, clear errors.

A record on disk is `uint64 length | uint32 masked_crc32c(length) | payload | uint32
masked_crc32c(payload)`, little-endian. GZIP and ZLIB files compress that whole stream; offsets
(in errors, indexes and `start_offset`) are always offsets in the *uncompressed* stream.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _engine, fs
from ._framing_py import (
    FOOTER_SIZE,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    STATUS_BAD_DATA_CRC,
    STATUS_BAD_LENGTH_CRC,
    STATUS_INCOMPLETE,
)
from ._streams import InflatingReader, open_stream
from .errors import CorruptRecordError, TruncatedRecordError

Source = Union[str, "os.PathLike[str]", BinaryIO]

DEFAULT_CHUNK_SIZE = 1 << 20
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")
_COMPRESSION_ALIASES = {
    None: None, "": None, "none": None, "uncompressed": None,
    "gzip": "gzip", "gz": "gzip",
    "zlib": "zlib", "deflate": "zlib",
    "auto": "auto",
}
_SUFFIX_COMPRESSION = {".gz": "gzip", ".gzip": "gzip", ".zlib": "zlib", ".zz": "zlib", ".deflate": "zlib"}


def normalize_compression(compression: Optional[str]) -> Optional[str]:
    """None, "gzip", "zlib" or "auto" for any accepted spelling ("GZIP", "deflate", "none", ...)."""
    key = compression.strip().lower() if isinstance(compression, str) else compression
    if key not in _COMPRESSION_ALIASES:
        raise ValueError(f"unknown compression {compression!r}: use None, 'gzip', 'zlib' or 'auto'")
    return _COMPRESSION_ALIASES[key]


def resolve_compression(path: Optional[str], compression: Optional[str] = "auto") -> Optional[str]:
    """Return None, "gzip" or "zlib"; "auto" looks at the file name's suffix, as Beam does."""
    kind = normalize_compression(compression)
    if kind != "auto":
        return kind
    name = os.fspath(path) if path is not None and not hasattr(path, "read") else ""
    return _SUFFIX_COMPRESSION.get(os.path.splitext(name)[1].lower())


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

    def payloads(self) -> List[bytes]:
        """Each payload as its own bytes object."""
        buf = self.buffer
        return [buf[o : o + n] for o, n in zip(self.payload_offsets.tolist(), self.payload_lengths.tolist())]


class RecordReader:
    """Iterate over the payloads of one TFRecord file, checking both CRCs of every record.

    Args:
        source: a path, `file://` or remote URI (pyarrow.fs), or an open binary file object.
        compression: None, "gzip", "zlib" or "auto" (from the file name).
        verify: check the masked CRC32C of lengths and payloads (default True).
        start_offset: uncompressed offset of the first record to read (a record boundary,
            unless `resync` is set).
        end_offset: stop before the first record whose header starts at or after it.
        first_record_number: the number of the record at `start_offset`, for error messages.
        allow_truncated_tail: end quietly, instead of raising TruncatedRecordError, when the
            data ends inside the last record (a file still being written, say).
        resync: `start_offset` may fall inside a record: skip to the next record boundary
            (`find_record_start`). Uncompressed only.
    """

    def __init__(
        self,
        source: Source,
        compression: Optional[str] = "auto",
        *,
        verify: bool = True,
        start_offset: int = 0,
        end_offset: Optional[int] = None,
        first_record_number: Optional[int] = None,
        allow_truncated_tail: bool = False,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        resync: bool = False,
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
                    start = find_record_start(raw, start, total, self.path)
                    self.start_offset = start
                raw.seek(start)
                return raw, total
        stream = open_stream(raw, self.compression, self.path)
        _skip(stream, start)
        return stream, total

    def _scan(self, raw: BinaryIO) -> Iterator[RecordChunk]:
        if self.end_offset is not None and self.start_offset >= self.end_offset:
            return  # an empty range owns no record
        stream, total = self._position(raw)
        pos = self.start_offset  # stream offset of buf[0]
        number = self.first_record_number
        end = self.end_offset
        buf = b""
        need = 0
        eof = False
        while True:
            if not eof:
                if end is not None and pos >= end:
                    want = HEADER_SIZE  # only the next range's first header, to check it
                else:
                    want = max(self.chunk_size, need - len(buf))
                data = _read_at_least(stream, want)
                if data:
                    buf = buf + data if buf else data
                else:
                    eof = True
            offsets, lengths, consumed, status = _engine.scan_frames(buf, self.verify)
            count = len(offsets)
            stop = False
            if count:
                record_offsets = offsets - HEADER_SIZE + pos
                if end is not None and record_offsets[-1] >= end:
                    count = int(np.searchsorted(record_offsets, end, side="left"))
                    offsets, lengths, record_offsets = offsets[:count], lengths[:count], record_offsets[:count]
                    stop = True
                if count:
                    yield RecordChunk(buf, offsets, lengths, record_offsets, number)
                    if number is not None:
                        number += count
            if stop:
                return
            here = pos + consumed
            if end is not None and here >= end and status == STATUS_BAD_DATA_CRC:
                return  # the next range's record (its header is sound): that range reports it
            if status in (STATUS_BAD_LENGTH_CRC, STATUS_BAD_DATA_CRC):
                what = "length" if status == STATUS_BAD_LENGTH_CRC else "payload"
                raise CorruptRecordError(self.path, here, number, f"{what} CRC mismatch (corrupted record)")
            rest = buf[consumed:]
            need = 0
            if status == STATUS_INCOMPLETE:
                if end is not None and here >= end and len(rest) >= HEADER_SIZE:
                    # The next range's record: its header is sound (the scan checked its length
                    # CRC), so that range's resync lands on it and reports anything wrong with it.
                    return
                if len(rest) >= HEADER_SIZE:
                    (length,) = _U64.unpack_from(rest)
                    need = HEADER_SIZE + length + FOOTER_SIZE
                    if total is not None and length > total - here - FRAME_OVERHEAD:
                        if self.allow_truncated_tail:
                            return
                        raise TruncatedRecordError(
                            self.path, here, number,
                            f"length field says {length} payload bytes, so {length + FOOTER_SIZE} "
                            f"bytes must follow the header, but only {max(total - here - HEADER_SIZE, 0)} "
                            "do (truncated or corrupted record)",
                        )
                if eof:
                    if self.allow_truncated_tail:
                        return
                    part = "header" if len(rest) < HEADER_SIZE else "payload or footer"
                    raise TruncatedRecordError(
                        self.path, here, number, f"data ends inside the record's {part} (truncated record)"
                    )
            elif eof:
                if isinstance(stream, InflatingReader) and not stream.complete:
                    raise TruncatedRecordError(
                        self.path, here, number, f"{self.compression} stream ends early (truncated file)"
                    )
                return
            buf = rest
            pos = here


def _read_at_least(stream, want: int) -> bytes:
    """Read `want` bytes (fewer only at EOF) in pieces of at most 64 MiB joined once.

    A record's length field decides `want`; reading piecewise means a corrupt length in a
    compressed stream costs only the data really there, not an allocation of that length.
    """
    piece = 1 << 26
    if want <= piece:
        return stream.read(want)
    parts = []
    while want > 0:
        data = stream.read(min(want, piece))
        if not data:
            break
        parts.append(data)
        want -= len(data)
    return b"".join(parts)


def _skip(stream, count: int) -> None:
    if count <= 0:
        return
    if isinstance(stream, InflatingReader):
        stream.skip(count)
        return
    while count > 0:
        got = stream.read(min(count, DEFAULT_CHUNK_SIZE))
        if not got:
            return
        count -= len(got)


RESYNC_LOOKAHEAD = 1 << 20  # bytes of valid headers a boundary must start
RESYNC_LOOKBACK = 1 << 20  # bytes searched for a record spanning a candidate
RESYNC_DEEP_LOOKBACK = 1 << 26  # the same, for a candidate whose own record or chain is damaged


def header_length(buf, pos: int = 0) -> Optional[int]:
    """The payload length in the 12-byte header at `buf[pos:]` when its length CRC is valid,
    else None (also when fewer than 12 bytes are there)."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    length, length_crc = _HEADER.unpack_from(buf, pos)
    return length if _engine.masked_crc32c(memoryview(buf)[pos : pos + 8]) == length_crc else None


def _first_record_ok(raw: BinaryIO, offset: int, total: int) -> bool:
    """Whether a record with both CRCs valid starts at `offset` and fits in the file."""
    raw.seek(offset)
    header = raw.read(HEADER_SIZE)
    if len(header) < HEADER_SIZE:
        return False
    (length,) = _U64.unpack_from(header)
    if length > total - offset - FRAME_OVERHEAD:
        return False
    raw.seek(offset)
    _, _, consumed, _ = _engine.scan_frames(raw.read(FRAME_OVERHEAD + length), True, 1)
    return consumed == FRAME_OVERHEAD + length


def _chain_is_sound(raw: BinaryIO, offset: int, total: int) -> bool:
    """Whether valid headers (length CRCs) tile the file from `offset` for RESYNC_LOOKAHEAD bytes.

    The chain must stay within the file: one that reaches the end of the file must end exactly
    there. Payload CRCs after the first record are not needed: a false start inside a payload
    breaks at the header level.
    """
    raw.seek(offset)
    block = raw.read(RESYNC_LOOKAHEAD + HEADER_SIZE)
    pos = 0
    while pos + HEADER_SIZE <= len(block) and pos < RESYNC_LOOKAHEAD:
        length = header_length(block, pos)
        if length is None:
            return False
        if length > total - offset - pos - FRAME_OVERHEAD:
            return False  # the frame runs past the end of the file
        pos += FRAME_OVERHEAD + length
    return pos >= RESYNC_LOOKAHEAD or offset + pos == total


def _inside_a_valid_record(raw: BinaryIO, offset: int, total: int, lookback: int) -> bool:
    """Whether a record with both CRCs valid, starting within `lookback` bytes before `offset`,
    spans over it (so `offset` lies inside that record's payload)."""
    first = max(0, offset - lookback)
    raw.seek(first)
    block = raw.read(offset - first + HEADER_SIZE - 1)  # headers that start before `offset`
    h = _engine.find_length_crc(block, 0)
    while h >= 0:
        (length,) = _U64.unpack_from(block, h)
        if offset < first + h + FRAME_OVERHEAD + length <= total and _first_record_ok(raw, first + h, total):
            return True
        h = _engine.find_length_crc(block, h + 1)
    return False


def find_record_start(raw: BinaryIO, offset: int, total: int, path: Optional[str] = None) -> int:
    """The offset of the first record boundary at or after `offset` (`total` when none).

    A candidate is a position whose 8 bytes carry a valid length CRC (found in C). It is not a
    boundary when a record with both CRCs valid, starting up to 1 MiB before it, spans over it
    (record-like bytes inside that record's payload). Otherwise it is one when its own record
    passes both CRCs and valid headers tile the next RESYNC_LOOKAHEAD bytes (or the rest of
    the file, ending exactly at its end). When its record or that chain is damaged (a bad
    payload, a damaged header, a truncated tail), it is still taken, so that the reader
    reaches the damage and reports it, unless a deeper search (64 MiB back) finds a valid
    record spanning it. So header-like bytes in payloads, even whole TFRecords stored as
    payloads, are not taken for boundaries, and damage near a split point is reported rather
    than skipped. Files with a `.tfindex` are split at exact boundaries instead.
    """
    window = 1 << 20
    pos = offset
    while pos + HEADER_SIZE <= total:
        raw.seek(pos)
        block = raw.read(window + HEADER_SIZE - 1)
        i = _engine.find_length_crc(block, 0)
        while i >= 0:
            candidate = pos + i
            if not _inside_a_valid_record(raw, candidate, total, RESYNC_LOOKBACK):
                if _first_record_ok(raw, candidate, total) and _chain_is_sound(raw, candidate, total):
                    return candidate
                if not _inside_a_valid_record(raw, candidate, total, RESYNC_DEEP_LOOKBACK):
                    return candidate
            i = _engine.find_length_crc(block, i + 1)
        pos += window
    return total


class RecordWriter:
    """Write payloads as TFRecords, optionally with a `.tfindex` written in the same pass.

    The data (and index) go to temporary names beside the targets and are renamed on
    `close()`; an exception inside the `with` block, or `abort()`, removes them, so an
    interrupted write leaves nothing that looks complete.

    Args:
        dest: a path, `file://` or remote URI.
        compression: None, "gzip", "zlib" or "auto" (from the file name).
        index_path: where to write the `.tfindex` (offsets of the uncompressed stream); None
            for no index, True for the default name beside the data (`index.default_index_path`).
        compression_level: zlib level (default: zlib's default, as TensorFlow).
        atomic_output: the file layer to write through (default the core's
            `fs.atomic_output`; Beam code passes `tfrecord_beam.beam._fs.atomic_output`).
    """

    def __init__(
        self,
        dest: Union[str, "os.PathLike[str]"],
        compression: Optional[str] = "auto",
        index_path: Union[None, bool, str] = None,
        compression_level: int = -1,
        *,
        atomic_output=None,
    ) -> None:
        from . import index as _index  # index imports records: import late

        self.path = os.fspath(dest)
        self.compression = resolve_compression(self.path, compression)
        if index_path is True:
            index_path = _index.default_index_path(self.path)
        self.index_path = os.fspath(index_path) if index_path else None
        self._atomic_output = atomic_output or fs.atomic_output
        self._data_cm = self._atomic_output(self.path)
        self._file, self._commit = self._data_cm.__enter__()
        self._deflater = None
        if self.compression is not None:
            import zlib

            from ._streams import WBITS

            self._deflater = zlib.compressobj(compression_level, zlib.DEFLATED, WBITS[self.compression])
        self._frame_sizes: Optional[List[np.ndarray]] = [] if self.index_path else None
        self.offset = 0  # uncompressed bytes written
        self.records_written = 0
        self.closed = False

    def write(self, payload: bytes) -> None:
        """Frame and write one serialized record."""
        self.write_many([payload])

    def write_many(self, payloads: Iterable[bytes]) -> None:
        """Frame and write many serialized records in one buffer (fast path for batches)."""
        payloads = [p if isinstance(p, bytes) else bytes(p) for p in payloads]
        if payloads:
            self.write_framed(_engine.frame_records(payloads), [FRAME_OVERHEAD + len(p) for p in payloads])

    def write_framed(self, framed: bytes, record_sizes: Iterable[int]) -> None:
        """Write bytes that are already whole frames; `record_sizes` are their frame sizes."""
        if self.closed:
            raise ValueError(f"{self.path}: write to a closed RecordWriter")
        sizes = [int(s) for s in record_sizes]
        if sum(sizes) != len(framed):
            raise ValueError(f"{self.path}: record sizes add up to {sum(sizes)}, not {len(framed)} bytes")
        if self._frame_sizes is not None:
            self._frame_sizes.append(np.asarray(sizes, dtype=np.int64))
        self._emit(framed)
        self.offset += len(framed)
        self.records_written += len(sizes)

    def _emit(self, data: bytes) -> None:
        if self._deflater is not None:
            data = self._deflater.compress(data)
        if data:
            self._file.write(data)

    def flush(self) -> None:
        """Flush buffered bytes to the temporary file (the target appears only on close)."""
        self._file.flush()

    def close(self) -> None:
        """Finish the file and its index and move both into place."""
        if self.closed:
            return
        if self._deflater is not None:
            self._file.write(self._deflater.flush())
        self._commit()
        self.closed = True
        if self._frame_sizes is not None:
            from . import index as _index

            sizes = np.concatenate(self._frame_sizes) if self._frame_sizes else np.zeros(0, np.int64)
            offsets = np.cumsum(sizes) - sizes
            _index.write_index(np.stack([offsets, sizes], axis=1), self.index_path, atomic_output=self._atomic_output)

    def abort(self) -> None:
        """Drop everything written so far; neither the data nor the index appears."""
        if not self.closed:
            self._commit.abort()
            self.closed = True

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:  # a writer dropped without close(): leave no partial file
        try:
            self.abort()
        except Exception:  # noqa: BLE001
            pass


def read_records(path: Source, compression: Optional[str] = "auto", **kwargs) -> Iterator[bytes]:
    """Convenience: iterate over the payloads of one file (`RecordReader` arguments)."""
    return iter(RecordReader(path, compression, **kwargs))


def write_records(path: str, payloads: Iterable[bytes], compression: Optional[str] = "auto",
                  index_path: Union[None, bool, str] = None) -> int:
    """Convenience: write payloads to one file atomically; returns the record count."""
    with RecordWriter(path, compression, index_path=index_path) as writer:
        for payload in payloads:
            writer.write(payload)
        return writer.records_written
