"""What every benchmark shares: generated datasets, a median timer, a command's measure and a
table printer."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Mapping, NamedTuple, Optional, Sequence

import numpy as np

DATA_DIR = Path(os.environ.get("TFRECORD_BEAM_BENCH_DATA", Path(__file__).resolve().parent / "_data"))
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tests") not in sys.path:  # the memory tests' process-tree sampler: one implementation
    sys.path.insert(0, str(ROOT / "tests"))


def median_seconds(
    fn: Callable[[], object], repeats: int = 5, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median time of `fn()` over `repeats` runs after `warmup` runs (the machine is noisy).

    `clock=time.process_time` measures this process's CPU time: steadier on a loaded machine
    for single-threaded work.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def job_env() -> dict:
    """The environment of a measured command: this checkout's package first on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


class Measured(NamedTuple):
    """One command run to its end."""

    returncode: int
    wall: float  # seconds, start to exit
    cpu: float  # user + system seconds of the whole process tree (the kernel's accounting)
    peak_rss: int  # bytes: the highest summed RSS of the tree seen
    stdout: str
    stderr: str


def run_measured(
    cmd: Sequence[str],
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 3600.0,
    interval: float = 0.02,
) -> Measured:
    """Run `cmd` to its end (stdin closed, output to temp files): its wall seconds, the CPU
    seconds of it and every descendant (the RUSAGE_CHILDREN delta: steadier than wall on a
    shared machine) and the peak RSS summed over its process tree, sampled every `interval` s
    by the memory tests' sampler (`tests/helpers/rss.PeakRSS`). Over `timeout`: killed, and
    RuntimeError naming the command."""
    from helpers.rss import PeakRSS  # tests/helpers (on the path: see below)

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile("w+b") as out, tempfile.TemporaryFile("w+b") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        with PeakRSS(root=proc.pid, interval=interval) as rss:
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{' '.join(map(str, cmd))} ran over {timeout:.0f} s") from None
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Measured(code, wall, cpu, rss.peak, stdout, stderr)


def print_table(title: str, header: Sequence[str], rows: List[Sequence[object]]) -> str:
    """Print (and return) a Markdown table."""
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(c) for c in row) + " |")
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    return text


def _fmt(cell) -> str:
    if isinstance(cell, float):
        if cell >= 100:
            return f"{cell:,.0f}"
        return f"{cell:.2f}"
    if isinstance(cell, int):
        return f"{cell:,}"
    return str(cell)


# --- the datasets ------------------------------------------------------------------


def d1_examples(n: int = 6000, seed: int = 0):
    """D1: {image: 16 KiB bytes, label: float, index: int} as (value, kind) dicts."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield {"image": (rng.bytes(16384), "byte"), "label": (float(rng.random()), "float"), "index": (i, "int")}


def d2_examples(n: int = 300_000, seed: int = 0):
    """D2: {label float, index int, tokens int x20, name bytes ~12}."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 50_000, size=(n, 20))
    labels = rng.random(n)
    for i in range(n):
        yield {
            "label": (float(labels[i]), "float"),
            "index": (i, "int"),
            "tokens": (tokens[i], "int"),
            "name": (b"name-%07d" % i, "byte"),
        }


def d3_sequence_examples(n: int = 50_000, seed: int = 0):
    """D3: SequenceExamples: context {length, label}; feature_lists tokens (3-8 steps of 3 ints), seq_labels."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        steps = int(rng.integers(3, 9))
        yield (
            {"length": (steps, "int"), "label": (float(rng.random()), "float")},
            {
                "tokens": (rng.integers(0, 1000, size=(steps, 3)).tolist(), "int"),
                "seq_labels": ([[int(v)] for v in rng.integers(0, 2, size=steps)], "int"),
            },
        )


def dataset_file(name: str, n: int) -> Path:
    """Generate (once, cached under DATA_DIR) and return the path of a dataset file."""
    from tfrecord_beam import example, records

    path = DATA_DIR / f"{name}-{n}.tfrecord"
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    if name == "d3":
        payloads = (example.encode_sequence_example(c, s) for c, s in d3_sequence_examples(n))
    else:
        gen = {"d1": d1_examples, "d2": d2_examples}[name]
        payloads = (example.encode_example(d) for d in gen(n))
    records.write_records(str(path), payloads, index_path=True)
    return path
