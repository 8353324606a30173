"""A user's first hour (issue 23): the issue's table again, in one command.

    python -m bench.bench_first_hour [--quick] [--scale 1] [--help-runs 3] [--tiny-runs 3]
                                     [--tool-runs 1] [--job-runs 1] [--steps help,tiny,tools,jobs]
                                     [--workdir DIR]
    python -m bench first_hour                      (the same at full size; not in `make bench`)

Every step runs as a user runs it: a fresh process (`python -m pipelines.JOB ...` with this
interpreter, the `tfrecord-beam` and `tfrecord2idx` console scripts beside it), the working
directory a temp folder, stdout and stderr files (not a terminal), no runner flag (the jobs'
default). Each row: the median wall of its runs (start-up included), the median CPU seconds
(user + system of the whole process tree, from this process's RUSAGE_CHILDREN before and after
each run), the largest peak RSS of the tree (the summed RSS of its processes sampled every
20 ms: `helpers.rss.PeakRSS`, as bench_planned), the 1-minute load average before the row's
first run, the issue's figure and now / issue, and the issue's target.

Steps (the issue's rows):
  help   `--help` of the five jobs, `tfrecord-beam`, `tfrecord-beam inspect`, `tfrecord2idx`
  tiny   `python -m pipelines.reshard` of an 8-record file into 2 shards
  tools  `tfrecord-beam count`, `inspect`, `schema` of 5 M small Examples (~1 GB, one file, no
         index; `small_records`), with the progress lines each wrote to its stderr
  jobs   reshard, mix 3:1 and reshard --shuffle of 2 GB of 16 KiB records (8 files, 8 shards,
         `bench_planned.dataset` and its job arguments), interleaved run by run, on disk

Data is made once and cached under bench/_data (or $TFRECORD_BEAM_BENCH_DATA), as the other
benches do (the 2 GB set is bench_planned's own); the work folder (job outputs, the 8-record
file, each command's stdout/stderr) is a temp folder under the data folder (on disk, unless
--workdir), removed at the end. Both inputs are read once before their rows (page cache warm).
`--scale` multiplies both data sizes (0.1: 500,000 records, 200 MB); `--quick` is scale 0.004
and one run of each (a smoke test of seconds).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from bench import bench_planned
from bench._common import DATA_DIR, job_env, print_table, run_measured

ROOT = Path(__file__).resolve().parent.parent
JOBS = ("build_index", "reshard", "mix", "parquet_to_tfrecord", "tfrecord_to_parquet")
SCRIPTS = {"tfrecord-beam": "tfrecord_beam.cli", "tfrecord2idx": "tfrecord_beam.tools.tfrecord2idx"}
STEPS = ("help", "tiny", "tools", "jobs")
FULL_SMALL_RECORDS = 5_000_000  # the issue's "1 GB of 5 M small records"
FULL_JOB_BYTES = 2_000_000_000  # the issue's "2 GB of 16 KiB records"
QUICK_SCALE = 0.004
TOKENS = 40  # int values per small record: ~203 bytes a frame, 5 M records ~1.0 GB
HELP_TARGET_S = 0.5
TOOLS_TARGET_X = 3.0  # inspect and schema within 3x count's time
PROGRESS_EVERY_S = 10.0  # at most one progress line per 10 s when stderr is not a terminal
#: A `tfrecord-beam` progress line (`cli._format.Progress`): "[1/1] PATH: 123 records, 4.5 MB, 11 s".
PROGRESS_LINE = re.compile(r"^\[\d+/\d+\] .+: \d+ records, (?:.+, )?\d+ s$", re.MULTILINE)


# -- the issue's figures ---------------------------------------------------------------------------


class Figure(NamedTuple):
    """A figure as the issue states it: seconds, a range (low < high) or one value."""

    low: float
    high: float

    def text(self) -> str:
        if self.low == self.high:
            return f"{self.low:g} s"
        return f"{self.low:g}-{self.high:g} s"

    def ratio(self, seconds: float) -> str:
        """now / the issue's figure ("0.05-0.06x" against a range)."""
        if self.low == self.high:
            return f"{seconds / self.low:.2f}x"
        return f"{seconds / self.high:.2f}-{seconds / self.low:.2f}x"


