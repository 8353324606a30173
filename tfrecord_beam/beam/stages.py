"""Beam stages shared by the whole-dataset jobs (the `pipelines` are thin CLIs over them).

Byte ranges of input files (`plan_ranges`, read by the external shuffle and tfrecord_to_parquet)
and the proof that the ranges read tile every file (`Coverage`, `check_coverages`); how shard
files are named inside the staging directory (`ShardSpec`); the writers' results saved for the
summary; and the count + order-independent checksum comparison of what a job meant to write
with what its writers wrote (`verify_digests`). Planned copies live in `planned.py`, the
external shuffle in `shuffle.py`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_beam import digest as _digest
from tfrecord_beam import jobs as _jobs
from tfrecord_beam._sizes import DEFAULT_SPLIT_BYTES
from tfrecord_beam.compression import resolve as resolve_compression
from tfrecord_beam.index import default_index_path

from . import _fs
from ._corrupt import CorruptRecord

_MASK64 = (1 << 64) - 1


class FileRange(NamedTuple):
    """Records whose header starts in [start, end) of one file (end None: to the end)."""

    path: str
    start: int
    end: Optional[int]
    compression: Optional[str]
    file_number: int  # position of the file in the job's sorted input list
    group: int = 0  # which --source (mix) the file belongs to


def plan_ranges(
    files: Sequence[str],
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    compression: Optional[str] = "auto",
    groups: Optional[Sequence[int]] = None,
) -> List[FileRange]:
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


class Coverage(NamedTuple):
    """Which bytes a range's records covered: [first, end) in the uncompressed stream."""

    path: str
    range_start: int
    first: int  # where the first record read starts (after resync)
    end: int  # where the last record read ends (== first when none)
    size: Optional[int]  # file size for uncompressed files, else None


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
                path,
                part.first,
                None,
                f"the range from byte offset {part.range_start} starts reading at {part.first}, inside the "
                f"record that the range before it read up to {pos}: a payload embeds record-like frames, so "
                "this file needs an index to be split",
            )
        pos = part.end
    if size is not None and pos != size:
        gap(pos, size, "corrupt or truncated")
    return gaps


# One checksum for jobs, manifests and readers: tfrecord_beam.digest.
combine_digests = _digest.combine_digests


def seeded_keys(seed: int, *parts: int, size: int) -> np.ndarray:
    """`size` random uint64 keys, a pure function of (seed, parts): same input, same keys."""
    rng = np.random.default_rng([seed & _MASK64, *[int(p) & _MASK64 for p in parts]])
    return rng.integers(0, np.iinfo(np.uint64).max, size=size, dtype=np.uint64, endpoint=True)


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


def write_empty_shards(spec: ShardSpec, done: Sequence[int]) -> List[dict]:
    """Shards that got no records still exist (empty, with their index), as Beam's own sinks do."""
    out = []
    for shard in sorted(set(range(spec.num_shards)) - set(done)):
        name = spec.name(shard)
        index_path = spec.path(spec.index_name(shard)) if spec.write_index else None
        with _fs.record_writer(spec.path(name), spec.compression, index_path=index_path):
            pass
        result = {
            "shard": shard,
            "name": name,
            "records": 0,
            "bytes": 0,
            "checksum": 0,
            "file_bytes": _fs.file_size(spec.path(name)),
            "groups": [],
        }
        write_result(spec.path("_results"), f"shard-{shard:05d}.json", result)
        out.append(result)
    return out


def write_result(directory: str, name: str, value: dict) -> None:
    """A task's small JSON result (a shard's counts and digest, a plan's totals) as `name` under
    `directory`: results go to files, not through the pipeline, so the driver reads them after
    the run (`read_results`) without a collect step. Each task writes its own name."""
    _fs.mkdirs(directory)
    _fs.write_bytes(directory + "/" + name, json.dumps(value).encode("utf-8"))


def read_results(directory: str) -> List[dict]:
    """Every result `write_result` wrote under `directory` (any order; [] when none)."""
    return [
        json.loads(_fs.read_bytes(found.path).decode("utf-8")) for found in _fs.match(_fs.escape(directory) + "/*.json")
    ]


ChecksumMismatch = _jobs.ChecksumMismatch  # the output does not hold exactly the records meant


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


def dead_letters_for(skip_corrupt: bool, dead_letters):
    """The dead-letter writer a stage writes its skipped records to: `dead_letters` with
    `skip_corrupt`, None without it. `skip_corrupt` (a bool, from the job's flag unchanged) says
    whether corrupt records are stepped over; `dead_letters` (a `commit.DeadLetters`) only where
    they are listed. `skip_corrupt` without `dead_letters` is refused (skipped records would go
    nowhere); `dead_letters` without `skip_corrupt` is ignored: jobs pass their output's writer
    always, and `dead_letters` alone no longer turns skipping on (it did before skip_corrupt)."""
    if skip_corrupt and dead_letters is None:
        raise ValueError("skip_corrupt=True needs dead_letters (a commit.DeadLetters): where skipped records go")
    return dead_letters if skip_corrupt else None


def check_coverages(coverages, label: str = "Read", skip_corrupt: bool = False):
    """Fail the pipeline when the ranges read of some file leave a gap (see `check_coverage`);
    with `skip_corrupt`, return the gaps as a PCollection of CorruptRecords instead."""
    return (
        coverages
        | f"{label}CoverageByFile" >> beam.Map(lambda c: (c.path, c))
        | f"{label}GroupCoverage" >> beam.GroupByKey()
        | f"{label}CheckCoverage" >> beam.FlatMapTuple(lambda path, parts: check_coverage(path, parts, skip_corrupt))
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
        write_result(
            spec.path("_results"), "check.json", {"expected": list(expected_digest), "written": list(written_digest)}
        )

    _ = (
        p
        | f"{label}Start" >> beam.Create([None])
        | f"{label}Check" >> beam.Map(check, beam.pvalue.AsSingleton(exp), beam.pvalue.AsSingleton(got))
    )
