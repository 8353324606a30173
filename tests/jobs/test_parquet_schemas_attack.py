"""An independent attack on the two Parquet jobs' schema policy (issue 34 items 4 and 5).

Written by someone who did not write the fix, with data of their own. The tests that fail
reproduce a broken claim (docs/jobs.md, the jobs' --help); the others pin cases that held and
that tests/jobs/test_parquet_schemas.py does not cover.
"""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.jobs import FAST, entries, read_shards, run_job

from pipelines import _common, parquet_to_tfrecord, tfrecord_to_parquet
from tfrecord_beam.arrow import examples_to_record_batch
from tfrecord_beam.example import encode_example, encode_sequence_example
from tfrecord_beam.records import write_records


def to_tfrecord(tmp_path, capsys, *extra):
    return run_job(
        parquet_to_tfrecord.main,
        ["--input", str(tmp_path / "pq" / "*.parquet"), "--output_prefix", str(tmp_path / "tf" / "t")]
        + list(extra)
        + FAST,
        capsys,
    )


def to_parquet(tmp_path, capsys, *extra, pattern="*.tfrecord*"):
    return run_job(
        tfrecord_to_parquet.main,
        ["--input", str(tmp_path / "in" / pattern), "--output_prefix", str(tmp_path / "o" / "p")] + list(extra) + FAST,
        capsys,
    )


def write(tmp_path, name, table, **kw):
    (tmp_path / "pq").mkdir(exist_ok=True)
    pq.write_table(table, str(tmp_path / "pq" / name), **kw)


def records(tmp_path, sequence=False):
    """Every record written, decoded (features with no value left out)."""
    out = []
    for shard in read_shards(tmp_path / "tf", "t-*.tfrecord"):
        for payload in shard:
            batch = examples_to_record_batch([payload], sequence=sequence)
            row = batch.to_pylist()[0] if batch.num_columns else {}
            out.append({k: v for k, v in row.items() if v is not None})
    return out


def parquet_rows(tmp_path):
    return pq.read_table(str(tmp_path / "o")).to_pylist()


def committed(directory):
    return any(n.startswith("_MANIFEST") for n in entries(directory))


# -- parquet_to_tfrecord: BROKEN ------------------------------------------------------------------


def test_duplicate_column_names_are_not_written_as_empty_records(tmp_path, capsys):
    """A file with two columns named 'x' (legal in Parquet and Arrow): the job exited 0 and
    wrote every row as an empty Example (b'\\n\\x00'): all values dropped, silently. The docs
    say duplicate names fail at once."""
    write(tmp_path, "a.parquet", pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["x", "x"]))
    code, _, err = to_tfrecord(tmp_path, capsys)
    if code == 0:  # then every value must be there
        assert all(r for r in records(tmp_path)), "rows written as empty Examples, exit 0"
    assert code == 1 and "'x'" in err, err
    assert not committed(tmp_path / "tf")


def test_duplicate_column_name_in_one_file_of_many(tmp_path, capsys):
    """The same with the duplicate in the last of 5 files only: its rows lost 'x', exit 0."""
    for k in range(4):
        write(tmp_path, f"p{k}.parquet", pa.table({"x": [k]}))
    write(tmp_path, "p4.parquet", pa.Table.from_arrays([pa.array([4]), pa.array([40])], names=["x", "x"]))
    code, _, err = to_tfrecord(tmp_path, capsys)
    if code == 0:
        assert [r.get("x") for r in records(tmp_path)] == [0, 1, 2, 3, 4], "file p4's values dropped, exit 0"
    assert code == 1 and "p4.parquet" in err and "'x'" in err, err
    assert not committed(tmp_path / "tf")