ISSUE = {
    "help": Figure(2.1, 2.7),
    "tiny": Figure(3.2, 4.2),
    "inspect": Figure(208.0, 208.0),
    "reshard": Figure(8.9, 8.9),
    "mix": Figure(37.0, 37.0),
    "shuffle": Figure(15.2, 15.2),
}


# -- measuring one command ---------------------------------------------------------------------------


class Run(NamedTuple):
    wall: float  # seconds, start to exit
    cpu: float  # user + system seconds of the process tree
    rss: int  # bytes: the highest summed RSS of the tree seen
    stderr: str


def measure(cmd: Sequence[str], cwd: Path, timeout: float = 3600.0) -> Run:
    """Run `cmd` to its end from `cwd` (`_common.run_measured`): its wall, CPU and peak RSS. A
    failure raises, naming the command and the end of its stderr."""
    got = run_measured(cmd, cwd=str(cwd), env=job_env(), timeout=timeout)
    if got.returncode != 0:
        tail = "\n".join(got.stderr.splitlines()[-5:])
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed with status {got.returncode}:\n{tail}")
    return Run(got.wall, got.cpu, got.peak_rss, got.stderr)


def progress_lines(stderr: str) -> int:
    """How many `tfrecord-beam` progress lines `stderr` holds."""
    return len(PROGRESS_LINE.findall(stderr))


def progress_allowed(seconds: float) -> int:
    """The most progress lines a command of `seconds` may write (one each 10 s, the first at once)."""
    return max(1, math.ceil(seconds / PROGRESS_EVERY_S))


# -- the commands ----------------------------------------------------------------------------------


def script(name: str) -> Tuple[List[str], str]:
    """(argv, label) of a console script: the one installed beside this interpreter, as a user
    runs it, else its module through this interpreter (the label says so)."""
    path = Path(sys.executable).parent / name
    if path.exists():
        return [str(path)], name
    return [sys.executable, "-m", SCRIPTS[name]], f"{name} (as python -m {SCRIPTS[name]}: no script beside python)"


def job(name: str, *args: object) -> List[str]:
    return [sys.executable, "-m", f"pipelines.{name}", *map(str, args)]


def help_commands() -> List[Tuple[str, List[str]]]:
    """(label, argv) of every `--help` the issue times: the five jobs, then the tools."""
    out = [(f"`python -m pipelines.{j} --help`", job(j, "--help")) for j in JOBS]
    beam, beam_label = script("tfrecord-beam")
    idx, idx_label = script("tfrecord2idx")
    out.append((f"`{beam_label} --help`", beam + ["--help"]))
    out.append((f"`{beam_label} inspect --help`", beam + ["inspect", "--help"]))
    out.append((f"`{idx_label} --help`", idx + ["--help"]))
    return out


# -- data --------------------------------------------------------------------------------------------


def small_columns(first: int, n: int, seed: int = 0) -> Dict[str, object]:
    """Columns of `n` small Examples from record number `first`: id int, label float, tokens
    TOKENS ints < 50,000, name bytes (~203 bytes a frame)."""
    rng = np.random.default_rng([seed, first])
    return {
        "id": np.arange(first, first + n, dtype=np.int64),
        "label": rng.random(n, dtype=np.float32),
        "tokens": rng.integers(0, 50_000, size=(n, TOKENS)),
        "name": np.array([b"name-%07d" % i for i in range(first, first + n)], dtype=object),
    }


def write_small_records(path: Path, n: int, batch: int = 65_536) -> None:
    """`n` small Examples framed as TFRecords into `path` (no index), batch by batch."""
    from tfrecord_beam import columnar

    with open(path, "wb") as out:
        for first in range(0, n, batch):
            out.write(columnar.encode_examples(small_columns(first, min(batch, n - first)), framed=True))


def small_records(n: int) -> Path:
    """The tools' input: one file of `n` small Examples, no index beside it (made once, cached;
    written to a temp name first so an interrupted run leaves no partial file to reuse)."""
    path = DATA_DIR / f"first-hour-small-{n}.tfrecord"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        write_small_records(partial, n)
        os.replace(partial, path)
    return path


