"""Errors raised by tfrecord_beam; each names the file, the byte offset and the record."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "TFRecordError",
    "CorruptRecordError",
    "TruncatedRecordError",
    "CorruptStreamError",
    "IndexMismatchError",
    "OverwriteRefusedError",
    "SplitPointError",
    "DecodeError",
    "FeatureKindError",
    "UnclosedWriterWarning",
]


class TFRecordError(Exception):
    """Base of every tfrecord_beam error that concerns a file's contents."""

    def __init__(
        self,
        path: Optional[str],
        offset: Optional[int],
        record_number: Optional[int],
        reason: str,
    ) -> None:
        self.path = path
        self.offset = offset
        self.record_number = record_number
        self.reason = reason
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.record_number is not None:
            where.append(f"record {self.record_number}")
        if self.offset is not None:
            where.append(f"byte offset {self.offset}")
        prefix = ", ".join(where)
        return f"{prefix}: {self.reason}" if prefix else self.reason

    def __reduce__(self):  # keep errors picklable across processes (DataLoader, Beam)
        return (type(self), (self.path, self.offset, self.record_number, self.reason))


class CorruptRecordError(TFRecordError):
    """A record's length or payload fails its CRC, or its framing is impossible."""


class TruncatedRecordError(CorruptRecordError):
    """The data ends inside a record (its header, payload or footer)."""


class CorruptStreamError(CorruptRecordError):
    """A compressed (GZIP / ZLIB) stream is damaged: nothing after the damage can be inflated.

    `offset` is the uncompressed offset where the damage begins; every record before it was
    delivered intact.
    """


class IndexMismatchError(TFRecordError):
    """A `.tfindex` file does not describe its data file (stale, truncated or malformed)."""


class OverwriteRefusedError(TFRecordError, ValueError):
    """A write would replace a file that is not what the write produces (e.g. an index over a
    data file): refused, since no command of this package overwrites a data file."""


class SplitPointError(TFRecordError):
    """A file cannot be split by byte ranges: at this offset the resync (the only way a range
    reader without an index finds its first record) disagrees with the record chain read up to
    it, because a payload embeds record-like frames. Give the file an index, or read it whole.

    Not a CorruptRecordError: the data may be intact, and skipping it would lose records.
    """


class DecodeError(TFRecordError):
    """A payload is not a valid Example / SequenceExample protobuf."""


class FeatureKindError(DecodeError, TypeError):
    """A feature holds another kind of list (bytes/float/int) than its description says.

    Also a TypeError, as the `tfrecord` package raised for the same mistake.
    """


class UnclosedWriterWarning(UserWarning):
    """A writer was garbage-collected or left open at interpreter exit without `close()`."""
