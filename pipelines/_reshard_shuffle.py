"""`reshard --shuffle`: the external shuffle of `tfrecord_beam.beam.shuffle` as a job step.

Kept apart from reshard.py's unshuffled path (which plans from headers and copies ranges):
this module owns the shuffle's options, its Beam graph and its summary line (reshard builds
the summary of both paths). Beam is imported by `run` only: reshard's parser, built before
Beam loads, takes the options from here.
"""

from __future__ import annotations

import argparse

from tfrecord_beam._sizes import DEFAULT_BUFFER_BYTES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The shuffle's own flags (reshard adds them to its parser)."""
    parser.add_argument(
        "--shuffle_buffer_bytes",
        type=int,
        default=DEFAULT_BUFFER_BYTES,
        metavar="BYTES",
        help="with --shuffle: the most record bytes one step holds in memory (a reader's run, a "
        f"writer's bucket; default {DEFAULT_BUFFER_BYTES >> 20} MiB). Peak memory per "
        "worker is about 2-3x this, whatever the input or shard size",
    )


def run(args: argparse.Namespace, options, staged, files, total_bytes: int, num_shards: int):
    """Shuffle `files` into `num_shards` shards under args.output_prefix; (results, check,
    finals, corrupt) as `_common.finish` gives them, and the shuffle's summary line."""
    from tfrecord_beam.beam import _fs, _progress
    from tfrecord_beam.beam import shuffle as _shuffle
    from tfrecord_beam.beam import stages as _stages

    from . import _common
    from ._common import JobError

    if args.balance != "records":
        raise JobError("--balance bytes does not apply to --shuffle (records go to shards by random key)")
    if args.shuffle_buffer_bytes < 1 << 16:
        raise JobError("--shuffle_buffer_bytes must be at least 65536")
    ranges = _stages.plan_ranges(files, args.split_bytes, args.input_compression)
    plan = _shuffle.plan_buckets(_shuffle.estimated_bytes(ranges), num_shards, args.shuffle_buffer_bytes)
    spec = _common.output_spec(args.output_prefix, num_shards, args.output_compression, staged, not args.no_index)
    work_dir = staged.temp_path("_shuffle")
    _common.progress(
        f"reshard --shuffle: {len(files)} files ({total_bytes:,} bytes, {len(ranges)} ranges) -> {num_shards} "
        f"shards through {plan.buckets} buckets of ~{args.shuffle_buffer_bytes // 2:,} bytes (seed {args.seed})"
    )
    verify = not args.no_verify
    dead_letters = _common.dead_letters(args, staged)  # --skip_corrupt: listed, not fatal

    estimate = _shuffle.estimated_bytes(ranges)
    with _progress.reporter("reshard --shuffle", options, _common.progress) as reporter:
        _progress.write_plan(reporter.directory, "bucket", None, estimate, "reading into buckets")

        def build(p):
            _progress.write_plan(reporter.directory, "write", None, estimate, f"writing {num_shards} shards")
            _shuffle.shuffle_to_shards(
                p,
                ranges,
                spec,
                args.seed,
                plan,
                work_dir,
                verify,
                dead_letters=dead_letters,
                progress_dir=reporter.directory,
            )

        _common.run_pipeline(build, options)
    if _fs.exists(work_dir):
        _fs.delete([work_dir])  # the temporary runs: as large as the input
    results, check, finals, corrupt = _common.finish(staged, spec, "reshard", verify)
    note = f"seed {args.seed}, {plan.buckets} buckets, buffer {args.shuffle_buffer_bytes:,} bytes"
    return results, check, finals, corrupt, note
