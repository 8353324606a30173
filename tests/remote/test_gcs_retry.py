"""gs:// calls other than the read-ahead's range reads (issue 24): an index read whole, a
record file opened by the core's reader, a stat, a listing. pyarrow's GCS client retries each
for 15 minutes by default, so a persistent 5xx looked like a hang; the cached client retries
for `fs.GCS_RETRY_LIMIT_S` (a URI's `retry_limit_seconds` sets it, as here, to keep the test
short) and then the error names the object. Against the real GCS-protocol server
(fake-gcs-server, `gcs_server`) behind a fault-injecting proxy (`helpers.proxyproc`) answering
the requests WITHOUT a Range header (metadata, listings) with 503.
"""

from __future__ import annotations

import datetime
import time
from contextlib import contextmanager

import pytest
from helpers.proxyproc import ProcessProxy, RangeFaults
from helpers.remote_data import write_local

from tfrecord_beam import fs
from tfrecord_beam.index import load_index
from tfrecord_beam.records import RecordReader

LIMIT_S = 2  # the URIs' retry limit: the client retries, backing off 1-2 s, then gives up


@pytest.fixture
def shard(gcs, tmp_path):
    local = tmp_path / "e.tfrecord"
    ids = write_local(local, 0, 30, 100)
    gcs.upload(local, "e.tfrecord")
    return ids


@pytest.fixture
def faulty(gcs_server, tmp_path):
    """`faulty(RangeFaults(...))`: a proxy to the session's GCS server injecting those faults."""

    @contextmanager
    def start(faults: RangeFaults):
        proxy = ProcessProxy(gcs_server.host_port, tmp_path / "faults.jsonl", faults=faults)
        try:
            yield proxy
        finally:
            proxy.stop()

    return start


def uri(gcs, key: str, via: str) -> str:
    return gcs.uri(key, via) + f"&retry_limit_seconds={LIMIT_S}"


def test_the_cached_gcs_client_retries_for_a_bounded_time(gcs):
    """Not pyarrow's 15 minutes: `GCS_RETRY_LIMIT_S`, for the emulator's client (ours) and the
    real service's (pyarrow's URI rules), unless the URI sets its own."""
    limit = datetime.timedelta(seconds=fs.GCS_RETRY_LIMIT_S)
    assert datetime.timedelta(seconds=10) <= limit <= datetime.timedelta(minutes=5)
    cached, _ = fs._from_uri(gcs.uri("a.tfrecord"))
    assert cached.__reduce__()[1][0]["retry_time_limit"] == limit
    real, inner = fs._make_filesystem("gs://some-bucket/a.tfrecord")
    assert inner == "some-bucket/a.tfrecord" and real.__reduce__()[1][0]["retry_time_limit"] == limit
    own, _ = fs._make_filesystem("gs://some-bucket/a.tfrecord?retry_limit_seconds=7")
    assert own.__reduce__()[1][0]["retry_time_limit"] == datetime.timedelta(seconds=7)
    set_here, _ = fs._from_uri(gcs.uri("a.tfrecord", gcs.server.host_port) + "&retry_limit_seconds=7")
    assert set_here.__reduce__()[1][0]["retry_time_limit"] == datetime.timedelta(seconds=7)


def test_a_persistent_5xx_on_an_index_fails_naming_it_in_bounded_time(gcs, shard, faulty):
    with faulty(RangeFaults(("status", 503), times=1000, name=".tfindex", ranged=False)) as proxy:
        index = uri(gcs, "e.tfindex", proxy.host_port)
        started = time.monotonic()
        with pytest.raises(OSError) as caught:
            load_index(index)
        elapsed = time.monotonic() - started
        injected = len(proxy.injected)
    message = str(caught.value)
    assert f"gs://{gcs.bucket}/e.tfindex" in message and "?" not in message.split(" ")[0], message
    assert "UNAVAILABLE" in message  # the client's word for the 503
    assert not isinstance(caught.value, FileNotFoundError)
    assert injected >= 2  # retried before it gave up
    assert elapsed < 20  # not pyarrow's 15 minutes


def test_a_persistent_5xx_opening_a_record_file_fails_naming_it(gcs, shard, faulty):
    """The core's reader (no read-ahead), the file's size and a listing: each names the object."""
    with faulty(RangeFaults(("status", 503), times=1000, name=".tfrecord", ranged=False)) as proxy:
        data = uri(gcs, "e.tfrecord", proxy.host_port)
        started = time.monotonic()
        with pytest.raises(OSError, match=rf"^gs://{gcs.bucket}/e\.tfrecord: .*UNAVAILABLE"):
            list(RecordReader(data))
        with pytest.raises(OSError, match=rf"^gs://{gcs.bucket}/e\.tfrecord: .*UNAVAILABLE"):
            fs.file_size(data)
        elapsed = time.monotonic() - started
    assert elapsed < 20


def test_a_transient_5xx_on_an_index_or_a_record_file_is_retried(gcs, shard, faulty):
    """Within the default limit (the client backs off 1-2 s, then 2-4 s)."""
    with faulty(RangeFaults(("status", 503), times=2, name=".tf", ranged=False)) as proxy:
        assert len(load_index(gcs.uri("e.tfindex", proxy.host_port))) == len(shard)
        assert len(proxy.injected) == 2  # both first GETs of the index failed, then one passed
        assert list(RecordReader(gcs.uri("e.tfrecord", proxy.host_port))) == list(RecordReader(gcs.uri("e.tfrecord")))
        assert len(proxy.injected) == 2  # the rule was spent on the index


def test_a_persistent_5xx_on_a_listing_fails_naming_the_pattern(gcs, shard, faulty):
    with faulty(RangeFaults(("status", 503), times=1000, name=f"/b/{gcs.bucket}/o", ranged=False)) as proxy:
        pattern = uri(gcs, "e*.tfrecord", proxy.host_port)
        with pytest.raises(OSError, match=rf"^gs://{gcs.bucket}/e\*\.tfrecord: .*UNAVAILABLE"):
            fs.expand(pattern)
        assert proxy.injected  # the listing was what failed
