"""Shard counts checked against the inputs before a job starts: far more shards than records
only writes empty files (100,000 shards of 750 records ran for many minutes), and the inputs
often say so up front.

What is known before the pipeline: an input's exact record count when a valid index lies
beside it (uncompressed: it ends at the end of the file; block-gzip: its member table matches),
else, for an uncompressed file, at most one record per 16 bytes (the smallest frame); a
compressed file without an index gives no bound (`records_bound` returns None). More shards
than records is allowed (empty shards are valid files) up to `MAX_EMPTY_SHARDS` empty ones,
with a warning up front; more is refused as a usage error naming the numbers.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

from tfrecord_beam import jobtools

MAX_EMPTY_SHARDS = 1024
"""Empty shards a job writes at most when the inputs show it before the pipeline (seconds of
work); a count that would leave more empty is refused."""

_FRAME_MIN = 16  # bytes of the smallest frame: 12-byte header + 4-byte footer, empty payload


class RecordsBound(NamedTuple):
    """At most `records` records in the inputs (`exact`: that many, from their indexes)."""

    records: int
    exact: bool


def records_bound(
    files: Sequence[str], compression: Optional[str], file_size: Callable[[str], int]
) -> Optional[RecordsBound]:
    """The most records the inputs can hold, known without reading them (see the module doc);
    None when a compressed input has no index (nothing bounds it)."""
    from tfrecord_beam.cli.inspection import indexed_count
    from tfrecord_beam.compression import resolve

    total, exact = 0, True
    for path in files:
        kind = resolve(path, compression)
        count = indexed_count(path, kind)
        if count is not None:
            total += count
        elif kind is None:
            total += file_size(path) // _FRAME_MIN
            exact = False
        else:
            return None
    return RecordsBound(total, exact)


def check_shards(
    job: str,
    flag: str,
    num_shards: int,
    bound: Optional[RecordsBound],
    warn: Callable[[str], None],
) -> None:
    """UsageError when `num_shards` (asked by `flag`) would leave more than MAX_EMPTY_SHARDS
    shards empty whatever the inputs hold; a warning up front when some will (or may) be empty."""
    if bound is None or num_shards <= bound.records:
        return
    held = (
        f"{bound.records:,} records (from their indexes)"
        if bound.exact
        else (f"at most {bound.records:,} records (one per 16 bytes of their sizes)")
    )
    empty = num_shards - bound.records
    if empty > MAX_EMPTY_SHARDS:
        raise jobtools.UsageError(
            f"{flag}: {num_shards:,} shards asked of inputs that hold {held}: at least {empty:,} shards "
            f"would be empty files (at most {MAX_EMPTY_SHARDS:,} are written); ask for at most "
            f"{bound.records + MAX_EMPTY_SHARDS:,} shards"
        )
    warn(
        f"{job}: warning: {num_shards:,} shards asked of inputs that hold {held}: "
        f"{'' if bound.exact else 'at least '}{empty:,} shards will be empty"
    )
