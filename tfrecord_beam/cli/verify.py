"""Check every CRC of a TFRecord file and list each problem with its offset and record.

A record whose *payload* CRC fails still has a trustworthy length (its own CRC passed), so the
check steps over that one record and goes on with exact record numbers. When a *length* CRC
fails the framing is lost: in an uncompressed file the check resyncs at the next valid record
(`records.find_record_start`) and goes on, numbering records again only when the resync point is where the damaged
length said the next record would be (otherwise the records in between are unknown and later
problems carry no record number). A compressed file cannot be resynced (its stream would have
to be searched inflated), so checking stops at its first lost framing; truncation always ends
the check. At most `max_problems` problems are listed per file.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

from .. import fs
from .._proto import INVALID, parse_record
from ..compression import read_at
from ..compression import resolve as resolve_compression
from ..errors import CorruptRecordError, CorruptStreamError, TFRecordError, TruncatedRecordError
from ..records import FRAME_OVERHEAD, HEADER_SIZE, RecordReader, Resync, header_length
from ._index_status import IndexCheck, IndexStatus

__all__ = ["Problem", "VerifyResult", "verify_file"]


@dataclass
class Problem:
    """One problem: where (uncompressed offset, record number when known) and what."""

    kind: str  # "corrupt", "truncated", "unreadable", "decode" or "index"
    offset: Optional[int]
    record: Optional[int]
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "offset": self.offset, "record": self.record, "message": self.message}


@dataclass
class VerifyResult:
    """The outcome of `verify_file`: intact records read, problems found, index state."""

    path: str
    compression: Optional[str] = None
    records: int = 0  # intact records
    data_bytes: int = 0  # uncompressed bytes of the intact records
    problems: List[Problem] = field(default_factory=list)
    index: Optional[IndexStatus] = None
    complete: bool = True  # False when checking stopped early (truncation, lost framing, limit)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> Dict[str, Any]:
        return {
            "path": self.path,
            "compression": self.compression or "none",
            "ok": self.ok,
            "records": self.records,
            "data_bytes": self.data_bytes,
            "complete": self.complete,
            "index": None if self.index is None else {"state": self.index.state, "detail": self.index.detail},
            "problems": [p.to_dict() for p in self.problems],
        }


def verify_file(
    path: str,
    compression: Optional[str] = "auto",
    *,
    max_problems: int = 100,
    parse: bool = False,
    progress: Optional[Callable[[int, int], None]] = None,
) -> VerifyResult:
    """Check every length and payload CRC of one file (and, with `parse`, that every payload is
    an Example or SequenceExample); the index beside it is checked too when the data is clean.

    `progress(records, bytes)` is called after each chunk read. Never raises for bad data: every
    problem, an unreadable file included, is in the result.
    """
    result = VerifyResult(path)
    try:
        result.compression = kind = resolve_compression(path, compression)
    except ValueError as exc:
        result.problems.append(Problem("unreadable", None, None, f"{path}: {exc}"))
        result.complete = False
        return result
    with _Resumer(path, kind) as resumer:
        return _ChainCheck(result, resumer, max_problems, parse, progress).run()


class _ChainCheck:
    """One file's check: read its record chain, going on past each corrupt record where the
    `_Resumer` can, then check the index when the data was clean. Fills `result`."""

    def __init__(
        self,
        result: VerifyResult,
        resumer: "_Resumer",
        max_problems: int,
        parse: bool,
        progress: Optional[Callable[[int, int], None]],
    ) -> None:
        self.result, self.resumer = result, resumer
        self.path, self.kind = result.path, result.compression
        self.max_problems, self.parse, self.progress = max_problems, parse, progress
        self.index = IndexCheck(self.path, self.kind)  # compared chunk by chunk while the data is clean

    def run(self) -> VerifyResult:
        resume: Optional[Tuple[int, Optional[int]]] = (0, 0)
        while resume is not None:
            resume = self._read_from(*resume)
        if not self.result.problems:
            self._check_index()
        return self.result

    def _read_from(self, start: int, number: Optional[int]) -> Optional[Tuple[int, Optional[int]]]:
        """Read the records from `start` (record `number`, or unknown) to the end of the file;
        None when checking is over, else (offset, record number) to go on from after damage."""
        try:
            for chunk in RecordReader(self.path, self.kind, start_offset=start, first_record_number=number).chunks():
                self._count(chunk)
        except TruncatedRecordError as exc:
            self._stop(Problem("truncated", exc.offset, exc.record_number, str(exc)))
        except CorruptStreamError as exc:  # nothing after damage in a compressed stream can be read
            self._stop(
                Problem(
                    "corrupt",
                    exc.offset,
                    exc.record_number,
                    f"{exc}; the rest of the {self.kind} stream cannot be inflated",
                )
            )
        except CorruptRecordError as exc:
            return self._resume_after(exc)
        except (TFRecordError, OSError, zlib.error, EOFError, ValueError) as exc:
            self._stop(Problem("unreadable", getattr(exc, "offset", None), None, _text(self.path, exc)))
        return None

    def _count(self, chunk) -> None:
        """Take in one chunk of intact records (and, with `parse`, check their payloads)."""
        result = self.result
        if self.parse:
            _check_payloads(result, chunk, self.max_problems)
        rows = chunk.frames()
        if not result.problems:  # the index is checked only against clean data
            self.index.add(rows)
        result.records += len(chunk)
        result.data_bytes += int(rows[:, 1].sum())
        if self.progress is not None:
            self.progress(result.records, result.data_bytes)

    def _stop(self, problem: Problem) -> None:
        """A problem after which nothing more of the file is checked."""
        self.result.problems.append(problem)
        self.result.complete = False

    def _resume_after(self, exc: CorruptRecordError) -> Optional[Tuple[int, Optional[int]]]:
        """List a corrupt record; where to go on after it, or None (checking stops: the problem
        limit is reached, or the resumer cannot go on)."""
        problem = Problem("corrupt", exc.offset, exc.record_number, str(exc))
        self.result.problems.append(problem)
        if len(self.result.problems) >= self.max_problems:
            self.result.complete = False
            return None
        try:  # (RecordReader's errors always carry the offset; without one there is no going on)
            resume = None if exc.offset is None else self.resumer.resume(exc.offset, exc.record_number, problem)
        except (TFRecordError, OSError, zlib.error, EOFError) as again:  # re-reading failed too
            problem.message += f"; the rest of the file could not be read ({_text(self.path, again)})"
            resume = None
        if resume is None:
            self.result.complete = False
        return resume

    def _check_index(self) -> None:
        """The index beside the (clean) data agrees with the records read; a stale or invalid
        one is a problem."""
        result = self.result
        try:
            result.index = self.index.status(complete=True)
        except (TFRecordError, OSError, ValueError) as exc:
            result.index = IndexStatus("", "invalid", _text(self.path, exc))
        if result.index.state in ("stale", "invalid"):
            result.problems.append(
                Problem("index", None, None, f"{result.index.path}: {result.index.state} index: {result.index.detail}")
            )


def _text(path: str, exc: BaseException) -> str:
    """An error's message, naming the file when the error itself does not."""
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, TFRecordError) or path in text else f"{path}: {text}"


