"""One process's share of the elastic order (`elastic`): plan a run of its slots, read their
records through the index, hand them out slot by slot in order.

Reading goes through `FileSet.read` of record ranges only (the reading layer's own call),
one range per run of wanted records of a file, gaps of up to `GAP` records read through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ._files import FileSet
from ._stream import Item
from .elastic import Lane, Mix, OrderError, SourceOrder
from .sampling import RECORDS, Piece

GAP = 16  # unwanted records between two wanted ones of a file that are read through
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
    `taken` records of each source before it."""
    total = plan.total
    count = lane.slots_in(None if total is None else total - start)
    most = max(1, CHUNK_RECORDS // lane.unit)
    per_chunk = 1  # doubling up to `most`: the first item comes quickly, and a short run plans little
    j, g, taken = first, start, list(taken)
    while count is None or j < count:
        per_chunk = min(most, per_chunk * 2)
        last = j + per_chunk if count is None else min(count, j + per_chunk)
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
    found: Dict[Tuple[int, int, int], Item] = {}
    for s, f in sorted({(int(s), int(f)) for s, f in zip(source_at.tolist(), files_at.tolist())}):
        wanted = np.unique(numbers_at[(source_at == s) & (files_at == f)])
        for number, item in _read_file(sources[s], f, wanted):
            found[s, f, number] = item
    return [found.get(key) for key in zip(source_at.tolist(), files_at.tolist(), numbers_at.tolist())]


def _read_file(files: FileSet, f: int, wanted: np.ndarray) -> Iterator[Tuple[int, Item]]:
    """Records `wanted` (sorted, unique) of file `f`: one index range read per run of them."""
    breaks = np.flatnonzero(np.diff(wanted) > GAP + 1) + 1
    for run in np.split(wanted, breaks):
        for block in files.read(Piece(f, RECORDS, int(run[0]), int(run[-1]) + 1)):
            assert block.numbers is not None  # an indexed read knows its record numbers
            keep = np.isin(block.numbers, run)
            part = block.part(keep)
            for item in part.items():
                assert item[3] is not None
                yield item[3], item
