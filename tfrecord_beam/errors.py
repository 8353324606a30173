"""Errors raised by tfrecord_beam; each names the file, the byte offset and the record."""

from __future__ import annotations

import re
from typing import Optional, Tuple

__all__ = [
    "TFRecordError",
    "CorruptRecordError",
    "TruncatedRecordError",
    "CorruptStreamError",
    "IndexMismatchError",
    "OverwriteRefusedError",
    "SplitPointError",
    "RemoteReadError",
    "DecodeError",
    "FeatureKindError",
    "UnclosedWriterWarning",
    "WriterFailedError",
]


class TFRecordError(Exception):
    """Base of every tfrecord_beam error that concerns a file's contents.

    Built as `Error(path, offset, record_number, reason)`, or from one message alone (how
    torch's DataLoader rebuilds a worker's error in the main process: `exc_type(msg)`, msg
    holding the worker's traceback): the error keeps that message whole, and reads its path,
    record number, offset and reason back from it (`_fields_from_message`), so that
    `except CorruptRecordError` and `err.path` work across processes. Pickling keeps the
    fields as they are.
    """

    def __init__(
        self,
        path: Optional[str],
        offset: Optional[int] = None,
        record_number: Optional[int] = None,
        reason: Optional[str] = None,
    ) -> None:
        text: Optional[str] = None
        if reason is None and offset is None and record_number is None and isinstance(path, str):
            text = path  # one message: an error rebuilt from its text
            path, record_number, offset, reason = _fields_from_message(type(self), text)
        self.path = path
        self.offset = offset
        self.record_number = record_number
        self.reason = "" if reason is None else reason
        self._text = text
        super().__init__(self._message() if text is None else text)

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
        if self._text is not None:
            return (type(self), (self._text,))
        return (type(self), (self.path, self.offset, self.record_number, self.reason))


_NO_PATH = re.compile(
    r"(?:record (?P<record>\d+))?(?:(?<=\d), )?(?:byte offset (?P<offset>\d+))?: (?P<reason>.*)", re.S
)
_WITH_POSITION = re.compile(  # tried before _WITH_PATH: a path may hold ": " itself
    r"(?P<path>.+?), (?:record (?P<record>\d+)(?:, byte offset (?P<offset>\d+))?|byte offset (?P<offset_only>\d+))"
    r": (?P<reason>.*)",
    re.S,
)
_WITH_PATH = re.compile(
    r"(?P<path>.+?)(?:, record (?P<record>\d+))?(?:, byte offset (?P<offset>\d+))?: (?P<reason>.*)", re.S
)


def _fields_from_message(cls: type, text: str) -> Tuple[Optional[str], Optional[int], Optional[int], Optional[str]]:
    """(path, record number, offset, reason) read back from an error's message, or from the
    last line of a traceback that names `cls` (torch's "Caught ... Original Traceback: ...").

    The message is `[path][, record N][, byte offset M]: reason` (see `_message`); an error
    that had no path but a ": " in its reason reads back with the part before it as its path,
    and so does a path holding ": " in an error with neither record nor offset.
    """
    marker = f"{cls.__module__}.{cls.__qualname__}: "
    at = text.rfind("\n" + marker)
    if at >= 0:
        text = text[at + 1 + len(marker) :]
    elif text.startswith(marker):
        text = text[len(marker) :]
    text = text.rstrip("\n")
    found = _NO_PATH.fullmatch(text)
    if found is not None and (found["record"] or found["offset"]):
        path = None
        record, offset = found["record"], found["offset"]
    else:
        found = _WITH_POSITION.fullmatch(text) or _WITH_PATH.fullmatch(text)
        if found is None:
            return None, None, None, text
        path = found["path"]
        offset = found.groupdict().get("offset_only") or found["offset"]
        record = found["record"]
    return path, None if record is None else int(record), None if offset is None else int(offset), found["reason"]


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


class RemoteReadError(TFRecordError, OSError):
    """A byte range of a remote object could not be read: every attempt failed (5xx answers,
    stalls past the timeout, cut connections), or the object is missing, refused or replaced.
    `offset` is where the range starts; the reason names the range, the attempts and the last
    cause. Also an OSError (an input/output failure, as a local file's read error is), so
    `except OSError` catches a remote read that failed as it catches a local one."""


class DecodeError(TFRecordError):
    """A payload is not a valid Example / SequenceExample protobuf."""


class FeatureKindError(DecodeError, TypeError):
    """A feature holds another kind of list (bytes/float/int) than its description says.

    Also a TypeError, as the `tfrecord` package raised for the same mistake.
    """


class UnclosedWriterWarning(UserWarning):
    """A writer was garbage-collected or left open at interpreter exit without `close()`."""


class WriterFailedError(ValueError):
    """A writer whose write failed (a full disk, say) was asked to write again or to close:
    its file is incomplete, so it is never committed (the error names the file and the first
    failure, which is its cause)."""
