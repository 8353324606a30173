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

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_urllib_opener(monkeypatch):
    """urllib builds its default opener on the first urlopen and keeps it, with the proxies of
    that moment: one made while a test points http(s)_proxy at a closed port would send every
    later urlopen of the process (e.g. a loopback S3 server's health check) there."""
    import urllib.request

    monkeypatch.setattr(urllib.request, "_opener", None)


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
    from apache_beam.runners.portability import prism_runner

    monkeypatch.setenv("TFRECORD_BEAM_DOWNLOAD_TIMEOUT", "7")
    asked = []
    monkeypatch.setattr(prism_runner, "urlopen", lambda url, *a, **kw: asked.append(kw.get("timeout")))
    fake = prism_runner.urlopen
    before = socket.getdefaulttimeout()
    with _runner.bounded_downloads(_options(*flags)):
        prism_runner.urlopen("https://github.com/apache/beam/releases/download/v0/x.zip")  # as Beam calls it
        assert socket.getdefaulttimeout() == before  # nothing process-wide
    assert asked == [7.0 if bounded else None]
    assert prism_runner.urlopen is fake  # restored


def _ask(port: int) -> bytes:
    """A DoFn's socket read from a server that answers after a while (no timeout of its own)."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        answer = conn.recv(16)
    if answer != b"late":
        raise AssertionError(f"got {answer!r}")
    return answer


class _SlowServer:
    """Answers b'late' on 127.0.0.1 `delay` seconds after each connection."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __enter__(self) -> int:
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        return self.sock.getsockname()[1]

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            time.sleep(self.delay)
            with conn:
                conn.sendall(b"late")

    def __exit__(self, *exc) -> None:
        self.sock.close()


def test_a_fallen_back_direct_run_does_not_cut_the_jobs_own_slow_sockets(tmp_path, monkeypatch):
    """DirectRunner without Prism runs the whole job inside p.run(): the bound on Prism's
    download must not reach a DoFn's socket that waits longer (it did, as a process-wide default
    socket timeout)."""
    import apache_beam as beam
    from apache_beam.runners.portability import prism_runner

    from pipelines import _common

    monkeypatch.setattr(prism_runner.PrismJobServer, "BIN_CACHE", str(tmp_path / "cache"))  # no cached Prism
    closed = f"http://127.0.0.1:{_closed_port()}"  # the download is refused at once: Beam falls back
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, closed)
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    monkeypatch.setenv("TFRECORD_BEAM_DOWNLOAD_TIMEOUT", "0.5")
    done = tmp_path / "done"
    options = _options("--runner=DirectRunner")
    with _SlowServer(delay=1.0) as port:  # twice the bound: a bound that reached it would cut it

        def build(p):
            _ = p | beam.Create([port]) | beam.Map(_ask) | beam.Map(lambda answer: done.write_bytes(answer))

        result = _common.run_pipeline(build, options)
    assert _runner.ran_on(options, result) == "FnApiRunner"
    assert done.read_bytes() == b"late"


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
    """Why the bound is needed: Beam's download (urlopen without a timeout) is still waiting,
    connected to the blackhole, 5 s after it started (timed from the download's start, not the
    interpreter's: the imports take seconds of CPU); the bound these tests give it is 1-3 s."""
    code = (
        "from apache_beam.runners.portability.prism_runner import PrismJobServer as S\n"
        "print('downloading', flush=True)\n"
        "S._download_to_local_path('https://github.com/apache/beam/releases/download/v0/x.zip', S.BIN_CACHE)\n"
    )
    hole = _Blackhole()
    with hole as port:
        env = _reshard_env(tmp_path, port)
        download = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert download.stdout is not None and download.stdout.readline() == "downloading\n"
            with pytest.raises(subprocess.TimeoutExpired):
                download.wait(timeout=5)
            hole.sock.settimeout(0)
            hole.sock.accept()[0].close()  # its connection was waiting there (raises if none)
        finally:
            download.kill()
            download.wait()


@pytest.mark.slow
def test_direct_runner_does_not_stall_on_a_blackholed_prism_download(tmp_path):
    with _Blackhole() as port:
        # the bound, 1 s (each socket operation: connecting to the proxy works, its answer never comes)
        data, proc, seconds = _run_direct(tmp_path, _reshard_env(tmp_path, port, timeout_s="1"), timeout=300)
    _assert_fell_back(tmp_path, data, proc)
    assert "timed out" in proc.stderr
    assert seconds < 120, seconds


