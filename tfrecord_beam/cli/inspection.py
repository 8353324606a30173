"""What is in a TFRecord file: record type, per-feature statistics, a description, an Arrow schema.

`collect_stats(paths)` reads records once and keeps, per feature, its kind, how many records
have it, how many values it holds (min / mean / max), numeric ranges and a bytes sample. From
those statistics follow the reader description (`infer_description`) and the Arrow schema that
a TFRecord -> Parquet conversion would use (`infer_arrow_schema`); `infer_schema(paths)` does
both steps for callers that just want the schema.

Each record's type comes from `_proto.parse_record` (re-exported here with EXAMPLE,
SEQUENCE_EXAMPLE and INVALID). A dataset is a SequenceExample dataset when any scanned record
is one (its records without feature lists are then SequenceExamples with only a context), an
Example dataset when all records are Examples.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from .. import _engine, blockgzip, fs
from .._engine._common import FRAME_OVERHEAD, KIND_NONE_NAME, MISSING, PRESENT
from .._proto import EXAMPLE, INVALID, SEQUENCE_EXAMPLE, parse_record
from .._tfindex import default_index_path, iter_index_starts, load_index, part_difference
from ..columnar import decode_examples, encoded_lengths
from ..compression import resolve as resolve_compression
from ..compression import seeks_by_members
from ..errors import DecodeError, FeatureKindError, IndexMismatchError, TFRecordError
from ..example import BYTES, FLOAT, INT, KIND_TO_FIELD, feature_kind
from ..index import iter_frame_arrays
from ..records import RecordReader
from ._images import image_info

__all__ = [
    "EXAMPLE",
    "SEQUENCE_EXAMPLE",
    "INVALID",
    "parse_record",
    "Progress",
    "SchemaInferenceError",
    "FeatureStats",
    "IndexStatus",
    "IndexCheck",
    "index_status",
    "FileStats",
    "DatasetStats",
    "scan_file",
    "collect_stats",
    "count_records",
    "InferredDescription",
    "infer_description",
    "arrow_type",
    "infer_arrow_schema",
    "infer_schema",
]

_SAMPLE_BYTES = 256  # how much of the first bytes value is kept as a sample
_SUMMARY_KINDS = (KIND_NONE_NAME, BYTES, FLOAT, INT)  # the order of `_engine.example_stats`' kind counts

Progress = Callable[[int, int, str, int, int], None]
"""progress(file_number, file_count, path, records_done, bytes_done) for long scans."""


class SchemaInferenceError(ValueError):
    """The statistics do not determine one Arrow type for a feature (mixed kinds, name clash)."""


# -- statistics --------------------------------------------------------------------------------

_LEARN_TRIES = 16  # records whose new features a batch learns before it goes the per-record way
# chunks whose first try (`decode_ahead`) runs at once ahead of the accounting. Measured with
# the batched decoder's try (decode + sizes pass ~4x read + statistics in CPU), before the
# compiled walk: with one, the decoder thread was the critical path under load (7.5 -> 3.5 s
# with two on 5 M small records); on a quiet 2-core machine 1, 2 and 3 took the same time
_DECODERS = 2
# an uncompressed local file at least this big, read whole and with no index, is read as two
# halves at once (`_scan_halves`): 1.8-2.0 -> 1.2-1.4 s on 5 M small records (the chunks no
# longer cross from the core that read them to the one that takes their statistics)
_SPLIT_MIN = 64 << 20


def _fast_columns(buffer: Any, offsets: np.ndarray, lengths: np.ndarray, description: Dict[str, str]):
    """The batch decoded as Examples, {name: Column}, when every record is exactly the described
    features (its encoding again is as long); else the index of the first record that is not
    (it holds something more), or None when the batch does not decode (not an Example, mixed kinds)."""
    try:
        columns = decode_examples(buffer, description, offsets=offsets, lengths=lengths)
    except (DecodeError, FeatureKindError):
        return None
    differ = np.flatnonzero(encoded_lengths(columns, len(offsets)) != lengths)
    return columns if not len(differ) else int(differ[0])


class _Decoded(NamedTuple):
    """A batch's first try started in a thread: `_engine.example_stats` (description None), or
    `_fast_columns` on the pure engine, with the description it was given."""

    description: Optional[Dict[str, str]]
    future: "Future[Any]"

    def result(self) -> Any:
        return self.future.result()


def _minmax(current: Optional[Tuple[Any, Any]], lo: Any, hi: Any) -> Tuple[Any, Any]:
    if current is None:
        return lo, hi
    return min(current[0], lo), max(current[1], hi)


@dataclass
class FeatureStats:
    """Statistics of one feature (one feature list for `sequence=True`) over the scanned records.

    Counts of values are per record; for a feature list, `values_*` count the values of all its
    steps in a record, `steps_*` the steps per record and `step_values` the values per step.
    """

    name: str
    sequence: bool = False
    records: int = 0  # records in which the feature is present
    kinds: Counter = field(default_factory=Counter)  # kind (or KIND_NONE_NAME) -> Feature messages
    values: Optional[Tuple[int, int]] = None  # (min, max) values per record
    values_total: int = 0
    steps: Optional[Tuple[int, int]] = None
    steps_total: int = 0
    step_values: Optional[Tuple[int, int]] = None
    int_range: Optional[Tuple[int, int]] = None
    float_range: Optional[Tuple[float, float]] = None  # NaN excluded
    nan_count: int = 0
    bytes_count: int = 0
    bytes_length: Optional[Tuple[int, int]] = None
    non_utf8: int = 0  # bytes values that are not valid UTF-8
    images: Counter = field(default_factory=Counter)  # "PNG" / "JPEG" / ... -> values
    sample: Optional[bytes] = None  # the start of the first non-empty bytes value
    sample_length: int = 0

    @property
    def kind(self) -> Optional[str]:
        """The one kind seen ("byte", "float", "int"); None when no Feature had a kind set.

        Raises SchemaInferenceError when records disagree (an int here, a float there).
        """
        seen = [k for k in self.kinds if k != KIND_NONE_NAME]
        if len(seen) > 1:
            detail = ", ".join(f"{k} in {n}" for k, n in sorted(self.kinds.items()))
            raise SchemaInferenceError(f"feature {self.name!r} has mixed kinds ({detail} Feature messages)")
        return seen[0] if seen else None

    @property
    def kind_label(self) -> str:
        """The kind for display: "int", "mixed(float,int)" or "none"."""
        seen = sorted(k for k in self.kinds if k != KIND_NONE_NAME)
        if not seen:
            return KIND_NONE_NAME
        return seen[0] if len(seen) == 1 else f"mixed({','.join(seen)})"

    @property
    def values_mean(self) -> Optional[float]:
        return self.values_total / self.records if self.records else None

    @property
    def steps_mean(self) -> Optional[float]:
        return self.steps_total / self.records if self.records else None

    def add_feature(self, feature) -> int:
        """Account one Feature message's values; returns how many it holds."""
        kind = feature_kind(feature)
        if kind is None:
            self.kinds[KIND_NONE_NAME] += 1
            return 0
        self.kinds[kind] += 1
        values = getattr(feature, KIND_TO_FIELD[kind]).value
        count = len(values)
        if not count:
            return 0
        if kind == INT:
            self.int_range = _minmax(self.int_range, min(values), max(values))
        elif kind == FLOAT:
            total = sum(values)
            if total == total:  # no NaN (inf + -inf also lands in the slow path)
                self.float_range = _minmax(self.float_range, min(values), max(values))
            else:
                finite = [v for v in values if v == v]
                self.nan_count += count - len(finite)
                if finite:
                    self.float_range = _minmax(self.float_range, min(finite), max(finite))
        else:
            self._add_bytes(values)
        return count

    def _check_text(self, value: bytes) -> None:
        """Count a value that is not UTF-8, and the image format it holds, if any."""
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            self._not_text(value)

    def _not_text(self, value: bytes) -> None:
        """Count a value known not to be UTF-8, and the image format it holds, if any."""
        self.non_utf8 += 1
        image = image_info(value)
        if image is not None:
            self.images[image[0]] += 1

    def _add_bytes(self, values) -> None:
        lengths = [len(v) for v in values]
        self.bytes_count += len(lengths)
        self.bytes_length = _minmax(self.bytes_length, min(lengths), max(lengths))
        for value in values:
            self._check_text(value)
            if self.sample is None and value:
                self.sample, self.sample_length = value[:_SAMPLE_BYTES], len(value)

    def add_column(self, column) -> None:
        """Account a batch's column of this (Example) feature: what `add_feature` and
        `add_record` do for each record that has it, with numpy over the whole batch."""
        present = column.status != MISSING
        records = int(present.sum())
        if not records:
            return
        with_kind = int((column.status == PRESENT).sum())
        if records - with_kind:
            self.kinds[KIND_NONE_NAME] += records - with_kind
        if with_kind:
            self.kinds[column.kind] += with_kind
        counts = np.diff(column.row_splits)[present]
        self.records += records
        self.values_total += int(counts.sum())
        self.values = _minmax(self.values, int(counts.min()), int(counts.max()))
        values = column.values
        if not len(values) and column.kind != BYTES:
            return
        if column.kind == INT:
            self.int_range = _minmax(self.int_range, int(values.min()), int(values.max()))
        elif column.kind == FLOAT:
            nan = np.isnan(values)
            finite = values[~nan] if nan.any() else values
            self.nan_count += int(nan.sum())
            if len(finite):
                self.float_range = _minmax(self.float_range, float(finite.min()), float(finite.max()))
        else:
            self._add_bytes_column(values, column.value_offsets)

    def _add_bytes_column(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        lengths = np.diff(offsets)
        if not len(lengths):
            return
        self.bytes_count += len(lengths)
        self.bytes_length = _minmax(self.bytes_length, int(lengths.min()), int(lengths.max()))
        wide = buffer >= 0x80
        if wide.any():  # ASCII values are UTF-8: only a value holding a high byte is checked
            high = np.concatenate([[0], np.cumsum(wide)])
            maybe = np.flatnonzero(high[offsets[1:]] != high[offsets[:-1]])
            for k in maybe.tolist():
                self._check_text(buffer[offsets[k] : offsets[k + 1]].tobytes())
        if self.sample is None:
            non_empty = np.flatnonzero(lengths)
            if len(non_empty):
                k = int(non_empty[0])
                self.sample = buffer[offsets[k] : min(offsets[k + 1], offsets[k] + _SAMPLE_BYTES)].tobytes()
                self.sample_length = int(lengths[k])

    def add_summary(self, summary: Tuple[Any, ...], buffer: Any) -> None:
        """Account one feature's statistics from `_engine.example_stats` over a batch of
        `buffer`'s records: what `add_feature` and `add_record` do for each record that has it."""
        _, records, kinds, values, ints, floats, nan_count, byte_values, not_text, sample = summary
        self.records += records
        for kind, count in zip(_SUMMARY_KINDS, kinds):
            if count:
                self.kinds[kind] += count
        self.values = _minmax(self.values, values[0], values[1])
        self.values_total += values[2]
        if ints is not None:
            self.int_range = _minmax(self.int_range, *ints)
        if floats is not None:
            self.float_range = _minmax(self.float_range, *floats)
        self.nan_count += nan_count
        if byte_values is not None:
            self.bytes_count += byte_values[0]
            self.bytes_length = _minmax(self.bytes_length, byte_values[1], byte_values[2])
        if not_text is not None:
            view = memoryview(buffer)
            for at, length in not_text.tolist():
                self._not_text(bytes(view[at : at + length]))
        if self.sample is None and sample is not None:
            at, length = sample
            self.sample = bytes(memoryview(buffer)[at : at + min(length, _SAMPLE_BYTES)])
            self.sample_length = length

    def merge(self, other: "FeatureStats") -> None:
        """Account the records `other` saw, which come after the ones this one saw (its sample
        is kept only when this one has none)."""
        self.records += other.records
        self.kinds.update(other.kinds)
        self.values_total += other.values_total
        self.steps_total += other.steps_total
        self.nan_count += other.nan_count
        self.bytes_count += other.bytes_count
        self.non_utf8 += other.non_utf8
        self.images.update(other.images)
        for name in ("values", "steps", "step_values", "int_range", "float_range", "bytes_length"):
            theirs = getattr(other, name)
            if theirs is not None:
                setattr(self, name, _minmax(getattr(self, name), *theirs))
        if self.sample is None and other.sample is not None:
            self.sample, self.sample_length = other.sample, other.sample_length

    def add_record(self, values: int) -> None:
        """Close one record in which the feature held `values` values."""
        self.records += 1
        self.values_total += values
        self.values = _minmax(self.values, values, values)

    def add_sequence(self, feature_list) -> None:
        """Account one record's FeatureList (its steps and their values)."""
        steps = 0
        total = 0
        for feature in feature_list.feature:
            count = self.add_feature(feature)
            self.step_values = _minmax(self.step_values, count, count)
            total += count
            steps += 1
        self.steps_total += steps
        self.steps = _minmax(self.steps, steps, steps)
        self.add_record(total)

    def to_dict(self, section: Optional[str] = None) -> Dict[str, Any]:
        """A JSON-ready dict (non-finite floats as strings, the bytes sample as text or repr)."""
        out: Dict[str, Any] = {
            "name": self.name,
            "section": section or ("feature_lists" if self.sequence else "features"),
            "kind": self.kind_label,
            "kinds": dict(self.kinds),
            "records": self.records,
            "values_min": self.values[0] if self.values else None,
            "values_mean": self.values_mean,
            "values_max": self.values[1] if self.values else None,
        }
        if self.sequence:
            out.update(
                steps_min=self.steps[0] if self.steps else None,
                steps_mean=self.steps_mean,
                steps_max=self.steps[1] if self.steps else None,
                step_values_min=self.step_values[0] if self.step_values else None,
                step_values_max=self.step_values[1] if self.step_values else None,
            )
        if self.int_range is not None:
            out.update(min=self.int_range[0], max=self.int_range[1])
        if self.float_range is not None:
            out.update(min=_json_float(self.float_range[0]), max=_json_float(self.float_range[1]))
        if FLOAT in self.kinds:
            out["nan_count"] = self.nan_count
        if BYTES in self.kinds:
            out.update(
                bytes_values=self.bytes_count,
                bytes_length_min=self.bytes_length[0] if self.bytes_length else None,
                bytes_length_max=self.bytes_length[1] if self.bytes_length else None,
                all_utf8=self.non_utf8 == 0,
                images=dict(self.images),
                sample=None if self.sample is None else _sample_text(self.sample),
                sample_length=self.sample_length if self.sample is not None else None,
            )
        return out


def _json_float(value: float) -> Union[float, str]:
    return value if math.isfinite(value) else str(value)


def _sample_text(sample: bytes) -> str:
    try:
        return sample.decode("utf-8")
    except UnicodeDecodeError:
        return repr(sample)


@dataclass
class IndexStatus:
    """Whether a data file's `.tfindex` is there and describes it.

    `state`: "absent", "valid", "stale" (describes some other data), "invalid" (not an index
    file), or "unchecked" (present, but a compressed file would have to be inflated to check).
    """

    path: str
    state: str
    detail: str = ""


def index_status(
    data_path: str, compression: Optional[str] = "auto", frames: Optional[np.ndarray] = None, complete: bool = True
) -> IndexStatus:
    """Check the default `.tfindex` beside `data_path`.

    With `frames` (the (n, 2) offsets and frame lengths read from the data, all of them when
    `complete`) the index is compared entry by entry. Without them, an uncompressed file gets
    the cheap check: the index's last record must end exactly at the end of the file (indexes
    are contiguous from offset 0 by construction, `load_index` checks that). A scan that reads
    the data a chunk at a time compares as it goes with `IndexCheck` instead.
    """
    check = IndexCheck(data_path, compression)
    if frames is not None:
        check.add(frames)
    return check.status(complete, compared=frames is not None)


class IndexCheck:
    """`index_status` for a scan that reads the data a chunk at a time: `add(rows)` for each
    chunk's (k, 2) rows, in order, then `status(complete)`. The index text is parsed in pieces
    in step with the rows (`_tfindex.iter_index_starts`): it holds the index rows of a piece
    not yet compared and the first difference, never the whole index nor the rows read (16
    bytes a record each). `status` parses the rest of the text (the whole of it must be well
    formed and contiguous, as `load_index` requires) for the count and where the index ends.
    An error that `index_status` would raise is raised by `status`."""

    def __init__(self, data_path: str, compression: Optional[str] = "auto") -> None:
        self.data_path, self.compression = data_path, compression
        self.path = default_index_path(data_path)
        self.rows = 0  # rows added so far
        self.difference: Optional[Tuple[int, str]] = None
        self._pieces: Optional[Iterator[Tuple[np.ndarray, int]]] = None  # None: not opened or all parsed
        self._opened = False
        self._entries = 0  # index entries parsed so far
        self._end = 0  # where the last of them ends
        self._pending = np.zeros((0, 2), np.int64)  # parsed index rows from record `self.rows` on
        self._known: Optional[IndexStatus] = None  # decided by the index alone
        self._error: Optional[BaseException] = None  # raised by `status`

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        try:
            if not fs.exists(self.path):
                self._known = IndexStatus(self.path, "absent")
                return
        except Exception as exc:  # noqa: BLE001 - kept for `status`, never the scan's error
            self._error = exc
            return
        self._pieces = iter_index_starts(self.path)

    def _comparing(self) -> bool:
        """Whether rows added are still compared: an index is there, well formed so far, and
        no difference found yet."""
        return self.difference is None and self._known is None and self._error is None

    def _parse_piece(self) -> Optional[np.ndarray]:
        """The (k, 2) rows of the next piece of the index; None when there is none (all
        parsed, or the index is invalid: `_known` / `_error` says so)."""
        if self._pieces is None:
            return None
        try:
            starts, end = next(self._pieces)
        except StopIteration:
            self._pieces = None
            return None
        except (IndexMismatchError, OSError, UnicodeDecodeError) as exc:
            self._pieces, self._known = None, IndexStatus(self.path, "invalid", str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - kept for `status`, never the scan's error
            self._pieces, self._error = None, exc
            return None
        rows = np.empty((len(starts), 2), dtype=np.int64)
        rows[:, 0] = starts  # the chain holds: each length is where the next entry starts, less its own start
        np.subtract(starts[1:], starts[:-1], out=rows[:-1, 1])
        rows[-1, 1] = end - int(starts[-1])
        self._entries, self._end = self._entries + len(starts), end
        return rows

    def add(self, frames: np.ndarray) -> None:
        """Compare the next rows read from the data (records `self.rows` on) with the index."""
        self._open()
        frames = np.asarray(frames, dtype=np.int64).reshape(-1, 2)
        if self._comparing():
            parts, have = [self._pending], len(self._pending)
            while have < len(frames):
                rows = self._parse_piece()
                if rows is None:
                    break
                parts.append(rows)
                have += len(rows)
            self._pending = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if self._known is None and self._error is None:
                part, self._pending = self._pending[: len(frames)], self._pending[len(frames) :]
                self.difference = part_difference(part, frames, "the data", self.rows)
                if self.difference is not None:
                    self._pending = np.zeros((0, 2), np.int64)
        self.rows += len(frames)

    def count(self, rows: int) -> None:
        """Note rows read but not compared: only when the index is absent (`absent`)."""
        if not self.absent():
            raise ValueError(f"{self.path}: rows of data with an index must be compared (add), not counted")
        self.rows += rows

    def absent(self) -> bool:
        """Whether there is no index beside the data (nothing to compare rows with)."""
        self._open()
        return self._known is not None and self._known.state == "absent"

    def add_chunk(self, chunk: Any, take: int) -> None:
        """`add` the rows of a reader chunk's first `take` records, made only while they are
        compared (no index, or a difference already found: only counted)."""
        self._open()
        if self._comparing():
            self.add(chunk.frames()[:take])
        else:
            self.rows += take

    def status(self, complete: bool = True, compared: bool = True) -> IndexStatus:
        """The index's state after the rows added (all of the data's when `complete`); with
        `compared=False` no rows were read and an uncompressed file gets the cheap size check."""
        self._open()
        self._pending = np.zeros((0, 2), np.int64)
        while self._parse_piece() is not None:  # the rest: its validity, count and end
            pass
        if self._error is not None:
            raise self._error
        if self._known is not None:
            return self._known
        end = self._end
        if compared:
            difference = self.difference or part_difference(
                np.zeros((0, 2), np.int64),
                np.zeros((0, 2), np.int64),
                "the data",
                self.rows,
                self._entries if complete else None,
            )
            if difference is not None:
                return IndexStatus(self.path, "stale", difference[1])
            if complete:
                return IndexStatus(self.path, "valid", "")
        if resolve_compression(self.data_path, self.compression) is not None:
            return IndexStatus(self.path, "unchecked", "compressed data: only a full read can check it")
        size = fs.file_size(self.data_path)
        if end != size:
            return IndexStatus(self.path, "stale", f"index ends at byte {end} but the file has {size} bytes")
        return IndexStatus(self.path, "valid", "size and first records checked" if compared else "")


@dataclass
class FileStats:
    """One file of a scan: its size, compression, records read, index state, and any error."""

    path: str
    compression: Optional[str] = None
    size: Optional[int] = None  # bytes on disk
    records: int = 0  # records read
    data_bytes: int = 0  # uncompressed bytes of the records read (frames included)
    complete: bool = False  # every record was read (no limit hit, no error)
    index: Optional[IndexStatus] = None
    gzip_layout: Optional[Tuple[str, Optional[int], str]] = None  # GZIP only: `blockgzip.layout`
    error: Optional[str] = None
    exception: Optional[BaseException] = field(default=None, repr=False)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "path": self.path,
            "compression": self.compression or "none",
            "size": self.size,
            "records": self.records,
            "data_bytes": self.data_bytes,
            "complete": self.complete,
            "index": None
            if self.index is None
            else {"path": self.index.path, "state": self.index.state, "detail": self.index.detail},
            "gzip_blocks": None
            if self.gzip_layout is None
            else {"state": self.gzip_layout[0], "members": self.gzip_layout[1], "detail": self.gzip_layout[2]},
            "error": self.error,
        }


@dataclass
class DatasetStats:
    """Statistics over the scanned records of one or more files."""

    files: List[FileStats] = field(default_factory=list)
    features: Dict[str, FeatureStats] = field(default_factory=dict)  # field 1: features / context
    feature_lists: Dict[str, FeatureStats] = field(default_factory=dict)
    record_types: Counter = field(default_factory=Counter)
    _learned: Dict[str, str] = field(default_factory=dict, repr=False)  # features known, not yet counted

    @property
    def records(self) -> int:
        return sum(self.record_types.values())

    @property
    def record_type(self) -> str:
        """EXAMPLE, SEQUENCE_EXAMPLE, INVALID (no record parses), or "empty" (no records)."""
        if not self.records:
            return "empty"
        if self.record_types[SEQUENCE_EXAMPLE]:
            return SEQUENCE_EXAMPLE
        if self.record_types[EXAMPLE]:
            return EXAMPLE
        return INVALID

    @property
    def feature_section(self) -> str:
        """What field 1 is called: "context" in SequenceExample data, "features" otherwise."""
        return "context" if self.record_type == SEQUENCE_EXAMPLE else "features"

    def merge(self, other: "DatasetStats") -> None:
        """Account the records `other` saw (its files' entries are not taken), which come
        after the ones this one saw."""
        self.record_types.update(other.record_types)
        for mine, theirs, sequence in (
            (self.features, other.features, False),
            (self.feature_lists, other.feature_lists, True),
        ):
            for name, stats in theirs.items():
                if name not in mine:
                    mine[name] = FeatureStats(name, sequence=sequence)
                mine[name].merge(stats)

    def add_record(self, payload: bytes) -> str:
        """Parse one payload and account its features; returns its record type."""
        rtype, features, lists = parse_record(payload)
        self.record_types[rtype] += 1
        if features is not None:
            for name, feature in features.items():
                stats = self.features.get(name)
                if stats is None:
                    stats = self.features[name] = FeatureStats(name)
                stats.add_record(stats.add_feature(feature))
        if lists is not None:
            for name, feature_list in lists.items():
                stats = self.feature_lists.get(name)
                if stats is None:
                    stats = self.feature_lists[name] = FeatureStats(name, sequence=True)
                stats.add_sequence(feature_list)
        return rtype

    def add_payloads(
        self, buffer: Any, offsets: np.ndarray, lengths: np.ndarray, decoded: Optional["_Decoded"] = None
    ) -> None:
        """Account the records `buffer[offsets[i]:offsets[i] + lengths[i]]` (a reader chunk).

        Example records in the form writers produce are taken by the compiled
        `_engine.example_stats`, many at once; a record in any other form (a SequenceExample,
        unknown fields, a duplicate key, not a protobuf) stops it and goes the per-record way
        (`add_record`, protobuf), and the batch goes on after it; once a SequenceExample was
        seen, every record goes the per-record way (each would stop the walk). On the pure engine the
        batched decoder takes its place (`_add_decoded`). Every way gives the same statistics.
        `decoded`: the first try of the batch, already started (`decode_ahead`); used when
        its description is still the one to use.
        """
        if not len(offsets):
            return
        if _engine.example_stats is None:
            self._add_decoded(buffer, offsets, lengths, decoded)
            return
        start = 0
        while start < len(offsets) and not self.record_types[SEQUENCE_EXAMPLE]:
            if decoded is not None:
                taken, summaries = decoded.result()
                decoded = None
            else:
                taken, summaries = _engine.example_stats(buffer, offsets, lengths, start)
            if taken:
                self.record_types[EXAMPLE] += taken
                self._add_summaries(summaries, buffer)
            start += taken
            if start < len(offsets):
                self.add_record(bytes(buffer[offsets[start] : offsets[start] + lengths[start]]))
                start += 1
        # SequenceExample data: every record stops the walk, so they all go the per-record way
        for payload in _engine.slice_payloads(buffer, offsets[start:], lengths[start:]):
            self.add_record(payload)

    def _add_summaries(self, summaries: List[Tuple[Any, ...]], buffer: Any) -> None:
        for summary in summaries:
            name = summary[0]
            stats = self.features.get(name)
            if stats is None:
                stats = self.features[name] = FeatureStats(name)
            stats.add_summary(summary, buffer)

    def _add_decoded(
        self, buffer: Any, offsets: np.ndarray, lengths: np.ndarray, decoded: Optional["_Decoded"] = None
    ) -> None:
        """`add_payloads` on the pure engine: Example records through the batched decoder
        (`columnar.decode_examples`) with the features seen so far, and statistics per column
        with numpy. To know that a record holds nothing else (another feature, field 2 of a
        SequenceExample, an unusual encoding), the decoded columns' encoded lengths
        (`columnar.encoded_lengths`) must be the records' lengths: a record that is longer goes,
        with its batch, the per-record way (`add_record`), which also learns its features for
        the next batches."""
        if not self.record_types[SEQUENCE_EXAMPLE]:  # SequenceExample data: the per-record way
            for _ in range(_LEARN_TRIES):
                description = self._fast_description()
                if decoded is not None and decoded.description == description:
                    columns = decoded.result()
                else:
                    columns = _fast_columns(buffer, offsets, lengths, description)
                decoded = None
                if isinstance(columns, dict):
                    self._add_columns(columns, len(offsets))
                    return
                if columns is None or not self._learn(
                    bytes(buffer[offsets[columns] : offsets[columns] + lengths[columns]])
                ):
                    break
        for payload in _engine.slice_payloads(buffer, offsets, lengths):
            self.add_record(payload)

    def decode_ahead(
        self, pool: ThreadPoolExecutor, buffer: Any, offsets: np.ndarray, lengths: np.ndarray
    ) -> Optional["_Decoded"]:
        """Start `add_payloads`' first try of a batch in `pool` (the compiled statistics, or
        the batched decoder and sizes pass, run without the GIL beside the accounting of the
        batch before); None when there is nothing to start (SequenceExample data goes the
        per-record way)."""
        if not len(offsets) or self.record_types[SEQUENCE_EXAMPLE]:
            return None
        if _engine.example_stats is not None:
            return _Decoded(None, pool.submit(_engine.example_stats, buffer, offsets, lengths))
        description = self._fast_description()
        return _Decoded(description, pool.submit(_fast_columns, buffer, offsets, lengths, description))

    def _fast_description(self) -> Dict[str, str]:
        """{name: kind} of every feature seen: the kind seen most (as first seen for a feature
        only learned so far; any kind for kind-less ones: their status says so)."""
        out = dict(self._learned)
        for name, stats in self.features.items():
            kinds = [(n, k) for k, n in stats.kinds.items() if k != KIND_NONE_NAME]
            out[name] = max(kinds)[1] if kinds else out.get(name, BYTES)
        return out

    def _learn(self, payload: bytes) -> bool:
        """Note the features of one record (not counted) so that the next try decodes them;
        False when it has none the statistics do not already know."""
        rtype, features, _ = parse_record(payload)
        if rtype != EXAMPLE or features is None:
            return False
        known = self._fast_description()
        new = {name: feature_kind(feature) or BYTES for name, feature in features.items() if name not in known}
        self._learned.update(new)
        return bool(new)

    def _add_columns(self, columns: Dict[str, Any], n: int) -> None:
        self.record_types[EXAMPLE] += n
        for name, column in columns.items():
            if not (column.status != MISSING).any():
                continue
            stats = self.features.get(name)
            if stats is None:
                stats = self.features[name] = FeatureStats(name)
            stats.add_column(column)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "record_type": self.record_type,
            "records": self.records,
            "record_types": dict(self.record_types),
            "files": [f.to_dict() for f in self.files],
            self.feature_section: [s.to_dict(self.feature_section) for _, s in sorted(self.features.items())],
            "feature_lists": [s.to_dict() for _, s in sorted(self.feature_lists.items())],
        }


