"""`reshard --shuffle`: the external shuffle of `tfrecord_beam.beam.shuffle` as a job step.

Kept apart from reshard.py's unshuffled path (which plans from headers and copies ranges):
this module owns the shuffle's options, its Beam graph and its summary line (reshard builds
the summary of both paths). Beam is imported by `run` only: reshard's parser, built before
Beam loads, takes the options from here.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional

from tfrecord_beam.jobtools import DEFAULT_BUFFER_BYTES, plural

MIN_BUFFER_BYTES = 1 << 16


def add_arguments(parser: argparse.ArgumentParser, when: str = "with --shuffle: ") -> None:
    """The shuffle's own flags (reshard and mix add them to their parsers; `when` starts the help)."""
    parser.add_argument(
        "--shuffle_buffer_bytes",
        type=int,
        default=DEFAULT_BUFFER_BYTES,
        metavar="BYTES",
        help=f"{when}the most record bytes one step holds in memory (a reader's run, a "
        f"writer's bucket; default {DEFAULT_BUFFER_BYTES >> 20} MiB). Peak memory per "
        "worker is about 2-3x this, whatever the input or shard size",
    )


def check_buffer(buffer_bytes: int) -> None:
    """JobError for a --shuffle_buffer_bytes too small to hold a useful run."""
    from ._common import JobError

    if buffer_bytes < MIN_BUFFER_BYTES:
        raise JobError(f"--shuffle_buffer_bytes must be at least {MIN_BUFFER_BYTES}")


@dataclass(frozen=True)
class Settings:
    """What the shuffle step needs from reshard's flags (built once by reshard from them)."""

    seed: Optional[int]
    buffer_bytes: int  # --shuffle_buffer_bytes
    split_bytes: int
    input_compression: Optional[str]  # a spelling for `compression.resolve`, per file
    output_compression: Optional[str]
    write_index: bool
    verify: bool
    skip_corrupt: bool


def run(settings: Settings, options, staged, files, total_bytes: int, num_shards: int):
    """Shuffle `files` into `num_shards` shards of the staged output; (results, check, finals,
    corrupt) as `_common.finish` gives them, and the shuffle's summary line."""
    from tfrecord_beam.beam import jobio
    from tfrecord_beam.beam import shuffle as _shuffle
    from tfrecord_beam.beam import stages as _stages

    from . import _common

    check_buffer(settings.buffer_bytes)
    ranges = _stages.plan_ranges(files, settings.split_bytes, settings.input_compression)
    plan = _shuffle.plan_buckets(_shuffle.estimated_bytes(ranges), num_shards, settings.buffer_bytes)
    spec = _common.output_spec(num_shards, settings.output_compression, staged, settings.write_index)
    work_dir = staged.temp_path("_shuffle")
    _common.progress(
        f"reshard --shuffle: {plural(len(files), 'file')} ({total_bytes:,} bytes, {plural(len(ranges), 'range')}) "
        f"-> {plural(num_shards, 'shard')} through {plural(plan.buckets, 'bucket')} of "
        f"~{settings.buffer_bytes // 2:,} bytes (seed {settings.seed})"
    )
    verify = settings.verify

    estimate = _shuffle.estimated_bytes(ranges)
    with jobio.reporter("reshard --shuffle", options, _common.progress) as reporter:
        jobio.write_plan(reporter.directory, "bucket", None, estimate, "reading into buckets")

        def build(p):
            jobio.write_plan(reporter.directory, "write", None, estimate, f"writing {plural(num_shards, 'shard')}")
            _shuffle.shuffle_to_shards(
                p,
                ranges,
                spec,
                settings.seed,
                plan,
                work_dir,
                verify,
                dead_letters=staged.dead_letters(),  # --skip_corrupt: listed, not fatal
                skip_corrupt=settings.skip_corrupt,
                progress_dir=reporter.directory,
                what="reshard --shuffle",
            )

        _common.run_pipeline(build, options)
    if jobio.exists(work_dir):
        jobio.delete([work_dir])  # the temporary runs: as large as the input
    results, check, finals, corrupt = _common.finish(staged, spec, "reshard", verify)
    note = f"seed {settings.seed}, {plural(plan.buckets, 'bucket')}, buffer {settings.buffer_bytes:,} bytes"
    return results, check, finals, corrupt, note
