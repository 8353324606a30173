"""Who reads what: sharding over DDP ranks x DataLoader workers, seeded RNGs, weighted mixing.

Nothing here reads a file or imports torch at module level: the plan is pure arithmetic over
file sizes and index lengths, so it can be tested for every (ranks x workers) grid quickly.

Sharding strategy (each record goes to exactly one of `num_shards` shards; every shard
computes the same plan from the same file list, so no communication is needed):

* **Indexed, uncompressed files** are laid end to end as one sequence of records; shard `s`
  gets records `N*s//S .. N*(s+1)//S` of it. A shard therefore reads whole files where its
  slice covers them and at most two partial files, and record counts differ by at most one.
* **Uncompressed files without an index** are laid end to end as one sequence of bytes and
  cut into `S` equal byte ranges; a record belongs to the range holding its header's first
  byte. Readers start mid-file with `RecordReader(resync=True)`, which skips to the next
  record boundary (`records.find_record_start`).
* **Compressed files** (GZIP/ZLIB) cannot be entered mid-stream. With at least `S` of them
  each shard gets whole files (greedily balanced by record count, or compressed size when
  unindexed). With fewer: indexed ones are cut by record range (each reader inflates up to
  the end of its range), unindexed ones are shared round-robin by record number (every shard
  inflates the file and keeps records `n % S == s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..iterator_utils import WeightedMixer  # noqa: F401 (the datasets' mixer lives in the core)

RECORDS, BYTES, STRIDE, WHOLE = "records", "bytes", "stride", "whole"


@dataclass(frozen=True)
class FileInfo:
    """What the planner needs to know about one file."""

    compressed: bool
    size: int  # bytes on disk
    num_records: Optional[int]  # from the index; None without one


@dataclass(frozen=True)
class Piece:
    """Part of one file that one shard reads.

    kind RECORDS: records [start, stop) by the index. BYTES: records whose header starts in
    byte range [start, stop) (stop None = end of file). STRIDE: records n with
    n % stop == start. WHOLE: every record.
    """

    file: int
    kind: str
    start: int = 0
    stop: Optional[int] = None


def _slices(
    sizes: Sequence[int], files: Sequence[int], num_shards: int, kind: str, open_end: bool
) -> List[List[Piece]]:
    """Cut files laid end to end (`sizes` units each) into `num_shards` equal contiguous slices."""
    plan: List[List[Piece]] = [[] for _ in range(num_shards)]
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    total = int(bounds[-1])
    for shard in range(num_shards):
        lo, hi = total * shard // num_shards, total * (shard + 1) // num_shards
        if lo == hi:
            continue
        first = int(np.searchsorted(bounds, lo, side="right")) - 1
        for i in range(first, len(sizes)):
            a, b = int(bounds[i]), int(bounds[i + 1])
            if a >= hi:
                break
            start, stop = max(lo, a) - a, min(hi, b) - a
            if stop <= start:
                continue
            end: Optional[int] = stop
            if open_end and stop == b - a:
                end = None  # read to the end of the file (do not trust a size taken earlier)
            plan[shard].append(Piece(files[i], kind, start, end))
    return plan


def _whole_files(weights: Sequence[int], files: Sequence[int], num_shards: int) -> List[List[Piece]]:
    """Greedy balance of whole files: heaviest first onto the lightest shard (ties: lowest shard)."""
    plan: List[List[Piece]] = [[] for _ in range(num_shards)]
    load = [0] * num_shards
    for pos in sorted(range(len(files)), key=lambda p: (-weights[p], p)):
        shard = min(range(num_shards), key=lambda s: (load[s], s))
        plan[shard].append(Piece(files[pos], WHOLE))
        load[shard] += weights[pos]
    for pieces in plan:  # keep the (possibly shuffled) file order inside a shard
        pieces.sort(key=lambda p: files.index(p.file))
    return plan


def plan_shards(infos: Sequence[FileInfo], num_shards: int, order: Optional[Sequence[int]] = None) -> List[List[Piece]]:
    """For each shard, the pieces of files it reads (see the module docstring).

    `order` is the file order to lay files out in (a permutation of range(len(infos))); it
    must be the same on every shard, so shuffle it with a seed that excludes rank and worker.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    order = list(range(len(infos))) if order is None else list(order)
    indexed = [i for i in order if not infos[i].compressed and infos[i].num_records is not None]
    plain = [i for i in order if not infos[i].compressed and infos[i].num_records is None]
    packed = [i for i in order if infos[i].compressed]
    plans = [
        _slices([_records(infos[i]) for i in indexed], indexed, num_shards, RECORDS, False),
        _slices([infos[i].size for i in plain], plain, num_shards, BYTES, True),
    ]
    if len(packed) >= num_shards:
        plans.append(_whole_files([_weight(infos[i]) for i in packed], packed, num_shards))
    else:
        packed_indexed = [i for i in packed if infos[i].num_records is not None]
        plans.append(_slices([_records(infos[i]) for i in packed_indexed], packed_indexed, num_shards, RECORDS, False))
        plans.append(
            [
                [Piece(i, STRIDE, shard, num_shards) for i in packed if infos[i].num_records is None]
                for shard in range(num_shards)
            ]
        )
    rank_of = {f: p for p, f in enumerate(order)}
    return [
        sorted((p for plan in plans for p in plan[s]), key=lambda p: (rank_of[p.file], p.start))
        for s in range(num_shards)
    ]


def _records(info: FileInfo) -> int:
    """The record count of an indexed file (the planner asks only those)."""
    if info.num_records is None:
        raise AssertionError("an unindexed file has no record count")
    return info.num_records


def _weight(info: FileInfo) -> int:
    return info.num_records if info.num_records is not None else info.size


# ---------------------------------------------------------------------------------------------
# Topology and seeds


def resolve_topology(rank: Optional[int] = None, world_size: Optional[int] = None) -> Tuple[int, int]:
    """(rank, world size): the explicit values, else `torch.distributed`'s when initialised, else (0, 1)."""
    if rank is None or world_size is None:
        dist_rank, dist_world = 0, 1
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist_rank, dist_world = dist.get_rank(), dist.get_world_size()
        except ImportError:  # pragma: no cover - torch is this package's dependency
            pass
        rank = dist_rank if rank is None else rank
        world_size = dist_world if world_size is None else world_size
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} must be in [0, world_size={world_size})")
    return rank, world_size


def rng(*keys: int) -> np.random.Generator:
    """A private generator seeded by a tuple of non-negative ints (global RNGs are untouched)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(k) & 0xFFFFFFFFFFFFFFFF for k in keys])))


def file_order(num_files: int, shuffle: bool, *keys: int) -> List[int]:
    """The file order for one pass: a permutation seeded by `keys` when shuffling, else identity."""
    if not shuffle:
        return list(range(num_files))
    return rng(*keys).permutation(num_files).tolist()


# ---------------------------------------------------------------------------------------------
# Weighted mixing with a checkpointable state


def shard_of(rank: int, world_size: int, worker: int, num_workers: int) -> Tuple[int, int]:
    """(shard id, shard count) of a DataLoader worker on a DDP rank."""
    return rank * num_workers + worker, world_size * num_workers
