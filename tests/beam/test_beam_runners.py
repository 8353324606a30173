"""End to end on other runners: multi-process DirectRunner, and PortableRunner against Beam's
Python job service with an EXTERNAL worker pool (both started and stopped here; no downloads).

The workers are separate processes: they import tfrecord_beam through PYTHONPATH (the repo
root is put first on it), or from an installed package.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from helpers import sdk_workers  # noqa: E402
from helpers.beam_data import example_payloads, write_file  # noqa: E402
from helpers.fixtures import REPO as _REPO  # noqa: E402
from helpers.rss import job_peaks  # noqa: E402

from tfrecord_beam import records  # noqa: E402
from tfrecord_beam.beam import DecodeExamples, EncodeExamples, ReadAllFromTFRecord, ReadFromTFRecord, WriteToTFRecord  # noqa: E402
from tfrecord_beam.index import default_index_path, verify_index  # noqa: E402

REPO = str(_REPO)


def _env_with_repo():
    """os.environ with the repo first on PYTHONPATH and this interpreter's bin first on PATH
    (Beam's worker pool starts workers as plain `python`)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _copy_pipeline(p, src_dir, out_prefix):
    """Read indexed and unindexed inputs, split small, and write them back as two shards."""
    indexed = p | "Indexed" >> ReadFromTFRecord(os.path.join(src_dir, "indexed.tfrecord"))
    plain = p | beam.Create([os.path.join(src_dir, "plain.tfrecord")]) | ReadAllFromTFRecord(desired_bundle_size=4096)
    merged = (indexed, plain) | beam.Flatten()
    roundtrip = merged | DecodeExamples() | EncodeExamples()
    _ = roundtrip | WriteToTFRecord(out_prefix, file_name_suffix=".tfrecord", num_shards=2)


def _check_output(tmp_path, out_prefix, payloads):
    shards = sorted(Path(tmp_path).glob(os.path.basename(out_prefix) + "-*.tfrecord"))
    assert len(shards) == 2
    got = []
    for shard in shards:
        verify_index(default_index_path(shard), shard)
        got += list(records.read_records(shard))
    assert sorted(got) == sorted(payloads + payloads)


def _inputs(tmp_path):
    payloads = example_payloads(2000)
    write_file(tmp_path / "indexed.tfrecord", payloads, index=True)
    write_file(tmp_path / "plain.tfrecord", payloads)
    return payloads


@pytest.mark.slow
@pytest.mark.fresh_sdk_workers  # the runner as users run it: its workers are fresh interpreters
def test_multi_processing_direct_runner(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", _env_with_repo()["PYTHONPATH"])
    payloads = _inputs(tmp_path)
    options = PipelineOptions(direct_running_mode="multi_processing", direct_num_workers=2)
    out = str(tmp_path / "out")

    def run() -> None:
        with beam.Pipeline(runner="DirectRunner", options=options) as p:
            _copy_pipeline(p, str(tmp_path), out)

    before = sdk_workers.forked()
    peaks = job_peaks(run)
    _check_output(tmp_path, out, payloads)
    # the marker's opt-out (helpers/sdk_workers.py): none forked from the zygote; both found on
    # this process's tree by their command line `python -m ...sdk_worker_main`, so fresh
    assert sdk_workers.forked() == before and peaks.workers == 2 and peaks.forked == 0, peaks


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"service exited early:\n{log.read_text()[-2000:]}")
        with contextlib.closing(socket.socket()) as sock:
            if sock.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"service on port {port} did not start:\n{log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    """Stop a service we started, and the workers it started (its own process group)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def portable_services(tmp_path_factory):
    """Beam's Python job service plus an EXTERNAL worker pool, on free local ports."""
    logs = tmp_path_factory.mktemp("portable")
    env = _env_with_repo()
    pool_port, job_port = _free_port(), _free_port()
    started = []
    try:
        for name, args, port in (
            ("pool", ["-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={pool_port}"], pool_port),
            (
                "job",
                [
                    "-m",
                    "apache_beam.runners.portability.local_job_service_main",
                    f"--port={job_port}",
                    f"--staging_dir={logs / 'staging'}",
                ],
                job_port,
            ),
        ):
            log = logs / f"{name}.log"
            process = subprocess.Popen(
                [sys.executable, *args],
                env=env,
                cwd=REPO,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            started.append(process)
            _wait_for_port(port, process, log)
        yield job_port, pool_port
    finally:
        for process in reversed(started):
            _stop(process)


@pytest.mark.slow
def test_portable_runner_with_external_worker_pool(tmp_path, portable_services):
    job_port, pool_port = portable_services
    payloads = _inputs(tmp_path)
    options = PipelineOptions(
        [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{pool_port}",
        ]
    )
    out = str(tmp_path / "out")
    with beam.Pipeline(options=options) as p:
        _copy_pipeline(p, str(tmp_path), out)
    _check_output(tmp_path, out, payloads)
