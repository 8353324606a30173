"""Planned jobs end to end on DirectRunner (unshuffled reshard, mix, build_index), each beside a
plain Python loop over RecordReader -> RecordWriter(s) doing the same job in the same run,
with the peak RSS of the whole process tree (sampled from /proc) and 1 vs 2 workers.

    python -m bench.bench_planned [--gb 2] [--small] [--jobs reshard,build_index,mix] [--workdir DIR]

Inputs (cached under bench/_data): 8 files of 16 KiB records and 8 files of 150-byte records,
`--gb` GB each set (`--small`: 0.2 GB). Throughput is input bytes (or records) per second of
the whole command, start-up and the checksum proof included.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Tuple

import numpy as np

from bench._common import DATA_DIR, print_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _rss import PeakRSS  # noqa: E402  (the tests' sampler: one implementation)

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
    for k, path in enumerate(paths):
        starts = rng.integers(0, len(pool) - payload, per_file).tolist()
        with RecordWriter(str(path)) as writer:
            for a in range(0, per_file, 65536):
                writer.write_many([pool[s : s + payload] for s in starts[a : a + 65536]])
    return paths


def measure(fn: Callable[[], None]) -> Tuple[float, int]:
    """(seconds, peak RSS of the process tree) of fn(), its output swallowed."""
    with PeakRSS(interval=0.05) as rss:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            fn()
        seconds = time.perf_counter() - start
    return seconds, rss.peak


def _job(main, argv) -> Callable[[], None]:
    def run():
        code = main(argv)
        if code != 0:
            raise RuntimeError(f"{main.__module__} {argv} failed with status {code}")
    return run


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

def _row(what, seconds, peak, nbytes, records, ref=None):
    return [what, f"{seconds:.2f}", f"{nbytes / seconds / 1e6:,.0f}", f"{records / seconds / 1e6:.2f}",
            f"{peak / 2**20:,.0f}", "" if ref is None else f"{ref / seconds:.2f}x"]


HEADER = ["what", "seconds", "MB/s", "M records/s", "peak RSS MiB", "vs plain loop"]


def run(gb: float, jobs: List[str], skip_plain: bool = False, workdir: str = None) -> str:
    from pipelines import build_index, mix, reshard

    total = int(gb * 1e9)
    text = ""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_planned_", dir=workdir or str(DATA_DIR)))
    try:
        for payload in (16384, 150):
            files = dataset(payload, total)
            nbytes = sum(f.stat().st_size for f in files)
            records = nbytes // (payload + 16)
            pattern = str(files[0].parent / "in-*.tfrecord")
            label = f"{payload // 1024} KiB" if payload >= 1024 else f"{payload} B"
            if "reshard" in jobs:
                rows = []
                plain = None
                if not skip_plain:
                    (tmp / "plain").mkdir(parents=True, exist_ok=True)
                    plain, peak = measure(lambda: plain_reshard(files, str(tmp / "plain" / "r"), SHARDS))
                    rows.append(_row("plain loop: RecordReader -> RecordWriter(index) per record", plain, peak, nbytes, records))
                    shutil.rmtree(tmp / "plain")
                times = {}
                for name, runner in (("1 worker", ONE), ("2 workers (multi_processing)", TWO)):
                    out = tmp / "rs"
                    seconds, peak = measure(_job(reshard.main, ["--input", pattern, "--output_prefix", str(out / "r"),
                                                                "--num_shards", str(SHARDS)] + runner))
                    times[name] = seconds
                    rows.append(_row(f"reshard (this job, with proof), {name}", seconds, peak, nbytes, records, plain))
                    shutil.rmtree(out)
                ratio = times["1 worker"] / times["2 workers (multi_processing)"]
                text += print_table(f"reshard into {SHARDS} contiguous shards, {label} records, {nbytes / 1e9:.2f} GB, "
                                    f"2 workers / 1 worker speed-up {ratio:.2f}x", HEADER, rows)
            if "build_index" in jobs:
                rows = []
                plain = None
                if not skip_plain:
                    plain, peak = measure(lambda: plain_build_index(files, tmp / "pidx"))
                    rows.append(_row("plain loop: index.create_index per file", plain, peak, nbytes, records))
                    shutil.rmtree(tmp / "pidx")
                times = {}
                for name, runner in (("1 worker", ONE), ("2 workers (multi_processing)", TWO)):
                    seconds, peak = measure(_job(build_index.main, ["--input", pattern, "--output_dir", str(tmp / "idx")] + runner))
                    times[name] = seconds
                    rows.append(_row(f"build_index (this job), {name}", seconds, peak, nbytes, records, plain))
                    shutil.rmtree(tmp / "idx")
                ratio = times["1 worker"] / times["2 workers (multi_processing)"]
                text += print_table(f"build_index, {label} records, {nbytes / 1e9:.2f} GB, 2 workers / 1 worker "
                                    f"speed-up {ratio:.2f}x", HEADER, rows)
            if "mix" in jobs and payload >= 1024:
                rows = []
                a = str(files[0].parent / "in-[0-5].tfrecord")
                b = str(files[0].parent / "in-[67].tfrecord")
                times = {}
                for name, runner in (("1 worker", ONE), ("2 workers (multi_processing)", TWO)):
                    out = tmp / "mx"
                    seconds, peak = measure(_job(mix.main, ["--source", a + "=3", "--source", b + "=1", "--total_records",
                                                            str(records), "--output_prefix", str(out / "m"),
                                                            "--num_shards", str(SHARDS), "--seed", "1"] + runner))
                    times[name] = seconds
                    rows.append(_row(f"mix 3:1 (select, shuffle within shards, proof), {name}", seconds, peak, nbytes, records))
                    shutil.rmtree(out)
                ratio = times["1 worker"] / times["2 workers (multi_processing)"]
                text += print_table(f"mix two sources 3:1 into {SHARDS} shards, {label} records, {records:,} out, "
                                    f"2 workers / 1 worker speed-up {ratio:.2f}x", HEADER, rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GB per input set (default 2)")
    parser.add_argument("--small", action="store_true", help="0.2 GB per input set (a quick run)")
    parser.add_argument("--jobs", default="reshard,build_index,mix", help="comma-separated subset")
    parser.add_argument("--skip-plain", action="store_true", help="skip the plain loops")
    parser.add_argument("--workdir", default=None,
                        help="where outputs go (default: beside the inputs; e.g. /dev/shm to measure past a slow disk)")
    args = parser.parse_args(argv)
    run(0.2 if args.small else args.gb, args.jobs.split(","), args.skip_plain, args.workdir)


if __name__ == "__main__":
    main()
