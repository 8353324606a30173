"""Plans for jobs that move records without shuffling them: what each output shard copies.

A job first *surveys* its inputs (`survey`: record count, stream size, the order-independent
digest and a few checkpoints per file, from a header walk), then cuts the concatenated inputs
into contiguous ranges, one per output shard (`plan_contiguous`). A range is a list of
`Piece`s (records [lo, hi) of one file, or the records whose header starts in bytes [lo, hi));
each names the checkpoint (a known record boundary) its copy starts reading from, so a plan
is a handful of numbers per shard however large the input is.

With `--skip_corrupt` the survey walks with `_walk.walk_frames_skipping` (both CRCs, corrupt
records reported and stepped over): its counts, checkpoints and digest are of the intact
records only, so the plan leaves the corrupt ones out, and each piece's copy reads with the
same skipping reader, which steps over the same damage from any checkpoint.

Block-gzip inputs (`blockgzip`: whole records per gzip member, a member table in the index)
are surveyed in parts, a range of members each (`survey_parts`, `survey(members=...)`, joined
by `merge_parts`), so workers share one big file and each member is inflated once; the survey
keeps every member's first record and offsets, and each piece starts at the member holding
its first record and stops inflating at the end of the member holding its last one. (With
`--skip_corrupt` such a file is walked whole by the skipping reader, as other compressed files.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, List, Optional, Sequence, Tuple

import numpy as np

from .._engine._common import VERIFY_LENGTHS
from ..blockgzip import MemberTable
from ..errors import IndexMismatchError
from ._walk import FrameBlock, add_digests, frame_digest, walk_frames

CHECKPOINT_BYTES = 16 << 20  # a checkpoint at least every 16 MiB ...
CHECKPOINT_RECORDS = 1 << 16  # ... and every 65,536 records
SURVEY_PART_BYTES = 16 << 20  # block-gzip files are surveyed in member ranges of about this many bytes on disk


@dataclass
class FileSurvey:
    """What a header walk learnt about one input file."""

    path: str
    compression: Optional[str]
    file_number: int  # position in the job's input list (orders the concatenation)
    records: int  # intact records (all of them, unless skip_corrupt stepped over some)
    stream_bytes: int  # size of the (uncompressed) record stream, up to the end of its last intact record
    digest: Tuple[int, int, int]  # (records, payload bytes, checksum): see _walk.frame_digest
    checkpoints: List[Tuple[int, int]] = field(default_factory=list)  # (record number, offset)
    group: int = 0  # which source (mix) the file belongs to
    # walked by `_walk.walk_frames_skipping` (--skip_corrupt): record numbers count intact
    # records, and the copies must read with the same skipping reader to find the same ones
    skip_corrupt: bool = False
    # block-gzip: int64 rows (first record, uncompressed offset, compressed offset) of each
    # gzip member, then the end (records, stream bytes, file bytes); None for other files
    members: Optional[np.ndarray] = None


class Surveyor:
    """Builds one file's FileSurvey from its FrameBlocks, added in order (so a caller can do
    other work between blocks, e.g. emit the dead letters of a skipping walk as they come)."""

    def __init__(
        self, path: str, compression: Optional[str], file_number: int, group: int = 0, skip_corrupt: bool = False
    ) -> None:
        self._survey = FileSurvey(path, compression, file_number, 0, 0, (0, 0, 0), [(0, 0)], group, skip_corrupt)

    def add(self, block: FrameBlock) -> None:
        if not len(block):
            return
        s = self._survey
        s.digest = add_digests(s.digest, frame_digest(block.footers, block.sizes))
        _add_checkpoints(s.checkpoints, block)
        s.records = block.first_record + len(block)
        s.stream_bytes = block.end

    def result(self) -> FileSurvey:
        return self._survey


def survey(
    raw: BinaryIO,
    path: str,
    compression: Optional[str],
    file_number: int,
    group: int = 0,
    progress=None,
    members: Optional[MemberTable] = None,
) -> FileSurvey:
    """Walk one file's headers (length CRCs checked) into a FileSurvey.

    `progress(records, bytes)` is called after each block walked (for progress lines).
    `members`: a window (`MemberTable.window`) of a block-gzip file's member table: only
    those members are inflated and walked, into a part survey for `merge_parts`.
    """
    if members is not None:
        return _survey_members(raw, path, file_number, group, progress, members)
    surveyor = Surveyor(path, compression, file_number, group)
    for block in walk_frames(raw, compression, path, verify=VERIFY_LENGTHS):
        surveyor.add(block)
        if progress is not None:
            progress(len(block), int(block.sizes.sum()))
    return surveyor.result()


def survey_parts(table: MemberTable, part_bytes: Optional[int] = None) -> List[Tuple[int, int]]:
    """Member ranges [first, stop) of about `part_bytes` (default SURVEY_PART_BYTES) bytes on
    disk each (one at least), the parts a block-gzip file is surveyed in."""
    part_bytes = SURVEY_PART_BYTES if part_bytes is None else part_bytes
    n = len(table)
    if n == 0:
        return [(0, 0)]
    cuts = np.arange(part_bytes, table.file_size, max(int(part_bytes), 1))
    bounds = np.unique(np.concatenate([[0], np.searchsorted(table.compressed[:-1], cuts, side="left"), [n]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _survey_members(
    raw: BinaryIO, path: str, file_number: int, group: int, progress, members: MemberTable
) -> FileSurvey:
    """The part survey of some members of a block-gzip file (record numbers count from the
    part's first record): walked from the first member's start, inflating those members only.
    Each member must start at a record the walk finds (else the table is not this file's)."""
    starts = members.uncompressed[:-1]
    first = np.zeros(len(starts), np.int64)  # each member's first record, from the part's start
    found = 0
    digest = (0, 0, 0)
    records, end = 0, members.data_size if not len(starts) else int(starts[0])
    for block in walk_frames(
        raw,
        "gzip",
        path,
        verify=VERIFY_LENGTHS,
        start_offset=int(members.uncompressed[0]),
        first_record=None,
        end_offset=members.data_size,
        members=members,
    ):
        digest = add_digests(digest, frame_digest(block.footers, block.sizes))
        inside = int(np.searchsorted(starts, block.end, side="left"))
        at = np.minimum(np.searchsorted(block.offsets, starts[found:inside]), len(block) - 1)
        _member_boundaries(path, starts[found:inside], block.offsets[at])
        first[found:inside] = block.first_record + at
        found = inside
        records, end = block.first_record + len(block), block.end
        if progress is not None:
            progress(len(block), int(block.sizes.sum()))
    _member_boundaries(path, starts[found:], np.full(len(starts) - found, end, np.int64))
    first[found:] = records
    if end != members.data_size:
        raise IndexMismatchError(
            path,
            end,
            None,
            f"the records end at uncompressed offset {end} but the gzip "
            f"member table says {members.data_size} (stale index)",
        )
    rows = np.stack([np.append(first, records), members.uncompressed, members.compressed], axis=1)
    return FileSurvey(path, "gzip", file_number, records, end, digest, [], group, members=rows.astype(np.int64))


def _member_boundaries(path: str, starts: np.ndarray, found: np.ndarray) -> None:
    """Raise IndexMismatchError unless each member start is the record boundary found for it."""
    bad = np.flatnonzero(starts != found)
    if len(bad):
        raise IndexMismatchError(
            path,
            int(starts[bad[0]]),
            None,
            f"a gzip member of the member table starts at uncompressed offset "
            f"{int(starts[bad[0]])}, which is not a record boundary (stale index)",
        )


def merge_parts(parts: Sequence[FileSurvey]) -> FileSurvey:
    """One file's survey from its part surveys (any order); a lone whole-file survey as it is."""
    if len(parts) == 1 and parts[0].members is None:
        return parts[0]
    parts = sorted(parts, key=lambda s: int(_member_rows(s)[0, 1]))
    tables = [_member_rows(part) for part in parts]
    if int(tables[0][0, 1]) != 0:  # a lost first part would renumber every record after it
        raise ValueError(f"{parts[0].path}: the first survey part starts at uncompressed offset {int(tables[0][0, 1])}")
    rows, base, digest = [], 0, (0, 0, 0)
    for k, (part, members) in enumerate(zip(parts, tables)):
        if k and int(members[0, 1]) != int(tables[k - 1][-1, 1]):
            raise ValueError(f"{part.path}: survey parts do not join at uncompressed offset {int(members[0, 1])}")
        shifted = members + np.array([base, 0, 0], np.int64)
        rows.append(shifted[:-1])
        base += part.records
        digest = add_digests(digest, part.digest)
    rows.append((tables[-1][-1:] + np.array([base - parts[-1].records, 0, 0], np.int64)))
    table = np.concatenate(rows).astype(np.int64)
    first = parts[0]
    return FileSurvey(
        first.path,
        first.compression,
        first.file_number,
        base,
        int(table[-1, 1]),
        digest,
        _member_checkpoints(table),
        first.group,
        members=table,
    )


def _member_rows(part: FileSurvey) -> np.ndarray:
    """A part survey's member rows (`_survey_members` gives every part of a split file some)."""
    if part.members is None:
        raise ValueError(f"{part.path}: a whole-file survey cannot be merged with other parts")
    return part.members


def _member_checkpoints(rows: np.ndarray) -> List[Tuple[int, int]]:
    """Checkpoints at member starts, as often as `_add_checkpoints` puts them (or the first
    member start after), for planners that walk checkpoints (mix)."""
    points = [(0, 0)]
    total = int(rows[-1, 0])
    for record, offset in rows[1:-1, :2].tolist():
        last_record, last_offset = points[-1]
        if (
            record > last_record
            and record < total
            and (record - last_record >= CHECKPOINT_RECORDS or offset - last_offset >= CHECKPOINT_BYTES)
        ):
            points.append((record, offset))
    return points


def _add_checkpoints(checkpoints: List[Tuple[int, int]], block) -> None:
    """Append a checkpoint wherever CHECKPOINT_RECORDS records or CHECKPOINT_BYTES bytes have
    passed since the last one (a few per block at most)."""
    n = len(block)
    while True:
        last_record, last_offset = checkpoints[-1]
        by_records = last_record + CHECKPOINT_RECORDS - block.first_record
        by_bytes = int(np.searchsorted(block.offsets, last_offset + CHECKPOINT_BYTES, side="left"))
        j = max(min(by_records, by_bytes), 0)
        if j >= n or block.first_record + j <= last_record:
            return
        checkpoints.append((block.first_record + j, int(block.offsets[j])))


@dataclass
class Piece:
    """Part of one input file that one shard copies.

    unit "records": records number lo .. hi-1; unit "bytes": the records whose header starts
    in [lo, hi) of the uncompressed stream. Reading starts at the checkpoint (from_record,
    from_offset) at or before the first of them (block-gzip: the start of the member holding
    it, found in the member table of the file's index when copied). `to_offset`, when known,
    is a record boundary at or after the piece's last record where reading may stop
    (block-gzip: the end of the member holding it, so nothing after is inflated).
    """

    path: str
    compression: Optional[str]
    file_number: int
    unit: str
    lo: int
    hi: int
    from_record: int
    from_offset: int
    group: int = 0
    skip_corrupt: bool = False  # read like its survey: stepping over the damage it skipped
    to_offset: Optional[int] = None


@dataclass
class ShardPlan:
    """What output shard `shard` holds, in order."""

    shard: int
    pieces: List[Piece]
    records: int  # planned records (exact for unit "records", an estimate for "bytes")
    stream_bytes: int  # planned bytes of frames (an estimate for unit "records")


def checkpoint_before(checkpoints: Sequence[Tuple[int, int]], value: int, unit: str) -> Tuple[int, int]:
    """The last checkpoint at or before record `value` (unit "records") or offset `value`."""
    key = 0 if unit == "records" else 1
    best = checkpoints[0]
    for point in checkpoints:
        if point[key] <= value:
            best = point
        else:
            break
    return best


def plan_contiguous(surveys: Sequence[FileSurvey], num_shards: int, balance: str = "records") -> List[ShardPlan]:
    """Cut the inputs, concatenated in file order, into `num_shards` contiguous ranges.

    balance "records": shard s gets records n*s//k .. n*(s+1)//k - 1 of the n in all (counts
    differ by at most one); "bytes": the records whose frames start in the s-th k-th of the
    concatenated streams' bytes. Every shard gets a plan, empty ones included.
    """
    if balance not in ("records", "bytes"):
        raise ValueError(f"balance must be 'records' or 'bytes', not {balance!r}")
    files = sorted(surveys, key=lambda s: s.file_number)
    unit = balance
    sizes = [f.records if unit == "records" else f.stream_bytes for f in files]
    total = sum(sizes)
    plans = []
    for shard in range(num_shards):
        lo, hi = total * shard // num_shards, total * (shard + 1) // num_shards
        pieces, base = [], 0
        records = stream = 0
        for f, size in zip(files, sizes):
            a, b = max(lo - base, 0), min(hi - base, size)
            base += size
            if a >= b:
                continue
            rec, off, stop = _piece_bounds(f, a, b, unit)
            pieces.append(
                Piece(
                    f.path, f.compression, f.file_number, unit, a, b, rec, off, f.group, f.skip_corrupt, to_offset=stop
                )
            )
            share = (b - a) / size
            records += (b - a) if unit == "records" else round(f.records * share)
            stream += (b - a) if unit == "bytes" else round(f.stream_bytes * share)
        plans.append(ShardPlan(shard, pieces, records, stream))
    return plans


def _piece_bounds(f: FileSurvey, a: int, b: int, unit: str) -> Tuple[int, int, Optional[int]]:
    """(from_record, from_offset, to_offset) of the piece [a, b) of file `f`: a checkpoint,
    or for block-gzip files the start of the member holding its first record and the end of
    the member holding its last (a piece is at least one record or byte: b > a)."""
    if f.members is None:
        rec, off = checkpoint_before(f.checkpoints, a, unit)
        return rec, off, None
    starts = f.members[:-1, 0 if unit == "records" else 1]
    first = int(np.searchsorted(starts, a, side="right")) - 1
    last = int(np.searchsorted(starts, b - 1, side="right")) - 1
    return int(f.members[first, 0]), int(f.members[first, 1]), int(f.members[last + 1, 1])


def total_digest(surveys: Sequence[FileSurvey]) -> Tuple[int, int, int]:
    """The digest of every surveyed record."""
    out = (0, 0, 0)
    for s in surveys:
        out = add_digests(out, s.digest)
    return out