@pytest.mark.parametrize("child", [pa.int32(), pa.null()], ids=["int32", "null"])
def test_struct_children_of_other_int_widths_unify(tmp_path, capsys, child):
    """Structs unify by child name, ints of any width unify, and so does the null type: st.a
    int64 in one file, int32 (or null) in another, is planned as struct<a: int64> ("read as
    ..."), then the worker crashed with Arrow's 'Struct child array #0 does not match type
    field: int32 vs int64' (no file, no column named), exit 1."""
    write(tmp_path, "a.parquet", pa.table({"id": [0], "st": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))}))
    b = pa.array([{"a": None if pa.types.is_null(child) else 2}], pa.struct([("a", child)]))
    write(tmp_path, "b.parquet", pa.table({"id": [1], "st": b}))
    code, _, err = to_tfrecord(tmp_path, capsys, "--flatten_structs")
    assert code == 0, err
    want_b = {"id": 1} if pa.types.is_null(child) else {"id": 1, "st.a": 2}
    assert sorted(records(tmp_path), key=lambda r: r["id"]) == [{"id": 0, "st.a": 1}, want_b]


def test_fifty_files_with_a_struct_drifting_late(tmp_path, capsys):
    """50 files; the last 5 add a list and a struct column, the last of them the struct with a
    narrower child and another child (struct<a: int16, c: float>): the same crash."""
    want = []
    for k in range(50):
        ids = range(k * 4, k * 4 + 4)
        cols = {"id": pa.array(ids, pa.int64()), "s": pa.array([f"s{i}" for i in ids])}
        if k >= 45:
            cols = {
                "s": pa.array([f"s{i}" for i in ids], pa.large_string()),
                "id": pa.array(ids, pa.uint32()),
                "st": pa.array([{"a": i, "b": f"b{i}"} for i in ids]),
            }
        if k == 49:
            cols["st"] = pa.array(
                [{"a": i, "c": 0.5} for i in ids], pa.struct([("a", pa.int16()), ("c", pa.float32())])
            )
        write(tmp_path, f"p{k:02d}.parquet", pa.table(cols), row_group_size=3)
        for row in pa.table(cols).to_pylist():
            flat = {"id": row["id"], "s": row["s"].encode()}
            # a string child is a bytes feature: it decodes as bytes, as "s" does
            flat.update({f"st.{c}": v.encode() if isinstance(v, str) else v for c, v in (row.get("st") or {}).items()})
            want.append(flat)
    code, _, err = to_tfrecord(tmp_path, capsys, "--flatten_structs", "--num_shards", "4")
    assert code == 0, err
    assert sorted(records(tmp_path), key=lambda r: r["id"]) == want


def test_a_file_replaced_with_a_narrower_struct_child_after_planning(tmp_path, capsys, monkeypatch):
    """The worker's check accepts a replaced file whose struct child is int32 where the plan
    has int64 (it unifies), then the encoder must hold it: no crash without a file name."""
    write(tmp_path, "a.parquet", pa.table({"st": pa.array([{"a": 1}])}))
    write(tmp_path, "b.parquet", pa.table({"st": pa.array([{"a": 2}])}))
    run_pipeline = _common.run_pipeline

    def replace_then_run(build, options):
        write(tmp_path, "b.parquet", pa.table({"st": pa.array([{"a": 2}], pa.struct([("a", pa.int32())]))}))
        return run_pipeline(build, options)

    monkeypatch.setattr(_common, "run_pipeline", replace_then_run)
    code, _, err = to_tfrecord(tmp_path, capsys, "--flatten_structs")
    if code != 0:  # refusing it is fine if it names the file and the column
        assert "b.parquet" in err and "st" in err, err
        assert not committed(tmp_path / "tf")
    else:
        assert sorted(r["st.a"] for r in records(tmp_path)) == [1, 2]


# -- parquet_to_tfrecord: held (not covered elsewhere) --------------------------------------------


