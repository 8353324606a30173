"""Opening paths: local files, `file://`, and remote URIs through pyarrow.fs (gs://, s3://,
hdfs://), with fsspec as the fallback for schemes pyarrow does not know (memory://, hf://,
az://, ...; wrapped as a pyarrow filesystem, so one code path serves both).

A URI may carry a query string for its filesystem (`s3://b/x-*.tfrecord?endpoint_override=
127.0.0.1:9000&scheme=http`): pyarrow reads the options from it, and every name derived from
such a URI (glob results, index names) keeps it, so `split_query` / `with_query` are the one
place that takes it apart and puts it back.

A remote URI's path is percent-encoded, as in any URI: it is decoded exactly once, when it is
opened (`%25` is `%`, `%3F` is `?`, `%23` is `#`; a bare `?` starts the query string). Object
names are data: a name a listing returns (which may hold `%`, `?` or `#`) becomes a URI only
through `listed_uri` / `listed_path`, which encode those characters, so opening the URI reaches
that object and no other (`d/part%41.tfrecord` is never read as `d/partA.tfrecord`).

Writes go through `atomic_output`, which writes under a temporary name beside the target and
renames on success, so an interrupted write never leaves a file that looks complete. The
temporary name records its writer (`.NAME.tmp-PID@HOST-RANDOM`), so leftovers of a killed
writer can be told from a live one's (`stale_temp_files`).
"""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import hashlib
import io
import mmap
import os
import socket
import stat
import urllib.parse
import uuid
from typing import (
    Any,
    BinaryIO,
    Callable,
    ContextManager,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
    Union,
)

from ._bounded import BoundedFile, bounded, remote_timeout, retrying
from ._uri import is_remote, split_query  # the rule lives apart: _bounded and _retry use it too

__all__ = [
    "PathLike",
    "Commit",
    "AtomicOutput",
    "split_query",
    "with_query",
    "quote_name",
    "listed_uri",
    "listed_path",
    "is_remote",
    "ranged_filesystem",
    "open_input",
    "file_size",
    "FileStat",
    "file_stat",
    "exists",
    "GLOB_CHARS",
    "is_glob",
    "expand",
    "list_dir",
    "join",
    "dirname",
    "is_dir",
    "data_files",
    "is_sidecar",
    "delete",
    "TEMP_MARK",
    "temp_owner_tag",
    "pid_alive",
    "stale_temp_files",
    "atomic_output",
]

PathLike = Union[str, "os.PathLike[str]"]


class Commit(Protocol):
    """What an `atomic_output` yields beside its file (this module's and `beam._fs`'s)."""

    @property
    def temp(self) -> Optional[str]:
        """Where the file is written until `move` renames it to `final`, spelt as its layer's
        file functions take it; None where it is written at `final` itself (`beam._fs` on an
        object store: it appears there when finished)."""

    @property
    def final(self) -> str:
        """The target."""

    def finish(self) -> None:
        """Close the file without moving it into place."""

    def move(self) -> None:
        """Put the finished file in place."""

    def abort(self) -> None:
        """Drop the file: nothing appears at the target."""

    def __call__(self) -> None:
        """`finish`, then `move`."""


# A file layer's `atomic_output`: path -> context manager of (file, commit).
AtomicOutput = Callable[[str], ContextManager[Tuple[BinaryIO, Commit]]]


def _split_uri(path: str):
    """Return (pyarrow filesystem, path inside it) for a remote URI, or (None, local path)."""
    if path.startswith("file://"):
        return None, path[len("file://") :]
    if "://" not in path:
        return None, path
    return _from_uri(path)


# Object-store filesystems made by `_from_uri`, per process (a client made before a fork is not
# used after it) and per bucket, query string and the environment that configures the client:
# pyarrow's FileSystem.from_uri resolves the bucket's region and builds a client, 0.25-3 s a call,
# and a training epoch asks for the same bucket dozens of times.
_CACHED_SCHEMES = ("s3", "gs", "gcs")
_CLIENT_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
)


class _Client:
    """One cached object-store client (`filesystem`) and, once a range reader asked for it,
    its twin for range reads (`ranged`: see `ranged_filesystem`)."""

    __slots__ = ("filesystem", "ranged")

    def __init__(self, filesystem: Any) -> None:
        self.filesystem = filesystem
        self.ranged: Any = None


_filesystems: Dict[Tuple[Any, ...], _Client] = {}


