"""An external shuffle of TFRecord files into N shards, in memory bounded by a buffer size.

Every record gets an i.i.d. uniform 64-bit key, a pure function of (seed, file number,
record offset), and the output is all records sorted by key: a uniform random permutation,
the same for the same seed and input however the work was split or how many workers ran.
The key's top 32 bits pick its shard (`num_shards` equal key ranges) and its bucket
(`num_shards * buckets_per_shard` equal key ranges, each inside one shard); shard `s` is the
concatenation of its buckets in key order.

The machinery is mix's (`tfrecord_beam.jobs`, one external shuffle in the package):

1. Readers (one Beam element per input byte range) collect up to `buffer_bytes` of frames
   (the input's framing, copied, CRCs checked on reading), sort them by (shard, bucket, key)
   and append them as one *run* to the range's spill file (`RunSpiller`). Only one
   `SegmentTable` per (spill file, shard) goes to the GroupByKey: where the file's rows of
   (bucket, offset, records, bytes) for that shard are (appended to the file, sorted by bucket).
2. One writer per shard takes its buckets in order (`write_merged`): each bucket (expected
   size `buffer_bytes / 2`) is read back (CRCs checked again), ordered by key in memory and
   appended to the shard; a bucket that turns out larger than `buffer_bytes` (e.g. from
   compressed inputs) is first split by key quantiles through temporary files.

The count + order-independent checksum proof is read from the frames' CRC footers on both
sides (`_frames.digest`), so it costs almost nothing.
"""

from __future__ import annotations

import math
import uuid
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_beam import jobs
from tfrecord_beam._sizes import DEFAULT_BUFFER_BYTES
from tfrecord_beam.beam import _frames, _fs, _progress
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.beam._corrupt import CorruptRecord
from tfrecord_beam.records import ReadSpan
from tfrecord_beam.skipping import OnCorrupt, SkippingReader

COMPRESSED_GROWTH = 4  # assumed inflation of gzip/zlib inputs when sizing buckets
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
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

    def shards_of(self, keys: np.ndarray) -> np.ndarray:
        """The shard of each key (its top bits: equal key ranges, in key order)."""
        return jobs.bucket_of(keys, np.full(len(keys), self.num_shards, np.int64))


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
# Readers: runs into spill files


def bucket_runs(
    rng: _stages.FileRange,
    range_number: int,
    seed: int,
    plan: Plan,
    run_dir: str,
    coverage: Optional[list] = None,
    digests: Optional[list] = None,
    on_corrupt: Optional[OnCorrupt] = None,
    progress: Optional[_progress.ProgressFile] = None,
    skip_corrupt: bool = False,
) -> Iterator[Tuple[int, jobs.SegmentTable]]:
    """Read one range (CRCs checked) into one spill file of runs of at most about
    `plan.buffer_bytes` each; yield (shard, SegmentTable) per shard (all runs), and append the
    range's `Coverage` and `Digest` to the lists given. With `skip_corrupt` (--skip_corrupt)
    corrupt records are stepped over (`skipping.SkippingReader`) and reported to
    `on_corrupt(file, offset, reason)` instead of failing the read. `progress` counts the records
    and frame bytes read, chunk by chunk."""
    reader = SkippingReader(
        rng.path,
        # resync on every byte range of an uncompressed file, the first too (no search from 0):
        # it turns on the end check, which must run even where the range ends on a record
        # boundary, since a frame in the record before can move the next range's resync past one
        ReadSpan(
            rng.compression,
            verify=True,
            start_offset=rng.start,
            end_offset=rng.end,
            resync=rng.compression is None,
        ),
        open_file=lambda: _fs.open_input(rng.path),
        skip_corrupt=skip_corrupt,
        on_corrupt=on_corrupt,
    )
    key = file_key(seed, rng.file_number)
    # The shard is a key range, and every shard's buckets are numbered globally: the bucket of
    # a key among all `plan.buckets` lies inside its shard (floor(floor(x * N * P) / P) == floor(x * N)).
    spiller = jobs.RunSpiller(
        _run_path(run_dir),
        range_number,
        0,
        [plan.buckets] * plan.num_shards,
        _fs.atomic_output,
        run_bytes=plan.buffer_bytes,
    )
    total: _frames.Digest = (0, 0, 0)
    try:
        for chunk in reader.chunks():
            frames = _frames.frames_of_chunk(chunk)
            keys = record_keys(key, chunk.record_offsets)
            sizes = frames.sizes
            spiller.add(chunk.buffer, frames.starts, sizes, plan.shards_of(keys), keys)
            total = _frames.add(total, _frames.digest(frames.crcs(), frames.lengths))
            if progress is not None:
                progress.add(len(sizes), int(sizes.sum()))
        tables = spiller.close()
    except BaseException:
        spiller.abort()
        raise
    for table in tables:
        yield table.shard, table
    if coverage is not None:
        first = reader.start_offset
        size = _fs.file_size(rng.path) if rng.compression is None else None
        end = reader.end  # where its chain stopped: skipped spans count as covered (they were reported)
        coverage.append(_stages.Coverage(rng.path, rng.start, first, first if end is None else end, size))
    if digests is not None:
        digests.append(total)


def _run_path(run_dir: str) -> str:
    # A fresh name per attempt: a retried bundle never writes over a run another attempt made.
    return _fs.join(run_dir, f"run-{uuid.uuid4().hex}")


# ---------------------------------------------------------------------------------------------
# Writers: buckets into shards


