"""What is in a TFRecord file: record type, per-feature statistics, a description, an Arrow schema.

`collect_stats(paths)` reads records once and keeps, per feature, its kind, how many records
have it, how many values it holds (min / mean / max), numeric ranges and a bytes sample. From
those statistics follow the reader description (`infer_description`) and the Arrow schema that
a TFRecord -> Parquet conversion would use (`infer_arrow_schema`); `infer_schema(paths)` does
both steps for callers that just want the schema.

The statistics live in `_stats`, the index check in `_index_status`, the reading of files in
`_scan`; this module is their public face and infers the description and schema.

Each record's type comes from `_proto.parse_record` (re-exported here with EXAMPLE,
SEQUENCE_EXAMPLE and INVALID). A dataset is a SequenceExample dataset when any scanned record
is one (its records without feature lists are then SequenceExamples with only a context), an
Example dataset when all records are Examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Union

from .. import fs
from .._engine._common import KIND_NONE_NAME
from .._proto import EXAMPLE, INVALID, SEQUENCE_EXAMPLE, parse_record
from ._index_status import IndexCheck, IndexStatus, index_status
from ._scan import Progress, collect_stats, count_records, indexed_count, scan_file
from ._stats import DatasetStats, FeatureStats, FileStats, SchemaInferenceError

__all__ = [
    "EXAMPLE",
    "SEQUENCE_EXAMPLE",
    "INVALID",
    "KIND_NONE_NAME",
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
    "indexed_count",
    "InferredDescription",
    "infer_description",
    "arrow_type",
    "infer_arrow_schema",
    "infer_schema",
]


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
