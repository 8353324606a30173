"""Which failed range requests are retried (issue 34, item 7): decided by the error's type,
errno or the HTTP status the store answered, never by a substring of its message, which holds
the key and the endpoint (`train-00404-of-01024.tfrecord`, a port 40404)."""

from __future__ import annotations

import errno

import pytest

from tfrecord_beam import _retry
from tfrecord_beam._ranges import ObjectChangedError, _fatal

KEY = "s3://b/train-00404-of-01024.tfrecord?endpoint_override=127.0.0.1:40404&scheme=http"


@pytest.mark.parametrize(
    "message",
    [
        "When reading from 'b/train-00404-of-01024.tfrecord' at position 0: AWS Error NETWORK_CONNECTION "
        "during GetObject operation: curlCode: 56, Failure when receiving data from the peer",
        "AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream (eof: 0, bad: 1)",
        "When reading from 'b/train-00404-of-01024.tfrecord': AWS Error SLOW_DOWN (HTTP status 503) during "
        "GetObject operation: Please reduce your request rate",
        "Could not connect to endpoint 127.0.0.1:40404",
        "When reading 'b/x (HTTP status 404) during GetObject operation': AWS Error UNKNOWN (HTTP status 500) "
        "during GetObject operation: boom",
    ],
)
def test_a_transient_failure_is_retried_whatever_the_key_and_endpoint_hold(message):
    assert not _fatal(OSError(message), KEY)


@pytest.mark.parametrize(
    "exc",
    [
        FileNotFoundError(errno.ENOENT, "Path does not exist"),
        PermissionError(errno.EACCES, "denied"),
        OSError(errno.ENOENT, "google::cloud::Status(NOT_FOUND: ...)"),
        OSError(
            "When reading from 'b/train-00404-of-01024.tfrecord': AWS Error ACCESS_DENIED (HTTP status 403) "
            "during GetObject operation: Access Denied"
        ),
        OSError("AWS Error NO_SUCH_KEY (HTTP status 404) during GetObject operation: The key does not exist"),
        ObjectChangedError("replaced"),
    ],
)
def test_a_missing_or_refused_object_is_not_retried(exc):
    assert _fatal(exc, KEY)


def test_the_status_is_read_after_the_names_are_taken_out():
    text = "When reading from 'b/k (HTTP status 404) during GetObject operation' : connection reset"
    path = "s3://b/k (HTTP status 404) during GetObject operation"
    assert _retry.http_status(OSError(text.replace("b/k", "b/k")), path) is None
    assert _retry.http_status(OSError("AWS Error X (HTTP status 403) during HeadObject operation: no"), path) == 403
