"""The bounded-memory tests' shared inputs, jobs and baselines (tests/jobs/test_pipelines_bounded.py,
tests/jobs/test_pipelines_memory.py; the `scale` fixture of tests/jobs/conftest.py).

Each job runs in this process on an input several times larger than a memory budget, and
its peak memory may exceed that of the same job on an input of the budget's size by less
than the budget. Two sides are measured apart (`helpers.rss.job_peaks`):

- this process, the runner's (on the FnApiRunner the whole job): the growth of its peak over
  where it started. Compared with the same job on the small input on the FnApiRunner (one
  process doing all the job's work: the most the runner's process may need); a job's fixed
  buffers differ (tfrecord_to_parquet ~85 MiB, build_index ~8 MiB), so each job has its own
  (~1 CPU s each).
- multi_processing's two SDK worker processes, where that runner's data is: the higher worker
  peak. Compared with the workers of one small-input job per family (`FAMILY`): what a worker
  imports sets its floor (pyarrow's ~40 MiB), more than which job it runs. The workers are
  forked from the test worker's zygote (helpers/sdk_workers.py: a floor of its ~420 MiB, the
  same for the baseline's, which is checked): ~6 CPU s a run less than two fresh interpreters
  importing Beam, still the slow part: two baselines, one run per test.

Baselines are measured once per session per pytest-xdist worker (they are this process's
peaks) before the first big job that needs them, so the lazy imports of a first run count
there, never as a big job's growth. The inputs (~450 MB: Examples and Parquet rows, {i, blob
of 1 B .. 32 KiB}, deterministic from their seeds) are made once per test session, shared by
its xdist workers (`Inputs`: ~2 CPU s and 450 MB of disk writes each, per worker before), each when
first used, read-only (a test that damages one damages a copy), and deleted by the last
worker using them at its end.

Sizes: BUDGET 32 MiB; SMALL = BUDGET (every fixed-size buffer filled: the baseline leaves only
growth); BIG = 6x BUDGET. Measured 2026-12-02 (bench/RESULTS.md) with every job broken to hold
each shard or file it writes (or indexes), the baselines' jobs too: on the FnApiRunner the
runner's process grew 158-185 MiB over its baseline (5x-6x the budget); on multi_processing
the larger worker 73-112 MiB (2.3x-3.5x: it holds half the output or more). At 5x the budget
(160 MiB), with only the job under test broken, the workers' margin was 73-84 MiB already;
a break that also reaches the baseline's job (which then holds its 32 MiB output) takes up to
~25 MiB off that, hence 6x. The jobs as they are: -20 to +12 MiB.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import pytest

from .jobs import FAST, MULTI, run_job, summary_json
from .rss import JobPeaks, MiB, job_peaks

BUDGET = 32 * MiB
SMALL = BUDGET
BIG = 6 * BUDGET
SIZES = {"small": SMALL, "big": BIG}
FILES = 3
RUNNERS = pytest.mark.parametrize("runner", [FAST, MULTI], ids=["fnapi", "multi"])

# the multi_processing worker baseline of each job: the family's job whose workers import and
# keep the most (mix: Beam and the planned jobs' buffers; parquet_to_tfrecord: pyarrow too)
FAMILY = {
    "reshard": "mix",
    "build_index": "mix",
    "mix": "mix",
    "shuffle": "mix",
    "parquet_to_tfrecord": "parquet_to_tfrecord",
    "tfrecord_to_parquet": "parquet_to_tfrecord",
}


def write_tfrecords(directory: Path, total: int, seed: int, files: int = FILES) -> Tuple[List[Path], int]:
    """`files` files in-K.tfrecord of Examples {"i": n, "blob": 1 B .. 32 KiB} adding up to about
    `total` bytes; (paths, records)."""
    from tfrecord_beam.example import encode_example
    from tfrecord_beam.records import RecordWriter

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    block = rng.bytes(64 << 10)
    paths, n = [], 0
    for k in range(files):
        path = directory / f"in-{k}.tfrecord"
        written = 0
        with RecordWriter(str(path)) as writer:
            while written < total // files:
                sizes, starts = rng.integers(1, 32 << 10, 256), rng.integers(0, 32 << 10, 256)
                writer.write_many(
                    encode_example({"i": n + j, "blob": block[a : a + s]})
                    for j, (a, s) in enumerate(zip(starts.tolist(), sizes.tolist()))
                )
                n += 256
                written += int(sizes.sum())
        paths.append(path)
    return paths, n


def write_parquet(path: Path, total: int, seed: int) -> int:
    """One Parquet file of rows {i, blob: 1 B .. 32 KiB}, row groups of 256 rows, about `total`
    bytes; its rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    block = rng.bytes(64 << 10)
    rows = written = 0
    schema = pa.schema([("i", pa.int64()), ("blob", pa.binary())])
    with pq.ParquetWriter(str(path), schema, compression="none") as writer:
        while written < total:
            sizes, starts = rng.integers(1, 32 << 10, 2048), rng.integers(0, 32 << 10, 2048)
            blobs = pa.array([block[a : a + s] for a, s in zip(starts.tolist(), sizes.tolist())], pa.binary())
            ids = np.arange(rows, rows + 2048, dtype=np.int64)
            writer.write_table(pa.table({"i": ids, "blob": blobs}, schema=schema), row_group_size=256)
            rows += 2048
            written += int(sizes.sum())
    return rows


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (flock: released by the kernel if its holder dies)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_only(path: Path) -> None:
    """Make a tree read-only (files 0444, directories 0555)."""
    for directory, _, files in os.walk(path):
        for name in files:
            os.chmod(os.path.join(directory, name), 0o444)
        os.chmod(directory, 0o555)


