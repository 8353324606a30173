"""Build .tfindex files for TFRecord files, in parallel across files, walking record headers.

Each file is walked from its first record by its 12-byte headers: every length CRC is checked
(a flipped length can never shift the index), payloads are skipped (seeked over, for large
records) unless --verify, which checks every payload CRC too. The index is streamed to a
temporary name, so memory does not grow with the file, and renamed when the walk reached the
end of the file and the index is proven to hold exactly one entry per record walked, in order
(`jobs.check_written`: the digest of the entries written against the walk's, and the file's
size against the bytes written; else the job fails, exit 1, naming the index and its data
file): no partial or wrong index is ever left. A corrupt or truncated file gets no index: it
is listed in the summary with the file, record and offset at fault, counted, and the job
exits with status 3 (bad data reported).
"""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
from typing import Any, Dict, Optional, Sequence, Tuple

from tfrecord_beam import compression as _compression

from . import _args

EXAMPLES = """\
  python -m pipelines.build_index --input 'data/*.tfrecord'
  python -m pipelines.build_index --input 'gs://b/train-*' --output_dir gs://b/indexes --verify
  python -m pipelines.build_index --input 'data/*.tfrecord' --skip_existing \
      --direct_running_mode=multi_processing --direct_num_workers=4
"""

NAMESPACE = "tfrecord_beam.build_index"


def build_parser() -> argparse.ArgumentParser:
    parser = _args.make_parser("build_index", __doc__, EXAMPLES, outputs=False)
    _args.add_input(parser)
    parser.add_argument(
        "--output_dir", default=None, help="write indexes here (named after each file) instead of beside the data"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also check every payload CRC (reads all the data; length CRCs are always checked)",
    )
    parser.add_argument("--skip_existing", action="store_true", help="leave files that already have an index alone")
    # --compression: the name before the jobs agreed on --input_compression (still accepted)
    _args.add_input_compression(parser, "--compression")
    return parser


# `python -m pipelines.build_index --help` answers here, before Beam is imported
_args.parse_then_load(__name__, build_parser)

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from tfrecord_beam import blockgzip, fs, jobtools
from tfrecord_beam.beam import CorruptRecord, jobio
from tfrecord_beam.beam import commit as _commit
from tfrecord_beam.beam.commit import corrupt_line
from tfrecord_beam.digest import Digest
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.index import default_index_path
from tfrecord_beam.jobs import (
    VERIFY_ALL,
    VERIFY_LENGTHS,
    ChecksumMismatch,
    IndexStream,
    add_digests,
    check_meant,
    check_written,
    index_digest,
    walk_frames,
)

from . import _common
from ._common import JobError, Summary


def index_target(data_path: str, output_dir: Optional[str]) -> str:
    """Where the index of `data_path` goes: beside it, or in output_dir under its default name."""
    default = default_index_path(data_path)
    if not output_dir:
        return default
    join = posixpath.join if "://" in output_dir else os.path.join
    return join(output_dir, posixpath.basename(default))


def _check_one_index_each(files: Sequence[str], output_dir: Optional[str]) -> None:
    """JobError when two inputs would write one index (same file name, --output_dir): the
    second would silently replace the first's."""
    seen: dict = {}
    for f in files:
        target = index_target(f, output_dir)
        if target in seen:
            raise JobError(
                f"--output_dir: {seen[target]} and {f} would both be indexed as {target} (the same file "
                "name); index them into different directories (nothing written)"
            )
        seen[target] = f


def index_file(
    task: Tuple[int, str],
    verify: bool,
    output_dir: Optional[str],
    compression: Optional[str],
    progress_dir: Optional[str],
) -> None:
    """Walk one file and stream its index to its target, or count the file as corrupt; the
    index is moved into place only once it is proven to hold the walk's entries (`_commit_proven`)."""
    number, path = task
    counter = jobio.ProgressFile(progress_dir, "index", f"{number:06d}")
    level = VERIFY_ALL if verify else VERIFY_LENGTHS
    kind = _compression.resolve(path, compression)
    target = index_target(path, output_dir)
    meant: Digest = (0, 0, 0)  # the index_digest of the entries the walk read
    try:
        with jobio.open_input(path) as raw:
            stream = IndexStream(target, jobio.atomic_output)
            try:
                members = _MemberCheck(raw) if kind == "gzip" else None  # block-gzip: keep its member table
                for block in walk_frames(raw, kind, path, verify=level):
                    stream.add(block.sizes)
                    meant = add_digests(meant, index_digest(block.offsets, block.sizes))
                    if members is not None:
                        members.see(block.offsets)
                    counter.add(len(block), int(block.sizes.sum()))
                table = members.table_for(block_end(block) if meant[0] else 0) if members is not None else None
                (records, _, _), index_bytes = _commit_proven(stream, table, meant, f"{target} (the index of {path})")
            except BaseException:
                stream.abort()  # nothing of this run's index is left (a finished one was moved in)
                raise
    except TFRecordError as err:
        Metrics.counter(NAMESPACE, "corrupt_files").inc()
        Metrics.string_set(NAMESPACE, "corrupt").add(str(err))
        Metrics.string_set(NAMESPACE, "dead_letters").add(
            corrupt_line(CorruptRecord(path, err.offset, f"{err.reason}; the file got no index")).decode("utf-8")
        )
        return
    finally:
        counter.flush()
    Metrics.counter(NAMESPACE, "indexed_files").inc()
    Metrics.counter(NAMESPACE, "records").inc(records)
    Metrics.counter(NAMESPACE, "index_bytes").inc(index_bytes)


