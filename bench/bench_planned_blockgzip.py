"""Unshuffled reshard of one big compressed file: block-gzip (member table in its index) with
1 and 2 workers, against the same records as one gzip stream (no table: every shard's piece
inflates from the file's start) and uncompressed.

    python -m bench.bench_planned_blockgzip [--records N] [--shards K] [--repeats R]

Data: D2 records (`bench._common.dataset_file`) written three ways: "blocks" (RecordWriter's
GZIP with an index: 1 MiB members), "one stream" (GZIP without an index), "none". Each job is
`python -m pipelines.reshard` in a fresh interpreter on DirectRunner multi_processing with 1 or
2 workers; wall seconds are the whole command, CPU seconds those of its process tree (sampled
from /proc every 50 ms: Beam does not wait for its workers, so rusage would miss them). Every output is checked against the input (count +
hash of the records in order) or the benchmark fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench._common import dataset_file, print_table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers.rss import process_tree  # noqa: E402  (the tests' /proc tree walk: one implementation)

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of one process so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _hash(paths) -> tuple:
    from tfrecord_beam.records import read_records

    h, n = hashlib.blake2b(), 0
    for p in paths:
        for payload in read_records(str(p)):
            h.update(len(payload).to_bytes(8, "little"))
            h.update(payload)
            n += 1
    return n, h.hexdigest()


def _inputs(records: int, work: Path) -> dict:
    from tfrecord_beam.records import RecordReader, RecordWriter

    src = dataset_file("d2", records)
    out = {
        "none": work / "none" / "in.tfrecord",
        "blocks": work / "blocks" / "in.tfrecord.gz",
        "one stream": work / "stream" / "in.tfrecord.gz",
    }
    for kind, path in out.items():
        path.parent.mkdir(parents=True)
        index = str(path).replace(".tfrecord", ".tfindex") if kind == "none" else str(path) + ".tfindex"
        with RecordWriter(
            str(path), None if kind == "none" else "gzip", index_path=None if kind == "one stream" else index
        ) as w:
            for chunk in RecordReader(str(src)).chunks():
                w.write_many(chunk.payloads())
    return out


def _job(path: Path, out: Path, shards: int, workers: int) -> tuple:
    """(wall seconds, CPU seconds) of one reshard run."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines.reshard",
        "--input",
        str(path),
        "--output_prefix",
        str(out / "r"),
        "--num_shards",
        str(shards),
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        f"--direct_num_workers={workers}",
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cpu: dict = {}  # pid -> the most CPU seen (Beam's workers are not waited for: rusage misses them)
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=str(ROOT), env=env)
        while proc.poll() is None:
            for pid in process_tree(proc.pid):
                cpu[pid] = max(cpu.get(pid, 0.0), _cpu_seconds(pid))
            time.sleep(0.05)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{cmd} failed: {err.read().decode()[-2000:]}")
    return wall, sum(cpu.values())


def run(records: int = 600_000, shards: int = 4, repeats: int = 3) -> str:
    work = Path(tempfile.mkdtemp(prefix="bench-planned-bgz-"))
    try:
        inputs = _inputs(records, work)
        want = _hash([inputs["none"]])
        cases = [("blocks", 1), ("blocks", 2), ("one stream", 1), ("one stream", 2), ("none", 1), ("none", 2)]
        times = {case: [] for case in cases}
        for r in range(repeats):  # alternate the cases: the machine's load drifts
            for kind, workers in cases:
                out = work / f"out-{kind.replace(' ', '_')}-{workers}-{r}"
                times[(kind, workers)].append(_job(inputs[kind], out, shards, workers))
                if _hash(sorted(out.glob("r-*.tfrecord"))) != want:
                    raise RuntimeError(f"{kind}, {workers} workers: output differs from the input")
                shutil.rmtree(out)
        ref = float(np.median([t[0] for t in times[("blocks", 1)]]))
        rows = []
        for kind, workers in cases:
            wall = float(np.median([t[0] for t in times[(kind, workers)]]))
            cpu = float(np.median([t[1] for t in times[(kind, workers)]]))
            rows.append([kind, workers, os.path.getsize(inputs[kind]) / 1e6, wall, cpu, ref / wall])
        return print_table(
            f"reshard of one file, {records:,} D2 records ({want[0]:,} checked) -> {shards} shards, median of {repeats}",
            ["input", "workers", "file MB", "wall s", "CPU s", "speed vs blocks/1 worker"],
            rows,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    run(args.records, args.shards, args.repeats)


if __name__ == "__main__":
    main()
