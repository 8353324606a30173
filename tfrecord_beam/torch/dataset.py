"""PyTorch datasets over TFRecord files: a drop-in for `tfrecord.torch.dataset`, done right.

* Every record is read exactly once per epoch across DDP ranks x DataLoader workers, with or
  without index files (see `tfrecord_beam.torch.sampling` for the plan).
* Shuffling (file order + a shuffle buffer) is seeded by (seed, epoch, rank, worker) through
  private generators; the global numpy / torch / random RNGs are never touched.
* `state_dict()` / `load_state_dict()` resume a run mid-epoch without repeating or skipping a
  record (directly with `num_workers=0`, or through torchdata's `StatefulDataLoader`).
* `batch_size=` yields ready batches of tensors decoded in one go (layout in `_collate`).
* `elastic=True` (opt-in): one global record order per epoch, from the record counts and the
  seed alone, shared out round-robin to ranks x workers; a state is a position in it and
  resumes on any ranks x workers and batch size (`elastic`, `_elastic_iter`).
"""

from __future__ import annotations

import collections.abc
import copy
import itertools
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch.utils.data

from .._ranges import RemoteOptions
from .._read_options import ReadOptions
from ..example import Description
from ..iterator_utils import shuffle_iterator
from . import _elastic_iter, _identity, _ring, elastic, sampling
from ._collate import Names, collate_batch, decode_record, decode_records
from ._files import CorruptCounter, FileSet, Paths, RemoteCounts
from ._identity import STATE_VERSION, StateIdentity
from ._stream import AnyBlock, Cursor, Item, ItemBlock, PassBlock, reblock, skip_blocks
from ._worker import settle_worker
from .indexed import IndexedTFRecordDataset

__all__ = ["TFRecordDataset", "MultiTFRecordDataset", "IndexedTFRecordDataset"]

RECORD_RUN = 512  # records decoded together on the per-record path
_MIX_KEY = 0x6D6978  # separates the mixer's seed from the sources' seeds


READAHEAD_BYTES = RemoteOptions.readahead_bytes
READAHEAD_REQUESTS = RemoteOptions.readahead_requests
REQUEST_TIMEOUT = RemoteOptions.timeout
REQUEST_ATTEMPTS = RemoteOptions.attempts


def remote_options(
    cache_dir: Optional[str],
    cache_limit: Optional[int],
    readahead_bytes: int,
    readahead_requests: int,
    request_timeout: float,
    request_attempts: int,
) -> RemoteOptions:
    """The datasets' keywords for remote files as `RemoteOptions` (validated here, in the
    constructor, not later in a worker)."""
    return RemoteOptions(
        readahead_bytes=int(readahead_bytes),
        readahead_requests=int(readahead_requests),
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        cache_limit=None if cache_limit is None else int(cache_limit),
        timeout=float(request_timeout),
        attempts=int(request_attempts),
    )


