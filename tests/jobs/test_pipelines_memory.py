"""Bounded memory: reshard --shuffle, parquet_to_tfrecord and tfrecord_to_parquet on an input
several times larger than a memory budget, on FnApiRunner and multi_processing.

Each job runs as a subprocess whose process tree is sampled from /proc (`tests/helpers/rss.py`):
the peak RSS of its largest process (main or worker) is what is compared; the budget is on the growth over a baseline: the peak of a job on a small
input on the same runner (Beam, pyarrow and the runner's workers cost the same whatever the
input), so it measures what the data costs. One baseline per runner, from the job that
imports the most (tfrecord_to_parquet: Beam + pyarrow.parquet + the decoder), keeps the
multi_processing start-ups (the slow part) to one per runner.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.jobs import FAST, MULTI
from helpers.rss import job_env, peak_rss_tree

from tfrecord_beam.example import encode_example
from tfrecord_beam.records import RecordWriter, read_records

# Growth of the largest process's peak RSS allowed for the big input. Each worker holds about
# one bucket / batch / row group (4 MiB here) several times over plus what the allocators
# keep (measured 10-50 MiB per worker, the same for any input size past the first few
# batches; multi_processing runs two workers). A job that held its input, a file or a shard
# (192 MiB here) would be far over.
BUDGET = 128 << 20
BIG = 3 * BUDGET  # input bytes: three times the budget
SMALL = 4 << 20
RECORD = 16 << 10
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _write_tfrecords(directory: Path, total: int, files: int = 4) -> int:
    directory.mkdir(parents=True)
    block = np.random.default_rng(0).bytes(RECORD)
    per_file = max(1, total // files // RECORD)
    n = 0
    for f in range(files):
        with RecordWriter(str(directory / f"d-{f}.tfrecord"), None) as writer:
            for start in range(0, per_file, 256):
                writer.write_many(
                    encode_example({"i": n + k, "blob": block[(n + k) % 997 :]})
                    for k in range(min(256, per_file - start))
                )
                n += min(256, per_file - start)
    return n


def _write_parquet(path: Path, total: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = total // RECORD
    block = np.random.default_rng(1).bytes(RECORD)
    with pq.ParquetWriter(str(path), pa.schema([("i", pa.int64()), ("blob", pa.binary())]), compression="none") as w:
        for start in range(0, rows, 2048):
            n = min(2048, rows - start)
            blobs = pa.array([block[(start + k) % 997 :] for k in range(n)], pa.binary())
            w.write_table(
                pa.table({"i": np.arange(start, start + n, dtype=np.int64), "blob": blobs}), row_group_size=256
            )
    return rows


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory")
    counts = {"big": _write_tfrecords(root / "big", BIG), "small": _write_tfrecords(root / "small", SMALL)}
    _write_parquet(root / "big.parquet", BIG)
    _write_parquet(root / "small.parquet", SMALL)
    yield root, counts
    shutil.rmtree(root, ignore_errors=True)  # ~800 MB: not left in the temp dir if another test fails


JOBS = {
    "shuffle": lambda src, out: [
        "pipelines.reshard",
        "--input",
        f"{src}/*.tfrecord",
        "--output_prefix",
        f"{out}/s",
        "--num_shards",
        "2",
        "--shuffle",
        "--shuffle_buffer_bytes",
        str(4 << 20),
        "--split_bytes",
        str(16 << 20),
    ],
    "parquet_to_tfrecord": lambda src, out: [
        "pipelines.parquet_to_tfrecord",
        "--input",
        f"{src}.parquet",
        "--output_prefix",
        f"{out}/t",
        "--num_shards",
        "2",
    ],
    "tfrecord_to_parquet": lambda src, out: [
        "pipelines.tfrecord_to_parquet",
        "--input",
        f"{src}/*.tfrecord",
        "--output_prefix",
        f"{out}/p",
        "--num_shards",
        "2",
        "--row_group_bytes",
        str(4 << 20),
        "--split_bytes",
        str(16 << 20),
    ],
}


def _records_out(out: Path) -> int:
    import pyarrow.parquet as pq

    parquet = sum(pq.read_metadata(str(p)).num_rows for p in out.glob("*.parquet"))
    return parquet + sum(1 for p in out.glob("*.tfrecord") for _ in read_records(str(p)))


RUNNERS = {"fnapi": FAST, "multi_processing": MULTI}


def _peak(job: str, src: Path, out: Path, runner) -> int:
    measured = peak_rss_tree([sys.executable, "-m", *JOBS[job](src, out), *runner], env=job_env(), cwd=os.getcwd())
    assert measured.returncode == 0, measured.stderr[-2000:]
    return measured.largest_rss  # the largest process: see tests/helpers/rss.py


@pytest.fixture(scope="module")
def baselines(inputs, tmp_path_factory):
    root, _ = inputs
    out = tmp_path_factory.mktemp("baseline")
    return {name: _peak("tfrecord_to_parquet", root / "small", out / name, runner) for name, runner in RUNNERS.items()}


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("job", sorted(JOBS))
def test_memory_does_not_grow_with_the_input(inputs, baselines, tmp_path, job, runner):
    root, counts = inputs
    peak = _peak(job, root / "big", tmp_path, RUNNERS[runner])
    assert _records_out(tmp_path) == (BIG // RECORD if job == "parquet_to_tfrecord" else counts["big"])
    growth = peak - baselines[runner]
    assert growth < BUDGET, (
        f"{job}: peak RSS {peak / 2**20:.0f} MiB on a {BIG / 2**20:.0f} MiB input, {growth / 2**20:.0f} MiB over "
        f"the {baselines[runner] / 2**20:.0f} MiB of a {SMALL / 2**20:.0f} MiB input (budget {BUDGET / 2**20:.0f} MiB)"
    )