def _check_payloads(result: VerifyResult, chunk, max_problems: int) -> None:
    offsets = chunk.record_offsets.tolist()
    for i, payload in enumerate(chunk.payloads()):
        if parse_record(payload)[0] == INVALID and len(result.problems) < max_problems:
            record = None if chunk.first_record_number is None else chunk.first_record_number + i
            where = f"record {record}, " if record is not None else ""
            result.problems.append(
                Problem(
                    "decode",
                    offsets[i],
                    record,
                    f"{result.path}, {where}byte offset {offsets[i]}: payload is neither an Example "
                    "nor a SequenceExample protobuf",
                )
            )


def _header_at(path: str, compression: Optional[str], offset: int) -> bytes:
    with fs.open_input(path) as raw:
        return read_at(raw, compression, offset, HEADER_SIZE)


class _Resumer:
    """Where `verify` goes on after a corrupt record: `Resync.after_bad` over one open file
    (its search state kept across the file's problems), or for a compressed file, the next
    record when the bad one's length is sound."""

    def __init__(self, path: str, kind: Optional[str]) -> None:
        self.path, self.kind = path, kind
        self._raw: Optional[BinaryIO] = None
        self._resync: Optional[Resync] = None

    def __enter__(self) -> "_Resumer":
        return self

    def __exit__(self, *exc) -> None:
        if self._raw is not None:
            self._raw.close()

    def resume(self, offset: int, record: Optional[int], problem: Problem) -> Optional[Tuple[int, Optional[int]]]:
        """(offset, record number or None) at which to go on, or None to stop; adds what was
        done to `problem.message`."""
        if self.kind is not None:
            length = header_length(_header_at(self.path, self.kind, offset))
            if length is None:
                problem.message += f"; framing lost in a {self.kind} file: the rest of it was not checked"
                return None
            problem.message += "; skipped this record"
            return offset + FRAME_OVERHEAD + length, None if record is None else record + 1
        if self._resync is None:
            self._raw = fs.open_input(self.path)
            self._resync = Resync(self._raw, fs.file_size(self.path), self.path)
        found, number, whole = self._resync.after_bad(offset, record)
        if whole:
            problem.message += "; skipped this record"
            return found, number
        total = self._resync.total
        if found >= total:
            problem.message += f"; no valid record in the remaining {total - offset} bytes"
            return None
        header = self._resync.read_at(offset, HEADER_SIZE)
        claimed = struct.unpack_from("<Q", header)[0] if len(header) >= 8 else None
        exact = record is not None and claimed is not None and found == offset + FRAME_OVERHEAD + claimed
        problem.message += f"; resynced at byte offset {found} (skipped {found - offset} bytes)"
        if not exact:
            problem.message += ", record numbers after it unknown"
        return found, record + 1 if exact and record is not None else None
