"""Build .tfindex files for TFRecord files, in parallel across files and inside large files.

Large uncompressed files are scanned as byte ranges in parallel (each range resynchronises to
the next valid record); the pieces of a file are joined and must tile it exactly, otherwise
the file is rescanned from the start. A corrupt or truncated file gets no index: it is listed
in the summary and counted, and the job exits with status 2. Each index is written under a
temporary name and renamed, so no partial index is ever left.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
from typing import Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from tfrecord_beam import fs
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.index import build_index as build_file_index
from tfrecord_beam.index import default_index_path, write_index
from tfrecord_beam.beam import _fs
from tfrecord_beam.beam import commit as _commit
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.beam._corrupt import CorruptRecord
from tfrecord_beam.beam.commit import corrupt_line

from . import _common
from ._common import Summary

EXAMPLES = """\
  python -m pipelines.build_index --input 'data/*.tfrecord'
  python -m pipelines.build_index --input 'gs://b/train-*' --output_dir gs://b/indexes --verify
  python -m pipelines.build_index --input 'data/*.tfrecord' --skip_existing --split_bytes 268435456
"""

NAMESPACE = "tfrecord_beam.build_index"


def build_parser() -> argparse.ArgumentParser:
    parser = _common.make_parser("build_index", __doc__.splitlines()[0], EXAMPLES, outputs=False)
    parser.add_argument("--input", action="append", required=True, help="input glob (repeatable; local or remote)")
    parser.add_argument("--output_dir", default=None,
                        help="write indexes here (named after each file) instead of beside the data")
    parser.add_argument("--verify", action="store_true", help="check every record's CRCs (reads all the data)")
    parser.add_argument("--skip_existing", action="store_true", help="leave files that already have an index alone")
    parser.add_argument("--compression", default="auto", help="auto (from file names), none, gzip, zlib")
    parser.add_argument("--split_bytes", type=int, default=_stages.DEFAULT_SPLIT_BYTES,
                        help="scan uncompressed files in byte ranges of this size, in parallel")
    return parser


def index_target(data_path: str, output_dir: Optional[str]) -> str:
    """Where the index of `data_path` goes: beside it, or in output_dir under its default name."""
    default = default_index_path(data_path)
    if not output_dir:
        return default
    join = posixpath.join if "://" in output_dir else os.path.join
    return join(output_dir, posixpath.basename(default))


def scan_range(rng: _stages.FileRange, verify: bool) -> Iterable[Tuple[str, tuple]]:
    """(path, ("frames", range start, offsets, frame sizes)) or (path, ("corrupt", message))."""
    try:
        reader = _fs.record_reader(rng.path, rng.compression, verify=verify, start_offset=rng.start,
                                   end_offset=rng.end, resync=rng.start > 0)
        offsets: List[np.ndarray] = []
        sizes: List[np.ndarray] = []
        for chunk in reader.chunks():
            offsets.append(chunk.record_offsets.astype(np.int64))
            sizes.append(chunk.payload_lengths.astype(np.int64) + 16)
        first = reader.start_offset
    except TFRecordError as err:
        yield rng.path, ("corrupt", str(err), err.offset, err.reason)
        return
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    yield rng.path, ("frames", rng.start, first, cat(offsets), cat(sizes), rng.compression)


def assemble(path: str, parts: Iterable[tuple], verify: bool, output_dir: Optional[str]) -> None:
    """Join a file's ranges into its index and write it, or count the file as corrupt."""
    parts = list(parts)
    corrupt = [p for p in parts if p[0] == "corrupt"]
    index = None
    if not corrupt:
        frames = sorted((p for p in parts if p[0] == "frames"), key=lambda p: p[1])
        offsets = np.concatenate([p[3] for p in frames])
        sizes = np.concatenate([p[4] for p in frames])
        compression = frames[0][5]
        ends = offsets + sizes
        tiled = (len(offsets) == 0 or offsets[0] == 0) and np.array_equal(offsets[1:], ends[:-1])
        if compression is None:
            tiled = tiled and (int(ends[-1]) if len(ends) else 0) == _fs.file_size(path)
        if tiled:
            index = np.stack([offsets, sizes], axis=1).reshape(-1, 2)
        else:  # a gap or overlap between ranges: trust only a sequential scan
            Metrics.counter(NAMESPACE, "rescanned_files").inc()
            try:
                with _fs.open_input(path) as handle:
                    index = build_file_index(handle, compression, verify)
            except TFRecordError as err:
                corrupt.append(("corrupt", str(err), err.offset, err.reason))
    if corrupt:
        Metrics.counter(NAMESPACE, "corrupt_files").inc()
        Metrics.string_set(NAMESPACE, "corrupt").add(corrupt[0][1])
        _, _, offset, reason = corrupt[0]
        Metrics.string_set(NAMESPACE, "dead_letters").add(corrupt_line(CorruptRecord(
            path, offset, f"{reason}; the file got no index")).decode("utf-8"))
        return
    write_index(index, index_target(path, output_dir), atomic_output=_fs.atomic_output)
    Metrics.counter(NAMESPACE, "indexed_files").inc()
    Metrics.counter(NAMESPACE, "records").inc(len(index))
    Metrics.counter(NAMESPACE, "bytes").inc(_fs.file_size(path))


