"""Framed TFRecord bytes as arrays: where each frame lies in its buffer, gathering frames in a
new order, and a digest of them read from the frames' own CRC footers.

Jobs that move records without looking inside them (the external shuffle) work on frames:
a frame is copied as it is (its CRCs were checked when it was read), never re-framed, and
the proof that the output holds exactly the input is computed from the 4-byte payload CRC
footers (vectorised, no per-record Python call), not by hashing every payload again.
"""

from __future__ import annotations

from typing import Iterator, List, NamedTuple, Sequence, Tuple, Union

import numpy as np

from tfrecord_beam import _engine
from tfrecord_beam import digest as _digest
from tfrecord_beam.errors import CorruptRecordError

HEADER = 12  # uint64 length + masked CRC32C of the length
FOOTER = 4  # masked CRC32C of the payload
OVERHEAD = HEADER + FOOTER

Digest = Tuple[int, int, int]  # (records, payload bytes, checksum mod 2**64)


mix64 = _digest.mix64  # one SplitMix64 finaliser for keys and digests


class Frames(NamedTuple):
    """The complete frames of one buffer: `starts` (frame offsets) and `lengths` (payload sizes)."""

    buffer: Union[bytes, bytearray, memoryview]  # holds the frames
    starts: np.ndarray  # int64, where each frame (its header) starts in `buffer`
    lengths: np.ndarray  # int64 payload lengths (a frame is length + 16 bytes)

    @property
    def sizes(self) -> np.ndarray:
        return self.lengths + OVERHEAD

    def crcs(self) -> np.ndarray:
        """Each frame's stored masked payload CRC32C (uint32), read straight from the buffer."""
        if not len(self.starts):
            return np.zeros(0, np.uint32)
        raw = np.frombuffer(self.buffer, dtype=np.uint8)
        at = (self.starts + HEADER + self.lengths)[:, None] + np.arange(FOOTER)
        return raw[at].view("<u4").reshape(-1)


def frames_of_chunk(chunk) -> Frames:
    """The frames of a `records.RecordChunk` (its buffer holds them whole)."""
    return Frames(chunk.buffer, np.asarray(chunk.payload_offsets, np.int64) - HEADER,
                  np.asarray(chunk.payload_lengths, np.int64))


def scan(buffer, path: str, offset: int = 0, verify: bool = True) -> Frames:
    """The frames filling `buffer` exactly (CRCs checked when `verify`); CorruptRecordError
    naming `path` and the byte offset (`offset` is where `buffer` starts in that file)
    when the buffer is not a whole number of sound frames."""
    payload_offsets, lengths, consumed, status = _engine.scan_frames(buffer, verify)
    if consumed != len(buffer):
        raise CorruptRecordError(path, offset + consumed, None,
                                 f"temporary shuffle data is damaged (scan status {status})")
    return Frames(buffer, np.asarray(payload_offsets, np.int64) - HEADER, np.asarray(lengths, np.int64))


def digest(crcs: np.ndarray, lengths: np.ndarray) -> Digest:
    """(records, bytes, checksum) of frames from their payload CRCs and lengths (`tfrecord_beam.digest`)."""
    return _digest.frame_digest(crcs, lengths)


add = _digest.add_digests


def gather(frame_sets: Sequence[Frames], which: np.ndarray, index: np.ndarray,
           block_bytes: int = 4 << 20) -> Iterator[Tuple[bytes, np.ndarray]]:
    """The frames `index[k]` of `frame_sets[which[k]]`, in that order, as (bytes, frame sizes)
    blocks of about `block_bytes` each (so writing them needs no second copy of everything)."""
    views = [memoryview(f.buffer) for f in frame_sets]
    starts = [f.starts for f in frame_sets]
    sizes = [f.sizes for f in frame_sets]
    if not len(index):
        return
    all_sizes = np.empty(len(index), np.int64)
    all_starts = np.empty(len(index), np.int64)
    for k in range(len(frame_sets)):
        mask = which == k
        all_sizes[mask] = sizes[k][index[mask]]
        all_starts[mask] = starts[k][index[mask]]
    ends = np.cumsum(all_sizes)
    cuts = np.searchsorted(ends, np.arange(block_bytes, int(ends[-1]), block_bytes), side="left") + 1
    for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(index)]]).tolist()):
        if lo >= hi:
            continue
        w = which[lo:hi].tolist()
        s = all_starts[lo:hi].tolist()
        n = all_sizes[lo:hi].tolist()
        pieces: List[memoryview] = [views[k][a : a + b] for k, a, b in zip(w, s, n)]
        yield b"".join(pieces), all_sizes[lo:hi]
