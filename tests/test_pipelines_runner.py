"""Which runner a job runs on (issue 21 item 2): the default is the FnApiRunner whatever the
network, the summary names the runner that ran, and `--runner=DirectRunner` (Beam's meaning:
Prism first, the FnApiRunner when Prism cannot be had) never stalls on Prism's download.

The download tests point Beam's download at a proxy on 127.0.0.1 (a closed port: refused; a
socket that listens and never answers: blackholed), with HOME in tmp so Beam's Prism cache is
empty: nothing leaves the machine. DirectRunner with Prism present is in tests/runners/."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.jobs import read_shards, run_job, summary_json, write_files

from pipelines import _runner, reshard

ROOT = Path(__file__).resolve().parents[1]


def test_default_runner_is_fnapi_and_the_summary_names_it(tmp_path, capsys):
    data = write_files(tmp_path / "in", "a", [30, 20])
    code, out, err = run_job(
        reshard.main,
        ["--input", str(tmp_path / "in"), "--output_prefix", str(tmp_path / "out" / "p"), "--num_shards", "2"],
        capsys,
    )
    assert code == 0, err
    summary = summary_json(out)
    assert summary["runner"] == "FnApiRunner" and "runner_requested" not in summary
    assert "runner: FnApiRunner" in out
    assert [p for s in read_shards(tmp_path / "out", "p-*.tfrecord") for p in s] == data


def _options(*flags):
    from apache_beam.options.pipeline_options import PipelineOptions

    return PipelineOptions(list(flags))


@pytest.mark.parametrize(
    "flags, bounded",
    [
        (["--runner=DirectRunner"], True),
        (["--runner=PrismRunner"], True),
        (["--runner=PrismRunner", "--prism_location=https://example.invalid/prism.zip"], True),
        (["--runner=DirectRunner", "--prism_location=" + sys.executable], False),  # a local binary
        (["--runner=PrismRunner", "--job_endpoint=localhost:8073"], False),  # a running job service
        (["--runner=FnApiRunner"], False),
        (["--runner=FlinkRunner"], False),
    ],
)
def test_only_a_launch_that_may_download_prism_is_bounded(flags, bounded, monkeypatch):
    monkeypatch.setenv("TFRECORD_BEAM_DOWNLOAD_TIMEOUT", "7")
    before = socket.getdefaulttimeout()
    with _runner.bounded_downloads(_options(*flags)):
        assert socket.getdefaulttimeout() == (7.0 if bounded else before)
    assert socket.getdefaulttimeout() == before


def test_a_bad_download_timeout_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TFRECORD_BEAM_DOWNLOAD_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="TFRECORD_BEAM_DOWNLOAD_TIMEOUT='soon'"):
        _runner.download_timeout()


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),  # no proxy: nothing to spare
        ({"https_proxy": "http://p:3128"}, "localhost,127.0.0.1,::1"),
        ({"HTTP_PROXY": "http://p:3128", "no_proxy": "corp.example,localhost"}, "corp.example,localhost,127.0.0.1,::1"),
        ({"grpc_proxy": "http://p:3128", "no_grpc_proxy": "a", "no_proxy": "b"}, "a,localhost,127.0.0.1,::1"),
    ],
)
def test_proxies_spare_loopback_for_grpc(env, expected):
    environ = dict(env)
    _runner.spare_loopback_from_proxies(environ)
    assert environ.get("no_grpc_proxy") == expected


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reshard_env(tmp_path: Path, proxy_port: int, timeout_s: str = "3") -> dict:
    home = tmp_path / "home"  # Beam's Prism cache (~/.apache_beam/cache/prism) is empty there
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    proxy = f"http://127.0.0.1:{proxy_port}"
    env.update(
        HOME=str(home),
        https_proxy=proxy,
        HTTPS_PROXY=proxy,
        http_proxy=proxy,
        no_proxy="localhost,127.0.0.1",  # as a user's proxy settings would be (gRPC honours them too)
        PYTHONPATH=str(ROOT),
        TFRECORD_BEAM_DOWNLOAD_TIMEOUT=timeout_s,
    )
    return env


def _run_direct(tmp_path: Path, env: dict, timeout: float):
    data = write_files(tmp_path / "in", "a", [40, 25])
    cmd = [sys.executable, "-m", "pipelines.reshard", "--input", str(tmp_path / "in"), "--output_prefix"]
    cmd += [str(tmp_path / "out" / "p"), "--num_shards", "2", "--runner=DirectRunner", "--verbose"]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return data, proc, time.monotonic() - start


def _assert_fell_back(tmp_path: Path, data, proc) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Downloading prism from https://github.com/apache/beam/releases/download/" in proc.stderr
    assert "Falling back to DirectRunner" in proc.stderr
    summary = summary_json(proc.stdout)
    assert (summary["runner"], summary["runner_requested"]) == ("FnApiRunner", "DirectRunner")
    assert Counter(p for s in read_shards(tmp_path / "out", "p-*.tfrecord") for p in s) == Counter(data)
    assert summary["verified"].startswith("yes")


@pytest.mark.slow
def test_direct_runner_falls_back_to_fnapi_when_the_prism_download_is_refused(tmp_path):
    data, proc, _ = _run_direct(tmp_path, _reshard_env(tmp_path, _closed_port()), timeout=300)
    _assert_fell_back(tmp_path, data, proc)
    assert "Connection refused" in proc.stderr


class _Blackhole:
    """A TCP socket on 127.0.0.1 that completes connections (the kernel's backlog) and never
    answers: what a firewall that drops packets looks like to a client that sent its request."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


@pytest.mark.slow
def test_beams_own_prism_download_waits_forever_on_a_blackhole(tmp_path):
    """Why the bound is needed: Beam's download (urlopen without a timeout) is still waiting."""
    code = (
        "from apache_beam.runners.portability.prism_runner import PrismJobServer as S\n"
        "S._download_to_local_path('https://github.com/apache/beam/releases/download/v0/x.zip', S.BIN_CACHE)\n"
    )
    with _Blackhole() as port:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-c", code], env=_reshard_env(tmp_path, port), timeout=10)


@pytest.mark.slow
def test_direct_runner_does_not_stall_on_a_blackholed_prism_download(tmp_path):
    with _Blackhole() as port:
        data, proc, seconds = _run_direct(tmp_path, _reshard_env(tmp_path, port, timeout_s="3"), timeout=300)
    _assert_fell_back(tmp_path, data, proc)
    assert "timed out" in proc.stderr
    assert seconds < 120, seconds
