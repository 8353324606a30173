"""Files as Beam code sees them: every read and write of the Beam side goes through Beam's
`FileSystems`, so pipeline options (`--s3_endpoint_url`, Dataflow's credentials, ...) apply.

The same small surface as the core's `tfrecord_beam.fs` (which uses pyarrow.fs): Beam code
imports this module instead, never both. `file://` URIs become plain local paths.

Paths follow the core's one rule for object names (docs/cli.md): a remote URI's path is
percent-encoded and is decoded exactly once, where it is handed to Beam's FileSystems
(`_beam`: `%25` is a `%` of the key, `%3F` a `?`, `%23` a `#`); every path this module
returns for an object a listing or match found is named by the core's one encoder
(`fs.listed_uri`, through `_listed`), so `in/part%41.tfrecord` is `.../part%2541.tfrecord` and
is never read as `in/partA.tfrecord`. A bare `?` in a remote URI would start a query string,
which Beam's filesystems do not take (their options are pipeline flags): refused.
"""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import io
import os
import urllib.parse
import warnings
from typing import Any, BinaryIO, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union, cast

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems

from .. import fs as _core_fs  # only its naming rules (temporary names, globs), not its I/O
from .._bounded import bounded

T = TypeVar("T")


def plain(path: str) -> str:
    """The path in this module's form: `file://` URIs become plain local paths (a remote URI
    stays percent-encoded: `_beam` decodes it for Beam's FileSystems)."""
    path = os.fspath(path)
    return path[len("file://") :] if path.startswith("file://") else path


def _beam(path: str) -> str:
    """`path` as Beam's FileSystems take it: a remote URI's path percent-decoded once (the
    core's rule, `fs._bucket_path`); local paths as they are. ValueError for a bare `?`."""
    path = plain(path)
    if not _core_fs.is_remote(path):
        return path
    if _core_fs.split_query(path)[1]:  # the core's rule: a `?` in a glob's `[...]` is the path's
        raise ValueError(
            f"{path}: a '?' in a URI starts a query string, which a job's paths do not take (the store's "
            "options are Beam flags such as --s3_endpoint_url); write a '?' of an object name as %3F"
        )
    return urllib.parse.unquote(path)


def _remote_call(path: str, what: str, call: Callable[[], T]) -> T:
    """`call()` (Beam's FileSystems asked `what` about `path`), bounded as every remote call of
    the core (`_bounded.remote_timeout()`: a job's --timeout, else $TFRECORD_BEAM_TIMEOUT, else
    60 s): a store that stalls fails the call naming the object, instead of holding a job's
    launcher in its planning (listing, sizes, index reads). Local paths are called as they are."""
    if not _core_fs.is_remote(plain(path)):
        return call()
    return bounded(plain(path), what, call)


def _listed(found: str) -> str:
    """The path of an object Beam's FileSystems named `found` (its own, decoded spelling): a
    remote one as a URI with its name encoded by the core's one encoder (`fs.listed_uri`)."""
    if not _core_fs.is_remote(found):
        return found
    scheme, rest = found.split("://", 1)
    return _core_fs.listed_uri(scheme, rest)


def set_options(options) -> None:
    """Give Beam's FileSystems the pipeline options (`--s3_endpoint_url`, credentials, ...)
    before anything is read or written outside a pipeline (Beam does it when a pipeline is
    built; a job checks its output location before that)."""
    FileSystems.set_options(options)
    _reuse_s3_clients()


