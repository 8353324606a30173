"""Shared CLI plumbing: --help with examples, Beam options, staged output, error lines."""

import pytest
from helpers.jobs import entries, run_job, write_files

from pipelines import _common, build_index, mix, parquet_to_tfrecord, reshard, tfrecord_to_parquet

JOBS = [build_index, reshard, mix, parquet_to_tfrecord, tfrecord_to_parquet]


@pytest.mark.parametrize("job", JOBS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_help_shows_examples_and_beam_flags(job, capsys):
    with pytest.raises(SystemExit) as exit_info:
        job.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    name = job.__name__.rsplit(".", 1)[-1]
    assert "examples:" in out and f"python -m pipelines.{name}" in out
    assert "--runner=DataflowRunner" in out and "--runner=FlinkRunner" in out
    assert "--skip_corrupt" in out and "--verbose" in out and "130 interrupted" in out
    if job is not build_index:  # jobs with an --output_prefix: the output lifecycle and cleaning by hand
        assert "--overwrite" in out and "_MANIFEST.NAME.json" in out and "To clean by hand" in out


def test_unknown_arguments_go_to_beam_and_runner_defaults_to_fnapi():
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    options = _common.pipeline_options(["--direct_num_workers=3"])
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert _common.pipeline_options(["--runner=FnApiRunner"]).view_as(StandardOptions).runner == "FnApiRunner"


def test_unknown_arguments_are_errors(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [3])
    code, _, err = run_job(
        reshard.main,
        [
            "--input",
            str(tmp_path / "in" / "*"),
            "--output_prefix",
            str(tmp_path / "o" / "p"),
            "--num_shards",
            "1",
            "--shufle",
        ],
        capsys,
    )
    assert code == 2 and "--shufle" in err and "did you mean --shuffle" in err
    assert entries(tmp_path / "o") == []


def test_beam_flags_reach_the_pipeline(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [10])
    code, _, err = run_job(
        reshard.main,
        [
            "--input",
            str(tmp_path / "in" / "*"),
            "--output_prefix",
            str(tmp_path / "o" / "p"),
            "--num_shards",
            "1",
            "--runner=NoSuchRunner",
        ],
        capsys,
    )
    assert code == 1 and "NoSuchRunner" in err
    assert entries(tmp_path / "o") == []


def test_error_line_digs_out_the_cause():
    from tfrecord_beam.errors import CorruptRecordError

    try:
        try:
            raise CorruptRecordError("f.tfrecord", 12, 3, "length CRC mismatch")
        except CorruptRecordError as inner:
            raise RuntimeError("wrapped by a runner") from inner
    except RuntimeError as outer:
        assert _common._error_line(outer) == "f.tfrecord, record 3, byte offset 12: length CRC mismatch"
    text = "Traceback...\nJobError: source 1 has no records [while running 'Select']"
    assert _common._error_line(RuntimeError(text)) == "source 1 has no records"


def test_summary_prints_counts_and_json(capsys):
    _common.Summary("x", files=2, records=10, bytes=100, seconds=2.0, extra={"k": "v"}).print()
    out = capsys.readouterr().out
    assert "records: 10" in out and "(5 records/s)" in out and "k: v" in out
    assert '"records": 10' in out


def test_file_uris_work_for_inputs_and_outputs(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import parquet_to_tfrecord

    pq.write_table(pa.table({"a": [1, 2, 3]}), str(tmp_path / "t.parquet"))
    code, _, err = run_job(
        parquet_to_tfrecord.main,
        [
            "--input",
            f"file://{tmp_path}/*.parquet",
            "--output_prefix",
            f"file://{tmp_path}/tf/t",
            "--runner=FnApiRunner",
        ],
        capsys,
    )
    assert code == 0, err
    code, _, err = run_job(
        reshard.main,
        [
            "--input",
            f"file://{tmp_path}/tf/*.tfrecord",
            "--output_prefix",
            f"file://{tmp_path}/rs/r",
            "--num_shards",
            "2",
            "--runner=FnApiRunner",
        ],
        capsys,
    )
    assert code == 0, err
    assert entries(tmp_path / "rs") == [
        "_MANIFEST.r.json",
        "r-00000-of-00002.tfindex",
        "r-00000-of-00002.tfrecord",
        "r-00001-of-00002.tfindex",
        "r-00001-of-00002.tfrecord",
    ]


def test_inputs_may_be_directories_and_leave_sidecars_out(tmp_path):
    from tfrecord_beam.records import write_records

    for name in ("a.tfrecord", "b.tfrecord.gz"):
        write_records(str(tmp_path / name), [b"x"], index_path=True)
    (tmp_path / "_MANIFEST.json").write_text("{}")
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    assert _common.expand_inputs([str(tmp_path)]) == [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord.gz")]
    assert _common.expand_inputs([str(tmp_path) + "/*"]) == [
        str(tmp_path / n) for n in ("a.tfrecord", "b.tfrecord.gz", "t.parquet")
    ]
    assert _common.expand_inputs([str(tmp_path)], dir_glob="*.parquet") == [str(tmp_path / "t.parquet")]
    with pytest.raises(_common.JobError, match="matches no files"):
        _common.expand_inputs([str(tmp_path / "empty_dir_glob*")])


def test_reshard_reads_a_directory(tmp_path, capsys):
    from tfrecord_beam.records import RecordReader, write_records

    src = tmp_path / "in"
    src.mkdir()
    write_records(str(src / "a.tfrecord"), [b"a%d" % i for i in range(5)], index_path=True)
    write_records(str(src / "b.tfrecord"), [b"b%d" % i for i in range(3)], index_path=True)
    assert reshard.main(["--input", str(src), "--output_prefix", str(tmp_path / "out" / "r"), "--num_shards", "2"]) == 0
    got = sorted(p for f in sorted((tmp_path / "out").glob("r-*.tfrecord")) for p in RecordReader(str(f)))
    assert got == sorted([b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(3)])
