"""pytest fixtures shared by the test files. Plain helpers live in the `helpers` package
(tests/helpers/); tests import those, never this module."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import sdk_workers
from helpers.fixtures import FIXTURES
from helpers.parity import NATIVE
from hypothesis import settings

from tfrecord_beam import _engine, _streams
from tfrecord_beam._engine import _decode, _framing

# Hypothesis' per-example deadline times the machine, not the code: on a 2-core machine shared
# with a Flink cluster and a parallel test run, a 200 ms deadline fails correct code.
settings.register_profile("tfrecord_beam", deadline=None)
settings.load_profile("tfrecord_beam")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{sdk_workers.MARKER}: Beam's multi_processing SDK workers as fresh interpreters, not forked"
    )
    sdk_workers.install()  # this process's multi_processing jobs fork their SDK workers (helpers/sdk_workers.py)


# -- what the run leaves in TMPDIR (issue 37 item 6: ~110 empty beam-temp*/tmp* folders a run) --
# The controller (or the only process, without xdist) lists TMPDIR when the session starts and,
# at the end, reports the folders named like Beam's and tempfile's that appeared meanwhile and are
# still there; TFRB_TMPDIR_GUARD=fail makes them a failure. Other processes sharing TMPDIR (other
# test runs on the machine) may add some: hence a report by default.
_TMP_BEFORE: "set[str] | None" = None
_TMP_PATTERNS = ("beam-temp", "tmp")


def _tmp_entries() -> "set[str]":
    import tempfile

    try:
        return {e for e in os.listdir(tempfile.gettempdir()) if e.startswith(_TMP_PATTERNS)}
    except OSError:
        return set()


def pytest_sessionstart(session):
    global _TMP_BEFORE
    if not hasattr(session.config, "workerinput"):
        _TMP_BEFORE = _tmp_entries()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    import tempfile

    if _TMP_BEFORE is None or hasattr(config, "workerinput"):
        return
    left = sorted(_tmp_entries() - _TMP_BEFORE)
    if not left:
        return
    line = (
        f"TMPDIR ({tempfile.gettempdir()}): {len(left)} new entries left by this run (or another process): {left[:8]}"
    )
    terminalreporter.write_line(line, yellow=True)
    if os.environ.get("TFRB_TMPDIR_GUARD") == "fail":
        terminalreporter.write_line("TFRB_TMPDIR_GUARD=fail: failing the run", red=True)
        config._tfrb_tmp_left = left


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput") or os.environ.get("TFRB_TMPDIR_GUARD") != "fail" or _TMP_BEFORE is None:
        return
    if _tmp_entries() - _TMP_BEFORE:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _sdk_workers(request):
    """A test marked `fresh_sdk_workers` gets Beam's own SDK workers (fresh interpreters)."""
    sdk_workers.enabled = request.node.get_closest_marker(sdk_workers.MARKER) is None
    yield
    sdk_workers.enabled = True


@pytest.fixture
def fixtures_copy(tmp_path):
    """A writable copy of the golden folder (tests never write into it)."""
    dest = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dest)
    for p in dest.iterdir():
        p.chmod(0o644)
    return dest


@pytest.fixture(params=["native", "pure"])
def engine(request, monkeypatch):
    """Run the test on one framing engine (the compiled core, or its pure twin), its batch
    decoder too. A test module may define its own `engine` (other functions patched)."""
    if request.param == "native":
        if NATIVE is None:
            pytest.skip("compiled core not built")
        impl = NATIVE
    else:
        impl = _framing
    for name in ("scan_frames", "masked_crc32c", "find_length_crc"):
        monkeypatch.setattr(_engine, name, getattr(impl, name))
    columnar = NATIVE if impl is NATIVE else _decode
    monkeypatch.setattr(_engine, "decode_examples", columnar.decode_examples)
    # inspect's statistics: compiled only; the pure engine takes them from decoded columns
    monkeypatch.setattr(_engine, "example_stats", NATIVE.example_stats if impl is NATIVE else None)
    return request.param


