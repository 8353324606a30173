"""Files as Beam code sees them: every read and write of the Beam side goes through Beam's
`FileSystems`, so pipeline options (`--s3_endpoint_url`, Dataflow's credentials, ...) apply.

The same small surface as the core's `tfrecord_beam.fs` (which uses pyarrow.fs): Beam code
imports this module instead, never both. `file://` URIs become plain local paths.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import BinaryIO, Iterator, List, Sequence, Tuple, Union

from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems

_GLOB_CHARS = "*?["


def plain(path: str) -> str:
    """A path Beam's FileSystems accept: `file://` URIs become plain local paths."""
    path = os.fspath(path)
    return path[len("file://"):] if path.startswith("file://") else path


def open_input(path: str) -> BinaryIO:
    """Open a file for binary reading (seekable for local, gs:// and s3:// files).

    The file's `name` is `path` (Beam's remote readers have none), so that the core's readers,
    which take an open file, name it in their errors.
    """
    handle = FileSystems.open(plain(path), compression_type=CompressionTypes.UNCOMPRESSED)
    if getattr(handle, "name", None) == path:
        return handle
    return _Named(handle, path)  # type: ignore[return-value]


class _Named:
    """An open file under another name: every attribute but `name` is the file's own."""

    def __init__(self, handle: BinaryIO, name: str) -> None:
        self._handle = handle
        self.name = name

    def __getattr__(self, attr: str):
        return getattr(self._handle, attr)

    def __enter__(self) -> "_Named":
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()

    def __iter__(self):
        return iter(self._handle)


def file_size(path: str) -> int:
    """Size in bytes of one file."""
    return FileSystems.match([plain(path)], [1])[0].metadata_list[0].size_in_bytes


def exists(path: str) -> bool:
    """Whether a file (or directory) exists."""
    return FileSystems.exists(plain(path))


def join(directory: str, name: str) -> str:
    """`directory/name` under the directory's filesystem."""
    return FileSystems.join(plain(directory), name)


def expand(patterns: Union[str, Sequence[str]]) -> List[str]:
    """Files matching a path, glob or list of them, sorted per pattern, in pattern order."""
    if isinstance(patterns, str):
        patterns = [patterns]
    out: List[str] = []
    for pattern in patterns:
        pattern = plain(pattern)
        if not any(ch in pattern for ch in _GLOB_CHARS):
            out.append(pattern)
            continue
        out.extend(sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list))
    return out


def match(pattern: str) -> List[FileMetadata]:
    """The FileMetadata (path, size) of the files a path or glob matches (none: empty list)."""
    return list(FileSystems.match([plain(pattern)])[0].metadata_list)


def delete(paths: Sequence[str]) -> None:
    """Delete files or directories (recursively); missing ones are an error, as in Beam."""
    if paths:
        FileSystems.delete([plain(p) for p in paths])


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[Tuple[BinaryIO, "_Commit"]]:
    """Yield (file, commit) writing under a hidden temporary name beside `path`; `commit()`
    renames it into place. Leaving without `commit()` deletes the temporary file."""
    final = plain(path)
    head, tail = FileSystems.split(final)
    temp = FileSystems.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:12]}")
    handle = FileSystems.create(temp, "application/octet-stream", CompressionTypes.UNCOMPRESSED)
    commit = _Commit(temp, final, handle)
    try:
        yield handle, commit
    finally:
        if not commit.done:
            commit.abort()


class _Commit:
    """Finishes or abandons one `atomic_output` write."""

    def __init__(self, temp: str, final: str, handle: BinaryIO) -> None:
        self.temp, self.final, self.handle = temp, final, handle
        self.done = False

    def __call__(self) -> None:
        self.handle.close()
        if FileSystems.exists(self.final):
            FileSystems.delete([self.final])
        FileSystems.rename([self.temp], [self.final])
        self.done = True

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.handle.close()
        with contextlib.suppress(Exception):
            FileSystems.delete([self.temp])
        self.done = True
