"""The jobs on each Beam runner of the matrix (issue 21 item 8): reshard of 16 KiB records and
parquet_to_tfrecord, on the FnApiRunner, Prism, Flink and Spark in one run, with wall time,
records/s, MB/s and the peak RSS of the WHOLE process tree: the launcher and its children plus
every process of the runner's services (Prism; Flink's JobManager, TaskManagers and job
server; Spark's master, worker, executors, job server and worker pool) and their descendants,
the SDK workers included, sampled from /proc (tests/helpers/rss.py).

    make runners RUNNERS="s3 prism flink spark"      # the services (bench-runners does not start them)
    python -m bench.bench_runners [--runners fnapi,prism,flink,spark] [--reshard-mb 2048]
                                  [--rows 6000000] [--repeat 1] [--json FILE]

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


class TreeSampler:
    """Peak summed RSS of the processes descended from some roots, sampled every `every` s."""

    def __init__(self, roots: Sequence[int], every: float = 0.25) -> None:
        self.roots = list(roots)
        self.every = every
        self.peak = 0
        self.processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, pid: int) -> None:
        self.roots.append(pid)

    def sample(self) -> int:
        children: Dict[int, List[int]] = {}
        for pid, parent in rss._parents().items():  # one walk of /proc for every root
            children.setdefault(parent, []).append(pid)
        pids = set(self.roots)
        todo = list(self.roots)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in pids:
                    pids.add(child)
                    todo.append(child)
        total = rss.rss_bytes(pids)
        if total > self.peak:
            self.peak, self.processes = total, len(pids)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


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


def _upload(local: Path, remote: str) -> None:
    """Copy a local file to an s3:// path once (kept when a same-sized object is there)."""
    from tfrecord_beam import fs

    filesystem, inner = fs._split_uri(remote)
    info = filesystem.get_file_info(inner)
    if info.size == local.stat().st_size:
        return
    with open(local, "rb") as src, fs.atomic_output(remote) as (handle, commit):
        shutil.copyfileobj(src, handle, 16 << 20)
        commit()


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
    from tfrecord_beam import fs

    if "://" not in place:
        shutil.rmtree(place, ignore_errors=True)
        return
    filesystem, inner = fs._split_uri(place)
    filesystem.delete_dir_contents(inner, missing_dir_ok=True)


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
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryFile() as err, TreeSampler(services) as sampler:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        sampler.add(proc.pid)
        out, _ = proc.communicate(timeout=4 * 3600)
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
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
    args = parser.parse_args(argv)
    run([n for n in args.runners.split(",") if n], args.reshard_mb, args.rows, args.repeat, args.json)


if __name__ == "__main__":
    main()
