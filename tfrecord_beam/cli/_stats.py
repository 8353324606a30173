"""Per-feature statistics of TFRecord data, as inspect and schema take them.

`FeatureStats` holds one feature's (or feature list's), `DatasetStats` a dataset's, and
`FileStats` what a scan of one file met. A batch of records goes one of three ways, each giving
the same statistics: the compiled walk (`_engine.example_stats`, records in the form writers
produce), the pure engine's decoded columns (its twin), or the per-record protobuf parse (any
record the others leave). Reading files into these is `_scan`'s job.
"""

from __future__ import annotations

import math
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from .. import _engine
from .._engine._common import KIND_NONE_NAME, MISSING, PRESENT
from .._proto import EXAMPLE, INVALID, SEQUENCE_EXAMPLE, parse_record
from ..columnar import decode_examples, encoded_lengths
from ..errors import DecodeError, FeatureKindError
from ..example import BYTES, FLOAT, INT, KIND_TO_FIELD, feature_kind
from ._images import image_info
from ._index_status import IndexStatus

_SAMPLE_BYTES = 256  # how much of the first bytes value is kept as a sample
_SUMMARY_KINDS = (KIND_NONE_NAME, BYTES, FLOAT, INT)  # the order of `_engine.example_stats`' kind counts
_LEARN_TRIES = 16  # records whose new features a batch learns before it goes the per-record way


class SchemaInferenceError(ValueError):
    """The statistics do not determine one Arrow type for a feature (mixed kinds, name clash)."""


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


def _first_extremes(values: np.ndarray) -> Tuple[float, float]:
    """(min, max) of non-empty NaN-free `values`, each the first value in order that equals
    it, as the compiled walk and Python's min/max take them (a value replaces the one kept only
    when strictly less or greater): of -0.0 and 0.0, which compare equal, the first one seen
    is kept. numpy's min/max pick either, so the pure engine's batches said max 0.0 where the
    per-record parse and the compiled walk said -0.0 (issue 34 item 11)."""
    return float(values[int(values.argmin())]), float(values[int(values.argmax())])


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
                self.float_range = _minmax(self.float_range, *_first_extremes(finite))
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
        for theirs, sequence in ((other.features, False), (other.feature_lists, True)):
            for name, stats in theirs.items():
                self._feature(name, sequence).merge(stats)

    def _feature(self, name: str, sequence: bool = False) -> FeatureStats:
        """The statistics of feature `name` (of feature list `name` with `sequence`), made empty
        when it is new."""
        section = self.feature_lists if sequence else self.features
        stats = section.get(name)
        if stats is None:
            stats = section[name] = FeatureStats(name, sequence=sequence)
        return stats

    def add_record(self, payload: bytes) -> str:
        """Parse one payload and account its features; returns its record type."""
        rtype, features, lists = parse_record(payload)
        self.record_types[rtype] += 1
        if features is not None:
            for name, feature in features.items():
                stats = self._feature(name)
                stats.add_record(stats.add_feature(feature))
        if lists is not None:
            for name, feature_list in lists.items():
                self._feature(name, sequence=True).add_sequence(feature_list)
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
            self._feature(summary[0]).add_summary(summary, buffer)

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
            self._feature(name).add_column(column)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "record_type": self.record_type,
            "records": self.records,
            "record_types": dict(self.record_types),
            "files": [f.to_dict() for f in self.files],
            self.feature_section: [s.to_dict(self.feature_section) for _, s in sorted(self.features.items())],
            "feature_lists": [s.to_dict() for _, s in sorted(self.feature_lists.items())],
        }