def _remove(path: Path) -> None:
    """Remove a tree `_read_only` made (its directories writable again first)."""
    if not path.exists():
        return
    for directory, _, _ in os.walk(path):
        os.chmod(directory, os.stat(directory).st_mode | stat.S_IWUSR | stat.S_IXUSR)
    shutil.rmtree(path)


class Inputs:
    """The session's inputs, each made on first use: `tfrecords(size)` (FILES files) and
    `parquet(size)` for size "small" or "big", with their record counts.

    Shared by the processes of a test session (pytest-xdist workers, `root` the same for each),
    once each: an input is made under its lock into a private directory, made read-only and
    renamed into place (ROOT/KEY, its count in ROOT/KEY.json, written first); a process that
    wants it meanwhile waits on the lock, and one that finds ROOT/KEY uses it. A process
    registers as a user (ROOT/users/PID) before its first input and `close` unregisters it;
    the last to close removes ROOT (one that comes later makes what it needs again).
    """

    def __init__(self, root: Path, user: str = "") -> None:
        self.root = root
        self.user = user or str(os.getpid())
        self._made: Dict[str, Tuple[Path, int]] = {}
        self._registered = False

    def tfrecords(self, size: str) -> List[Path]:
        return sorted(self._input("tfrecords-" + size)[0].glob("in-*.tfrecord"))

    def tfrecord_count(self, size: str) -> int:
        return self._input("tfrecords-" + size)[1]

    def parquet(self, size: str) -> Path:
        return self._input("parquet-" + size)[0] / "in.parquet"

    def parquet_rows(self, size: str) -> int:
        return self._input("parquet-" + size)[1]

    def _make(self, key: str, directory: Path) -> int:
        """Write input `key` into `directory` (which exists); its record count."""
        kind, size = key.split("-")
        if kind == "tfrecords":
            return write_tfrecords(directory, SIZES[size], seed=1 if size == "big" else 2)[1]
        return write_parquet(directory / "in.parquet", SIZES[size], seed=3 if size == "big" else 4)

    def _input(self, key: str) -> Tuple[Path, int]:
        if key in self._made:
            return self._made[key]
        self._register()
        final, count_file = self.root / key, self.root / f"{key}.json"
        with _locked(self.root / f"{key}.lock"):
            if not final.exists():
                for stale in self.root.glob(f"{key}.*.tmp"):  # a maker that died: no one else makes it now
                    _remove(stale)
                temp = self.root / f"{key}.{self.user}.tmp"
                temp.mkdir()
                count = self._make(key, temp)
                count_temp = self.root / f"{key}.json.{self.user}.tmp"
                count_temp.write_text(json.dumps({"count": count}))
                os.replace(count_temp, count_file)
                _read_only(temp)
                os.rename(temp, final)
        self._made[key] = (final, json.loads(count_file.read_text())["count"])
        return self._made[key]

    def _register(self) -> None:
        if self._registered:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with _locked(self.root.parent / f"{self.root.name}.lock"):
            (self.root / "users").mkdir(exist_ok=True)
            (self.root / "users" / self.user).touch()
        self._registered = True

    def close(self) -> None:
        """Unregister; the last user removes the inputs."""
        if not self._registered:
            return
        self._registered = False
        self._made.clear()
        with _locked(self.root.parent / f"{self.root.name}.lock"):
            (self.root / "users" / self.user).unlink()
            if not any((self.root / "users").iterdir()):
                _remove(self.root)


