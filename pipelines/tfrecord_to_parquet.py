"""Convert TFRecord files of tf.train.Example (or SequenceExample) to Parquet.

The Arrow schema comes from `--features` (name:kind pairs; scalar or list is then decided by
the sample) or is inferred from the first `--infer_records` records: a feature with exactly one
value wherever it appears becomes a scalar column (int64 / float32 / binary), otherwise a list
column; SequenceExample feature lists become list<list<...>> columns. Features not in the
schema are dropped; a feature whose kind differs from the schema's fails the job naming the
record.

Streaming, in memory bounded by one row group: the input byte ranges are cut into
--num_shards contiguous groups, and each output file's writer decodes its ranges chunk by
chunk and writes a row group whenever --row_group_rows rows or --row_group_bytes payload
bytes are pending (records keep their input order). The job checks that the ranges read
tile every input file and that the Parquet files hold as many rows as records were read.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Optional, Sequence

from tfrecord_beam import jobtools

from . import _args

EXAMPLES = """\
  python -m pipelines.tfrecord_to_parquet --input 'out/train-*.tfrecord' --output_prefix pq/train --num_shards 4
  python -m pipelines.tfrecord_to_parquet --input 'seq/*.tfrecord' --output_prefix pq/seq --sequence
  python -m pipelines.tfrecord_to_parquet --input 'x/*.tfrecord' --output_prefix pq/x --features id:int,text:byte,score:float
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _args.make_parser("tfrecord_to_parquet", __doc__.splitlines()[0], EXAMPLES)
    _args.add_input(parser)
    parser.add_argument("--output_prefix", required=True, help="output path prefix (PREFIX-SSSSS-of-NNNNN.parquet)")
    parser.add_argument("--num_shards", type=jobtools.positive_int, default=1, help="output files (default 1)")
    parser.add_argument("--features", default=None, help="comma-separated name:kind (kind: int, float, byte)")
    parser.add_argument("--sequence", action="store_true", help="records are SequenceExamples")
    parser.add_argument(
        "--infer_records", type=jobtools.positive_int, default=1000, help="records sampled to infer the schema"
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
from tfrecord_beam.arrow import examples_to_record_batch
from tfrecord_beam.beam import jobio
from tfrecord_beam.beam import parquet as _parquet
from tfrecord_beam.beam import stages as _stages
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


def infer_schema(
    files: Sequence[str], compression: str, limit: int, description, sequence: bool, skip_corrupt: bool = False
) -> pa.Schema:
    """The schema of the first `limit` records of the files (in order; corrupt ones left out
    with `skip_corrupt`, the pipeline reports them)."""

    def sample():
        for path in files:
            kind = _compression.resolve(path, compression)
            reader = SkippingReader(
                path, ReadSpan(kind), open_file=lambda path=path: jobio.open_input(path), skip_corrupt=skip_corrupt
            )
            for chunk in reader.chunks():
                yield from chunk.payloads()

    payloads = list(itertools.islice(sample(), max(limit, 1)))
    if not payloads:
        raise JobError("the input files hold no records: cannot infer a schema (pass --features)")
    if description:  # a typo would otherwise be an all-null column, "verified"
        absent = jobtools.absent_features(payloads, description)
        if absent:
            _common.progress(
                "warning: "
                + jobtools.absent_features_message(
                    files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more)",
                    absent,
                    f"the first {len(payloads)} records",
                )
            )
    if sequence:
        batch = examples_to_record_batch(payloads, None if description is None else description, sequence=True)
    else:
        batch = examples_to_record_batch(payloads, description)
    if batch.num_columns == 0:
        raise JobError("no features found in the sampled records")
    return batch.schema


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
    except (TypeError, ValueError) as err:
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
