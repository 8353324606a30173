"""The proof of what a writer wrote: its digest taken from what it handed to the file
(`RecordWriter.digest`, read from the frames' own footers as they are written, so it costs a
footer gather per write, not a second read; `IndexStream.digest`, from the index entries it
formats), and its file's size on disk checked against the bytes the writer wrote once it is
closed. A job compares the sum of its shards' written digests with its input's; build_index
compares each index's with the records its walk read. A shard or index that lost, doubled or
cut off records fails the job before its commit, named here.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple


class ChecksumMismatch(Exception):
    """The output does not hold exactly the records the job meant to write."""


def describe(digest: Tuple[int, int, int]) -> str:
    return f"{digest[0]} records / {digest[1]} bytes / checksum {digest[2]:016x}"


def check_meant(path: str, writer, meant: Tuple[int, int, int]) -> Tuple[int, int, int]:
    """Raise ChecksumMismatch naming `path` unless `writer.digest` (what it handed to its file)
    is `meant` (the digest of what it was given); returns that digest. Checked on its own
    before a file is finished where finishing makes it visible (an index on an object store)."""
    written: Tuple[int, int, int] = tuple(writer.digest)
    if tuple(meant) != written:
        raise ChecksumMismatch(f"{path}: meant to write {describe(meant)}, its writer wrote {describe(written)}")
    return written


def check_written(
    path: str,
    writer,
    file_size: Callable[[str], int],
    meant: Tuple[int, int, int],
    *,
    on_disk: Optional[str] = None,
) -> Tuple[Tuple[int, int, int], int]:
    """After `writer.close()`: raise ChecksumMismatch naming `path` unless the writer wrote
    exactly `meant` (the digest of what was handed to it) and its file on disk (`on_disk`, when
    it is not `path`: a temporary name) has the size the writer wrote; returns (the written
    digest, that size) for the shard's result. `writer` is a `RecordWriter` or an
    `IndexStream` (both keep `digest` and `file_bytes`)."""
    written = check_meant(path, writer, meant)
    size = file_size(on_disk or path)
    if size != writer.file_bytes:
        raise ChecksumMismatch(
            f"{path}: {size} bytes on disk, its writer wrote {writer.file_bytes} ({describe(written)})"
        )
    return written, size
