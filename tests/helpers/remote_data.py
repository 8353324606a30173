"""Files on the test S3 server for the remote-reading tests (`tests/remote/test_remote_*.py`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from tfrecord_beam._tfindex import default_index_path
from tfrecord_beam.example import encode_example
from tfrecord_beam.records import RecordWriter

from .s3server import S3Server


def record(uid: int, size: int) -> bytes:
    """An Example with a unique `id` and about `size` bytes of padding."""
    return encode_example({"id": ([uid], "int"), "pad": (bytes([uid % 251]) * size, "byte")})


def write_local(path: Path, first: int, count: int, size: int, compression: Optional[str] = None) -> List[int]:
    """A TFRecord file of `count` records (ids first..), with its index; the ids."""
    ids = list(range(first, first + count))
    with RecordWriter(str(path), compression, index_path=True) as writer:
        for uid in ids:
            writer.write(record(uid, size))
    return ids


@dataclass
class Remote:
    """One test's bucket, reached directly or through a `FaultProxy`."""

    server: S3Server
    bucket: str
    client: object

    def upload(self, local: Path, key: str) -> None:
        """Upload a file and its index (when it has one) under `key` and `index_key(key)`."""
        self.client.upload_file(str(local), self.bucket, key)  # type: ignore[attr-defined]
        index = Path(default_index_path(str(local)))
        if index.exists():
            self.client.upload_file(str(index), self.bucket, index_key(key))  # type: ignore[attr-defined]

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)  # type: ignore[attr-defined]

    def uri(self, key: str, via: Optional[str] = None) -> str:
        """The core's URI of `key`: straight to the server, or through a proxy's host:port."""
        query = self.server.query
        if via is not None:
            query = query.replace(self.server.host_port, via)
        return f"s3://{self.bucket}/{key}{query}"


@contextlib.contextmanager
def reader_keys(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The server's keys in the environment (how the core's readers take them)."""
    with monkeypatch.context() as patch:
        for key, value in server.reader_environment().items():
            patch.setenv(key, value)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield


def index_key(key: str) -> str:
    """The index's key beside data key `key` (the core's naming rule)."""
    return default_index_path(key)


def ids_of(batches) -> List[int]:
    """The ids of the records in a remote dataset's batches (the "id" feature of `record`)."""
    return [int(i) for batch in batches for i in batch["id"][:, 0]]


@contextlib.contextmanager
def iterating(loader) -> Iterator:
    """`iter(loader)`, its workers stopped on the way out. An error raised through a
    DataLoader's iterator leaves it in a reference cycle; a later garbage collection (in
    whatever test it falls) frees it after multiprocessing's finalizers closed its queues, so
    its shutdown could not tell the workers to stop and waited 5 s on each of them."""
    batches = iter(loader)
    try:
        yield batches
    finally:
        batches._shutdown_workers()