def _from_uri(uri: str):
    """pyarrow's (filesystem, path) for a URI (one place, so tests can stand in a local one).

    Object-store filesystems are made once per process, bucket, query string and client
    environment (see `_filesystems`). Schemes pyarrow does not know go to fsspec (when
    installed), wrapped as a pyarrow filesystem; the error names the URI when neither knows
    the scheme.
    """
    scheme = uri.split("://", 1)[0].lower()
    if scheme not in _CACHED_SCHEMES:
        return _make_filesystem(uri)
    base, query = split_query(uri)
    bucket, inner = _bucket_path(base)
    environment = tuple(os.environ.get(name) for name in _CLIENT_ENVIRONMENT)
    cache_key = (os.getpid(), scheme, bucket, query, environment, remote_timeout())
    cached = _filesystems.get(cache_key)
    if cached is not None:
        return cached.filesystem, inner
    # a glob's bracket expression (`[?]`, `[0-9]`) is no URI pyarrow parses: the client is made
    # from the bucket's URI, and the path is ours (`_bucket_path`)
    bracketed = "[" in base or "]" in base
    client_uri = (
        with_query(base.split("://", 1)[0] + "://" + base.split("://", 1)[1].split("/", 1)[0], query)
        if bracketed
        else uri
    )
    # making a client is mostly local work (and a region lookup without `region=`): bounded, but
    # never tighter than 30 s, so a busy machine does not fail it
    made = bounded(uri, "making the client", lambda: _make_filesystem(client_uri), max(remote_timeout(), 30.0))
    filesystem, made_inner = made
    if bracketed:
        made_inner = inner
    if made_inner == inner:  # the path rule above holds for this URI: later ones may skip pyarrow
        _filesystems[cache_key] = _Client(filesystem)
    return filesystem, made_inner


def _bucket_path(base: str) -> Tuple[str, str]:
    """(bucket, `bucket/key` as the object store's filesystem names it) of a URI without query."""
    bucket, _, key = base.split("://", 1)[1].partition("/")
    return bucket, urllib.parse.unquote(f"{bucket}/{key}" if key else bucket).rstrip("/") or bucket


# How long pyarrow's GCS client retries one call (open, stat, list, read) before it fails, unless a
# gs:// URI says otherwise (`?retry_limit_seconds=S`): the one place that bounds gs:// retries
# outside the range reads. pyarrow's own default is 15 minutes, so a persistent 5xx on an index
# read or a stat looked like a hang; a minute rides out a brief outage and then fails, naming
# the object (`open_input`, `file_stat`, `map_input`).
GCS_RETRY_LIMIT_S = 60.0

# How long pyarrow's GCS client may retry a range read of `ranged_filesystem`'s twin: less than
# its first backoff (1-2 s), so a request failing before its body (a 5xx, a refused or reset
# connection) is made once (google-cloud-cpp's retry loop gives up when this has passed at a
# failure, or when it wakes from that backoff); more than the time from the call to the request
# (the loop refuses to start once it has passed: 0 makes no request at all, "Retry policy
# exhausted before first request attempt"). A download cut after its body began is another
# matter: the client's read stream resumes it with a new ranged GET under a retry policy it
# starts afresh at that failure (RetryObjectReadSource::Read), which no limit that lets a first
# request through refuses (seen with 0.5 s and 1 ms alike); a failure of the resume's request
# ends the read, after the client's backoff. So such a cut costs a GET the caller does not count.
GCS_RANGED_RETRY_LIMIT_S = 0.5


def ranged_filesystem(path: str) -> Tuple[Any, str]:
    """(filesystem, path inside it) for reading byte ranges of `path` with the caller's own
    retries (`_ranges`): the filesystem `_from_uri` caches, except that for S3 and GCS it is
    its twin making one attempt per request, so a failing server costs the caller's attempts x
    timeout at most, not the client's retries too (pyarrow's GCS client retries for 15 minutes
    by default). Each request the caller counts is one on the wire, except a GCS download cut
    after its body began: the client resumes that one itself (see `GCS_RANGED_RETRY_LIMIT_S`),
    inside the caller's attempt and its timeout. The twin is made once per cached client
    (making one costs milliseconds) and kept in its cache entry."""
    filesystem, inner = _split_uri(path)
    if filesystem is None:
        return None, inner
    cached = next((c for c in list(_filesystems.values()) if c.filesystem is filesystem), None)
    if cached is None:  # one made for this call alone (an uncached URI, a test's stand-in)
        return _one_attempt_twin(filesystem), inner
    if cached.ranged is None:
        cached.ranged = _one_attempt_twin(filesystem)
    return cached.ranged, inner


def _one_attempt_twin(filesystem):
    """The same client making one attempt per request (S3, GCS); any other filesystem as it is."""
    from pyarrow import fs as pafs

    if isinstance(filesystem, pafs.S3FileSystem):
        return _single_attempt_s3(filesystem)
    if isinstance(filesystem, getattr(pafs, "GcsFileSystem", ())):
        return _single_attempt_gcs(filesystem)
    return filesystem