def test_held_many_files_late_drift_with_columns_and_order(tmp_path, capsys):
    """40 files, column order differing, the last 3 with id uint32, s large_string, a new list
    column; --columns id,late keeps every value of both and ignores the rest."""
    for k in range(40):
        ids = range(k * 5, k * 5 + 5)
        cols = {"s": pa.array([f"s{i}" for i in ids]), "id": pa.array(ids)}
        if k >= 37:
            cols = {
                "late": pa.array([[i, -i] for i in ids], pa.list_(pa.int16())),
                "id": pa.array(ids, pa.uint32()),
                "s": pa.array([1.5] * 5),  # not selected: may differ
            }
        write(tmp_path, f"p{k:02d}.parquet", pa.table(cols), row_group_size=2)
    code, _, err = to_tfrecord(tmp_path, capsys, "--columns", "id,late", "--num_shards", "3")
    assert code == 0, err
    got = sorted(records(tmp_path), key=lambda r: r["id"])
    assert got == [{"id": i, **({"late": [i, -i]} if i >= 185 else {})} for i in range(200)]
    assert "'late' is in 3 of 40 files" in err


@pytest.mark.parametrize("rows", [3, 12], ids=["fewer-row-groups", "more-rows"])
def test_a_file_replaced_with_other_rows_after_planning(tmp_path, capsys, monkeypatch, rows):
    """Same schema, other rows, replaced after planning (6 rows in row groups of 2 planned).
    12 rows in row groups of 5: the worker read 2 rows of each planned row group index, got the
    6 rows it expected (ids 0,1,5,6,10,11: neither the old file nor the new one) and the job
    committed them, exit 0. 3 rows in one row group: 'error: 1 out of bounds', no file named."""
    write(tmp_path, "a.parquet", pa.table({"id": list(range(6))}), row_group_size=2)
    run_pipeline = _common.run_pipeline

    def replace_then_run(build, options):
        write(tmp_path, "a.parquet", pa.table({"id": list(range(rows))}), row_group_size=5)
        return run_pipeline(build, options)

    monkeypatch.setattr(_common, "run_pipeline", replace_then_run)
    code, _, err = to_tfrecord(tmp_path, capsys)
    if code == 0:
        assert [r.get("id") for r in records(tmp_path)] == list(range(rows)), "committed a mix of two files"
    assert code == 1 and "a.parquet" in err, err
    assert not committed(tmp_path / "tf")


def test_held_float16_dictionary_and_string_flavours(tmp_path, capsys):
    write(
        tmp_path,
        "a.parquet",
        pa.table({"f": pa.array(np.array([1.5], np.float16)), "s": pa.array(["x"]).dictionary_encode()}),
    )
    write(
        tmp_path, "b.parquet", pa.table({"f": pa.array([2.25], pa.float64()), "s": pa.array(["y"], pa.large_string())})
    )
    write(tmp_path, "c.parquet", pa.table({"f": pa.array([3.0], pa.float32()), "s": pa.array([b"\xff"], pa.binary())}))
    code, _, err = to_tfrecord(tmp_path, capsys)
    assert code == 0, err
    assert records(tmp_path) == [{"f": 1.5, "s": b"x"}, {"f": 2.25, "s": b"y"}, {"f": 3.0, "s": b"\xff"}]


def test_held_a_file_with_no_row_groups_and_null_only_columns(tmp_path, capsys):
    write(tmp_path, "a.parquet", pa.table({"id": [1], "n": pa.array([None], pa.null())}))
    with pq.ParquetWriter(str(tmp_path / "pq" / "b.parquet"), pa.schema([("id", pa.int32()), ("q", pa.string())])):
        pass
    write(tmp_path, "c.parquet", pa.table({"id": [2], "n": pa.array([None], pa.null())}))
    code, _, err = to_tfrecord(tmp_path, capsys)
    assert code == 0, err
    assert records(tmp_path) == [{"id": 1}, {"id": 2}]


def test_held_uint64_above_int64_fails_naming_file_and_value(tmp_path, capsys):
    write(tmp_path, "a.parquet", pa.table({"id": pa.array([0], pa.int64())}))
    write(tmp_path, "b.parquet", pa.table({"id": pa.array([2**63 + 5], pa.uint64())}))
    code, _, err = to_tfrecord(tmp_path, capsys)
    assert code == 1 and "b.parquet" in err and "'id'" in err and str(2**63 + 5) in err, err
    assert not committed(tmp_path / "tf")


