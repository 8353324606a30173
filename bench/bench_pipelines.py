"""Pipelines vs plain Beam, side by side in one run (DirectRunner in-process, one process).

    python -m bench.bench_pipelines [--rows N] [--tfx-python PATH] [--skip-plain] [--small] [--planned-only]

1. parquet_to_tfrecord on N rows (int64, float32, 16-char string, list<int64> of 0-10,
   ~100-byte binary): our job vs a plain Beam ReadFromParquet -> Map(build Example per row)
   -> WriteToTFRecord; plus the Arrow -> Example encoders alone on one core (ours; tfx_bsl's
   RecordBatchToExamplesEncoder when `--tfx-python` names an interpreter that has tfx_bsl).
2. reshard the result into 8 shards: our job (with its checksum proof) vs Beam's built-in
   ReadFromTFRecord -> WriteToTFRecord(num_shards=8).
3. mix two sources 3:1 into 4 shards: our job vs the built-in read -> write of both sources
   (no sampling: the IO floor that any mix must pay).
4. the planned jobs at scale (`bench.bench_planned`): unshuffled reshard, build_index and mix
   on >= 2 GB of 16 KiB and of 150-byte records (`--small`: 0.2 GB), beside a plain Python
   loop over RecordReader -> RecordWriters, with peak RSS, 1 vs 2 workers (`--planned-only`
   runs just these).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from bench._common import DATA_DIR, print_table

RUNNER = ["--runner=DirectRunner"]


def parquet_file(rows: int) -> Path:
    """The benchmark table (cached under DATA_DIR)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = DATA_DIR / f"pipelines-{rows}.parquet"
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 11, rows)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    blob = pa.FixedSizeBinaryArray.from_buffers(pa.binary(100), rows, [None, pa.py_buffer(rng.bytes(100 * rows))])
    table = pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "score": pa.array(rng.random(rows, dtype=np.float32)),
            "name": pa.array([f"{i:016x}" for i in range(rows)]),
            "tokens": pa.ListArray.from_arrays(pa.array(splits), pa.array(rng.integers(0, 1 << 20, int(splits[-1])))),
            "blob": blob.cast(pa.binary()),
        }
    )
    pq.write_table(table, str(path), row_group_size=65536)
    return path


def timed(fn) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        fn()
    return time.perf_counter() - start


def run_job(main, argv) -> None:
    code = main(argv)
    if code != 0:
        raise RuntimeError(f"{main.__module__} failed with status {code}")


# --- plain Beam baselines ----------------------------------------------------------------------


def _row_to_example(row: dict) -> bytes:
    from tfrecord_beam import _proto

    ex = _proto.Example()
    f = ex.features.feature
    f["id"].int64_list.value.append(row["id"])
    f["score"].float_list.value.append(row["score"])
    f["name"].bytes_list.value.append(row["name"].encode())
    f["tokens"].int64_list.value.extend(row["tokens"])
    f["blob"].bytes_list.value.append(row["blob"])
    return ex.SerializeToString()


def plain_parquet_to_tfrecord(src: str, out: str) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    with beam.Pipeline(options=PipelineOptions(RUNNER)) as p:
        _ = (
            p
            | beam.io.ReadFromParquet(src)
            | beam.Map(_row_to_example)
            | beam.io.WriteToTFRecord(out, file_name_suffix=".tfrecord", num_shards=4)
        )


def plain_read_write(patterns, out: str, shards: int) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    with beam.Pipeline(options=PipelineOptions(RUNNER)) as p:
        reads = [p | f"Read{i}" >> beam.io.ReadFromTFRecord(pat) for i, pat in enumerate(patterns)]
        merged = reads[0] if len(reads) == 1 else reads | beam.Flatten()
        _ = merged | beam.io.WriteToTFRecord(out, file_name_suffix=".tfrecord", num_shards=shards)


