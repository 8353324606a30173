"""The runner matrix (issue 21): which runners there are, how a job is launched on one, where
its data lives, and how an output is checked.

A runner is a name and a state file `.runners/state/NAME.env` (written by `runners/*.sh start`,
i.e. `make runners`): shell `KEY=VALUE` lines, FLAGS (the job flags), PYTHON (the interpreter
that launches jobs there), optional S3_PREFIX (an s3:// prefix where that runner's job data
must live, because its workers see no local file) and S3_* / AWS_* variables the launcher
needs. `fnapi` (the in-process FnApiRunner) needs no state, nor does `dataflow-dryrun`
(DataflowRunner with --dry_run=True: the job is built, nothing runs; its tests,
tests/runners/test_dataflow_dryrun.py, start their own GCS server and add the gs:// flags). The
runners of the matrix are `fnapi`, `dataflow-dryrun` and those the scripts in runners/ declare
on a `# runners: NAME...` line; TFRB_RUNNERS=a,b picks some of them. A dry-run column runs the
dry-run tests, every other column the tests that run jobs (`is_dry_run`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tfrecord_beam import digest, fs
from tfrecord_beam import manifest as mf
from tfrecord_beam.records import read_records

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".runners" / "state"
SCRIPTS = ROOT / "runners"
FNAPI = "fnapi"
DATAFLOW_DRYRUN = "dataflow-dryrun"
#: the flags of the dataflow-dryrun column; its tests add --temp_location (gs://) and what to stage
DATAFLOW_DRYRUN_FLAGS = ["--runner=DataflowRunner", "--dry_run=True", "--project=tfrb-test", "--region=us-central1"]
JOB_TIMEOUT_S = 900


def runner_names() -> List[str]:
    """fnapi, dataflow-dryrun, then each script's `# runners:` names (scripts in runners/ order:
    prism, flink, spark)."""
    wanted = os.environ.get("TFRB_RUNNERS")
    names = [FNAPI, DATAFLOW_DRYRUN]
    for script in sorted(SCRIPTS.glob("*.sh"), key=_script_order):
        for line in script.read_text().splitlines()[:40]:
            match = re.match(r"#\s*runners:\s*(.+)$", line)
            if match:
                names += match.group(1).split()
    if wanted:
        return [n for n in wanted.split(",") if n]
    return names


def is_dry_run(name: str) -> bool:
    """Whether the column builds jobs without running them (its tests check what was built)."""
    return name == DATAFLOW_DRYRUN


def _script_order(path: Path) -> Tuple[int, str]:
    order = ["prism", "flink", "spark"]
    return (order.index(path.stem) if path.stem in order else len(order), path.stem)


def read_state(path: Path) -> Dict[str, str]:
    """The KEY=VALUE lines of a state file (values shell-quoted, as bash's printf %q or "...")."""
    values: Dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"{path}:{number}: not a KEY=VALUE line: {line!r}")
        values[key] = " ".join(shlex.split(raw))
    return values


@dataclass
class Runner:
    """One column of the matrix."""

    name: str
    flags: List[str]
    python: str
    env: Dict[str, str] = field(default_factory=dict)

    @property
    def remote_data(self) -> Optional[str]:
        """The s3:// prefix this runner's job data must live under, or None (a local tmp dir)."""
        return self.env.get("S3_PREFIX") or None


def load_runner(name: str) -> Runner:
    """The runner's flags and interpreter; AssertionError saying to run `make runners` when its
    state is missing (a missing runner is a failure of the matrix, never a skip)."""
    if name == FNAPI:
        return Runner(FNAPI, ["--runner=FnApiRunner"], sys.executable)
    if name == DATAFLOW_DRYRUN:
        return Runner(DATAFLOW_DRYRUN, list(DATAFLOW_DRYRUN_FLAGS), sys.executable)
    path = STATE / f"{name}.env"
    if not path.exists():
        raise AssertionError(f"runner {name!r} is not started: no {path}; run `make runners` first")
    env = read_state(path)
    if "FLAGS" not in env or not env["FLAGS"].strip():
        raise AssertionError(f"{path} has no FLAGS line")
    if env.get("S3_PREFIX"):
        # the test process writes the inputs and reads the outputs there too (tfrecord_beam.fs
        # through pyarrow, which takes the endpoint and keys from the environment)
        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
    return Runner(name, shlex.split(env["FLAGS"]), env.get("PYTHON") or sys.executable, env)


@dataclass
class Place:
    """Where one test's data lives: a local directory or an s3:// prefix (`base`); paths are
    joined with '/', and read through tfrecord_beam.fs (which opens both)."""

    base: str

    @classmethod
    def for_runner(cls, runner: Runner, tmp_path: Path) -> "Place":
        remote = runner.remote_data
        if remote:
            return cls(remote.rstrip("/") + "/" + uuid.uuid4().hex[:12])
        return cls(str(tmp_path))

    def path(self, *parts: str) -> str:
        return "/".join([self.base, *parts])

    def names(self, *parts: str) -> List[str]:
        """Every name in a directory, hidden ones included ([] when it does not exist)."""
        directory = self.path(*parts)
        if not fs.is_remote(directory):
            return sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.list_dir(directory))


