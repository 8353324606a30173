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
before doing any work).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

import apache_beam as beam
from apache_beam.io import tfrecordio
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_beam import _engine, example, records
from tfrecord_beam.beam import ReadFromTFRecord, ReadFromTFRecordBatched, WriteToTFRecord
from tfrecord_beam.index import create_index


def make_d2(path: str, n: int) -> None:
    """Write n D2-like Examples (and the .tfindex beside them)."""
    payloads = (
        example.encode_example({
            "label": (float(i % 2), "float"),
            "index": (i, "int"),
            "tokens": ([(i * 31 + k) % 30000 for k in range(20)], "int"),
            "name": (f"item-{i:07d}".encode(), "byte"),
        })
        for i in range(n)
    )
    records.write_records(path, payloads)
    create_index(path)


def _options(workers: int) -> PipelineOptions:
    if workers == 1:
        return PipelineOptions(direct_num_workers=1, direct_running_mode="in_memory")
    return PipelineOptions(direct_num_workers=workers, direct_running_mode="multi_processing")


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


def run_case(impl: str, case: str, workers: int, path: str, out_dir: str) -> float:
    """Run one pipeline; return its wall time in seconds."""
    for stale in glob.glob(os.path.join(out_dir, "*")):
        shutil.rmtree(stale) if os.path.isdir(stale) else os.remove(stale)
    start = time.perf_counter()
    with beam.Pipeline(runner="DirectRunner", options=_options(workers)) as p:
        read = p | "Read" >> _read(impl, path)
        if case == "read+count":
            _ = read | "Count" >> _count(impl)
        else:
            _ = read | "Write" >> _write(impl, os.path.join(out_dir, "out"))
    return time.perf_counter() - start


def startup_seconds(workers: int) -> float:
    """Wall time of a trivial pipeline with the same runner options (worker start-up etc.)."""
    start = time.perf_counter()
    with beam.Pipeline(runner="DirectRunner", options=_options(workers)) as p:
        _ = p | beam.Create([1]) | beam.Map(lambda x: x)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (median per cell)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "tfrecord_beam_bench_beam"))
    args = parser.parse_args(argv)

    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, f"d2_{args.records}.tfrecord")
    if not os.path.exists(path):
        print(f"writing {args.records} D2-like records to {path} ...", file=sys.stderr)
        make_d2(path, args.records)
    out_dir = os.path.join(args.workdir, "out")
    os.makedirs(out_dir, exist_ok=True)
    size = os.path.getsize(path)
    print(f"file: {args.records} records, {size / 1e6:.1f} MB; tfrecord_beam engine: {_engine.ENGINE}; "
          f"cpus: {os.cpu_count()}", file=sys.stderr)

    # Rounds interleave the implementations (Beam's, ours, ours batched, then the next cell),
    # so load from other jobs on a shared machine hits all of them alike; each cell reports
    # the median of its rounds.
    times = {}
    starts = {1: [], 2: []}
    for round_ in range(args.repeat):
        for workers in (1, 2):
            starts[workers].append(startup_seconds(workers))
        for case in ("read+count", "read->write"):
            for workers in (1, 2):
                for impl in IMPLS:
                    took = run_case(impl, case, workers, path, out_dir)
                    times.setdefault((case, workers, impl), []).append(took)
                    print(f"round {round_ + 1} {case:12s} workers={workers} {impl:22s} {took:7.2f} s  "
                          f"{args.records / took / 1e3:8.1f} k rec/s", file=sys.stderr)
    results = {key: statistics.median(values) for key, values in times.items()}
    startup = {w: statistics.median(v) for w, v in starts.items()}
    print(f"empty-pipeline start-up: 1 worker {startup[1]:.2f} s, 2 workers {startup[2]:.2f} s", file=sys.stderr)

    print(f"\n{args.records} D2-like records ({size / 1e6:.1f} MB), engine {_engine.ENGINE}, "
          f"median of {args.repeat} interleaved rounds, {NUM_SHARDS} output shards\n")
    print("| case | workers | Beam tfrecordio k rec/s | ours k rec/s (x Beam) | ours batched k rec/s (x Beam) |")
    print("|---|---|---|---|---|")
    for case in ("read+count", "read->write"):
        for workers in (1, 2):
            beam_s = results[case, workers, IMPLS[0]]
            cells = [f"{args.records / results[case, workers, i] / 1e3:.1f} ({beam_s / results[case, workers, i]:.2f}x)" for i in IMPLS[1:]]
            print(f"| {case} | {workers} | {args.records / beam_s / 1e3:.1f} | {cells[0]} | {cells[1]} |")
    print(f"\nEmpty-pipeline start-up (subtracted below): 1 worker {startup[1]:.2f} s, 2 workers {startup[2]:.2f} s\n")
    for case in ("read+count", "read->write"):
        for impl in IMPLS:
            one, two = results[case, 1, impl], results[case, 2, impl]
            net_one, net_two = one - startup[1], two - startup[2]
            net = f"{net_one / net_two:.2f}x" if net_one > 0.1 and net_two > 0.1 else "n/a (start-up dominates)"
            print(f"- {impl} {case}: 2 workers / 1 worker = {one / two:.2f}x wall, {net} after start-up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