def warm(paths: Sequence[Path]) -> None:
    """Read the files once, so every row starts with its input in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 << 20):
                pass


# -- rows --------------------------------------------------------------------------------------------


HEADER = ["step", "runs", "wall s", "CPU s", "peak RSS MiB", "load", "issue's figure", "now / issue", "target"]


class Row(NamedTuple):
    step: str
    runs: List[Run]
    load: float
    figure: Optional[Figure]
    target: str
    scale: float = 1.0  # the data's size against the issue's (no ratio to its figure unless 1)

    @property
    def wall(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)

    def ratio(self) -> str:
        if self.figure is None:
            return "-"
        if self.scale != 1.0:
            return f"- (scale {self.scale:g})"
        return self.figure.ratio(self.wall)

    def cells(self) -> List[str]:
        return [
            self.step,
            str(len(self.runs)),
            f"{self.wall:.2f}",
            f"{self.cpu:.2f}",
            f"{max(r.rss for r in self.runs) / 2**20:,.0f}",
            f"{self.load:.1f}",
            "-" if self.figure is None else self.figure.text(),
            self.ratio(),
            self.target,
        ]


def data_size(nbytes: int) -> str:
    """Decimal, as the issue writes sizes: '1.02 GB', '204.8 MB'."""
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:,.1f} MB"


def met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def repeat(cmd: Sequence[str], cwd: Path, runs: int) -> Tuple[List[Run], float]:
    """`runs` measured runs of one command and the load average before the first."""
    load = os.getloadavg()[0]
    return [measure(cmd, cwd) for _ in range(runs)], load


def help_rows(work: Path, runs: int) -> List[Row]:
    rows = []
    for label, cmd in help_commands():
        measured, load = repeat(cmd, work, runs)
        wall = statistics.median(r.wall for r in measured)
        rows.append(Row(label, measured, load, ISSUE["help"], f"< {HELP_TARGET_S} s: {met(wall < HELP_TARGET_S)}"))
    return rows


def tiny_rows(work: Path, runs: int) -> List[Row]:
    """`python -m pipelines.reshard` of 8 records into 2 shards, a fresh output each run."""
    from tfrecord_beam import columnar

    source = work / "eight.tfrecord"
    source.write_bytes(columnar.encode_examples(small_columns(0, 8), framed=True))
    load = os.getloadavg()[0]
    measured = []
    for k in range(runs):
        measured.append(
            measure(
                job("reshard", "--input", source, "--output_prefix", work / f"tiny{k}" / "r", "--num_shards", 2), work
            )
        )
        shutil.rmtree(work / f"tiny{k}", ignore_errors=True)
    return [Row("`python -m pipelines.reshard` of 8 records (2 shards)", measured, load, ISSUE["tiny"], "-")]


def tool_rows(work: Path, runs: int, records: int, scale: float = 1.0) -> List[Row]:
    """count, inspect, schema of the small records, each command's runs in a row."""
    data = small_records(records)
    warm([data])
    beam, label = script("tfrecord-beam")
    about = f"{data_size(data.stat().st_size)}, {records:,} small records, no index"
    measured = {}
    for command in ("count", "inspect", "schema"):
        measured[command] = repeat(beam + [command, str(data)], work, runs)
    count_wall = statistics.median(r.wall for r in measured["count"][0])
    count_cpu = statistics.median(r.cpu for r in measured["count"][0])
    rows = []
    for command, (done, load) in measured.items():
        lines = [(progress_lines(r.stderr), progress_allowed(r.wall)) for r in done]
        worst = max(lines, key=lambda pair: pair[0] - pair[1])
        target = f"progress lines {worst[0]} (at most {worst[1]}): {met(worst[0] <= worst[1])}"
        if command != "count":
            wall = statistics.median(r.wall for r in done)
            cpu = statistics.median(r.cpu for r in done)
            x = wall / count_wall
            target = (
                f"<= {TOOLS_TARGET_X:g}x count's time: {x:.2f}x (CPU {cpu / count_cpu:.2f}x): "
                f"{met(x <= TOOLS_TARGET_X)}; {target}"
            )
        rows.append(Row(f"`{label} {command}` ({about})", done, load, ISSUE.get(command), target, scale))
    return rows


