"""Batched Beam stages for whole-dataset jobs (the `pipelines` are thin CLIs over them).

Read TFRecord byte ranges in chunks with deterministic order keys and a proof that the
ranges tile every file, route records to output shards (round robin, seeded keys), write
shards (+ .tfindex) into a staging directory, and checksum payloads order-independently so a
job can prove its output holds exactly its input.

Records travel in batches (one Beam element per chunk of records, not per record): the
per-element cost of a runner is paid once per ~thousand records. `ReadFromTFRecord` /
`WriteToTFRecord` are the per-record (or per-list) IO for general pipelines.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_beam import digest as _digest
from tfrecord_beam.skipping import SkippingReader
from tfrecord_beam.index import default_index_path
from tfrecord_beam.records import resolve_compression

from . import _fs
from ._corrupt import CorruptRecord

DEFAULT_SPLIT_BYTES = 64 << 20
_MASK64 = (1 << 64) - 1


class FileRange(NamedTuple):
    """Records whose header starts in [start, end) of one file (end None: to the end)."""

    path: str
    start: int
    end: Optional[int]
    compression: Optional[str]
    file_number: int  # position of the file in the job's sorted input list
    group: int = 0  # which --source (mix) the file belongs to


def plan_ranges(files: Sequence[str], split_bytes: int = DEFAULT_SPLIT_BYTES,
                compression: Optional[str] = "auto", groups: Optional[Sequence[int]] = None) -> List[FileRange]:
    """Byte ranges covering every file: uncompressed files split every `split_bytes`, others whole."""
    out = []
    for number, path in enumerate(files):
        kind = resolve_compression(path, compression)
        size = _fs.file_size(path)
        group = groups[number] if groups is not None else 0
        if kind is not None or size <= split_bytes:
            out.append(FileRange(path, 0, None, kind, number, group))
            continue
        starts = list(range(0, size, split_bytes))
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            out.append(FileRange(path, start, end, kind, number, group))
    return out


class Batch(NamedTuple):
    """A chunk of records read from one range: `order` sorts batches deterministically."""

    order: Tuple[int, int, int]  # (file number, range start, chunk number)
    record_offsets: np.ndarray
    payloads: List[bytes]
    group: int


class Coverage(NamedTuple):
    """Which bytes a range's records covered: [first, end) in the uncompressed stream."""

    path: str
    range_start: int
    first: int  # where the first record read starts (after resync)
    end: int  # where the last record read ends (== first when none)
    size: Optional[int]  # file size for uncompressed files, else None


def read_range(rng: FileRange, verify: bool = True, coverage: Optional[list] = None,
               on_corrupt=None) -> Iterator[Batch]:
    """The records of a range as Batches (CRCs checked; corrupt data raises CorruptRecordError,
    or with `on_corrupt(file, offset, reason)` is reported and skipped: `--skip_corrupt`).

    When `coverage` is a list, a `Coverage` is appended to it at the end, so the caller can
    check that the ranges of a file tile it without gaps (`check_coverage`): a range start
    that resynchronised past a damaged record would otherwise skip it silently. Skipped
    spans count as covered (they were reported).
    """
    reader = SkippingReader(
        rng.path, rng.compression, open_file=lambda: _fs.open_input(rng.path), verify=verify,
        start_offset=rng.start, end_offset=rng.end,
        resync=rng.compression is None,  # also checks the split point at the end
        skip_corrupt=on_corrupt is not None, on_corrupt=on_corrupt,
    )
    for number, chunk in enumerate(reader.chunks()):
        yield Batch((rng.file_number, rng.start, number), chunk.record_offsets, chunk.payloads(), rng.group)
    if coverage is not None:
        first = reader.start_offset
        size = _fs.file_size(rng.path) if rng.compression is None else None
        coverage.append(Coverage(rng.path, rng.start, first, first if reader.end is None else reader.end, size))


