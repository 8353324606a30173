"""The proof of what a shard writer wrote: its digest taken from the frames it handed to the
file (`RecordWriter.digest`, read from the frames' own footers as they are written, so it costs
a footer gather per write, not a second read), and its file's size on disk checked against the
bytes the writer wrote once it is closed. A job compares the sum of its shards' written digests
with its input's; a shard that lost, doubled or cut off records fails the job before its commit,
named here.
"""

from __future__ import annotations

from typing import Callable, Tuple


class ChecksumMismatch(Exception):
    """The output does not hold exactly the records the job meant to write."""


def describe(digest: Tuple[int, int, int]) -> str:
    return f"{digest[0]} records / {digest[1]} bytes / checksum {digest[2]:016x}"


def check_written(
    path: str, writer, file_size: Callable[[str], int], meant: Tuple[int, int, int]
) -> Tuple[Tuple[int, int, int], int]:
    """After `writer.close()`: raise ChecksumMismatch naming the shard unless the writer wrote
    exactly `meant` (the digest of what was handed to it) and its file on disk has the size the
    writer wrote; returns (the written digest, that size) for the shard's result."""
    written: Tuple[int, int, int] = tuple(writer.digest)
    if tuple(meant) != written:
        raise ChecksumMismatch(f"{path}: meant to write {describe(meant)}, its writer wrote {describe(written)}")
    size = file_size(path)
    if size != writer.file_bytes:
        raise ChecksumMismatch(
            f"{path}: {size} bytes on disk, its writer wrote {writer.file_bytes} ({describe(written)})"
        )
    return written, size