def scan_file(
    stats: DatasetStats,
    path: str,
    compression: Optional[str] = "auto",
    *,
    limit: Optional[int] = None,
    progress: Optional[Progress] = None,
    file_number: int = 1,
    file_count: int = 1,
) -> FileStats:
    """Read up to `limit` records of one file into `stats`; errors are kept in the FileStats.

    The records before a corrupt one are counted; the error text names file, offset, record.
    """
    info = FileStats(path)
    stats.files.append(info)
    check = IndexCheck(path, compression)  # compared chunk by chunk: the rows are not kept
    try:
        info.compression = resolve_compression(path, compression)
        info.size = fs.file_size(path)
        if seeks_by_members(info.compression):
            info.gzip_layout = blockgzip.layout(path)
        whole = (progress, file_number, file_count)
        if not (_halves_apply(path, info, limit, check) and _scan_halves(stats, path, info, check, whole)):
            _scan_chain(stats, path, info, check, limit, whole)
    except (TFRecordError, OSError, ValueError, zlib.error) as exc:
        info.exception = exc
        info.error = str(exc) if isinstance(exc, TFRecordError) else f"{path}: {exc}"
    if info.error is None or info.size is not None:
        try:
            info.index = check.status(info.complete)
        except OSError as exc:
            info.index = IndexStatus(default_index_path(path), "invalid", str(exc))
    return info


