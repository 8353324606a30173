"""Framed TFRecord bytes as arrays: where each frame lies in its buffer, and a digest of them
read from the frames' own CRC footers.

Jobs that move records without looking inside them (the external shuffle) work on frames:
a frame is copied as it is (its CRCs were checked when it was read), never re-framed, and
the proof that the output holds exactly the input is computed from the 4-byte payload CRC
footers (vectorised, no per-record Python call), not by hashing every payload again.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union

import numpy as np

from tfrecord_beam import digest as _digest

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
    return Frames(
        chunk.buffer, np.asarray(chunk.payload_offsets, np.int64) - HEADER, np.asarray(chunk.payload_lengths, np.int64)
    )


def digest(crcs: np.ndarray, lengths: np.ndarray) -> Digest:
    """(records, bytes, checksum) of frames from their payload CRCs and lengths (`tfrecord_beam.digest`)."""
    return _digest.frame_digest(crcs, lengths)


add = _digest.add_digests
