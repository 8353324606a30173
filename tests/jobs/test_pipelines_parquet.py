"""parquet_to_tfrecord and tfrecord_to_parquet: round trip, options, and clean failures."""

import pyarrow as pa
import pyarrow.parquet as pq
from helpers.jobs import FAST, MULTI, entries, read_shards, run_job, summary_json

from pipelines import parquet_to_tfrecord, tfrecord_to_parquet
from tfrecord_beam.arrow import examples_to_record_batch
from tfrecord_beam.example import encode_example, encode_sequence_example
from tfrecord_beam.index import verify_index


def make_table(n=600):
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array([i / 4 for i in range(n)], pa.float32()),
            "s": pa.array([None if i % 7 == 0 else f"s{i}" for i in range(n)]),
            "l": pa.array([[i] * (i % 3) for i in range(n)], pa.list_(pa.int64())),
        }
    )


def write_parquet(directory, table, parts=2):
    directory.mkdir(parents=True, exist_ok=True)
    step = -(-table.num_rows // parts)
    for k in range(parts):
        pq.write_table(table.slice(k * step, step), str(directory / f"p-{k}.parquet"), row_group_size=100)


def test_round_trip_through_tfrecord(tmp_path, capsys):
    table = make_table()
    write_parquet(tmp_path / "pq", table)
    code, out, err = run_job(
        parquet_to_tfrecord.main,
        [
            "--input",
            str(tmp_path / "pq" / "*.parquet"),
            "--output_prefix",
            str(tmp_path / "tf" / "t"),
            "--num_shards",
            "3",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    assert summary_json(out)["records"] == table.num_rows
    shards = read_shards(tmp_path / "tf", "t-*.tfrecord")
    assert len(shards) == 3
    payloads = [p for s in shards for p in s]
    rows = {r["id"]: r for r in table.to_pylist()}
    for p in payloads:
        rec = examples_to_record_batch([p], schema=table.schema).to_pylist()[0]
        assert rec == rows[rec["id"]]
        expected = {k: v for k, v in rows[rec["id"]].items() if v is not None}
        assert p == encode_example(
            {
                k: (v if isinstance(v, list) else [v], {"id": "int", "x": "float", "s": "byte", "l": "int"}[k])
                for k, v in expected.items()
            }
        )
    for shard in (tmp_path / "tf").glob("t-*.tfrecord"):
        verify_index(str(shard).replace(".tfrecord", ".tfindex"), str(shard))

    code, out, err = run_job(
        tfrecord_to_parquet.main,
        [
            "--input",
            str(tmp_path / "tf" / "t-*.tfrecord"),
            "--output_prefix",
            str(tmp_path / "back" / "b"),
            "--num_shards",
            "2",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    back = pq.read_table(str(tmp_path / "back")).sort_by("id")
    assert entries(tmp_path / "back") == ["_MANIFEST.b.json", "b-00000-of-00002.parquet", "b-00001-of-00002.parquet"]
    assert back.column("id").to_pylist() == list(range(table.num_rows))
    assert back.column("s").to_pylist() == [None if v is None else v.encode() for v in table.column("s").to_pylist()]
    assert back.column("l").to_pylist() == table.column("l").to_pylist()
    assert back.schema.field("x").type == pa.float32()


def test_columns_rename_and_multi_processing(tmp_path, capsys):
    """--columns and --rename there and back, the way back on multi_processing (the way there on
    multi_processing, with both flags: test_pipelines_convert_stream.py's [multi_processing])."""
    write_parquet(tmp_path / "pq", make_table(50), parts=1)
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        [
            "--input",
            str(tmp_path / "pq" / "*"),
            "--output_prefix",
            str(tmp_path / "tf" / "t"),
            "--columns",
            "id,s",
            "--rename",
            "s=text",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    (shard,) = read_shards(tmp_path / "tf", "t-*.tfrecord")
    names = {n for p in shard for n in examples_to_record_batch([p]).schema.names}
    assert names == {"id", "text"}
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        ["--input", str(tmp_path / "tf" / "t-*.tfrecord"), "--output_prefix", str(tmp_path / "back" / "b")] + MULTI,
        capsys,
    )
    assert code == 0, err
    back = pq.read_table(str(tmp_path / "back")).sort_by("id")
    assert back.column("id").to_pylist() == list(range(50))
    assert back.column("text").to_pylist() == [None if i % 7 == 0 else f"s{i}".encode() for i in range(50)]


def test_sequence_columns_and_back(tmp_path, capsys):
    table = pa.table({"ctx": [1, 2], "tok": pa.array([[[1, 2], [3]], []], pa.list_(pa.list_(pa.int64())))})
    write_parquet(tmp_path / "pq", table, parts=1)
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        [
            "--input",
            str(tmp_path / "pq" / "*"),
            "--output_prefix",
            str(tmp_path / "tf" / "s"),
            "--sequence_columns",
            "tok",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    (shard,) = read_shards(tmp_path / "tf", "s-*.tfrecord")
    assert sorted(shard) == sorted(
        [
            encode_sequence_example({"ctx": 1}, {"tok": ([[1, 2], [3]], "int")}),
            encode_sequence_example({"ctx": 2}, {"tok": ([], "int")}),
        ]
    )
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        [
            "--input",
            str(tmp_path / "tf" / "s-*.tfrecord"),
            "--output_prefix",
            str(tmp_path / "back" / "b"),
            "--sequence",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    assert pq.read_table(str(tmp_path / "back")).sort_by("ctx").to_pydict() == {
        "ctx": [1, 2],
        "tok": [[[1, 2], [3]], []],
    }


def test_schema_errors_fail_before_running_and_leave_nothing(tmp_path, capsys):
    write_parquet(tmp_path / "pq", make_table(20), parts=1)
    out = tmp_path / "o"
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "pq" / "*"), "--output_prefix", str(out / "t"), "--columns", "id,nope"] + FAST,
        capsys,
    )
    assert code == 1 and "unknown column(s) ['nope']" in err
    pq.write_table(
        pa.table({"m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64()))}), str(tmp_path / "map.parquet")
    )
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "map.parquet"), "--output_prefix", str(out / "t")] + FAST,
        capsys,
    )
    assert code == 1 and "column 'm'" in err and "map" in err
    assert entries(out) == []


def test_bad_values_fail_inside_the_pipeline_and_leave_nothing(tmp_path, capsys):
    pq.write_table(pa.table({"l": pa.array([[1], [2, None]], pa.list_(pa.int64()))}), str(tmp_path / "n.parquet"))
    out = tmp_path / "o"
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "n.parquet"), "--output_prefix", str(out / "t"), "--num_shards", "2"] + FAST,
        capsys,
    )
    assert code == 1 and "n.parquet" in err and "column 'l', row 1: null value inside a list" in err
    assert entries(out) == []


def test_tfrecord_to_parquet_kind_conflict_and_features(tmp_path, capsys):
    from tfrecord_beam.records import write_records

    write_records(
        str(tmp_path / "a.tfrecord"), [encode_example({"a": 1, "b": b"x"}), encode_example({"a": (0.5, "float")})]
    )
    out = tmp_path / "o"
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        ["--input", str(tmp_path / "a.tfrecord"), "--output_prefix", str(out / "t")] + FAST,
        capsys,
    )
    assert code == 1 and "feature 'a'" in err
    assert entries(out) == []
    write_records(str(tmp_path / "b.tfrecord"), [encode_example({"a": 1, "b": b"x"}), encode_example({"a": 2})])
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        ["--input", str(tmp_path / "b.tfrecord"), "--output_prefix", str(out / "t"), "--features", "b:byte"] + FAST,
        capsys,
    )
    assert code == 0, err
    assert pq.read_table(str(out)).to_pydict() == {"b": [b"x", None]}