def _reuse_s3_clients() -> None:
    """Make Beam's S3 layer reuse one boto3 client per set of S3 options in a process.

    Beam 2.77 builds a new boto3 session and client for every FileSystems call on s3://
    (about 0.2 s each here, 30 ms for the request itself): a commit of a few shards spent
    most of its time there (a 100-record reshard s3 -> s3: 35 s, 5 s with reuse). boto3
    clients are thread-safe; only the client is shared, not Beam's per-call download state.
    Keyed as the core's object-store clients are (`fs._filesystems`): by process (a client
    made before a fork is not used after it) and by the AWS_* variables a client reads when
    options leave credentials or the endpoint out, besides the options themselves.
    """
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:  # no [aws] extra
        return
    if getattr(boto3_client.Client, "_tfrecord_beam_reuse", False):
        return
    original = boto3_client.Client.__init__
    clients: dict = {}

    def init(self, options):
        # the options Beam's client is built from, as its view_as(S3Options) reads them: from
        # the store every view of the options shares (`get_all_options` parsed the flags of
        # every registered options class, and a view parses the S3 flags again: 25 and 3 ms
        # a call, most of the CPU a small job on S3 spent in this layer)
        if hasattr(options, "view_as"):
            store = getattr(options, "_all_options", None)
            if isinstance(store, dict) and all(name in store for name in _S3_CLIENT_OPTIONS):
                chosen = [store[name] for name in _S3_CLIENT_OPTIONS]
            else:  # the first call (the view adds the S3 options to the store), or a Beam without it
                view = options.view_as(_s3_options())
                chosen = [getattr(view, name, None) for name in _S3_CLIENT_OPTIONS]
        else:
            chosen = [options.get(name) for name in _S3_CLIENT_OPTIONS]
        key = repr((os.getpid(), [os.environ.get(name) for name in _core_fs._CLIENT_ENVIRONMENT], chosen))
        if key not in clients:
            original(self, options)
            clients[key] = self.client
            return
        self.client = clients[key]
        self._download_request, self._download_stream, self._download_pos = None, None, 0

    patched: Any = boto3_client.Client  # a monkeypatch: mypy does not allow assigning a method
    patched.__init__ = init
    patched._tfrecord_beam_reuse = True


# What Beam's boto3 client is built from (apache_beam.io.aws.clients.s3.boto3_client.Client)
_S3_CLIENT_OPTIONS = (
    "s3_access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
    "s3_endpoint_url",
    "s3_disable_ssl",
    "s3_region_name",
    "s3_api_version",
    "s3_verify",
)


def _s3_options():
    from apache_beam.options.pipeline_options import S3Options

    return S3Options


def open_input(path: str) -> BinaryIO:
    """Open a file for binary reading (seekable for local, gs:// and s3:// files).

    The handle's `name` is the path, so the core's readers name it in their errors. A missing
    object is FileNotFoundError on every scheme (Beam's gs:// open raises google-cloud's
    NotFound, which is no OSError: callers asking "is there an index?" took it for a failure).
    """
    beam = _beam(path)

    def opened() -> Any:
        try:
            return FileSystems.open(beam, compression_type=CompressionTypes.UNCOMPRESSED)
        except Exception as exc:
            if getattr(exc, "code", None) == 404:  # google.api_core.exceptions.NotFound
                raise FileNotFoundError(errno.ENOENT, "no such object", os.fspath(path)) from exc
            raise

    handle = _Named(_remote_call(path, "open", opened), os.fspath(path))
    return cast(BinaryIO, handle)  # an io.RawIOBase: the binary file methods, not typing's BinaryIO class


class _Named(io.RawIOBase):
    """A Beam read handle with a `name` (Beam's handles for object stores have none)."""

    def __init__(self, handle: BinaryIO, name: str) -> None:
        super().__init__()
        self._handle, self.name = handle, name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._handle.read(size)

    def readinto(self, buffer) -> int:
        data = self._handle.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def fileno(self) -> int:
        """The descriptor of a local file, so that a header walk (`jobs._walk`) reads headers by
        positional reads instead of every byte; object stores' handles have none
        (io.UnsupportedOperation, as for any file without one)."""
        fileno = getattr(self._handle, "fileno", None)
        if fileno is None:
            raise io.UnsupportedOperation("fileno")
        return fileno()

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


def record_reader(path: str, compression: Optional[str] = "auto", **kwargs):
    """A core `RecordReader` over a file opened through Beam (compression from the name by
    default); the file is closed when its records have been read (or reading stopped)."""
    from ..compression import resolve as resolve_compression
    from ..records import RecordReader

    class _Closing(RecordReader):
        def chunks(self):
            try:
                yield from super().chunks()
            finally:
                self.source.close()

    return _Closing(open_input(path), resolve_compression(plain(path), compression), **kwargs)