@pytest.mark.parametrize(
    "a, b",
    [
        (pa.array([0], pa.timestamp("us", tz="UTC")), pa.array([0], pa.timestamp("us"))),
        (pa.array([True]), pa.array([1])),
    ],
    ids=["timestamp-tz", "bool-int"],
)
def test_held_exact_types_refused_before_the_pipeline(tmp_path, capsys, a, b):
    write(tmp_path, "a.parquet", pa.table({"x": a}))
    write(tmp_path, "b.parquet", pa.table({"x": b}))
    code, _, err = to_tfrecord(tmp_path, capsys)
    assert code == 1 and "b.parquet" in err and "column 'x'" in err and str(a.type) in err and str(b.type) in err
    assert entries(tmp_path / "tf") == []


def test_held_sequence_columns_of_other_list_flavours(tmp_path, capsys):
    write(tmp_path, "a.parquet", pa.table({"id": [1], "l": pa.array([[[1]]])}))
    write(tmp_path, "b.parquet", pa.table({"id": [2], "l": pa.array([[[2, 3]]], pa.large_list(pa.list_(pa.int8())))}))
    code, _, err = to_tfrecord(tmp_path, capsys, "--sequence_columns", "l")
    assert code == 0, err
    assert records(tmp_path, sequence=True) == [{"id": 1, "l": [[1]]}, {"id": 2, "l": [[2, 3]]}]


# -- tfrecord_to_parquet: BROKEN ------------------------------------------------------------------


def test_a_sampled_schema_refuses_a_sequence_example_mixed_in(tmp_path, capsys):
    """--infer_records 5 over Examples, then a SequenceExample (no --sequence): its feature list
    'fl' was dropped, exit 0. The docs: a record holding a feature the schema lacks fails."""
    (tmp_path / "in").mkdir()
    recs = [encode_example({"i": j}) for j in range(20)] + [encode_sequence_example({"i": 20}, {"fl": [[1, 2], [3]]})]
    write_records(str(tmp_path / "in" / "a.tfrecord"), recs)
    code, _, err = to_parquet(tmp_path, capsys, "--infer_records", "5")
    assert code == 1 and "a.tfrecord" in err and "fl" in err, err
    assert not committed(tmp_path / "o")


def test_features_with_a_sample_skips_the_full_inference_pass(tmp_path, capsys, monkeypatch):
    """docs/jobs.md said: 'to skip [the pass], name the columns with --features name:kind,...',
    but with --features (and no --infer_records) the launcher still read every record.

    Resolved by the docs, not the code: --features gives kinds, not shapes, and whether a named
    feature is a scalar or a list column is decided over every record read
    (test_parquet_schemas.py::test_features_still_selects_and_drops_the_rest_by_request pins
    that a list met after 1,000 records is kept). The docs now say --features does not skip the
    pass and --infer_records N shortens it: both claims are checked here."""
    (tmp_path / "in").mkdir()
    write_records(str(tmp_path / "in" / "a.tfrecord"), [encode_example({"i": j}) for j in range(5000)])
    read = []
    scan = tfrecord_to_parquet.scan_stats

    def spy(*args, **kwargs):
        stats = scan(*args, **kwargs)
        read.append(stats.records)
        return stats

    monkeypatch.setattr(tfrecord_to_parquet, "scan_stats", spy)
    code, _, err = to_parquet(tmp_path, capsys, "--features", "i:int", "--infer_records", "100")
    assert code == 0, err
    assert sum(read) < 5000, f"--features with --infer_records 100: the launcher read {read} records"
    assert pq.read_table(str(tmp_path / "o")).column("i").to_pylist() == list(range(5000))
    docs = (Path(__file__).parents[2] / "docs" / "jobs.md").read_text()
    assert "does not skip the pass" in " ".join(docs.split()), "the docs still say --features skips the pass"


KINDLESS_X = b"\x0a\x07\x0a\x05\x0a\x01x\x12\x00"  # Features{'x': Feature{}} (no kind), merged into an Example