def _scan_chain(
    stats: DatasetStats,
    path: str,
    info: FileStats,
    check: IndexCheck,
    limit: Optional[int],
    progress: Tuple[Optional[Progress], int, int],
) -> None:
    """`scan_file`'s read of the file in one chain of chunks, the statistics of each taken in
    threads ahead of the accounting (`_decoding_ahead`)."""
    report, file_number, file_count = progress
    with ThreadPoolExecutor(_DECODERS, thread_name_prefix="tfrb-inspect") as pool:
        ahead = _decoding_ahead(stats, pool, RecordReader(path, info.compression), limit, _DECODERS)
        for chunk, take, decoded in ahead:
            stats.add_payloads(chunk.buffer, chunk.payload_offsets[:take], chunk.payload_lengths[:take], decoded)
            check.add_chunk(chunk, take)
            info.records += take
            info.data_bytes += int(chunk.payload_lengths[:take].sum()) + FRAME_OVERHEAD * take
            if report is not None:
                report(file_number, file_count, path, info.records, info.data_bytes)
            if limit is not None and info.records >= limit:
                break
        else:
            info.complete = True


def _halves_apply(path: str, info: FileStats, limit: Optional[int], check: IndexCheck) -> bool:
    """Whether `scan_file` reads the file as two halves at once (`_scan_halves`): a local,
    uncompressed file of at least `_SPLIT_MIN` bytes, read whole (no limit), with no index
    to compare with (the comparison goes in order), on the compiled engine (the pure one
    holds the GIL)."""
    return (
        _engine.example_stats is not None
        and info.compression is None
        and limit is None
        and (info.size or 0) >= _SPLIT_MIN
        and not fs.is_remote(path)
        and check.absent()
    )


