"""gs:// calls other than the read-ahead's range reads (issue 24): an index read whole, a
record file opened by the core's reader, a stat, a listing. pyarrow's GCS client retries each
for 15 minutes by default, so a persistent 5xx looked like a hang; the cached client retries
for `fs.GCS_RETRY_LIMIT_S` (a URI's `retry_limit_seconds` sets it, as here, to keep the test
short) and then the error names the object. The client's waits are backoffs (no CPU), so the
calls that fail run at once. Against the real GCS-protocol server
(fake-gcs-server, `gcs_server`) behind a fault-injecting proxy (`helpers.proxyproc`) answering
the requests WITHOUT a Range header (metadata, listings) with 503.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Optional, Tuple

import pytest
from helpers.proxyproc import ProcessProxy, RangeFaults
from helpers.remote_data import write_local

from tfrecord_beam import fs
from tfrecord_beam.index import load_index
from tfrecord_beam.records import RecordReader

# The URIs' retry limit: the client backs off 1-2 s after the first failure, then 2-4 s after
# the second, and gives up when it wakes past the limit: with 3 s the second attempt is always
# made (1 s to spare), and the call ends 3-6 s in (as with 2 s, which left no time to spare).
LIMIT_S = 3


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


def test_a_persistent_5xx_on_an_index_a_record_file_or_a_listing_fails_naming_it_in_bounded_time(gcs, shard, faulty):
    """An index read whole, the core's reader (no read-ahead) opening a record file, the file's
    size and a listing: each is retried, then fails naming its object (or pattern) in bounded
    time. Each call's wait is the client's backoffs, no CPU: the four run at once (pyarrow
    releases the GIL there), so the test waits for one of them, not for four in a row."""
    with faulty(RangeFaults(("status", 503), times=1000, name=f"/b/{gcs.bucket}/o", ranged=False)) as proxy:
        calls = {
            "e.tfindex": lambda: load_index(uri(gcs, "e.tfindex", proxy.host_port)),
            "e.tfrecord": lambda: list(RecordReader(uri(gcs, "e.tfrecord", proxy.host_port))),
            "size of e.tfrecord": lambda: fs.file_size(uri(gcs, "e.tfrecord", proxy.host_port)),
            "e*.tfrecord": lambda: fs.expand(uri(gcs, "e*.tfrecord", proxy.host_port)),
        }
        with ThreadPoolExecutor(len(calls)) as pool:
            outcomes = {name: pool.submit(failure_of, call) for name, call in calls.items()}
            failed = {name: outcome.result() for name, outcome in outcomes.items()}
        injected = proxy.injected_paths
    for name, (error, elapsed) in failed.items():
        target = name.split(" ")[-1]
        assert isinstance(error, OSError) and not isinstance(error, FileNotFoundError), (name, error)
        message = str(error)
        # the object (or the pattern), without the query string, then the client's word for the 503
        assert message.startswith(f"gs://{gcs.bucket}/{target}: ") and "UNAVAILABLE" in message, (name, message)
        assert elapsed < 20, (name, elapsed)  # not pyarrow's 15 minutes
    # each call retried before it gave up: every GET of the index, of the record file (the
    # reader's and the size's) and of the listing was answered 503
    per_object = Counter(path.split("?")[0].rsplit("/", 1)[-1] for path in injected)
    assert per_object["e.tfindex"] >= 2 and per_object["e.tfrecord"] >= 4 and per_object["o"] >= 2, per_object


def failure_of(call) -> Tuple[Optional[BaseException], float]:
    """(the exception `call()` raised, or None; seconds it took)."""
    started = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - what the test checks
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


def test_a_transient_5xx_on_an_index_or_a_record_file_is_retried(gcs, shard, faulty):
    """Within the default limit (the client backs off 1-2 s, then 2-4 s)."""
    with faulty(RangeFaults(("status", 503), times=2, name=".tf", ranged=False)) as proxy:
        assert len(load_index(gcs.uri("e.tfindex", proxy.host_port))) == len(shard)
        assert len(proxy.injected) == 2  # both first GETs of the index failed, then one passed
        assert list(RecordReader(gcs.uri("e.tfrecord", proxy.host_port))) == list(RecordReader(gcs.uri("e.tfrecord")))
        assert len(proxy.injected) == 2  # the rule was spent on the index
