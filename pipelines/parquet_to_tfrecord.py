"""Convert Parquet files to TFRecord shards of tf.train.Example (SequenceExample with
--sequence_columns), vectorised over Arrow record batches, with .tfindex files.

The plan comes from the Parquet footers alone (row counts per row group, no data read): the
rows are cut into --num_shards equal contiguous ranges (row-group pieces) and each shard's
writer streams its pieces, one record batch at a time, through the encoder
(`tfrecord_beam.arrow.ExampleEncoder`) into its file, so memory stays at about one batch
whatever the input size. Shard k holds rows in input order. The schema is checked before the
pipeline starts (unknown or unsupported columns fail at once), and the job checks that every
shard holds exactly the rows planned for it. Files whose schemas differ: see SCHEMAS below
(the policy is `tfrecord_beam._schema_unify`'s). See the type mapping table in
`tfrecord_beam/arrow.py` (and docs/python.md, "Arrow and Examples").
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence, Tuple

from tfrecord_beam import jobtools

from . import _args

EXAMPLES = """\
  python -m pipelines.parquet_to_tfrecord --input 'data/*.parquet' --output_prefix out/train --num_shards 8
  python -m pipelines.parquet_to_tfrecord --input t.parquet --output_prefix out/t --columns id,text,label \\
      --rename text=sentence --flatten_structs --decimal_as float
  python -m pipelines.parquet_to_tfrecord --input s.parquet --output_prefix out/s --sequence_columns tokens,frames
