"""An order-independent checksum of record payloads: what a job proves its output with, and
what a manifest records per shard so a reader can check a shard later.

`payload_digest(payloads)` is (records, payload bytes, checksum); the checksum is the sum mod
2**64 of a 64-bit fingerprint per payload (its CRC32C in the high half, its zlib CRC-32 in the
low half). Sums do not depend on order, so the digests of parts add up (`add_digests`) to the
digest of the whole, in any order, and a lost, added or altered record changes it. Both CRCs
run in C over each payload (about 2x faster than a per-record BLAKE2b).
"""

from __future__ import annotations

import zlib
from typing import Iterable, Sequence, Tuple

import google_crc32c

Digest = Tuple[int, int, int]
_MASK64 = (1 << 64) - 1


def payload_digest(payloads: Sequence[bytes]) -> Digest:
    """(records, bytes, checksum) of payloads (see the module docstring)."""
    total_c = sum(map(google_crc32c.value, payloads))
    total_z = sum(map(zlib.crc32, payloads))
    return len(payloads), sum(map(len, payloads)), ((total_c << 32) + total_z) & _MASK64


def add_digests(a: Digest, b: Digest) -> Digest:
    """The digest of two disjoint sets of payloads together."""
    return a[0] + b[0], a[1] + b[1], (a[2] + b[2]) & _MASK64


def combine_digests(digests: Iterable[Digest]) -> Digest:
    """Sum of (records, bytes, checksum) triples (a CombineGlobally function)."""
    out: Digest = (0, 0, 0)
    for d in digests:
        out = add_digests(out, d)
    return out


def file_digest(path: str, compression=None) -> Digest:
    """The digest of every payload of one TFRecord file (CRCs checked while reading)."""
    from .records import RecordReader

    out: Digest = (0, 0, 0)
    for chunk in RecordReader(path, compression).chunks():
        out = add_digests(out, payload_digest(chunk.payloads()))
    return out


def format_checksum(checksum: int) -> str:
    """The checksum as 16 hex digits (how manifests and summaries print it)."""
    return f"{checksum & _MASK64:016x}"
