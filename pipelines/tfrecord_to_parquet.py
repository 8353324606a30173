"""Convert TFRecord files of tf.train.Example (or SequenceExample) to Parquet.

The Arrow schema is inferred from every record before the pipeline runs (one streaming pass
of the compiled statistics walk that `tfrecord-beam schema` uses: memory is a read chunk),
or from the first --infer_records records only: a feature with exactly one value wherever it
appears becomes a scalar column (int64 / float32 / binary), otherwise a list column;
SequenceExample feature lists become list<list<...>> columns; columns in name order. With
`--features` (name:kind pairs) only those features become columns, in that order (scalar or
list decided the same way), and the others are left out as asked. No feature is dropped
silently: a record holding a feature the schema lacks (one first seen after the
--infer_records sample, or in a file changed after planning) or a feature of another kind or
shape than its column fails the job naming the file, the record's byte offset and the
feature, and says how to include it.

Streaming, in memory bounded by one row group: the input byte ranges are cut into
--num_shards contiguous groups, and each output file's writer decodes its ranges chunk by
chunk and writes a row group whenever --row_group_rows rows or --row_group_bytes payload
bytes are pending (records keep their input order). The job checks that the ranges read
tile every input file and that the Parquet files hold as many rows as records were read.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections import Counter
from typing import Dict, Optional, Sequence

from tfrecord_beam import jobtools

from . import _args

EXAMPLES = """\
  python -m pipelines.tfrecord_to_parquet --input 'out/train-*.tfrecord' --output_prefix pq/train --num_shards 4
  python -m pipelines.tfrecord_to_parquet --input 'seq/*.tfrecord' --output_prefix pq/seq --sequence
  python -m pipelines.tfrecord_to_parquet --input 'x/*.tfrecord' --output_prefix pq/x --features id:int,text:byte,score:float
"""


SCHEMA = """\
The schema is inferred from every record before the job runs (one streaming pass; the columns
`tfrecord-beam schema` prints), or from the first --infer_records N records. --features selects
the columns; their shapes (scalar or list) are still inferred over the records read.
No feature is dropped silently: a record with a feature the schema lacks (or of another kind)
fails the job naming the file, the record's byte offset and the feature, and how to include it."""


def build_parser() -> argparse.ArgumentParser:
    parser = _args.make_parser("tfrecord_to_parquet", __doc__.splitlines()[0] + "\n\n" + SCHEMA, EXAMPLES)
    _args.add_input(parser)
    parser.add_argument("--output_prefix", required=True, help="output path prefix (PREFIX-SSSSS-of-NNNNN.parquet)")
    parser.add_argument("--num_shards", type=jobtools.positive_int, default=1, help="output files (default 1)")
    parser.add_argument(
        "--features",
        default=None,
        help="comma-separated name:kind (kind: int, float, byte): only these features become columns",
    )
    parser.add_argument("--sequence", action="store_true", help="records are SequenceExamples")
    parser.add_argument(
        "--infer_records",
        type=jobtools.positive_int,
        default=None,
        metavar="N",
        help="infer the schema from the first N records only (default: every record, one pass before the job); "
        "a later record that the schema cannot hold fails the job naming it",
    )
    _args.add_input_compression(parser)
    parser.add_argument(
        "--split_bytes",
        type=jobtools.positive_int,
        default=jobtools.DEFAULT_SPLIT_BYTES,
        help="read uncompressed inputs in byte ranges of this size",
    )
    parser.add_argument(
        "--row_group_rows",
        type=jobtools.positive_int,
        default=jobtools.DEFAULT_ROW_GROUP_ROWS,
        help=f"rows per Parquet row group at most (default {jobtools.DEFAULT_ROW_GROUP_ROWS})",
    )
    parser.add_argument(
        "--row_group_bytes",
        type=jobtools.positive_int,
        default=jobtools.DEFAULT_ROW_GROUP_BYTES,
        help="payload bytes per row group at most: bounds the memory a writer holds "
        f"(default {jobtools.DEFAULT_ROW_GROUP_BYTES >> 20} MiB)",
    )
    return parser


# `python -m pipelines.tfrecord_to_parquet --help` answers here, before Beam is imported
_args.parse_then_load(__name__, build_parser)

import pyarrow as pa

from tfrecord_beam import compression as _compression
from tfrecord_beam.beam import jobio
from tfrecord_beam.beam import parquet as _parquet
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.cli.inspection import (
    INVALID,
    KIND_NONE_NAME,
    DatasetStats,
    FeatureStats,
    SchemaInferenceError,
    arrow_type,
    infer_arrow_schema,
    parse_record,
)
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.example import normalize_description
from tfrecord_beam.jobtools import absent_names
from tfrecord_beam.manifest import ShardEntry
from tfrecord_beam.records import ReadSpan
from tfrecord_beam.skipping import SkippingReader

from . import _common
from ._common import JobError, Summary


