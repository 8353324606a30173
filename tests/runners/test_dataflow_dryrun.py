"""The `dataflow-dryrun` column (issue 36 item 1): every job, skip_corrupt variants too, built by
DataflowRunner with --dry_run=True over gs:// inputs and outputs on a fake-gcs-server, offline.

Each test reads what Beam built (the record the launcher writes to --dataflow_job_file:
pipelines/_dataflow.py) and checks that the job request, its options and its environment are
Dataflow's; that no step names a local path (every step's payload, its pickled functions
unpacked, holds the job's gs:// paths and none of this machine's temporary paths); that the
workers get this package with its compiled engine (the manylinux wheel `make wheel` builds,
staged); and that the launcher says a dry run submitted and committed nothing (exit 0, no
warning, nothing left in the bucket). Any connection to Google (the GCE metadata server, or
anything through the proxy every launch is pointed at) fails the test. A last test installs the
staged wheel in a clean venv: `tfrecord-beam --version` reports the native engine.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import fcntl
import json
import os
import re
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pytest
from helpers import gcsserver
from helpers import runner_matrix as rm
from helpers.runner_data import Data
from helpers.s3server import TrapEndpoint

DRY_RUN = True  # conftest: this module gets the dry-run columns
DRY_LINE = "dry run: the job was built and not submitted: nothing ran, nothing was committed"
PYTHON_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def _wheel_dir(tmp_path_factory) -> Path:
    """One directory for the whole run (shared by xdist workers, fresh for each run)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "dataflow-wheelhouse"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel `make wheel` builds (built once a run, under a lock: xdist workers share it)."""
    where = _wheel_dir(tmp_path_factory)
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(str(where) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(where.glob("tfrecord_beam-*.whl")):
            venv = Path(sys.executable).parent.parent
            make = ["make", "-o", "install", "wheel", f"PY={sys.executable}", f"VENV={venv}", f"WHEEL_DIR={where}"]
            done = subprocess.run(make, cwd=rm.ROOT, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"make wheel failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    found = list(where.glob("tfrecord_beam-*.whl"))
    assert len(found) == 1, found
    return found[0]


@dataclass
class Cloud:
    """The module's bucket (inputs under it), the trap every connection to Google reaches."""

    bucket: gcsserver.GcsBucket
    data: Data
    trap: TrapEndpoint
    wheel: Path

    def keys(self) -> List[str]:
        return self.bucket.keys()


@pytest.fixture(scope="module")
def cloud(gcs_server, wheel, tmp_path_factory) -> Iterator[Cloud]:
    home = tmp_path_factory.mktemp("dataflow-home")
    trap = TrapEndpoint()
    with pytest.MonkeyPatch.context() as env:
        for key, value in gcsserver.environment(gcs_server, trap, home).items():
            if value is None:
                env.delenv(key, raising=False)
            else:
                env.setenv(key, value)
        name = gcsserver.new_bucket(gcs_server)
        bucket = gcsserver.GcsBucket(gcs_server, name)
        try:
            yield Cloud(bucket, Data(rm.Place(f"gs://{name}/in")), trap, wheel)
        finally:
            gcs_server.remove_bucket(name)
            trap.close()
    assert trap.connections == 0, f"{trap.connections} connection(s) to the trap (Google) {trap.url}"


#: every job, as the matrix runs it, and each with --skip_corrupt: (job, args(data, out))
JOBS = {
    "build_index": ("build_index", lambda d, o: ["--input", d.place.path("tf"), "--output_dir", o + "/idx"]),
    "build_index --skip_corrupt": ("build_index", lambda d, o: ["--input", d.bad_dir, "--output_dir", o + "/idx"]),
    "reshard": (
        "reshard",
        lambda d, o: ["--input", d.place.path("tf"), "--output_prefix", o + "/r", "--num_shards", "3"],
    ),
    "reshard --shuffle": (
        "reshard",
        lambda d, o: ["--input", d.place.path("tf"), "--output_prefix", o + "/r", "--num_shards", "3", "--shuffle"],
    ),
    "reshard --skip_corrupt": (
        "reshard",
        lambda d, o: ["--input", d.bad_dir, "--output_prefix", o + "/s", "--num_shards", "2"],
    ),
    "reshard --shuffle --skip_corrupt": (
        "reshard",
        lambda d, o: ["--input", d.bad_dir, "--output_prefix", o + "/s", "--num_shards", "2", "--shuffle"],
    ),
    "mix": (
        "mix",
        lambda d, o: (
            ["--source", d.place.path("tf", "*") + "=0.7", "--source", d.place.path("b", "*") + "=0.3"]
            + ["--total_records", "400", "--num_shards", "3", "--output_prefix", o + "/m"]
        ),
    ),
    "mix --skip_corrupt": (
        "mix",
        lambda d, o: ["--source", d.bad_dir + "=1", "--total_records", "100", "--output_prefix", o + "/m"],
    ),
    "parquet_to_tfrecord": ("parquet_to_tfrecord", lambda d, o: ["--input", d.parquet, "--output_prefix", o + "/t"]),
    "parquet_to_tfrecord --skip_corrupt": (
        "parquet_to_tfrecord",
        lambda d, o: ["--input", d.parquet, "--output_prefix", o + "/t"],
    ),
    "tfrecord_to_parquet": (
        "tfrecord_to_parquet",
        lambda d, o: ["--input", d.place.path("tf"), "--output_prefix", o + "/p", "--num_shards", "2"],
    ),
    "tfrecord_to_parquet --skip_corrupt": (
        "tfrecord_to_parquet",
        lambda d, o: ["--input", d.bad_dir, "--output_prefix", o + "/p"],
    ),
}