def test_a_sampled_kindless_feature_then_ints_names_the_record(tmp_path, capsys):
    """Feature 'x' with no kind in the 3 sampled records (a list<null> column), then ints in
    record 5: the job fails (good) but names 'record at byte offset 0: (records from this one
    on)', the batch's first record, not the record that holds the ints."""
    (tmp_path / "in").mkdir()
    recs = [encode_example({"i": j}) + KINDLESS_X for j in range(5)] + [encode_example({"i": 5, "x": [5, 6]})]
    write_records(str(tmp_path / "in" / "a.tfrecord"), recs)
    code, _, err = to_parquet(tmp_path, capsys, "--infer_records", "3")
    assert code == 1 and "feature 'x'" in err, err
    assert f"byte offset {sum(len(r) + 16 for r in recs[:5])}" in err, err
    assert not committed(tmp_path / "o")


# -- tfrecord_to_parquet: held (not covered elsewhere) --------------------------------------------


def test_held_a_feature_only_in_the_last_record_of_the_last_compressed_file(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    write_records(str(tmp_path / "in" / "a.tfrecord.gz"), [encode_example({"i": j}) for j in range(50)])
    write_records(str(tmp_path / "in" / "b.tfrecord"), [encode_example({"i": 50 + j}) for j in range(50)])
    last = [encode_example({"i": 100 + j}) for j in range(49)] + [encode_example({"i": 149, "z": [1.5, 2.5]})]
    write_records(str(tmp_path / "in" / "c.tfrecord.zz"), last)
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 0, err
    rows = parquet_rows(tmp_path)
    assert [r["i"] for r in rows] == list(range(150))
    assert [r["z"] for r in rows] == [None] * 149 + [[1.5, 2.5]]


def test_held_empty_feature_early_then_values_keeps_the_empty_lists(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    write_records(
        str(tmp_path / "in" / "a.tfrecord"),
        [encode_example({"i": j, "e": ([], "int") if j < 5 else j}) for j in range(10)],
    )
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 0, err
    assert [r["e"] for r in parquet_rows(tmp_path)] == [[]] * 5 + [[j] for j in range(5, 10)]


@pytest.mark.parametrize(
    "late, why",
    [
        ({"i": ([1, 2], "int")}, "holds 2 values"),
        ({"i": (1.5, "float")}, "holds float values"),
        ({"i": ([], "int")}, "holds 0 values"),
    ],
    ids=["list", "float", "empty"],
)
def test_held_features_with_a_sample_fails_at_the_worker(tmp_path, capsys, late, why):
    (tmp_path / "in").mkdir()
    recs = [encode_example({"i": j}) for j in range(10)] + [encode_example(late)]
    write_records(str(tmp_path / "in" / "a.tfrecord"), recs)
    code, _, err = to_parquet(tmp_path, capsys, "--infer_records", "5", "--features", "i:int")
    assert code == 1 and "a.tfrecord" in err and "feature 'i'" in err and why in err, err
    assert f"byte offset {sum(len(r) + 16 for r in recs[:10])}" in err, err
    assert not committed(tmp_path / "o")


def test_held_skip_corrupt_during_inference_still_sees_later_features(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    recs = [encode_example({"i": j}) for j in range(10)] + [encode_example({"i": 10, "late": b"L"})]
    path = tmp_path / "in" / "a.tfrecord"
    write_records(str(path), recs)
    data = bytearray(path.read_bytes())
    data[sum(len(r) + 16 for r in recs[:4]) + 13] ^= 0xFF  # record 4's payload
    path.write_bytes(bytes(data))
    code, _, err = to_parquet(tmp_path, capsys)
    assert code == 1 and "a.tfrecord" in err and "record 4" in err, err
    assert not committed(tmp_path / "o")
    code, _, err = to_parquet(tmp_path, capsys, "--skip_corrupt")
    assert code == 0, err
    rows = parquet_rows(tmp_path)
    assert [r["i"] for r in rows] == [0, 1, 2, 3, 5, 6, 7, 8, 9, 10] and rows[-1]["late"] == b"L"


def test_held_round_trip_over_drifting_files(tmp_path, capsys):
    for k in range(3):
        ids = range(k * 40, k * 40 + 40)
        cols = {
            "id": pa.array(ids, pa.int32() if k == 2 else pa.int64()),
            "s": pa.array([None if i % 4 == 0 else f"s{i}" for i in ids], pa.large_string() if k else pa.string()),
            "l": pa.array([[i] * (i % 3) for i in ids], pa.list_(pa.int64())),
        }
        if k == 2:
            cols["late"] = pa.array([b"x%d" % i for i in ids])
        write(tmp_path, f"p{k}.parquet", pa.table(cols), row_group_size=17)
    code, _, err = to_tfrecord(tmp_path, capsys, "--num_shards", "2")
    assert code == 0, err
    code, _, err = run_job(
        tfrecord_to_parquet.main,
        ["--input", str(tmp_path / "tf" / "t"), "--output_prefix", str(tmp_path / "o" / "p")] + FAST,
        capsys,
    )
    assert code == 0, err
    back = {r["id"]: r for r in parquet_rows(tmp_path)}
    for k in range(3):
        for row in pq.read_table(str(tmp_path / "pq" / f"p{k}.parquet")).to_pylist():
            got = back[row["id"]]
            assert got["s"] == (row["s"].encode() if row["s"] is not None else None)
            assert got["l"] == row["l"] and got.get("late") == row.get("late")


# -- on s3:// (the jobs' footers and inference pass read through Beam's filesystems) -------------


def test_held_drift_on_s3(s3_server, s3_bucket, s3_trap, monkeypatch, capsys):
    import io

    from helpers.s3server import Bucket, framed

    bucket = Bucket(s3_server, s3_bucket, s3_server.client(), monkeypatch)
    for k in range(6):
        cols = {"id": pa.array([k], pa.int32() if k == 5 else pa.int64())}
        if k == 5:
            cols["extra"] = pa.array([b"e"])
        sink = io.BytesIO()
        pq.write_table(pa.table(cols), sink)
        bucket.put(f"pq/p{k}.parquet", sink.getvalue())
    args = ["--input", bucket.uri("pq/*.parquet"), "--output_prefix", bucket.uri("tf/t")]
    code, _, err = run_job(parquet_to_tfrecord.main, args + bucket.flags, capsys)
    assert code == 0, err
    assert "'extra' is in 1 of 6 files" in err
    bucket.put("in/a.tfrecord", framed([encode_example({"i": j}) for j in range(30)] + [encode_example({"z": 1.5})]))
    args = ["--input", bucket.uri("in/a.tfrecord"), "--output_prefix", bucket.uri("back/p")]
    code, _, err = run_job(tfrecord_to_parquet.main, args + bucket.flags, capsys)
    assert code == 0, err
    back = pq.read_table(io.BytesIO(bucket.get("back/p-00000-of-00001.parquet")))
    assert back.column("z").to_pylist() == [None] * 30 + [1.5]
    args = ["--input", bucket.uri("in/a.tfrecord"), "--output_prefix", bucket.uri("samp/p"), "--infer_records", "10"]
    code, _, err = run_job(tfrecord_to_parquet.main, args + bucket.flags, capsys)
    assert code == 1 and "feature 'z'" in err and "a.tfrecord" in err, err
    assert not [k for k in bucket.keys("samp/") if "_MANIFEST" in k]
    # the parquet_to_tfrecord output holds every row
    import tempfile

    from tfrecord_beam.example import decode_example
    from tfrecord_beam.records import read_records

    got = []
    for key in bucket.keys("tf/"):
        if key.endswith(".tfrecord"):
            with tempfile.NamedTemporaryFile(suffix=".tfrecord") as f:
                f.write(bucket.get(f"tf/{key}"))
                f.flush()
                got += [decode_example(p) for p in read_records(f.name)]
    assert sorted(int(r["id"][0]) for r in got) == list(range(6))
    assert sum("extra" in r for r in got) == 1
    assert s3_trap.connections == 0
