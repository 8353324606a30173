"""Reshard TFRecord files: any number of inputs -> N balanced output shards with .tfindex files.

Without --shuffle the job plans from metadata and streams the bytes: it walks each input's
record headers (length CRCs checked, payloads skipped), cuts the inputs, concatenated in file
order, into N contiguous ranges balanced by records (or bytes), and each shard writer copies
its ranges' framed records straight from the inputs (both CRCs checked) into its shard and
index. Only the plan goes through Beam; memory does not grow with the data. Shard 0 holds the
first records of the first file, and the shards concatenated are the inputs in order.

With --skip_corrupt the survey reads every byte (both CRCs checked) and steps over corrupt
records (a bad CRC or length, a truncated tail, garbage between records: reading goes on at
the next record boundary; a damaged gzip/zlib file loses its rest): they are listed in
OUTPUT_DIR/_CORRUPT.NAME.jsonl, counted in the summary and the manifest, and the plan and
the copies hold only the intact records, still in input order and in bounded memory;
--shuffle reads its byte ranges the same way.

The output holds exactly the input records, and the job proves it: the count, the bytes and
an order-independent checksum of the records surveyed are compared inside the pipeline with
what the shard writers wrote; a mismatch fails the job and nothing is moved into the output
location.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Optional, Sequence

from tfrecord_beam import jobtools

from . import _args, _reshard_shuffle

EXAMPLES = """\
  python -m pipelines.reshard --input 'data/train-*.tfrecord' --output_prefix out/train --num_shards 16
  python -m pipelines.reshard --input 'gs://b/raw/*' --output_prefix gs://b/train \\
      --target_shard_bytes 200000000 --shuffle --seed 7 --output_compression gzip
  python -m pipelines.reshard --input a.tfrecord --input 'b/*.tfrecord.gz' --output_prefix out/all --num_shards 4 \\
      --direct_running_mode=multi_processing --direct_num_workers=2
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _args.make_parser("reshard", __doc__, EXAMPLES)
    _args.add_input(parser)
    parser.add_argument(
        "--output_prefix", required=True, help="output path prefix; shards are PREFIX-SSSSS-of-NNNNN.tfrecord"
    )
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--num_shards", type=jobtools.positive_int, help="number of output shards")
    size.add_argument(
        "--target_shard_bytes",
        type=jobtools.positive_int,
        help="pick the shard count from the input files' total size (compressed size for compressed inputs)",
    )
    parser.add_argument(
        "--balance",
        choices=("records", "bytes"),
        default="records",
        help="cut the inputs into shards of equal record counts (default) or equal bytes",
    )
    parser.add_argument("--shuffle", action="store_true", help="randomly permute records across and within shards")
    parser.add_argument("--seed", type=int, default=0, help="seed for --shuffle (same seed, same output)")
    _reshard_shuffle.add_arguments(parser)
    _args.add_input_compression(parser)
    _args.add_output_compression(parser)
    parser.add_argument("--no_index", action="store_true", help="do not write .tfindex files")
    parser.add_argument("--no_verify", action="store_true", help="skip the count + checksum proof")
    parser.add_argument(
        "--split_bytes",
        type=jobtools.positive_int,
        default=jobtools.DEFAULT_SPLIT_BYTES,
        help="with --shuffle: read uncompressed inputs in byte ranges of this size, in parallel",
    )
    return parser


# `python -m pipelines.reshard --help` answers here, before Beam is imported
_args.parse_then_load(__name__, build_parser)

import apache_beam as beam

from tfrecord_beam.beam import jobio
from tfrecord_beam.beam import planned as _planned
from tfrecord_beam.jobs import plan_contiguous

from . import _common, _shard_count
from ._common import JobError, Summary


