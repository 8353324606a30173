"""Beam stages of planned jobs: survey the inputs, plan the shards, stream each shard's copy.

    surveys = survey_inputs(p, files)                  # one element per input file (+ dead letters)
    results = write_planned(p, surveys, spec, plan_fn) # one element per output shard
    verify_planned(p, surveys, results, spec, "reshard")

Only file names, surveys (counts, checkpoints, digests), shard plans and, with
`--skip_corrupt`, the corrupt records the surveys stepped over travel through Beam;
payload bytes go straight from the input files to the shard writers (`tfrecord_beam.jobs.copy_pieces`).
Each survey and each shard is one element, so the work spreads over workers (the plan goes
through a Reshuffle) and no step holds more than a read chunk of data.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Deque, List, Optional, Sequence

import apache_beam as beam

from tfrecord_beam._usage import plural
from tfrecord_beam.compression import resolve as resolve_compression
from tfrecord_beam.compression import seeks_by_members
from tfrecord_beam.jobs import (
    FileSurvey,
    ShardPlan,
    Surveyor,
    copy_pieces,
    merge_parts,
    survey,
    survey_parts,
    walk_frames_skipping,
)

from . import _blockgzip, _fs, _progress
from . import stages as _stages
from ._corrupt import CorruptRecord


def _survey_parts(task):
    """A file's survey tasks: (task, part number, member window) per range of members of a
    block-gzip file with a member table (`survey_parts`), else (task, 0, None): whole."""
    number, path, compression, group = task
    table = _blockgzip.member_table(path) if seeks_by_members(compression) else None
    if table is None:
        yield task, 0, None
        return
    for k, (first, stop) in enumerate(survey_parts(table)):
        yield task, k, table.window(first, stop)


def _survey_one(part, progress_dir: Optional[str]) -> FileSurvey:
    (number, path, compression, group), k, members = part
    counter = _progress.ProgressFile(
        progress_dir, "survey", f"{number:06d}" if members is None else f"{number:06d}-{k:06d}"
    )
    with _fs.open_input(path) as raw:
        result = survey(raw, path, compression, number, group, counter.add, members=members)
    counter.flush()
    return result


class _SurveyFn(beam.DoFn):
    """A survey task (`_survey_parts`) -> its FileSurvey; with `skip_corrupt` (whole files
    only), the records the walk stepped over too (CorruptRecords, tagged CORRUPT), emitted as
    they are found."""

    def __init__(self, progress_dir: Optional[str], skip_corrupt: bool) -> None:
        self.progress_dir, self.skip_corrupt = progress_dir, skip_corrupt

    def process(self, part):
        if not self.skip_corrupt:
            yield _survey_one(part, self.progress_dir)
            return
        (number, path, compression, group), _, _ = part
        counter = _progress.ProgressFile(self.progress_dir, "survey", f"{number:06d}")
        found: Deque[CorruptRecord] = deque()
        surveyor = Surveyor(path, compression, number, group, skip_corrupt=True)
        blocks = walk_frames_skipping(
            lambda: _fs.open_input(path), compression, path, lambda f, o, r: found.append(CorruptRecord(f, o, r))
        )
        for block in blocks:
            surveyor.add(block)
            counter.add(len(block), int(block.sizes.sum()))
            while found:
                yield beam.pvalue.TaggedOutput(_stages.CORRUPT, found.popleft())
        while found:
            yield beam.pvalue.TaggedOutput(_stages.CORRUPT, found.popleft())
        counter.flush()
        yield surveyor.result()


def survey_inputs(
    p,
    files: Sequence[str],
    compression: Optional[str] = "auto",
    groups: Optional[Sequence[int]] = None,
    progress_dir: Optional[str] = None,
    label: str = "Survey",
    dead_letters=None,
    skip_corrupt: bool = False,
):
    """PCollection of one FileSurvey per input file (header walk, length CRCs checked).

    A block-gzip file with a member table (read from its index's tail here) is surveyed in
    parts, ranges of its members each inflated once, on any worker, and the parts are joined
    per file (`merge_parts`). With `skip_corrupt` (--skip_corrupt) each file is walked whole,
    both CRCs checked, stepping over corrupt records (`_walk.walk_frames_skipping`), which go
    to `dead_letters` (a `commit.DeadLetters`); the surveys, and so the plans made from them,
    hold the intact records only.
    """
    tasks = [(n, f, resolve_compression(f, compression), groups[n] if groups else 0) for n, f in enumerate(files)]
    letters = _stages.dead_letters_for(skip_corrupt, dead_letters)
    parts = (
        [(task, 0, None) for task in tasks]
        if skip_corrupt
        else [part for task in tasks for part in _survey_parts(task)]
    )
    outs = (
        p
        | f"{label}Files" >> beam.Create(parts)
        | f"{label}Spread" >> beam.Reshuffle()
        | f"{label}Walk"
        >> beam.ParDo(_SurveyFn(progress_dir, skip_corrupt)).with_outputs(_stages.CORRUPT, main="surveys")
    )
    if letters is not None:
        letters.write(outs[_stages.CORRUPT], f"{label}DeadLetters")
    walked = outs.surveys
    if all(members is None for _, _, members in parts):
        return walked  # one survey per file already
    return (
        walked
        | f"{label}Key" >> beam.Map(lambda s: (s.file_number, s))
        | f"{label}Group" >> beam.GroupByKey()
        | f"{label}Join" >> beam.MapTuple(lambda _, file_parts: merge_parts(list(file_parts)))
    )


def _write_one(plan: ShardPlan, spec: _stages.ShardSpec, progress_dir: Optional[str]) -> dict:
    name = spec.name(plan.shard)
    index_path = spec.path(spec.index_name(plan.shard)) if spec.write_index else None
    counter = _progress.ProgressFile(progress_dir, "write", f"{plan.shard:05d}")
    stats = copy_pieces(
        plan.pieces,
        spec.path(name),
        index_path,
        spec.compression,
        _fs.open_input,
        _fs.atomic_output,
        counter.add,
        file_size=_fs.file_size,
    )
    counter.flush()
    result = {
        "shard": plan.shard,
        "name": name,
        "records": stats["records"],
        "bytes": stats["bytes"],
        "checksum": stats["checksum"],
        "file_bytes": stats["file_bytes"],
        "groups": stats["groups"],
    }
    _stages.write_result(spec.path("_results"), f"shard-{plan.shard:05d}.json", result)
    return result


def write_planned(
    p,
    surveys,
    spec: _stages.ShardSpec,
    plan_fn: Callable[[List[FileSurvey]], List[ShardPlan]],
    progress_dir: Optional[str] = None,
    label: str = "Write",
):
    """Plan the shards from all surveys (`plan_fn`) and write each; PCollection of result dicts
    ({shard, name, records, bytes, checksum, file_bytes, groups}, also saved under the
    staging `_results`)."""

    def make_plans(_, all_surveys):
        plans = plan_fn(sorted(all_surveys, key=lambda s: s.file_number))
        _progress.write_plan(
            progress_dir,
            "write",
            sum(pl.records for pl in plans),
            sum(pl.stream_bytes for pl in plans),
            f"writing {plural(len(plans), 'shard')}",
        )
        return plans

    return (
        p
        | f"{label}Start" >> beam.Create([None])
        | f"{label}Plan" >> beam.FlatMap(make_plans, beam.pvalue.AsList(surveys))
        | f"{label}Spread" >> beam.Reshuffle()
        | f"{label}Shards" >> beam.Map(_write_one, spec, progress_dir)
    )


def verify_planned(p, expected, results, spec: _stages.ShardSpec, what: str, label: str = "Verify") -> None:
    """Fail the pipeline unless the shards hold exactly the expected records (`expected`: a
    PCollection of (records, bytes, checksum) digests, e.g. of the surveys)."""
    _stages.verify_digests(p, expected, results, spec, what, label)
