"""The jobs on each Beam runner of the matrix (issue 21 item 8): reshard of 16 KiB records and
parquet_to_tfrecord, on the FnApiRunner, Prism, Flink and Spark in one run, with wall time,
records/s, MB/s and the peak RSS of the WHOLE process tree: the launcher and its children plus
every process of the runner's services (Prism; Flink's JobManager, TaskManagers and job
server; Spark's master, worker, executors, job server and worker pool) and their descendants,
the SDK workers included, sampled from /proc (tests/helpers/rss.py), and the CPU seconds
(user + system) of that tree and of the S3 server, which move far less with the machine's load
than wall time; with --json also the S3 requests on the runner's bucket by method and the
services' CPU by command name.

    make runners RUNNERS="s3 prism flink spark"      # the services (bench-runners does not start them)
    python -m bench.bench_runners [--runners fnapi,prism,flink,spark] [--reshard-mb 2048]
                                  [--rows 6000000] [--repeat 1] [--json FILE] [--logs DIR]

Inputs: `bench_convert.shuffle_input` (16 KiB Example records in 8 files) and
`bench_pipelines.parquet_file` (the P1 table), cached under TFRECORD_BEAM_BENCH_DATA; runners
whose workers see no local file (a state with S3_PREFIX: Flink, Spark) read a copy uploaded
once to the S3 server. The launcher gets no AWS_* variables: Beam's --s3_* flags carry the
endpoint and keys. Outputs are checked (exit 0, the summary's record count) and removed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from bench._common import print_table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import rss  # noqa: E402  (tests/helpers: the process-tree sampler)
from helpers import runner_matrix as rm  # noqa: E402  (tests/helpers: runner states and places)

#: the pid files (.runners/state/NAME.pid) of each runner's services
SERVICES = {
    "fnapi": [],
    "prism": ["prism"],
    "direct-prism": [],
    "flink": ["flink-jobmanager", "flink-taskmanager1", "flink-taskmanager2", "flink-job-server"],
    "spark": ["spark-master", "spark-worker", "spark-job-server", "spark-workers"],
}
MiB = 1 << 20
#: where each job's stderr is kept (--logs), None: not kept
LOG_DIR: Optional[Path] = None


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> Optional[Tuple[int, int, str]]:
    """(start time, user + system clock ticks, command name) of one process itself (children not
    included); None when it vanished."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    if len(fields) < 20:
        return None
    return int(fields[19]), int(fields[11]) + int(fields[12]), head.partition("(")[2]


