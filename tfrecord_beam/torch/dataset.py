"""PyTorch datasets over TFRecord files: a drop-in for `tfrecord.torch.dataset`, done right.

* Every record is read exactly once per epoch across DDP ranks x DataLoader workers, with or
  without index files (see `tfrecord_beam.torch.sampling` for the plan).
* Shuffling (file order + a shuffle buffer) is seeded by (seed, epoch, rank, worker) through
  private generators; the global numpy / torch / random RNGs are never touched.
* `state_dict()` / `load_state_dict()` resume a run mid-epoch without repeating or skipping a
  record (directly with `num_workers=0`, or through torchdata's `StatefulDataLoader`).
* `batch_size=` yields ready batches of tensors decoded in one go (layout in `_collate`).
"""

from __future__ import annotations

import copy
import itertools
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch.utils.data

from .._ranges import RemoteOptions
from .._read_options import ReadOptions
from ..example import Description
from ..iterator_utils import shuffle_iterator
from . import _ring, sampling
from ._collate import Names, collate_batch, decode_record, decode_records
from ._files import CorruptCounter, FileSet, Paths, RemoteCounts
from ._stream import AnyBlock, Cursor, Item, ItemBlock, PassBlock, reblock, skip_blocks
from ._worker import settle_worker
from .indexed import IndexedTFRecordDataset

__all__ = ["TFRecordDataset", "MultiTFRecordDataset", "IndexedTFRecordDataset"]

_STATE_VERSION = 1
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
        self._description_checked = False
        self._pending: Optional[Dict[str, Any]] = None  # a loaded state, applied by the next __iter__
        self._progress: Optional[Dict[str, Any]] = None  # the running iteration's position
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
        torchdata's `StatefulDataLoader`, which asks each worker's copy.
        """
        if self._progress is None:
            return copy.deepcopy(self._pending) if self._pending is not None else self._fresh_state(None)
        state = copy.deepcopy(self._progress)
        if self._mixer is not None:
            state["mixer"] = self._mixer.state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state_dict()` output at the next `iter()` (sets the epoch too)."""
        if state.get("version") != _STATE_VERSION or len(state.get("sources", ())) != len(self.sources):
            raise ValueError(
                f"not a state of this dataset (version {state.get('version')!r}, "
                f"{len(state.get('sources', ()))} sources for {len(self.sources)})"
            )
        if int(state["seed"]) != self.seed:
            raise ValueError(f"state was saved with seed {state['seed']} but this dataset has seed {self.seed}")
        self._pending = copy.deepcopy(dict(state))
        self._progress = None
        self.epoch = int(state["epoch"])

    def _fresh_state(self, topology: Optional[List[int]]) -> Dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "epoch": self.epoch,
            "seed": self.seed,
            "topology": topology,
            "sources": [[0, 0] for _ in self.sources],
            "mixer": None,
        }

    def _start(self, topology: List[int]) -> Dict[str, Any]:
        """The state this iteration starts from: a pending resume for this epoch, or a fresh one."""
        pending, self._pending = self._pending, None
        if pending is None or int(pending["epoch"]) != self.epoch:
            return self._fresh_state(topology)
        if pending["topology"] is not None and list(pending["topology"]) != topology:
            raise ValueError(
                f"state was saved by rank {pending['topology'][0]}/{pending['topology'][1]}, worker "
                f"{pending['topology'][2]}/{pending['topology'][3]} but is loaded into rank {topology[0]}/"
                f"{topology[1]}, worker {topology[2]}/{topology[3]}: resume with the same ranks and workers"
            )
        pending["topology"] = topology
        return pending

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
        compression_type: None (from the file name), "gzip" or "zlib".
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
        )


class MultiTFRecordDataset(_ShardedIterable):
    """Mix several splits, drawing records in proportion to `splits`' weights.

    Same signature as `tfrecord.torch.dataset.MultiTFRecordDataset`, plus `seed`,
    `batch_size`, `drop_last`, `rank`, `world_size`, `skip_corrupt` and the remote reading
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
        )
