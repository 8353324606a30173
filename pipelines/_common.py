"""What every pipeline CLI shares: argument parsing, Beam options, the output, the summary.

Each job is `python -m pipelines.NAME [job flags] [Beam flags]`: arguments the job does not
know go to Beam's PipelineOptions (`--runner` defaults to the in-process FnApiRunner, see
`_runner`; the summary says which runner ran); one neither knows, or a stray word, is a
usage error (`_args`). Output is staged
under the output location and committed with a manifest written last, by
`tfrecord_beam.beam.commit.Output` (`open_output`); a failed run leaves nothing partial
there. Every failure is one line on stderr (`--verbose` for Beam's logs and the traceback),
exit 1; a usage error exit 2, bad data reported exit 3 (`tfrecord_beam.jobtools`); SIGINT is
exit 130 with one line. A Dataflow dry run (`_dataflow`) builds the job, submits and commits
nothing, and says so (exit 0).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tfrecord_beam import compression as _compression
from tfrecord_beam import fs, jobtools
from tfrecord_beam import manifest as _manifest
from tfrecord_beam.beam import commit as _commit
from tfrecord_beam.beam import jobio
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.beam.commit import OutputError
from tfrecord_beam.errors import TFRecordError
from tfrecord_beam.manifest import ShardEntry

from . import _args, _dataflow, _runner
from ._summary import Summary, process_start

TEMP_PREFIX = _commit.TEMP_PREFIX


class JobError(OutputError):
    """A failure the job reports in one clear line (bad input, failed check, unwritable output)."""


# the parser, built before Beam is imported (see _args); re-exported for the jobs
OUTPUTS_HELP, TFRECORD_INPUT, PARQUET_INPUT = _args.OUTPUTS_HELP, _args.TFRECORD_INPUT, _args.PARQUET_INPUT
make_parser, add_input, split_list = _args.make_parser, _args.add_input, _args.split_list


def pipeline_options(beam_args: Sequence[str]):
    """Beam PipelineOptions from the leftover arguments; FnApiRunner unless --runner is given.

    An argument neither the job nor Beam knows is an error (JobError), not silently dropped.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(list(beam_args))
    unknown = sorted(set(options.get_all_options(retain_unknown_options=True)) - set(options.get_all_options()))
    if unknown:  # a typo would otherwise be dropped with only a log line
        raise JobError("unknown argument(s), neither this job's nor Beam's: " + ", ".join("--" + u for u in unknown))
    _runner.set_default(options)
    _runner.spare_loopback_from_proxies()
    unreachable = _runner.unreachable_job_endpoint(options)  # before anything is staged
    if unreachable:
        raise JobError(unreachable)
    jobio.set_options(options)  # --s3_endpoint_url etc. apply to the checks before the pipeline too
    return options


