"""Mix TFRecord sources by weight into N shuffled shards, with .tfindex files and a JSON manifest.

Each `--source GLOB=WEIGHT` gets exactly round(N * w / sum(w)) records (largest-remainder
rounding, so counts are within 1 of that and add up to N). A source with at least that many
records is sampled without replacement; a smaller one is repeated: every record
floor(count / available) times, plus a sample without replacement of the remainder. The
selection and the order are a pure function of `--seed` and the inputs; `--until_exhausted`
instead of `--total_records` takes the largest total needing no repetition (the first source
to run out is used whole); records of all
sources are interleaved across the output shards (every shard gets an equal share of every
source, within one record) and shuffled within each shard. The pipeline checks
(count + order-independent checksum) that the shards hold exactly the selected records.

How, in memory that does not grow with the data: the inputs' headers are walked first (record
counts and checkpoints, no payloads read); the selection is planned per block of at most
65,536 records (how many of a source's sampled records fall in each block is drawn
hypergeometrically, then which ones inside the block); readers copy the selected framed
records into temporary runs sorted by (shard, bucket, random key); each shard is written
bucket by bucket in key order (a uniform shuffle, `tfrecord_beam.jobs`).

With --skip_corrupt the survey reads every byte (both CRCs checked) and steps over corrupt
records, which are listed in OUTPUT_DIR/_CORRUPT.NAME.jsonl and counted in the summary and
the manifest; a source's available records are its intact ones, and only those are selected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, NamedTuple, Optional, Sequence, Tuple

from tfrecord_beam import jobtools

from . import _args, _reshard_shuffle

EXAMPLES = """\
  python -m pipelines.mix --source 'web/*.tfrecord=0.7' --source 'books/*.tfrecord=0.3' \\
      --total_records 1000000 --output_prefix out/mix --num_shards 8 --seed 1
  python -m pipelines.mix --source 'a/*.tfrecord=1' --source 'b/*.tfrecord=1' --until_exhausted --output_prefix out/even
  python -m pipelines.mix --source 'gs://b/a/*=2' --source 'gs://b/b/*=1' --total_records 50000 \\
      --output_prefix gs://b/mixed --num_shards 4 --runner=DataflowRunner ...
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _args.make_parser("mix", __doc__, EXAMPLES)
    parser.add_argument(
        "--source",
        action="append",
        required=True,
        metavar="GLOB=WEIGHT",
        help="a source glob and its weight (> 0); repeatable",
    )
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--total_records", type=jobtools.positive_int, help="records in the output (at least 1)")
    size.add_argument(
        "--until_exhausted",
        action="store_true",
        help="as many records as possible with no repetition: stop when the first source runs out",
    )
    parser.add_argument("--output_prefix", required=True, help="output path prefix")
    parser.add_argument("--num_shards", type=jobtools.positive_int, default=1, help="output shards (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the selection and the order")
    _args.add_input_compression(parser)
    _args.add_output_compression(parser)
    parser.add_argument("--manifest", default=None, help="manifest path (default OUTPUT_PREFIX.manifest.json)")
    parser.add_argument("--no_index", action="store_true", help="do not write .tfindex files")
    _reshard_shuffle.add_arguments(parser, when="")
    return parser


# `python -m pipelines.mix --help` answers here, before Beam is imported
_args.parse_then_load(__name__, build_parser)

import apache_beam as beam
import numpy as np

from tfrecord_beam import fs, jobs
from tfrecord_beam.beam import jobio
from tfrecord_beam.beam import planned as _planned
from tfrecord_beam.beam import shuffle as _shuffle
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.jobs import FileSurvey, Piece, add_digests, frame_digest, piece_chunks
from tfrecord_beam.jobtools import DEFAULT_BUFFER_BYTES

from . import _common
from ._common import JobError, Summary


def parse_sources(items: Sequence[str]) -> List[Tuple[str, float]]:
    """[(glob, weight)] from GLOB=WEIGHT strings; JobError for a malformed or non-positive weight."""
    out = []
    for glob, weight in _common.parse_kv(items, "--source", "GLOB=WEIGHT"):
        try:
            w = float(weight)
        except ValueError:
            raise JobError(f"--source {glob}={weight}: the weight must be a number") from None
        if not np.isfinite(w) or w <= 0:
            raise JobError(f"--source {glob}={weight}: the weight must be a positive number")
        out.append((glob, w))
    return out


