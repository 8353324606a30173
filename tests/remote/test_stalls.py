"""A server that stalls mid-body (issue 34, item 6): every remote call of the CLI and the core
readers is bounded (`--timeout`, `$TFRECORD_BEAM_TIMEOUT`), then fails naming the object and
the byte range, instead of waiting minutes for the client's own timeouts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from helpers.faultproxy import FaultProxy
from helpers.remote_data import write_local

from tfrecord_beam import _bounded, cli
from tfrecord_beam.records import read_records

KiB = 1 << 10


def _stall_data_gets(method, path, headers):
    """Every GET of a data file: its headers and 1000 bytes of its body, then nothing."""
    return ("hang", 1000) if method == "GET" and ".tfrecord" in path.split("?")[0] else None


@pytest.fixture
def stalled(remote, s3_server, tmp_path):
    """The URI of a ~300 KiB object (no index) behind a proxy that stalls its body."""
    local = tmp_path / "s.tfrecord"
    write_local(local, 0, 300, KiB)
    (tmp_path / "s.tfindex").unlink()
    remote.upload(local, "s.tfrecord")
    with FaultProxy(s3_server.host_port, _stall_data_gets) as proxy:
        yield remote.uri("s.tfrecord", proxy.host_port)


def test_count_gives_up_after_its_timeout_naming_the_object_and_range(stalled, capsys):
    started = time.monotonic()
    status = cli.main(["count", "--timeout", "1.5", stalled])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert status != 0
    assert elapsed < 12, elapsed  # not the client's minutes
    assert "s.tfrecord" in err and "bytes 0-" in err and "no answer within 1.5 s" in err


def test_the_environment_sets_the_bound_for_the_core_readers(stalled, monkeypatch):
    monkeypatch.setenv(_bounded.TIMEOUT_ENV, "1")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"s\.tfrecord: bytes 0-\d+: no answer within 1 s"):
        list(read_records(stalled))
    assert time.monotonic() - started < 10


def test_a_cli_process_exits_in_bounded_time(stalled, remote):
    """The whole process ends (its abandoned request does not hold the exit)."""
    env = {**__import__("os").environ, _bounded.TIMEOUT_ENV: "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tfrecord_beam.cli", "count", stalled],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "no answer within 1 s" in done.stderr
    # the client's own request timeout (set to the same bound) ends the abandoned request and
    # its retries, so the exit waits seconds, not the ~5 minutes the client took before
    assert time.monotonic() - started < 45


def test_a_bad_timeout_is_a_usage_error(capsys):
    assert cli.main(["count", "--timeout", "0", "x.tfrecord"]) == 2
    assert "--timeout" in capsys.readouterr().err
