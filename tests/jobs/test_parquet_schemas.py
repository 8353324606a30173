"""Schemas over every input (issue 34 items 4 and 5): nothing dropped, nothing silent.

parquet_to_tfrecord unifies the schemas of all its files before the pipeline (compatible types
widen, a column some files lack is an absent feature there) or fails naming the file, the
column and both types; a worker refuses a file that no longer matches the plan.
tfrecord_to_parquet infers its schema from every record, and a worker refuses a record that
the schema (a sample's, or one planned before the file changed) cannot hold.
"""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.jobs import FAST, entries, read_shards, run_job

from pipelines import _common, parquet_to_tfrecord, tfrecord_to_parquet
from tfrecord_beam.arrow import examples_to_record_batch
from tfrecord_beam.example import encode_example
from tfrecord_beam.records import write_records

FILES = 20
DRIFT = 16  # the 17th file


INT64 = pa.int64()


def part(k, rows=30, id_type=INT64, extra=False, list_type=INT64):
    """Rows k*rows.. of one file: id, a nullable string, a list column; `extra` adds a column."""
    ids = range(k * rows, (k + 1) * rows)
    columns = {
        "id": pa.array(ids, id_type),
        "s": pa.array([None if i % 5 == 0 else f"s{i}" for i in ids]),
        "l": pa.array([None if i % 7 == 0 else [i] * (i % 3) for i in ids], pa.list_(list_type)),
    }
    if extra:
        columns["extra"] = pa.array([float(i) for i in ids], pa.float32())
    return pa.table(columns)


def write_parts(directory, drifted, files=FILES):
    """`files` Parquet files p-00..; file DRIFT is `drifted` (a table)."""
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        table = drifted if k == DRIFT else part(k)
        pq.write_table(table, str(directory / f"p-{k:02d}.parquet"), row_group_size=7)


def to_tfrecord(tmp_path, capsys, *extra):
    return run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "pq" / "*.parquet"), "--output_prefix", str(tmp_path / "tf" / "t")]
        + list(extra)
        + FAST,
        capsys,
    )


def decoded_rows(directory):
    """{id: row} of every record written, each decoded with the features it holds."""
    rows = {}
    for shard in read_shards(directory, "t-*.tfrecord"):
        for payload in shard:
            row = examples_to_record_batch([payload]).to_pylist()[0]
            rows[row["id"]] = row
    return rows


@pytest.fixture
def no_pipeline(monkeypatch):
    """Fail the test if the job gets as far as running its pipeline."""

    def refuse(build, options):
        raise AssertionError("the pipeline ran: the schemas should have been refused before it")

    monkeypatch.setattr(_common, "run_pipeline", refuse)


# -- item 4: parquet_to_tfrecord ---------------------------------------------------------------


def test_drifting_schemas_are_unified_keeping_every_column(tmp_path, capsys):
    """20 files, the 17th with `id` int32, `l` list<int32> and an extra column: every row of
    every file is written, the extra column's values included (absent in the other files' rows)."""
    drifted = part(DRIFT, id_type=pa.int32(), extra=True, list_type=pa.int32())
    write_parts(tmp_path / "pq", drifted)
    code, out, err = to_tfrecord(tmp_path, capsys, "--num_shards", "3")
    assert code == 0, err
    rows = decoded_rows(tmp_path / "tf")
    assert sorted(rows) == list(range(FILES * 30))
    for k in range(FILES):
        for row in part(k, extra=k == DRIFT).to_pylist():
            got = rows[row["id"]]
            want = {n: v for n, v in row.items() if v is not None}
            want["s"] = want["s"].encode() if "s" in want else None
            if "l" in want and len(want["l"]) == 1:  # a one-value list reads back as a scalar
                want["l"] = want["l"][0]
            assert {n: v for n, v in got.items() if v is not None} == {
                n: v for n, v in want.items() if v is not None
            }, row
    assert sum("extra" in r and r["extra"] is not None for r in rows.values()) == 30
    # the drift is said, not silent
    assert "p-16.parquet" in err and "'extra'" in err and "'id'" in err