def allocate(total: int, weights: Sequence[float]) -> List[int]:
    """Largest-remainder rounding of total * w / sum(w): each within 1 of its share, summing to total."""
    w = np.asarray(weights, dtype=np.float64)
    shares = total * w / w.sum()
    counts = np.floor(shares).astype(np.int64)
    short = total - int(counts.sum())
    if short:
        order = np.argsort(-(shares - counts), kind="stable")
        counts[order[:short]] += 1
    return counts.tolist()


def exhausting_total(available: Sequence[int], weights: Sequence[float]) -> int:
    """The largest total for which no source needs more records than it has (stop at the first
    exhausted source): min over sources of floor(available_i * sum(w) / w_i)."""
    total_weight = float(sum(weights))
    n = min(int(np.floor(a * total_weight / w + 1e-9)) for a, w in zip(available, weights))
    while n > 0 and any(c > a for c, a in zip(allocate(n, weights), available)):
        n -= 1  # guard against float rounding at the boundary
    return n


BLOCK_TAG = 0x6D6978  # "mix": separates the selection's random streams from the keys'
KEY_TAG = 0x6B6579  # "key"
TASK_BYTES = 64 << 20  # input bytes per reader task


def block_extras(seed: int, source: int, block_sizes: Sequence[int], rest: int) -> np.ndarray:
    """How many of a source's `rest` records sampled without replacement fall in each block
    (exactly `rest` in all): sequential hypergeometric draws, a pure function of the seed."""
    rng = np.random.default_rng([seed & ((1 << 64) - 1), BLOCK_TAG, source])
    left_n, left_k = int(sum(block_sizes)), int(rest)
    out = np.zeros(len(block_sizes), dtype=np.int64)
    for i, n in enumerate(block_sizes):
        if left_k <= 0:
            break
        if n >= left_n:
            k = left_k
        elif left_n < 10**9:
            k = int(rng.hypergeometric(n, left_n - n, left_k))
        else:  # numpy's hypergeometric stops at 1e9: a binomial draw, clamped to what is possible
            k = int(rng.binomial(left_k, n / left_n))
        k = min(max(k, left_k - (left_n - n), 0), n, left_k)
        out[i] = k
        left_n -= n
        left_k -= k
    return out


def block_taken(seed: int, source: int, block: Tuple[int, int], n: int, extra: int, full: int) -> np.ndarray:
    """How many times each of a block's n records is taken: `full` each, plus 1 for `extra`
    of them chosen without replacement (block = (file number, block number))."""
    rng = np.random.default_rng([seed & ((1 << 64) - 1), BLOCK_TAG, source, block[0], block[1]])
    taken = np.full(n, full, dtype=np.int64)
    if extra:
        taken[rng.choice(n, extra, replace=False)] += 1
    return taken


def selection(seed: int, source: int, available: int, wanted: int) -> np.ndarray:
    """How many times each of `available` records (one block) is taken, `wanted` in all."""
    if wanted and not available:
        raise JobError(f"source {source} has no records but {wanted} were asked of it")
    full, rest = divmod(wanted, available) if available else (0, 0)
    return block_taken(seed, source, (0, 0), available, rest, full)


class Block(NamedTuple):
    """Records [first, first + n) of one file, read from `offset`, and what is taken of them."""

    file_number: int
    number: int  # block number inside the file
    path: str
    compression: Optional[str]
    first: int
    n: int
    offset: int
    size: int  # bytes of the block's frames
    extra: int  # records sampled once more than `full`
    occurrence: int  # number (within the source) of the block's first selected occurrence
    skip_corrupt: bool = False  # surveyed by a skipping walk: read the same way (see _plan)


class Task(NamedTuple):
    """Consecutive blocks of one source, read by one worker."""

    number: int
    group: int
    blocks: List[Block]
    full: int  # every record of the source is taken `full` times (+1 if sampled)
    shard_offset: int  # occurrence k of the source goes to shard (k + shard_offset) % num_shards
    buckets: int  # buckets per shard