def check_coverage(path: str, parts: Iterable[Coverage], skip_corrupt: bool = False) -> List[CorruptRecord]:
    """Raise CorruptRecordError unless the ranges' records tile the file from 0 to its end;
    with `skip_corrupt`, return each gap as a CorruptRecord instead."""
    from tfrecord_beam.errors import CorruptRecordError, SplitPointError

    gaps: List[CorruptRecord] = []

    def gap(start: int, stop: int, why: str) -> None:
        if not skip_corrupt:
            raise CorruptRecordError(path, start, None, f"bytes {start}..{stop} hold no readable record ({why})")
        gaps.append(CorruptRecord(path, start, f"bytes {start}..{stop} hold no readable record ({why}); skipped"))

    pos = 0
    size = None
    for part in sorted(parts, key=lambda c: c.range_start):
        size = part.size
        if part.end == part.first:
            continue  # no record starts in this range
        if part.first > pos:
            gap(pos, part.first, "corrupt data at a split point")
        if part.first < pos:
            raise SplitPointError(
                path, part.first, None,
                f"the range from byte offset {part.range_start} starts reading at {part.first}, inside the "
                f"record that the range before it read up to {pos}: a payload embeds record-like frames, so "
                "this file needs an index to be split",
            )
        pos = part.end
    if size is not None and pos != size:
        gap(pos, size, "corrupt or truncated")
    return gaps


# One checksum for jobs, manifests and readers: tfrecord_beam.digest.
payload_digest, add_digests, combine_digests = _digest.payload_digest, _digest.add_digests, _digest.combine_digests


def seeded_keys(seed: int, *parts: int, size: int) -> np.ndarray:
    """`size` random uint64 keys, a pure function of (seed, parts): same input, same keys."""
    rng = np.random.default_rng([seed & _MASK64, *[int(p) & _MASK64 for p in parts]])
    return rng.integers(0, np.iinfo(np.uint64).max, size=size, dtype=np.uint64, endpoint=True)


def stable_id(text: str) -> int:
    """A 64-bit number for a string that is the same in every process (unlike hash())."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class Routed(NamedTuple):
    """Records of one batch bound for one shard, packed into one bytes object plus lengths
    (a runner moves two objects through its shuffle instead of thousands)."""

    order: tuple
    keys: Optional[np.ndarray]  # shuffle keys (sorted within the shard), or None
    data: bytes
    lengths: np.ndarray
    group: int

    def payloads(self) -> List[bytes]:
        ends = np.cumsum(self.lengths).tolist()
        starts = [0] + ends[:-1]
        data = self.data
        return [data[a:b] for a, b in zip(starts, ends)]


def route(batch: Batch, shard_of: np.ndarray, keys: Optional[np.ndarray]) -> Iterator[Tuple[int, Routed]]:
    """Split a batch by destination shard (vectorised)."""
    if not batch.payloads:
        return
    order = np.argsort(shard_of, kind="stable")
    bounds = np.flatnonzero(np.diff(shard_of[order])) + 1
    for part in np.split(order, bounds):
        shard = int(shard_of[part[0]])
        payloads = [batch.payloads[i] for i in part.tolist()]
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        yield shard, Routed(batch.order, None if keys is None else keys[part], b"".join(payloads), lengths, batch.group)


def round_robin(batch: Batch, num_shards: int, by: str = "records", stripe_bytes: int = 1 << 16) -> np.ndarray:
    """Destination shard of each record: consecutive records (or byte stripes) go to consecutive
    shards, starting at a shard that depends on where the batch came from."""
    n = len(batch.payloads)
    start = stable_id(repr(batch.order)) % num_shards
    if by == "bytes":
        ends = np.cumsum(np.fromiter((len(p) + 16 for p in batch.payloads), dtype=np.int64, count=n))
        return ((ends - 1) // stripe_bytes + start) % num_shards
    return (np.arange(n, dtype=np.int64) + start) % num_shards


def shard_name(prefix: str, shard: int, num_shards: int, suffix: str) -> str:
    """Beam's default shard template: PREFIX-SSSSS-of-NNNNN SUFFIX."""
    return f"{prefix}-{shard:05d}-of-{num_shards:05d}{suffix}"


