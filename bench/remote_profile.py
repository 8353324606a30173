"""Where a remote epoch's CPU goes beside a local one's (issue 35): one epoch at 0 DataLoader
workers of tfrecord_beam's TFRecordDataset over bench/remote.py's 110 KB dataset, from local
disk and from versitygw on loopback (with `cache_dir=`: epoch 1 fills it, epoch 2 reads it).

    python -m bench.remote_profile [--data 110k] [--size-mb 200] [--top 18] [--py-spy PATH]

For each of local, loopback epoch 1 and loopback epoch 2 (from the cache) it prints the CPU
seconds of the process (every thread: the read-ahead's requests run on a thread pool) and the
functions of the main thread that cost most (cProfile, by own time). With `--py-spy` (the
py-spy binary) it also samples every thread, native frames included, and prints the leaf
functions that cost most across threads (where pyarrow's S3 client spends its time).
Run bench/remote.py once first: it writes the data.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import remote
from bench._common import DATA_DIR


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def epoch(spec: dict, profile: bool, top: int) -> None:
    """One epoch per `spec["epochs"]` entry; prints CPU seconds and (profile) the top functions."""
    from tfrecord_beam.torch import TFRecordDataset

    extra = {"cache_dir": spec["cache_dir"]} if spec.get("cache_dir") else {}
    ds = TFRecordDataset(spec["data"], spec["index"], remote.DESCRIPTION, batch_size=64, **extra)
    for name in spec["epochs"]:
        prof = cProfile.Profile() if profile else None
        cpu, wall = _cpu(), time.perf_counter()
        if prof:
            prof.enable()
        n = sum(len(b["index"]) for b in ds)
        if prof:
            prof.disable()
        cpu, wall = _cpu() - cpu, time.perf_counter() - wall
        print(f"== {name}: {n} records, {wall:.2f} s wall, {cpu:.2f} s CPU (all threads)", flush=True)
        if prof:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
            lines = out.getvalue().splitlines()
            start = next(i for i, line in enumerate(lines) if "ncalls" in line)
            print("\n".join(lines[start : start + top + 1]), flush=True)


def leaves(raw: Path, top: int) -> None:
    """The leaf frames py-spy sampled most, over every thread (its raw format: stack count)."""
    counts: "collections.Counter[str]" = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        counts[frames[-1].split(" (")[0][:90]] += int(n)
        total += int(n)
    print(f"-- py-spy, every thread, {total} samples: leaf functions", flush=True)
    for name, n in counts.most_common(top):
        print(f"  {n / max(total, 1):6.1%}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", default="110k", choices=sorted(remote.IMAGE))
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--top", type=int, default=18)
    parser.add_argument("--py-spy", default=None, help="path of the py-spy binary (optional)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        epoch(spec, spec["profile"], args.top)
        return
    server_dir = DATA_DIR / "remote" / "server"
    tfr, _, n, size = remote.make_data(server_dir, args.data, args.size_mb, with_peer=False)
    print(f"{args.data}: {n:,} records, {size / 1e6:,.0f} MB", flush=True)
    loop = remote.s3server.start_local(server_dir, log_name="profile.log")
    cache = Path(tempfile.mkdtemp(prefix="tfrb-profile-"))
    try:
        env = remote._env(loop)
        cases = [
            (
                "local",
                dict(os.environ, PYTHONPATH=remote._pythonpath()),
                remote.tfrecord_paths(tfr, "local", "", server_dir),
                ["local e1", "local e2"],
                None,
            ),
            (
                "loopback",
                env,
                remote.tfrecord_paths(tfr, "s3", loop.query, server_dir),
                ["loopback e1", "loopback e2 (cache)"],
                str(cache),
            ),
        ]
        for profile in (True, False) if args.py_spy else (True,):
            for name, case_env, (data, index), epochs, cache_dir in cases:
                shutil.rmtree(cache, ignore_errors=True)
                spec = {"data": data, "index": index, "epochs": epochs, "cache_dir": cache_dir, "profile": profile}
                cmd = [
                    sys.executable,
                    "-m",
                    "bench.remote_profile",
                    "--top",
                    str(args.top),
                    "--child",
                    json.dumps(spec),
                ]
                if profile:
                    subprocess.run(cmd, env=case_env, cwd=remote.ROOT, check=True)
                    continue
                raw = cache.parent / f"tfrb-profile-{name}.txt"
                spy = [
                    args.py_spy,
                    "record",
                    "--native",
                    "--threads",
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "-o",
                    str(raw),
                    "--",
                ]
                subprocess.run(spy + cmd, env=case_env, cwd=remote.ROOT, check=True, stdout=subprocess.DEVNULL)
                print(f"== {name}, both epochs, py-spy", flush=True)
                leaves(raw, args.top)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        loop.stop()


if __name__ == "__main__":
    main()
