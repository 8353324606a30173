"""The streaming jobs beside their peers, with peak memory: parquet_to_tfrecord,
tfrecord_to_parquet and reshard --shuffle, each end to end as a subprocess whose process
tree's peak RSS is sampled from /proc (tests/helpers/rss.py), at 1 and 2 workers.

    python -m bench.bench_convert [--rows N] [--shuffle-mb MB] [--tfx-python PATH] [--skip-builtin]
                                  [--only parquet|shuffle] [--workdir DIR]

`--workdir /dev/shm` (with TFRECORD_BEAM_BENCH_DATA on tmpfs too) measures the software
rather than a shared disk: the external shuffle writes its input twice (runs, then shards).

1. parquet_to_tfrecord on N rows of the P1 table (bench_pipelines.parquet_file: int64,
   float32, 16-char string, list<int64> of 0-10, 100-byte binary) into 4 shards: our job on
   DirectRunner (1 worker, then multi_processing with 2), our encoder without Beam (a plain
   loop: ParquetFile batches -> ExampleEncoder.encode_framed -> RecordWriters), and tfx_bsl's
   RecordBatchToExamplesEncoder + TensorFlow's TFRecordWriter (`--tfx-python`: an interpreter
   with tfx-bsl; `make bench-tfx` makes one).
2. tfrecord_to_parquet of that output into 2 files: our job (1, 2 workers) and a plain loop
   (RecordReader chunks -> examples_to_record_batch -> ParquetWriter).
3. reshard --shuffle of MB megabytes of 16 KiB records into 8 shards: our job (1, 2 workers),
   a plain in-memory loop (read everything, permute, write: memory = the input), and Beam's
   built-in ReadFromTFRecord -> Reshuffle -> WriteToTFRecord.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench._common import DATA_DIR, job_env, print_table, run_measured
from bench.bench_pipelines import parquet_file

ROOT = Path(__file__).resolve().parent.parent
ONE = ["--runner=DirectRunner"]
TWO = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


CPU = {}  # wall seconds of a run -> its CPU seconds (user + system, the whole process tree)


def measure(cmd, python=sys.executable):
    """(wall seconds, peak tree RSS MiB, stdout) of one command run to completion
    (`_common.run_measured`); its CPU seconds go to CPU[wall]."""
    got = run_measured([python, *cmd], cwd=str(ROOT), env=job_env())
    CPU[got.wall] = got.cpu
    if got.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({got.returncode}): {got.stderr[-1500:]}")
    return got.wall, got.peak_rss / 2**20, got.stdout


PLAIN_PARQUET = r"""
import sys
import pyarrow.parquet as pq
from tfrecord_beam.arrow import ExampleEncoder
from tfrecord_beam.records import RecordWriter
src, prefix, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = pq.ParquetFile(src)
enc = ExampleEncoder(f.schema_arrow)
writers = [RecordWriter(f"{prefix}-{i:05d}.tfrecord", None, index_path=True) for i in range(shards)]
for i, batch in enumerate(f.iter_batches(batch_size=65536)):
    framed, sizes = enc.encode_framed(batch)
    writers[i % shards].write_framed(framed, sizes.tolist())
for w in writers:
    w.close()
"""

PLAIN_TO_PARQUET = r"""
import glob, sys, itertools
import pyarrow as pa, pyarrow.parquet as pq
from tfrecord_beam.arrow import examples_to_record_batch
from tfrecord_beam.records import RecordReader
pattern, out = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(pattern))
schema = examples_to_record_batch(list(itertools.islice(RecordReader(files[0]), 1000))).schema
with pq.ParquetWriter(out, schema) as w:
    pending, rows = [], 0
    for path in files:
        for chunk in RecordReader(path).chunks():
            pending.append(examples_to_record_batch(chunk.payloads(), schema=schema))
            rows += len(chunk)
            if rows >= 131072:
                w.write_table(pa.Table.from_batches(pending)); pending, rows = [], 0
    if pending:
        w.write_table(pa.Table.from_batches(pending))
"""

PLAIN_SHUFFLE = r"""
import glob, sys
import numpy as np
from tfrecord_beam.records import RecordReader, RecordWriter
pattern, prefix, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
records = [r for path in sorted(glob.glob(pattern)) for r in RecordReader(path)]
order = np.random.default_rng(0).permutation(len(records))
per = -(-len(records) // shards)
for s in range(shards):
    with RecordWriter(f"{prefix}-{s:05d}.tfrecord", None, index_path=True) as w:
        w.write_many([records[i] for i in order[s * per : (s + 1) * per].tolist()])
"""

BUILTIN_SHUFFLE = r"""
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
pattern, prefix, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"])) as p:
    _ = (p | beam.io.ReadFromTFRecord(pattern) | beam.Reshuffle()
         | beam.io.WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=shards))
