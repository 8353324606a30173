"""Planned jobs end to end on DirectRunner (unshuffled reshard, mix, build_index), each beside a
plain Python loop over RecordReader -> RecordWriter(s) doing the same job in the same run,
with the peak RSS of the whole process tree (sampled from /proc) and 1 vs 2 workers. Every
run is a fresh interpreter (no run inherits another's memory); seconds are medians.

    python -m bench.bench_planned [--gb 2] [--small] [--jobs reshard,build_index,mix]
                                  [--workdir DIR] [--repeats 3]

Inputs (cached under bench/_data, or $TFRECORD_BEAM_BENCH_DATA): 8 files of 16 KiB records and 8 files of 150-byte records,
`--gb` GB each set (`--small`: 0.2 GB). Throughput is input bytes (or records) per second of
the whole job, the survey, Beam's start-up and the checksum proof included.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

import numpy as np

from bench._common import DATA_DIR, job_env, print_table, run_measured

ROOT = Path(__file__).resolve().parent.parent

ONE = ["--runner=DirectRunner"]
TWO = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
SHARDS = 8


def dataset(payload: int, total: int, files: int = 8) -> List[Path]:
    """`files` files of `payload`-byte random records, `total` bytes in all (cached)."""
    from tfrecord_beam.records import RecordWriter

    directory = DATA_DIR / f"planned-{payload}-{total}"
    paths = [directory / f"in-{k}.tfrecord" for k in range(files)]
    if all(p.exists() for p in paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(payload)
    pool = rng.bytes(16 << 20)
    per_file = total // files // (payload + 16)
    for path in paths:
        starts = rng.integers(0, len(pool) - payload, per_file).tolist()
        with RecordWriter(str(path)) as writer:
            for a in range(0, per_file, 65536):
                writer.write_many([pool[s : s + payload] for s in starts[a : a + 65536]])
    return paths


def reshard_args(files: List[Path], prefix, shuffle: bool = False) -> list:
    """reshard's arguments over all of `files` (a `dataset`) into SHARDS shards under `prefix`;
    `shuffle`: reshard --shuffle, seed 1 (bench_first_hour runs the same jobs)."""
    args = ["--input", str(files[0].parent / "in-*.tfrecord"), "--output_prefix", prefix, "--num_shards", SHARDS]
    return args + (["--shuffle", "--seed", 1] if shuffle else [])


def mix_args(files: List[Path], records: int, prefix) -> list:
    """mix 3:1's arguments: `files` 0-5 of a `dataset` weighted 3, 6-7 weighted 1, `records` out
    (as many as in), SHARDS shards under `prefix`, seed 1."""
    a = str(files[0].parent / "in-[0-5].tfrecord")
    b = str(files[0].parent / "in-[67].tfrecord")
    return ["--source", a + "=3", "--source", b + "=1", "--total_records", records] + [
        "--output_prefix",
        prefix,
        "--num_shards",
        SHARDS,
        "--seed",
        1,
    ]


def measure(kind: str, *args) -> Tuple[float, int, float, dict]:
    """(seconds, peak RSS of the process tree, CPU seconds, bytes moved) of one run in a fresh
    interpreter: `kind` is a pipelines module or a plain loop. Seconds are timed in the child
    around the job alone; CPU seconds (user + system) are the whole tree's, start-up and workers
    included, from the kernel's accounting (the steady measure on a shared machine). Bytes moved
    are the child's own /proc/self/io counters at its end (`rchar`/`wchar`: bytes passed to
    read and write calls, page cache or not; `read_bytes`/`write_bytes`: what reached the
    disk): the whole job with 1 worker, only the main process with more."""
    cmd = [sys.executable, "-m", "bench.bench_planned", "--one", json.dumps([kind, [str(a) for a in args]])]
    got = run_measured(cmd, cwd=str(ROOT), env=job_env(), interval=0.05)
    if got.returncode != 0:
        raise RuntimeError(f"{kind} {args} failed with status {got.returncode}")
    result = json.loads(got.stdout.strip().splitlines()[-1])
    return result["seconds"], got.peak_rss, got.cpu, result.get("io", {})


def _run_one(spec: str) -> None:
    kind, args = json.loads(spec)
    if kind == "plain_reshard":

        def fn():
            plain_reshard([Path(a) for a in args[:-2]], args[-2], int(args[-1]))
    elif kind == "plain_build_index":

        def fn():
            plain_build_index([Path(a) for a in args[:-1]], Path(args[-1]))
    else:
        import importlib

        main = importlib.import_module(f"pipelines.{kind}").main

        def fn():
            if main(args) != 0:
                raise RuntimeError(f"{kind} {args} failed")

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        fn()
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "io": _own_io()}))


def _own_io() -> dict:
    """This process's /proc/self/io counters (empty where there is none)."""
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


