"""Test data shared by the tests/beam/ files: small TFRecord files with awkward payloads."""

from __future__ import annotations

import os
from typing import List

from tfrecord_beam import _engine, example, records
from tfrecord_beam.index import create_index


def plain_payloads(n: int = 30) -> List[bytes]:
    """Payloads of varied sizes, including empty ones."""
    return [bytes([i % 251]) * ((i * 37) % 300) for i in range(n)]


def nested_payloads() -> List[bytes]:
    """Payloads that look like records: a framed record, a framed pair, a whole small file.

    The last payload is itself one framed record, which tests the resync at the file's tail.
    """
    inner = [b"alpha", b"", b"gamma" * 20]
    return [
        b"plain-0",
        _engine.frame_records([b"hidden"]),
        b"plain-1" * 9,
        _engine.frame_records(inner),
        bytes(40),  # zeros: a length of 0 with a wrong length CRC
        _engine.frame_records([b"x" * 200, b"y" * 3]),
        b"plain-2",
        _engine.frame_records(inner * 3),
        b"plain-3" * 30,
        _engine.frame_records([b"tail-hidden" * 4]),
    ]


def example_payloads(n: int = 50) -> List[bytes]:
    """Serialized Examples shaped like the D2 benchmark data (label, index, tokens, name)."""
    return [
        example.encode_example(
            {
                "label": (float(i % 7) / 2, "float"),
                "index": (i, "int"),
                "tokens": ([(i * 13 + k) % 1000 for k in range(20)], "int"),
                "name": (f"name-{i:06d}".encode(), "byte"),
            }
        )
        for i in range(n)
    ]


def write_file(path: os.PathLike, payloads: List[bytes], index: bool = False) -> str:
    """Write payloads to `path` (compression from the suffix), with a .tfindex when asked."""
    path = os.fspath(path)
    records.write_records(path, payloads)
    if index:
        create_index(path)
    return path