def scratch(work_dir: str) -> jobs.Scratch:
    """Where a shard writer splits buckets too large for its buffer (Beam's filesystems)."""

    def remove(directory: str) -> None:
        if _fs.exists(directory):
            _fs.delete([directory])

    return jobs.Scratch(work_dir, _fs.create, remove)  # each split makes (and removes) its own directory


def write_shuffled_shard(
    spec: _stages.ShardSpec,
    plan: Plan,
    shard: int,
    tables: Iterable[jobs.SegmentTable],
    work_dir: str,
    progress_dir: Optional[str] = None,
) -> dict:
    """Write one shard from the segment tables of its buckets (in key order); returns its stats
    (and counts them in the "write" progress phase)."""
    name = spec.name(shard)
    index_path = spec.path(spec.index_name(shard)) if spec.write_index else None
    with _fs.record_writer(spec.path(name), spec.compression, index_path=index_path) as writer:
        meant, _ = jobs.write_merged(
            list(tables), writer, _fs.open_input, max_bytes=plan.buffer_bytes, scratch=scratch(work_dir)
        )
    # the proof is of what the writer wrote (its frames' footers), its file's size checked
    written, file_bytes = jobs.check_written(spec.path(name), writer, _fs.file_size, meant=meant)
    result = {
        "shard": shard,
        "name": name,
        "records": written[0],
        "bytes": written[1],
        "checksum": written[2],
        "file_bytes": file_bytes,
        "groups": [written[0]],
    }
    _stages.write_result(spec.path("_results"), f"shard-{shard:05d}.json", result)
    counter = _progress.ProgressFile(progress_dir, "write", f"{shard:05d}")
    counter.add(written[0], written[1])
    counter.flush()
    return result


# ---------------------------------------------------------------------------------------------
# Beam wiring


class _BucketRuns(beam.DoFn):
    """(range number, FileRange) -> (shard, SegmentTable) pairs; COVERAGE and DIGEST side outputs."""

    def __init__(
        self, seed: int, plan: Plan, run_dir: str, skip_corrupt: bool = False, progress_dir: Optional[str] = None
    ) -> None:
        self.seed, self.plan, self.run_dir, self.skip_corrupt = seed, plan, run_dir, skip_corrupt
        self.progress_dir = progress_dir

    def process(self, element):
        number, rng = element
        coverage: list = []
        digests: list = []
        bad: List[CorruptRecord] = []
        counter = _progress.ProgressFile(self.progress_dir, "bucket", f"{number:06d}")
        parts = bucket_runs(
            rng,
            number,
            self.seed,
            self.plan,
            self.run_dir,
            coverage,
            digests,
            on_corrupt=lambda f, o, r: bad.append(CorruptRecord(f, o, r)),
            progress=counter,
            skip_corrupt=self.skip_corrupt,
        )
        for part in parts:
            yield part
            yield from (beam.pvalue.TaggedOutput(_stages.CORRUPT, record) for record in bad)
            bad.clear()
        yield from (beam.pvalue.TaggedOutput(_stages.CORRUPT, record) for record in bad)
        counter.flush()
        for c in coverage:
            yield beam.pvalue.TaggedOutput(_stages.COVERAGE, c)
        for d in digests:
            yield beam.pvalue.TaggedOutput(DIGEST, d)


def shuffle_to_shards(
    p,
    ranges: Sequence[_stages.FileRange],
    spec: _stages.ShardSpec,
    seed: int,
    plan: Plan,
    work_dir: str,
    verify: bool = True,
    label: str = "Shuffle",
    dead_letters=None,
    progress_dir: Optional[str] = None,
    what: str = "shuffle",
    skip_corrupt: bool = False,
):
    """Shuffle the records of `ranges` into `spec`'s shards; PCollection of the shards' result
    dicts. With `verify`, the pipeline fails unless the shards hold exactly the input records.
    With `skip_corrupt` (--skip_corrupt) corrupt records and spans no range read are written
    to `dead_letters` (a `commit.DeadLetters`) instead of failing the pipeline; the rest is
    shuffled.
    `progress_dir` (a `_progress` reporter's directory): readers count into phase "bucket",
    shard writers into "write". `what` names the step in a failed check's message."""
    run_dir = _fs.join(work_dir, "runs")
    letters = _stages.dead_letters_for(skip_corrupt, dead_letters)
    outs = (
        p
        | f"{label}Plan" >> beam.Create(list(enumerate(ranges)))  # Create spreads its elements
        | f"{label}Runs"
        >> beam.ParDo(_BucketRuns(seed, plan, run_dir, skip_corrupt, progress_dir)).with_outputs(
            _stages.COVERAGE, DIGEST, _stages.CORRUPT, main="parts"
        )
    )
    gaps = _stages.check_coverages(outs[_stages.COVERAGE], label, skip_corrupt)
    if letters is not None:
        corrupt = (outs[_stages.CORRUPT], gaps) | f"{label}AllCorrupt" >> beam.Flatten()
        letters.write(corrupt, f"{label}DeadLetters")
    results = (
        outs.parts
        | f"{label}GroupByShard" >> beam.GroupByKey()
        | f"{label}WriteShards"
        >> beam.MapTuple(lambda shard, tables: write_shuffled_shard(spec, plan, shard, tables, work_dir, progress_dir))
    )
    if verify:
        _stages.verify_digests(p, outs[DIGEST], results, spec, what, label=f"{label}Verify")
    return results