class _ShardedIterable(torch.utils.data.IterableDataset):
    """What both iterable datasets share: sharding, shuffling, batching, checkpointing.

    Subclasses give `sources` (FileSets), `weights` (None for one unmixed source) and
    `infinite` (each source restarts, with a new file order, when it runs out).
    """

    def __init__(
        self,
        sources: List[FileSet],
        options: ReadOptions,
        *,
        weights: Optional[List[float]] = None,
        infinite: bool = False,
        shuffle_queue_size: Optional[int] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        seed: Optional[int] = None,
        batch_size: Optional[int] = None,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        elastic: bool = False,
        shuffle_block: int = 1024,
        slot_size: Optional[int] = None,
    ) -> None:
        super().__init__()
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if shuffle_queue_size is not None and int(shuffle_queue_size) < 0:
            raise ValueError(f"shuffle_queue_size must be >= 0 or None, got {shuffle_queue_size}")
        self.options = options
        self.sources = sources
        for files in sources:  # load indexes (and find stale ones) once, here: workers inherit them
            files.infos()
        self.weights = weights
        self.infinite = infinite
        self.shuffle_queue_size = shuffle_queue_size
        self.transform = transform
        self.seed = 0 if seed is None else int(seed)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = sampling.resolve_topology(rank, world_size)
        self.epoch = 0
        self.elastic = bool(elastic)
        self.shuffle_block = int(shuffle_block)
        if self.shuffle_block < 1:
            raise ValueError(f"shuffle_block must be >= 1, got {shuffle_block}")
        if slot_size is not None and (int(slot_size) < 1 or batch_size is not None):
            raise ValueError(
                f"slot_size must be >= 1, and only without batch_size (the slot is the batch), got {slot_size}"
            )
        self.slot_size = None if slot_size is None else int(slot_size)
        if self.elastic:
            self._plan()  # every file indexed and seekable, or a clear error now rather than in a worker
        self._description_checked = False
        self._pending: Optional[Dict[str, Any]] = None  # a loaded state, applied by the next __iter__
        self._progress: Optional[Dict[str, Any]] = None  # the running iteration's position
        self._iter_key: Tuple[Any, ...] = self._order_key()  # the order attributes it started with
        self._mixer: Optional[sampling.WeightedMixer] = None
        self._ring = _ring.make()  # made here, in the process that will read the batches

    def remote_stats(self) -> Dict[str, int]:
        """Remote reads so far, in this process and its DataLoader workers together:
        `requests` (range requests sent, retries included), `bytes` (received), `cache_hits` and
        `cache_misses` (blocks found or not in `cache_dir`), `retries`. All zero for local files."""
        return self.sources[0].remote_counts.values()

    @property
    def corrupt_records(self) -> int:
        """Corrupt records skipped so far (`skip_corrupt=True`), in this process and its
        DataLoader workers together; each is also logged (file, offset, reason) as a warning
        on the `tfrecord_beam.torch` logger."""
        return self.sources[0].counter.value

    def _keep_arguments(
        self, description: Description, sequence_description: Description, compression_type: Optional[str]
    ) -> None:
        """The reading arguments as given, as public attributes (as `tfrecord`'s datasets have
        them); reading itself uses `self.options`, built from them once."""
        self.description = description
        self.sequence_description = sequence_description
        self.compression_type = compression_type

    @property
    def skip_corrupt(self) -> bool:
        """Whether corrupt records are skipped (`options.skip_corrupt`; fixed at construction)."""
        return bool(self.options.skip_corrupt)

    @property
    def strict(self) -> bool:
        """Whether a described feature absent from the first records is an error, not a warning
        (`options.strict`; fixed at construction)."""
        return bool(self.options.strict)

    # -- epochs and checkpoints ---------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Use the file order and shuffle of epoch `epoch` from the next `iter()` on."""
        if self._progress is not None and self._progress["epoch"] != int(epoch):
            self._progress = None  # a checkpoint taken now is the start of the new epoch
        self.epoch = int(epoch)

    def state_dict(self) -> Dict[str, Any]:
        """Where this process's iteration stands: pass it to `load_state_dict` to resume.

        Taken between items, it counts every record already handed out; a resumed run starts
        with the next one. With DataLoader workers only the workers know their position: use
        torchdata's `StatefulDataLoader`, which asks each worker's copy. With `elastic=True`
        the state of a rank (or the StatefulDataLoader's) resumes on any ranks x workers.
        """
        if self._progress is None:
            if self._pending is not None:
                return copy.deepcopy(self._pending)  # with the identity it was checked against
            state, key = self._fresh_state(None), self._order_key()
        else:
            state, key = copy.deepcopy(self._progress), self._iter_key
            if self._mixer is not None:
                state["mixer"] = self._mixer.state()
        state["identity"] = self._identity(key).saved()  # of the order iterated (or to be)
        return state

    def load_state_dict(self, state: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]) -> None:
        """Resume from `state_dict()` output at the next `iter()` (sets the epoch too).

        With `elastic=True` it also takes a StatefulDataLoader's `state_dict()`, or the list of
        one rank's DataLoader workers' `state_dict()`s (load it here, then build the new loader
        over this dataset: it may have other workers, ranks and batch size).
        """
        if not isinstance(state, collections.abc.Mapping):  # one rank's workers' states
            if not isinstance(state, collections.abc.Sequence) or isinstance(state, (str, bytes)):
                _identity.check_kind(state)  # raises: no state at all
            self._load_states(list(state), 0)
        elif elastic.is_loader_state(state):
            self._load_states(*elastic.loader_worker_states(state))
        else:
            self._check_state(state)
            self.epoch = int(state["epoch"])
            pending = self._adopted(state)
            if self.elastic and pending["topology"] is not None and pending["topology"][3] == 1:
                pending = self._globalize([pending], 0)  # a rank's state: a position in the global order
            pending["identity"] = self._identity().saved()
            self._pending = pending
            self._progress = None

    def _load_states(self, states: List[Mapping[str, Any]], extra: int) -> None:
        """Load one rank's DataLoader workers' states (`extra` items handed out after them)."""
        if not self.elastic:
            raise ValueError(
                "a StatefulDataLoader state (or a list of worker states): load it into the loader "
                "(loader.load_state_dict), or build the dataset with elastic=True to load it here"
            )
        if not states:
            raise ValueError("an empty list of worker states")
        self._check_state(states[0])
        self.epoch = int(states[0]["epoch"])
        pending = self._globalize(states, extra)
        pending["identity"] = self._identity().saved()
        self._pending, self._progress = pending, None

    def _check_state(self, state: Mapping[str, Any]) -> None:
        """Refuse a state of another dataset, or one whose positions would mean other records
        here (`_identity`: every parameter of the order, each one that differs named)."""
        _identity.check_kind(state)
        identity = self._identity()
        if state.get("version") == STATE_VERSION:
            identity.check(state)  # first: a split added is named as such, not as a count of positions
        infos = [files.infos() for files in self.sources]
        counts = [[info.num_records for info in source] for source in infos]
        _identity.validate(
            state,
            sources=len(self.sources),
            elastic=self.elastic,
            mixed=self.weights is not None,
            infinite=self.infinite,
            records=[None if None in c else sum(c) for c in counts],  # type: ignore[arg-type]
            total=self._plan().total if self.elastic else None,
        )
        if state.get("version") != STATE_VERSION:
            identity.check(state)

    def _adopted(self, state: Mapping[str, Any]) -> Dict[str, Any]:
        """A copy of a checked state, in this version's form (a version-1 state, accepted as
        provably the same order, gets this dataset's identity: the states saved from it are current)."""
        adopted = copy.deepcopy(dict(state))
        adopted.pop("files", None)  # version 1's identity: files, and the elastic order's digest
        adopted.pop("seed", None)
        if "elastic" in adopted:
            adopted["elastic"].pop("order", None)
        adopted.update(version=STATE_VERSION, identity=self._identity().saved())
        return adopted

    def _source_names(self) -> List[str]:
        """What each source is called in the identity's `weights` (splits override it)."""
        return [str(i) for i in range(len(self.sources))]

    def _order_key(self) -> Tuple[Any, ...]:
        """The attributes the order is made of, as they are now (an iteration keeps the ones it
        started with, `_iter_key`; the elastic order is built from them, `_plan`)."""
        return (
            self.seed,
            self.shuffle_queue_size,
            self.shuffle_block,
            None if self.weights is None else tuple(self.weights),
            self.infinite,
            self.skip_corrupt,
            self.elastic,
        )

    def _files_entries(self) -> Tuple[List[str], Optional[List[str]]]:
        """The identity's `files` (fixed at construction; built once, at the first state saved
        or loaded: it reads each file's ends, `FileSet.ends`), and version 1's where the
        files' names are distinct across every source (they then prove positions and splits)."""
        cached = self.__dict__.get("_files_cache")
        if cached is None:
            sizes = [[info.size for info in files.infos()] for files in self.sources]
            paths = [files.paths for files in self.sources]
            current = _identity.files_entries(paths, sizes, [files.ends() for files in self.sources])
            names = [p.rstrip("/").rsplit("/", 1)[-1] for source in paths for p in source]
            v1 = None
            if len(set(names)) == len(names):
                v1 = [_identity.v1_files_entry(p, n) for p, n in zip(paths, sizes)]
            cached = self._files_cache = (current, v1)
        return cached

    def _identity(self, key: Optional[Tuple[Any, ...]] = None) -> StateIdentity:
        """What this dataset's positions refer to (`_identity`): its files and every parameter
        of their order (`key`, `_order_key`: the current attributes when None); saved in every
        state and checked on load and again when the loaded state is applied (`_start`)."""
        key = self._order_key() if key is None else key
        cached = self.__dict__.get("_identity_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        seed, queue, block, weights, infinite, skip_corrupt, elastic = key
        files, v1_files = self._files_entries()
        identity = StateIdentity.build(
            files=files,
            v1_files=v1_files,
            infos=[files.infos() for files in self.sources],
            compressions=[files.compressions for files in self.sources],
            seed=seed,
            shuffle_queue_size=queue,
            shuffle_block=block,
            weights=None if weights is None else list(zip(self._source_names(), weights)),
            infinite=infinite,
            skip_corrupt=skip_corrupt,
            elastic=elastic,
        )
        self._identity_cache = (key, identity)
        return identity

    def _fresh_state(self, topology: Optional[List[int]]) -> Dict[str, Any]:
        state: Dict[str, Any] = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "topology": topology,
            "sources": [[0, 0] for _ in self.sources],
            "mixer": None,
        }
        if self.elastic:  # position `start` of the global order, and this process's positions since
            state["elastic"] = {
                "start": 0,
                "taken": [0] * len(self.sources),
                "unit": self._unit,
                "consumed": 0,
            }
        return state

    def _start(self, topology: List[int]) -> Dict[str, Any]:
        """The state this iteration starts from: a pending resume for this epoch, or a fresh one."""
        key = self._order_key()
        pending = self._pending
        if pending is not None and int(pending["epoch"]) == self.epoch:
            # checked when loaded; an order attribute set since (ds.seed = ...) would move its positions
            self._identity(key).check(pending)
        self._pending, self._iter_key = None, key
        if pending is None or int(pending["epoch"]) != self.epoch:
            return self._fresh_state(topology)
        pending.pop("identity")
        if self.elastic and pending["topology"] is None:  # a global position: any topology
            pending["topology"] = topology
            pending["elastic"].update(unit=self._unit, consumed=0)
            return pending
        if pending["topology"] is not None and list(pending["topology"]) != topology:
            where = "one DataLoader worker's state" if self.elastic else "state"
            raise ValueError(
                f"{where} was saved by rank {pending['topology'][0]}/{pending['topology'][1]}, worker "
                f"{pending['topology'][2]}/{pending['topology'][3]} but is loaded into rank {topology[0]}/"
                f"{topology[1]}, worker {topology[2]}/{topology[3]}: resume with the same ranks and workers"
                + (" (or load the StatefulDataLoader's whole state_dict() into the dataset)" if self.elastic else "")
            )
        if self.elastic and pending["elastic"]["unit"] != self._unit:
            raise ValueError(
                f"one DataLoader worker's state was saved with {pending['elastic']['unit']} records an item "
                f"and is loaded with {self._unit}: load the StatefulDataLoader's whole state_dict() into the dataset"
            )
        pending["topology"] = topology
        return pending

    # -- elastic order (`elastic`) -------------------------------------------------------------
    @property
    def _unit(self) -> int:
        """Records a slot of the elastic order holds: the batch, else `slot_size`, else 1."""
        return self.batch_size or self.slot_size or 1

    def _plan(self) -> _elastic_iter.Plan:
        """This epoch's elastic order (built once an epoch; raises when a file has no index)."""
        key = (self.epoch, self._order_key())
        cached = self.__dict__.get("_plan_cache")
        if cached is None or cached[0] != key:
            queue = int(self.shuffle_queue_size or 0)
            plan = _elastic_iter.Plan(
                self.sources, self.weights, self.infinite, queue > 0, self.shuffle_block, queue, self.seed, self.epoch
            )
            cached = self._plan_cache = (key, plan)
            # a chunk of the order reads the shuffle blocks its positions fall in, and the next
            # chunk reads on in them: keep a chunk's worth of blocks (no cache_dir: 4-10x fewer requests)
            span = max(_elastic_iter.CHUNK_RECORDS, queue) + (self.shuffle_block if queue > 0 else 0)
            for files in self.sources:
                files.keep_blocks(span)
        return cached[1]

    def _globalize(self, states: List[Mapping[str, Any]], extra: int) -> Dict[str, Any]:
        """One rank's state (its workers' states, plus `extra` items handed out after them) as a
        position in the global order, valid for any topology (see `elastic`: every rank is
        taken to have handed out as many items as this one)."""
        first = states[0]
        if first["topology"] is None:
            return self._adopted(first)
        rank, ranks, _, workers = first["topology"]
        e = first["elastic"]
        seen = {}
        for state in states:
            self._check_state(state)
            top, other = state["topology"], state["elastic"]
            same = (state["epoch"], top[0], top[1], top[3], other["start"], other["taken"], other["unit"])
            if same != (first["epoch"], rank, ranks, workers, e["start"], e["taken"], e["unit"]):
                raise ValueError(f"worker states of different iterations: {first['topology']} and {top}")
            seen[top[2]] = other["consumed"]
        if sorted(seen) != list(range(workers)):
            raise ValueError(
                f"one rank's state needs all of its {workers} DataLoader workers' states, got workers {sorted(seen)}: "
                "load the StatefulDataLoader's whole state_dict()"
            )
        plan = self._plan()
        total, start, unit = plan.total, int(e["start"]), int(e["unit"])
        if ranks * workers == 1 and not extra:
            position = start + int(seen[0])  # one process: exact, even inside an item
        else:
            remaining = None if total is None else total - start
            lane_slots = {w: elastic.Lane(rank, ranks, w, workers, unit).slots_in(remaining) for w in seen}
            steps = elastic.rank_steps(seen, workers, unit, lane_slots) + extra
            position = elastic.rank_position(start, steps, ranks, unit, total)
        state = self._fresh_state(None)
        state["epoch"] = first["epoch"]
        state["elastic"].update(start=position, taken=plan.advance(start, e["taken"], position), unit=None)
        return state

    def state_after(self, items: int) -> Dict[str, Any]:
        """`elastic=True`: the state once this rank's loader has handed out `items` items (batches)
        of this epoch's iteration, every rank as many: how a plain DataLoader with workers, whose
        workers' positions cannot be asked, checkpoints (count the batches it delivered)."""
        if not self.elastic:
            raise ValueError("state_after needs elastic=True")
        origin = self._progress
        if origin is None:
            origin = self._pending if self._pending is not None and self._pending["epoch"] == self.epoch else None
        if origin is None:
            origin = self._fresh_state(None)
        if origin["topology"] is not None and origin["topology"][3] != 1:
            raise ValueError("this dataset resumed one DataLoader worker's state: count from a global state")
        e = origin["elastic"]
        plan = self._plan()
        position = elastic.rank_position(int(e["start"]), int(items), self.world_size, self._unit, plan.total)
        state = self._fresh_state(None)
        state["elastic"].update(start=position, taken=plan.advance(int(e["start"]), e["taken"], position), unit=None)
        state["identity"] = self._identity(self._iter_key if self._progress is not None else None).saved()
        return state

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self.iter_worker(0, 1)
        settle_worker()  # before reading: the collector stops walking the parent's heap (`_worker`)
        _ring.serve(self._ring)  # batches' bytes go home through shared memory (`_ring`)
        return self.iter_worker(info.id, info.num_workers)

    def iter_worker(self, worker: int, num_workers: int) -> Iterator[Any]:
        """Iterate as DataLoader worker `worker` of `num_workers` on this rank would.

        `iter(dataset)` calls it with the worker the DataLoader says; call it directly to
        drive shards without a DataLoader (custom launchers, tests).
        """
        if not 0 <= worker < num_workers:
            raise ValueError(f"worker {worker} is not in [0, {num_workers})")
        if worker == 0:  # one look per rank: the other workers would only repeat its warning
            self._check_description()
        topology = [self.rank, self.world_size, worker, num_workers]
        progress = self._start(topology)
        self._progress = progress
        if self.elastic:
            self._mixer = None
            return self._iter_elastic(progress["elastic"], topology)
        cursors = [
            Cursor(self._source_blocks(i, list(progress["sources"][i]), topology), progress["sources"][i])
            for i in range(len(self.sources))
        ]
        if self.weights is None:
            self._mixer = None
            take: Callable[[int], List[AnyBlock]] = cursors[0].take
            items: Iterator[Item] = cursors[0]
        else:
            generator = sampling.rng(self.seed, self.epoch, _MIX_KEY, *topology)
            self._mixer = sampling.WeightedMixer(self.weights, generator, progress.get("mixer"))
            items = self._mixer.mix(cursors)
            take = lambda n: [ItemBlock(list(itertools.islice(items, n)))]  # noqa: E731
        if self.batch_size is None:
            if self.weights is None and not self.infinite:
                return self._records_in_runs(cursors[0])
            return self._records(items)
        return self._batches(take, self.batch_size)

    @property
    def _descriptions(self) -> Tuple[Names, Names, bool]:
        """(description, sequence description, sequence): what the decoders of `_collate` take."""
        options = self.options
        return options.description, options.sequence_description, bool(options.sequence)

    SAMPLE_RECORDS = 256  # records looked at for described features that no record has

    def _check_description(self) -> None:
        """Once per process (worker 0 of each rank, where DataLoader workers fork once per epoch
        and each look costs a read of 256 records): a described feature in none of the first
        records of the first file is a typo until shown otherwise: FeatureNameWarning, or
        DecodeError with `strict=True`."""
        options = self.options
        if self._description_checked or not (options.description or options.sequence_description):
            return
        self._description_checked = True
        from .. import _described
        from ..errors import TFRecordError

        files = self.sources[0]
        if not files.paths:
            return
        try:
            payloads = files.head(self.SAMPLE_RECORDS)
        except TFRecordError:
            return  # damaged data is reported when it is read, not here
        _described.check_described(
            files.paths[0],
            payloads,
            options.description,
            options.sequence_description,
            strict=options.strict,
            records=f"its first {len(payloads)} records",
        )

    def _records(self, items: Iterator[Item]) -> Iterator[Any]:
        for item in items:
            sample = decode_record(item, *self._descriptions)
            yield self.transform(sample) if self.transform is not None else sample

    def _records_in_runs(self, cursor: Cursor) -> Iterator[Any]:
        """One source's records one by one, decoded RECORD_RUN at a time (`decode_records`);
        the position advances per record handed out, so checkpoints stay exact."""
        position = cursor.position
        transform = self.transform
        while True:
            pass_number, first = position[0], position[1]
            run = cursor.take(RECORD_RUN)
            if not run:
                return
            for k, sample in enumerate(decode_records(run, *self._descriptions), start=first + 1):
                position[0], position[1] = pass_number, k
                yield transform(sample) if transform is not None else sample

    def _iter_elastic(self, e: Dict[str, Any], topology: List[int]) -> Iterator[Any]:
        """This process's slots of the elastic order from `e` (its state: the global start
        position, records of each source before it, the unit, own positions consumed)."""
        rank, ranks, worker, workers = topology
        unit = int(e["unit"])
        lane = elastic.Lane(rank, ranks, worker, workers, unit)
        first, inside = divmod(int(e["consumed"]), unit)
        stream = _elastic_iter.slots(self._plan(), self.sources, lane, int(e["start"]), e["taken"], first)
        transform = self.transform
        for slot in stream:
            base = slot.j * unit
            if self.batch_size is not None:
                e["consumed"] = base + slot.size  # counted before the hand-out: a state taken after it includes it
                if self.drop_last and slot.size < self.batch_size:
                    return
                records = [item for item in slot.items if item is not None]
                if records:
                    batch = collate_batch([ItemBlock(records)], *self._descriptions)
                    yield transform(batch) if transform is not None else batch
                continue
            present = [(base + i + 1, item) for i, item in enumerate(slot.items) if item is not None and i >= inside]
            inside = 0
            samples = decode_records([ItemBlock([item for _, item in present])], *self._descriptions)
            for (consumed, _), sample in zip(present, samples):
                e["consumed"] = consumed
                yield transform(sample) if transform is not None else sample
            e["consumed"] = base + slot.size  # corrupt records skipped at the slot's end

    def _batches(self, take: Callable[[int], List[AnyBlock]], batch_size: int) -> Iterator[Any]:
        while True:
            chunk = take(batch_size)
            size = sum(len(block) for block in chunk)
            if not size or (self.drop_last and size < batch_size):
                return
            batch = collate_batch(chunk, *self._descriptions)
            yield self.transform(batch) if self.transform is not None else batch

    def _source_blocks(self, source: int, position: List[int], topology: List[int]) -> Iterator[PassBlock]:
        """Source `source`'s records for this shard from `position` = [pass, records already
        handed out in it], as `Block`s; pass after pass when infinite."""
        pass_number, skip = position
        while True:
            produced = False
            index = skip
            for block in self._one_pass(source, pass_number, topology, skip):
                produced = True
                yield pass_number, index, block
                index += len(block)
            if not self.infinite or (not produced and skip == 0):
                return  # finite, or nothing at all for this shard: do not spin
            pass_number += 1
            skip = 0

    def _one_pass(self, source: int, pass_number: int, topology: List[int], skip: int) -> Iterator[AnyBlock]:
        files = self.sources[source]
        rank, world_size, worker, num_workers = topology
        shard, num_shards = sampling.shard_of(rank, world_size, worker, num_workers)
        queue = int(self.shuffle_queue_size or 0)
        shuffle = queue > 0
        order = sampling.file_order(len(files), shuffle, self.seed, self.epoch, source, pass_number)
        pieces = sampling.plan_shards(files.infos(), num_shards, order)[shard]
        if not shuffle:
            return files.stream(pieces, skip)
        generator = sampling.rng(self.seed, self.epoch, source, pass_number, *topology)
        pieces = [pieces[i] for i in generator.permutation(len(pieces))]
        records = itertools.chain.from_iterable(block.items() for block in files.stream(pieces))
        head = list(itertools.islice(records, queue))  # a short shard needs no warning
        shuffled = shuffle_iterator(itertools.chain(head, records), len(head), seed=generator)
        return skip_blocks(reblock(shuffled), skip)


