"""An external shuffle of TFRecord files into N shards, in memory bounded by a buffer size.

Every record gets an i.i.d. uniform 64-bit key, a pure function of (seed, file number,
record offset), and the output is all records sorted by key: a uniform random permutation,
the same for the same seed and input however the work was split or how many workers ran.
The key space is cut into `num_shards * buckets_per_shard` equal buckets; shard `s` is the
concatenation of its buckets in key order.

1. Readers (one Beam element per input byte range) collect up to `buffer_bytes` of records,
   sort them by key and write them as one temporary *run* file under the staging directory:
   per bucket, its frames (the input's framing, copied, CRCs checked on reading) then its
   keys. Only (shard, run file name, per-bucket offsets and counts) go to the GroupByKey.
2. One writer per shard loads each of its buckets (expected size `buffer_bytes / 2`; a bucket
   that turns out larger, e.g. from compressed inputs, is split again by key range through
   temporary files), orders it by key in memory and appends it to the shard.

The count + order-independent checksum proof is read from the frames' CRC footers on both
sides (`_frames.digest`), so it costs almost nothing.
"""

from __future__ import annotations

import math
import uuid
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_beam.records import RecordReader
from tfrecord_beam.beam import _frames, _fs
from tfrecord_beam.beam import stages as _stages

DEFAULT_BUFFER_BYTES = 64 << 20
COMPRESSED_GROWTH = 4  # assumed inflation of gzip/zlib inputs when sizing buckets
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_SPAN = 1 << 64
DIGEST = "digest"


# ---------------------------------------------------------------------------------------------
# Keys and buckets (pure functions)


def file_key(seed: int, file_number: int) -> np.uint64:
    """The 64-bit stream key of one input file for a seed."""
    return np.uint64(_stages.seeded_keys(seed, file_number, size=1)[0])


def record_keys(seed_key: np.uint64, record_offsets: np.ndarray) -> np.ndarray:
    """The shuffle key of each record: SplitMix64 at stream position `offset + 1` of the file's
    key (distinct offsets give distinct keys; the keys look i.i.d. uniform)."""
    x = (np.asarray(record_offsets, np.uint64) + np.uint64(1)) * _GAMMA + seed_key
    return _frames.mix64(x)