def _single_attempt_s3(filesystem):
    """The same S3 client with `max_attempts=1` (falls back to the given one where pyarrow's
    constructor does not take back its own settings)."""
    from pyarrow import fs as pafs

    try:
        settings = dict(filesystem.__reduce__()[1][0])
        for name in ("connect_timeout", "request_timeout"):
            if settings.get(name) is not None and settings[name] < 0:
                settings[name] = None
        proxy = settings.pop("proxy_options", None)
        if proxy and proxy.get("host"):
            settings["proxy_options"] = proxy
        return pafs.S3FileSystem(**settings, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    except (TypeError, ValueError, IndexError, KeyError):  # pragma: no cover - another pyarrow
        return filesystem


def _single_attempt_gcs(filesystem):
    """The same GCS client retrying for `GCS_RANGED_RETRY_LIMIT_S` only: one attempt per request
    (a download cut after its body began is still resumed once by the client); falls back to
    the given one where pyarrow's constructor does not take back its own settings."""
    return _gcs_with_retry_limit(filesystem, GCS_RANGED_RETRY_LIMIT_S, replace=True)


def _gcs_with_retry_limit(filesystem, seconds: float, replace: bool):
    """The same GCS client retrying for `seconds` (`replace`) or, when it has no limit of its
    own (pyarrow's 15 minutes), for `seconds`; falls back to the given one where pyarrow's
    constructor does not take back its own settings."""
    import datetime

    from pyarrow import fs as pafs

    try:
        settings = dict(filesystem.__reduce__()[1][0])
        if not replace and settings.get("retry_time_limit") is not None:
            return filesystem
        settings["retry_time_limit"] = datetime.timedelta(seconds=seconds)
        return pafs.GcsFileSystem(**settings)
    except (TypeError, ValueError, IndexError, KeyError):  # pragma: no cover - another pyarrow
        return filesystem


def _make_filesystem(uri: str):
    """A new (filesystem, path) for `uri` from pyarrow, else fsspec."""
    from pyarrow import fs as pafs

    if uri.split("://", 1)[0].lower() in ("gs", "gcs"):
        custom = _gcs_filesystem(uri)
        if custom is not None:
            return custom
    try:
        filesystem, inner = pafs.FileSystem.from_uri(uri)
    except (ValueError, TypeError, OSError) as exc:
        if "Unrecognized filesystem type" not in str(exc) and "not supported" not in str(exc).lower():
            raise ValueError(f"{uri}: not a URI pyarrow.fs can open: {exc}") from None
        try:
            import fsspec
        except ImportError:
            raise ValueError(
                f"{uri}: pyarrow.fs does not know this scheme, and fsspec (its fallback) is not installed"
            ) from None
        filesystem, inner = fsspec.core.url_to_fs(uri)
        # the path decoded once, as pyarrow decodes its own URIs (`listed_uri` encoded it)
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem)), urllib.parse.unquote(inner)
    if isinstance(filesystem, getattr(pafs, "GcsFileSystem", ())):  # no limit in the URI: ours
        filesystem = _gcs_with_retry_limit(filesystem, GCS_RETRY_LIMIT_S, replace=False)
    if isinstance(filesystem, pafs.S3FileSystem):
        filesystem = _s3_with_timeouts(filesystem, remote_timeout())
    return filesystem, inner


def _s3_with_timeouts(filesystem, seconds: float):
    """The same S3 client whose requests end after `seconds` without progress (the AWS SDK's
    request and connect timeouts, unless the URI set them): a server stalling mid-body ends
    the request in the client itself, so no call is left hanging in it (`_bounded` gives the
    caller up at the same bound; a call still inside the client held the process's exit)."""
    from pyarrow import fs as pafs

    try:
        settings = dict(filesystem.__reduce__()[1][0])
        for name in ("connect_timeout", "request_timeout"):
            if settings.get(name) is None or settings[name] < 0:
                settings[name] = seconds
        proxy = settings.pop("proxy_options", None)
        if proxy and proxy.get("host"):
            settings["proxy_options"] = proxy
        return pafs.S3FileSystem(**settings)
    except (TypeError, ValueError, IndexError, KeyError):  # pragma: no cover - another pyarrow
        return filesystem


# The query parameters of a gs:// URI: pyarrow's own, and `anonymous` (ours: pyarrow's URI
# form always takes the Google default credentials, which an emulator has no use for).
GCS_QUERY_PARAMETERS = ("endpoint_override", "scheme", "retry_limit_seconds", "anonymous")
STORAGE_EMULATOR_HOST = "STORAGE_EMULATOR_HOST"


def _gcs_filesystem(uri: str):
    """(pyarrow GcsFileSystem, path) for a gs:// URI with a custom endpoint, else None.

    A custom endpoint comes from the URI's query (`endpoint_override=HOST:PORT&scheme=http`,
    `anonymous=true` for no credentials) or, as for google-cloud-storage and so Beam's gs://
    filesystem, from `STORAGE_EMULATOR_HOST` (`http://HOST:PORT`: that endpoint, anonymously,
    unless the query says otherwise): one variable points the jobs and the readers at the same
    server. Without either (None), pyarrow's own URI rules apply: the real service or the
    query's endpoint, with Google's default credentials.
    """
    from pyarrow import fs as pafs

    base, query = split_query(uri)
    pairs = urllib.parse.parse_qsl(query[1:], keep_blank_values=True)
    emulator = os.environ.get(STORAGE_EMULATOR_HOST, "").strip()
    if not emulator and all(key != "anonymous" for key, _ in pairs):
        return None  # the real service: pyarrow's URI rules and credentials
    params: Dict[str, str] = {}
    for key, value in pairs:
        if key not in GCS_QUERY_PARAMETERS:
            raise ValueError(
                f"{uri}: unknown query parameter {key!r} for gs:// (known: {', '.join(GCS_QUERY_PARAMETERS)})"
            )
        if key in params:
            raise ValueError(f"{uri}: query parameter {key!r} given twice")
        params[key] = value
    import datetime

    options: Dict[str, Any] = {"retry_time_limit": datetime.timedelta(seconds=GCS_RETRY_LIMIT_S)}
    if emulator:
        parsed = urllib.parse.urlsplit(emulator if "://" in emulator else "http://" + emulator)
        if not parsed.netloc:
            raise ValueError(f"{STORAGE_EMULATOR_HOST}={emulator!r}: not a URL like http://127.0.0.1:4443")
        options.update(endpoint_override=parsed.netloc, scheme=parsed.scheme, anonymous=True)
    if "endpoint_override" in params:
        options["endpoint_override"] = params["endpoint_override"]
    if "scheme" in params:
        options["scheme"] = params["scheme"]
    if "anonymous" in params:
        flag = params["anonymous"].lower()
        if flag not in ("true", "false", "1", "0"):
            raise ValueError(f"{uri}: anonymous={params['anonymous']!r}: use true or false")
        options["anonymous"] = flag in ("true", "1")
    if "retry_limit_seconds" in params:
        try:
            seconds = float(params["retry_limit_seconds"])
        except ValueError:
            raise ValueError(f"{uri}: retry_limit_seconds={params['retry_limit_seconds']!r} is not a number") from None
        options["retry_time_limit"] = datetime.timedelta(seconds=seconds)
    return pafs.GcsFileSystem(**options), _bucket_path(base)[1]