class TFRecordDataset(_ShardedIterable):
    """Iterate over the records of one or more TFRecord files as decoded dicts or batches.

    Same signature as `tfrecord.torch.dataset.TFRecordDataset`, plus:

    Args:
        data_path: a path, a glob, or a list of them.
        index_path: None, one `.tfindex` per data file (a list), a glob matching as many, or
            (one data file) a path. Indexes let shards split files at record boundaries.
        description: features to decode ({name: "byte"|"float"|"int"} or a list); None = all.
        shuffle_queue_size: shuffle the file order and through a buffer of this many records.
        transform: applied to each record (or to each batch when `batch_size` is set).
        sequence_description: read SequenceExamples; yields (context, sequences).
        compression_type: None (from the file name) or a codec name ("gzip", "zlib", "zstd":
            `tfrecord_beam.compression`).
        seed: seeds file order and shuffle buffer together with epoch, rank and worker (0 when
            None, so that every rank agrees on the file order).
        batch_size: yield batches of this many records as tensors (see `_collate`): a dict, or
            a `SequenceBatch(context, sequences)` with `sequence_description`; use the
            DataLoader with `batch_size=None` then. The fast path: without it each record
            is a `Sample` that torch's `default_collate` stacks feature by feature (numeric
            features in one numpy call, `_collate._stacked`; ~0.7-1 us per record, on top of
            the per-record objects themselves).
        drop_last: drop each worker's last, short batch.
        rank, world_size: this process's DDP rank; default from `torch.distributed`.
        skip_corrupt: skip records that fail their CRCs (or are truncated) instead of raising
            CorruptRecordError; `corrupt_records` counts them. `data_path` may also be a job's
            output directory or prefix: its manifest then names the shards and indexes.
        strict: a described feature that none of the first file's first 256 records has is a
            DecodeError (default: a FeatureNameWarning naming it and the closest names).
        elastic: one global record order per epoch, a function of the files' record counts and
            the seed alone, shared out to ranks x workers; `state_dict()` resumes on any ranks x
            workers and batch size (see `tfrecord_beam.torch.elastic`). Needs an index for every
            file (uncompressed or block-gzip). With `shuffle_queue_size=N` the order is blocks
            of `shuffle_block` contiguous records shuffled, then records within windows of N.
        slot_size: (elastic, without `batch_size`) records each process hands out in turn; set
            it to the DataLoader's `batch_size` when the DataLoader batches records from workers.
        cache_dir, cache_limit: remote files (s3://, gs://, ...) only: keep the blocks read on
            local disk under `cache_dir` (shared by every worker and rank of the host), at
            most `cache_limit` bytes (None: no bound), least recently used evicted first.
        readahead_bytes, readahead_requests: remote files are read in requests of this many
            bytes, this many in flight per worker, planned from the indexes (`remote_stats()`
            counts them).
        request_timeout, request_attempts: seconds one request may take, and attempts per
            request (with backoff) before `RemoteReadError` names the object and the range.
    """

    def __init__(
        self,
        data_path: Paths,
        index_path: Optional[Paths],
        description: Description = None,
        shuffle_queue_size: Optional[int] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        sequence_description: Description = None,
        compression_type: Optional[str] = None,
        *,
        seed: Optional[int] = None,
        batch_size: Optional[int] = None,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        skip_corrupt: bool = False,
        strict: bool = False,
        elastic: bool = False,
        shuffle_block: int = 1024,
        slot_size: Optional[int] = None,
        cache_dir: Optional[str] = None,
        cache_limit: Optional[int] = None,
        readahead_bytes: int = READAHEAD_BYTES,
        readahead_requests: int = READAHEAD_REQUESTS,
        request_timeout: float = REQUEST_TIMEOUT,
        request_attempts: int = REQUEST_ATTEMPTS,
    ) -> None:
        options = ReadOptions.dropin(
            description, sequence_description, compression_type, skip_corrupt=skip_corrupt, strict=strict
        )
        self.data_path = data_path
        self.index_path = index_path
        self._keep_arguments(description, sequence_description, compression_type)
        remote = remote_options(
            cache_dir, cache_limit, readahead_bytes, readahead_requests, request_timeout, request_attempts
        )
        files = FileSet(data_path, index_path, options.compression, options.skip_corrupt, remote=remote)
        super().__init__(
            [files],
            options,
            shuffle_queue_size=shuffle_queue_size,
            transform=transform,
            seed=seed,
            batch_size=batch_size,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            elastic=elastic,
            shuffle_block=shuffle_block,
            slot_size=slot_size,
        )


