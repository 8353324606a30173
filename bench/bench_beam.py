"""Beam IO benchmark: tfrecord_beam.beam vs Beam's built-in apache_beam.io.tfrecordio.

One run, one D2-like file (small Examples: label float, index int, tokens int x20, name bytes
~12), side by side: read+count and read -> write (4 output shards for every implementation),
1 worker (in-process FnApiRunner) and 2 workers (DirectRunner multi_processing). Prints a
Markdown table of records/s.

    PYTHONPATH=. python bench/bench_beam.py                 # 300k records
    PYTHONPATH=. python bench/bench_beam.py --records 100000 --repeat 5

Times are wall clock for the whole pipeline (start-up included), the median of --repeat
rounds that interleave the implementations; the worker-scaling lines also show the ratio
after subtracting an empty pipeline's start-up time (2 worker processes each import Beam
before doing any work). Beside each wall time the table gives the CPU seconds the pipeline
cost (this process plus its worker processes), which a machine shared with other jobs
disturbs much less than the wall clock.

    PYTHONPATH=. python bench/bench_beam.py --records 3000000 --workdir /dev/shm/bench_beam \
        --cases read+count --workers 1        # one cell family, a bigger file
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from typing import Tuple

import apache_beam as beam
from apache_beam.io import tfrecordio
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_beam import _engine, example, records
from tfrecord_beam.beam import (
    ReadFromTFRecord,
    ReadFromTFRecordBatched,
    WriteToTFRecord,
)
from tfrecord_beam.index import create_index

_DISTINCT = 300_000  # bigger files repeat these records (encoding millions in Python takes minutes)


def make_d2(path: str, n: int) -> None:
    """Write n D2-like Examples (the first 300,000 distinct, then repeated) and the .tfindex."""
    distinct = [
        example.encode_example(
            {
                "label": (float(i % 2), "float"),
                "index": (i, "int"),
                "tokens": ([(i * 31 + k) % 30000 for k in range(20)], "int"),
                "name": (f"item-{i:07d}".encode(), "byte"),
            }
        )
        for i in range(min(n, _DISTINCT))
    ]
    records.write_records(path, (distinct[i % len(distinct)] for i in range(n)))
    create_index(path)


def _options(workers: int) -> PipelineOptions:
    if workers == 1:
        return PipelineOptions([], direct_num_workers=1, direct_running_mode="in_memory")
    return PipelineOptions([], direct_num_workers=workers, direct_running_mode="multi_processing")


IMPLS = ("beam.io.tfrecordio", "tfrecord_beam", "tfrecord_beam batched")


def _read(impl: str, path: str):
    if impl == "tfrecord_beam":
        return ReadFromTFRecord(path)
    if impl == "tfrecord_beam batched":
        return ReadFromTFRecordBatched(path)
    return tfrecordio.ReadFromTFRecord(path)


#: Output shards of every read -> write, ours and Beam's alike (a fixed count: with
#: num_shards=0 ours wrote one file per bundle and skipped the GroupByKey Beam's 4-shard
#: reference pays, which overstated the ratio).
NUM_SHARDS = 4


def _write(impl: str, prefix: str):
    if impl.startswith("tfrecord_beam"):
        return WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=NUM_SHARDS)
    return tfrecordio.WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=NUM_SHARDS)


def _count(impl: str):
    if impl == "tfrecord_beam batched":
        return beam.Map(len) | beam.CombineGlobally(sum)
    return beam.combiners.Count.Globally()


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its ended children (the runner's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_case(impl: str, case: str, workers: int, path: str, out_dir: str) -> Tuple[float, float]:
    """Run one pipeline; return its (wall, CPU) seconds."""
    for stale in glob.glob(os.path.join(out_dir, "*")):
        shutil.rmtree(stale) if os.path.isdir(stale) else os.remove(stale)
    start, cpu = time.perf_counter(), _cpu_seconds()
    with beam.Pipeline(runner="DirectRunner", options=_options(workers)) as p:
        read = p | "Read" >> _read(impl, path)
        if case == "read+count":
            _ = read | "Count" >> _count(impl)
        else:
            _ = read | "Write" >> _write(impl, os.path.join(out_dir, "out"))
    return time.perf_counter() - start, _cpu_seconds() - cpu


def startup_seconds(workers: int) -> Tuple[float, float]:
    """(wall, CPU) seconds of a trivial pipeline with the same runner options (worker start-up etc.)."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    with beam.Pipeline(runner="DirectRunner", options=_options(workers)) as p:
        _ = p | beam.Create([1]) | beam.Map(lambda x: x)
    return time.perf_counter() - start, _cpu_seconds() - cpu


CASES = ("read+count", "read->write")


def _tag_batch(batch):
    """(worker pid, (records, wall, wall, process CPU, process CPU)) of one batch."""
    now, cpu = time.time(), time.process_time()
    return os.getpid(), (len(batch), now, now, cpu, cpu)


def _merge_tags(tags):
    tags = list(tags)
    return (
        sum(t[0] for t in tags),
        min(t[1] for t in tags),
        max(t[2] for t in tags),
        min(t[3] for t in tags),
        max(t[4] for t in tags),
    )