def _reshard(inputs: Inputs, size: str, out: Path) -> Tuple[Callable, List[str]]:
    from pipelines import reshard

    files = inputs.tfrecords(size)
    return reshard.main, [
        "--input",
        str(files[0].parent / "*.tfrecord"),
        "--output_prefix",
        str(out / "r"),
        "--num_shards",
        "4",
    ]


def _build_index(inputs: Inputs, size: str, out: Path) -> Tuple[Callable, List[str]]:
    from pipelines import build_index

    files = inputs.tfrecords(size)
    return build_index.main, ["--input", str(files[0].parent / "*.tfrecord"), "--output_dir", str(out)]


def _mix(inputs: Inputs, size: str, out: Path) -> Tuple[Callable, List[str]]:
    """mix of the files (1 part the first file, 2 parts the others; as many records as they
    hold) into 3 shards, with runs and buckets of 4 MiB: well under the budget."""
    from pipelines import mix

    files = inputs.tfrecords(size)
    return mix.main, [
        "--source",
        f"{files[0]}=1",
        "--source",
        f"{files[1].parent}/in-[12].tfrecord=2",
        "--total_records",
        str(inputs.tfrecord_count(size)),
        "--output_prefix",
        str(out / "m"),
        "--num_shards",
        "3",
        "--seed",
        "4",
        "--shuffle_buffer_bytes",
        str(4 * MiB),
    ]


def _shuffle(inputs: Inputs, size: str, out: Path) -> Tuple[Callable, List[str]]:
    from pipelines import reshard

    files = inputs.tfrecords(size)
    return reshard.main, [
        "--input",
        str(files[0].parent / "*.tfrecord"),
        "--output_prefix",
        str(out / "s"),
        "--num_shards",
        "2",
        "--shuffle",
        "--shuffle_buffer_bytes",
        str(4 * MiB),
        "--split_bytes",
        str(16 * MiB),
    ]


def _parquet_to_tfrecord(inputs: Inputs, size: str, out: Path) -> Tuple[Callable, List[str]]:
    from pipelines import parquet_to_tfrecord

    return parquet_to_tfrecord.main, [
        "--input",
        str(inputs.parquet(size)),
        "--output_prefix",
        str(out / "t"),
        "--num_shards",
        "2",
    ]


def _tfrecord_to_parquet(inputs: Inputs, size: str, out: Path) -> Tuple[Callable, List[str]]:
    from pipelines import tfrecord_to_parquet

    files = inputs.tfrecords(size)
    return tfrecord_to_parquet.main, [
        "--input",
        str(files[0].parent / "*.tfrecord"),
        "--output_prefix",
        str(out / "p"),
        "--num_shards",
        "2",
        "--row_group_bytes",
        str(4 * MiB),
        "--split_bytes",
        str(16 * MiB),
    ]