def plan_mix(
    surveys: List[FileSurvey],
    weights: Sequence[float],
    wanted: Optional[List[int]],
    seed: int,
    num_shards: int,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
) -> Tuple[List[Task], List[int], List[int]]:
    """Reader tasks, available and wanted records per source, from the surveys alone. A shard's
    buckets hold about `buffer_bytes / 2` each, as reshard --shuffle's (`shuffle.plan_buckets`):
    the number of buckets changes the work, never the output (a shard is its records in key order)."""
    groups = len(weights)
    available = [0] * groups
    mean = [0.0] * groups
    for s in surveys:
        available[s.group] += s.records
        mean[s.group] += s.stream_bytes
    mean = [b / a if a else 0.0 for b, a in zip(mean, available)]
    if wanted is None:  # --until_exhausted
        wanted = allocate(exhausting_total(available, weights), weights)
    for g in range(groups):
        if wanted[g] and not available[g]:
            raise JobError(f"source {g} has no records but {wanted[g]} were asked of it")
    shard_bytes = sum(w * m for w, m in zip(wanted, mean)) / num_shards
    buckets = jobs.buckets_for(shard_bytes, buffer_bytes // 2)
    offsets = np.concatenate([[0], np.cumsum(wanted)[:-1]]).astype(np.int64)
    tasks: List[Task] = []
    for g in range(groups):
        blocks = _source_blocks(surveys, g)
        full, rest = divmod(wanted[g], available[g]) if available[g] else (0, 0)
        extras = block_extras(seed, g, [blk[3] for blk in blocks], rest)
        tasks += _source_tasks(len(tasks), g, blocks, extras.tolist(), full, int(offsets[g]), buckets)
    return tasks, available, wanted


_RawBlock = Tuple[FileSurvey, int, int, int, int, int]  # (survey, block number, first, n, offset, size)


def _source_blocks(surveys: List[FileSurvey], group: int) -> List[_RawBlock]:
    """The non-empty blocks (between consecutive checkpoints) of one source's files, in file order."""
    files = sorted((s for s in surveys if s.group == group), key=lambda s: s.file_number)
    blocks = []
    for s in files:
        points = s.checkpoints + [(s.records, s.stream_bytes)]
        for b, ((first, offset), (nxt, end)) in enumerate(zip(points[:-1], points[1:])):
            if nxt > first:
                blocks.append((s, b, first, nxt - first, offset, end - offset))
    return blocks


def _source_tasks(
    first_task: int, group: int, blocks: List[_RawBlock], extras: List[int], full: int, shard_offset: int, buckets: int
) -> List[Task]:
    """One source's blocks that give records (`full` each, plus `extras`), cut into reader
    tasks of about TASK_BYTES, numbered from `first_task`; each block knows its first occurrence."""
    tasks: List[Task] = []
    occurrence = 0
    current: List[Block] = []
    current_bytes = 0
    for (s, b, first, n, offset, size), extra in zip(blocks, extras):
        if full == 0 and extra == 0:
            continue  # nothing taken from this block: not even read
        current.append(
            Block(s.file_number, b, s.path, s.compression, first, n, offset, size, extra, occurrence, s.skip_corrupt)
        )
        occurrence += full * n + extra
        current_bytes += size
        if current_bytes >= TASK_BYTES:
            tasks.append(Task(first_task + len(tasks), group, current, full, shard_offset, buckets))
            current, current_bytes = [], 0
    if current:
        tasks.append(Task(first_task + len(tasks), group, current, full, shard_offset, buckets))
    return tasks


class SelectFn(beam.DoFn):
    """Reads a task's blocks, copies the selected records into a spill file of keyed runs of
    about `buffer_bytes` each; emits (shard, SegmentTable) and, tagged "digest", the digest of
    what it selected."""

    def __init__(
        self,
        seed: int,
        num_shards: int,
        spill_dir: str,
        progress_dir: Optional[str],
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        self.seed, self.num_shards, self.spill_dir, self.progress_dir = seed, num_shards, spill_dir, progress_dir
        self.buffer_bytes = buffer_bytes

    def process(self, task: Task):
        counter = jobio.ProgressFile(self.progress_dir, "select", f"{task.number:06d}")
        spiller = jobs.RunSpiller(
            self.spill_dir.rstrip("/") + f"/task-{task.number:06d}.runs",
            task.number,
            task.group,
            [task.buckets] * self.num_shards,
            jobio.atomic_output,
            run_bytes=self.buffer_bytes,
        )
        digest = (0, 0, 0)
        try:
            for block in task.blocks:
                digest = add_digests(digest, self._select_block(task, block, spiller, counter))
            tables = spiller.close()
        except BaseException:
            spiller.abort()
            raise
        counter.flush()
        yield beam.pvalue.TaggedOutput("digest", digest)
        for table in tables:
            yield table.shard, table

    def _select_block(
        self, task: Task, block: Block, spiller: jobs.RunSpiller, counter: jobio.ProgressFile
    ) -> Tuple[int, int, int]:
        """Stream one block's frames and spill each record as often as it is taken, keyed; the
        digest of what was selected."""
        taken = block_taken(self.seed, task.group, (block.file_number, block.number), block.n, block.extra, task.full)
        keys = np.random.default_rng(
            [self.seed & ((1 << 64) - 1), KEY_TAG, task.group, block.file_number, block.number]
        ).bit_generator
        occurrence = block.occurrence
        piece = Piece(
            block.path,
            block.compression,
            block.file_number,
            "records",
            block.first,
            block.first + block.n,
            block.first,
            block.offset,
            task.group,
            block.skip_corrupt,
            to_offset=block.offset + block.size,
        )  # block-gzip: inflate the block's members only
        digest = (0, 0, 0)
        done = 0
        for framed, sizes, footers in piece_chunks(piece, jobio.open_input):
            times = taken[done : done + len(sizes)]
            done += len(sizes)
            counter.add(len(sizes), int(sizes.sum()))
            picked = np.repeat(np.arange(len(sizes)), times)
            if not len(picked):
                continue
            digest = add_digests(digest, frame_digest(footers[picked], sizes[picked]))
            self._spill(task, spiller, keys, framed, sizes, picked, occurrence)
            occurrence += len(picked)
        return digest

    def _spill(
        self,
        task: Task,
        spiller: jobs.RunSpiller,
        keys,
        framed,
        sizes: np.ndarray,
        picked: np.ndarray,
        occurrence: int,
    ) -> None:
        """Spill the `picked` frames of one chunk (a frame once per time it is taken), each to
        the shard of its occurrence, in bounded batches however often a record is repeated."""
        starts = np.cumsum(sizes) - sizes
        ends = np.cumsum(sizes[picked])
        batch = max(1, self.buffer_bytes // 2)
        cuts = np.searchsorted(ends, np.arange(batch, int(ends[-1]), batch))
        for part in np.split(np.arange(len(picked)), cuts):
            if not len(part):
                continue
            occ = occurrence + part
            shards = (occ + task.shard_offset) % self.num_shards
            spiller.add(framed, starts[picked[part]], sizes[picked[part]], shards, keys.random_raw(len(part)))


def write_mixed_shard(
    shard: int,
    tables,
    spec: _stages.ShardSpec,
    progress_dir: Optional[str],
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    work_dir: Optional[str] = None,
) -> dict:
    """Write one shard from its segment tables, bucket by bucket in key order; with `work_dir`,
    a bucket of more than `buffer_bytes` (random variation) is split there first (bounded memory)."""
    tables = list(tables)
    name = spec.name(shard)
    index_path = spec.path(spec.index_name(shard)) if spec.write_index else None
    counter = jobio.ProgressFile(progress_dir, "write", f"{shard:05d}")
    # the writer indexes what it writes (a gzip shard with an index is block-gzip, as reshard's)
    with jobio.record_writer(spec.path(name), spec.compression, index_path=index_path) as writer:
        meant, groups = jobs.write_merged(
            tables,
            writer,
            jobio.open_input,
            counter.add,
            max_bytes=buffer_bytes,
            scratch=None if work_dir is None else _shuffle.scratch(work_dir),
        )
    counter.flush()
    # the proof is of what the writer wrote (its frames' footers), its file's size checked
    digest, file_bytes = jobs.check_written(spec.path(name), writer, jobio.file_size, meant=meant)
    result = {
        "shard": shard,
        "name": name,
        "records": digest[0],
        "bytes": digest[1],
        "checksum": digest[2],
        "file_bytes": file_bytes,
        "groups": groups,
    }
    _stages.write_result(spec.path("_results"), f"shard-{shard:05d}.json", result)
    return result


class _Inputs(NamedTuple):
    """The input files of all sources: in one list with each one's source number, and per source."""

    files: List[str]
    groups: List[int]  # source number of each file
    per_source: List[List[str]]


def run(args: argparse.Namespace, options) -> Summary:
    """The mix job: check the arguments, open the output, run the pipeline (`_run_pipeline`),
    then write the manifest and commit the shards (`_manifest`, `_commit`)."""
    sources = parse_sources(args.source)
    _check_sizes(args)
    _reshard_shuffle.check_buffer(args.shuffle_buffer_bytes)
    if args.manifest is not None:
        check_manifest_path(args.manifest, args.overwrite)
    staged = _common.open_output(args, "mix")  # before any work: writable, not another run's
    inputs = _expand_sources(sources)
    weights = [w for _, w in sources]
    wanted = None if args.until_exhausted else allocate(args.total_records, weights)
    total_bytes = sum(jobio.file_size(f) for f in inputs.files)
    spec = _common.output_spec(args.num_shards, args.output_compression, staged, not args.no_index)
    spill_dir = staged.temp_path("_spill")
    target = (
        "until the first source is exhausted"
        if wanted is None
        else f"{jobtools.plural(args.total_records, 'record')} ({', '.join(f'{n:,}' for n in wanted)} per source)"
    )
    _common.progress(
        f"mix: {jobtools.plural(len(sources), 'source')}, {jobtools.plural(len(inputs.files), 'file')} -> {target} "
        f"in {jobtools.plural(args.num_shards, 'shard')}"
    )
    dead_letters = staged.dead_letters()  # where --skip_corrupt lists what it skipped

    manifest_path = args.manifest or staged.final_path(_inside_manifest(staged))
    try:
        _run_pipeline(args, options, inputs, weights, wanted, spec, spill_dir, total_bytes, dead_letters)
        plan_result = [r for r in _common.read_json_results(staged, "_results") if "available" in r][0]
        available, wanted = plan_result["available"], plan_result["wanted"]
        results, check = _common.collect(staged, spec, "mix", True)
        finals = [staged.final_path(r["name"]) for r in results]
        manifest = _manifest(args, sources, inputs.per_source, available, wanted, results, check, finals)
        finals, corrupt = _commit(staged, spec, results, manifest, args.manifest is None, manifest_path)
    except BaseException:
        staged.abort()
        raise
    extra = {
        "sources": len(sources),
        "per_source_records": wanted,
        "available_records": available,
        "output_shards": args.num_shards,
        "manifest": manifest_path,
        "verified": f"yes: {jobtools.plural(check['written'][0], 'record')}, checksum {check['written'][2]:016x} "
        "equal to the selection",
        **corrupt,
    }
    return Summary(
        "mix",
        input_files=len(inputs.files),
        input_bytes=total_bytes,
        files=len(results),
        records=sum(r["records"] for r in results),
        bytes=sum(r["file_bytes"] for r in results),
        extra=extra,
    )


#: the keys every mix manifest has (`_manifest`): a file without them is not one
_MANIFEST_KEYS = {"mode", "seed", "sources", "shards", "checksum"}
_MANIFEST_MAX_BYTES = 64 << 20


def check_manifest_path(path: str, overwrite: bool) -> None:
    """JobError unless --manifest may be written: nothing there, or an earlier mix's manifest
    with --overwrite. Never a data file (an input among them) or a directory; checked before
    any work, since the manifest is written after the commit."""
    if jobio.is_dir(path):
        raise JobError(f"--manifest {path}: a directory; give a file path such as out/mix.manifest.json")
    if not jobio.exists(path):
        return
    is_manifest = False
    try:
        if jobio.file_size(path) <= _MANIFEST_MAX_BYTES:
            old = json.loads(jobio.read_bytes(path).decode("utf-8"))
            is_manifest = isinstance(old, dict) and _MANIFEST_KEYS <= set(old)
    except (ValueError, UnicodeDecodeError):
        pass
    if not is_manifest:
        raise JobError(f"--manifest {path}: a file that is not a mix manifest is there; refusing to overwrite it")
    if not overwrite:
        raise JobError(f"--manifest {path}: the manifest of an earlier mix is there; pass --overwrite to replace it")


def _check_sizes(args: argparse.Namespace) -> None:
    """JobError for a negative --total_records or fewer than one shard."""
    if args.total_records is not None and args.total_records < 0:
        raise JobError("--total_records must be >= 0")
    if args.num_shards < 1:
        raise JobError("--num_shards must be at least 1")


def _expand_sources(sources: Sequence[Tuple[str, float]]) -> _Inputs:
    """Every source's glob expanded (JobError for one that matches nothing), in source order;
    a UsageError when a file is in two sources (`_refuse_shared_files`)."""
    inputs = _Inputs([], [], [])
    for number, (glob, _) in enumerate(sources):
        found = _common.expand_inputs([glob], "--source")
        inputs.per_source.append(found)
        inputs.files.extend(found)
        inputs.groups.extend([number] * len(found))
    _refuse_shared_files(sources, inputs)
    return inputs


def _refuse_shared_files(sources: Sequence[Tuple[str, float]], inputs: _Inputs) -> None:
    """UsageError naming a file that two sources hold (however each spells it: `fs.unique_files`
    decides): its records would be drawn under two weights, neither share being what was asked."""
    unique = fs.unique_files(inputs.files)
    if len(unique) == len(inputs.files):
        return
    kept = set(unique)
    for later, (path, group) in enumerate(zip(inputs.files, inputs.groups)):
        if path in kept and inputs.files.index(path) == later:
            continue
        for first, other in zip(inputs.files[:later], inputs.groups[:later]):
            if len(fs.unique_files([first, path])) == 1:
                raise jobtools.UsageError(
                    f"--source {sources[group][0]}={sources[group][1]:g} and --source "
                    f"{sources[other][0]}={sources[other][1]:g} both hold {path}: a file may be in one source only"
                )


def _run_pipeline(
    args: argparse.Namespace,
    options,
    inputs: _Inputs,
    weights: Sequence[float],
    wanted: Optional[List[int]],
    spec: _stages.ShardSpec,
    spill_dir: str,
    total_bytes: int,
    dead_letters,
) -> None:
    """The Beam job: survey the inputs, plan the selection from the surveys (one element),
    select the records into keyed spill runs, write each shard from its runs and prove the
    shards hold the selection. The plan's counts are left in the staging `_results`."""
    seed, num_shards, compression = args.seed, args.num_shards, args.input_compression
    buffer_bytes = args.shuffle_buffer_bytes
    files, groups = inputs.files, inputs.groups
    with jobio.reporter("mix", options, _common.progress) as reporter:
        progress_dir = reporter.directory
        jobio.write_plan(progress_dir, "survey", None, total_bytes, "surveying the inputs")
        plan = _planner(weights, wanted, seed, num_shards, spec, progress_dir, buffer_bytes)

        def build(p):
            if "://" not in spill_dir:
                os.makedirs(spill_dir, exist_ok=True)
            surveys = _planned.survey_inputs(
                p, files, compression, groups, progress_dir, dead_letters=dead_letters, skip_corrupt=args.skip_corrupt
            )
            selected = (
                p
                | "Start" >> beam.Create([None])
                | "Plan" >> beam.FlatMap(plan, beam.pvalue.AsList(surveys))
                | "Spread" >> beam.Reshuffle()
                | "Select"
                >> beam.ParDo(SelectFn(seed, num_shards, spill_dir, progress_dir, buffer_bytes)).with_outputs(
                    "digest", main="segments"
                )
            )
            results = (
                selected.segments
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteShards"
                >> beam.MapTuple(
                    lambda shard, tables: write_mixed_shard(shard, tables, spec, progress_dir, buffer_bytes, spill_dir)
                )
            )
            _stages.verify_digests(p, selected.digest, results, spec, "mix")

        _common.run_pipeline(build, options)


def _planner(
    weights: Sequence[float],
    wanted: Optional[List[int]],
    seed: int,
    num_shards: int,
    spec: _stages.ShardSpec,
    progress_dir: Optional[str],
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
):
    """The pipeline's Plan step: (None, all surveys) -> reader tasks (`plan_mix`); it records
    the available and wanted counts per source and the next stages' progress plans."""

    def plan(_, surveys):
        tasks, available, chosen = plan_mix(list(surveys), weights, wanted, seed, num_shards, buffer_bytes)
        _stages.write_result(spec.path("_results"), "available.json", {"available": available, "wanted": chosen})
        jobio.write_plan(
            progress_dir, "select", None, sum(b.size for t in tasks for b in t.blocks), "reading the selected blocks"
        )
        jobio.write_plan(
            progress_dir,
            "write",
            sum(chosen),
            _selected_bytes(surveys, chosen),
            f"writing {jobtools.plural(num_shards, 'shard')}",
        )
        return tasks

    return plan


def _inside_manifest(staged) -> str:
    """The name of the default manifest, committed with the shards (NAME.manifest.json)."""
    return staged.name + ".manifest.json"


def _manifest(
    args: argparse.Namespace,
    sources: Sequence[Tuple[str, float]],
    per_source_files: List[List[str]],
    available: List[int],
    wanted: List[int],
    results: List[dict],
    check: dict,
    finals: List[str],
) -> dict:
    """The job's manifest: mode and seed, per source its files, share and sampling, per shard
    its records by source, and the proven checksum of the output."""
    num_sources = len(sources)
    return {
        "total_records": sum(wanted),
        "mode": "until_exhausted" if args.until_exhausted else "total_records",
        "seed": args.seed,
        "num_shards": args.num_shards,
        "sources": [
            {
                "pattern": glob,
                "weight": weight,
                "share": weight / sum(w for _, w in sources),
                "files": [_absolute(f) for f in per_source_files[i]],
                "available_records": available[i],
                "selected_records": wanted[i],
                "sampling": "without replacement"
                if wanted[i] <= available[i]
                else f"repeated: every record {wanted[i] // available[i]}x, plus {wanted[i] % available[i]} sampled",
            }
            for i, (glob, weight) in enumerate(sources)
        ],
        "shards": [
            {"file": f, "records": r["records"], "per_source": (r["groups"] + [0] * num_sources)[:num_sources]}
            for f, r in zip(finals, results)
        ],
        "checksum": {
            "records": check["written"][0],
            "bytes": check["written"][1],
            "fingerprint_sum": f"{check['written'][2]:016x}",
        },
    }


def _commit(
    staged, spec: _stages.ShardSpec, results: List[dict], manifest: dict, inside: bool, manifest_path: str
) -> Tuple[List[str], dict]:
    """Commit the shards; the default manifest (`inside`) lies beside them, staged and committed
    with them, one named by --manifest is written after the commit. (final paths, corrupt-record summary)."""
    if inside:
        _common.write_json(staged.temp_path(_inside_manifest(staged)), manifest)
    finals, corrupt = _common.commit_shards(
        staged, spec, results, [_inside_manifest(staged)] if inside else (), details={"mix": manifest}
    )
    if not inside:
        _common.write_json(manifest_path, manifest)
    return finals, corrupt


def _absolute(path: str) -> str:
    """A local path made absolute (URIs as they are), so a manifest names files from anywhere."""
    return path if "://" in path else os.path.abspath(path)


def _selected_bytes(surveys: Sequence[FileSurvey], wanted: Sequence[int]) -> int:
    """About how many bytes of frames the selection holds (mean frame size per source)."""
    records = [0] * len(wanted)
    size = [0] * len(wanted)
    for s in surveys:
        records[s.group] += s.records
        size[s.group] += s.stream_bytes
    return int(sum(w * b / r for w, b, r in zip(wanted, size, records) if r))


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("mix", build_parser(), run, argv)


if __name__ == "__main__":
    # Run as `pipelines.mix`, not as `__main__`: the pipeline's own classes (Task, Block,
    # SelectFn) travel to SDK workers in other processes, which find them by module name.
    from pipelines import mix as _importable

    sys.exit(_importable.main())