def _run_planned(args: argparse.Namespace, options, staged, files, total_bytes: int, num_shards: int) -> Summary:
    """Unshuffled reshard: survey, plan contiguous ranges, stream each shard (see the module doc)."""
    spec = _common.output_spec(num_shards, args.output_compression, staged, not args.no_index)
    _common.progress(
        f"reshard: {jobtools.plural(len(files), 'file')} ({total_bytes:,} bytes) -> "
        f"{jobtools.plural(num_shards, 'shard')}, "
        f"contiguous, balanced by {args.balance}"
    )
    balance, compression = args.balance, args.input_compression
    dead_letters = staged.dead_letters()  # where --skip_corrupt lists what it skipped

    with jobio.reporter("reshard", options, _common.progress) as reporter:
        jobio.write_plan(reporter.directory, "survey", None, total_bytes, "surveying the inputs")

        def build(p):
            surveys = _planned.survey_inputs(
                p,
                files,
                compression,
                progress_dir=reporter.directory,
                dead_letters=dead_letters,
                skip_corrupt=args.skip_corrupt,
            )
            results = _planned.write_planned(
                p, surveys, spec, lambda s: plan_contiguous(s, num_shards, balance), reporter.directory
            )
            if not args.no_verify:
                digests = surveys | "SurveyDigests" >> beam.Map(lambda s: s.digest)
                _planned.verify_planned(p, digests, results, spec, "reshard")

        _common.run_pipeline(build, options)
    results, check, finals, corrupt = _common.finish(staged, spec, "reshard", not args.no_verify)
    return _summary(results, check, staged.final_path(staged.manifest_name), num_shards, files, total_bytes, corrupt)


def _summary(
    results,
    check,
    manifest: str,
    num_shards: int,
    files,
    total_bytes: int,
    corrupt: dict,
    shuffle: Optional[str] = None,
) -> Summary:
    """The job's summary, shuffled (`shuffle`: its seed, buckets and buffer) or not."""
    records = sum(r["records"] for r in results)
    sizes = [r["records"] for r in results]
    extra = {
        "output_shards": num_shards,
        "records_per_shard": f"min {min(sizes):,}, max {max(sizes):,}",
        **({"shuffle": shuffle} if shuffle is not None else {}),
        "verified": "no (--no_verify)"
        if check is None
        else f"yes: {jobtools.plural(check['written'][0], 'record')}, checksum {check['written'][2]:016x} "
        "equal to the input's",
        "manifest": manifest,
        **corrupt,
    }
    return Summary(
        "reshard",
        input_files=len(files),
        input_bytes=total_bytes,
        files=len(results),
        records=records,
        bytes=sum(r["file_bytes"] for r in results),
        extra=extra,
    )


def run(args: argparse.Namespace, options) -> Summary:
    staged = _common.open_output(args, "reshard")  # before any work: writable, not another run's
    files = _common.expand_inputs(args.input)
    total_bytes = sum(jobio.file_size(f) for f in files)
    if args.num_shards is not None and args.num_shards < 1:
        raise JobError("--num_shards must be at least 1")
    if args.target_shard_bytes is not None and args.target_shard_bytes < 1:
        raise JobError("--target_shard_bytes must be positive")
    num_shards = args.num_shards or max(1, math.ceil(total_bytes / args.target_shard_bytes))
    flag = f"--num_shards {num_shards}" if args.num_shards else f"--target_shard_bytes {args.target_shard_bytes}"
    _shard_count.settle_shards(  # before the pipeline: far more shards than records is refused up front
        "reshard", flag, num_shards, files, args.input_compression, jobio.file_size, _common.progress, total_bytes
    )
    if args.shuffle:  # an external shuffle through bounded temporary buckets
        if args.balance != "records":
            raise JobError("--balance bytes does not apply to --shuffle (records go to shards by random key)")
        settings = _reshard_shuffle.Settings(
            seed=args.seed,
            buffer_bytes=args.shuffle_buffer_bytes,
            split_bytes=args.split_bytes,
            input_compression=args.input_compression,
            output_compression=args.output_compression,
            write_index=not args.no_index,
            verify=not args.no_verify,
            skip_corrupt=args.skip_corrupt,
        )
        results, check, finals, corrupt, note = _reshard_shuffle.run(
            settings, options, staged, files, total_bytes, num_shards
        )
        return _summary(
            results,
            check,
            staged.final_path(staged.manifest_name),
            num_shards,
            files,
            total_bytes,
            corrupt,
            shuffle=note,
        )
    return _run_planned(args, options, staged, files, total_bytes, num_shards)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("reshard", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