def _scan_halves(
    stats: DatasetStats,
    path: str,
    info: FileStats,
    check: IndexCheck,
    progress: Tuple[Optional[Progress], int, int],
) -> bool:
    """Read the file as two byte ranges in two threads, each reading, checking and taking
    statistics of its own chunks (a chunk's bytes stay in the cache of the core that read
    them), then merge them in file order. The second range finds its first record by resync
    and the first checks that it ends where that is (`RecordReader`'s end check), so no
    record is lost or counted twice. True when the whole file was accounted; False, with
    nothing accounted, when a range failed (bad data, or a split the resync cannot find
    because payloads embed frames): the caller reads the file in one chain then, which
    reports the error with its record number and keeps the records before it."""
    report, file_number, file_count = progress
    mid = (info.size or 0) // 2
    parts = [DatasetStats(), DatasetStats()]
    done = [[0, 0], [0, 0]]  # records, data bytes of each range so far
    lock = threading.Lock()
    failed = threading.Event()

    def scan(k: int) -> None:
        try:
            # resync=True on the first range too (it starts at 0: no search there): its end
            # check then runs even when its records continue exactly at `mid`, where a frame
            # in the record before can still move the second range's resync past a record
            reader = (
                RecordReader(path, None, end_offset=mid, resync=True)
                if k == 0
                else RecordReader(path, None, start_offset=mid, resync=True)
            )
            for chunk in reader.chunks():
                if failed.is_set():
                    return
                parts[k].add_payloads(chunk.buffer, chunk.payload_offsets, chunk.payload_lengths)
                with lock:
                    done[k][0] += len(chunk)
                    done[k][1] += int(chunk.payload_lengths.sum()) + FRAME_OVERHEAD * len(chunk)
                    if report is not None:
                        report(file_number, file_count, path, done[0][0] + done[1][0], done[0][1] + done[1][1])
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(2, thread_name_prefix="tfrb-inspect") as pool:
        try:
            futures = [pool.submit(scan, k) for k in (0, 1)]
            errors = [future.exception() for future in futures]
        except BaseException:  # an interrupt (Ctrl-C): the halves stop at their next chunk
            failed.set()
            raise
    for error in errors:
        if error is not None and not isinstance(error, (TFRecordError, OSError, ValueError, zlib.error)):
            raise error
    if any(error is not None for error in errors):
        return False
    for part in parts:
        stats.merge(part)
    info.records = done[0][0] + done[1][0]
    info.data_bytes = done[0][1] + done[1][1]
    info.complete = True
    check.count(info.records)
    return True