def worker_split(path: str, workers: int, out_dir: str) -> None:
    """Print how a batched read's records spread over the worker processes: records, when
    each worker saw its first and last batch, and its process CPU seconds then (start-up,
    the index load and the first batch come before the first)."""
    with beam.Pipeline(runner="DirectRunner", options=_options(workers)) as p:
        start = time.time()
        _ = (
            p
            | ReadFromTFRecordBatched(path)
            | beam.Map(_tag_batch)
            | beam.CombinePerKey(_merge_tags)
            | beam.io.WriteToText(os.path.join(out_dir, "split"), shard_name_template="")
        )
    with open(os.path.join(out_dir, "split")) as handle:
        for line in sorted(handle):
            pid, (n, first, last, cpu_first, cpu_last) = eval(line)  # noqa: S307 - our own repr lines
            print(
                f"- workers={workers} pid {pid}: {n} records, batches from {first - start:.2f} s to "
                f"{last - start:.2f} s, process CPU {cpu_first:.2f} s at the first and {cpu_last:.2f} s at the last"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (median per cell)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tfrecord_beam_bench_beam"))
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--workers", nargs="+", type=int, choices=(1, 2), default=[1, 2])
    parser.add_argument(
        "--impls",
        nargs="+",
        choices=IMPLS,
        default=list(IMPLS),
        help="implementations to run (ratios need the first, Beam's)",
    )
    parser.add_argument(
        "--worker-split", action="store_true", help="also print how a batched read's records spread over the workers"
    )
    args = parser.parse_args(argv)
    impls = [i for i in IMPLS if i in args.impls]

    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, f"d2_{args.records}.tfrecord")
    if not os.path.exists(path):
        print(f"writing {args.records} D2-like records to {path} ...", file=sys.stderr)
        make_d2(path, args.records)
    out_dir = os.path.join(args.workdir, "out")
    os.makedirs(out_dir, exist_ok=True)
    size = os.path.getsize(path)
    print(
        f"file: {args.records} records, {size / 1e6:.1f} MB; tfrecord_beam engine: {_engine.ENGINE}; "
        f"cpus: {os.cpu_count()}",
        file=sys.stderr,
    )

    # Rounds interleave the implementations (Beam's, ours, ours batched, then the next cell),
    # so load from other jobs on a shared machine hits all of them alike; each cell reports
    # the median of its rounds (wall and CPU medians taken separately).
    walls, cpus = {}, {}
    starts = {w: [] for w in args.workers}
    for round_ in range(args.repeat):
        for workers in args.workers:
            starts[workers].append(startup_seconds(workers))
        for case in args.cases:
            for workers in args.workers:
                for impl in impls:
                    wall, cpu = run_case(impl, case, workers, path, out_dir)
                    walls.setdefault((case, workers, impl), []).append(wall)
                    cpus.setdefault((case, workers, impl), []).append(cpu)
                    print(
                        f"round {round_ + 1} {case:12s} workers={workers} {impl:22s} {wall:7.2f} s  "
                        f"{args.records / wall / 1e3:8.1f} k rec/s  cpu {cpu:6.2f} s",
                        file=sys.stderr,
                    )
    wall_of = {key: statistics.median(values) for key, values in walls.items()}
    cpu_of = {key: statistics.median(values) for key, values in cpus.items()}
    startup = {w: statistics.median(x[0] for x in v) for w, v in starts.items()}
    startup_cpu = {w: statistics.median(x[1] for x in v) for w, v in starts.items()}

    print(
        f"\n{args.records} D2-like records ({size / 1e6:.1f} MB), engine {_engine.ENGINE}, "
        f"median of {args.repeat} interleaved rounds, {NUM_SHARDS} output shards\n"
    )
    ref = IMPLS[0] if IMPLS[0] in impls else None
    versus = ", x Beam wall, x Beam CPU"
    print(
        "| case | workers | "
        + " | ".join(f"{i} k rec/s (CPU s{versus if ref and i != ref else ''})" for i in impls)
        + " |"
    )
    print("|---|---|" + "---|" * len(impls))
    for case in args.cases:
        for workers in args.workers:
            cells = []
            for i in impls:
                wall, cpu = wall_of[case, workers, i], cpu_of[case, workers, i]
                cell = f"{args.records / wall / 1e3:.1f} ({cpu:.2f} s"
                if ref and i != ref:
                    cell += f", {wall_of[case, workers, ref] / wall:.2f}x, {cpu_of[case, workers, ref] / cpu:.2f}x"
                cells.append(cell + ")")
            print(f"| {case} | {workers} | " + " | ".join(cells) + " |")
    starts_line = ", ".join(
        f"{w} worker{'s' if w > 1 else ''} {startup[w]:.2f} s ({startup_cpu[w]:.2f} s CPU)" for w in args.workers
    )
    print(f"\nEmpty-pipeline start-up (subtracted below): {starts_line}\n")
    if set(args.workers) == {1, 2}:
        for case in args.cases:
            for impl in impls:
                one, two = wall_of[case, 1, impl], wall_of[case, 2, impl]
                net_one, net_two = one - startup[1], two - startup[2]
                net = f"{net_one / net_two:.2f}x" if net_one > 0.1 and net_two > 0.1 else "n/a (start-up dominates)"
                print(
                    f"- {impl} {case}: 2 workers / 1 worker = {one / two:.2f}x wall, {net} after start-up; "
                    f"CPU {cpu_of[case, 1, impl]:.2f} s -> {cpu_of[case, 2, impl]:.2f} s"
                )
    if args.worker_split:
        for workers in args.workers:
            worker_split(path, workers, out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
