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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, List, Optional, Sequence, Tuple

import numpy as np

from ._engine._common import VERIFY_LENGTHS
from ._walk import FrameBlock, add_digests, frame_digest, walk_frames

CHECKPOINT_BYTES = 16 << 20  # a checkpoint at least every 16 MiB ...
CHECKPOINT_RECORDS = 1 << 16  # ... and every 65,536 records


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


class Surveyor:
    """Builds one file's FileSurvey from its FrameBlocks, added in order (so a caller can do
    other work between blocks, e.g. emit the dead letters of a skipping walk as they come)."""

    def __init__(self, path: str, compression: Optional[str], file_number: int, group: int = 0,
                 skip_corrupt: bool = False) -> None:
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


def survey(raw: BinaryIO, path: str, compression: Optional[str], file_number: int, group: int = 0,
           progress=None) -> FileSurvey:
    """Walk one file's headers (length CRCs checked) into a FileSurvey.

    `progress(records, bytes)` is called after each block walked (for progress lines).
    """
    surveyor = Surveyor(path, compression, file_number, group)
    for block in walk_frames(raw, compression, path, verify=VERIFY_LENGTHS):
        surveyor.add(block)
        if progress is not None:
            progress(len(block), int(block.sizes.sum()))
    return surveyor.result()


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
    from_offset) at or before the first of them.
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
            rec, off = checkpoint_before(f.checkpoints, a, unit)
            pieces.append(Piece(f.path, f.compression, f.file_number, unit, a, b, rec, off, f.group, f.skip_corrupt))
            share = (b - a) / size
            records += (b - a) if unit == "records" else round(f.records * share)
            stream += (b - a) if unit == "bytes" else round(f.stream_bytes * share)
        plans.append(ShardPlan(shard, pieces, records, stream))
    return plans


def total_digest(surveys: Sequence[FileSurvey]) -> Tuple[int, int, int]:
    """The digest of every surveyed record."""
    out = (0, 0, 0)
    for s in surveys:
        out = add_digests(out, s.digest)
    return out