def progress(message: str) -> None:
    """One progress line on stderr (stdout carries the summary)."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def expand_inputs(patterns: Sequence[str], what: str = "--input", dir_glob: str = "*.tfrecord*") -> List[str]:
    """Sorted files matching the globs, or in the directories (their `dir_glob` files), with
    file:// URIs as plain paths; our own sidecars (`.tfindex`, dot-files, `_MANIFEST...`-style
    `_` files) are left out. JobError when a pattern matches nothing."""
    files: List[str] = []
    try:  # a half-committed output reads as neither the old nor the new one
        jobio.check_no_commit_pending(patterns)
    except _manifest.CommitInProgressError as exc:
        raise JobError(f"{what} {exc}") from None
    for pattern in patterns:
        try:
            fs.refuse_special(pattern)  # stdin, a pipe, a FIFO: refused without being opened
        except fs.SpecialFileError as exc:
            raise JobError(f"{what} {exc}") from None
        shards = _output_shards(pattern, parquet=dir_glob.endswith(".parquet"), what=what)
        if shards is not None:  # an output's prefix, or a directory holding one output: that output
            files.extend(shards)
            continue
        if jobio.is_dir(pattern):
            pattern = jobio.join(_glob_escape(pattern.rstrip("/")), dir_glob)
        elif not fs.is_remote(pattern) and not fs.is_pattern(pattern) and fs.is_glob(pattern):
            pattern = _glob_escape(pattern)  # a local file named with [ ] * ?: itself, literally
        if not fs.is_remote(pattern):  # Beam's local match drops a dangling symlink without a word
            try:
                fs.refuse_broken_links(glob.glob(pattern))
            except FileNotFoundError as exc:
                raise JobError(f"{what} {exc}") from None
        # FIFOs and devices a glob or directory matched are left out, by stat (never opened)
        found = [
            beam_path(f)
            for f in jobio.expand(pattern)
            if jobio.exists(f) and not fs.is_sidecar(f) and not fs.is_special(beam_path(f))
        ]
        if not found:
            raise JobError(f"{what} {pattern!r} matches no files")
        files.extend(found)
    return fs.unique_files(files)  # each file once (however spelled), in first-seen order


def _output_shards(directory: str, parquet: bool, what: str) -> Optional[List[str]]:
    """The shards of the output named by its prefix, or of the one committed output a directory
    holds (the rule of `manifest.directory_output`, read through Beam's filesystems); None when
    `directory` names no output."""
    from tfrecord_beam import manifest as _manifest

    try:
        found: Optional[str] = None
        if jobio.is_dir(directory):
            found = _manifest.directory_output(
                directory, parquet, names=jobio.list_names(directory), read=jobio.read_bytes
            )
        elif not fs.is_pattern(directory) and not jobio.exists(directory):
            prefix_manifest = _manifest.manifest_path(directory)
            found = prefix_manifest if jobio.exists(prefix_manifest) else None
        if found is None:
            return None
        manifest = _manifest.Manifest.from_json(jobio.read_bytes(found).decode("utf-8"), found)
    except _manifest.ManifestError as exc:
        raise JobError(f"{what} {exc}") from None
    paths = _manifest.shard_paths(manifest, found)
    return [beam_path(p) for p, e in zip(paths, manifest.shards) if (e.compression == "parquet") == parquet]


def _glob_escape(path: str) -> str:
    """A local path as a glob matching only itself (remote ones are kept as they are)."""
    import glob

    return path if fs.is_remote(path) else glob.escape(path)


def beam_path(path: str) -> str:
    """A path Beam's FileSystems accept: `file://` URIs become plain local paths."""
    return path[len("file://") :] if path.startswith("file://") else path


_open_outputs: List[_commit.Output] = []  # aborted by run_job unless committed


def open_output(args: argparse.Namespace, job: str, prefix: Optional[str] = None) -> _commit.Output:
    """The job's output under --output_prefix: checked (writable, not another run's output
    unless --overwrite, dead runs' staging cleaned) before any work; staged, then committed."""
    arguments = {k: v for k, v in sorted(vars(args).items()) if k != "verbose"}
    output = _commit.Output(
        prefix or args.output_prefix, job, arguments, overwrite=getattr(args, "overwrite", False), say=progress
    )
    _open_outputs.append(output)
    return output


def corrupt_summary(count: int, name: Optional[str], output: _commit.Output) -> Dict[str, Any]:
    """Summary fields for the corrupt records a job skipped."""
    out: Dict[str, Any] = {"corrupt_records": count}
    if name:
        out["dead_letters"] = output.final_path(name)
    return out


def read_json_results(staged: _commit.Output, subdir: str) -> List[Dict[str, Any]]:
    """Every JSON result file a pipeline wrote under temp_dir/subdir (`stages.write_result`)."""
    return _stages.read_results(staged.temp_path(subdir))


def write_json(path: str, value: Any) -> None:
    """Write a small JSON file atomically (local or remote)."""
    jobio.write_bytes(path, json.dumps(value, sort_keys=True, indent=1, default=str).encode("utf-8"))


def _error_line(exc: BaseException) -> str:
    """The most useful line of an error, digging the cause out of Beam's wrappers."""
    seen: Optional[BaseException] = exc
    while seen is not None:
        if isinstance(seen, (TFRecordError, OutputError)):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    text = str(exc).strip()
    for marker in (
        "JobError: ",
        "OutputError: ",
        "ArrowConversionError: ",
        "CorruptRecordError: ",
        "TruncatedRecordError: ",
        "DecodeError: ",
        "IndexMismatchError: ",
        "ChecksumMismatch: ",
    ):
        if marker in text:
            tail = text.rsplit(marker, 1)[1]
            return tail.split(" [while running")[0].strip().splitlines()[0]
    rpc = _runner.rpc_error_line(exc)
    if rpc:
        return rpc
    return text.splitlines()[-1] if text else type(exc).__name__


def run_job(
    name: str,
    parser: argparse.ArgumentParser,
    job: Callable[[argparse.Namespace, Any], Summary],
    argv: Optional[Sequence[str]] = None,
) -> int:
    """Parse, run `job(args, options)`, print its summary; 0 on success, 1 on failure (one clear
    line on stderr), 2 on a usage error, 130 on SIGINT (one line); the job's summary may ask for
    3 (bad data reported). Outputs the job opened and did not commit are aborted (their staging
    removed) on every way out."""
    args, beam_args = parser.parse_known_args(argv)
    try:
        _args.check_leftovers(parser.prog, parser, beam_args)
    except jobtools.UsageError as exc:
        sys.stderr.write(jobtools.usage_error(parser.prog, str(exc)) + "\n")
        return jobtools.EXIT_USAGE
    verbose = bool(getattr(args, "verbose", False)) or bool(os.environ.get("TFRECORD_BEAM_DEBUG"))
    _verbose[0] = verbose
    logging.getLogger("apache_beam").setLevel(logging.INFO if verbose else logging.CRITICAL)
    # as a command (argv None): from the process's start, imports included; in-process: this call
    start = process_start() if argv is None else time.time()
    interrupted: List[int] = []
    previous = _on_sigint(interrupted)
    import threading

    hook = threading.excepthook
    if not verbose:  # runner threads dying after a failure or Ctrl-C: the one line below says it
        threading.excepthook = lambda args: None
    _ran.clear()
    timeout = getattr(args, "timeout", None)
    if timeout is not None:  # the launcher's remote calls (listing, sizes, index reads) are bounded by it
        jobtools.set_remote_timeout(timeout)
    try:
        options = pipeline_options(beam_args)
        problem = _dataflow.launch_problem(args, options)  # before any work: what only workers would find
        if problem:
            raise JobError(problem)
        summary = job(args, options)
        for key, value in _runner.describe(options, _ran[-1] if _ran else None).items():
            summary.extra.setdefault(key, value)
    except _dataflow.DryRun as dry:
        unwritten = {"output_prefix": ", ".join(o.prefix for o in _open_outputs)} if _open_outputs else {}
        _abort_outputs()  # the staging the output's checks made: a dry run leaves nothing
        summary = Summary(name, dry_run=True, extra={**dry.facts, **unwritten, **_runner.describe(options, None)})
    except BaseException as exc:  # noqa: BLE001 - every failure becomes one line
        _abort_outputs()
        if isinstance(exc, SystemExit):
            raise
        if interrupted or _is_interrupt(exc):
            done = "after the output was committed" if _committed_note(exc) else "; the output was not committed"
            how = "terminated (SIGTERM)" if signal.SIGTERM in interrupted else "interrupted"
            sys.stderr.write(f"{name}: {how} {done}\n".replace(" ;", ";"))
            code = EXIT_TERMINATED if signal.SIGTERM in interrupted else jobtools.EXIT_INTERRUPTED
            if argv is None and interrupted:
                # a command stopped by a signal: its outputs are aborted; leave now. A normal exit
                # would wait for the in-process runner's threads, which go on writing (into the
                # staging just removed), and at times ended on a stray KeyboardInterrupt (exit -2)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            return code
        if isinstance(exc, jobtools.UsageError):  # arguments the inputs refute (found before the pipeline)
            sys.stderr.write(jobtools.usage_error(parser.prog, str(exc)) + "\n")
            return jobtools.EXIT_USAGE
        if verbose:
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__)
        sys.stderr.write(f"{name}: error: {_error_line(exc)}\n")
        return jobtools.EXIT_FAILURE
    finally:
        _restore_sigint(previous)
        threading.excepthook = hook
        if timeout is not None:
            jobtools.set_remote_timeout(None)
        _open_outputs.clear()
    summary.seconds = time.time() - start
    summary.print()
    return int(summary.extra.get("exit_code", 0))