JOBS: Dict[str, Callable[[Inputs, str, Path], Tuple[Callable, List[str]]]] = {
    "reshard": _reshard,
    "build_index": _build_index,
    "mix": _mix,
    "shuffle": _shuffle,
    "parquet_to_tfrecord": _parquet_to_tfrecord,
    "tfrecord_to_parquet": _tfrecord_to_parquet,
}


def measure(main: Callable, argv: Sequence[str], runner: Sequence[str], capsys) -> Tuple[JobPeaks, dict]:
    """Run a job's `main(argv + runner)` here, measured (`job_peaks`); (peaks, its summary)."""
    result: Dict[str, dict] = {}

    def run() -> None:
        code, out, err = run_job(main, list(argv) + list(runner), capsys)
        assert code == 0, err[-3000:]
        result["summary"] = summary_json(out)

    return job_peaks(run), result["summary"]


class Scale:
    """Inputs (the session's, shared) and baselines (this process's) for the `scale` fixture."""

    def __init__(self, root: Path, inputs: Inputs) -> None:
        self.root = root  # this process's: the baselines' outputs
        self.inputs = inputs
        self._baselines: Dict[Tuple[str, str], JobPeaks] = {}

    def baseline(self, job: str, runner: Sequence[str], capsys) -> JobPeaks:
        """The peaks of `job` on the small input (measured once per session)."""
        key = (job, " ".join(runner))
        if key not in self._baselines:
            out = self.root / f"baseline-{len(self._baselines)}"
            main, argv = JOBS[job](self.inputs, "small", out)
            self._baselines[key] = measure(main, argv, runner, capsys)[0]
            shutil.rmtree(out, ignore_errors=True)
        return self._baselines[key]

    def bounded(self, job: str, runner: Sequence[str], capsys, run_big: Callable[[], object]) -> JobPeaks:
        """Measure `run_big` (`job` on a big input on `runner`) after its baselines, and assert
        that its memory did not grow with the input: this process's growth, and on
        multi_processing the workers' peak, exceed their baselines by less than BUDGET."""
        main_base = self.baseline(job, FAST, capsys)
        worker_base = self.baseline(FAMILY[job], MULTI, capsys) if runner == MULTI else None
        peaks = job_peaks(run_big)
        growth = peaks.main - main_base.main
        where = f"{job} on {' '.join(runner)}, a {BIG / MiB:.0f} MiB input"
        assert growth < BUDGET, (
            f"{where}: this process's peak rose {peaks.main / MiB:.0f} MiB, {growth / MiB:.0f} MiB over the "
            f"{main_base.main / MiB:.0f} MiB of a {SMALL / MiB:.0f} MiB input (budget {BUDGET / MiB:.0f} MiB)"
        )
        if worker_base is None:
            assert peaks.workers == 0, f"{where}: {peaks.workers} SDK worker processes"
            return peaks
        assert peaks.workers == worker_base.workers == 2, f"{where}: {peaks.workers} SDK workers seen, not 2"
        # a forked worker's peak starts at the zygote's size (helpers/sdk_workers.py): like with like
        assert peaks.forked == worker_base.forked, (
            f"{where}: {peaks.forked} workers forked, the baseline's {worker_base.forked}"
        )
        growth = peaks.worker - worker_base.worker
        assert growth < BUDGET, (
            f"{where}: an SDK worker peaked at {peaks.worker / MiB:.0f} MiB, {growth / MiB:.0f} MiB over the "
            f"{worker_base.worker / MiB:.0f} MiB of {FAMILY[job]}'s on a {SMALL / MiB:.0f} MiB input "
            f"(budget {BUDGET / MiB:.0f} MiB)"
        )
        return peaks