"""


SCHEMAS = """\
Every file's schema is read from its footer before the job runs and unified: a column some
files lack is kept (absent from their rows); integers of any width, floats of any width,
strings/binaries and lists of these unify; other types (bool, decimal, timestamps, dates)
must be equal. A column that does not unify fails the job first, naming the file, the column
and both types; a file that changed after planning fails at the worker, named."""


def build_parser() -> argparse.ArgumentParser:
    parser = _args.make_parser("parquet_to_tfrecord", __doc__.splitlines()[0] + "\n\n" + SCHEMAS, EXAMPLES)
    _args.add_input(parser, _args.PARQUET_INPUT)
    parser.add_argument("--output_prefix", required=True, help="output path prefix")
    parser.add_argument("--num_shards", type=jobtools.positive_int, default=1, help="output shards (default 1)")
    parser.add_argument(
        "--columns",
        nargs="+",
        action="extend",
        default=None,
        metavar="COLUMN",
        help="columns to convert, as 'a,b' or 'a b' (default all)",
    )
    parser.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="COLUMN=FEATURE",
        help="write COLUMN as feature FEATURE (repeatable; 'a.b' names after --flatten_structs)",
    )
    parser.add_argument(
        "--sequence_columns",
        nargs="+",
        action="extend",
        default=None,
        metavar="COLUMN",
        help="list<list<...>> columns to write as SequenceExample feature lists, as 'a,b' or 'a b'",
    )
    parser.add_argument("--flatten_structs", action="store_true", help="struct columns become 'parent.child' features")
    parser.add_argument(
        "--decimal_as",
        choices=("float", "bytes"),
        default=None,
        help="decimal columns as float32, or as their text (default: error)",
    )
    _args.add_output_compression(parser)
    parser.add_argument("--no_index", action="store_true", help="do not write .tfindex files")
    return parser


# `python -m pipelines.parquet_to_tfrecord --help` answers here, before Beam is imported
_args.parse_then_load(__name__, build_parser)

import pyarrow as pa

from tfrecord_beam.arrow import ArrowConversionError, ExampleEncoder
from tfrecord_beam.beam import jobio
from tfrecord_beam.beam import parquet as _parquet

from . import _common
from ._common import JobError, Summary


def read_footers(files: Sequence[str]) -> List[Tuple[str, pa.Schema, List[int], _parquet.FileIdentity]]:
    """(path, Arrow schema, rows per row group, identity) of every file, from its Parquet footer
    alone (metadata only: cheap on object stores too, read through the jobs' filesystem layer);
    the identity (size, modification time, row groups) goes into the plan, checked by workers."""
    out = []
    for path in files:
        try:
            schema, counts, identity = _parquet.footer_and_identity(path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise JobError(f"{path}: not a readable Parquet file ({exc})") from None
        out.append((path, schema, counts, identity))
    return out


def run(args: argparse.Namespace, options) -> Summary:
    staged = _common.open_output(args, "parquet_to_tfrecord")  # before any work: writable, not another run's
    files = _common.expand_inputs(args.input, dir_glob="*.parquet")
    if args.num_shards < 1:
        raise JobError("--num_shards must be at least 1")
    footers = read_footers(files)
    columns = _args.split_list(args.columns) or None
    encoder_options = dict(
        columns=columns,
        rename=dict(_common.parse_kv(args.rename, "--rename", "COLUMN=FEATURE")),
        sequence_columns=_args.split_list(args.sequence_columns),
        flatten_structs=args.flatten_structs,
        decimal_as=args.decimal_as,
    )
    try:  # every file's schema, unified (or the file, column and types that do not unify)
        unified = _parquet.unify_schemas([(path, schema) for path, schema, _, _ in footers], columns)
        encoder = ExampleEncoder(unified.schema, **encoder_options)
    except ArrowConversionError as err:
        if isinstance(err, _parquet.SchemaDriftError) or len(files) > 1:  # it names the file / the column
            raise JobError(str(err)) from None
        raise JobError(f"{files[0]}: {err}") from None
    schema = unified.schema
    for note in unified.notes:
        _common.progress(f"parquet_to_tfrecord: {note}")
    groups = [(path, counts) for path, _, counts, _ in footers]
    rows = sum(sum(counts) for _, counts in groups)
    plan = _parquet.plan_shards(groups, args.num_shards, {path: ident for path, _, _, ident in footers})
    spec = _common.output_spec(args.num_shards, args.output_compression, staged, not args.no_index)
    kind = "SequenceExample" if encoder.is_sequence else "Example"
    row_groups = sum(len(c) for _, c in groups)
    _common.progress(
        f"parquet_to_tfrecord: {jobtools.plural(len(files), 'file')}, {jobtools.plural(rows, 'row')} in "
        f"{jobtools.plural(row_groups, 'row group')} -> {jobtools.plural(args.num_shards, 'shard')} of {kind}"
    )

    def build(p):
        _parquet.parquet_to_shards(
            p,
            plan,
            spec,
            schema,
            encoder_options,
            dead_letters=staged.dead_letters(),
            skip_corrupt=args.skip_corrupt,
        )

    _common.run_pipeline(build, options)
    results, _ = _common.collect(staged, spec, "parquet_to_tfrecord", False)
    planned = [sum(piece.stop - piece.start for piece in pieces) for pieces in plan]
    done = lambda r: r["records"] + r.get("skipped", 0)  # noqa: E731 - rows written or listed as skipped
    wrong = [(r["shard"], r["records"], planned[r["shard"]]) for r in results if done(r) != planned[r["shard"]]]
    written = sum(r["records"] for r in results)
    if wrong or sum(map(done, results)) != rows:  # checked before anything is committed
        raise JobError(
            f"the Parquet files hold {rows} rows but {written} records were written (shard, written, planned): {wrong}"
        )
    finals, corrupt = _common.commit_shards(staged, spec, results)
    extra = {
        "input_rows": rows,
        "row_groups": row_groups,
        "record_kind": kind,
        "output_shards": args.num_shards,
        "verified": f"yes: {jobtools.plural(written, 'record')} + {jobtools.plural(rows - written, 'row')} skipped "
        f"== {jobtools.plural(rows, 'Parquet row')}, each shard as planned",
        "manifest": staged.final_path(staged.manifest_name),
        **corrupt,
    }
    return Summary(
        "parquet_to_tfrecord",
        input_files=len(files),
        input_bytes=sum(jobio.file_size(f) for f in files),
        files=len(results),
        records=written,
        bytes=sum(r["file_bytes"] for r in results),
        extra=extra,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("parquet_to_tfrecord", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