class Plan(NamedTuple):
    """How the key space is cut: `num_shards * per_shard` equal buckets."""

    num_shards: int
    per_shard: int
    buffer_bytes: int

    @property
    def buckets(self) -> int:
        return self.num_shards * self.per_shard

    def lower_bounds(self) -> np.ndarray:
        """The smallest key of each bucket (uint64, ascending)."""
        b = self.buckets
        return np.array([(i * _SPAN) // b for i in range(b)], dtype=np.uint64)

    def shard_of(self, bucket: int) -> int:
        return bucket // self.per_shard

    def key_range(self, bucket: int) -> Tuple[int, int]:
        b = self.buckets
        return (bucket * _SPAN) // b, ((bucket + 1) * _SPAN) // b


def plan_buckets(input_bytes: int, num_shards: int, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> Plan:
    """Enough buckets that each is expected to hold half of `buffer_bytes` (so that random
    variation rarely pushes one over the buffer, which would cost a split)."""
    if buffer_bytes < 1 << 16:
        raise ValueError(f"the shuffle buffer must be at least 64 KiB, not {buffer_bytes}")
    per_shard = max(1, math.ceil(input_bytes / num_shards / (buffer_bytes / 2)))
    return Plan(num_shards, per_shard, buffer_bytes)


def estimated_bytes(ranges: Sequence[_stages.FileRange]) -> int:
    """Record bytes the ranges hold, from file sizes (compressed files counted as grown)."""
    sizes = {}
    for r in ranges:
        sizes[r.path] = _fs.file_size(r.path) * (COMPRESSED_GROWTH if r.compression else 1)
    return sum(sizes.values())


# ---------------------------------------------------------------------------------------------
# Run files: what the readers write


class RunPart(NamedTuple):
    """The buckets of one shard inside one run file: per bucket, its frames then its keys."""

    order: Tuple[int, int]  # (range number, run number): the run's place in the input
    path: str
    buckets: np.ndarray  # int64 bucket numbers, ascending
    offsets: np.ndarray  # int64 byte offset of each bucket's frames in the file
    sizes: np.ndarray  # int64 bytes of frames of each bucket (its keys follow: 8 bytes each)
    counts: np.ndarray  # int64 records of each bucket


def write_run(frame_sets: Sequence[_frames.Frames], keys: Sequence[np.ndarray], plan: Plan, path: str,
              order: Tuple[int, int]) -> Iterator[Tuple[int, RunPart]]:
    """Sort the frames by key, write them as one run file, yield a (shard, RunPart) per shard."""
    which = np.concatenate([np.full(len(k), i, np.int64) for i, k in enumerate(keys)])
    index = np.concatenate([np.arange(len(k), dtype=np.int64) for k in keys])
    all_keys = np.concatenate(keys)
    by_key = np.argsort(all_keys, kind="stable")
    which, index, all_keys = which[by_key], index[by_key], all_keys[by_key]
    cuts = np.searchsorted(all_keys, plan.lower_bounds(), side="left").tolist() + [len(all_keys)]
    present = [b for b in range(plan.buckets) if cuts[b] < cuts[b + 1]]
    rows = []  # (bucket, offset, size, count)
    pos = 0
    with _fs.atomic_output(path) as (handle, commit):
        blocks = _frames.gather(frame_sets, which, index, cuts=cuts)  # one pass over the run, cut at buckets
        for bucket in present:
            lo, hi = cuts[bucket], cuts[bucket + 1]
            start, done = pos, lo
            while done < hi:  # the blocks of this bucket (a block never spans two)
                block, sizes = next(blocks)
                handle.write(block)
                pos += len(block)
                done += len(sizes)
            handle.write(all_keys[lo:hi].astype("<u8").tobytes())
            rows.append((bucket, start, pos - start, hi - lo))
            pos += 8 * (hi - lo)
        commit()
    table = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    shards = table[:, 0] // plan.per_shard
    for shard in np.unique(shards).tolist():
        t = table[shards == shard]
        yield shard, RunPart(order, path, t[:, 0], t[:, 1], t[:, 2], t[:, 3])


def bucket_runs(rng: _stages.FileRange, range_number: int, seed: int, plan: Plan, run_dir: str,
                coverage: Optional[list] = None, digests: Optional[list] = None) -> Iterator[Tuple[int, RunPart]]:
    """Read one range (CRCs checked) and write its records as run files of at most about
    `plan.buffer_bytes` each; append the range's `Coverage` and `Digest` to the lists given."""
    reader = RecordReader(rng.path, rng.compression, verify=True, start_offset=rng.start, end_offset=rng.end,
                          resync=rng.start > 0)
    key = file_key(seed, rng.file_number)
    frame_sets: List[_frames.Frames] = []
    keys: List[np.ndarray] = []
    held = 0
    runs = 0
    total: _frames.Digest = (0, 0, 0)
    end = None
    for chunk in reader.chunks():
        frames = _frames.frames_of_chunk(chunk)
        frame_sets.append(frames)
        keys.append(record_keys(key, chunk.record_offsets))
        total = _frames.add(total, _frames.digest(frames.crcs(), frames.lengths))
        end = int(chunk.record_offsets[-1] + frames.sizes[-1])
        held += int(frames.sizes.sum())
        if held >= plan.buffer_bytes:
            yield from write_run(frame_sets, keys, plan, _run_path(run_dir), (range_number, runs))
            frame_sets, keys, held, runs = [], [], 0, runs + 1
    if frame_sets:
        yield from write_run(frame_sets, keys, plan, _run_path(run_dir), (range_number, runs))
    if coverage is not None:
        first = reader.start_offset
        size = _fs.file_size(rng.path) if rng.compression is None else None
        coverage.append(_stages.Coverage(rng.path, rng.start, first, first if end is None else end, size))
    if digests is not None:
        digests.append(total)


def _run_path(run_dir: str) -> str:
    # A fresh name per attempt: a retried bundle never writes over a run another attempt made.
    return _fs.join(run_dir, f"run-{uuid.uuid4().hex}")


def _create(path: str):
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.create(path, "application/octet-stream", CompressionTypes.UNCOMPRESSED)


# ---------------------------------------------------------------------------------------------
# Buckets: what the shard writers read


class Slice(NamedTuple):
    """One bucket's records in one file: `size` bytes of frames at `offset`, then their keys."""

    path: str
    offset: int
    size: int
    count: int


def _read_slice(handle, piece: Slice) -> Tuple[_frames.Frames, np.ndarray]:
    handle.seek(piece.offset)
    raw = handle.read(piece.size + 8 * piece.count)
    if len(raw) != piece.size + 8 * piece.count:
        from tfrecord_beam.errors import TruncatedRecordError

        raise TruncatedRecordError(piece.path, piece.offset + len(raw), None, "temporary shuffle file is truncated")
    view = memoryview(raw)
    frames = _frames.scan(view[: piece.size], piece.path, piece.offset)
    keys = np.frombuffer(raw, dtype="<u8", count=piece.count, offset=piece.size).astype(np.uint64)
    if len(frames.starts) != piece.count:
        from tfrecord_beam.errors import CorruptRecordError

        raise CorruptRecordError(piece.path, piece.offset, None,
                                 f"temporary shuffle slice holds {len(frames.starts)} records, not {piece.count}")
    return frames, keys


class _Handles:
    """Open input files, one per path, for a bucket's slices (closed together)."""

    def __init__(self) -> None:
        self.open: Dict[str, object] = {}

    def get(self, path: str):
        if path not in self.open:
            self.open[path] = _fs.open_input(path)
        return self.open[path]

    def close(self) -> None:
        for handle in self.open.values():
            handle.close()
        self.open.clear()


def shuffled_bucket(slices: Sequence[Slice], key_range: Tuple[int, int], buffer_bytes: int, work_dir: str,
                    depth: int = 0) -> Iterator[Tuple[bytes, np.ndarray, _frames.Digest]]:
    """The bucket's frames in key order as (bytes, frame sizes, digest) blocks.

    A bucket that fits in `buffer_bytes` is read whole and ordered in memory; a larger one is
    first split by key range into smaller buckets through temporary files (each slice holds
    its records sorted by key, so a split is a few contiguous cuts per slice)."""
    total = sum(s.size for s in slices)
    count = sum(s.count for s in slices)
    if total > buffer_bytes and count > 1 and depth < 8:
        yield from _split_bucket(slices, key_range, buffer_bytes, work_dir, total, depth)
        return
    handles = _Handles()
    try:
        loaded = [_read_slice(handles.get(s.path), s) for s in slices]
    finally:
        handles.close()
    frame_sets = [f for f, _ in loaded]
    keys = np.concatenate([k for _, k in loaded]) if loaded else np.zeros(0, np.uint64)
    which = np.concatenate([np.full(len(k), i, np.int64) for i, (_, k) in enumerate(loaded)]) if loaded else keys
    index = np.concatenate([np.arange(len(k), dtype=np.int64) for _, k in loaded]) if loaded else keys
    by_key = np.argsort(keys, kind="stable")
    which, index = which[by_key], index[by_key]
    crcs = np.concatenate([f.crcs() for f in frame_sets]) if frame_sets else np.zeros(0, np.uint32)
    lengths = np.concatenate([f.lengths for f in frame_sets]) if frame_sets else np.zeros(0, np.int64)
    digest = _frames.digest(crcs, lengths)
    first = True
    for block, sizes in _frames.gather(frame_sets, which, index):
        yield block, sizes, digest if first else (0, 0, 0)
        first = False


def _split_bucket(slices, key_range, buffer_bytes, work_dir, total, depth):
    lo, hi = key_range
    parts = max(2, math.ceil(total / (buffer_bytes / 2)))
    bounds = [lo + (j * (hi - lo)) // parts for j in range(parts)] + [hi]
    split_dir = _fs.join(work_dir, f"split-{uuid.uuid4().hex[:12]}")
    paths = [_fs.join(split_dir, f"part-{j:04d}") for j in range(parts)]
    outs = [_create(p) for p in paths]
    pos = [0] * parts
    pieces: List[List[Slice]] = [[] for _ in range(parts)]
    handles = _Handles()
    try:
        for s in slices:
            frames, keys = _read_slice(handles.get(s.path), s)
            cuts = np.searchsorted(keys, np.array(bounds[1:-1], dtype=np.uint64), side="left").tolist()
            edges = [0] + cuts + [len(keys)]
            ends = np.concatenate([[0], np.cumsum(frames.sizes)]).tolist()
            view = memoryview(frames.buffer)
            for j in range(parts):
                a, b = edges[j], edges[j + 1]
                if a == b:
                    continue
                outs[j].write(view[ends[a] : ends[b]])
                outs[j].write(keys[a:b].astype("<u8").tobytes())
                pieces[j].append(Slice(paths[j], pos[j], ends[b] - ends[a], b - a))
                pos[j] += ends[b] - ends[a] + 8 * (b - a)
    finally:
        handles.close()
        for out in outs:
            out.close()
    try:
        for j in range(parts):
            if pieces[j]:
                yield from shuffled_bucket(pieces[j], (bounds[j], bounds[j + 1]), buffer_bytes, work_dir, depth + 1)
    finally:
        if _fs.exists(split_dir):
            _fs.delete([split_dir])


def write_shuffled_shard(spec: _stages.ShardSpec, plan: Plan, shard: int, parts: Iterable[RunPart],
                         work_dir: str) -> dict:
    """Write one shard from the run parts of its buckets (in key order); returns its stats."""

    per_bucket: Dict[int, List[Tuple[Tuple[int, int], Slice]]] = {}
    for part in parts:
        for b, o, s, c in zip(part.buckets.tolist(), part.offsets.tolist(), part.sizes.tolist(), part.counts.tolist()):
            per_bucket.setdefault(b, []).append((part.order, Slice(part.path, o, s, c)))
    name = spec.name(shard)
    index_path = spec.path(spec.index_name(shard)) if spec.write_index else None
    written: _frames.Digest = (0, 0, 0)
    with _fs.record_writer(spec.path(name), spec.compression, index_path=index_path) as writer:
        for bucket in sorted(per_bucket):
            slices = [s for _, s in sorted(per_bucket[bucket], key=lambda t: t[0])]
            for block, sizes, d in shuffled_bucket(slices, plan.key_range(bucket), plan.buffer_bytes, work_dir):
                writer.write_framed(block, sizes)
                written = _frames.add(written, d)
    result = {
        "shard": shard, "name": name, "records": written[0], "bytes": written[1], "checksum": written[2],
        "file_bytes": _fs.file_size(spec.path(name)), "groups": [written[0]],
    }
    _stages._write_result(spec.path("_results"), f"shard-{shard:05d}.json", result)
    return result


# ---------------------------------------------------------------------------------------------
# Beam wiring


class _BucketRuns(beam.DoFn):
    """(range number, FileRange) -> (shard, RunPart) pairs; COVERAGE and DIGEST side outputs."""

    def __init__(self, seed: int, plan: Plan, run_dir: str) -> None:
        self.seed, self.plan, self.run_dir = seed, plan, run_dir

    def process(self, element):
        number, rng = element
        coverage: list = []
        digests: list = []
        yield from bucket_runs(rng, number, self.seed, self.plan, self.run_dir, coverage, digests)
        for c in coverage:
            yield beam.pvalue.TaggedOutput(_stages.COVERAGE, c)
        for d in digests:
            yield beam.pvalue.TaggedOutput(DIGEST, d)


def shuffle_to_shards(p, ranges: Sequence[_stages.FileRange], spec: _stages.ShardSpec, seed: int, plan: Plan,
                      work_dir: str, verify: bool = True, label: str = "Shuffle"):
    """Shuffle the records of `ranges` into `spec`'s shards; PCollection of the shards' result
    dicts. With `verify`, the pipeline fails unless the shards hold exactly the input records."""
    run_dir = _fs.join(work_dir, "runs")
    outs = (
        p
        | f"{label}Plan" >> beam.Create(list(enumerate(ranges)))  # Create spreads its elements
        | f"{label}Runs" >> beam.ParDo(_BucketRuns(seed, plan, run_dir)).with_outputs(
            _stages.COVERAGE, DIGEST, main="parts")
    )
    _stages.check_coverages(outs[_stages.COVERAGE], label)
    results = (
        outs.parts
        | f"{label}GroupByShard" >> beam.GroupByKey()
        | f"{label}WriteShards" >> beam.MapTuple(
            lambda shard, parts: write_shuffled_shard(spec, plan, shard, parts, work_dir))
    )
    if verify:
        _stages.verify_digests(p, outs[DIGEST], results, spec, "reshard --shuffle", label=f"{label}Verify")
    return results