@pytest.mark.parametrize(
    "drifted, column, types",
    [
        (part(DRIFT).set_column(0, "id", pa.array([str(i) for i in range(30)])), "id", ("int64", "string")),
        (part(DRIFT).set_column(2, "l", pa.array([1.5] * 30, pa.float64())), "l", ("list<element: int64>", "double")),
        (
            part(DRIFT).append_column("t", pa.array([0] * 30, pa.timestamp("ms"))),
            "t",
            ("timestamp[us]", "timestamp[ms]"),
        ),
    ],
    ids=["int-vs-string", "list-vs-float", "timestamp-units"],
)
def test_incompatible_types_fail_before_the_pipeline_naming_file_column_and_types(
    tmp_path, capsys, no_pipeline, drifted, column, types
):
    write_parts(tmp_path / "pq", drifted)
    if column == "t":  # the first files hold microseconds, the 17th milliseconds: never mixed
        for k in range(3):
            table = part(k).append_column("t", pa.array([0] * 30, pa.timestamp("us")))
            pq.write_table(table, str(tmp_path / "pq" / f"p-{k:02d}.parquet"))
    code, _, err = to_tfrecord(tmp_path, capsys)
    assert code == 1, err
    assert "p-16.parquet" in err and f"column {column!r}" in err, err
    assert all(t in err for t in types), err
    assert entries(tmp_path / "tf") == []


def test_null_type_columns_and_structs_unify(tmp_path, capsys):
    """A column all null in one file (type null) takes the others' type; struct children missing
    in a file are absent features there (--flatten_structs)."""
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(
        pa.table({"id": [0, 1], "n": pa.array([None, None], pa.null()), "st": [{"a": 1}, {"a": 2}]}),
        str(d / "a.parquet"),
    )
    pq.write_table(
        pa.table({"id": [2], "n": pa.array([b"x"]), "st": [{"a": 3, "b": "y"}]}),
        str(d / "b.parquet"),
    )
    code, _, err = to_tfrecord(tmp_path, capsys, "--flatten_structs")
    assert code == 0, err
    rows = decoded_rows(tmp_path / "tf")
    assert {k: {n: v for n, v in r.items() if v is not None} for k, r in rows.items()} == {
        0: {"id": 0, "st.a": 1},
        1: {"id": 1, "st.a": 2},
        2: {"id": 2, "n": b"x", "st.a": 3, "st.b": b"y"},
    }


@pytest.mark.parametrize("change", ["new-column", "other-type"])
def test_a_worker_refuses_a_file_that_changed_after_planning(tmp_path, capsys, monkeypatch, change):
    """The plan said every file has id:int64, s, l; the 17th file is replaced after planning
    (as when a worker reads a file the launcher never saw): the worker fails naming the file and
    the column, nothing is committed."""
    write_parts(tmp_path / "pq", part(DRIFT))
    run_pipeline = _common.run_pipeline

    def replace_then_run(build, options):
        replaced = (
            part(DRIFT, extra=True) if change == "new-column" else part(DRIFT).set_column(0, "id", pa.array(["x"] * 30))
        )
        pq.write_table(replaced, str(tmp_path / "pq" / f"p-{DRIFT}.parquet"))
        return run_pipeline(build, options)

    monkeypatch.setattr(_common, "run_pipeline", replace_then_run)
    code, _, err = to_tfrecord(tmp_path, capsys, "--num_shards", "4")
    assert code == 1, err
    column = "extra" if change == "new-column" else "id"
    assert f"p-{DRIFT}.parquet" in err and f"column {column!r}" in err, err
    assert not list((tmp_path / "tf").glob("t-*"))


# -- item 5: tfrecord_to_parquet ---------------------------------------------------------------

SAMPLE = 1000


def offset_of(payloads, k):
    return sum(len(p) + 16 for p in payloads[:k])


def to_parquet(tmp_path, capsys, *extra):
    return run_job(
        tfrecord_to_parquet.main,
        ["--input", str(tmp_path / "a.tfrecord"), "--output_prefix", str(tmp_path / "o" / "p")] + list(extra) + FAST,
        capsys,
    )