def with_query(path: str, query: str) -> str:
    """`path` with the query string of another URI (as `split_query` returned it) put back."""
    return path + query if query else path


# What a listed object name must have encoded to stand in a URI's path: `%` (else decoded), `?`
# (else a query string) and `#` (else a fragment).
_URI_RESERVED = {"%": "%25", "?": "%3F", "#": "%23"}


def quote_name(name: str) -> str:
    """An object name (or `bucket/key`) as it is written in a URI's path: `%`, `?` and `#`
    percent-encoded, everything else as it is (opening the URI decodes it back, once)."""
    return "".join(_URI_RESERVED.get(ch, ch) for ch in name)


def listed_uri(scheme: str, listed: str, query: str = "", user: str = "") -> str:
    """The URI of an object a listing of `scheme://` returned as `listed` (`bucket/key`, the
    filesystem's own path): the one place a listed name becomes something to open. `query`
    (`split_query`'s) and `user` (`KEY:SECRET@`) come from the URI that was listed."""
    return with_query(f"{scheme}://{user}{quote_name(listed.lstrip('/') if scheme == 'memory' else listed)}", query)


def listed_path(directory: PathLike, name: str) -> str:
    """The path of the file `name` that listing `directory` found: a local path joined as it
    is; a URI with `name` encoded (`quote_name`), its query string kept at the end."""
    directory = os.fspath(directory)
    return join(directory, quote_name(name)) if is_remote(directory) else join(directory, name)


def open_input(path: PathLike) -> BinaryIO:
    """Open a path or URI for binary reading."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        return io.open(inner, "rb")
    on_gcs = isinstance(filesystem, getattr(_pafs(), "GcsFileSystem", ()))
    # S3: the one-attempt client, retried by `_bounded.retrying` within the bound, so a store
    # that keeps failing is reported by its last answer (a 503's SLOW_DOWN), not as a stall
    on_s3 = isinstance(filesystem, _pafs().S3FileSystem)
    if on_s3:
        filesystem = ranged_filesystem(os.fspath(path))[0]

    def opened() -> Any:
        if on_gcs:
            return _EndSafeFile(_GcsStreamFile(filesystem, inner), os.fspath(path))
        return filesystem.open_input_file(inner)

    try:
        with _remote_errors(path):
            handle = (retrying if on_s3 else bounded)(path, "open", opened)
    except FileNotFoundError as exc:  # pyarrow's GCS error names no object: name the URI
        raise FileNotFoundError(
            errno.ENOENT, f"no such object ({str(exc).splitlines()[0][:200]})", os.fspath(path)
        ) from None
    return BoundedFile(handle, os.fspath(path), retry=on_s3)  # type: ignore[return-value]


@contextlib.contextmanager
def _remote_errors(path: PathLike) -> Iterator[None]:
    """A remote call's OSError (other than a missing object) as `_naming` says."""
    try:
        yield
    except FileNotFoundError:
        raise
    except OSError as exc:
        named = _naming(path, exc)
        if named is exc:  # it names its object already: as it was
            raise
        raise named from exc


def _naming(path: PathLike, exc: OSError) -> OSError:
    """`exc` (a remote call that failed: for GCS, after `GCS_RETRY_LIMIT_S` of retries) as an
    OSError naming the object (without its query string): pyarrow's GCS errors name none."""
    if exc.filename is not None:
        return exc
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
    message = f"{split_query(os.fspath(path))[0]}: {first}"
    return OSError(exc.errno, message) if exc.errno is not None else OSError(message)


def _pafs():
    from pyarrow import fs as pafs

    return pafs


