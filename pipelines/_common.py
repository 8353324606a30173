"""What every pipeline CLI shares: argument parsing, Beam options, staged output, the summary.

Each job is `python -m pipelines.NAME [job flags] [Beam flags]`: arguments the job does not
know go to Beam's PipelineOptions (`--runner` defaults to DirectRunner). Output is written
under a temporary directory inside the output location and moved into place only after the
pipeline succeeded and its checks passed, so a failed run leaves nothing partial there.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import posixpath
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tfrecord_beam import fs
from tfrecord_beam._engine_info import describe as describe_engine
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.records import resolve_compression
from tfrecord_beam.beam import stages as _stages

TEMP_PREFIX = ".tfrecord_beam-tmp-"


class JobError(Exception):
    """A failure the job reports in one clear line (bad input, failed check, unwritable output)."""


def make_parser(prog: str, description: str, examples: str) -> argparse.ArgumentParser:
    """A parser whose --help ends with usage examples and a note on Beam flags."""
    epilog = (
        "examples:\n" + examples.rstrip() + "\n\n"
        "Any other --flag goes to Beam's PipelineOptions (default --runner=DirectRunner), e.g.\n"
        "  --direct_running_mode=multi_processing --direct_num_workers=4\n"
        "  --runner=DataflowRunner --project P --region R --temp_location gs://B/tmp --setup_file ./setup.py\n"
        "  --runner=FlinkRunner --flink_master=HOST:8081\n"
    )
    parser = argparse.ArgumentParser(
        prog=f"python -m pipelines.{prog}", description=description, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=describe_engine(),
                        help="print the version and the engine in use, then exit")
    return parser


def pipeline_options(beam_args: Sequence[str]):
    """Beam PipelineOptions from the leftover arguments; DirectRunner unless --runner is given.

    An argument neither the job nor Beam knows is an error (JobError), not silently dropped.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(beam_args))
    unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) - set(options.get_all_options()))
    if unknown:  # a typo would otherwise be dropped with only a log line
        raise JobError("unknown argument(s), neither this job's nor Beam's: " + ", ".join("--" + u for u in unknown))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = "DirectRunner"
    return options


def progress(message: str) -> None:
    """One progress line on stderr (stdout carries the summary)."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


@dataclass
class Summary:
    """What a job did: printed at the end as `key: value` lines and one JSON line."""

    job: str
    files: int = 0
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    extra: Dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        out = {"job": self.job, "files": self.files, "records": self.records, "bytes": self.bytes,
               "seconds": round(self.seconds, 3)}
        out.update(self.extra)
        return out

    def print(self, stream=None) -> None:
        stream = stream or sys.stdout
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        stream.write(f"== {self.job} summary ==\n")
        stream.write(f"files:   {self.files}\nrecords: {self.records}\nbytes:   {self.bytes}\n")
        stream.write(f"seconds: {self.seconds:.2f} ({rate:,.0f} records/s)\n")
        for key, value in self.extra.items():
            if not isinstance(value, (list, dict)):
                stream.write(f"{key}: {value}\n")
        stream.write("json: " + json.dumps(self.as_dict(), sort_keys=True, default=str) + "\n")
        stream.flush()


def expand_inputs(patterns: Sequence[str], what: str = "--input", dir_glob: str = "*.tfrecord*") -> List[str]:
    """Sorted files matching the globs, or in the directories (their `dir_glob` files), with
    file:// URIs as plain paths; our own sidecars (`.tfindex`, dot-files, `_MANIFEST.json`-style
    `_` files) are left out. JobError when a pattern matches nothing."""
    files: List[str] = []
    for pattern in patterns:
        if fs.is_dir(pattern):
            pattern = pattern.rstrip("/") + "/" + dir_glob
        found = [beam_path(f) for f in fs.expand(pattern) if fs.exists(f) and not _is_sidecar(f)]
        if not found:
            raise JobError(f"{what} {pattern!r} matches no files")
        files.extend(found)
    seen = set()
    return [f for f in files if not (f in seen or seen.add(f))]


def _is_sidecar(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.endswith(".tfindex") or name.startswith((".", "_"))


def beam_path(path: str) -> str:
    """A path Beam's FileSystems accept: `file://` URIs become plain local paths."""
    return path[len("file://"):] if path.startswith("file://") else path


def _join(directory: str, name: str) -> str:
    return posixpath.join(directory, name) if "://" in directory else os.path.join(directory, name)


class StagedOutput:
    """A temporary directory inside the output location; `commit` moves files into place.

    Works for local paths and any filesystem Beam knows (gs://, s3://, ...).
    """

    def __init__(self, output_dir: str) -> None:
        from apache_beam.io.filesystems import FileSystems

        self._fs = FileSystems
        self.output_dir = beam_path(output_dir or ".")
        self.temp_dir = _join(self.output_dir, TEMP_PREFIX + uuid.uuid4().hex[:12])
        try:
            if not FileSystems.exists(self.output_dir):
                FileSystems.mkdirs(self.output_dir)
            FileSystems.mkdirs(self.temp_dir)
            probe = _join(self.temp_dir, ".probe")
            FileSystems.create(probe).close()
            FileSystems.delete([probe])
        except Exception as exc:  # noqa: BLE001 - any filesystem error means "cannot write there"
            self._quiet_delete()
            raise JobError(f"cannot write to output location {self.output_dir!r}: {exc}") from None

    def temp_path(self, name: str) -> str:
        return _join(self.temp_dir, name)

    def final_path(self, name: str) -> str:
        return _join(self.output_dir, name)

    def commit(self, names: Sequence[str]) -> List[str]:
        """Move temp_dir/NAME to output_dir/NAME for each name (replacing old files); drop temp_dir."""
        finals = [self.final_path(n) for n in names]
        existing = [f for f in finals if self._fs.exists(f)]
        if existing:
            self._fs.delete(existing)
        if names:
            self._fs.rename([self.temp_path(n) for n in names], finals)
        self._quiet_delete()
        return finals

    def abort(self) -> None:
        self._quiet_delete()

    def _quiet_delete(self) -> None:
        try:
            if self._fs.exists(self.temp_dir):
                self._fs.delete([self.temp_dir])
        except Exception:  # noqa: BLE001
            logging.warning("could not remove %s", self.temp_dir)


