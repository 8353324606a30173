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
from tfrecord_beam.beam import _fs
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.beam._corrupt import CorruptRecord

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
    parser.add_argument("--input", action="append", required=True, help="Parquet glob (repeatable)")
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

    try:
        with _fs.open_input(path) as handle:
            return pq.read_schema(handle)
    except (OSError, pa.ArrowInvalid) as exc:
        raise JobError(f"{path}: not a readable Parquet file ({exc})") from None


def parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq

    with _fs.open_input(path) as handle:
        return pq.read_metadata(handle).num_rows


class EncodeFn(beam.DoFn):
    """(file name, Arrow table) -> (shard, Routed) pairs of serialized Examples."""

    def __init__(self, schema: pa.Schema, options: dict, num_shards: int, file_numbers: dict,
                 skip_corrupt: bool = False) -> None:
        self.schema, self.options, self.num_shards, self.file_numbers = schema, options, num_shards, file_numbers
        self.skip_corrupt = skip_corrupt
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
                if not self.skip_corrupt:
                    raise ArrowConversionError(f"{filename}: {err} (row counted within a batch of {batch.num_rows})") from None
                payloads = []
                for row in range(batch.num_rows):  # find the bad rows; keep the others
                    try:
                        payloads += self.encoder.encode_payloads(batch.slice(row, 1))
                    except ArrowConversionError as row_err:
                        yield beam.pvalue.TaggedOutput(_stages.CORRUPT, CorruptRecord(
                            filename, None, f"row {row} of a batch of {batch.num_rows}: {row_err}; skipped"))
            if not payloads:
                continue
            order = (number, _stages.stable_id(payloads[0].hex()[:64]), len(payloads))
            chunk = _stages.Batch(order, np.zeros(0, np.int64), payloads, 0)
            yield from _stages.route(chunk, _stages.round_robin(chunk, self.num_shards), None)


def run(args: argparse.Namespace, options) -> Summary:
    staged = _common.open_output(args, "parquet_to_tfrecord")  # before any work
    files = _common.expand_inputs(args.input)
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
    spec = _common.output_spec(args.output_prefix, args.num_shards, args.output_compression, staged, not args.no_index)
    kind = "SequenceExample" if encoder.is_sequence else "Example"
    _common.progress(f"parquet_to_tfrecord: {len(files)} files, {rows:,} rows -> {args.num_shards} shards of {kind}")
    numbers = {f: i for i, f in enumerate(files)}
    read_columns = list(encoder.columns)

    dead_letters = _common.dead_letters(args, staged)

    def build(p):
        encoded = (
            p
            | "Files" >> beam.Create(files)
            | "ReadParquet" >> ReadAllFromParquetBatched(columns=read_columns, with_filename=True)
            | "Encode" >> beam.ParDo(EncodeFn(schema, encoder_options, args.num_shards, numbers, dead_letters is not None))
            .with_outputs(_stages.CORRUPT, main="routed")
        )
        if dead_letters is not None:
            dead_letters.write(encoded[_stages.CORRUPT])
        _stages.write_shards(encoded.routed, spec, shuffled=False)

    _common.run_pipeline(build, options)
    results, _ = _common.collect(staged, spec, "parquet_to_tfrecord", False)
    written = sum(r["records"] for r in results)
    skipped = _skipped_rows(staged)
    if written + skipped != rows:
        raise JobError(f"the Parquet files hold {rows} rows but {written} records were written"
                       + (f" and {skipped} rows skipped" if skipped else ""))
    finals, corrupt = _common.commit_shards(staged, spec, results)
    extra = {"input_files": len(files), "input_rows": rows, "record_kind": kind, "output_shards": args.num_shards,
             "verified": f"yes: {written} records == {rows} Parquet rows" + (f" - {skipped} skipped" if skipped else ""),
             "outputs": finals, **corrupt}
    return Summary("parquet_to_tfrecord", files=len(results), records=written,
                   bytes=sum(r["file_bytes"] for r in results), extra=extra)


def _skipped_rows(staged) -> int:
    """Rows --skip_corrupt left out (the dead letters collected so far)."""
    return staged.collect_dead_letters()[0]


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("parquet_to_tfrecord", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