class _EndSafeFile:
    """A pyarrow GCS input file on which seeking to (or past) the end, and reading there, work.

    pyarrow's GCS file opens a ranged read at every seek, and GCS answers a range that starts at
    the object's end with 416 (apache/arrow#38854): `seek(0, SEEK_END)`, which the readers use
    to learn a file's size, fails on every non-empty object. Here a position at or past the
    end is kept without asking the store, and reads there return b"". A seek to where the file
    already is asks nothing either: pyarrow's file starts its whole-object download at its first
    use (`size()` here), and a seek opens another from that offset, so the readers' seek to 0
    after learning the size made two downloads of the object, the first cut at the client's
    buffers (up to MBs on the wire) unread. Everything else is the pyarrow file's."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name  # what a failed read names (`_naming`)
        self._size = int(inner.size())
        self._past_end: Optional[int] = None  # the position, when at or past the end

    def size(self) -> int:
        return self._size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.tell(), io.SEEK_END: self._size}[whence]
        position = base + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        if position >= self._size > 0:
            self._past_end = position
            return position
        self._past_end = None
        with _remote_errors(self._name):
            if position == self._inner.tell():  # no new download for a seek that stays put
                return position
            return self._inner.seek(position)

    def tell(self) -> int:
        return self._past_end if self._past_end is not None else self._inner.tell()

    def read(self, nbytes: Optional[int] = None) -> bytes:
        if self._past_end is not None:
            return b""
        with _remote_errors(self._name):
            return self._inner.read() if nbytes is None or nbytes < 0 else self._inner.read(nbytes)

    def readinto(self, buffer: Any) -> int:
        if self._past_end is not None:
            return 0
        with _remote_errors(self._name):
            return self._inner.readinto(buffer)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        if offset >= self._size:
            return b""
        with _remote_errors(self._name):
            return self._inner.read_at(min(nbytes, self._size - offset), offset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> "_EndSafeFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


def map_input(path: PathLike) -> Tuple[Union[bytes, "mmap.mmap"], Optional[BinaryIO]]:
    """The whole content of a path or URI as one read-only buffer, and the open file behind a
    mapping: a local file is memory-mapped (its page-cache pages, no copy into a fresh buffer:
    a 300 MB index costs no page faults of its own), a remote one is read whole (no file). As
    with any mapping, a file truncated in place while mapped faults the reader (our writers
    replace files by rename, which is safe): hold it briefly, or watch the file's size."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is not None:
        with _remote_errors(path):
            return bounded(path, "read whole", lambda: _read_whole(filesystem, inner)), None
    handle = io.open(inner, "rb")
    try:
        if os.fstat(handle.fileno()).st_size == 0:  # mmap refuses an empty file
            handle.close()
            return b"", None
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), handle
    except BaseException:
        handle.close()
        raise


def _read_whole(filesystem: Any, inner: str) -> bytes:
    gcs: Any = getattr(_pafs(), "GcsFileSystem", None)
    if gcs is not None and isinstance(filesystem, gcs):  # not holding the GIL
        with filesystem.open_input_stream(inner) as stream:
            return stream.read()
    with filesystem.open_input_file(inner) as remote:
        return remote.read()