EXIT_TERMINATED = 128 + signal.SIGTERM  # the shell's code for a process ended by SIGTERM


def _on_sigint(flag: List[int]):
    """Note SIGINT and SIGTERM (Beam may wrap the KeyboardInterrupt they cause in its own
    errors): a launcher stopped either way aborts its outputs (staging removed) and cancels its
    job on a job service (`run_pipeline`), instead of dying with both left behind."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        flag.append(signum)
        _terminate_workers()  # worker processes of the runner would otherwise keep it waiting
        raise KeyboardInterrupt

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def _terminate_workers() -> None:
    """SIGTERM every descendant of this process (the runner's worker processes; Linux /proc)."""
    children: Dict[int, List[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                ppid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    todo, found = [os.getpid()], []
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    for pid in found:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def _restore_sigint(previous) -> None:
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)


def _is_interrupt(exc: BaseException) -> bool:
    seen: Optional[BaseException] = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt) or "KeyboardInterrupt" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _committed_note(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt) and "output was committed" in str(exc)


def _abort_outputs() -> None:
    for output in _open_outputs:
        try:
            output.abort()
        except BaseException:  # noqa: BLE001 - cleaning up must not hide the failure
            pass


def run_pipeline(build: Callable[[Any], None], options) -> Any:
    """Build a pipeline with `build(p)` and run it to completion; returns the result.

    Unless --verbose, worker processes (DirectRunner multi_processing, a local job service)
    write their logs to a discarded file instead of this job's stderr: a failure is the one
    line `run_job` prints, not each worker's traceback. A launch that may download Prism
    (DirectRunner, PrismRunner) cannot stall on it (`_runner.bounded_downloads`).
    """
    import apache_beam as beam

    with _workers_quiet(not _verbose[0]):
        p = beam.Pipeline(options=options)
        build(p)
        with _runner.bounded_downloads(options):
            result = p.run()
        if _dataflow.is_dry_run(options):
            raise _dataflow.finish(result, options, jobio.write_bytes)
        try:
            result.wait_until_finish()
        except BaseException:
            _cancel(result)
            raise
    _ran.append(result)
    return result


def _cancel(result) -> None:
    """Cancel a job that is still running after its launcher failed or was interrupted (on a
    job service it would go on writing into the staging the launcher removes)."""
    try:
        state = str(getattr(result, "state", "") or "")
        if not any(end in state for end in ("DONE", "FAILED", "CANCELLED", "STOPPED")):
            result.cancel()
    except BaseException:  # noqa: BLE001 - a runner without cancel, or a gone job service
        pass


_verbose = [False]
_ran: List[Any] = []  # results of the pipelines this job ran (the summary names the runner of the last)


@contextlib.contextmanager
def _workers_quiet(quiet: bool):
    """Point file descriptor 2, which child processes inherit, at a temporary file while this
    process's own `sys.stderr` keeps writing to the terminal."""
    if not quiet:
        yield
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    own = None
    try:
        if getattr(sys.stderr, "fileno", None) is not None and _fileno(sys.stderr) == 2:
            own = sys.stderr
            sys.stderr = open(saved, "w", buffering=1, closefd=False)
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        if own is not None:
            sys.stderr.flush()
            sys.stderr = own
        os.close(saved)


def _fileno(stream) -> int:
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError):
        return -1


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


