"""Streaming Parquet <-> TFRecord: the footer plan (row-group pieces, balanced shards, input
order kept), bounded row groups on the way back, and framed encoding in both engines."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.jobs import FAST, MULTI, read_shards, run_job, summary_json

from pipelines import parquet_to_tfrecord, tfrecord_to_parquet
from tfrecord_beam._engine import _framing
from tfrecord_beam.arrow import ExampleEncoder
from tfrecord_beam.beam import parquet as bp
from tfrecord_beam.example import parse_example
from tfrecord_beam.records import read_records


def test_plan_cuts_rows_into_equal_contiguous_pieces():
    groups = [("a", [5, 0, 7]), ("b", [1]), ("c", [10, 2])]
    plan = bp.plan_shards(groups, 4)
    assert [sum(p.stop - p.start for p in s) for s in plan] == [6, 6, 6, 7]
    flat = [(p.path, p.row_group, r) for s in plan for p in s for r in range(p.start, p.stop)]
    expected = [(path, g, r) for path, counts in groups for g, n in enumerate(counts) for r in range(n)]
    assert flat == expected  # every row once, in input order
    assert plan[0][-1] == bp.Piece("a", 2, 0, 1, 5)  # a row group on a boundary is split
    assert bp.plan_shards([("a", [3])], 5)[0] == []  # more shards than rows: empty shards


@pytest.mark.parametrize("runner", [FAST, MULTI], ids=["fnapi", "multi_processing"])
def test_parquet_shards_hold_planned_rows_in_order(tmp_path, capsys, runner):
    """Also --columns and --rename, which the workers of multi_processing must get too (the
    round trip with them: test_pipelines_parquet.py's test_columns_rename_and_multi_processing)."""
    ids = []
    for f, (rows, group) in enumerate([(700, 64), (1, 1), (333, 1000)]):
        start = len(ids)
        ids += list(range(start, start + rows))
        table = pa.table(
            {
                "id": pa.array(np.arange(start, start + rows, dtype=np.int64)),
                "s": pa.array([f"v{i}" for i in range(start, start + rows)]),
                "x": pa.array(np.zeros(rows)),  # not in --columns
            }
        )
        pq.write_table(table, str(tmp_path / f"in-{f}.parquet"), row_group_size=group)
    code, out, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "in-*.parquet"), "--output_prefix", str(tmp_path / "tf" / "t"), "--num_shards", "3"]
        + ["--columns", "id,s", "--rename", "s=text"]
        + runner,
        capsys,
    )
    assert code == 0, err
    summary = summary_json(out)
    assert summary["row_groups"] == 11 + 1 + 1 and "each shard as planned" in summary["verified"]
    shards = read_shards(tmp_path / "tf", "t-*.tfrecord")
    assert [len(s) for s in shards] == [344, 345, 345]
    examples = [parse_example(p).features.feature for s in shards for p in s]
    assert [e["id"].int64_list.value[0] for e in examples] == ids
    assert {name for e in examples for name in e} == {"id", "text"}
    assert [e["text"].bytes_list.value[0] for e in examples] == [f"v{i}".encode() for i in ids]


def test_tfrecord_to_parquet_row_groups_are_bounded_and_order_kept(tmp_path, capsys):
    table = pa.table(
        {"id": pa.array(np.arange(2500, dtype=np.int64)), "b": pa.array([b"x" * (i % 50) for i in range(2500)])}
    )
    pq.write_table(table, str(tmp_path / "in.parquet"))
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "in.parquet"), "--output_prefix", str(tmp_path / "tf" / "t"), "--num_shards", "3"]
        + FAST,
        capsys,
    )
    assert code == 0, err
    code, out, err = run_job(
        tfrecord_to_parquet.main,
        [
            "--input",
            str(tmp_path / "tf" / "t-*.tfrecord"),
            "--output_prefix",
            str(tmp_path / "pq" / "p"),
            "--num_shards",
            "2",
            "--row_group_rows",
            "300",
            "--split_bytes",
            "4096",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    files = sorted((tmp_path / "pq").glob("p-*.parquet"))
    assert [f.name for f in files] == ["p-00000-of-00002.parquet", "p-00001-of-00002.parquet"]
    metas = [pq.read_metadata(str(f)) for f in files]
    sizes = [m.row_group(i).num_rows for m in metas for i in range(m.num_row_groups)]
    assert max(sizes) <= 300 + 1024 and sum(sizes) == 2500  # a group closes at the first chunk past the bound
    back = pa.concat_tables([pq.read_table(str(f)) for f in files])
    assert back.column("id").to_pylist() == list(range(2500))
    assert summary_json(out)["records"] == 2500


def test_empty_output_files_still_exist(tmp_path, capsys):
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), str(tmp_path / "in.parquet"))
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "in.parquet"), "--output_prefix", str(tmp_path / "tf" / "t")] + FAST,
        capsys,
    )
    assert code == 0, err
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        [
            "--input",
            str(tmp_path / "tf" / "t-*.tfrecord"),
            "--output_prefix",
            str(tmp_path / "pq" / "p"),
            "--num_shards",
            "3",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    rows = [pq.read_metadata(str(f)).num_rows for f in sorted((tmp_path / "pq").glob("p-*.parquet"))]
    assert sorted(rows) == [0, 0, 2]


def test_encode_framed_is_framing_of_encode_payloads():
    batch = pa.record_batch(
        {
            "a": pa.array([1, None, 3], pa.int64()),
            "t": pa.array([[1.5], [], None], pa.list_(pa.float32())),
            "s": pa.array(["x", "yy", ""]),
        }
    )
    encoder = ExampleEncoder(batch.schema)
    payloads = encoder.encode_payloads(batch)
    framed, sizes = encoder.encode_framed(batch)
    assert framed == _framing.frame_records(payloads)
    assert sizes.tolist() == [len(p) + 16 for p in payloads]


def test_stream_reads_stay_in_batches(tmp_path):
    rows = 3000
    block = np.random.default_rng(0).bytes(8192)
    blobs = pa.array([block[i % 4096 :][:4096] for i in range(rows)])
    pq.write_table(pa.table({"blob": blobs}), str(tmp_path / "big.parquet"), row_group_size=rows)
    handle = open(tmp_path / "big.parquet", "rb")
    f = bp.open_parquet(handle)
    n = bp.batch_rows(f.metadata, 0)
    assert n < rows and n * 4096 <= 2 * bp.BATCH_BYTES  # large rows: fewer per batch
    piece = bp.Piece(str(tmp_path / "big.parquet"), 0, 10, 2990, 0)
    got = list(bp._batches(f, piece, f.schema_arrow, ["blob"]))
    assert sum(b.num_rows for _, b in got) == 2980 and got[0][0] == 10
    handle.close()


def test_tfrecords_written_by_the_job_read_back(tmp_path, capsys):
    pq.write_table(pa.table({"id": pa.array(np.arange(50, dtype=np.int64))}), str(tmp_path / "in.parquet"))
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        [
            "--input",
            str(tmp_path / "in.parquet"),
            "--output_prefix",
            str(tmp_path / "tf" / "t"),
            "--output_compression",
            "gzip",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    (path,) = (tmp_path / "tf").glob("t-*.tfrecord.gz")
    assert len(list(read_records(str(path)))) == 50