def _decoding_ahead(
    stats: DatasetStats, pool: ThreadPoolExecutor, reader: RecordReader, limit: Optional[int], depth: int
) -> Iterator[Tuple[Any, int, Optional[_Decoded]]]:
    """(chunk, records of it to take, its first try started in `pool` by `decode_ahead`) per
    chunk of the reader, the next `depth` chunks read and their tries started before one is
    yielded: reading and the compiled statistics or decoding (no GIL) overlap the accounting of
    the chunk before. A read error comes after the chunks before it, as it would without the
    look-ahead; memory is `depth` + 1 chunks and their tries' results."""
    chunks = reader.chunks()
    pending: Deque[Tuple[Any, int, Optional[_Decoded]]] = deque()
    taken = 0
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        except BaseException:
            while pending:
                yield pending.popleft()
            raise
        take = len(chunk) if limit is None else min(len(chunk), limit - taken)
        taken += take
        offsets, lengths = chunk.payload_offsets[:take], chunk.payload_lengths[:take]
        pending.append((chunk, take, stats.decode_ahead(pool, chunk.buffer, offsets, lengths)))
        if len(pending) > depth:
            yield pending.popleft()
        if limit is not None and taken >= limit:
            break  # no chunk is read past the limit
    while pending:
        yield pending.popleft()