def _metric(result, name: str, kind: str = "counters"):
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))[kind]
    if not found:
        return 0 if kind == "counters" else set()
    values = [m.committed if m.committed is not None else m.attempted for m in found]
    if kind == "counters":
        return sum(values)
    out = set()
    for v in values:
        out |= set(v or ())
    return out


def run(args: argparse.Namespace, options) -> Summary:
    files = _common.expand_inputs(args.input)
    if args.output_dir:
        args.output_dir = _common.beam_path(args.output_dir)
    targets = sorted({_fs.split(index_target(f, args.output_dir))[0] for f in files})
    for directory in targets:  # before any work: every place an index goes must be writable
        _commit.check_writable(directory)
        for leftover in fs.stale_temp_files(directory):
            _common.progress(f"removing {leftover}: a temporary file of a writer that is no longer running")
            os.remove(leftover)
    skipped = [f for f in files if args.skip_existing and _fs.exists(index_target(f, args.output_dir))]
    todo = [f for f in files if f not in set(skipped)]
    ranges = _stages.plan_ranges(todo, args.split_bytes, args.compression)
    _common.progress(f"build_index: {len(todo)} files to index ({len(ranges)} ranges), {len(skipped)} skipped")
    verify, output_dir = args.verify, args.output_dir

    def build(p):
        if not ranges:
            return
        _ = (
            p
            | "Plan" >> beam.Create(ranges)
            | "Spread" >> beam.Reshuffle()
            | "Scan" >> beam.FlatMap(scan_range, verify)
            | "GroupByFile" >> beam.GroupByKey()
            | "Assemble" >> beam.MapTuple(lambda path, parts: assemble(path, parts, verify, output_dir))
        )

    result = _common.run_pipeline(build, options)
    corrupt = sorted(_metric(result, "corrupt", "string_sets")) if ranges else []
    extra = {
        "indexed_files": _metric(result, "indexed_files") if ranges else 0,
        "skipped_files": len(skipped),
        "corrupt_files": len(corrupt),
        "rescanned_files": _metric(result, "rescanned_files") if ranges else 0,
        "corrupt": corrupt,
    }
    for line in corrupt:
        _common.progress(f"corrupt, no index written: {line}")
    if corrupt and args.skip_corrupt:  # listed beside the indexes; not a failure
        where = args.output_dir or _fs.split(files[0])[0]
        extra.update(_write_dead_letters(where, sorted(_metric(result, "dead_letters", "string_sets"))))
    elif corrupt:
        extra["exit_code"] = 2
    return Summary(
        "build_index", files=extra["indexed_files"],
        records=_metric(result, "records") if ranges else 0,
        bytes=_metric(result, "bytes") if ranges else 0, extra=extra,
    )


def _write_dead_letters(directory: str, lines: List[str]) -> dict:
    """Write --skip_corrupt's dead-letter file for build_index; its summary fields."""
    from tfrecord_beam.manifest import dead_letter_name

    path = _fs.join(directory, dead_letter_name("build_index"))
    _fs.write_bytes(path, "".join(lines).encode("utf-8"))
    return {"corrupt_records": len(lines), "dead_letters": path}


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("build_index", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