def parse_features(text: Optional[str]):
    if not text:
        return None
    out = {}
    for item in text.split(","):
        name, sep, kind = item.strip().rpartition(":")
        if not sep or not name:
            raise JobError(f"--features expects name:kind pairs, got {item!r}")
        out[name] = kind
    return out


def scan_stats(
    files: Sequence[str], compression: str, limit: Optional[int], skip_corrupt: bool = False
) -> DatasetStats:
    """Statistics of the files' records (the first `limit` only, when given), read through the
    jobs' filesystem layer chunk by chunk (memory: a chunk) and taken by the compiled walk of
    `tfrecord-beam schema` / `inspect`; corrupt records left out with `skip_corrupt` (the
    pipeline reports them)."""
    stats = DatasetStats()
    read = 0
    for path in files:
        kind = _compression.resolve(path, compression)
        reader = SkippingReader(
            path, ReadSpan(kind), open_file=functools.partial(jobio.open_input, path), skip_corrupt=skip_corrupt
        )
        for chunk in reader.chunks():
            take = len(chunk) if limit is None else min(len(chunk), limit - read)
            stats.add_payloads(chunk.buffer, chunk.payload_offsets[:take], chunk.payload_lengths[:take])
            read += take
            if limit is not None and read >= limit:
                return stats
    return stats


def first_of_each_kind(
    files: Sequence[str], compression: str, name: str, limit: Optional[int], skip_corrupt: bool = False
) -> Dict[str, str]:
    """{kind: "FILE (record at byte offset N)"} of the first record holding feature `name` with
    each kind (as a feature, a context feature or in a feature list), over the records the
    inference read. Only on the way to failing: a second read that stops at the last kind."""
    from tfrecord_beam.example import feature_kind

    found: Dict[str, str] = {}
    read = 0
    for path in files:
        reader = SkippingReader(
            path,
            ReadSpan(_compression.resolve(path, compression)),
            open_file=functools.partial(jobio.open_input, path),
            skip_corrupt=skip_corrupt,
        )
        for chunk in reader.chunks():
            for payload, offset in zip(chunk.payloads(), chunk.record_offsets):
                if limit is not None and read >= limit:
                    return found
                read += 1
                _, features, lists = parse_record(payload)
                feats = [features[name]] if features and name in features else []
                if lists and name in lists:
                    feats += list(lists[name].feature)
                for feature in feats:
                    kind = feature_kind(feature)
                    if kind is not None and kind not in found:
                        found[kind] = f"{path} (record at byte offset {int(offset)})"
    return found


def _mixed_feature(stats: DatasetStats) -> Optional[str]:
    """The first feature (or feature list) whose records hold more than one kind."""
    for f in list(stats.features.values()) + list(stats.feature_lists.values()):
        if len([k for k in f.kinds if k != KIND_NONE_NAME]) > 1:
            return f.name
    return None


def _described_stats(stats: DatasetStats, description, where) -> Dict[str, FeatureStats]:
    """The statistics of each --features name, in its order (empty for one no record has),
    each kind checked against the one the records hold (`where(name)`: where each kind of a
    feature is first found, for the message). A feature whose records set no kind gets the
    one --features names."""
    picked = {}
    for name, kind in description.items():
        found = stats.features.get(name) or stats.feature_lists.get(name)
        seen = None if found is None else found.kind
        if seen is not None and kind is not None and seen != kind:
            raise JobError(
                f"feature {name!r} holds {seen} values (first in {where(name).get(seen, 'the records')}), but "
                f"--features says {kind}"
            )
        if found is not None and seen is None and kind is not None:
            kinds = Counter(found.kinds)
            kinds[kind] = 0
            found = dataclasses.replace(found, kinds=kinds)
        picked[name] = found or FeatureStats(name, kinds=Counter({kind: 0}) if kind else Counter())
    return picked


def infer_schema(
    files: Sequence[str],
    compression: str,
    limit: Optional[int],
    description,
    sequence: bool,
    skip_corrupt: bool = False,
) -> pa.Schema:
    """The schema of every record of the files (of the first `limit` with --infer_records): the
    rule of `inspection.infer_arrow_schema` (a feature with exactly one value wherever it
    appears is a scalar column...), restricted to `description`'s features when given."""
    stats = scan_stats(files, compression, limit, skip_corrupt)
    where = files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more)"
    what = "every record" if limit is None else f"the first {jobtools.plural(stats.records, 'record')}"
    if not stats.records:
        raise JobError("the input files hold no records: cannot infer a schema (pass --features)")
    if stats.record_types[INVALID]:
        raise JobError(f"{where}: {stats.record_types[INVALID]} of {what} are neither Example nor SequenceExample")
    if stats.feature_lists and not sequence:
        raise JobError(
            f"{where}: the records are SequenceExamples (feature lists {sorted(stats.feature_lists)}): pass --sequence"
        )

    def kinds_at(name: str) -> Dict[str, str]:
        return first_of_each_kind(files, compression, name, limit, skip_corrupt)

    try:
        if description is None:
            schema = infer_arrow_schema(stats)
        else:
            description = normalize_description(description)
            absent = absent_names(list(stats.features) + list(stats.feature_lists), description)
            if absent:  # a typo would otherwise be an all-null column, "verified"
                _common.progress("warning: " + jobtools.absent_features_message(where, absent, what))
            picked = _described_stats(stats, description, kinds_at)
            schema = pa.schema([pa.field(name, arrow_type(f)) for name, f in picked.items()])
    except SchemaInferenceError as err:
        mixed = _mixed_feature(stats)
        if mixed is None:
            raise JobError(f"{where}: {err}, over {what}") from None
        firsts = "; ".join(f"{kind} values first in {at}" for kind, at in kinds_at(mixed).items())
        way = "convert the records" + (", or name only the other features in --features" if description is None else "")
        raise JobError(
            f"feature {mixed!r} has mixed kinds over {what}: {firsts}. One Parquet column holds one kind: {way}"
        ) from None
    if not len(schema):
        raise JobError(f"no features found in {what}")
    return pa.schema([field.remove_metadata() for field in schema])