def job_rows(work: Path, runs: int, total_bytes: int, scale: float = 1.0) -> List[Row]:
    """reshard, mix 3:1, reshard --shuffle of bench_planned's 16 KiB records, interleaved (one
    run of each in turn) so that all three see the same load; outputs removed after each run."""
    files = bench_planned.dataset(16384, total_bytes)
    warm(files)
    nbytes = sum(f.stat().st_size for f in files)
    records = nbytes // (16384 + 16)
    argv = {
        "reshard": job("reshard", *bench_planned.reshard_args(files, work / "rs" / "r")),
        "mix": job("mix", *bench_planned.mix_args(files, records, work / "mx" / "m")),
        "shuffle": job("reshard", *bench_planned.reshard_args(files, work / "sh" / "s", shuffle=True)),
    }
    measured: Dict[str, List[Run]] = {k: [] for k in argv}
    load = os.getloadavg()[0]
    for _ in range(runs):
        for key, cmd in argv.items():
            measured[key].append(measure(cmd, work))
            shutil.rmtree(work / {"reshard": "rs", "mix": "mx", "shuffle": "sh"}[key], ignore_errors=True)
    about = f"{data_size(nbytes)} of 16 KiB records, {bench_planned.SHARDS} shards, on disk"
    shuffle = Row(f"reshard --shuffle ({about})", measured["shuffle"], load, ISSUE["shuffle"], "-", scale)
    mix = Row(f"mix 3:1 ({about})", measured["mix"], load, ISSUE["mix"], "", scale)
    x = mix.wall / shuffle.wall
    mix = mix._replace(
        target=f"<= reshard --shuffle's time: {x:.2f}x (CPU {mix.cpu / shuffle.cpu:.2f}x): {met(x <= 1.0)}"
    )
    return [Row(f"reshard ({about})", measured["reshard"], load, ISSUE["reshard"], "-", scale), mix, shuffle]


# -- the run -----------------------------------------------------------------------------------------


def engine() -> str:
    """What `python -m pipelines.reshard --version` says (the version and the engine in use)."""
    out = subprocess.run(job("reshard", "--version"), env=job_env(), capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).strip()


def run(
    scale: float = 1.0,
    steps: Sequence[str] = STEPS,
    help_runs: int = 3,
    tiny_runs: int = 3,
    tool_runs: int = 1,
    job_runs: int = 1,
    workdir: Optional[str] = None,
) -> str:
    """Measure the steps and print (and return) the table."""
    started = datetime.datetime.now(datetime.timezone.utc)
    base = Path(workdir) if workdir else DATA_DIR
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="first_hour_", dir=str(base)))
    rows: List[Row] = []
    try:
        if "help" in steps:
            rows += help_rows(work, help_runs)
        if "tiny" in steps:
            rows += tiny_rows(work, tiny_runs)
        if "tools" in steps:
            rows += tool_rows(work, tool_runs, max(1, round(FULL_SMALL_RECORDS * scale)), scale)
        if "jobs" in steps:
            rows += job_rows(work, job_runs, int(FULL_JOB_BYTES * scale), scale)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    title = (
        f"A user's first hour (issue 23), {started:%Y-%m-%d %H:%M} UTC, scale {scale:g}, "
        f"{os.cpu_count()} CPUs, {engine()}"
    )
    print(
        "wall: median of the runs, start-up included; CPU s: median, user + system of the whole "
        "process tree; peak RSS: the largest of the runs, summed over the tree; load: 1-minute "
        "load average before the row's first run; now / issue: wall against the issue's figure"
    )
    return print_table(title, HEADER, [r.cells() for r in rows])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"scale {QUICK_SCALE:g}, one run of each (seconds)")
    parser.add_argument("--scale", type=float, default=None, help="data sizes as a fraction of the issue's (default 1)")
    parser.add_argument("--help-runs", type=int, default=None, help="runs of each --help (default 3)")
    parser.add_argument("--tiny-runs", type=int, default=None, help="runs of the 8-record job (default 3)")
    parser.add_argument("--tool-runs", type=int, default=None, help="runs of count/inspect/schema (default 1)")
    parser.add_argument("--job-runs", type=int, default=None, help="runs of each 2 GB job (default 1)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    parser.add_argument("--workdir", default=None, help="where the temp work folder goes (default: the data folder)")
    args = parser.parse_args(argv)
    steps = args.steps.split(",")
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown step(s) {unknown}; the steps are {list(STEPS)}")
    one = 1 if args.quick else None

    def runs(given: Optional[int], default: int) -> int:
        return given if given is not None else (one or default)

    run(
        args.scale if args.scale is not None else (QUICK_SCALE if args.quick else 1.0),
        steps,
        runs(args.help_runs, 3),
        runs(args.tiny_runs, 3),
        runs(args.tool_runs, 1),
        runs(args.job_runs, 1),
        args.workdir,
    )


if __name__ == "__main__":
    main()