def _dry_run(runner: rm.Runner, cloud: Cloud, tmp_path: Path, job: str, args: Sequence[str]):
    """Launch JOB as a dry run; (JobRun, the record of what Beam built, the launcher's TMPDIR)."""
    launcher_tmp = tmp_path / "launcher-tmp"  # any local file the launcher makes lands here
    launcher_tmp.mkdir()
    record = tmp_path / "job.json"
    flags = [
        f"--temp_location=gs://{cloud.bucket.bucket}/tmp",
        f"--extra_package={cloud.wheel}",
        f"--dataflow_job_file={record}",
    ]
    proxy = cloud.trap.url  # a launch that goes online (through a proxy, as libraries do) is counted
    env = {"TMPDIR": str(launcher_tmp), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.update({k: proxy for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")})
    run = rm.launch(runner, job, list(args) + flags, env)
    assert run.code == 0, f"exit {run.code}\nstdout:\n{run.out[-2000:]}\nstderr:\n{run.err[-6000:]}"
    return run, json.loads(record.read_text()), launcher_tmp


def _blobs(payload: bytes, depth: int = 3) -> Iterator[bytes]:
    """A step's payload and, inside it, every pickled function or value Beam packed (base64 of
    a zlib- or bz2-compressed pickle, as Beam's pickler writes them, at times one inside
    another), unpacked: the strings a step carries appear in these bytes. A run of base64
    characters may begin with a byte of the proto's framing that happens to be one (a length):
    each of its first four offsets is tried."""
    yield payload
    if depth == 0:
        return
    for run in re.findall(rb"[A-Za-z0-9+/]{40,}={0,2}", payload):
        for skip in range(4):
            unpacked = _unpack(run[skip:])
            if unpacked is not None:
                yield from _blobs(unpacked, depth - 1)
                break


def _unpack(text: bytes) -> Optional[bytes]:
    try:
        packed = base64.b64decode(text + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    for unpack in (zlib.decompress, bz2.decompress):
        try:
            return unpack(packed)
        except (zlib.error, OSError, ValueError):
            continue
    return None


def _steps(record: dict) -> Dict[str, dict]:
    return record["pipeline"]["components"]["transforms"]


def _step_bytes(step: dict) -> bytes:
    payload = base64.b64decode(step.get("spec", {}).get("payload", ""))
    return b"\n".join(_blobs(payload))


@pytest.mark.parametrize("row", list(JOBS))
def test_dry_run(runner, cloud, tmp_path, row, timed):
    job, make_args = JOBS[row]
    out = f"gs://{cloud.bucket.bucket}/out/{tmp_path.name}"
    args = make_args(cloud.data, out) + (["--skip_corrupt"] if "--skip_corrupt" in row else [])
    before = cloud.keys()
    run, record, launcher_tmp = _dry_run(runner, cloud, tmp_path, job, args)
    timed(runner, row, run)

    # the launcher: a dry run, said so; no warning; nothing written, nothing committed
    summary = run.summary()
    assert DRY_LINE in run.out, run.out
    assert summary["dry_run"] is True and summary["submitted"] is False and summary["committed"] is False, summary
    assert summary["runner"] == "DataflowRunner" and summary["job"] == job, summary
    assert "warning" not in run.err.lower() and "error" not in run.err.lower(), run.err
    assert cloud.keys() == before, sorted(set(cloud.keys()) ^ set(before))

    # the job request and the options the workers get
    assert record["dry_run"] is True and record["job"]["type"] == "JOB_TYPE_BATCH", record["job"]
    assert record["job"]["name"] == summary["dataflow_job"]
    options = record["options"]
    assert options["runner"] == "DataflowRunner" and options["project"] == "tfrb-test", options
    assert options["region"] == "us-central1" and options["temp_location"].startswith(f"gs://{cloud.bucket.bucket}/")
    assert options["extra_packages"] == [str(cloud.wheel)], options.get("extra_packages")

    # one environment: Beam's Dataflow container for this Python, with the wheel staged
    environments = record["pipeline"]["components"]["environments"]
    assert len(environments) == 1, list(environments)
    ((env_id, environment),) = environments.items()
    assert environment["urn"] == "beam:env:docker:v1", environment["urn"]
    image = base64.b64decode(environment["payload"])
    assert f"beam_python{sys.version_info[0]}.{sys.version_info[1]}_sdk".encode() in image, image
    staged = {s["name"]: s["path"] for s in record["staged"]}
    assert staged.get(cloud.wheel.name) == str(cloud.wheel), staged
    assert cloud.wheel.name in summary["staged"], summary

    # every step: runs in that environment (or is a runner primitive), names no local path
    steps = _steps(record)
    assert len(steps) > 5, list(steps)
    forbidden = [str(launcher_tmp), str(tmp_path), "file://"]
    seen = b""
    for name, step in steps.items():
        assert step.get("environmentId", env_id) == env_id, (name, step.get("environmentId"))
        carried = _step_bytes(step)
        for local in forbidden:
            assert local.encode() not in carried, f"step {step.get('uniqueName', name)!r} names {local}"
        seen += carried
    # the check sees what steps carry: the job's gs:// locations are there
    assert f"gs://{cloud.bucket.bucket}/in/".encode() in seen
    if job != "build_index":  # its output location is a flag's value; the others' is the staging
        assert f"{out}/".encode() in seen
    else:
        assert f"{out}/idx".encode() in seen


def test_local_path_refused(runner, cloud, tmp_path):
    """A local path on Dataflow is refused before anything is built: workers would not see it."""
    local = tmp_path / "in.tfrecord"
    local.write_bytes(b"")
    flags = [f"--temp_location=gs://{cloud.bucket.bucket}/tmp", f"--extra_package={cloud.wheel}"]
    args = ["--input", str(local), "--output_prefix", f"gs://{cloud.bucket.bucket}/o/r", "--num_shards", "1", *flags]
    run = rm.launch(runner, "reshard", args)
    assert run.code == 1, (run.code, run.err)
    assert f"Dataflow's workers cannot see this machine's files: --input {local}" in run.err, run.err
    assert "dry run" not in run.out


def test_no_package_for_the_workers_refused(runner, cloud):
    """Without this package staged (or another route named), the workers could not run a step."""
    args = [
        "--input",
        cloud.data.place.path("tf"),
        "--output_prefix",
        f"gs://{cloud.bucket.bucket}/o/r",
        "--num_shards",
        "1",
    ]
    run = rm.launch(runner, "reshard", args + [f"--temp_location=gs://{cloud.bucket.bucket}/tmp"])
    assert run.code == 1, (run.code, run.err)
    assert "Dataflow's workers would not have tfrecord_beam" in run.err and "make wheel" in run.err, run.err


def test_staged_wheel_installs_with_native_engine(runner, cloud, tmp_path):
    """What the dry run stages installs in a clean venv (no compiler, no PYTHONPATH, outside the
    checkout) and reports the native engine: the workers get the compiled core."""
    _, record, _ = _dry_run(
        runner, cloud, tmp_path, "reshard", JOBS["reshard"][1](cloud.data, f"gs://{cloud.bucket.bucket}/w")
    )
    wheels = [Path(s["path"]) for s in record["staged"] if s["name"].startswith("tfrecord_beam-")]
    assert len(wheels) == 1, record["staged"]
    wheel = wheels[0]
    assert wheel.name.endswith(".whl") and f"-{PYTHON_TAG}-" in wheel.name and "manylinux" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        cores = [n for n in archive.namelist() if n.startswith("tfrecord_beam/_native/_core.") and n.endswith(".so")]
    assert cores, "the wheel holds no compiled core"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    import sysconfig

    # pip and the dependencies (numpy, Beam...) from this venv, after the new venv's own packages
    Path(purelib, "zz_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    clean = {"HOME": str(tmp_path), "PATH": str(venv / "bin"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    version = subprocess.run(
        [str(venv / "bin" / "tfrecord-beam"), "--version"], capture_output=True, text=True, env=clean, cwd=tmp_path
    )
    assert version.returncode == 0, version.stderr
    assert "engine native" in version.stdout, version.stdout
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import tfrecord_beam; print(tfrecord_beam.__file__)"],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
    ).stdout.strip()
    assert where.startswith(purelib), where
