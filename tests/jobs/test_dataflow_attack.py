"""Attacks on the Dataflow launch checks (issue 36 items 1-2, pipelines/_dataflow.py): each test
is a case that breaks a claim of docs/runners.md's Dataflow section or _dataflow's docstring."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from helpers.s3server import TrapEndpoint

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
    problem = _problem(
        f"--runner={spelling}", *DATAFLOW[1:], WHEEL, "--dry_run=True", input=["gs://b/x"], output_prefix="gs://b/o"
    )
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
    ["musllinux_1_2_x86_64", "manylinux_2_17_aarch64", "linux_i686", "manylinux2014_ppc64le"],
)
def test_a_wheel_the_default_workers_cannot_install_is_refused(platform):
    """Dataflow's default workers run Beam's Debian (glibc) x86_64 container: pip there refuses
    a musllinux wheel and an aarch64 one ('not a supported wheel on this platform'), so the
    workers would lack the package. The check only asks for 'linux' in the platform tag."""
    package = f"--extra_package=w/tfrecord_beam-0.1.0-{PY}-{PY}-{platform}.whl"
    problem = _problem(*DATAFLOW, package, input=["gs://b/x"], output_prefix="gs://b/o")
    assert problem is not None and "Linux wheel" in str(problem), problem


@pytest.mark.parametrize(
    "flag", ["--temp_location=/tmp/tfrb-attack/tmp", "--staging_location=/tmp/tfrb-attack/staging"]
)
def test_a_local_temp_or_staging_location_is_refused_on_dataflow(flag):
    """--temp_location / --staging_location are where the workers write and read the job's
    files: a local one is the 'local path on Dataflow' the launcher says it refuses, and the
    issue names --temp_location mistakes as what a dry run must find before a cloud job."""
    flags = [f for f in DATAFLOW if not f.startswith("--temp_location")] + [flag]
    if flag.startswith("--staging"):
        flags.append("--temp_location=/tmp/tfrb-attack/tmp")
    problem = _problem(*flags, WHEEL, input=["gs://b/x"], output_prefix="gs://b/o")
    assert problem is not None and flag.split("=")[0] in str(problem), problem


def _buckets(endpoint: str) -> set:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(endpoint + "/storage/v1/b", timeout=10) as answer:
        return {b["name"] for b in json.load(answer).get("items", [])}


@pytest.mark.parametrize("temp", [["--temp_location=LOCAL"], []], ids=["local-temp_location", "no-temp_location"])
def test_a_dry_run_creates_no_bucket_and_refuses_a_bad_temp_location(gcs, tmp_path, temp):
    """A dry run with a local --temp_location (or none) on the fake-gcs-server: Beam's
    GoogleCloudOptions validation, finding no gs:// temp or staging location, calls
    gcsio.get_or_create_default_gcs_bucket and CREATES gs://dataflow-staging-REGION-HASH in the
    project (on real GCS: a bucket created through storage.googleapis.com by a run that says it
    submitted and committed nothing), and the launcher exits 0 calling it a dry run."""
    from helpers.scale import write_tfrecords

    files, _ = write_tfrecords(tmp_path / "d", 20, 1, files=1)
    gcs.upload(files[0], "in/a.tfrecord")
    wheel = tmp_path / "w" / f"tfrecord_beam-0.1.0-{PY}-{PY}-manylinux_2_17_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"not looked into by a dry run")
    temp = [t.replace("LOCAL", str(tmp_path / "tmp")) for t in temp]
    before = _buckets(gcs.server.endpoint)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env.update({k: "http://127.0.0.1:1" for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")})
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    argv = [sys.executable, "-m", "pipelines.reshard", "--input", f"gs://{gcs.bucket}/in/*", "--output_prefix"]
    argv += [f"gs://{gcs.bucket}/out/t", "--num_shards", "2", "--runner=DataflowRunner", "--dry_run=True"]
    argv += ["--project=my-project", "--region=us-central1", f"--extra_package={wheel}"] + temp
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    created = _buckets(gcs.server.endpoint) - before
    assert not created, f"the dry run created bucket(s) {sorted(created)} (exit {done.returncode})"
    assert done.returncode == 1 and "temp_location" in done.stderr, (done.returncode, done.stderr[-2000:])


ROOT = Path(__file__).resolve().parents[2]
WHEEL_NAME = f"tfrecord_beam-0.1.0-{PY}-{PY}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
DRY_LINE = "dry run: the job was built and not submitted: nothing ran, nothing was committed"


# -- dry runs on the fake-gcs-server ------------------------------------------------------------


def _bucket_names(gcs) -> List[str]:
    with urllib.request.urlopen(gcs.server.endpoint + "/storage/v1/b", timeout=30) as answer:
        return sorted(b["name"] for b in json.loads(answer.read()).get("items", []))


def _setup(gcs, tmp_path) -> Dict[str, str]:
    from tfrecord_beam.records import write_records

    local = tmp_path / "a.tfrecord"
    write_records(str(local), [b"record %d" % i for i in range(50)])
    gcs.upload(local, "in/a.tfrecord")
    wheel = tmp_path / "w" / WHEEL_NAME  # Beam's dry run checks only that the file exists
    wheel.parent.mkdir()
    wheel.write_bytes(b"not read in a dry run")
    return {"input": f"gs://{gcs.bucket}/in/a.tfrecord", "wheel": str(wheel)}


def _launch(
    job: str,
    args: List[str],
    extra_env: Optional[Dict[str, str]] = None,
    timeout: float = 120,
    drop: tuple = (),
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra_env or {})
    cmd = [sys.executable, "-m", f"pipelines.{job}", *[a for a in args if a.split("=")[0] not in drop]]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _dry_flags(gcs, where: Dict[str, str]) -> List[str]:
    return [
        "--runner=DataflowRunner",
        "--dry_run=True",
        "--project=my-project",
        "--region=us-central1",
        f"--temp_location=gs://{gcs.bucket}/tmp",
        f"--extra_package={where['wheel']}",
    ]


def test_dry_run_without_temp_location_contacts_google_and_creates_a_bucket(gcs, tmp_path):
    """Without --temp_location Beam's Dataflow options look up the project number at
    cloudresourcemanager.googleapis.com (through the proxy: the trap counts it; 60 s of
    retries) and create a `dataflow-staging-REGION-*` bucket; the dry run then says it built
    the job (exit 0). A dry run must contact no Google host and write nothing: the missing
    --temp_location should be an error found offline."""
    where = _setup(gcs, tmp_path)
    trap = TrapEndpoint()
    buckets = _bucket_names(gcs)
    env = {k: trap.url for k in ("HTTPS_PROXY", "https_proxy")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    args = ["--input", where["input"], "--output_prefix", f"gs://{gcs.bucket}/out/r", "--num_shards", "1"]
    try:
        try:
            run = _launch("reshard", args + _dry_flags(gcs, where), env, timeout=40, drop=("--temp_location",))
            outcome = f"exit {run.returncode}\n{run.stdout[-800:]}\n{run.stderr[-800:]}"
        except subprocess.TimeoutExpired:
            run, outcome = None, "still waiting after 40 s"
        reached = trap.connections
        created = sorted(set(_bucket_names(gcs)) - set(buckets))
    finally:
        trap.close()
        for name in set(_bucket_names(gcs)) - set(buckets):  # leave the shared server as found
            gcs.server.remove_bucket(name)
    assert (reached, created) == (0, []), (
        f"{reached} connection(s) to Google through the proxy, created {created}; {outcome}"
    )
    assert run is not None and run.returncode != 0 and "temp_location" in run.stderr, outcome


def test_dry_run_does_not_complete_a_dead_runs_commit(gcs, tmp_path):
    """A run killed after its commit point leaves a journal that "the next run completes". A
    dry run is not a run: it says "nothing was committed", yet it completes that commit (the
    manifest and shards appear, the staging goes)."""
    where = _setup(gcs, tmp_path)
    out = f"gs://{gcs.bucket}/out/r"
    args = ["--input", where["input"], "--output_prefix", out, "--num_shards", "2"]
    killed = _launch("reshard", args, {"TFRECORD_BEAM_COMMIT_STOP_AFTER": "2"})
    assert killed.returncode != 0 and any("_JOURNAL.json" in k for k in gcs.keys("out/")), killed.stderr[-2000:]
    before = gcs.keys("out/")
    run = _launch("reshard", args + ["--overwrite"] + _dry_flags(gcs, where))
    assert run.returncode == 0 and DRY_LINE in run.stdout, run.stderr[-2000:]
    after = gcs.keys("out/")
    assert after == before, f"the dry run changed the output: {sorted(set(after) ^ set(before))}\n{run.stderr[-800:]}"


def test_dry_run_leaves_no_lock_when_the_output_dir_has_brackets(gcs, tmp_path):
    """gs://B/out/br[1]/r: the dry run's output check takes the commit lock and cannot find it
    again (the lock's listing globs the directory, where [1] is a character class), so a
    `.tfrecord_beam-lock.r.*.json` stays in the bucket, one more each dry run. (A real run on
    FnApiRunner to such a prefix left its staging and the lock too.)"""
    where = _setup(gcs, tmp_path)
    before = gcs.keys()
    args = ["--input", where["input"], "--output_prefix", f"gs://{gcs.bucket}/out/br[1]/r", "--num_shards", "1"]
    run = _launch("reshard", args + _dry_flags(gcs, where))
    assert run.returncode == 0 and DRY_LINE in run.stdout, run.stderr[-2000:]
    assert gcs.keys() == before, sorted(set(gcs.keys()) ^ set(before))