@pytest.fixture(params=sorted(_streams.INFLATERS))
def inflater(request, monkeypatch):
    """Run the test with each of the stream inflaters (zlib, and isal where installed)."""
    monkeypatch.setattr(_streams, "DEFAULT_INFLATER", request.param)
    return request.param


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-protocol server (versitygw): the one `runners/s3.sh start` runs (its state
    file), else one started from the cached binary on a free port for this session."""
    from helpers import s3server

    running = s3server.from_state()
    if running is not None:
        yield running
        return
    server = s3server.start_local(tmp_path_factory.mktemp("versitygw"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server):
    """A fresh, empty bucket on `s3_server` (its name), removed with its objects afterwards."""
    from helpers import s3server

    client = s3_server.client()
    name = s3server.new_bucket(s3_server, client)
    yield name
    s3server.remove_bucket(client, name)


@pytest.fixture
def s3_trap(monkeypatch, tmp_path):
    """No AWS_* credentials or config; AWS_ENDPOINT_URL(_S3) point at a listener that must
    never be contacted: only Beam's --s3_* flags (or a URI's own query string) reach S3."""
    from helpers import s3server

    trap = s3server.TrapEndpoint()
    for key, value in s3server.trap_environment(trap, tmp_path).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    try:
        yield trap
    finally:
        trap.close()
    assert trap.connections == 0, f"{trap.connections} connection(s) to the trap endpoint {trap.url}"


@pytest.fixture
def remote(s3_server, s3_bucket, monkeypatch):
    """A bucket on the session's S3 server, with the torch readers' keys in the environment."""
    from helpers.remote_data import Remote, reader_keys

    with reader_keys(s3_server, monkeypatch):
        yield Remote(s3_server, s3_bucket, s3_server.client())


@pytest.fixture
def proxy(s3_server):
    """A fault-injecting, request-counting proxy in front of the session's S3 server."""
    from helpers.faultproxy import FaultProxy

    with FaultProxy(s3_server.host_port) as running:
        yield running


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """A real GCS-protocol server (fake-gcs-server): the one `runners/gcs.sh start` runs, else
    one started from the cached binary (built through the Go module proxy when missing: the
    tests fail, never skip, when that build fails) on a free port for this session; reached
    through `gcsserver.mend`'s proxy."""
    from helpers import gcsserver

    data = tmp_path_factory.mktemp("fake-gcs-server")
    server = gcsserver.from_state() or gcsserver.start_local(data)
    mended = gcsserver.mend(server, data / "requests.jsonl")  # the batch requests of Beam's deletes and renames
    try:
        yield mended
    finally:
        mended.stop()  # the proxy, and the server when this session started it


@pytest.fixture
def gcs(gcs_server, monkeypatch, tmp_path):
    """A fresh bucket on `gcs_server`, removed with its objects afterwards, and the environment
    that points Beam and the core's readers at the server (`gcsserver.environment`); the GCE
    metadata server's address is a trap that must never be contacted."""
    from helpers import gcsserver
    from helpers.s3server import TrapEndpoint

    trap = TrapEndpoint()
    for key, value in gcsserver.environment(gcs_server, trap, tmp_path).items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    bucket = gcsserver.new_bucket(gcs_server)
    try:
        yield gcsserver.GcsBucket(gcs_server, bucket)
    finally:
        gcs_server.remove_bucket(bucket)
        trap.close()
    assert trap.connections == 0, f"{trap.connections} connection(s) to the trap (GCE metadata) {trap.url}"


@pytest.fixture
def gcs_proxy(gcs_server, tmp_path):
    """A request-counting proxy in front of the session's GCS server, in a process of its own
    (pyarrow's GCS reads hold the GIL: helpers/proxyproc.py)."""
    from helpers.proxyproc import ProcessProxy

    running = ProcessProxy(gcs_server.host_port, tmp_path / "proxy-requests.jsonl")
    try:
        yield running
    finally:
        running.stop()
