"""Every job's closing summary (issue 23 item 7), checked on a real run of each job: input and
output named as such, records/s and MB/s, nouns that agree with their numbers (the input is 1
file into 1 shard, so any "1 files" or "1 shards" shows), counts in one format (1,234, never
1234), and a `json:` line of counts, not of lists (the manifest lists the outputs)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.jobs import run_job, summary_json

from pipelines import build_index, mix, parquet_to_tfrecord, reshard, tfrecord_to_parquet
from tfrecord_beam.example import encode_example
from tfrecord_beam.records import RecordWriter

RECORDS = 1234  # past 999: a count printed without its comma shows
PLURALS = "records|files|shards|buckets|rows|sources|ranges|row groups|columns|index files|Parquet files|Parquet rows"
SINGULAR_AS_PLURAL = re.compile(rf"(?<![\d,.])1 ({PLURALS})\b")
BARE_COUNT = re.compile(r"(?<![\w,./:-])\d{4,}(?![\w,])")  # 4+ digits with no thousands separator


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("summaries")
    with RecordWriter(str(root / "a.tfrecord")) as writer:
        writer.write_many(encode_example({"i": [k], "b": b"x" * (k % 7)}) for k in range(RECORDS))
    table = pa.table({"i": np.arange(RECORDS, dtype=np.int64), "b": [b"y" * (k % 5) for k in range(RECORDS)]})
    pq.write_table(table, str(root / "a.parquet"), row_group_size=RECORDS)
    return root


JOBS = {
    "build_index": (build_index.main, lambda d, o: ["--input", f"{d}/a.tfrecord", "--output_dir", f"{o}"]),
    "reshard": (
        reshard.main,
        lambda d, o: ["--input", f"{d}/a.tfrecord", "--output_prefix", f"{o}/r", "--num_shards", "1"],
    ),
    "reshard --shuffle": (
        reshard.main,
        lambda d, o: [
            "--input",
            f"{d}/a.tfrecord",
            "--output_prefix",
            f"{o}/s",
            "--num_shards",
            "1",
            "--shuffle",
            "--seed",
            "1",
        ],
    ),
    "mix": (
        mix.main,
        lambda d, o: ["--source", f"{d}/a.tfrecord=1", "--total_records", str(RECORDS), "--output_prefix", f"{o}/m"],
    ),
    "tfrecord_to_parquet": (
        tfrecord_to_parquet.main,
        lambda d, o: ["--input", f"{d}/a.tfrecord", "--output_prefix", f"{o}/p"],
    ),
    "parquet_to_tfrecord": (
        parquet_to_tfrecord.main,
        lambda d, o: ["--input", f"{d}/a.parquet", "--output_prefix", f"{o}/t"],
    ),
}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_summary_a_person_reads(inputs, tmp_path, capsys, job):
    main, args = JOBS[job]
    code, out, err = run_job(main, args(inputs, tmp_path / "out") + ["--runner=DirectRunner"], capsys)
    assert code == 0, err
    lines = out[out.index("== ") :].splitlines()
    assert lines[0] == f"== {job.split()[0]} summary =="
    inp = [line for line in lines if line.startswith("input:")]
    assert len(inp) == 1 and re.fullmatch(r"input: +1 file, [\d,]+ bytes \([\d,.]+ MB\)", inp[0]), lines
    output = [line for line in lines if line.startswith("output:")]
    assert len(output) == 1 and re.fullmatch(
        rf"output: +1 (index file|file), {RECORDS:,} records, [\d,]+ bytes \([\d,.]+ MB\)", output[0]
    ), lines
    wall = [line for line in lines if line.startswith("wall:")]
    assert len(wall) == 1 and re.fullmatch(r"wall: +[\d,]+\.\d s \([\d,]+ records/s, [\d,]+\.\d MB/s\)", wall[0])
    for line in out.splitlines() + err.splitlines():  # the summary and the progress lines alike
        assert not SINGULAR_AS_PLURAL.search(line), line
    for line in lines:
        if line.startswith(("json:", "manifest:", "dead_letters:")):
            continue  # paths, and JSON's own number format
        assert not BARE_COUNT.search(re.sub(r"checksum [0-9a-f]{16}", "", line)), line
    summary = summary_json(out)
    assert summary["records"] == RECORDS and summary["input_files"] == 1 and summary["files"] == 1
    assert summary["seconds"] > 0 and "outputs" not in summary
    for key, value in summary.items():  # counts and short facts; lists only of counts
        assert not isinstance(value, dict), key
        assert not isinstance(value, list) or all(isinstance(v, int) for v in value), key