@dataclass
class ShardSpec:
    """How shard files are named and written inside the staging directory."""

    temp_dir: str
    prefix: str  # file name prefix (no directory)
    num_shards: int
    suffix: str = ".tfrecord"
    compression: Optional[str] = None
    write_index: bool = True
    checksum: bool = True  # fingerprint-sum the payloads written (reshard / mix prove their output)

    def name(self, shard: int) -> str:
        return shard_name(self.prefix, shard, self.num_shards, self.suffix)

    def index_name(self, shard: int) -> str:
        return os.path.basename(default_index_path(self.name(shard)))

    def path(self, name: str) -> str:
        return self.temp_dir.rstrip("/") + "/" + name

    def names(self, shard: int) -> List[str]:
        return [self.name(shard)] + ([self.index_name(shard)] if self.write_index else [])


def write_shard(spec: ShardSpec, shard: int, parts: Iterable[Routed], shuffled: bool) -> dict:
    """Write one shard (and its index) from its routed parts; returns its stats as a dict.

    Parts are written in a deterministic order: by their `order` key, or by shuffle key
    when `shuffled` (each record sorted by its own key).
    """
    parts = sorted(parts, key=lambda r: r.order)
    payloads = [p for r in parts for p in r.payloads()]
    if shuffled and parts:
        keys = np.concatenate([r.keys for r in parts])
        payloads = [payloads[i] for i in np.argsort(keys, kind="stable").tolist()]
    groups = np.repeat(np.asarray([r.group for r in parts], dtype=np.int64), [len(r.lengths) for r in parts])
    group_counts = np.bincount(groups) if len(groups) else np.zeros(0, np.int64)
    name = spec.name(shard)
    index_path = spec.path(spec.index_name(shard)) if spec.write_index else None
    with _fs.record_writer(spec.path(name), spec.compression, index_path=index_path) as writer:
        for start in range(0, len(payloads), 4096):
            writer.write_many(payloads[start : start + 4096])
    if spec.checksum:
        records, size, checksum = payload_digest(payloads)
    else:
        records, size, checksum = len(payloads), sum(map(len, payloads)), 0
    result = {
        "shard": shard, "name": name, "records": records, "bytes": size, "checksum": checksum,
        "file_bytes": _fs.file_size(spec.path(name)), "groups": [int(c) for c in group_counts],
    }
    write_result(spec.path("_results"), f"shard-{shard:05d}.json", result)
    return result


def write_empty_shards(spec: ShardSpec, done: Sequence[int]) -> List[dict]:
    """Shards that got no records still exist (empty), as Beam's own sinks do."""
    return [write_shard(spec, s, [], False) for s in range(spec.num_shards) if s not in set(done)]


def write_result(directory: str, name: str, value: dict) -> None:
    """A task's small JSON result (a shard's counts and digest, a plan's totals) as `name` under
    `directory`: results go to files, not through the pipeline, so the driver reads them after
    the run (`read_results`) without a collect step. Each task writes its own name."""
    _fs.mkdirs(directory)
    _fs.write_bytes(directory + "/" + name, json.dumps(value).encode("utf-8"))


def read_results(directory: str) -> List[dict]:
    """Every result `write_result` wrote under `directory` (any order; [] when none)."""
    return [json.loads(_fs.read_bytes(found.path).decode("utf-8")) for found in _fs.match(directory + "/*.json")]


class ChecksumMismatch(Exception):
    """The output does not hold exactly the records the job meant to write."""


def check_digests(expected: Tuple[int, int, int], written: Tuple[int, int, int], what: str) -> None:
    """Raise ChecksumMismatch unless the two (records, bytes, checksum) triples are equal."""
    if tuple(expected) != tuple(written):
        raise ChecksumMismatch(
            f"{what}: expected {expected[0]} records / {expected[1]} bytes / checksum {expected[2]:016x}, "
            f"wrote {written[0]} / {written[1]} / {written[2]:016x}"
        )


# ---------------------------------------------------------------------------------------------
# Beam wiring

COVERAGE = "coverage"
CORRUPT = "corrupt"