class _GcsStreamFile:
    """A gs:// object read front to back by pyarrow's GCS input *stream*, as a seekable file.

    pyarrow's GCS random-access file starts its download lazily, inside its `closed` check,
    which every method of pyarrow's file calls holding the GIL: a server stalling mid-body then
    held the GIL for google-cloud-cpp's stall timeout (2 x 120 s), so no thread of the process
    ran, and neither the bound of `_bounded` nor anything else could end the wait (the CLI's
    `count` on a stalled gs:// object took ~240 s, issue 34 item 6). The stream's open and
    reads release the GIL, so a stall is given up at the bound like any other. A seek forward
    up to `SKIP_BYTES` reads and drops the bytes between; any other seek, and `read_at`,
    opens pyarrow's random-access file (which keeps the limit above: the readers of the CLI
    read front to back, and their seeks stay put or go to the end, which `_EndSafeFile` answers
    without a request)."""

    SKIP_BYTES = 1 << 20

    def __init__(self, filesystem: Any, inner: str) -> None:
        self._filesystem, self._inner = filesystem, inner
        info = filesystem.get_file_info(inner)  # releases the GIL
        if info.size is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", inner)
        self._size = int(info.size)
        self._stream: Any = None
        self._random: Any = None
        self._position = 0

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._random.tell() if self._random is not None else self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self._random is not None:
            return self._random.seek(offset, whence)
        position = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence] + offset
        if position == self._position:
            return position
        if self._position < position <= self._position + self.SKIP_BYTES:
            self.read(position - self._position)
            return self._position
        self._random = self._filesystem.open_input_file(self._inner)
        self._close_stream()
        return self._random.seek(position)

    def read(self, nbytes: Optional[int] = None) -> bytes:
        if self._random is not None:
            return self._random.read() if nbytes is None or nbytes < 0 else self._random.read(nbytes)
        if self._stream is None:
            if self._position:  # pragma: no cover - a stream starts at 0, seeks forward read
                raise OSError(f"{self._inner}: stream not at 0")
            self._stream = self._filesystem.open_input_stream(self._inner)
        data = self._stream.read() if nbytes is None or nbytes < 0 else self._stream.read(nbytes)
        self._position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def read_at(self, nbytes: int, offset: int) -> bytes:
        if self._random is None:
            self._random = self._filesystem.open_input_file(self._inner)
        return self._random.read_at(nbytes, offset)

    def _close_stream(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
            except Exception:  # noqa: BLE001
                pass
            self._stream = None

    @property
    def closed(self) -> bool:
        return False

    def close(self) -> None:
        self._close_stream()
        if self._random is not None:
            self._random.close()
            self._random = None


@contextlib.contextmanager
def mapped_input(path: PathLike) -> Iterator[Union[bytes, "mmap.mmap"]]:
    """`map_input`'s buffer for the `with` block, unmapped and closed after it."""
    data, handle = map_input(path)
    try:
        yield data
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
        if handle is not None:
            handle.close()


def file_size(path: PathLike) -> int:
    """Size in bytes of a path or URI (`file_stat`'s: a missing object is a FileNotFoundError
    naming it, never pyarrow's None)."""
    return file_stat(path).size


class FileStat(NamedTuple):
    """One identity of a file or remote object: its size, its modification time in ns where
    the store tells one (`version`), and its entity tag where the store gives one with the
    size at no extra request (`tag`: S3's ETag). Taken when a dataset lists its files and
    compared again before the object is read in a later pass (`torch._files.FileSet`) and at
    every open of it (`_ranges.RangeSource`), and part of every cache key of its blocks, so
    two versions of an object are never mixed."""

    size: int
    version: Optional[int]
    tag: Optional[str] = None

    @property
    def version_key(self) -> str:
        """What tells this version from another of the same size (cache keys, shared files)."""
        return f"{self.version}|{self.tag}"

    def describe(self) -> str:
        """The identity in words, for errors."""
        tag = f", ETag {self.tag}" if self.tag else ""
        return f"{self.size} bytes, modified {self.version} ns{tag}"


def file_stat(path: PathLike) -> FileStat:
    """Size and version of a path or URI in one call (a local file: its mtime too; an S3
    object: its ETag too, from the same HEAD request)."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        info = os.stat(inner)
        return FileStat(info.st_size, info.st_mtime_ns)
    if isinstance(filesystem, _pafs().S3FileSystem):
        return _s3_stat(path, filesystem, inner)
    with _remote_errors(path):
        found = bounded(path, "stat", lambda: filesystem.get_file_info(inner))
    if found.size is None:
        raise FileNotFoundError(f"{os.fspath(path)}: no such object")
    return FileStat(int(found.size), found.mtime_ns)


def _s3_stat(path: PathLike, filesystem: Any, inner: str) -> FileStat:
    """An S3 object's identity from one HEAD request (pyarrow's open: size, ETag, mtime)."""
    try:
        with _remote_errors(path):
            handle = bounded(path, "stat", lambda: filesystem.open_input_file(inner))
    except FileNotFoundError:
        raise FileNotFoundError(f"{os.fspath(path)}: no such object") from None
    try:
        return stat_of_handle(handle)
    finally:
        handle.close()


def stat_of_handle(handle: Any) -> FileStat:
    """The identity (`FileStat`) an open pyarrow S3 file learnt at its open (no request)."""
    import datetime

    meta = handle.metadata() if hasattr(handle, "metadata") else {}
    tag = meta.get("ETag") or meta.get("etag")
    modified = meta.get("Last-Modified")
    version = None
    if modified:
        try:
            when = datetime.datetime.fromisoformat(modified.decode().replace("Z", "+00:00"))
            version = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
        except ValueError:
            version = None
    return FileStat(int(handle.size()), version, tag.decode("utf-8", "replace") if tag else None)


def exists(path: PathLike) -> bool:
    """Whether a path or URI names an existing file."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        return os.path.isfile(inner)
    from pyarrow import fs as pafs

    with _remote_errors(path):
        return bounded(path, "stat", lambda: filesystem.get_file_info(inner)).type == pafs.FileType.File


GLOB_CHARS = "*?["


def is_glob(pattern: PathLike) -> bool:
    """Whether a path has glob characters (so it may match files the user did not name)."""
    return any(ch in os.fspath(pattern) for ch in GLOB_CHARS)


def is_pattern(path: PathLike) -> bool:
    """Whether a path is to be expanded as a glob: it has glob characters and is not a local
    path that exists as written (`data[1].tfrecord` names that file when it exists)."""
    path = os.fspath(path)
    if not is_glob(split_query(path)[0]):
        return False
    return is_remote(path) or not os.path.lexists(_local(path))


class SpecialFileError(OSError):
    """A path names a pipe, FIFO, device or socket: it cannot be seeked, and opening a FIFO
    that has no writer blocks forever, so it is refused without being opened."""


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def is_special(path: PathLike) -> bool:
    """True for a local path that exists and is neither a regular file nor a directory (a FIFO,
    a pipe such as /dev/stdin, a device, a socket). Decided by stat: never opened."""
    path = os.fspath(path)
    if is_remote(path):
        return False
    try:
        mode = os.stat(_local(path)).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def refuse_special(path: PathLike) -> None:
    """SpecialFileError (one line) when `path` is a pipe, FIFO, device or socket."""
    if is_special(path):
        raise SpecialFileError(
            f"{os.fspath(path)}: not a regular file (a pipe, FIFO or device): TFRecord tools read files "
            "they can seek and never open a FIFO; save the stream to a file first"
        )