@dataclass
class JobRun:
    code: int
    out: str
    err: str
    seconds: float

    def summary(self) -> dict:
        import json

        lines = [t for t in self.out.splitlines() if t.startswith("json: ")]
        assert lines, f"no summary line; stderr:\n{self.err[-4000:]}"
        return json.loads(lines[-1][len("json: ") :])


def launch(runner: Runner, job: str, args: Sequence[str], extra_env: Optional[Dict[str, str]] = None) -> JobRun:
    """Run `python -m pipelines.JOB ARGS FLAGS` with the runner's interpreter and flags, from
    the repository root (its code is what the launcher and LOOPBACK workers import).

    A job whose data lives in S3 gets no AWS_* credentials or endpoint: Beam's --s3_* flags of
    the runner's FLAGS must be enough. AWS_ENDPOINT_URL points at a trap (a listener that
    counts connections): any read or write that falls back on the environment (boto3's or
    pyarrow's defaults) is an AssertionError, not a silent success with the test's keys."""
    with launching(runner, job, args, extra_env) as (cmd, env, trap):
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        seconds = time.monotonic() - start
    if trap is not None and trap.connections:
        raise AssertionError(
            f"{job} on {runner.name} reached S3 through the environment ({trap.connections} connection(s) to "
            f"the trap AWS_ENDPOINT_URL {trap.url}), not through Beam's --s3_* flags\nstderr:\n{proc.stderr[-3000:]}"
        )
    return JobRun(proc.returncode, proc.stdout, proc.stderr, seconds)


@contextlib.contextmanager
def launching(
    runner: Runner, job: str, args: Sequence[str], extra_env: Optional[Dict[str, str]] = None
) -> Iterator[Tuple[List[str], Dict[str, str], Optional[Any]]]:
    """(command, environment, trap or None) of a launch of JOB on the runner (see `launch`),
    for tests that start the launcher themselves (to signal it mid-job)."""
    env = dict(os.environ)
    env.update({k: v for k, v in runner.env.items() if k.startswith("S3_")})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra_env or {})
    cmd = [runner.python, "-m", f"pipelines.{job}", *args, *runner.flags]
    with _trapped(env, bool(runner.remote_data)) as trap:
        yield cmd, env, trap


@contextlib.contextmanager
def _trapped(env: Dict[str, str], remote: bool) -> Iterator[Optional[Any]]:
    """For a job on S3 data: env without AWS_* and with the trap endpoint (yielded), else None."""
    if not remote:
        yield None
        return
    from helpers import s3server

    trap = s3server.TrapEndpoint()
    try:
        with tempfile.TemporaryDirectory() as home:
            changes = s3server.trap_environment(trap, Path(home))
            for key in [k for k in env if k.startswith("AWS_")]:
                del env[key]
            env.update({k: v for k, v in changes.items() if v is not None})
            yield trap
    finally:
        trap.close()


def input_digest(paths: Sequence[str]) -> tuple:
    """(records, payload bytes, checksum) of whole input files."""
    return digest.combine_digests(digest.file_digest(p, "auto") for p in paths)


def check_committed(
    place: Place, out_dir: str, name: str, expect_records: int, expect_digest=None, also: Sequence[str] = ()
) -> mf.Manifest:
    """The output `OUT_DIR/NAME` is committed: its manifest lists every shard, each shard
    matches its entry (size, records, payload bytes, checksum: read in full), the counts add
    up to `expect_records` (and the checksums to `expect_digest`), and the directory holds
    nothing else (but the names in `also`): no staging, no temporary files."""
    manifest_file = place.path(out_dir, mf.manifest_name(name))
    manifest = mf.read_manifest(manifest_file)
    assert manifest.records == expect_records, (manifest.records, expect_records)
    problems = [
        p
        for entry, path in zip(manifest.shards, mf.shard_paths(manifest, manifest_file))
        for p in mf.check_shard(entry, path, full=True)
    ]
    assert not problems, problems
    if expect_digest is not None:
        got = digest.combine_digests(digest.file_digest(p, "auto") for p in mf.shard_paths(manifest, manifest_file))
        assert got == tuple(expect_digest), (got, expect_digest)
        assert sum(s.payload_bytes or 0 for s in manifest.shards) == expect_digest[1]
    names = place.names(out_dir)
    assert sorted(names) == sorted(manifest.files() + [mf.manifest_name(name), *also]), names
    return manifest


def payloads_of(place: Place, out_dir: str, name: str) -> List[List[bytes]]:
    """The payloads of each shard of a committed output, in the manifest's order."""
    manifest_file = place.path(out_dir, mf.manifest_name(name))
    manifest = mf.read_manifest(manifest_file)
    return [list(read_records(p)) for p in mf.shard_paths(manifest, manifest_file)]


def same_multiset(a, b) -> bool:
    return Counter(a) == Counter(b)


class References:
    """What the FnApiRunner produced, per job: the output every other runner must equal where
    the job is deterministic. The fnapi column gives its own output; any other column, when
    fnapi has not run that job yet (TFRB_RUNNERS=prism, `-k prism`, another order), runs it on
    the FnApiRunner (`on_fnapi`) rather than take its own output, which would compare a runner
    with itself."""

    def __init__(self) -> None:
        self._outputs: Dict[str, Any] = {}

    def get(self, job: str, runner: Runner, own: Any, on_fnapi: Callable[[], Any]) -> Any:
        if job not in self._outputs:
            self._outputs[job] = own if runner.name == FNAPI else on_fnapi()
        return self._outputs[job]