class TreeSampler:
    """Peak summed RSS of the processes descended from some roots, sampled every `every` s, and
    the CPU time they spent meanwhile (`cpu_s`): each process's own user + system time at the last
    sample that saw it, less what the ones already running had spent at the first. A process that
    ends between two samples loses at most `every` s of CPU; `cpu_extra` adds what is measured
    exactly elsewhere (the launcher's rusage, the S3 server's)."""

    def __init__(self, roots: Sequence[int], every: float = 0.25) -> None:
        self.roots = list(roots)
        self.every = every
        self.peak = 0
        self.processes = 0
        self.cpu_extra = 0.0
        self._first: Dict[Tuple[int, int], int] = {}
        self._last: Dict[Tuple[int, int], int] = {}
        self._names: Dict[Tuple[int, int], str] = {}
        self._started = False
        self._skip: List[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, pid: int, cpu: bool = True) -> None:
        """Sample `pid`'s tree too (its CPU left to cpu_extra when `cpu` is False)."""
        self.roots.append(pid)
        if not cpu:
            self._skip.append(pid)

    @property
    def cpu_s(self) -> float:
        ticks = sum(t - self._first.get(key, 0) for key, t in self._last.items())
        return ticks / _TICK + self.cpu_extra

    def cpu_by_name(self) -> Dict[str, float]:
        """CPU seconds by command name (java, python, ...), biggest first."""
        by: Dict[str, float] = {}
        for key, t in self._last.items():
            by[self._names[key]] = by.get(self._names[key], 0.0) + (t - self._first.get(key, 0)) / _TICK
        return dict(sorted(by.items(), key=lambda kv: -kv[1]))

    @staticmethod
    def _tree(children: Dict[int, List[int]], roots: Sequence[int], skip: Sequence[int] = ()) -> set:
        pids = set(roots)
        todo = list(roots)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in pids:
                    pids.add(child)
                    todo.append(child)
        return pids - (TreeSampler._tree(children, skip) if skip else set())

    def sample(self) -> int:
        children: Dict[int, List[int]] = {}
        for pid, parent in rss._parents().items():  # one walk of /proc for every root
            children.setdefault(parent, []).append(pid)
        pids = self._tree(children, self.roots)
        for pid in self._tree(children, self.roots, self._skip):
            got = cpu_ticks(pid)
            if got is not None:
                key = (pid, got[0])
                if not self._started:
                    self._first[key] = got[1]
                self._last[key] = got[1]
                self._names[key] = got[2]
        self._started = True
        total = rss.rss_bytes(pids)
        if total > self.peak:
            self.peak, self.processes = total, len(pids)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def __enter__(self) -> "TreeSampler":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def service_pids(runner: str) -> List[int]:
    """The live pids of a runner's services (an empty list for the in-process runners)."""
    pids = []
    for name in SERVICES.get(runner, []):
        try:
            pid = int((rm.STATE / f"{name}.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            raise SystemExit(f"{runner}: service {name} is not running (start it: make runners)") from None
        pids.append(pid)
    return pids


def s3_pid() -> Optional[int]:
    """The S3 server's pid (runners/s3.sh), None when it is not running."""
    try:
        pid = int((rm.STATE / "s3.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


def s3_requests(log: Path, offset: int, bucket: str) -> Dict[str, int]:
    """Requests on `bucket` the S3 server logged after `offset` of its log (one line a request:
    `time | vgw | status | latency | client | METHOD | /bucket/key | ...`), counted by method."""
    counts: Dict[str, int] = {}
    with open(log, "rb") as handle:
        handle.seek(offset)
        for line in handle.read().decode(errors="replace").splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) > 6 and parts[1] == "vgw" and parts[6].split("/")[1:2] == [bucket]:
                counts[parts[5]] = counts.get(parts[5], 0) + 1
    return counts


def _upload(local: Path, remote: str) -> None:
    """Copy a local file to an s3:// path once (kept when a same-sized object is there)."""
    from tfrecord_beam import fs

    filesystem, inner = fs._split_uri(remote)
    info = filesystem.get_file_info(inner)
    if info.size == local.stat().st_size:
        return
    # straight to the final key: a multipart upload appears whole when it completes, and a
    # temporary object's server-side copy (CopyObject) of a 256 MiB input timed out at load 24
    with open(local, "rb") as src, filesystem.open_output_stream(inner) as handle:
        shutil.copyfileobj(src, handle, 16 << 20)


def inputs_for(runner: rm.Runner, reshard_dir: Path, parquet: Path) -> Tuple[str, str]:
    """(reshard input directory, parquet file) where the runner's workers can read them."""
    if not runner.remote_data:
        return str(reshard_dir), str(parquet)
    base = runner.remote_data.rstrip("/").rsplit("/", 1)[0] + "/bench-inputs"
    for path in sorted(reshard_dir.glob("*.tfrecord")):
        _upload(path, f"{base}/{reshard_dir.name}/{path.name}")
    _upload(parquet, f"{base}/{parquet.name}")
    return f"{base}/{reshard_dir.name}", f"{base}/{parquet.name}"


def _remove(place: str) -> None:
    """Delete a run's output folder, local or s3:// (its directory marker too)."""
    import pyarrow.fs as pafs

    from tfrecord_beam import fs

    if "://" not in place:
        shutil.rmtree(place, ignore_errors=True)
        return
    filesystem, inner = fs._split_uri(place)
    if filesystem.get_file_info(inner).type != pafs.FileType.NotFound:
        filesystem.delete_dir(inner)


def run_one(runner: rm.Runner, job: str, args: List[str], out_base: str) -> dict:
    """Run one job, sampling the whole tree; its measurements and summary."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.update({k: v for k, v in runner.env.items() if k.startswith("S3_")})
    if runner.remote_data:  # Beam's --s3_* flags only
        for key in [k for k in env if k.startswith("AWS_")]:
            del env[key]
    cmd = [runner.python, "-m", f"pipelines.{job}", *args, *runner.flags]
    services = service_pids(runner.name)
    idle = TreeSampler(services)
    idle_rss = idle.sample() if services else 0
    s3 = s3_pid() if runner.remote_data else None
    s3_before = cpu_ticks(s3) if s3 else None
    s3_log = rm.ROOT / ".runners" / "logs" / "s3.log"
    s3_log_at = s3_log.stat().st_size if s3 and s3_log.exists() else None
    load_before = os.getloadavg()[0]
    launcher_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as err, TreeSampler(services) as sampler:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        sampler.add(proc.pid, cpu=False)  # its CPU: from its rusage (with its reaped children)
        out, _ = proc.communicate(timeout=4 * 3600)
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    launcher_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    launcher_cpu = (launcher_after.ru_utime - launcher_before.ru_utime) + (
        launcher_after.ru_stime - launcher_before.ru_stime
    )
    s3_after = cpu_ticks(s3) if s3 else None
    s3_cpu = (s3_after[1] - s3_before[1]) / _TICK if s3_before and s3_after and s3_after[0] == s3_before[0] else 0.0
    if LOG_DIR:
        (LOG_DIR / f"{runner.name}-{job}-{uuid.uuid4().hex[:6]}.log").write_text(stderr)
    bucket = (runner.remote_data or "").split("://", 1)[-1].split("/", 1)[0]
    requests = s3_requests(s3_log, s3_log_at, bucket) if s3_log_at is not None else {}
    try:
        if proc.returncode != 0:
            raise RuntimeError(f"{job} on {runner.name} failed ({proc.returncode}):\n{stderr[-3000:]}")
        summary = json.loads([t for t in out.splitlines() if t.startswith("json: ")][-1][6:])
    finally:
        _remove(out_base)
    return {
        "runner": runner.name,
        "job": job,
        "wall_s": wall,
        "records": summary["records"],
        "input_bytes": summary.get("input_bytes", 0),
        "peak_rss_mib": sampler.peak / MiB,
        "cpu_s": sampler.cpu_s + launcher_cpu + s3_cpu,
        "launcher_cpu_s": launcher_cpu,
        "services_cpu_s": sampler.cpu_s,
        "s3_cpu_s": s3_cpu,
        "services_cpu_by_name": sampler.cpu_by_name(),
        "s3_requests": requests,
        "processes": sampler.processes,
        "idle_services_rss_mib": idle_rss / MiB,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "ran_on": summary.get("runner"),
    }


def job_args(job: str, reshard_in: str, parquet: str, out: str) -> List[str]:
    if job == "reshard":
        return ["--input", reshard_in, "--output_prefix", out + "/r", "--num_shards", "8"]
    return ["--input", parquet, "--output_prefix", out + "/t", "--num_shards", "4"]


def run(runners: Sequence[str], reshard_mb: int, rows: int, repeat: int, json_path: Optional[str]) -> str:
    from bench._common import DATA_DIR
    from bench.bench_convert import shuffle_input
    from bench.bench_pipelines import parquet_file

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    reshard_dir, parquet = shuffle_input(reshard_mb), parquet_file(rows)
    results: List[dict] = []
    scratch = Path(tempfile.mkdtemp(prefix="bench-runners-"))
    try:
        for name in runners:
            runner = rm.load_runner(name)
            reshard_in, parquet_in = inputs_for(runner, reshard_dir, parquet)
            for job in ("reshard", "parquet_to_tfrecord"):
                for _ in range(repeat):
                    base = rm.Place.for_runner(runner, scratch).path("out-" + uuid.uuid4().hex[:8])
                    got = run_one(runner, job, job_args(job, reshard_in, parquet_in, base), base)
                    print(json.dumps(got), file=sys.stderr, flush=True)
                    results.append(got)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1) + "\n")
    return table(results, reshard_mb, rows)


def table(results: List[dict], reshard_mb: int, rows: int) -> str:
    """Medians per (job, runner), with the ratio of wall times to the FnApiRunner's."""
    groups: Dict[Tuple[str, str], List[dict]] = {}
    for r in results:
        groups.setdefault((r["job"], r["runner"]), []).append(r)
    base = {job: statistics.median(x["wall_s"] for x in rs) for (job, name), rs in groups.items() if name == "fnapi"}
    lines = []
    for (job, name), rs in groups.items():
        wall = statistics.median(x["wall_s"] for x in rs)
        nbytes = rs[0]["input_bytes"]
        lines.append(
            [
                job,
                name,
                len(rs),
                wall,
                f"{wall / base[job]:.1f}x" if job in base else "-",
                rs[0]["records"] / wall,
                nbytes / MiB / wall,
                statistics.median(x["cpu_s"] for x in rs),
                statistics.median(x["s3_cpu_s"] for x in rs),
                max(x["peak_rss_mib"] for x in rs),
                max(x["idle_services_rss_mib"] for x in rs),
                max(x["processes"] for x in rs),
                f"{min(x['load_before'] for x in rs):.1f}-{max(x['load_after'] for x in rs):.1f}",
            ]
        )
    title = f"reshard of {reshard_mb} MiB of 16 KiB records (8 shards), parquet_to_tfrecord of {rows:,} rows (4 shards)"
    header = [
        "job",
        "runner",
        "runs",
        "wall s (median)",
        "vs FnApiRunner",
        "records/s",
        "input MiB/s",
        "CPU s (tree)",
        "of which S3 server",
        "peak tree RSS MiB",
        "services idle MiB",
        "processes at peak",
        "load avg",
    ]
    return print_table(title, header, lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runners", default="fnapi,prism,flink,spark", help="comma-separated matrix columns")
    parser.add_argument("--reshard-mb", type=int, default=2048, help="MiB of 16 KiB records to reshard (2048)")
    parser.add_argument("--rows", type=int, default=6_000_000, help="Parquet rows to convert (6,000,000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each job on each runner (median)")
    parser.add_argument("--json", default=None, help="also write every run's numbers here")
    parser.add_argument("--logs", default=None, help="keep each job's stderr in this folder")
    args = parser.parse_args(argv)
    if args.logs:
        global LOG_DIR
        LOG_DIR = Path(args.logs)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
    run([n for n in args.runners.split(",") if n], args.reshard_mb, args.rows, args.repeat, args.json)


if __name__ == "__main__":
    main()