def ours_tfrecord_beam_io(pattern: str, out: str, shards: int) -> None:
    """tfrecord_beam.beam's per-record IO (when that module is present)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_beam.beam import ReadFromTFRecord, WriteToTFRecord

    with beam.Pipeline(options=PipelineOptions(RUNNER)) as p:
        _ = p | ReadFromTFRecord(pattern) | WriteToTFRecord(out, file_name_suffix=".tfrecord", num_shards=shards)


# --- encoders alone --------------------------------------------------------------------------


def encoder_rows_per_second(src: str) -> float:
    import pyarrow.parquet as pq

    from tfrecord_beam.arrow import ExampleEncoder

    batches = pq.read_table(src).to_batches(max_chunksize=65536)
    encoder = ExampleEncoder(batches[0].schema)
    encoder.encode(batches[0])  # warm up
    start = time.perf_counter()
    rows = 0
    for b in batches:
        encoder.encode(b)
        rows += b.num_rows
    return rows / (time.perf_counter() - start)


def tfx_rows_per_second(python: str, src: str) -> dict:
    """tfx_bsl's encoder alone and with TensorFlow's writer, in the interpreter `python`
    (bench/_tfx_side.py); {"encode_rows_per_s", "rows_per_s", ...}."""
    out_dir = tempfile.mkdtemp(prefix="bench_tfx_")
    try:
        script = str(Path(__file__).resolve().parent / "_tfx_side.py")
        out = subprocess.run(
            [python, script, src, os.path.join(out_dir, "t"), "4"], check=True, capture_output=True, text=True
        ).stdout
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return json.loads(out.strip().splitlines()[-1])


# --- the run ---------------------------------------------------------------------------------


def run(rows: int, tfx_python: str = None, skip_plain: bool = False) -> str:
    from pipelines import mix, parquet_to_tfrecord, reshard

    src = str(parquet_file(rows))
    tmp = Path(tempfile.mkdtemp(prefix="bench_pipelines_"))
    text = ""
    try:
        # 1. parquet -> tfrecord
        t_ours = timed(
            lambda: run_job(
                parquet_to_tfrecord.main,
                ["--input", src, "--output_prefix", str(tmp / "tf" / "t"), "--num_shards", "4"] + RUNNER,
            )
        )
        table = [["parquet_to_tfrecord (this job)", rows, t_ours, rows / t_ours, "-"]]
        if not skip_plain:
            t_plain = timed(lambda: plain_parquet_to_tfrecord(src, str(tmp / "plain" / "t")))
            table.append(
                ["ReadFromParquet -> Map -> WriteToTFRecord", rows, t_plain, rows / t_plain, f"{t_plain / t_ours:.1f}x"]
            )
        enc = encoder_rows_per_second(src)
        table.append(["ExampleEncoder alone, 1 core (rows/s)", rows, rows / enc, enc, ""])
        if tfx_python:
            tfx = tfx_rows_per_second(tfx_python, src)["encode_rows_per_s"]
            table.append(
                ["tfx_bsl RecordBatchToExamplesEncoder, 1 core", rows, rows / tfx, tfx, f"ours {enc / tfx:.1f}x"]
            )
        text += print_table(
            f"parquet_to_tfrecord, {rows:,} rows", ["what", "rows", "seconds", "rows/s", "ours faster by"], table
        )

        # 2. reshard
        pattern = str(tmp / "tf" / "t-*.tfrecord")
        size = sum(f.stat().st_size for f in (tmp / "tf").glob("t-*.tfrecord"))
        t_ours = timed(
            lambda: run_job(
                reshard.main,
                ["--input", pattern, "--output_prefix", str(tmp / "rs" / "r"), "--num_shards", "8"] + RUNNER,
            )
        )
        table = [["reshard (this job, with checksum proof)", t_ours, rows / t_ours, size / t_ours / 1e6, "-"]]
        if not skip_plain:
            t_plain = timed(lambda: plain_read_write([pattern], str(tmp / "prs" / "r"), 8))
            table.append(
                [
                    "Beam ReadFromTFRecord -> WriteToTFRecord",
                    t_plain,
                    rows / t_plain,
                    size / t_plain / 1e6,
                    f"{t_plain / t_ours:.1f}x",
                ]
            )
        try:
            import tfrecord_beam.beam  # noqa: F401

            t_io = timed(lambda: ours_tfrecord_beam_io(pattern, str(tmp / "io" / "r"), 8))
            table.append(
                [
                    "tfrecord_beam.beam Read -> Write (per record)",
                    t_io,
                    rows / t_io,
                    size / t_io / 1e6,
                    f"{t_io / t_ours:.1f}x",
                ]
            )
        except ImportError:
            pass
        text += print_table(
            f"reshard into 8 shards, {rows:,} records, {size / 1e6:,.0f} MB",
            ["what", "seconds", "records/s", "MB/s", "ours faster by"],
            table,
        )

        # 3. mix
        shutil.rmtree(tmp / "prs", ignore_errors=True)
        a, b = str(tmp / "rs" / "r-0000[0-5]-of-00008.tfrecord"), str(tmp / "rs" / "r-0000[67]-of-00008.tfrecord")
        t_ours = timed(
            lambda: run_job(
                mix.main,
                [
                    "--source",
                    a + "=3",
                    "--source",
                    b + "=1",
                    "--total_records",
                    str(rows),
                    "--output_prefix",
                    str(tmp / "mx" / "m"),
                    "--num_shards",
                    "4",
                ]
                + RUNNER,
            )
        )
        table = [["mix 3:1 (this job: count, sample, shuffle, checksum)", t_ours, rows / t_ours, "-"]]
        if not skip_plain:
            t_plain = timed(lambda: plain_read_write([a, b], str(tmp / "pmx" / "m"), 4))
            table.append(
                ["Beam read both -> WriteToTFRecord (no sampling)", t_plain, rows / t_plain, f"{t_plain / t_ours:.1f}x"]
            )
        text += print_table(
            f"mix two sources into 4 shards, {rows:,} records out",
            ["what", "seconds", "records/s", "ours faster by"],
            table,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return text


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tfx-python", default=None, help="a Python interpreter with tfx_bsl installed (optional)")
    parser.add_argument("--skip-plain", action="store_true", help="skip the plain-Beam baselines")
    parser.add_argument("--small", action="store_true", help="planned jobs on 0.2 GB instead of 2 GB per input set")
    parser.add_argument("--planned-only", action="store_true", help="only the planned jobs at scale (part 4)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    if not args.planned_only:
        run(args.rows, args.tfx_python, args.skip_plain)
    from bench import bench_planned

    bench_planned.run(0.2 if args.small else 2.0, ["reshard", "build_index", "mix"], args.skip_plain)


if __name__ == "__main__":
    main()