def expand(patterns: Union[PathLike, Iterable[PathLike]]) -> List[str]:
    """Expand a path, glob or list of them into a sorted list of files (remote globs too)."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    out: List[str] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        if not is_pattern(pattern):
            out.append(pattern)
            continue
        filesystem, inner = _split_uri(pattern)
        if filesystem is None:
            prefix = "file://" if pattern.startswith("file://") else ""
            found = sorted(_glob.glob(inner))
            refuse_broken_links(found)
            out.extend(prefix + p for p in found if os.path.isfile(p))
        else:
            out.extend(_remote_glob(pattern, filesystem, inner))
    return out


def list_dir(directory: PathLike) -> List[str]:
    """Names (not paths) of the files directly inside a local or remote directory; [] if none."""
    directory = os.fspath(directory)
    filesystem, inner = _split_uri(directory)
    if filesystem is None:
        return (
            sorted(n for n in os.listdir(inner) if os.path.isfile(os.path.join(inner, n)))
            if os.path.isdir(inner)
            else []
        )
    from pyarrow import fs as pafs

    with _remote_errors(directory):
        selector = pafs.FileSelector(inner.rstrip("/"), allow_not_found=True)
        infos = bounded(directory, "list", lambda: filesystem.get_file_info(selector))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


def join(directory: PathLike, name: str) -> str:
    """`directory/name` for a local path or a URI (a URI's query string stays at the end)."""
    directory, query = split_query(os.fspath(directory))
    if "://" in directory:
        return with_query(directory.rstrip("/") + "/" + name, query)
    return os.path.join(directory, name)


def dirname(path: PathLike) -> str:
    """The directory part of a local path or URI (query string kept); '.' for a bare name."""
    base, query = split_query(os.fspath(path))
    if "://" in base:
        scheme, rest = base.split("://", 1)
        head = rest.rsplit("/", 1)[0] if "/" in rest else rest
        return with_query(f"{scheme}://{head}", query)
    return os.path.dirname(base) or "."


def is_dir(path: PathLike) -> bool:
    """Whether a local path or URI names a directory (a prefix with objects, on object stores)."""
    path = os.fspath(path)
    filesystem, inner = _split_uri(path)
    if filesystem is None:
        return os.path.isdir(inner)
    from pyarrow import fs as pafs

    with _remote_errors(path):
        return (
            bounded(path, "stat", lambda: filesystem.get_file_info(inner.rstrip("/"))).type == pafs.FileType.Directory
        )


def data_files(target: PathLike) -> List[str]:
    """TFRecord files named by a directory (its `*.tfrecord*`, local or remote), a path or a
    glob; indexes and dot-files excluded. A pipe or FIFO named itself is refused
    (SpecialFileError); one inside a directory or matched by a glob is left out. Neither is
    ever opened (stat only), so a FIFO with no writer cannot hang the listing."""
    target = os.fspath(target)
    if not is_pattern(target) and is_dir(target):
        if "://" in target:
            candidates = [listed_path(target, n) for n in list_dir(target) if ".tfrecord" in n]
        else:
            found = sorted(_glob.glob(os.path.join(_glob.escape(target), "*.tfrecord*")))
            refuse_broken_links(found)
            candidates = [p for p in found if os.path.isfile(p)]  # stat: FIFOs, sockets left out
    else:
        refuse_special(target)
        candidates = expand(target)
    return [p for p in candidates if not is_sidecar(split_query(p)[0])]


def is_sidecar(path: str) -> bool:
    """Index files, hidden files (temporaries, staging) and `_` files (manifests, dead letters)
    are not data."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return path.endswith(".tfindex") or name.startswith((".", "_"))


def refuse_broken_links(paths: Iterable[str]) -> None:
    """FileNotFoundError naming the local symlinks among `paths` that lead nowhere (a target
    that is gone, or a loop). A directory listing or glob that dropped them would read a
    silent subset of the data it was pointed at."""
    broken = [p for p in paths if not is_remote(p) and os.path.islink(_local(p)) and not os.path.exists(_local(p))]
    if broken:
        shown = ", ".join(f"{p} -> {os.readlink(_local(p))}" for p in broken[:3])
        more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
        raise FileNotFoundError(
            f"{broken[0]}: a symlink to a file that is not there (or a symlink loop): {shown}{more}; "
            "fix or remove the link (nothing was read)"
        )


def unique_files(paths: Iterable[str]) -> List[str]:
    """`paths` with each file once, in first-seen order. A local file is one file however it
    is spelled (relative or absolute, through `..`, or a symlink to it): read twice, its
    records would be counted or copied twice. Remote paths are compared as written."""
    seen = set()
    out = []
    for path in paths:
        key: object = path
        if not is_remote(path):
            try:
                info = os.stat(_local(path))
                key = (info.st_dev, info.st_ino)
            except (OSError, ValueError):
                key = os.path.abspath(_local(path))
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out


def _remote_glob(pattern: str, filesystem, inner: str) -> List[str]:
    import fnmatch

    from pyarrow import fs as pafs

    _, query = split_query(pattern)
    base = inner.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0].rsplit("/", 1)[0]
    scheme, rest = pattern.split("://", 1)
    authority = rest.split("/", 1)[0]
    user = authority.rsplit("@", 1)[0] + "@" if "@" in authority else ""  # s3://KEY:SECRET@bucket keeps its keys
    with _remote_errors(pattern):
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        infos = bounded(pattern, "list", lambda: filesystem.get_file_info(selector))
    wanted = inner.split("/")  # as a local glob: `*` stays within one path segment

    def matches(path: str) -> bool:
        parts = path.split("/")
        return len(parts) == len(wanted) and all(map(fnmatch.fnmatchcase, parts, wanted))

    return sorted(
        listed_uri(scheme, i.path, query, user) for i in infos if i.type == pafs.FileType.File and matches(i.path)
    )


def delete(paths: List[str]) -> None:
    """Delete files (local paths or URIs)."""
    for path in paths:
        filesystem, inner = _split_uri(os.fspath(path))
        if filesystem is None:
            os.remove(inner)
        else:
            filesystem.delete_file(inner)


def _host_tag() -> str:
    """This host's name plus a short hash of its pid space (kernel boot id + pid namespace), so
    that a writer in another container with the same host name is never taken for dead here."""

    name = socket.gethostname().replace("-", "_").replace("/", "_").replace("@", "_") or "host"
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            space = handle.read().strip() + os.readlink("/proc/self/ns/pid")
    except OSError:
        return name
    return f"{name}.{hashlib.blake2b(space.encode(), digest_size=3).hexdigest()}"


_HOST = _host_tag()
TEMP_MARK = ".tmp-"


def temp_owner_tag() -> str:
    """`PID@HOST`, this process's part of a temporary name (see `stale_temp_files`)."""
    return f"{os.getpid()}@{_HOST}"


NAME_MAX = 255  # bytes of one path component on Linux's file systems (and object stores' keys hold more)


def temp_basename(tail: str) -> str:
    """The temporary name of a file named `tail`: `.TAIL.tmp-PID@HOST-RANDOM`, within NAME_MAX
    bytes: a long `tail` (a legal 240-byte name) is cut and given a hash of the whole name
    (`.TAIL-PREFIX~HASH.tmp-...`), so any name a file may have can be written."""
    suffix = f"{TEMP_MARK}{temp_owner_tag()}-{uuid.uuid4().hex[:12]}"
    name = f".{tail}{suffix}"
    raw = os.fsencode(name)
    if len(raw) <= NAME_MAX:
        return name
    mark = "~" + hashlib.blake2b(os.fsencode(tail), digest_size=6).hexdigest()
    room = NAME_MAX - 1 - len(os.fsencode(mark + suffix))
    return "." + os.fsdecode(os.fsencode(tail)[: max(room, 0)]) + mark + suffix


def _temp_name(inner: str) -> str:
    head, tail = os.path.split(inner)
    return os.path.join(head, temp_basename(tail))


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host and has not exited. A zombie (exited,
    not yet reaped) is not alive: a killed job's process is one for as long as its parent lets
    it be, and an orphan stays one under a container's init that does not reap."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _proc_state(pid) not in ("Z", "X")


def _proc_state(pid: int) -> Optional[str]:
    """The state letter of process `pid` from /proc (None where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def stale_temp_files(directory: PathLike) -> List[str]:
    """Temporary files of `atomic_output` in a local directory left by writers on this host
    that are no longer running (a SIGKILL, the OOM killer). A live writer's files, and files
    of writers on other hosts (whose liveness cannot be seen from here), are never listed."""
    path = os.fspath(directory)
    if is_remote(path):
        return []
    path = path[len("file://") :] if path.startswith("file://") else path
    out = []
    for name in sorted(_glob.glob(os.path.join(_glob.escape(path or "."), ".*" + TEMP_MARK + "*@*-*"))):
        owner = os.path.basename(name).rsplit(TEMP_MARK, 1)[1].rsplit("-", 1)[0]
        pid, _, host = owner.partition("@")
        if host == _HOST and pid.isdigit() and not pid_alive(int(pid)):
            out.append(name)
    return out


@contextlib.contextmanager
def atomic_output(path: PathLike) -> Iterator[Tuple[BinaryIO, "_Commit"]]:
    """Yield (file, commit) writing under a temporary name; `commit()` renames it into place.

    Leaving the block without calling `commit()` (an exception, an interrupt) deletes the
    temporary file, so the target never appears half-written.
    """
    filesystem, inner = _split_uri(os.fspath(path))
    temp = _temp_name(inner)
    if filesystem is None:
        handle: BinaryIO = io.open(temp, "wb")
    else:
        handle = filesystem.open_output_stream(temp)
    commit = _Commit(filesystem, temp, inner, handle)
    try:
        yield handle, commit
    finally:
        if not commit.done:
            commit.abort()


class _Commit:
    """Finishes or abandons one `atomic_output` write."""

    def __init__(self, filesystem, temp: str, final: str, handle: BinaryIO) -> None:
        self.filesystem, self.temp, self.final, self.handle = filesystem, temp, final, handle
        self.done = False
        self.pid = os.getpid()  # a forked child that exits must not remove its parent's file

    def finish(self) -> None:
        """Close the temporary file without moving it (the caller orders the moves)."""
        self.handle.close()

    def __call__(self) -> None:
        self.finish()
        self.move()

    def move(self) -> None:
        """Move the finished temporary file into place (after `finish`)."""
        if self.filesystem is None:
            os.replace(self.temp, self.final)
        else:
            self.filesystem.move(self.temp, self.final)
        self.done = True

    def abort(self) -> None:
        if os.getpid() != self.pid:  # a forked child's copy: the file is its parent's to settle
            self.done = True
            return
        with contextlib.suppress(Exception):
            self.handle.close()
        with contextlib.suppress(Exception):
            if self.filesystem is None:
                os.remove(self.temp)
            else:
                self.filesystem.delete_file(self.temp)
        self.done = True
