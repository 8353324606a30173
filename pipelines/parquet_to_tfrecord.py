"""Convert Parquet files to TFRecord shards of tf.train.Example (SequenceExample with
--sequence_columns), vectorised over Arrow record batches, with .tfindex files.

Beam's ReadAllFromParquetBatched reads row groups in parallel; each batch becomes payloads in
one call (`tfrecord_beam.arrow.ExampleEncoder`), routed round-robin to the output shards. The
schema is checked before the pipeline starts (unknown or unsupported columns fail at once),
and the job checks that the shards hold as many records as the Parquet files have rows.
See the type mapping table in `tfrecord_beam/arrow.py` (and the README).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.parquetio import ReadAllFromParquetBatched

from tfrecord_beam.arrow import ArrowConversionError, ExampleEncoder
from tfrecord_beam.beam import stages as _stages

from . import _common
from ._common import JobError, Summary

EXAMPLES = """\
  python -m pipelines.parquet_to_tfrecord --input 'data/*.parquet' --output_prefix out/train --num_shards 8
  python -m pipelines.parquet_to_tfrecord --input t.parquet --output_prefix out/t --columns id,text,label \\
      --rename text=sentence --flatten_structs --decimal_as float
  python -m pipelines.parquet_to_tfrecord --input s.parquet --output_prefix out/s --sequence_columns tokens,frames
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _common.make_parser("parquet_to_tfrecord", __doc__.splitlines()[0], EXAMPLES)
    parser.add_argument("--input", action="append", required=True, help="Parquet file, glob or directory (its *.parquet files; repeatable)")
    parser.add_argument("--output_prefix", required=True, help="output path prefix")
    parser.add_argument("--num_shards", type=int, default=1, help="output shards (default 1)")
    parser.add_argument("--columns", default=None, help="comma-separated columns to convert (default all)")
    parser.add_argument("--rename", action="append", default=[], metavar="COLUMN=FEATURE",
                        help="write COLUMN as feature FEATURE (repeatable; 'a.b' names after --flatten_structs)")
    parser.add_argument("--sequence_columns", default="",
                        help="comma-separated list<list<...>> columns to write as SequenceExample feature lists")
    parser.add_argument("--flatten_structs", action="store_true", help="struct columns become 'parent.child' features")
    parser.add_argument("--decimal_as", choices=("float", "bytes"), default=None,
                        help="decimal columns as float32, or as their text (default: error)")
    parser.add_argument("--output_compression", default="none", help="none, gzip or zlib")
    parser.add_argument("--no_index", action="store_true", help="do not write .tfindex files")
    return parser


def _split(text: Optional[str]):
    return [c.strip() for c in text.split(",") if c.strip()] if text else []


def read_schema(path: str) -> pa.Schema:
    """The Arrow schema of a Parquet file (local or remote)."""
    import pyarrow.parquet as pq

    from tfrecord_beam import fs

    try:
        with fs.open_input(path) as handle:
            return pq.read_schema(handle)
    except (OSError, pa.ArrowInvalid) as exc:
        raise JobError(f"{path}: not a readable Parquet file ({exc})") from None


def parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq

    from tfrecord_beam import fs

    with fs.open_input(path) as handle:
        return pq.read_metadata(handle).num_rows


class EncodeFn(beam.DoFn):
    """(file name, Arrow table) -> (shard, Routed) pairs of serialized Examples."""

    def __init__(self, schema: pa.Schema, options: dict, num_shards: int, file_numbers: dict) -> None:
        self.schema, self.options, self.num_shards, self.file_numbers = schema, options, num_shards, file_numbers
        self.encoder = None

    def setup(self):
        self.encoder = ExampleEncoder(self.schema, **self.options)

    def process(self, element):
        filename, table = element
        number = self.file_numbers.get(filename, -1)
        for batch in table.to_batches():
            try:
                payloads = self.encoder.encode_payloads(batch)
            except ArrowConversionError as err:
                raise ArrowConversionError(f"{filename}: {err} (row counted within a batch of {batch.num_rows})") from None
            if not payloads:
                continue
            order = (number, _stages.stable_id(payloads[0].hex()[:64]), len(payloads))
            chunk = _stages.Batch(order, np.zeros(0, np.int64), payloads, 0)
            yield from _stages.route(chunk, _stages.round_robin(chunk, self.num_shards), None)


def run(args: argparse.Namespace, options) -> Summary:
    files = _common.expand_inputs(args.input, dir_glob="*.parquet")
    if args.num_shards < 1:
        raise JobError("--num_shards must be at least 1")
    schema = read_schema(files[0])
    encoder_options = dict(
        columns=_split(args.columns) or None,
        rename=dict(_common.parse_kv(args.rename, "--rename", "COLUMN=FEATURE")),
        sequence_columns=_split(args.sequence_columns),
        flatten_structs=args.flatten_structs,
        decimal_as=args.decimal_as,
    )
    try:
        encoder = ExampleEncoder(schema, **encoder_options)
    except ArrowConversionError as err:
        raise JobError(f"{files[0]}: {err}") from None
    for other in files[1:]:
        other_schema = read_schema(other)
        missing = [c for c in encoder.columns if c not in other_schema.names]
        if missing:
            raise JobError(f"{other}: lacks column(s) {missing} that {files[0]} has")
    rows = sum(parquet_rows(f) for f in files)
    staged = _common.StagedOutput(_common.output_dir_of(args.output_prefix))
    spec = _common.output_spec(args.output_prefix, args.num_shards, args.output_compression, staged, not args.no_index)
    spec.checksum = False  # the row count is the check here
    kind = "SequenceExample" if encoder.is_sequence else "Example"
    _common.progress(f"parquet_to_tfrecord: {len(files)} files, {rows:,} rows -> {args.num_shards} shards of {kind}")
    numbers = {f: i for i, f in enumerate(files)}
    read_columns = list(encoder.columns)

    def build(p):
        routed = (
            p
            | "Files" >> beam.Create(files)
            | "ReadParquet" >> ReadAllFromParquetBatched(columns=read_columns, with_filename=True)
            | "Encode" >> beam.ParDo(EncodeFn(schema, encoder_options, args.num_shards, numbers))
        )
        _stages.write_shards(routed, spec, shuffled=False)

    try:
        _common.run_pipeline(build, options)
        results, _, finals = _common.finish(staged, spec, "parquet_to_tfrecord", False)
        written = sum(r["records"] for r in results)
        if written != rows:
            raise JobError(f"the Parquet files hold {rows} rows but {written} records were written")
    except BaseException:
        staged.abort()
        raise
    extra = {"input_files": len(files), "input_rows": rows, "record_kind": kind, "output_shards": args.num_shards,
             "verified": f"yes: {written} records == {rows} Parquet rows", "outputs": finals}
    return Summary("parquet_to_tfrecord", files=len(results), records=written,
                   bytes=sum(r["file_bytes"] for r in results), extra=extra)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("parquet_to_tfrecord", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