def read_json_results(staged: StagedOutput, subdir: str) -> List[Dict[str, Any]]:
    """Every JSON result file a pipeline wrote under temp_dir/subdir."""
    from apache_beam.io.filesystems import FileSystems

    pattern = staged.temp_path(subdir) + "/*.json"
    out = []
    for match in FileSystems.match([pattern])[0].metadata_list:
        with FileSystems.open(match.path) as handle:
            out.append(json.loads(handle.read().decode("utf-8")))
    return out


def write_json(path: str, value: Any) -> None:
    """Write a small JSON file atomically (local or remote)."""
    with fs.atomic_output(path) as (handle, commit):
        handle.write(json.dumps(value, sort_keys=True, indent=1, default=str).encode("utf-8"))
        commit()


def _error_line(exc: BaseException) -> str:
    """The most useful line of an error, digging the cause out of Beam's wrappers."""
    seen = exc
    while seen is not None:
        if isinstance(seen, (TFRecordError, JobError)):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    text = str(exc).strip()
    for marker in ("JobError: ", "ArrowConversionError: ", "CorruptRecordError: ", "TruncatedRecordError: ",
                   "DecodeError: ", "IndexMismatchError: ", "ChecksumMismatch: "):
        if marker in text:
            tail = text.rsplit(marker, 1)[1]
            return tail.split(" [while running")[0].strip().splitlines()[0]
    return text.splitlines()[-1] if text else type(exc).__name__


def run_job(
    name: str,
    parser: argparse.ArgumentParser,
    job: Callable[[argparse.Namespace, Any], Summary],
    argv: Optional[Sequence[str]] = None,
) -> int:
    """Parse, run `job(args, options)`, print its summary; 0 on success, 1 on failure (one clear line)."""
    args, beam_args = parser.parse_known_args(argv)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    start = time.time()
    try:
        options = pipeline_options(beam_args)
        summary = job(args, options)
    except KeyboardInterrupt:
        sys.stderr.write(f"{name}: interrupted\n")
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and exit 1
        if os.environ.get("TFRECORD_BEAM_DEBUG"):
            raise
        sys.stderr.write(f"{name}: error: {_error_line(exc)}\n")
        return 1
    summary.seconds = time.time() - start
    summary.print()
    return int(summary.extra.get("exit_code", 0))


def run_pipeline(build: Callable[[Any], None], options) -> Any:
    """Build a pipeline with `build(p)` and run it to completion; returns the result."""
    import apache_beam as beam

    p = beam.Pipeline(options=options)
    build(p)
    result = p.run()
    result.wait_until_finish()
    return result


def parse_kv(items: Sequence[str], flag: str, form: str = "NAME=VALUE", sep: str = "=") -> List[Tuple[str, str]]:
    """`a=b` pairs of a repeatable flag; JobError naming the flag when one is malformed."""
    out = []
    for item in items or ():
        if sep not in item:
            raise JobError(f"{flag} expects {form}, got {item!r}")
        key, value = item.rsplit(sep, 1)
        if not key or not value:
            raise JobError(f"{flag} expects {form}, got {item!r}")
        out.append((key, value))
    return out


# ---------------------------------------------------------------------------------------------
# Shard outputs shared by reshard, mix and parquet_to_tfrecord


def output_spec(output_prefix: str, num_shards: int, compression: Optional[str], staged, write_index: bool):
    """ShardSpec for PREFIX-SSSSS-of-NNNNN.tfrecord[.gz|.zlib] inside the staging dir."""
    kind = resolve_compression(None, compression)
    suffix = ".tfrecord" + {None: "", "gzip": ".gz", "zlib": ".zlib"}[kind]
    return _stages.ShardSpec(staged.temp_dir, os.path.basename(output_prefix), num_shards, suffix, kind, write_index)


def output_dir_of(prefix: str) -> str:
    """The directory part of an output prefix ('.' for a bare name)."""
    head = prefix.rsplit("/", 1)[0] if "/" in prefix else "."
    return head or "/"


def finish(staged, spec: _stages.ShardSpec, job: str, verify: bool) -> tuple:
    """Read the writers' results, add empty shards, move everything into place; (results, check, paths)."""
    results = [r for r in read_json_results(staged, "_results") if "shard" in r]
    check = [r for r in read_json_results(staged, "_results") if "expected" in r]
    results += _stages.write_empty_shards(spec, [r["shard"] for r in results])
    results.sort(key=lambda r: r["shard"])
    if verify and not check:
        raise JobError(f"{job}: the pipeline finished without its checksum proof")
    names = [n for r in results for n in spec.names(r["shard"])]
    finals = staged.commit(names)
    return results, (check[0] if check else None), finals
