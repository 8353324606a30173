"""TFRecord framing: RecordReader / RecordWriter, compression, masked CRC32C, clear errors.

A record on disk is `uint64 length | uint32 masked_crc32c(length) | payload | uint32
masked_crc32c(payload)`, little-endian. A compressed file (GZIP, ZLIB, ZSTD: the codecs of
`compression`) compresses that whole stream; offsets (in errors, indexes and `start_offset`)
are always offsets in the *uncompressed* stream.

This module is the public face: reading lives in `_reader`, writing in `_writer`, the codecs in
`compression`, the resync in `_resync`; their public names are importable from here.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Union

from . import compression as _compression
from ._engine._common import FOOTER_SIZE, FRAME_OVERHEAD, HEADER_SIZE
from ._reader import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_RECORD_SIZE, ReadSpan, RecordChunk, RecordReader, Source
from ._resync import (
    RESYNC_DEEP_LOOKBACK,
    RESYNC_LOOKAHEAD,
    RESYNC_LOOKBACK,
    Resync,
    find_record_start,
    header_length,
)
from ._writer import WRITE_BUFFER_SIZE, RecordWriter
from .errors import (  # noqa: F401 - importable from here before the split into _reader / _writer
    CorruptRecordError,
    CorruptStreamError,
    TruncatedRecordError,
    UnclosedWriterWarning,
)

__all__ = [
    "RecordReader",
    "ReadSpan",
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


def normalize_compression(compression: Optional[str]) -> Optional[str]:
    """A codec name, None or "auto" for any accepted spelling (`compression.normalize`)."""
    return _compression.normalize(compression)


def resolve_compression(path: Optional[str], compression: Optional[str] = "auto") -> Optional[str]:
    """The codec name (or None) of one file; "auto" from its suffix (`compression.resolve`)."""
    return _compression.resolve(path, compression)


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