def collect_stats(
    paths: Iterable[str],
    compression: Optional[str] = "auto",
    *,
    limit: Optional[int] = None,
    progress: Optional[Progress] = None,
) -> DatasetStats:
    """Scan files (at most `limit` records of each) into one DatasetStats; see `scan_file`."""
    paths = list(paths)
    stats = DatasetStats()
    for number, path in enumerate(paths, start=1):
        scan_file(stats, path, compression, limit=limit, progress=progress, file_number=number, file_count=len(paths))
    return stats


# -- counting ----------------------------------------------------------------------------------


def count_records(
    path: str,
    compression: Optional[str] = "auto",
    *,
    use_index: bool = True,
    progress: Optional[Callable[[int], None]] = None,
) -> Tuple[int, str]:
    """(record count, "index" or "scan"): from a valid index when there is one, else by scanning.

    The index is trusted only for uncompressed files whose index ends exactly at the end of
    the file (`index_status`'s cheap check), and for block-gzip files whose member table ends
    at the end of the file and matches the index. The scan checks every length CRC: it walks a
    local uncompressed file header to header (payloads skipped), reads a remote one through
    (payload CRCs unchecked) and inflates a compressed one (`index.iter_frame_arrays`), a chunk at a time.
    """
    kind = resolve_compression(path, compression)
    if use_index and kind is None:
        indexed = _indexed_count(path)
        if indexed is not None:
            return indexed, "index"
    if use_index and kind == "gzip":  # block-gzip: its member table ties the index to the file's size
        indexed = _block_gzip_count(path)
        if indexed is not None:
            return indexed, "index"
    count = 0
    for frames in iter_frame_arrays(path, kind):  # bounded chunks: memory does not grow with the file
        count += len(frames)
        if progress is not None:
            progress(count)
    return count, "scan"


