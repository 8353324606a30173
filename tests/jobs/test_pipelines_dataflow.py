"""The launcher on Dataflow without building a job (pipelines/_dataflow.py, _summary.py): what
it refuses before any work, and the dry run's summary. The dry runs themselves are the runner
matrix's dataflow-dryrun column (tests/runners/test_dataflow_dryrun.py)."""

from __future__ import annotations

import argparse
import json
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import _dataflow, reshard
from pipelines._summary import Summary

PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
DATAFLOW = ["--runner=DataflowRunner", "--project=p-1", "--region=us-central1", "--temp_location=gs://b/tmp"]


def _problem(*flags: str, **args) -> object:
    return _dataflow.launch_problem(argparse.Namespace(**args), PipelineOptions(list(flags)))


@pytest.mark.parametrize(
    "package",
    [
        f"w/tfrecord_beam-0.1.0-{PY}-{PY}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        f"w/tfrecord_beam-0.1.0-{PY}-{PY}-linux_x86_64.whl",
        "dist/tfrecord_beam-0.1.0.tar.gz",
    ],
)
def test_a_wheel_or_sdist_of_this_package_is_a_route_to_the_workers(package):
    assert _problem(*DATAFLOW, f"--extra_package={package}", input=["gs://b/x"], output_prefix="gs://b/o") is None


@pytest.mark.parametrize("flag", ["--setup_file=./setup.py", "--requirements_file=r.txt", "--sdk_container_image=i"])
def test_routes_the_launcher_cannot_look_into_are_trusted(flag):
    assert _problem(*DATAFLOW, flag, input=["gs://b/x"]) is None


def test_no_route_for_the_package_is_refused():
    problem = str(_problem(*DATAFLOW, "--extra_package=other-1.0.tar.gz", input=["gs://b/x"]))
    assert "would not have tfrecord_beam" in problem and "make wheel" in problem


def test_a_wheel_for_another_python_or_platform_is_refused():
    for name in ("tfrecord_beam-0.1.0-cp27-cp27-linux_x86_64.whl", f"tfrecord_beam-0.1.0-{PY}-{PY}-win_amd64.whl"):
        problem = str(_problem(*DATAFLOW, f"--extra_package={name}", input=["gs://b/x"]))
        assert f"not a {PY} Linux wheel" in problem, problem


def test_local_paths_are_refused_on_dataflow_only():
    ok = f"--extra_package=tfrecord_beam-0.1.0-{PY}-{PY}-linux_x86_64.whl"
    problem = str(_problem(*DATAFLOW, ok, input=["gs://b/x", "data/a.tfrecord"], source=["local/*=0.5"]))
    assert "--input data/a.tfrecord" in problem and "--source local/*" in problem and "gs://b/x" not in problem
    assert _problem("--runner=FnApiRunner", input=["data/a.tfrecord"]) is None


def test_dry_run_on_another_runner_is_refused(tmp_path, capsys):
    code = reshard.main(
        ["--input", str(tmp_path), "--output_prefix", str(tmp_path / "o"), "--num_shards", "1"] + ["--dry_run=True"]
    )
    assert code == 1
    assert (
        "--dry_run=True is honoured only by DataflowRunner: on FnApiRunner the job would run" in capsys.readouterr().err
    )
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_summary_counts_nothing_and_says_why():
    summary = Summary("reshard", seconds=1.5, dry_run=True, extra={"steps": 58})
    lines = summary.lines()
    assert lines[1] == "dry run: the job was built and not submitted: nothing ran, nothing was committed"
    assert not any(line.startswith(("output:", "input:")) for line in lines), lines
    fields = json.loads(lines[-1][len("json: ") :])
    assert fields["dry_run"] is True and fields["submitted"] is False and fields["committed"] is False
    assert "dry_run" not in Summary("reshard").as_dict()
