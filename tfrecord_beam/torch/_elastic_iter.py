"""One process's share of the elastic order (`elastic`): plan a run of its slots, read their
records through the index, hand them out slot by slot in order.

Reading goes through `FileSet.read` of record ranges only (the reading layer's own call),
one range per run of wanted records of a file, gaps of up to `GAP_BYTES` read through; the
remote ranges of a chunk share one `ReadAheadPlan`, so a block several runs fall in is fetched
once per chunk (a range of its own each fetched it again: 4-10 requests per block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import fs
from .._readahead import ReadAheadPlan
from ._files import FileSet
from ._stream import Item
from .elastic import Lane, Mix, OrderError, SourceOrder
from .sampling import RECORDS, Piece

GAP_BYTES = 1 << 20  # unwanted bytes between two wanted records of a file that are read through
# (the reader reads 1 MiB a range at least: a second range that near costs more than the gap)
CHUNK_RECORDS = 4096  # a process's records planned and read together
WALK = 1 << 20  # positions walked at once when only the counts are wanted


class Plan:
    """The epoch's order over every source: each source's pass orders and the mix."""

    def __init__(
        self,
        sources: Sequence[FileSet],
        weights: Optional[Sequence[float]],
        infinite: bool,
        shuffle: bool,
        block: int,
        window: int,
        seed: int,
        epoch: int,
    ) -> None:
        self.orders = []
        for s, files in enumerate(sources):
            counts = []
            for path, info in zip(files.paths, files.infos()):
                if info.num_records is None or info.compressed:
                    raise OrderError(unordered(path, info.compressed))
                counts.append(info.num_records)
            self.orders.append(SourceOrder(counts, shuffle, block, window, seed, epoch, s))
        self.mix = Mix(weights, [o.size for o in self.orders], infinite, seed, epoch)
        self.window = window if shuffle else 0

    @property
    def total(self) -> Optional[int]:
        """Positions in the epoch's stream (None: endless)."""
        return self.mix.total

    def advance(self, start: int, taken: Sequence[int], stop: int) -> List[int]:
        """Records of each source before position `stop`, given those before `start`."""
        taken = list(taken)
        while start < stop:
            end = min(stop, start + WALK)
            taken = self.mix.walk(start, taken, end)[2]
            start = end
        return taken


def unordered(path: str, compressed: bool) -> str:
    """Why a file cannot take part in an elastic order."""
    if compressed:
        return (
            f"{path}: elastic=True needs every record reachable through an index, but this file is "
            "compressed without a gzip member table (only block-gzip files with their index can be "
            "entered mid-file); rewrite it with RecordWriter(..., index_path=True), or use elastic=False"
        )
    return (
        f"{path}: elastic=True needs an index (record counts) for every file, and this one has none; "
        "build it (python -m tfrecord_beam index, or create_index) and pass index_path, or use elastic=False"
    )


@dataclass
class Slot:
    """Slot `j` of a process: `size` positions, their records in order (None: corrupt, skipped)."""

    j: int
    size: int
    items: List[Optional[Item]]