def schema_hint(limit: Optional[int], described: bool = False) -> str:
    """What a worker's error adds, after naming the record that the schema cannot hold
    (`described`: --features named the columns, so the feature at fault is one of them)."""
    if limit is not None and described:
        return (
            f"the named features' shapes and kinds were inferred from the first {limit} records (--infer_records "
            f"{limit}): leave --infer_records out to infer them from every record"
        )
    if limit is not None:
        return (
            f"the schema was inferred from the first {limit} records (--infer_records {limit}): leave "
            "--infer_records out to infer it from every record, or name the feature in --features"
        )
    return (
        "the schema was inferred from every record when the job was planned: the file changed since? Run the job again"
    )


def run(args: argparse.Namespace, options) -> Summary:
    staged = _common.open_output(args, "tfrecord_to_parquet")  # before any work
    files = _common.expand_inputs(args.input)
    if args.num_shards < 1:
        raise JobError("--num_shards must be at least 1")
    description = parse_features(args.features)
    try:
        schema = infer_schema(
            files, args.input_compression, args.infer_records, description, args.sequence, args.skip_corrupt
        )
    except (TypeError, ValueError, TFRecordError) as err:
        raise JobError(str(err)) from None
    if args.row_group_rows < 1 or args.row_group_bytes < 1:
        raise JobError("--row_group_rows and --row_group_bytes must be positive")
    ranges = _stages.plan_ranges(files, args.split_bytes, args.input_compression)
    prefix = staged.name
    names = [_stages.shard_name(prefix, i, args.num_shards, ".parquet") for i in range(args.num_shards)]
    groups = _parquet.group_ranges(ranges, args.num_shards)
    _common.progress(
        f"tfrecord_to_parquet: {jobtools.plural(len(files), 'file')} ({jobtools.plural(len(ranges), 'range')}) -> "
        f"{jobtools.plural(args.num_shards, 'Parquet file')}; schema:\n{schema}"
    )

    def build(p):
        _parquet.tfrecord_to_parquet_files(
            p,
            groups,
            [staged.temp_path(n) for n in names],
            schema,
            args.sequence,
            staged.temp_path("_results"),
            args.row_group_rows,
            args.row_group_bytes,
            dead_letters=staged.dead_letters(),
            skip_corrupt=args.skip_corrupt,
            closed=description is None,  # every feature is a column: one that is not fails, named
            hint=schema_hint(args.infer_records, description is not None),
        )

    _common.run_pipeline(build, options)
    results = [r for r in _common.read_json_results(staged, "_results") if "parquet" in r]
    if sorted(r["parquet"] for r in results) != sorted(names):
        raise JobError(f"the pipeline wrote {len(results)} of {len(names)} Parquet files")
    read = sum(r["records"] for r in results)
    counts = [_parquet.parquet_rows(staged.temp_path(n)) for n in names]
    rows = sum(counts)
    if rows != read:
        raise JobError(f"read {read} records but the Parquet files hold {rows} rows")
    _common.warn_empty_shards("tfrecord_to_parquet", counts)
    sizes = [jobio.file_size(staged.temp_path(n)) for n in names]
    size = sum(sizes)
    entries = [
        ShardEntry(name=n, records=c, file_bytes=b, compression="parquet") for n, c, b in zip(names, counts, sizes)
    ]
    count, dead = staged.collect_dead_letters()
    finals = staged.commit(entries, corrupt_records=count, dead_letters=dead)
    extra = {
        "columns": len(schema),
        "verified": f"yes: {jobtools.plural(rows, 'row')} == {jobtools.plural(read, 'record')}",
        "manifest": staged.final_path(staged.manifest_name),
        **_common.corrupt_summary(count, dead, staged),
    }
    return Summary(
        "tfrecord_to_parquet",
        input_files=len(files),
        input_bytes=sum(jobio.file_size(f) for f in files),
        files=len(finals),
        records=rows,
        bytes=size,
        extra=extra,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("tfrecord_to_parquet", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