def test_a_feature_first_seen_after_the_sample_is_kept(tmp_path, capsys):
    """Inference reads every record (the compiled statistics walk): the 500 values of a
    feature that first appears in record 1000 are in the output."""
    write_records(
        str(tmp_path / "a.tfrecord"),
        [encode_example({"i": i, **({"late": b"v%d" % i} if i >= SAMPLE else {})}) for i in range(1500)],
    )
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 0, err
    table = pq.read_table(str(tmp_path / "o"))
    assert table.column("late").to_pylist() == [None] * SAMPLE + [b"v%d" % i for i in range(SAMPLE, 1500)]
    assert table.column("i").to_pylist() == list(range(1500))


def test_a_feature_that_changes_kind_after_the_sample_fails_before_the_pipeline(tmp_path, capsys, no_pipeline):
    write_records(
        str(tmp_path / "a.tfrecord"),
        [encode_example({"x": i if i < SAMPLE else (i / 2, "float")}) for i in range(1500)],
    )
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 1 and "feature 'x'" in err and "float" in err and "int" in err, err
    assert entries(tmp_path / "o") == []


def test_a_list_after_the_sample_makes_a_list_column(tmp_path, capsys):
    write_records(
        str(tmp_path / "a.tfrecord"), [encode_example({"x": [i] if i < SAMPLE else [i, i]}) for i in range(1200)]
    )
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 0, err
    assert pq.read_table(str(tmp_path / "o")).column("x").to_pylist()[SAMPLE - 1 : SAMPLE + 1] == [
        [SAMPLE - 1],
        [SAMPLE, SAMPLE],
    ]


@pytest.mark.parametrize("late", ["new-feature", "other-kind"])
def test_a_sampled_schema_fails_at_the_worker_naming_feature_file_and_record(tmp_path, capsys, late):
    """--infer_records 1000 infers from a sample: the first record the schema cannot hold fails
    the job naming the feature, the file and that record, and says how to include it."""
    if late == "new-feature":
        payloads = [encode_example({"i": i, **({"late": b"v"} if i >= SAMPLE else {})}) for i in range(1500)]
        feature = "late"
    else:
        payloads = [encode_example({"i": i if i < SAMPLE else (0.5, "float")}) for i in range(1500)]
        feature = "i"
    write_records(str(tmp_path / "a.tfrecord"), payloads)
    code, _, err = to_parquet(tmp_path, capsys, "--infer_records", str(SAMPLE))
    assert code == 1, err
    assert f"feature {feature!r}" in err and "a.tfrecord" in err, err
    assert f"record {SAMPLE} " in err or f"byte offset {offset_of(payloads, SAMPLE)}" in err, err
    assert "--infer_records" in err and "--features" in err, err
    assert entries(tmp_path / "o") == []


def test_a_worker_refuses_a_record_that_the_planned_schema_lacks(tmp_path, capsys, monkeypatch):
    """A file replaced after the (full) inference: its new feature fails the worker, named."""
    write_records(str(tmp_path / "a.tfrecord"), [encode_example({"i": i}) for i in range(10)])
    run_pipeline = _common.run_pipeline

    def replace_then_run(build, options):
        write_records(str(tmp_path / "a.tfrecord"), [encode_example({"i": i, "new": b"n"}) for i in range(10)])
        return run_pipeline(build, options)

    monkeypatch.setattr(_common, "run_pipeline", replace_then_run)
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 1 and "feature 'new'" in err and "a.tfrecord" in err and "byte offset 0" in err, err
    assert entries(tmp_path / "o") == []


def test_features_still_selects_and_drops_the_rest_by_request(tmp_path, capsys):
    """--features names the columns: other features are left out because the user asked, and a
    named feature's kind or shape after any sample is still checked over every record."""
    write_records(
        str(tmp_path / "a.tfrecord"),
        [encode_example({"a": [i] if i < SAMPLE else [i, i], "b": b"x"}) for i in range(1100)],
    )
    code, _, err = to_parquet(tmp_path, capsys, "--features", "a:int")
    assert code == 0, err
    table = pq.read_table(str(tmp_path / "o"))
    assert table.column_names == ["a"] and table.column("a").to_pylist()[-1] == [1099, 1099]
