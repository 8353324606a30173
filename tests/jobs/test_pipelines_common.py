"""Shared CLI plumbing: --help with examples, Beam options, staged output, error lines."""

import importlib
import json
import os
import subprocess
import sys

import pytest
from helpers.fixtures import REPO
from helpers.jobs import FAST, entries, run_job, summary_json, write_files

import pipelines
from pipelines import _common, build_index, parquet_to_tfrecord, reshard

JOBS = [importlib.import_module(f"pipelines.{name}") for name in pipelines.JOBS]


@pytest.mark.parametrize("job", JOBS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_help_shows_examples_and_beam_flags(job, capsys):
    with pytest.raises(SystemExit) as exit_info:
        job.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    name = job.__name__.rsplit(".", 1)[-1]
    assert "examples:" in out and f"python -m pipelines.{name}" in out
    # only flags a test runs: Flink and Spark through the job service `make runners` starts (issue 37 item 3),
    # Dataflow with the staged wheel its workers install (issue 36 item 2)
    assert "--runner=DataflowRunner" in out and "--extra_package wheelhouse/tfrecord_beam-" in out
    assert "--runner=PortableRunner --job_endpoint=" in out and "--runner=FlinkRunner" not in out
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


def test_summary_names_input_and_output_with_rates_and_json_counts(capsys):
    summary = _common.Summary(
        "x",
        files=2,
        records=10_000,
        bytes=1_500_000,
        seconds=2.0,
        input_files=1,
        input_bytes=3_000_000,
        extra={"k": "v", "shards": 1_234, "per_source": [3, 1]},
    )
    summary.print()
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "== x summary ==",
        "input:   1 file, 3,000,000 bytes (3.0 MB)",
        "output:  2 files, 10,000 records, 1,500,000 bytes (1.5 MB)",
        "wall:    2.0 s (5,000 records/s, 1.5 MB/s)",
    ]
    assert out[4:7] == ["k: v", "shards: 1,234", "per_source: 3, 1"]
    data = json.loads(out[-1][len("json: ") :])
    assert data == {
        "job": "x",
        "files": 2,
        "records": 10_000,
        "bytes": 1_500_000,
        "seconds": 2.0,
        "input_files": 1,
        "input_bytes": 3_000_000,
        "k": "v",
        "shards": 1_234,
        "per_source": [3, 1],
    }


def test_summary_singular_and_plural():
    from pipelines._summary import plural, size

    assert [plural(n, "record") for n in (0, 1, 2, 1_000_000)] == [
        "0 records",
        "1 record",
        "2 records",
        "1,000,000 records",
    ]
    assert size(1) == "1 byte (0.0 MB)" and size(2_500_000) == "2,500,000 bytes (2.5 MB)"
    one = _common.Summary("x", files=1, records=1, bytes=1, seconds=1.0).lines()
    assert one[1] == "output:  1 file, 1 record, 1 byte (0.0 MB)"


def test_summary_wall_time_counts_from_the_process_start():
    """A command's wall time includes the interpreter's and the imports' seconds."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(1.0); from pipelines._summary import process_start; "
            "print(time.time() - process_start())",
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert 1.0 <= float(done.stdout) < 30.0


def test_job_summaries_leave_the_list_of_outputs_to_the_manifest(tmp_path, capsys):
    write_files(tmp_path / "in", "a", [30, 20])
    code, out, _ = run_job(
        reshard.main,
        [
            "--input",
            str(tmp_path / "in" / "*.tfrecord"),
            "--output_prefix",
            str(tmp_path / "o" / "x"),
            "--num_shards",
            "3",
        ]
        + FAST,
        capsys,
    )
    assert code == 0
    summary = summary_json(out)
    assert "outputs" not in summary and not any(isinstance(v, list) for v in summary.values())
    assert summary["manifest"] == str(tmp_path / "o" / "_MANIFEST.x.json")
    assert (summary["input_files"], summary["files"], summary["records"]) == (2, 3, 50)
    assert "input:   2 files, " in out and "output:  3 files, 50 records, " in out


def test_file_uris_work_for_inputs_and_outputs(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

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