def median_run(repeats: int, kind: str, *args, cleanup=None) -> Tuple[float, int, float]:
    """Median seconds, the largest peak RSS and the median CPU seconds of `repeats` runs."""
    runs = []
    for _ in range(repeats):
        runs.append(measure(kind, *args))
        if cleanup is not None:
            cleanup()
    return float(np.median([r[0] for r in runs])), max(r[1] for r in runs), float(np.median([r[2] for r in runs]))


# --- the plain loops ---------------------------------------------------------------------------


def plain_reshard(files: List[Path], prefix: str, shards: int) -> None:
    """The same job as a user would write it: count, then copy record by record into contiguous
    shards with indexes (no proof)."""
    from tfrecord_beam.records import RecordReader, RecordWriter

    total = sum(len(c) for f in files for c in RecordReader(str(f), verify=False).chunks())
    bounds = [total * (s + 1) // shards for s in range(shards)]
    shard, done = 0, 0
    writer = RecordWriter(f"{prefix}-{0:05d}-of-{shards:05d}.tfrecord", index_path=True)
    for f in files:
        for payload in RecordReader(str(f)):
            while done >= bounds[shard]:
                writer.close()
                shard += 1
                writer = RecordWriter(f"{prefix}-{shard:05d}-of-{shards:05d}.tfrecord", index_path=True)
            writer.write(payload)
            done += 1
    writer.close()
    for s in range(shard + 1, shards):
        RecordWriter(f"{prefix}-{s:05d}-of-{shards:05d}.tfrecord", index_path=True).close()


def plain_build_index(files: List[Path], out_dir: Path) -> None:
    """The core's sequential index build, file after file (length CRCs checked)."""
    from tfrecord_beam.index import create_index

    out_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        create_index(str(f), str(out_dir / (f.stem + ".tfindex")))


# --- the run -------------------------------------------------------------------------------------


def _row(what, seconds, peak, nbytes, records, ref=None, cpu=float("nan")):
    return [
        what,
        f"{seconds:.2f}",
        f"{cpu:.2f}",
        f"{nbytes / seconds / 1e6:,.0f}",
        f"{records / seconds / 1e6:.2f}",
        f"{peak / 2**20:,.0f}",
        "" if ref is None else f"{ref / seconds:.2f}x",
    ]


HEADER = ["what", "seconds", "CPU s (tree)", "MB/s", "M records/s", "peak RSS MiB", "vs plain loop"]


def run(
    gb: float,
    jobs: List[str],
    skip_plain: bool = False,
    workdir: str = None,
    repeats: int = 3,
    payloads: Tuple[int, ...] = (16384, 150),
) -> str:
    total = int(gb * 1e9)
    text = ""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_planned_", dir=workdir or str(DATA_DIR)))
    workers = (("1 worker", ONE), ("2 workers (multi_processing)", TWO))

    def clean(name):
        return lambda: shutil.rmtree(tmp / name, ignore_errors=True)

    def table(title, rows, times):
        ratio = times[workers[0][0]] / times[workers[1][0]]
        return print_table(f"{title}, 2 workers / 1 worker speed-up {ratio:.2f}x", HEADER, rows)

    try:
        for payload in payloads:
            files = dataset(payload, total)
            nbytes = sum(f.stat().st_size for f in files)
            records = nbytes // (payload + 16)
            pattern = str(files[0].parent / "in-*.tfrecord")
            label = f"{payload // 1024} KiB" if payload >= 1024 else f"{payload} B"
            if "reshard" in jobs:
                rows, times, plain = [], {}, None
                if not skip_plain:
                    (tmp / "plain").mkdir(parents=True, exist_ok=True)
                    plain, peak, cpu = median_run(
                        repeats,
                        "plain_reshard",
                        *files,
                        tmp / "plain" / "r",
                        SHARDS,
                        cleanup=lambda: [p.unlink() for p in (tmp / "plain").iterdir()],
                    )
                    rows.append(
                        _row(
                            "plain loop: RecordReader -> RecordWriter(index) per record",
                            plain,
                            peak,
                            nbytes,
                            records,
                            cpu=cpu,
                        )
                    )
                for name, runner in workers:
                    seconds, peak, cpu = median_run(
                        repeats, "reshard", *reshard_args(files, tmp / "rs" / "r"), *runner, cleanup=clean("rs")
                    )
                    times[name] = seconds
                    rows.append(
                        _row(f"reshard (this job, with proof), {name}", seconds, peak, nbytes, records, plain, cpu)
                    )
                text += table(
                    f"reshard into {SHARDS} contiguous shards, {label} records, {nbytes / 1e9:.2f} GB", rows, times
                )
            if "build_index" in jobs:
                rows, times, plain = [], {}, None
                if not skip_plain:
                    plain, peak, cpu = median_run(
                        repeats, "plain_build_index", *files, tmp / "pidx", cleanup=clean("pidx")
                    )
                    rows.append(_row("plain loop: index.create_index per file", plain, peak, nbytes, records, cpu=cpu))
                for name, runner in workers:
                    seconds, peak, cpu = median_run(
                        repeats,
                        "build_index",
                        "--input",
                        pattern,
                        "--output_dir",
                        tmp / "idx",
                        *runner,
                        cleanup=clean("idx"),
                    )
                    times[name] = seconds
                    rows.append(_row(f"build_index (this job), {name}", seconds, peak, nbytes, records, plain, cpu))
                text += table(f"build_index, {label} records, {nbytes / 1e9:.2f} GB", rows, times)
            if "mix" in jobs and payload >= 1024:
                rows, times = [], {}
                for name, runner in workers:
                    seconds, peak, cpu = median_run(
                        repeats, "mix", *mix_args(files, records, tmp / "mx" / "m"), *runner, cleanup=clean("mx")
                    )
                    times[name] = seconds
                    rows.append(
                        _row(
                            f"mix 3:1 (select, shuffle within shards, proof), {name}",
                            seconds,
                            peak,
                            nbytes,
                            records,
                            cpu=cpu,
                        )
                    )
                text += table(
                    f"mix two sources 3:1 into {SHARDS} shards, {label} records, {records:,} out", rows, times
                )
            if "mix_vs_shuffle" in jobs and payload >= 1024:
                text += mix_vs_shuffle(files, records, nbytes, label, tmp, repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return text


def mix_vs_shuffle(files: List[Path], records: int, nbytes: int, label: str, tmp: Path, repeats: int) -> str:
    """mix 3:1 (as many records out as in) against reshard --shuffle of the same files into the
    same shards, 1 worker, runs interleaved (mix, shuffle, mix, ...) so that both see the same
    load; the 1-minute load average before each pair is printed beside the medians."""
    mixing = mix_args(files, records, tmp / "mx" / "m") + ONE
    shuffling = reshard_args(files, tmp / "sh" / "s", shuffle=True) + ONE
    runs = {"mix": [], "shuffle": []}
    loads = []
    for _ in range(repeats):
        loads.append(os.getloadavg()[0])
        runs["mix"].append(measure("mix", *mixing))
        shutil.rmtree(tmp / "mx", ignore_errors=True)
        runs["shuffle"].append(measure("reshard", *shuffling))
        shutil.rmtree(tmp / "sh", ignore_errors=True)
    rows = []
    for what, key in (("mix 3:1 (select, shuffle within shards, proof)", "mix"), ("reshard --shuffle", "shuffle")):
        seconds = float(np.median([r[0] for r in runs[key]]))
        cpu = float(np.median([r[2] for r in runs[key]]))
        peak = max(r[1] for r in runs[key])
        moved = [f"{np.median([r[3].get(k, 0) for r in runs[key]]) / nbytes:.2f}x" for k in IO_KEYS]
        rows.append(_row(f"{what}, 1 worker", seconds, peak, nbytes, records, cpu=cpu)[:-1] + moved)
    each = "; ".join(
        f"mix {m[0]:.1f} s, {m[2]:.1f} s CPU / shuffle {s[0]:.1f} s, {s[2]:.1f} s CPU (load {ld:.1f})"
        for m, s, ld in zip(runs["mix"], runs["shuffle"], loads)
    )
    print(f"runs: {each}")
    return print_table(
        f"mix 3:1 vs reshard --shuffle into {SHARDS} shards, {label} records, {nbytes / 1e9:.2f} GB, "
        f"medians of {repeats} interleaved runs, load {min(loads):.1f}-{max(loads):.1f} "
        "(bytes moved: the job process's /proc/self/io, as multiples of the input)",
        HEADER[:-1] + [f"{k} / input" for k in IO_KEYS],
        rows,
    )


IO_KEYS = ("rchar", "wchar", "write_bytes")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GB per input set (default 2)")
    parser.add_argument("--small", action="store_true", help="0.2 GB per input set (a quick run)")
    parser.add_argument(
        "--jobs", default="reshard,build_index,mix", help="comma-separated subset (also: mix_vs_shuffle)"
    )
    parser.add_argument("--skip-plain", action="store_true", help="skip the plain loops")
    parser.add_argument(
        "--workdir",
        default=None,
        help="where outputs go (default: beside the inputs; e.g. /dev/shm to measure past a slow disk)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (median seconds, largest peak RSS)")
    parser.add_argument("--payloads", default="16384,150", help="payload sizes of the input sets")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one measured run
    args = parser.parse_args(argv)
    if args.one:
        _run_one(args.one)
        return
    run(
        0.2 if args.small else args.gb,
        args.jobs.split(","),
        args.skip_plain,
        args.workdir,
        args.repeats,
        tuple(int(p) for p in args.payloads.split(",")),
    )


if __name__ == "__main__":
    main()
