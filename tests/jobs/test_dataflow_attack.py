"""Attacks on the Dataflow launch checks (issue 36 items 1-2, pipelines/_dataflow.py): each test
is a case that breaks a claim of docs/runners.md's Dataflow section or _dataflow's docstring."""

from __future__ import annotations

import argparse
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import _dataflow

PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
WHEEL = f"--extra_package=w/tfrecord_beam-0.1.0-{PY}-{PY}-manylinux_2_17_x86_64.whl"
DATAFLOW = ["--runner=DataflowRunner", "--project=p-1", "--region=us-central1", "--temp_location=gs://b/tmp"]


def _problem(*flags: str, **args) -> object:
    return _dataflow.launch_problem(argparse.Namespace(**args), PipelineOptions(list(flags)))


@pytest.mark.parametrize(
    "args",
    [
        {"input": ["file:///tmp/data/a.tfrecord"], "output_prefix": "gs://b/o"},
        {"input": ["gs://b/x"], "output_prefix": "file:///tmp/out/train"},
        {"source": ["file:///tmp/data/*=1"], "output_prefix": "gs://b/o"},
        {"input": ["gs://b/x"], "output_dir": "file:///tmp/idx"},
    ],
    ids=["input", "output_prefix", "source", "output_dir"],
)
def test_a_file_uri_is_a_local_path_and_is_refused(args):
    """file:///... names this machine's files exactly like /...; Beam's LocalFileSystem serves
    it, so on Dataflow each worker would read or write its own disk. The check treats any '://'
    as remote."""
    problem = _problem(*DATAFLOW, WHEEL, **args)
    assert problem is not None and "cannot see this machine's files" in str(problem), problem


@pytest.mark.parametrize("spelling", ["dataflow", "Dataflow", "dataflowrunner", "DATAFLOWRUNNER"])
def test_every_spelling_beam_takes_for_dataflow_gets_the_local_path_refusal(spelling):
    """Beam's create_runner maps these (case-insensitive, 'runner' appended) to DataflowRunner;
    the launcher compares the flag's text with 'DataflowRunner', so a local path and a launch
    with no package for the workers go through to a real submission."""
    from apache_beam.runners.runner import create_runner

    assert type(create_runner(spelling)).__name__ == "DataflowRunner"
    problem = _problem(f"--runner={spelling}", *DATAFLOW[1:], input=["data/a.tfrecord"], output_prefix="out/t")
    assert problem is not None and "cannot see this machine's files" in str(problem), problem


@pytest.mark.parametrize("spelling", ["dataflow", "Dataflow", "dataflowrunner"])
def test_a_dry_run_on_dataflow_spelled_otherwise_is_not_refused(spelling):
    """`--runner=dataflow --dry_run=True` is a Dataflow dry run for Beam, and the launcher
    refuses it as 'honoured only by DataflowRunner: on dataflow the job would run'."""
    problem = _problem(f"--runner={spelling}", *DATAFLOW[1:], WHEEL, "--dry_run=True", input=["gs://b/x"], output_prefix="gs://b/o")
    assert problem is None, problem
    assert _dataflow.is_dry_run(PipelineOptions([f"--runner={spelling}", "--dry_run=True"]))


@pytest.mark.parametrize("value", ["False", "false", "0"])
def test_dry_run_false_on_another_runner_is_not_refused_as_dry_run_true(value):
    """Beam's --dry_run has no type, so '--dry_run=False' is the string 'False' (truthy); the
    launcher refuses it on FnApiRunner with a message quoting '--dry_run=True'. (On Dataflow the
    same string makes Beam do a dry run: neither side parses it.)"""
    problem = _problem("--runner=FnApiRunner", f"--dry_run={value}", input=["x"], output_prefix="o")
    assert problem is None, problem


@pytest.mark.parametrize(
    "platform",
    ["musllinux_1_2_x86_64", "manylinux_2_17_aarch64"],
)
def test_a_wheel_the_default_workers_cannot_install_is_refused(platform):
    """Dataflow's default workers run Beam's Debian (glibc) x86_64 container: pip there refuses
    a musllinux wheel and an aarch64 one ('not a supported wheel on this platform'), so the
    workers would lack the package. The check only asks for 'linux' in the platform tag."""
    package = f"--extra_package=w/tfrecord_beam-0.1.0-{PY}-{PY}-{platform}.whl"
    problem = _problem(*DATAFLOW, package, input=["gs://b/x"], output_prefix="gs://b/o")
    assert problem is not None and "Linux wheel" in str(problem), problem


def test_a_missing_extra_package_is_refused(tmp_path):
    """A wheel or sdist that is not there is no route to the workers."""
    for name in (f"tfrecord_beam-0.1.0-{PY}-{PY}-manylinux_2_17_x86_64.whl", "tfrecord_beam-0.1.0.tar.gz"):
        problem = _problem(*DATAFLOW, f"--extra_package={tmp_path / 'gone' / name}", input=["gs://b/x"], output_prefix="gs://b/o")
        assert problem is not None, name


def test_a_directory_named_like_an_sdist_is_refused(tmp_path):
    where = tmp_path / "tfrecord_beam-0.1.0.tar.gz"
    where.mkdir()
    problem = _problem(*DATAFLOW, f"--extra_package={where}", input=["gs://b/x"], output_prefix="gs://b/o")
    assert problem is not None