def _commit_proven(stream: IndexStream, table, meant: Digest, what: str) -> Tuple[Digest, int]:
    """Finish the index (with its member table) and move it into place only when its stream
    wrote exactly the `meant` entries and its file has the size the stream wrote; otherwise
    ChecksumMismatch naming `what` fails the job, and no index of this run is left (one written
    in place, an object store's, which appeared when finished, is deleted). Returns (the
    written digest, the index's size)."""
    check_meant(what, stream, meant)  # before the finish, which makes an object store's index appear
    commit = stream.finish(table)
    try:
        proof = check_written(what, stream, jobio.file_size, meant, on_disk=commit.temp or commit.final)
    except ChecksumMismatch:
        if commit.temp is None:
            jobio.delete([commit.final])
        raise
    commit.move()
    return proof


def block_end(block) -> int:
    """The uncompressed offset where a walked block's last record ends."""
    return int(block.offsets[-1] + block.sizes[-1]) if len(block) else 0


class _MemberCheck:
    """A block-gzip file's member table (from its members' headers), kept for its index when
    every member starts at a record the walk finds (`blockgzip.matches_index`, streamed)."""

    def __init__(self, raw) -> None:
        here = raw.tell()
        self.table = blockgzip.scan_members(raw)
        raw.seek(here)
        self._starts = None if self.table is None else self.table.uncompressed[:-1]
        self._next = 0  # members whose start was found so far

    def see(self, offsets: np.ndarray) -> None:
        if self._starts is None or self._next >= len(self._starts) or not len(offsets):
            return
        todo = self._starts[self._next :]
        inside = todo[todo <= offsets[-1]]
        if len(inside) and not np.all(np.isin(inside, offsets)):
            self._starts = None  # a member starts inside a record: not ours, keep no table
            return
        self._next += len(inside)

    def table_for(self, end: int) -> Optional[blockgzip.MemberTable]:
        """The table when it matches the walked records (ending at `end`), else None."""
        if self.table is None or self._starts is None or self.table.data_size != end:
            return None
        rest = self._starts[self._next :]
        return self.table if np.all(rest == end) else None


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
    _check_one_index_each(files, args.output_dir)
    targets = sorted({jobio.split(index_target(f, args.output_dir))[0] for f in files})
    for directory in targets:  # before any work: every place an index goes must be writable
        _commit.check_writable(directory)
        for leftover in fs.stale_temp_files(directory):
            _common.progress(f"removing {leftover}: a temporary file of a writer that is no longer running")
            os.remove(leftover)
    skipped = [f for f in files if args.skip_existing and jobio.exists(index_target(f, args.output_dir))]
    todo = [f for f in files if f not in set(skipped)]
    total = sum(jobio.file_size(f) for f in todo)
    _common.progress(
        f"build_index: {jobtools.plural(len(todo), 'file')} to index ({total:,} bytes), {len(skipped)} skipped"
    )
    verify, output_dir, compression = args.verify, args.output_dir, args.input_compression
    tasks = list(enumerate(todo))

    def build(p):
        if not tasks:
            return
        _ = (
            p
            | "Files" >> beam.Create(tasks)  # Create itself reshuffles (spreads) more than one element
            | "Index" >> beam.Map(index_file, verify, output_dir, compression, reporter.directory)
        )

    with jobio.reporter("build_index", options, _common.progress) as reporter:
        jobio.write_plan(reporter.directory, "index", None, total, "indexing")
        result = _common.run_pipeline(build, options)
    corrupt = sorted(_metric(result, "corrupt", "string_sets")) if tasks else []
    extra: Dict[str, Any] = {
        "indexed_files": _metric(result, "indexed_files") if tasks else 0,
        "skipped_files": len(skipped),
        "corrupt_files": len(corrupt),
        **({"corrupt": corrupt} if corrupt else {}),  # what was wrong with each (none: no list)
    }
    for line in corrupt:
        _common.progress(f"corrupt, no index written: {line}")
    if corrupt and args.skip_corrupt:  # listed beside the indexes; not a failure
        where = args.output_dir or jobio.split(files[0])[0]
        extra.update(_write_dead_letters(where, sorted(_metric(result, "dead_letters", "string_sets"))))
    elif corrupt:
        extra["exit_code"] = jobtools.EXIT_BAD_DATA
    return Summary(
        "build_index",
        input_files=len(todo),
        input_bytes=total,
        files=extra["indexed_files"],
        records=_metric(result, "records") if tasks else 0,
        bytes=_metric(result, "index_bytes") if tasks else 0,
        extra=extra,
        output_noun="index file",
    )


def _write_dead_letters(directory: str, lines: list) -> dict:
    """Write --skip_corrupt's dead-letter file for build_index; its summary fields."""
    from tfrecord_beam.manifest import dead_letter_name

    path = jobio.join(directory, dead_letter_name("build_index"))
    jobio.write_bytes(path, "".join(lines).encode("utf-8"))
    return {"corrupt_records": len(lines), "dead_letters": path}


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("build_index", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
