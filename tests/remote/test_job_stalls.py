"""A store that stalls while a job's launcher plans (issue 34, item 6): the listing, sizes and
index reads the launcher makes through Beam's FileSystems before the pipeline are bounded like
every remote call of the core (`--timeout`, else $TFRECORD_BEAM_TIMEOUT, else 60 s), and the job
fails naming the object instead of waiting for the client's own minutes."""

from __future__ import annotations

import time

import pytest
from helpers.faultproxy import FaultProxy
from helpers.jobs import FAST, payloads, run_job
from helpers.s3server import framed

from tfrecord_beam import jobtools


@pytest.fixture
def inputs(s3_server, s3_bucket):
    client = s3_server.client()
    for k in range(2):
        client.put_object(Bucket=s3_bucket, Key=f"in/d-{k}.tfrecord", Body=framed(payloads(10, start=10 * k)))
    return s3_bucket


def _flags(s3_server, proxy: FaultProxy):
    return [f.replace(s3_server.host_port, proxy.host_port) for f in s3_server.beam_flags] + FAST


def _listing(method, path, headers):
    """Every listing of the bucket: its headers and 100 bytes of its body, then nothing."""
    query = path.split("?", 1)[1] if "?" in path else ""
    return ("hang", 100) if method == "GET" and ("list-type" in query or "prefix=" in query) else None


@pytest.mark.parametrize("job", ["reshard", "build_index"])
def test_a_stalled_listing_fails_the_launch_within_its_timeout_naming_it(s3_server, inputs, capsys, job):
    import importlib

    main = importlib.import_module(f"pipelines.{job}").main
    extra = ["--output_prefix", f"s3://{inputs}/out/r", "--num_shards", "1"] if job == "reshard" else []
    with FaultProxy(s3_server.host_port, _listing) as proxy:
        started = time.monotonic()
        code, _, err = run_job(
            main,
            ["--input", f"s3://{inputs}/in/*.tfrecord", "--timeout", "2", *extra, *_flags(s3_server, proxy)],
            capsys,
        )
        elapsed = time.monotonic() - started
    assert code == 1, err
    assert f"s3://{inputs}/" in err and "no answer within 2 s" in err, err
    assert elapsed < 30, elapsed  # not the client's minutes


def test_the_environment_bounds_the_launcher_too(s3_server, inputs, capsys, monkeypatch):
    """Without --timeout, $TFRECORD_BEAM_TIMEOUT bounds the launcher's calls: here its look at
    a file input (is it a directory: a listing under it), which the store stalls."""
    from pipelines import reshard

    monkeypatch.setenv(jobtools.TIMEOUT_ENV, "2")
    argv = ["--input", f"s3://{inputs}/in/d-0.tfrecord", "--output_prefix", f"s3://{inputs}/out/r"]
    with FaultProxy(s3_server.host_port, _listing) as proxy:
        started = time.monotonic()
        code, _, err = run_job(reshard.main, [*argv, "--num_shards", "1", *_flags(s3_server, proxy)], capsys)
        elapsed = time.monotonic() - started
    assert code == 1, err
    assert "no answer within 2 s" in err, err
    assert elapsed < 30, elapsed


def test_a_bad_timeout_is_a_usage_error(capsys):
    from pipelines import build_index

    with pytest.raises(SystemExit) as info:
        build_index.main(["--input", "x.tfrecord", "--timeout", "0"])
    assert info.value.code == 2 and "--timeout" in capsys.readouterr().err