class _ReadRanges(beam.DoFn):
    """FileRange -> Batches (main output), one Coverage per range (COVERAGE output) and, with
    `skip_corrupt`, the records skipped (CORRUPT output)."""

    def __init__(self, verify: bool, skip_corrupt: bool = False) -> None:
        self.verify, self.skip_corrupt = verify, skip_corrupt

    def process(self, rng):
        cov: list = []
        bad: List[CorruptRecord] = []
        report = (lambda f, o, r: bad.append(CorruptRecord(f, o, r))) if self.skip_corrupt else None
        for batch in read_range(rng, self.verify, cov, report):
            yield batch
            while bad:
                yield beam.pvalue.TaggedOutput(CORRUPT, bad.pop(0))
        for record in bad:
            yield beam.pvalue.TaggedOutput(CORRUPT, record)
        for c in cov:
            yield beam.pvalue.TaggedOutput(COVERAGE, c)


def read_batches(p, ranges: Sequence[FileRange], verify: bool = True, label: str = "Read", dead_letters=None):
    """PCollection of Batches from the ranges; the pipeline fails if a file is not fully covered.

    With `dead_letters` (a `commit.DeadLetters`), corrupt records and uncovered spans are
    skipped and written there instead of failing the pipeline (`--skip_corrupt`).
    """
    skip = dead_letters is not None
    outs = (
        p
        | f"{label}Plan" >> beam.Create(list(ranges))
        | f"{label}Spread" >> beam.Reshuffle()
        | f"{label}Records" >> beam.ParDo(_ReadRanges(verify, skip)).with_outputs(COVERAGE, CORRUPT, main="batches")
    )
    gaps = check_coverages(outs[COVERAGE], label, skip)
    if skip:
        corrupt = (outs[CORRUPT], gaps) | f"{label}AllCorrupt" >> beam.Flatten()
        dead_letters.write(corrupt, f"{label}DeadLetters")
    return outs.batches


def check_coverages(coverages, label: str = "Read", skip_corrupt: bool = False):
    """Fail the pipeline when the ranges read of some file leave a gap (see `check_coverage`);
    with `skip_corrupt`, return the gaps as a PCollection of CorruptRecords instead."""
    return (
        coverages
        | f"{label}CoverageByFile" >> beam.Map(lambda c: (c.path, c))
        | f"{label}GroupCoverage" >> beam.GroupByKey()
        | f"{label}CheckCoverage" >> beam.FlatMapTuple(lambda path, parts: check_coverage(path, parts, skip_corrupt))
    )


def write_shards(routed, spec: ShardSpec, shuffled: bool, label: str = "Write"):
    """(shard, Routed) pairs -> shard files in the staging dir; PCollection of result dicts."""
    return (
        routed
        | f"{label}GroupByShard" >> beam.GroupByKey()
        | f"{label}Shards" >> beam.MapTuple(lambda shard, parts: write_shard(spec, shard, parts, shuffled))
    )


def verify_digests(p, expected, results, spec: ShardSpec, what: str, label: str = "Verify") -> None:
    """Compare the digest of what should be written with what the shard writers wrote.

    `expected` is a PCollection of (records, bytes, checksum) triples. The comparison runs
    inside the pipeline (a mismatch fails it) and is saved as `_check.json` for the summary.
    """
    exp = expected | f"{label}Expected" >> beam.CombineGlobally(combine_digests)
    got = (
        results
        | f"{label}Digests" >> beam.Map(lambda r: (r["records"], r["bytes"], r["checksum"]))
        | f"{label}Written" >> beam.CombineGlobally(combine_digests)
    )

    def check(_, expected_digest, written_digest):
        check_digests(expected_digest, written_digest, what)
        write_result(spec.path("_results"), "check.json",
                      {"expected": list(expected_digest), "written": list(written_digest)})

    _ = (
        p
        | f"{label}Start" >> beam.Create([None])
        | f"{label}Check" >> beam.Map(check, beam.pvalue.AsSingleton(exp), beam.pvalue.AsSingleton(got))
    )
