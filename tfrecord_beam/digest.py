"""An order-independent checksum of records: what a job proves its output with, and what a
manifest records per shard so a reader can check a shard later. One implementation, used by
every job, the manifest and `tfrecord-beam verify`.

A record's key is its payload's masked CRC32C (the CRC its TFRecord footer stores) in the high
32 bits, xor its payload length; the checksum is the sum mod 2**64 of SplitMix64's finaliser
over the keys. Sums do not depend on order, so the digests of parts add up (`add_digests`) to
the digest of the whole, and a lost, added, duplicated or altered record changes it. A copy
that checks the CRCs it moves gets the digest for a few ns per record (`frame_digest`, from
the footers); from payloads it costs one CRC32C each (`payload_digest`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ._mix import _MASK64, add_digests, index_digest, mix64

__all__ = [
    "Digest",
    "mix64",
    "frame_digest",
    "index_digest",
    "payload_digest",
    "add_digests",
    "combine_digests",
    "footers_at",
    "framed_digest",
    "chunk_digest",
    "file_digest",
    "format_checksum",
]

Digest = tuple  # (records, payload bytes, checksum); untyped so Beam pickles, not varints, the 64-bit sums


def frame_digest(crcs: np.ndarray, payload_lengths: np.ndarray) -> Digest:
    """(records, payload bytes, checksum) of records given their masked payload CRC32Cs (the
    frames' footers) and payload lengths."""
    lengths = np.asarray(payload_lengths, dtype=np.int64)
    if not len(lengths):
        return 0, 0, 0
    keys = (np.asarray(crcs, dtype=np.uint64) << np.uint64(32)) ^ lengths.astype(np.uint64)
    # .item(): Python ints whose type Beam cannot infer, so its coders pickle the 64-bit sum
    # (a VarIntCoder, inferred from int(...), refuses sums of 2**63 and more)
    return len(lengths), lengths.sum().item(), mix64(keys).sum(dtype=np.uint64).item()


def payload_digest(payloads: Sequence[bytes]) -> Digest:
    """The digest of payloads (their CRC32Cs computed here)."""
    from . import _engine

    crcs = np.fromiter(map(_engine.masked_crc32c, payloads), dtype=np.uint64, count=len(payloads))
    lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
    return frame_digest(crcs, lengths)


def combine_digests(digests: Iterable[Digest]) -> Digest:
    """Sum of (records, bytes, checksum) triples (a CombineGlobally function)."""
    out: Digest = (0, 0, 0)
    for d in digests:
        out = add_digests(out, d)
    return out


def footers_at(buffer, positions: np.ndarray) -> np.ndarray:
    """Little-endian uint32 values at the given byte positions of `buffer` (frames' footers:
    their masked payload CRCs)."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    pos = np.asarray(positions, dtype=np.int64)
    out = raw[pos].astype(np.uint32)
    for k in (1, 2, 3):
        out |= raw[pos + k].astype(np.uint32) << np.uint32(8 * k)
    return out


def framed_digest(framed, frame_sizes) -> Digest:
    """The digest of whole frames back to back in `framed` (their footers read, not recomputed)."""
    sizes = np.asarray(frame_sizes, dtype=np.int64)
    if not len(sizes):
        return 0, 0, 0
    return frame_digest(footers_at(framed, np.cumsum(sizes) - 4), sizes - 16)


def chunk_digest(chunk) -> Digest:
    """The digest of a `RecordChunk`'s records, from the footers in its buffer (CRCs checked by
    the reader that made it)."""
    if not len(chunk):
        return 0, 0, 0
    at = np.asarray(chunk.payload_offsets, dtype=np.int64) + np.asarray(chunk.payload_lengths, dtype=np.int64)
    return frame_digest(footers_at(chunk.buffer, at), chunk.payload_lengths)


def file_digest(path: str, compression=None) -> Digest:
    """The digest of every record of one TFRecord file (CRCs checked while reading)."""
    from ._reader import RecordReader

    out: Digest = (0, 0, 0)
    for chunk in RecordReader(path, compression).chunks():
        out = add_digests(out, chunk_digest(chunk))
    return out


def format_checksum(checksum: int) -> str:
    """The checksum as 16 hex digits (how manifests and summaries print it)."""
    return f"{checksum & _MASK64:016x}"