def record_writer(path: str, compression: Optional[str] = "auto", index_path=None, **kwargs):
    """A core `RecordWriter` whose data and index are written through Beam."""
    from ..records import RecordWriter

    return RecordWriter(plain(path), compression, index_path=index_path, atomic_output=atomic_output, **kwargs)


def read_bytes(path: str) -> bytes:
    """The whole content of a (small) file."""
    beam = _beam(path)

    def whole() -> bytes:
        with FileSystems.open(beam, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read()

    return _remote_call(path, "read whole", whole)


def write_bytes(path: str, data: bytes) -> None:
    """Write a small file atomically (temporary name, then rename)."""
    with atomic_output(path) as (handle, commit):
        handle.write(data)
        commit()


def rename(source: str, destination: str) -> None:
    """Move one file (a copy + delete on object stores)."""
    FileSystems.rename([_beam(source)], [_beam(destination)])


def mkdirs(path: str) -> None:
    """Make a directory and its parents (nothing to do on object stores); existing is fine."""
    path = _beam(path)
    if not FileSystems.exists(path):
        try:
            FileSystems.mkdirs(path)
        except IOError:
            if not FileSystems.exists(path):
                raise


def split(path: str) -> Tuple[str, str]:
    """(directory, last component) under the path's filesystem."""
    return FileSystems.split(plain(path))


def escape(path: str) -> str:
    """`path` as a glob matching only itself: Beam's match (and its local delete) read
    [ ] * ? as glob characters, also in a directory or name that merely holds them (a remote
    URI is escaped as Beam sees it, decoded, and encoded again: `%3F` stays one `?`)."""
    path = plain(path)
    if _core_fs.is_remote(path):
        return _listed(_glob.escape(_beam(path)))
    return _glob.escape(path)


def check_no_commit_pending(patterns: Union[str, Sequence[str]]) -> None:
    """`manifest.check_no_commit_pending` through Beam's FileSystems (pipeline options apply):
    CommitInProgressError when a pattern reaches into an output whose commit has begun and not
    finished (it holds old and new shards at once)."""
    from .. import manifest

    manifest.check_no_commit_pending(patterns, glob=expand, read_bytes=read_bytes, is_dir=is_dir)


def list_names(directory: str, pattern: str = "*") -> List[str]:
    """Names of the files directly in `directory` (taken literally, whatever characters it
    holds) matching `pattern` ([] when there are none); literal parts of `pattern` go
    through `escape`. Names are as a URI's path writes them (`fs.quote_name`), ready for
    `join`."""
    return sorted(split(m.path)[1] for m in _matched(join(escape(directory), pattern)))


def file_size(path: str) -> int:
    """Size in bytes of one file (a name holding [ ] * ? is that file, not a glob: Beam's
    match reads them as glob characters on object stores too). A missing file is a
    FileNotFoundError naming it, as the core's `fs.file_size`."""
    path = plain(path)
    pattern = _beam(escape(path))
    found = _remote_call(path, "size", lambda: FileSystems.match([pattern], [1])[0].metadata_list)
    if not found:
        raise FileNotFoundError(f"{path}: no such file")
    return found[0].size_in_bytes


def exists(path: str) -> bool:
    """Whether a file (or directory) exists."""
    beam = _beam(path)
    return _remote_call(path, "exists", lambda: FileSystems.exists(beam))


def join(directory: str, name: str) -> str:
    """`directory/name` under the directory's filesystem."""
    return FileSystems.join(plain(directory), name)


def is_dir(path: str) -> bool:
    """Whether `path` names a directory (locally) or a prefix with objects under it (object
    stores, where directories are only names; `s3://b/in/`, with its slash, is always one)."""
    path = plain(path)
    if "://" not in path:
        return os.path.isdir(path)
    if _core_fs.is_glob(path):
        return False
    itself, inside = _beam(escape(path)), _beam(escape(path.rstrip("/")) + "/*")
    if not path.endswith("/") and _remote_call(path, "stat", lambda: FileSystems.match([itself], [1])[0].metadata_list):
        return False  # an object of that name
    return bool(_remote_call(path, "list", lambda: FileSystems.match([inside], [1])[0].metadata_list))


def expand(patterns: Union[str, Sequence[str]]) -> List[str]:
    """Files matching a path, glob or list of them, sorted per pattern, in pattern order (a
    path without glob characters as it is; matches named as `_listed` says)."""
    if isinstance(patterns, str):
        patterns = [patterns]
    out: List[str] = []
    for pattern in patterns:
        pattern = plain(pattern)
        if not _core_fs.is_glob(pattern):
            out.append(pattern)
            continue
        if "://" not in pattern:  # Beam's local matching misses relative globs ("data*.tfrecord")
            pattern = os.path.abspath(pattern)
        out.extend(sorted(m.path for m in _matched(pattern)))
    return out


def match(pattern: str) -> List[FileMetadata]:
    """The FileMetadata (path, size) of the files a path or glob matches (none: empty list),
    each path named as `_listed` says."""
    return _matched(plain(pattern))


def _matched(pattern: str) -> List[FileMetadata]:
    """What Beam's FileSystems match for `pattern`, less object-store directory markers: an
    empty object named `dir/` (pyarrow, S3 consoles and posix-backed S3 servers make them) that
    `s3://b/dir/*` matches is a directory, never a data file. Taken for one, it would shift the
    numbering of the real files (and so a seeded job's random streams) and be listed as an
    input in manifests. Paths are named as `_listed` says (the pattern is decoded once: `_beam`)."""
    beam = _beam(pattern)
    return [
        FileMetadata(_listed(m.path), m.size_in_bytes, m.last_updated_in_seconds)
        for m in _remote_call(pattern, "list", lambda: FileSystems.match([beam])[0].metadata_list)
        if not m.path.endswith("/")
    ]


def delete(paths: Sequence[str]) -> None:
    """Delete exactly these files or directories (recursively); missing ones are an error, as
    in Beam. Beam's local delete matches each path as a glob (`out/*-00000-of-00002.tfrecord`
    would take every output's shard, and misses a name holding [ ]): local paths are deleted
    here by name; object stores delete the names as given (Beam's gs:// delete also matches a
    file's path as a glob: a name holding [ ] is given escaped, else it deleted nothing and a
    commit lock or staging under `out/br[1]/` stayed behind)."""
    remote = [_store_delete_name(_beam(p)) for p in (plain(q) for q in paths) if "://" in p]
    if remote:
        FileSystems.delete(remote)
    for path in (plain(q) for q in paths):
        if "://" not in path:
            _delete_local(path)


def _store_delete_name(beam: str) -> str:
    """The name Beam's delete takes for the object `beam` (Beam's spelling): escaped where it
    matches it as a glob (gs:// files; a directory, with its slash, is deleted as a prefix)."""
    if beam.startswith("gs://") and not beam.endswith("/"):
        return _glob.escape(beam)
    return beam


def _delete_local(path: str) -> None:
    """Delete one local file or directory tree, by its exact name (BeamIOError when missing)."""
    import shutil

    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except OSError as exc:
        raise BeamIOError("Delete operation failed", {path: exc}) from None


def delete_dir(path: str) -> None:
    """Delete a directory and everything under it (a prefix on object stores); missing is fine."""
    path = plain(path)
    if "://" in path:
        path = _beam(path).rstrip("/") + "/"  # Beam's object stores delete a prefix given with a slash
        with contextlib.suppress(Exception), warnings.catch_warnings():
            # Beam 2.70's S3 delete of a prefix (`S3IO.delete_tree`) calls its own deprecated
            # `list_prefix`: every S3 job printed `BeamDeprecationWarning: list_prefix is
            # deprecated` (issue 37 item 7; gone by Beam 2.77). The call is Beam's, not ours:
            # only that warning is silenced, only here (delete_dir runs in the launcher, whose
            # other threads do not warn meanwhile: catch_warnings is process-wide).
            warnings.filterwarnings("ignore", message="list_prefix is deprecated", category=DeprecationWarning)
            FileSystems.delete([path])
        return
    if FileSystems.exists(path):
        _delete_local(path)


# Object stores whose objects appear whole when their upload completes (on close) and never
# before: writing straight to the final name is atomic there, and a rename would be a copy.
_ATOMIC_CREATE = ("s3://", "gs://")


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[Tuple[BinaryIO, "_Commit"]]:
    """Yield (file, commit); `commit()` puts the file in place, whole. Leaving without
    `commit()` leaves nothing at `path`.

    Local and other filesystems: written under a hidden temporary name beside `path`, then
    renamed. Object stores (s3://, gs://): written to `path` directly, since an object only
    appears when its upload completes (an abandoned upload never does).
    """
    final = plain(path)  # this module's spelling (`Commit.final`); decoded where Beam is called
    if final.startswith(_ATOMIC_CREATE):
        handle = _LazyWriter(final)
        commit = _Commit(None, final, handle)
    else:
        head, tail = FileSystems.split(final)
        temp = FileSystems.join(head, _core_fs.temp_basename(tail))
        handle = _LazyWriter(temp)
        commit = _Commit(temp, final, handle)
    try:
        yield cast(BinaryIO, handle), commit  # an io.RawIOBase (see `open_input`)
    finally:
        if not commit.done:
            commit.abort()


class _LazyWriter(io.RawIOBase):
    """A Beam write handle opened at the first write, so that an empty file can be made on
    S3 too (Beam's S3 uploader cannot complete an upload of no parts), and so that an
    abandoned write on an object store can be dropped without completing its upload."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._handle: Optional[BinaryIO] = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if not len(data):
            return 0
        if self._handle is None:
            self._handle = FileSystems.create(
                _beam(self.path), "application/octet-stream", CompressionTypes.UNCOMPRESSED
            )
        self._handle.write(data)
        return len(data)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def close(self) -> None:
        """Finish the file (an empty one if nothing was written)."""
        if self.closed:
            return
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()
        else:
            _create_empty(_beam(self.path))
        super().close()

    def drop(self) -> None:
        """Abandon the write: local files are closed (and deleted by the caller); an object
        store's upload is never completed, so no object appears."""
        if self._handle is not None and not self.path.startswith(_ATOMIC_CREATE):
            with contextlib.suppress(Exception):
                self._handle.close()
        self._handle = None
        super().close()


def _create_empty(path: str) -> None:
    if path.startswith("s3://"):  # one PutObject through Beam's own client and options
        from apache_beam.io.aws import s3io
        from apache_beam.io.aws.clients.s3 import boto3_client

        bucket, key = s3io.parse_s3_path(path)
        boto3_client.Client(FileSystems._pipeline_options or {}).client.put_object(Bucket=bucket, Key=key, Body=b"")
        return
    FileSystems.create(path, "application/octet-stream", CompressionTypes.UNCOMPRESSED).close()


class _Commit:
    """Finishes or abandons one `atomic_output` write (`temp` None: written in place)."""

    def __init__(self, temp: Optional[str], final: str, handle: _LazyWriter) -> None:
        self.temp, self.final, self.handle = temp, final, handle
        self.done = False

    def finish(self) -> None:
        """Close the file (an object written in place appears now); `move` then renames it."""
        self.handle.close()

    def move(self) -> None:
        """Move the finished temporary file into place (nothing to do when written in place)."""
        if self.temp is not None:
            if FileSystems.exists(_beam(self.final)):
                FileSystems.delete([_beam(self.final)])
            FileSystems.rename([_beam(self.temp)], [_beam(self.final)])
        self.done = True

    def __call__(self) -> None:
        self.finish()
        self.move()

    def abort(self) -> None:
        self.handle.drop()
        if self.temp is not None:
            with contextlib.suppress(Exception):
                FileSystems.delete([_beam(self.temp)])
        self.done = True


def create(path: str) -> BinaryIO:
    """Open a new file for writing (an object store's object appears whole on close)."""
    return cast(BinaryIO, _LazyWriter(plain(path)))  # an io.RawIOBase (see `open_input`)


# The SDK workers of a portable runner (Flink, Spark, Dataflow) import this module with the job's
# code but never run `set_options`: without this their every s3:// call built a boto3 client
# (70% of a Flink worker's busy time in a reshard's write stage, loading botocore's JSON models).
_reuse_s3_clients()
