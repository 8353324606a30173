"""Opening paths: local files, `file://`, and remote URIs (gs://, s3://, hdfs://) via pyarrow.fs.

Writes go through `atomic_output`, which writes under a temporary name beside the target and
renames on success, so an interrupted write never leaves a file that looks complete.
"""

from __future__ import annotations

import contextlib
import glob as _glob
import io
import os
import uuid
from typing import BinaryIO, Iterator, List, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]


def _split_uri(path: str):
    """Return (pyarrow filesystem, path inside it) for a remote URI, or (None, local path)."""
    if path.startswith("file://"):
        return None, path[len("file://") :]
    if "://" not in path:
        return None, path
    return _from_uri(path)


def _from_uri(uri: str):
    """pyarrow's (filesystem, path) for a URI (one place, so tests can stand in a local one)."""
    from pyarrow import fs as pafs

    return pafs.FileSystem.from_uri(uri)


def is_remote(path: PathLike) -> bool:
    """True for URIs other than file:// (these go through pyarrow.fs)."""
    path = os.fspath(path)
    return "://" in path and not path.startswith("file://")


def open_input(path: PathLike) -> BinaryIO:
    """Open a path or URI for binary reading."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        return io.open(inner, "rb")
    return filesystem.open_input_file(inner)


def file_size(path: PathLike) -> int:
    """Size in bytes of a path or URI."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        return os.path.getsize(inner)
    return filesystem.get_file_info(inner).size


def exists(path: PathLike) -> bool:
    """Whether a path or URI names an existing file."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        return os.path.isfile(inner)
    from pyarrow import fs as pafs

    return filesystem.get_file_info(inner).type == pafs.FileType.File


def expand(patterns: Union[PathLike, List[PathLike]]) -> List[str]:
    """Expand a path, glob or list of them into a sorted list of files (remote globs too)."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    out: List[str] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        if not any(ch in pattern for ch in "*?["):
            out.append(pattern)
            continue
        filesystem, inner = _split_uri(pattern)
        if filesystem is None:
            prefix = "file://" if pattern.startswith("file://") else ""
            out.extend(prefix + p for p in sorted(_glob.glob(inner)) if os.path.isfile(p))
        else:
            out.extend(_remote_glob(pattern, filesystem, inner))
    return out


def is_dir(path: PathLike) -> bool:
    """Whether a path or URI names an existing directory (a prefix with objects under it)."""
    filesystem, inner = _split_uri(os.fspath(path))
    if filesystem is None:
        return os.path.isdir(inner)
    from pyarrow import fs as pafs

    return filesystem.get_file_info(inner.rstrip("/")).type == pafs.FileType.Directory


def data_files(target: PathLike) -> List[str]:
    """TFRecord files named by a directory (its `*.tfrecord*`, local or remote), a path or a
    glob; indexes and dot-files excluded."""
    target = os.fspath(target)
    if is_dir(target):
        base, _, query = target.partition("?")
        pattern = base.rstrip("/") + "/*.tfrecord*"
        candidates = expand(pattern + ("?" + query if query else ""))
    else:
        candidates = expand(target)
    return [p for p in candidates if not p.endswith(".tfindex") and not os.path.basename(p).startswith(".")]


def _remote_glob(pattern: str, filesystem, inner: str) -> List[str]:
    import fnmatch

    from pyarrow import fs as pafs

    base = inner.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0].rsplit("/", 1)[0]
    scheme = pattern.split("://", 1)[0]
    infos = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    wanted = inner.split("/")  # as a local glob: `*` stays within one path segment

    def matches(path: str) -> bool:
        parts = path.split("/")
        return len(parts) == len(wanted) and all(map(fnmatch.fnmatchcase, parts, wanted))

    return sorted(f"{scheme}://{i.path}" for i in infos if i.type == pafs.FileType.File and matches(i.path))


def delete(paths: List[str]) -> None:
    """Delete files (local paths or URIs)."""
    for path in paths:
        filesystem, inner = _split_uri(os.fspath(path))
        if filesystem is None:
            os.remove(inner)
        else:
            filesystem.delete_file(inner)


def _temp_name(inner: str) -> str:
    head, tail = os.path.split(inner)
    return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:12]}")


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
        with contextlib.suppress(Exception):
            self.handle.close()
        with contextlib.suppress(Exception):
            if self.filesystem is None:
                os.remove(self.temp)
            else:
                self.filesystem.delete_file(self.temp)
        self.done = True