class MultiTFRecordDataset(_ShardedIterable):
    """Mix several splits, drawing records in proportion to `splits`' weights.

    Same signature as `tfrecord.torch.dataset.MultiTFRecordDataset`, plus `seed`,
    `batch_size`, `drop_last`, `rank`, `world_size`, `skip_corrupt`, `elastic`, `shuffle_block`,
    `slot_size` as in `TFRecordDataset` (elastic: the weighted draw is one seeded sequence over
    the global stream, so the mix too is a function of the seed alone), and the remote reading
    keywords (`cache_dir`, `cache_limit`, `readahead_bytes`, ...) as in `TFRecordDataset`.

    Args:
        data_pattern: `data_pattern.format(split)` names each split's files: a path or a glob.
        index_pattern: `index_pattern.format(split)` names their indexes (a path or glob), or None.
        splits: {split: weight}; weights need not sum to 1.
        infinite: each split restarts (with a new shuffle) when it runs out, forever; when
            False, iteration ends once every split is exhausted.
    """

    def __init__(
        self,
        data_pattern: str,
        index_pattern: Optional[str],
        splits: Dict[str, float],
        description: Description = None,
        shuffle_queue_size: Optional[int] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        sequence_description: Description = None,
        compression_type: Optional[str] = None,
        infinite: bool = True,
        *,
        seed: Optional[int] = None,
        batch_size: Optional[int] = None,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        skip_corrupt: bool = False,
        strict: bool = False,
        elastic: bool = False,
        shuffle_block: int = 1024,
        slot_size: Optional[int] = None,
        cache_dir: Optional[str] = None,
        cache_limit: Optional[int] = None,
        readahead_bytes: int = READAHEAD_BYTES,
        readahead_requests: int = READAHEAD_REQUESTS,
        request_timeout: float = REQUEST_TIMEOUT,
        request_attempts: int = REQUEST_ATTEMPTS,
    ) -> None:
        if not splits:
            raise ValueError("splits must name at least one split")
        options = ReadOptions.dropin(
            description, sequence_description, compression_type, skip_corrupt=skip_corrupt, strict=strict
        )
        self.data_pattern = data_pattern
        self.index_pattern = index_pattern
        self.splits = dict(splits)
        self._keep_arguments(description, sequence_description, compression_type)
        counter = CorruptCounter()
        remote = remote_options(
            cache_dir, cache_limit, readahead_bytes, readahead_requests, request_timeout, request_attempts
        )
        remote_counts = RemoteCounts()
        sources = [
            FileSet(
                data_pattern.format(split),
                None if index_pattern is None else index_pattern.format(split),
                options.compression,
                options.skip_corrupt,
                counter,
                remote,
                remote_counts,
            )
            for split in self.splits
        ]
        weights = [float(w) for w in self.splits.values()]
        sampling.WeightedMixer(weights, sampling.rng(0))  # validate the weights now, not in a worker
        super().__init__(
            sources,
            options,
            weights=weights,
            infinite=bool(infinite),
            shuffle_queue_size=shuffle_queue_size,
            transform=transform,
            seed=seed,
            batch_size=batch_size,
            drop_last=drop_last,
            rank=rank,
            world_size=world_size,
            elastic=elastic,
            shuffle_block=shuffle_block,
            slot_size=slot_size,
        )

    def _source_names(self) -> List[str]:
        """The splits, in source order: the identity's `weights` name them (swapped splits of
        equal file names and sizes are another mix)."""
        return list(self.splits)
