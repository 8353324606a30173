"""Whether a failed remote request is worth another attempt (`_ranges`), decided by what the
store answered, never by words of a message that may come from a key or an endpoint.

A request that cannot succeed on a retry is one whose object is missing or whose access is
refused: pyarrow raises FileNotFoundError / PermissionError for those where it knows (an
errno: ENOENT, EACCES; its GCS errors all carry one), fsspec raises them itself. pyarrow's
S3 errors other than a missing object at open are plain OSErrors whose text reads
"... AWS Error CODE (HTTP status NNN) during OPERATION operation: ...": the status is read
from that phrase after every spelling of the object's key, bucket and endpoint was taken out
of the text, so a key like `train-00404-of-01024.tfrecord` or a port like 40404 never passes
for a 404. Everything else (a 5xx, a cut or reset connection, a timeout) is retried.
"""

from __future__ import annotations

import errno
import re
import urllib.parse
from typing import Optional

__all__ = ["PERMANENT_STATUS", "http_status", "is_permanent"]

PERMANENT_ERRNOS = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR})
PERMANENT_STATUS = frozenset({401, 403, 404})  # unauthenticated, refused, missing
_S3_STATUS = re.compile(r"AWS Error ([A-Z0-9_]+)(?: \(HTTP status (\d{3})\))? during [A-Za-z]+ operation")
# The AWS SDK's error codes that stand for these statuses, where pyarrow's text gives the code
# alone ("AWS Error ACCESS_DENIED during GetObject operation: ..." for a 403 on a ranged GET)
_S3_CODE_STATUS = {
    "ACCESS_DENIED": 403,
    "INVALID_ACCESS_KEY_ID": 403,
    "SIGNATURE_DOES_NOT_MATCH": 403,
    "MISSING_AUTHENTICATION_TOKEN": 403,
    "NO_SUCH_KEY": 404,
    "NO_SUCH_BUCKET": 404,
    "RESOURCE_NOT_FOUND": 404,
    "INTERNAL_FAILURE": 500,
    "SERVICE_UNAVAILABLE": 503,
    "SLOW_DOWN": 503,
}


def _spellings(path: str) -> list:
    """Every way `path` (a URI) may appear in a client's message: the URI, its key, its bucket,
    `bucket/key`, its endpoint, each as written and percent-decoded; longest first."""
    from ._uri import split_query

    base, query = split_query(path) if "://" in path else (path, "")
    query = query[1:]
    out = {base}
    if "://" in base:
        rest = base.split("://", 1)[1]
        bucket, _, key = rest.partition("/")
        out.update({rest, bucket, key})
    for _, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        out.add(value)  # endpoint_override=HOST:PORT and the like
        out.update(value.split(":"))
    out.update({urllib.parse.unquote(s) for s in list(out)})
    return sorted((s for s in out if s), key=len, reverse=True)


def http_status(exc: BaseException, path: str = "") -> Optional[int]:
    """The HTTP status an object store answered, as an error of pyarrow's S3 client tells it
    (None when it tells none), with the object's names and endpoint (`path`) taken out of the
    text first."""
    for attribute in ("status", "status_code", "code"):  # fsspec / botocore-style errors
        value = getattr(exc, attribute, None)
        if isinstance(value, int) and 100 <= value <= 599:
            return value
    text = str(exc)
    for spelling in _spellings(path):
        text = text.replace(spelling, "")
    found = _S3_STATUS.search(text)
    if not found:
        return None
    return int(found.group(2)) if found.group(2) else _S3_CODE_STATUS.get(found.group(1))


def is_permanent(exc: BaseException, path: str = "") -> bool:
    """True when retrying `exc` (a failed request for `path`) cannot help: a missing object or
    a refused access, by type, errno or the store's HTTP status (see the module)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)):
        return True
    if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
        return True
    return http_status(exc, path) in PERMANENT_STATUS