def _rpc_error_from_a_dead_service():
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{_closed_port()}") as channel:
        call = channel.unary_unary("/org.apache.beam.model.job_management.v1.JobService/GetState")
        with pytest.raises(grpc.RpcError) as info:
            call(b"", timeout=5)
    return info.value


def test_a_job_service_that_dies_is_one_readable_line():
    """Killing Prism mid-job raised gRPC's multi-line dump, and the job printed `error: >`."""
    from pipelines import _common

    exc = _rpc_error_from_a_dead_service()
    assert str(exc).strip().splitlines()[-1] == ">"  # what the last line of its text is
    for raised in (exc, _wrapped(exc)):
        line = _common._error_line(raised)
        assert line.startswith("the job service stopped answering (gRPC UNAVAILABLE: "), line
        assert "\n" not in line and line.endswith("is it still running?")


def _wrapped(exc: BaseException) -> BaseException:
    try:
        try:
            raise exc
        except Exception as inner:
            raise RuntimeError("Pipeline failed") from inner
    except RuntimeError as outer:
        return outer


def test_a_dead_job_endpoint_fails_fast_with_one_line_naming_it(tmp_path):
    """--job_endpoint naming a port nothing listens on: Beam waits --job_server_timeout (300 s
    by default) and then fails with a gRPC timeout naming no endpoint; the job says in one line,
    within seconds, which endpoint it could not reach, and stages nothing."""
    write_files(tmp_path / "in", "a", [10])
    port = _closed_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TFRECORD_BEAM_ENDPOINT_WAIT="1")  # the shortest whole second
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.reshard", "--input", str(tmp_path / "in"), "--output_prefix"]
        + [
            str(tmp_path / "out" / "r"),
            "--num_shards",
            "1",
            "--runner=PortableRunner",
            f"--job_endpoint=127.0.0.1:{port}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - start
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert lines == [
        f"reshard: error: no job service at --job_endpoint=127.0.0.1:{port} (Connection refused, waited 1 s): "
        "start the runner (make runners) or fix the flag"
    ], lines
    assert took < 30, took
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_the_endpoint_check_waits_for_a_service_still_starting():
    """A job service that starts listening within the wait is found (a launch racing `make runners`)."""
    import threading
    from types import SimpleNamespace

    port = _closed_port()
    server = socket.socket()

    def listen_later():
        time.sleep(1.0)
        server.bind(("127.0.0.1", port))
        server.listen(1)

    options = SimpleNamespace(view_as=lambda cls: SimpleNamespace(job_endpoint=f"localhost:{port}"))
    threading.Thread(target=listen_later, daemon=True).start()
    try:
        assert _runner.unreachable_job_endpoint(options, wait_s=15) is None
    finally:
        server.close()
    assert _runner.unreachable_job_endpoint(options, wait_s=0) is not None  # closed again: refused
    bad = SimpleNamespace(view_as=lambda cls: SimpleNamespace(job_endpoint="nocolon"))
    assert "expected HOST:PORT" in _runner.unreachable_job_endpoint(bad, wait_s=0)


def test_a_portable_jobs_summary_names_the_runner_behind_the_job_service():
    """`--runner=PortableRunner` on Flink's or Spark's job service: the summary says
    `runner: FlinkRunner` / `SparkRunner` (with `runner_requested: PortableRunner`), from the
    options the service describes; a service that says nothing or fails to answer leaves
    PortableRunner (issue 37 item 7: a Flink job's summary said only PortableRunner)."""
    import types

    from apache_beam.runners.portability import portable_runner

    class Service:
        def __init__(self, names, fail=False):
            self.names, self.fail = names, fail

        def DescribePipelineOptions(self, request, timeout=None):  # noqa: N802 - the gRPC stub's name
            if self.fail:
                raise RuntimeError("unavailable")
            return types.SimpleNamespace(options=[types.SimpleNamespace(name=n) for n in self.names])

    options = _options("--runner=PortableRunner", "--job_endpoint=127.0.0.1:1")
    cases = [
        (["flink_master", "parallelism", "job_name"], {"runner": "FlinkRunner", "runner_requested": "PortableRunner"}),
        (["spark_master", "job_name"], {"runner": "SparkRunner", "runner_requested": "PortableRunner"}),
        ([], {"runner": "PortableRunner"}),
    ]
    for names, expected in cases:
        result = portable_runner.PipelineResult(Service(names), "job", None, None)
        assert _runner.describe(options, result) == expected, names
    failing = portable_runner.PipelineResult(Service([], fail=True), "job", None, None)
    assert _runner.describe(options, failing) == {"runner": "PortableRunner"}
