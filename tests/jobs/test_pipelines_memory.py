"""Bounded memory: reshard --shuffle, parquet_to_tfrecord and tfrecord_to_parquet on an input
6x a 32 MiB budget, on FnApiRunner and multi_processing (`helpers.scale`: the runner's process
and, on multi_processing, its two SDK workers each compared with a run on an input of the
budget's size). Each shuffle bucket, batch and row group is 4 MiB here; a job that held its
input, a file or a shard would be far over. The inputs and baselines are the session's
(`scale` fixture, shared with test_pipelines_bounded.py)."""

from __future__ import annotations

import sys

import pytest
from helpers.jobs import run_job
from helpers.scale import JOBS, RUNNERS

from tfrecord_beam.records import read_records

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _records_out(out) -> int:
    import pyarrow.parquet as pq

    parquet = sum(pq.read_metadata(str(p)).num_rows for p in out.glob("*.parquet"))
    return parquet + sum(1 for p in out.glob("*.tfrecord") for _ in read_records(str(p)))


@RUNNERS
@pytest.mark.parametrize("job", ["parquet_to_tfrecord", "shuffle", "tfrecord_to_parquet"])
def test_memory_does_not_grow_with_the_input(scale, tmp_path, capsys, job, runner):
    main, argv = JOBS[job](scale.inputs, "big", tmp_path)

    def run():
        code, _, err = run_job(main, argv + runner, capsys)
        assert code == 0, err[-3000:]

    scale.bounded(job, runner, capsys, run)
    want = scale.inputs.parquet_rows("big") if job == "parquet_to_tfrecord" else scale.inputs.tfrecord_count("big")
    assert _records_out(tmp_path) == want
