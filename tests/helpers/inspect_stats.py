"""inspect's statistics taken the two ways the tests compare: every record parsed by protobuf
(`stats_of`), and batches of one buffer with offsets as a reader chunk hands them over
(`batched_stats_of`, through `DatasetStats.add_payloads`)."""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from tfrecord_beam.cli.inspection import DatasetStats


def one_buffer(payloads: Sequence[bytes], front: bytes = b"") -> Tuple[bytes, np.ndarray, np.ndarray]:
    """(buffer, offsets, lengths) of the payloads side by side after `front`: one reader chunk."""
    lengths = np.array([len(p) for p in payloads], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) + len(front)
    return front + b"".join(payloads), offsets, lengths


def stats_of(payloads: Sequence[bytes]) -> DatasetStats:
    """The per-record way: every record parsed by protobuf."""
    stats = DatasetStats()
    for payload in payloads:
        stats.add_record(payload)
    return stats


def batched_stats_of(payloads: Sequence[bytes], batch: int) -> DatasetStats:
    """The statistics as `scan_file` takes them: batches of `batch` records in one buffer, which
    starts with other bytes (offsets are not from 0)."""
    stats = DatasetStats()
    for start in range(0, len(payloads), batch):
        stats.add_payloads(*one_buffer(payloads[start : start + batch], front=b"front"))
    return stats
