"""Shard counts checked against the inputs before a job starts: far more shards than records
only writes empty files (100,000 shards of 750 records ran for many minutes), and the inputs
often say so up front.

What is known before the pipeline: an input's exact record count when a valid index lies
beside it (uncompressed: it ends at the end of the file; block-gzip: its member table matches),
else, for an uncompressed file, at most one record per 16 bytes (the smallest frame); a
compressed file without an index gives no bound (`records_bound` returns None). More shards
than records is allowed (empty shards are valid files) up to `MAX_EMPTY_SHARDS` empty ones,
with a warning up front; more is refused as a usage error naming the numbers.

When that is not enough to decide (no bound, or a size bound above the count asked: records of
more than 16 bytes), `settle_shards` counts the records before the pipeline, stopping as soon as
it has seen as many records as shards asked (so the count costs at most reading that many
records, a part of what the job reads anyway) or after `COUNT_BUDGET_S` seconds; a count that
ends refuses or warns like an index's; one that cannot end (the budget, a corrupt record) warns
once, up front, that the count is unknown and what it means.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple, Optional, Sequence

from tfrecord_beam import jobtools

MAX_EMPTY_SHARDS = 1024
"""Empty shards a job writes at most when the inputs show it before the pipeline (seconds of
work); a count that would leave more empty is refused."""

COUNT_BUDGET_S = 30.0
"""Seconds `settle_shards` counts records before the pipeline at most (then it warns)."""

_FRAME_MIN = 16  # bytes of the smallest frame: 12-byte header + 4-byte footer, empty payload


class RecordsBound(NamedTuple):
    """At most `records` records in the inputs (`exact`: that many, from their indexes)."""

    records: int
    exact: bool
    source: str = "from their indexes"  # how an exact count was known


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
    total_bytes: Optional[int] = None,
) -> None:
    """UsageError when `num_shards` (asked by `flag`) would leave more than MAX_EMPTY_SHARDS
    shards empty whatever the inputs hold; a warning up front when some will (or may) be empty.
    With `total_bytes`, a refusal of `--target_shard_bytes` suggests a byte target."""
    if bound is None or num_shards <= bound.records:
        return
    held = (
        f"{bound.records:,} records ({bound.source})"
        if bound.exact
        else (f"at most {bound.records:,} records (one per 16 bytes of their sizes)")
    )
    empty = num_shards - bound.records
    if empty > MAX_EMPTY_SHARDS:
        most = bound.records + MAX_EMPTY_SHARDS
        if total_bytes is not None and flag.startswith("--target_shard_bytes"):
            ask = f"ask for --target_shard_bytes {max(1, math.ceil(total_bytes / most)):,} or more ({most:,} shards at most)"
        else:
            ask = f"ask for at most {most:,} shards"
        raise jobtools.UsageError(
            f"{flag}: {num_shards:,} shards asked of inputs that hold {held}: at least {empty:,} shards "
            f"would be empty files (at most {MAX_EMPTY_SHARDS:,} are written); {ask}"
        )
    warn(
        f"{job}: warning: {num_shards:,} shards asked of inputs that hold {held}: "
        f"{'' if bound.exact else 'at least '}{empty:,} shards will be empty"
    )


def count_records_upto(
    files: Sequence[str], compression: Optional[str], enough: int, budget_s: float = COUNT_BUDGET_S
) -> "tuple[int, Optional[str]]":
    """(records counted, None) when the inputs were counted to their end or to `enough` records
    (then the count is `enough` or more); (records seen so far, why not) when the budget ran out
    or a file could not be read (a corrupt record, a missing file). Valid indexes are used."""
    from tfrecord_beam.cli.inspection import indexed_count
    from tfrecord_beam.compression import resolve
    from tfrecord_beam.index import iter_frame_arrays

    deadline = time.monotonic() + budget_s
    total = 0
    for path in files:
        try:
            kind = resolve(path, compression)
            count = indexed_count(path, kind)
            if count is not None:
                total += count
            else:
                for frames in iter_frame_arrays(path, kind):
                    total += len(frames)
                    if total >= enough:
                        return total, None
                    if time.monotonic() > deadline:
                        return total, f"counting stopped after {budget_s:g} s"
        except Exception as exc:  # noqa: BLE001 - the job reports the file itself; here it only leaves the count unknown
            return total, f"{path} could not be counted: {type(exc).__name__}: {exc}"
        if total >= enough:
            return total, None
    return total, None


def settle_shards(
    job: str,
    flag: str,
    num_shards: int,
    files: Sequence[str],
    compression: Optional[str],
    file_size: Callable[[str], int],
    warn: Callable[[str], None],
    total_bytes: Optional[int] = None,
    budget_s: float = COUNT_BUDGET_S,
) -> None:
    """Before the pipeline: refuse (UsageError) `num_shards` when more than MAX_EMPTY_SHARDS of
    them would be empty, warn when some would; by the indexes or sizes (`records_bound`), else by
    counting the records (`count_records_upto`); a count that cannot end is warned of, once."""
    if num_shards <= MAX_EMPTY_SHARDS:  # at most that many empty shards: seconds of work, no check
        return
    bound = records_bound(files, compression, file_size)
    if bound is not None and (bound.exact or num_shards - bound.records > MAX_EMPTY_SHARDS):
        check_shards(job, flag, num_shards, bound, warn, total_bytes)
        return
    counted, why = count_records_upto(files, compression, num_shards, budget_s)
    if why is None:
        if counted < num_shards:
            check_shards(job, flag, num_shards, RecordsBound(counted, True, "counted"), warn, total_bytes)
        return
    warn(
        f"{job}: warning: {num_shards:,} shards asked; the inputs' record count is unknown ({why}; "
        f"{counted:,} records counted, no index): if they hold fewer than "
        f"{num_shards:,} records the rest of the shards will be empty files"
    )
