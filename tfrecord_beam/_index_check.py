"""Checking an index against the data while reading by it: a stale index is an index problem.

`index.load_index` / `check_index` catch an index that is malformed or ends elsewhere than the
data; an index of the same byte size written for other data (30 records of 20 bytes over a
file now holding 20 of 30) passes both. Readers that start at indexed offsets therefore check
what they meet against the index, cheaply:

* `check_entry`: the header at a range's first indexed record must carry a valid length CRC
  and the length the index gives. A damaged header there is told apart from a stale index by
  the nearest readable headers of the neighbouring entries: if they agree with the index, the
  data is damaged (a CorruptRecordError follows from the reader); if one disagrees, the index
  is stale.
* `check_records`: the record offsets a reader found by following the chain are the index's
  (a vectorised compare per chunk).
* `check_next`: where the records read continue after a range must be the index's next entry.

Each raises IndexMismatchError naming the index file, the record and the offset, so a stale
index is never reported as corrupt data and never makes a reader skip records.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Callable, Optional

import numpy as np

from ._engine._common import FRAME_OVERHEAD, HEADER_SIZE
from ._resync import header_length
from .errors import IndexMismatchError

_NEIGHBOURS = 8  # entries looked at on each side of a damaged header before giving up

Numbered = Callable[[int], int]  # entry of `starts` -> the file's record number (for errors)


def _same(i: int) -> int:
    return i


def frame_size(starts: np.ndarray, number: int, total: int) -> int:
    """The frame length the index gives record `number` (its offsets are contiguous)."""
    following = int(starts[number + 1]) if number + 1 < len(starts) else int(total)
    return following - int(starts[number])


def _header_at(raw: BinaryIO, offset: int) -> Optional[int]:
    raw.seek(offset)
    return header_length(raw.read(HEADER_SIZE))


def check_entry(
    raw: BinaryIO,
    starts: np.ndarray,
    number: int,
    total: int,
    index_path=None,
    data_path=None,
    numbered: Numbered = _same,
) -> None:
    """Raise IndexMismatchError unless the data around indexed record `number` agrees with
    the index (module docstring). Returns quietly for a damaged header the index agrees with
    around it, so that the reader reports that damage as corrupt data."""
    if not 0 <= number < len(starts):
        return
    length = _header_at(raw, int(starts[number]))
    if length is not None:
        _agrees(starts, number, length, total, index_path, data_path, numbered)
        return
    for step in range(1, _NEIGHBOURS + 1):
        for other in (number - step, number + step):
            if 0 <= other < len(starts):
                length = _header_at(raw, int(starts[other]))
                if length is not None:
                    _agrees(starts, other, length, total, index_path, data_path, numbered, damaged=number)
                    return


def _agrees(starts, number: int, length: int, total: int, index_path, data_path, numbered, damaged=None) -> None:
    expected = frame_size(starts, number, total)
    if FRAME_OVERHEAD + length == expected:
        return
    offset = int(starts[number])
    why = "" if damaged is None else f" (checked because record {numbered(damaged)}'s header is unreadable)"
    raise IndexMismatchError(
        None if index_path is None else os.fspath(index_path),
        offset,
        numbered(number),
        f"the index says record {numbered(number)} at byte offset {offset} is {expected} bytes long, but the "
        f"header there in {data_path} says {FRAME_OVERHEAD + length}{why}: the index does not "
        "describe this data (stale index; rebuild it)",
    )


def check_records(
    starts: np.ndarray,
    first_number: int,
    record_offsets: np.ndarray,
    index_path=None,
    data_path=None,
    numbered: Numbered = _same,
) -> None:
    """Raise IndexMismatchError unless `record_offsets` (records read in a row from record
    `first_number` on) are the index's offsets for those records."""
    n = len(record_offsets)
    expected = starts[first_number : first_number + n]
    if len(expected) == n and np.array_equal(expected, record_offsets):
        return
    bad = next(i for i in range(n) if i >= len(expected) or expected[i] != record_offsets[i])
    said = f"at byte offset {int(expected[bad])}" if bad < len(expected) else "nowhere (it lists fewer records)"
    raise IndexMismatchError(
        None if index_path is None else os.fspath(index_path),
        int(record_offsets[bad]),
        numbered(first_number + bad),
        f"{data_path} has record {numbered(first_number + bad)} at byte offset {int(record_offsets[bad])} but the "
        f"index puts it {said}: the index does not describe this data (stale index; rebuild it)",
    )


def check_next(
    starts: np.ndarray,
    number: int,
    next_start: int,
    total: int,
    index_path=None,
    data_path=None,
    numbered: Numbered = _same,
) -> None:
    """Raise IndexMismatchError unless the records read continue where the index's record
    `number` starts (`total` when `number` is past the last)."""
    expected = int(starts[number]) if number < len(starts) else int(total)
    if expected == next_start:
        return
    raise IndexMismatchError(
        None if index_path is None else os.fspath(index_path),
        expected,
        numbered(number),
        f"the index puts record {numbered(number)} at byte offset {expected}, but the records of {data_path} "
        f"read up to it continue at {next_start}: the index does not describe this data (stale "
        "index; rebuild it)",
    )