def _indexed_count(path: str) -> Optional[int]:
    """The record count of an uncompressed file from its index when `index_status` calls the
    index valid (well formed, contiguous from offset 0, ending at the end of the file), else
    None. The text is parsed in pieces (`_tfindex.iter_index_starts`): memory bounded by a
    piece, where `load_index` holds 24 B a record."""
    ipath = default_index_path(path)
    if not fs.exists(ipath):
        return None
    count = end = 0
    try:
        for starts, piece_end in iter_index_starts(ipath):
            count, end = count + len(starts), piece_end
    except (IndexMismatchError, OSError, UnicodeDecodeError):  # what `index_status` calls an invalid index
        return None
    return count if end == fs.file_size(path) else None


def _block_gzip_count(path: str) -> Optional[int]:
    """The record count of a block-gzip file from its index, when its member table matches
    both the file (size on disk) and the index (records); else None."""
    ipath = default_index_path(path)
    try:
        index = load_index(ipath)
        table = blockgzip.checked_member_table(path, ipath, index)
    except (IndexMismatchError, OSError, UnicodeDecodeError):
        return None
    return None if table is None else len(index)


# -- description and Arrow schema ---------------------------------------------------------------


@dataclass
class InferredDescription:
    """Descriptions for `TFRecordDataset(..., description=, sequence_description=)`.

    `sequence_description` is None for Example data. Features whose kind cannot be told (never
    set, or mixed) are left out and explained in `notes`.
    """

    description: Dict[str, str]
    sequence_description: Optional[Dict[str, str]]
    notes: List[str]