def slots(
    plan: Plan, sources: Sequence[FileSet], lane: Lane, start: int, taken: Sequence[int], first: int
) -> Iterator[Slot]:
    """This process's slots from its slot `first` on, for a stream resumed at `start` with
    `taken` records of each source before it.

    An iteration of the order is a new pass over every source's files (`FileSet.new_pass`,
    the per-shard path's own check): each remote file it reads is checked again to be the
    object listed, so an object replaced between epochs is refused, never read from its
    predecessor's cached or kept blocks."""
    for files in sources:
        files.new_pass()
    total = plan.total
    count = lane.slots_in(None if total is None else total - start)
    # A chunk spans at least one shuffle window of positions (its blocks are then read once,
    # not once per chunk that touches the window): own records held <= max(CHUNK_RECORDS,
    # window / lanes), the shuffle buffer's own bound.
    wanted = max(CHUNK_RECORDS, -(-plan.window // lane.lanes) + lane.unit)
    most = max(1, wanted // lane.unit)
    per_chunk = 1  # doubling up to `most`: the first item comes quickly, and a short run plans little
    j, g, taken = first, start, list(taken)
    while count is None or j < count:
        per_chunk = min(most, per_chunk * 2)
        last = j + per_chunk
        if per_chunk == most and plan.window and plan.mix.weights is None:
            last = max(last, _window_end(lane, start, last, plan.window))
        last = last if count is None else min(count, last)
        lo = start + lane.slot(j) * lane.unit
        hi = start + (lane.slot(last - 1) + 1) * lane.unit
        if total is not None:
            hi = min(hi, total)
        taken = plan.advance(g, taken, lo)
        sources_at, indices, after = plan.mix.walk(lo, taken, hi)
        g, taken = hi, after
        bounds = []
        for k in range(j, last):
            a = start + lane.slot(k) * lane.unit - lo
            bounds.append((k, a, min(a + lane.unit, hi - lo)))
        own = np.concatenate([np.arange(a, b) for _, a, b in bounds])
        items = _read(plan, sources, sources_at[own], indices[own])
        at = 0
        for k, a, b in bounds:
            yield Slot(k, b - a, items[at : at + b - a])
            at += b - a
        j = last


def _window_end(lane: Lane, start: int, last: int, window: int) -> int:
    """The own slot count that takes a chunk ending before own slot `last` to the end of the
    shuffle window it ends in (one source: stream position = position in the source), so a
    window's blocks are read by one chunk, not two."""
    end = start + (lane.slot(last - 1) + 1) * lane.unit
    boundary = -(-end // window) * window
    final = (boundary - 1 - start) // lane.unit  # the slot holding the window's last position
    return (final - lane.lane) // lane.lanes + 1


def _read(plan: Plan, sources: Sequence[FileSet], source_at: np.ndarray, index_at: np.ndarray) -> List[Optional[Item]]:
    """The records at stream positions given as (source, index within it), in that order."""
    files_at = np.zeros(len(source_at), np.int64)
    numbers_at = np.zeros(len(source_at), np.int64)
    for s in np.unique(source_at).tolist():
        order = plan.orders[s]
        mine = source_at == s
        passes, q = np.divmod(index_at[mine], order.size)
        records = np.empty(len(q), np.int64)
        for p in np.unique(passes).tolist():
            here = passes == p
            records[here] = order.records(p, q[here])
        files_at[mine], numbers_at[mine] = order.locate(records)
    out: List[Optional[Item]] = [None] * len(source_at)  # None stays where a corrupt record was skipped
    groups = source_at * (int(files_at.max()) + 1 if len(files_at) else 1) + files_at
    work = []
    for g in np.unique(groups).tolist():
        at = np.flatnonzero(groups == g)
        s, f = int(source_at[at[0]]), int(files_at[at[0]])
        work.append((at, s, f, _runs(sources[s], f, np.unique(numbers_at[at]))))
    # one read-ahead over every range of the chunk, in the order they are read: a block that
    # ranges of one file share (runs a gap apart) is fetched once, not once per range
    ahead = plan_ranges([(sources[s], piece) for _, s, _, runs in work for piece, _ in runs])
    slot = 0
    try:
        for at, s, _, runs in work:
            numbers, items = _read_runs(sources[s], runs, ahead, slot)
            slot += len(runs)
            where = np.minimum(np.searchsorted(numbers, numbers_at[at]), max(0, len(numbers) - 1))
            found = numbers[where] == numbers_at[at] if len(numbers) else np.zeros(len(at), bool)
            for position, k in zip(at[found].tolist(), where[found].tolist()):
                out[position] = items[k]
    finally:
        if ahead is not None:
            ahead.close()
    return out


def plan_ranges(pieces: Sequence[Tuple[FileSet, Piece]]) -> Optional[ReadAheadPlan]:
    """One `ReadAheadPlan` over the pieces of several file sets, read in that order (None when
    none is remote)."""
    remote = [files for files, piece in pieces if fs.is_remote(files.paths[piece.file])]
    if not remote:
        return None
    ranges = [
        (files.source(piece.file), *files.span(piece)) if fs.is_remote(files.paths[piece.file]) else (None, 0, 0)
        for files, piece in pieces
    ]
    return ReadAheadPlan(ranges, remote[0].remote.readahead_requests)


def _runs(files: FileSet, f: int, wanted: np.ndarray) -> List[Tuple[Piece, np.ndarray]]:
    """Record ranges of file `f` covering `wanted` (sorted, unique), one per run of them (gaps
    of up to `GAP_BYTES` read through): (the range, the records of the run wanted in it)."""
    index = files.known_index(f)
    gaps = index[wanted[1:], 0] - (index[wanted[:-1], 0] + index[wanted[:-1], 1])  # bytes between them
    breaks = np.flatnonzero(gaps > GAP_BYTES) + 1
    return [(Piece(f, RECORDS, int(run[0]), int(run[-1]) + 1), run) for run in np.split(wanted, breaks)]


def _read_runs(
    files: FileSet, runs: List[Tuple[Piece, np.ndarray]], ahead: Optional[ReadAheadPlan], slot: int
) -> Tuple[np.ndarray, List[Item]]:
    """The wanted records of `runs` (ranges `slot`, `slot + 1`, ... of `ahead`): (their
    numbers as read, in order; the records)."""
    numbers: List[np.ndarray] = []
    items: List[Item] = []
    for k, (piece, run) in enumerate(runs):
        for block in files.read(piece, None if ahead is None else (ahead, slot + k)):
            assert block.numbers is not None  # an indexed read knows its record numbers
            part = block.part(np.isin(block.numbers, run))
            assert part.numbers is not None
            numbers.append(part.numbers)
            items.extend(part.items())
    return (np.concatenate(numbers) if numbers else np.zeros(0, np.int64)), items