def output_spec(num_shards: int, compression: Optional[str], staged, write_index: bool):
    """ShardSpec for PREFIX-SSSSS-of-NNNNN.tfrecord[.gz|.zlib|.zst] inside the staging dir."""
    kind = _compression.resolve(None, compression)
    suffix = ".tfrecord" + _compression.suffix(kind)
    return _stages.ShardSpec(staged.temp_dir, staged.name, num_shards, suffix, kind, write_index)


def collect(staged: _commit.Output, spec: _stages.ShardSpec, job: str, verify: bool) -> tuple:
    """Read the writers' results and add empty shards; (results sorted by shard, check or None)."""
    results = [r for r in read_json_results(staged, "_results") if "shard" in r]
    check = [r for r in read_json_results(staged, "_results") if "expected" in r]
    results += _stages.write_empty_shards(spec, [r["shard"] for r in results])
    results.sort(key=lambda r: r["shard"])
    warn_empty_shards(job, [r["records"] for r in results])
    if verify and not check:
        raise JobError(f"{job}: the pipeline finished without its checksum proof")
    return results, (check[0] if check else None)


def warn_empty_shards(job: str, records_per_shard: Sequence[int]) -> int:
    """Say on stderr how many shards came out empty (more shards asked than records, or a
    shuffle's luck); returns that count. A warning, not an error: empty shards are valid
    TFRecord files and the output is complete."""
    empty = sum(1 for n in records_per_shard if n == 0)
    if empty:
        total = sum(records_per_shard)
        progress(
            f"{job}: warning: {empty} of {len(records_per_shard)} shards are empty ({total:,} records); "
            "more shards than records only adds empty files"
        )
    return empty


def shard_entries(spec: _stages.ShardSpec, results: List[Dict[str, Any]]) -> List[ShardEntry]:
    """Manifest entries of the written shards."""
    from tfrecord_beam.digest import format_checksum

    return [
        ShardEntry(
            name=r["name"],
            records=r["records"],
            file_bytes=r["file_bytes"],
            payload_bytes=r["bytes"],
            checksum=format_checksum(r["checksum"]) if spec.checksum else None,
            index=spec.index_name(r["shard"]) if spec.write_index else None,
            compression=spec.compression,
        )
        for r in results
    ]


def commit_shards(staged: _commit.Output, spec: _stages.ShardSpec, results, extra_files=(), details=None) -> tuple:
    """Commit the shards with the manifest (and dead letters); (final shard paths, summary fields)."""
    count, name = staged.collect_dead_letters()
    finals = staged.commit(
        shard_entries(spec, results), extra_files, corrupt_records=count, dead_letters=name, details=details
    )
    return finals, corrupt_summary(count, name, staged)


def finish(staged, spec: _stages.ShardSpec, job: str, verify: bool) -> tuple:
    """Collect, then commit; (results, check, final shard paths, summary fields)."""
    results, check = collect(staged, spec, job, verify)
    finals, fields = commit_shards(staged, spec, results)
    return results, check, finals, fields