"""


def shuffle_input(mb: int) -> Path:
    """MB megabytes of 16 KiB Example records in 8 files (cached under DATA_DIR)."""
    import numpy as np

    from tfrecord_beam.example import encode_example
    from tfrecord_beam.records import RecordWriter

    directory = DATA_DIR / f"shuffle-{mb}mb"
    if directory.exists():
        return directory
    tmp = Path(tempfile.mkdtemp(dir=DATA_DIR))
    block = np.random.default_rng(0).bytes(1 << 20)
    n = (mb << 20) // (16 << 10) // 8
    for f in range(8):
        with RecordWriter(str(tmp / f"d-{f}.tfrecord"), None) as w:
            for start in range(0, n, 512):
                w.write_many(
                    encode_example({"i": f * n + i, "image": block[(i * 997) % 65536 :][: 16 << 10]})
                    for i in range(start, min(n, start + 512))
                )
    tmp.rename(directory)
    return directory


def _row(what, wall, mem, amount, unit, base=None):
    rate = amount / wall
    cpu = CPU.get(wall, float("nan"))
    return [what, wall, cpu, rate, mem, "-" if base is None else f"{rate / base:.2f}x"]


def bench_parquet(rows: int, tfx_python, tmp: Path) -> str:
    src = str(parquet_file(rows))
    table = []
    job = ["-m", "pipelines.parquet_to_tfrecord", "--input", src, "--num_shards", "4"]
    wall1, mem1, _ = measure(job + ["--output_prefix", str(tmp / "p1" / "t")] + ONE)
    wall2, mem2, _ = measure(job + ["--output_prefix", str(tmp / "p2" / "t")] + TWO)
    (tmp / "pl").mkdir()
    wallp, memp, _ = measure(["-c", PLAIN_PARQUET, src, str(tmp / "pl" / "t"), "4"])
    plain = rows / wallp
    table.append(_row("parquet_to_tfrecord job, DirectRunner, 1 worker", wall1, mem1, rows, "rows", plain))
    table.append(_row("parquet_to_tfrecord job, multi_processing, 2 workers", wall2, mem2, rows, "rows", plain))
    table.append(_row("our encoder without Beam (plain loop, 1 core)", wallp, memp, rows, "rows", plain))
    notes = f"2 workers / 1 worker: {wall1 / wall2:.2f}x faster. "
    if tfx_python:
        (tmp / "tfx").mkdir()
        wallt, memt, out = measure([str(ROOT / "bench" / "_tfx_side.py"), src, str(tmp / "tfx" / "t"), "4"], tfx_python)
        info = json.loads(out.strip().splitlines()[-1])
        table.append(
            _row(
                f"tfx_bsl {info['tfx_bsl']} encoder + TF {info['tensorflow']} TFRecordWriter (process wall)",
                wallt,
                memt,
                rows,
                "rows",
                plain,
            )
        )
        table.append(
            [
                "  tfx_bsl read + encode + write loop alone (in-process)",
                rows / info["rows_per_s"],
                rows / info["rows_per_cpu_s"],
                info["rows_per_s"],
                "",
                f"{info['rows_per_s'] / plain:.2f}x",
            ]
        )
        table.append(
            [
                "  tfx_bsl encode alone (in-process CPU)",
                "",
                rows / info["encode_rows_per_s"],
                info["encode_rows_per_s"],
                "",
                "",
            ]
        )
        notes += (
            f"job (1 worker, whole process) vs tfx_bsl's loop alone: {rows / wall1 / info['rows_per_s']:.2f}x "
            f"by wall, {rows / CPU[wall1] / info['rows_per_cpu_s']:.2f}x by CPU; whole processes by CPU: "
            f"{CPU[wallt] / CPU[wall1]:.2f}x. "
        )
    notes += f"plain loop / job: {wall1 / wallp:.2f}x by wall, {CPU[wall1] / CPU[wallp]:.2f}x by CPU"
    text = print_table(
        f"parquet_to_tfrecord, P1, {rows:,} rows, 4 shards",
        ["what", "wall s", "CPU s", "rows/s (wall)", "peak RSS MiB", "vs plain loop"],
        table,
    )
    print(notes + "\n")
    return text + "\n" + notes + "\n"


def bench_to_parquet(rows: int, tmp: Path) -> str:
    pattern = str(tmp / "p1" / "t-*.tfrecord")
    job = ["-m", "pipelines.tfrecord_to_parquet", "--input", pattern, "--num_shards", "2"]
    wall1, mem1, _ = measure(job + ["--output_prefix", str(tmp / "q1" / "q")] + ONE)
    wall2, mem2, _ = measure(job + ["--output_prefix", str(tmp / "q2" / "q")] + TWO)
    wallp, memp, _ = measure(["-c", PLAIN_TO_PARQUET, pattern, str(tmp / "plain.parquet")])
    plain = rows / wallp
    table = [
        _row("tfrecord_to_parquet job, DirectRunner, 1 worker", wall1, mem1, rows, "rows", plain),
        _row("tfrecord_to_parquet job, multi_processing, 2 workers", wall2, mem2, rows, "rows", plain),
        _row(
            "plain loop (RecordReader -> examples_to_record_batch -> ParquetWriter)", wallp, memp, rows, "rows", plain
        ),
    ]
    text = print_table(
        f"tfrecord_to_parquet, P1, {rows:,} records, 2 files",
        ["what", "wall s", "CPU s", "rows/s (wall)", "peak RSS MiB", "vs plain loop"],
        table,
    )
    notes = f"2 workers / 1 worker: {wall1 / wall2:.2f}x faster\n"
    print(notes)
    return text + "\n" + notes


def bench_shuffle(mb: int, tmp: Path, builtin: bool) -> str:
    src = shuffle_input(mb)
    size = sum(p.stat().st_size for p in src.glob("*.tfrecord")) / 1e6
    pattern = str(src / "*.tfrecord")
    job = ["-m", "pipelines.reshard", "--input", pattern, "--num_shards", "8", "--shuffle", "--seed", "1"]
    wall1, mem1, _ = measure(job + ["--output_prefix", str(tmp / "s1" / "s")] + ONE)
    shutil.rmtree(tmp / "s1")
    wall2, mem2, _ = measure(job + ["--output_prefix", str(tmp / "s2" / "s")] + TWO)
    shutil.rmtree(tmp / "s2")
    (tmp / "sp").mkdir()
    wallp, memp, _ = measure(["-c", PLAIN_SHUFFLE, pattern, str(tmp / "sp" / "s"), "8"])
    shutil.rmtree(tmp / "sp")
    plain = size / wallp
    table = [
        _row("reshard --shuffle job, DirectRunner, 1 worker", wall1, mem1, size, "MB", plain),
        _row("reshard --shuffle job, multi_processing, 2 workers", wall2, mem2, size, "MB", plain),
        _row("plain loop: read all, permute in memory, write", wallp, memp, size, "MB", plain),
    ]
    if builtin:
        wallb, memb, _ = measure(["-c", BUILTIN_SHUFFLE, pattern, str(tmp / "sb" / "s"), "8"])
        shutil.rmtree(tmp / "sb", ignore_errors=True)
        table.append(_row("Beam ReadFromTFRecord -> Reshuffle -> WriteToTFRecord", wallb, memb, size, "MB", plain))
    text = print_table(
        f"reshard --shuffle, {size:,.0f} MB of 16 KiB records, 8 shards",
        ["what", "wall s", "CPU s", "MB/s (wall)", "peak RSS MiB", "vs plain loop"],
        table,
    )
    notes = f"2 workers / 1 worker: {wall1 / wall2:.2f}x faster\n"
    print(notes)
    return text + "\n" + notes


def run(
    rows: int, shuffle_mb: int, tfx_python=None, builtin: bool = True, only=("parquet", "shuffle"), workdir=None
) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="bench_convert_", dir=workdir))
    text = ""
    try:
        if "parquet" in only:
            text += bench_parquet(rows, tfx_python, tmp)
            text += bench_to_parquet(rows, tmp)
        if "shuffle" in only:
            text += bench_shuffle(shuffle_mb, tmp, builtin)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000, help="P1 rows (default 4M, ~700 MB of Parquet)")
    parser.add_argument("--shuffle-mb", type=int, default=1024, help="MB of 16 KiB records to shuffle (default 1024)")
    parser.add_argument(
        "--tfx-python",
        default=os.environ.get("TFX_PYTHON"),
        help="a Python interpreter with tfx-bsl installed (default $TFX_PYTHON)",
    )
    parser.add_argument("--skip-builtin", action="store_true", help="skip Beam's built-in shuffle (slow)")
    parser.add_argument(
        "--only",
        choices=("parquet", "shuffle"),
        action="append",
        help="run only these parts (parquet: both conversions)",
    )
    parser.add_argument("--workdir", default=None, help="where outputs and temporary files go (default: $TMPDIR)")
    args = parser.parse_args(argv)
    run(
        args.rows,
        args.shuffle_mb,
        args.tfx_python,
        not args.skip_builtin,
        args.only or ("parquet", "shuffle"),
        args.workdir,
    )


if __name__ == "__main__":
    main()
