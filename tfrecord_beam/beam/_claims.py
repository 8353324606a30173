"""Claiming a range tracker's records in runs instead of one `try_claim` per record.

A tracker call per record (a lock and four checks in Beam's OffsetRangeTracker) cost more than
reading a small record. `claim` takes a run of record offsets with one `try_claim` and one
`set_current_position`, with the same guarantee: every record yielded is in the range, and
none is yielded by two readers however splits race the reader. `ClaimGroups` picks the runs.
"""

from __future__ import annotations

from typing import Iterator, Tuple

import numpy as np

#: Records claimed at once grow 1, 2, 4, ... up to this many.
MAX_CLAIM_GROUP = 1024


class ClaimGroups:
    """The runs of a chunk's records claimed at once: the whole chunk for batched reads (one
    element), else runs of 1, 2, 4, ... up to MAX_CLAIM_GROUP records per reader, so that
    a reader that has just started can still be split right after its first record."""

    def __init__(self, whole_chunks: bool) -> None:
        self._whole = whole_chunks
        self._size = 1

    def of(self, count: int) -> Iterator[Tuple[int, int]]:
        lo = 0
        while lo < count:
            hi = count if self._whole else min(count, lo + self._size)
            self._size = min(self._size * 2, MAX_CLAIM_GROUP)
            yield lo, hi
            lo = hi


def claim(tracker, starts: np.ndarray, lo: int, hi: int) -> int:
    """Claim the records starting at `starts[lo:hi]` (ascending); return how many, from `lo`,
    are ours. Fewer than `hi - lo` means the range ends there: read no further.

    One `try_claim` for the run's first record (a split point, as Beam's sources claim every
    record), then `set_current_position` at the last record below the stop position: after
    it no split can fall at or before that record. A split that raced us (it moved the stop
    between our reading it and the position update) is seen by reading the stop again, and
    the records at or past it are left to the residual range. Trackers without
    `set_current_position` get one `try_claim` per record.
    """
    if not tracker.try_claim(int(starts[lo])):
        return 0
    if hi - lo == 1:
        return 1
    run = starts[lo:hi]
    last = int(np.searchsorted(run, tracker.stop_position(), side="left")) - 1
    if last <= 0:
        return 1
    try:
        tracker.set_current_position(int(run[last]))
    except NotImplementedError:
        for got in range(1, hi - lo):
            if not tracker.try_claim(int(run[got])):
                return got
        return hi - lo
    return int(np.searchsorted(run[: last + 1], tracker.stop_position(), side="left"))
