"""Elastic order (opt-in, `elastic=True`): one global record order per epoch, shared out to any
ranks x DataLoader workers, and a checkpoint that is one position in it.

Nothing here reads a file or imports torch: it is arithmetic over record counts, so every
topology can be checked quickly.

**The global order** of an epoch depends on the record counts (the indexes), the seed, the
epoch, `block` and `window` only: never on ranks, workers or batch size.

* One source (a `TFRecordDataset`, or one split of a `MultiTFRecordDataset`): its records are
  numbered file after file. Unshuffled, the order is that numbering. Shuffled, the records are
  cut into blocks of `block` contiguous records (never across files) whose order is permuted
  (seeded by seed, epoch, source, pass), then the positions are permuted inside consecutive
  windows of `window` records (each window seeded on its own, so any window can be found
  without the ones before it). Blocks keep reads local; the window mixes neighbouring blocks,
  as mosaicml-streaming's block shuffle does.
* Several weighted sources: position p of the mixed stream takes the next record of source
  c_p, drawn by weight from the uniform U_p (seeded by seed, epoch and p's chunk of 65,536
  positions) among the sources still holding records. Finite: a source that hands out its
  last record leaves the draw at once, and the stream ends when none is left. Infinite: each
  source starts a new pass (a new order) when it runs out, forever.

**Who delivers what.** From the position P0 an iteration starts at (0, or a resumed
position), the stream is cut into slots of `unit` consecutive positions (the dataset's
`batch_size`, else `slot_size`, default 1 record). Slot t goes to rank t % R as that rank's
item number t // R, which DataLoader worker (t // R) % W produces (the in-order DataLoader
takes workers round-robin). So the process (rank r, worker w) owns the slots
t = j * R * W + w * R + r, j = 0, 1, ...; "in order" means: take the ranks' k-th items in
rank order for k = 0, 1, ...: that concatenation is the global order. Each rank's DataLoader
hands out exactly that rank's share in that order.

**The state.** When every rank has handed out k items (DDP steps in lockstep) the records
consumed are exactly the positions [P0, P0 + k * R * unit): a prefix. So the state of any
rank at a step is P0 + k * R * unit plus, for mixed sources, how many records of each source
lie before it (`taken`, a few ints, kept so a resume need not replay the draws). A process
knows its own count only; a rank's k is the sum over its workers (StatefulDataLoader gathers
them), or the number of batches its plain DataLoader delivered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .sampling import rng

UNIFORM_CHUNK = 65_536  # positions per seeded chunk of the mix's uniforms
_BLOCK_KEY, _WINDOW_KEY, _MIX_KEY = 0x626C6B, 0x77696E, 0x656D6978


class OrderError(ValueError):
    """An elastic order or state cannot be built for this data or topology."""


# ---------------------------------------------------------------------------------------------
# One source's order


class SourceOrder:
    """The order of one source's records in each pass: position -> record number in the source."""

    PASSES = 64  # pass block orders kept (a small source runs through many passes in a chunk)
    WINDOW_VALUES = 1 << 20  # window permutations kept, in positions (8 MiB)

    def __init__(self, counts: Sequence[int], shuffle: bool, block: int, window: int, *keys: int) -> None:
        if block < 1 or window < 0:
            raise OrderError(f"block must be >= 1 and window >= 0, got {block} and {window}")
        self.counts = np.asarray(counts, dtype=np.int64)
        self.file_starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.size = int(self.file_starts[-1])
        self.shuffle, self.block, self.window, self.keys = shuffle, int(block), int(window), keys
        self._passes: Dict[int, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._windows: Dict[Tuple[int, int], np.ndarray] = {}

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_passes"], state["_windows"] = {}, {}  # caches: a spawned worker rebuilds them
        return state

    def _blocks(self, pass_number: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first record, length, end position) of each block in this pass's block order."""
        found = self._passes.pop(pass_number, None)
        if found is None:
            starts = np.concatenate(
                [np.arange(a, a + n, self.block, dtype=np.int64) for a, n in zip(self.file_starts[:-1], self.counts)]
                or [np.zeros(0, np.int64)]
            )
            stops = np.minimum(starts + self.block, np.repeat(self.file_starts[1:], -(-self.counts // self.block)))
            order = rng(*self.keys, pass_number, _BLOCK_KEY).permutation(len(starts))
            starts, lengths = starts[order], (stops - starts)[order]
            found = (starts, lengths, np.cumsum(lengths))
            _bound(self._passes, self.PASSES)
        self._passes[pass_number] = found  # most recently used last
        return found

    def _window(self, pass_number: int, k: int) -> np.ndarray:
        key = (pass_number, k)
        perm = self._windows.pop(key, None)
        if perm is None:
            size = min(self.window, self.size - k * self.window)
            perm = rng(*self.keys, pass_number, _WINDOW_KEY, k).permutation(size)
            _bound(self._windows, max(4, self.WINDOW_VALUES // max(1, self.window)))
        self._windows[key] = perm
        return perm

    def records(self, pass_number: int, positions: np.ndarray) -> np.ndarray:
        """Record numbers (in the source) at `positions` (each in [0, size)) of pass `pass_number`."""
        positions = np.asarray(positions, dtype=np.int64)
        if not self.shuffle:
            return positions.copy()
        q = positions.copy()
        if self.window > 1:
            windows = positions // self.window
            for k in np.unique(windows).tolist():
                at = windows == k
                q[at] = k * self.window + self._window(pass_number, k)[positions[at] - k * self.window]
        starts, lengths, ends = self._blocks(pass_number)
        b = np.searchsorted(ends, q, side="right")
        return starts[b] + q - (ends[b] - lengths[b])

    def locate(self, records: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(file, record number in the file) of record numbers of the source."""
        f = np.searchsorted(self.file_starts, records, side="right") - 1
        return f, records - self.file_starts[f]


def _bound(cache: Dict[Any, Any], size: int) -> None:
    """Drop the least recently used entries of `cache` (oldest first) to make room for one."""
    while len(cache) >= size:
        del cache[next(iter(cache))]


# ---------------------------------------------------------------------------------------------
# The mixed stream


class Mix:
    """Which source each position of the stream draws from, and which of its records.

    `weights` None: one source, position p is its record p. Positions are addressable from
    any (position, taken) pair: `walk` needs no history beyond it.
    """

    def __init__(self, weights: Optional[Sequence[float]], sizes: Sequence[int], infinite: bool, *keys: int) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.infinite = bool(infinite)
        self.keys = keys
        drawn = self.sizes > 0 if self.weights is None else (self.weights > 0) & (self.sizes > 0)
        self.drawn = drawn
        self.total: Optional[int] = (
            int(self.sizes[drawn].sum()) if not self.infinite or not drawn.any() else None
        )  # positions in the stream; None = endless

    def _uniforms(self, start: int, stop: int) -> np.ndarray:
        out = []
        for chunk in range(start // UNIFORM_CHUNK, -(-stop // UNIFORM_CHUNK)):
            values = rng(*self.keys, _MIX_KEY, chunk).random(UNIFORM_CHUNK)
            lo = max(start, chunk * UNIFORM_CHUNK) - chunk * UNIFORM_CHUNK
            hi = min(stop, (chunk + 1) * UNIFORM_CHUNK) - chunk * UNIFORM_CHUNK
            out.append(values[lo:hi])
        return np.concatenate(out) if out else np.zeros(0)

    def walk(self, start: int, taken: Sequence[int], stop: int) -> Tuple[np.ndarray, np.ndarray, List[int]]:
        """(source, index within the source) of positions [start, stop) (cut at the stream's end),
        given `taken` = records of each source before `start`; and `taken` at the end."""
        taken_now = np.asarray(taken, dtype=np.int64).copy()
        if self.total is not None:
            stop = min(stop, self.total)
        n = max(0, stop - start)
        if self.weights is None:
            return np.zeros(n, np.int64), taken_now[0] + np.arange(n, dtype=np.int64), [int(taken_now[0]) + n]
        sources = np.empty(n, np.int64)
        indices = np.empty(n, np.int64)
        uniforms = self._uniforms(start, stop)
        at = 0
        while at < n:
            live = self.drawn & (True if self.infinite else taken_now < self.sizes)
            if not live.any():  # pragma: no cover - `total` ends the stream first
                raise AssertionError("no live source before the end of the stream")
            cumulative = np.cumsum(np.where(live, self.weights, 0.0))
            cumulative /= cumulative[-1]
            choice = np.minimum(np.searchsorted(cumulative, uniforms[at:], side="right"), len(live) - 1)
            live_ids = np.flatnonzero(live)  # float rounding at an edge: the next live source
            nxt = live_ids[np.searchsorted(live_ids, np.arange(len(live)), side="left") % len(live_ids)]
            choice = nxt[choice]
            cut = len(choice)
            if not self.infinite:
                for c in live_ids.tolist():
                    hits = np.flatnonzero(choice == c)
                    room = int(self.sizes[c] - taken_now[c])
                    if len(hits) > room:  # its last record is at hits[room - 1]; then it leaves the draw
                        cut = min(cut, int(hits[room - 1]) + 1)
            choice = choice[:cut]
            counts = np.zeros(len(live), np.int64)
            for c in np.unique(choice).tolist():
                hits = choice == c
                indices[at : at + cut][hits] = taken_now[c] + np.arange(int(hits.sum()), dtype=np.int64)
                counts[c] = hits.sum()
            sources[at : at + cut] = choice
            taken_now += counts
            at += cut
        return sources, indices, taken_now.tolist()


# ---------------------------------------------------------------------------------------------
# Slots: who delivers which positions


@dataclass(frozen=True)
class Lane:
    """One process's share: slots t = j * ranks * workers + worker * ranks + rank."""

    rank: int
    ranks: int
    worker: int
    workers: int
    unit: int

    @property
    def lanes(self) -> int:
        return self.ranks * self.workers

    @property
    def lane(self) -> int:
        return self.worker * self.ranks + self.rank

    def slot(self, j: int) -> int:
        """The global slot number of this process's slot j."""
        return j * self.lanes + self.lane

    def slots_in(self, positions: Optional[int]) -> Optional[int]:
        """How many slots this process owns among `positions` positions (None: endless)."""
        if positions is None:
            return None
        total = -(-positions // self.unit)
        return max(0, -(-(total - self.lane) // self.lanes))


def rank_position(start: int, steps: int, ranks: int, unit: int, total: Optional[int]) -> int:
    """The stream position once every one of `ranks` ranks has handed out `steps` items of
    `unit` positions from `start` (the consumed records are a prefix: see the module doc)."""
    position = start + steps * ranks * unit
    return position if total is None else min(position, total)


def rank_steps(consumed: Mapping[int, int], workers: int, unit: int, lane_slots: Mapping[int, Optional[int]]) -> int:
    """A rank's items handed out (k), from each worker's positions consumed.

    The in-order DataLoader takes workers round-robin, so after k items worker w has handed
    out its slots among the rank's first k: anything else is not a state of one in-order
    DataLoader between batches, and is refused rather than guessed.
    """
    slots = {}
    for w in range(workers):
        n = int(consumed.get(w, 0))
        full, rest = divmod(n, unit)
        if rest:
            if lane_slots.get(w) is None or full + 1 != lane_slots[w]:
                raise OrderError(
                    f"worker {w} stopped inside an item ({rest} of {unit} records): states of an "
                    "elastic dataset are taken between items (batches)"
                )
            full += 1  # the stream's short last slot, finished
        slots[w] = full
    k = sum(slots.values())
    for w in range(workers):
        expected = len(range(w, k, workers))
        if slots[w] != expected:
            raise OrderError(
                f"worker states {dict(sorted(slots.items()))} (items handed out) are not those of one "
                f"in-order DataLoader after {k} items: take the state in the main process "
                "(StatefulDataLoader.state_dict()) between batches"
            )
    return k


def is_loader_state(state: Mapping[str, Any]) -> bool:
    """Whether `state` is a torchdata StatefulDataLoader's `state_dict()` (not a dataset's)."""
    return "_snapshot" in state or ("dataset_state" in state and "_num_yielded" in state)


def loader_worker_states(state: Mapping[str, Any]) -> Tuple[List[Mapping[str, Any]], int]:
    """The dataset state of each worker inside a StatefulDataLoader state (one for
    num_workers=0), and the items the loader handed out after that snapshot."""
    if "_snapshot" not in state:  # num_workers=0: the dataset's state at the last item
        if state.get("dataset_state") is None:
            raise OrderError("StatefulDataLoader state holds no dataset state")
        return [state["dataset_state"]], 0
    workers = state["_snapshot"].get("_worker_snapshots") or {}
    states = []
    for key in sorted(workers, key=lambda k: int(str(k).rsplit("_", 1)[-1])):
        dataset_state = workers[key].get("dataset_state")
        if dataset_state is None:
            raise OrderError(f"StatefulDataLoader state has no dataset state for {key}")
        states.append(dataset_state)
    if not states:
        raise OrderError("StatefulDataLoader state holds no worker states")
    return states, int(state.get("_steps_since_snapshot", 0))