def _describe(features: Dict[str, FeatureStats], notes: List[str], what: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for name, stats in sorted(features.items()):
        try:
            kind = stats.kind
        except SchemaInferenceError as exc:
            notes.append(f"{what} {exc}; left out")
            continue
        if kind is None:
            notes.append(f"{what} feature {name!r} never has a kind set; left out")
            continue
        out[name] = kind
    return out


def infer_description(stats: DatasetStats) -> InferredDescription:
    """The reader descriptions that decode every feature seen, with its kind."""
    notes: List[str] = []
    description = _describe(stats.features, notes, stats.feature_section)
    sequence = None
    if stats.record_type == SEQUENCE_EXAMPLE:
        sequence = _describe(stats.feature_lists, notes, "feature_lists")
    return InferredDescription(description, sequence, notes)


def arrow_type(stats: FeatureStats, *, strings: bool = False):
    """The Arrow type of one feature (see `infer_arrow_schema`; the rule is `arrow.inferred_type`)."""
    from ..arrow import inferred_type

    return inferred_type(
        stats.kind,
        depth=2 if stats.sequence else 1,
        one_value=stats.values == (1, 1),
        text=bool(strings and stats.bytes_count and not stats.non_utf8),
    )


def infer_arrow_schema(stats: DatasetStats, *, strings: bool = False):
    """The Arrow schema that holds the scanned records, one column per feature.

    - int -> int64, float -> float32, bytes -> binary; with `strings=True`, bytes features
      whose every scanned value is valid UTF-8 become string (binary stays the default: it is
      lossless, and a sample cannot prove that later values are text).
    - a feature with exactly one value in every record that has it -> a scalar column;
      zero, several or a varying number of values -> list<item>.
    - SequenceExample feature lists -> list<list<item>> (steps, then values per step);
      context features follow the Example rules.
    - a feature that never has a kind set -> null (or list<null>).
    - every field is nullable: a record without the feature gives null.
    Field metadata `tfrecord.kind` ("byte", "float", "int", "none") and `tfrecord.section`
    ("features", "context", "feature_lists") say where each column comes from; the schema
    metadata `tfrecord.record_type` says Example or SequenceExample.

    Raises SchemaInferenceError for a feature with mixed kinds, or a context feature and a
    feature list of the same name.
    """
    import pyarrow as pa

    clash = sorted(set(stats.features) & set(stats.feature_lists))
    if clash:
        raise SchemaInferenceError(f"names used both as context feature and feature list: {clash}")
    fields = []
    for section, features in ((stats.feature_section, stats.features), ("feature_lists", stats.feature_lists)):
        for name, feature in sorted(features.items()):
            meta = {"tfrecord.kind": feature.kind or KIND_NONE_NAME, "tfrecord.section": section}
            fields.append(pa.field(name, arrow_type(feature, strings=strings), nullable=True, metadata=meta))
    return pa.schema(fields, metadata={"tfrecord.record_type": stats.record_type})


def infer_schema(
    paths: Union[str, Iterable[str]],
    compression: Optional[str] = "auto",
    *,
    limit: Optional[int] = None,
    strings: bool = False,
):
    """Scan files (or a glob) and return their Arrow schema (`infer_arrow_schema`).

    Raises the first file's read error, since a schema from half a dataset would mislead.
    """
    stats = collect_stats(fs.expand(paths), compression, limit=limit)
    for info in stats.files:
        if info.exception is not None:
            raise info.exception
    return infer_arrow_schema(stats, strings=strings)
