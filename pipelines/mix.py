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
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_beam.skipping import SkippingReader
from tfrecord_beam.beam import _fs
from tfrecord_beam.beam import stages as _stages
from tfrecord_beam.beam._corrupt import CorruptRecord

from . import _common
from ._common import JobError, Summary

EXAMPLES = """\
  python -m pipelines.mix --source 'web/*.tfrecord=0.7' --source 'books/*.tfrecord=0.3' \\
      --total_records 1000000 --output_prefix out/mix --num_shards 8 --seed 1
  python -m pipelines.mix --source 'a/*.tfrecord=1' --source 'b/*.tfrecord=1' --until_exhausted --output_prefix out/even
  python -m pipelines.mix --source 'gs://b/a/*=2' --source 'gs://b/b/*=1' --total_records 50000 \\
      --output_prefix gs://b/mixed --num_shards 4 --runner=DataflowRunner ...
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _common.make_parser("mix", __doc__.splitlines()[0], EXAMPLES)
    parser.add_argument("--source", action="append", required=True, metavar="GLOB=WEIGHT",
                        help="a source glob and its weight (> 0); repeatable")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--total_records", type=int, help="records in the output")
    size.add_argument("--until_exhausted", action="store_true",
                      help="as many records as possible with no repetition: stop when the first source runs out")
    parser.add_argument("--output_prefix", required=True, help="output path prefix")
    parser.add_argument("--num_shards", type=int, default=1, help="output shards (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the selection and the order")
    parser.add_argument("--input_compression", default="auto", help="auto (from file names), none, gzip, zlib")
    parser.add_argument("--output_compression", default="none", help="none, gzip or zlib")
    parser.add_argument("--manifest", default=None, help="manifest path (default OUTPUT_PREFIX.manifest.json)")
    parser.add_argument("--no_index", action="store_true", help="do not write .tfindex files")
    parser.add_argument("--split_bytes", type=int, default=_stages.DEFAULT_SPLIT_BYTES,
                        help="read uncompressed inputs in byte ranges of this size, in parallel")
    return parser


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


def selection(seed: int, source: int, available: int, wanted: int) -> np.ndarray:
    """How many times each of `available` records is taken (int64 array), `wanted` in all."""
    if wanted and not available:
        raise JobError(f"source {source} has no records but {wanted} were asked of it")
    rng = np.random.default_rng([seed & ((1 << 64) - 1), 0x6D6978, source])
    full, rest = divmod(wanted, available) if available else (0, 0)
    taken = np.full(available, full, dtype=np.int64)
    if rest:
        taken[rng.choice(available, rest, replace=False)] += 1
    return taken


def count_range(rng: _stages.FileRange, skip_corrupt: bool = False) -> Tuple[tuple, int]:
    """((file number, range start), records whose header starts in the range); with
    `skip_corrupt`, the intact records (CRCs checked, as the selecting read counts them)."""
    reader = SkippingReader(rng.path, rng.compression, open_file=lambda: _fs.open_input(rng.path),
                            verify=skip_corrupt, start_offset=rng.start, end_offset=rng.end,
                            resync=rng.start > 0, skip_corrupt=skip_corrupt)
    return (rng.file_number, rng.start), sum(len(c) for c in reader.chunks())


class SelectFn(beam.DoFn):
    """Reads a range and emits its selected records (repeated as chosen), keyed by output shard."""

    def __init__(self, seed: int, wanted: Optional[List[int]], weights: List[float], groups: List[int],
                 num_shards: int, skip_corrupt: bool = False) -> None:
        self.seed, self.wanted, self.weights, self.groups, self.num_shards = seed, wanted, weights, groups, num_shards
        self.skip_corrupt = skip_corrupt
        self._plan = None

    def _prepare(self, counts: List[Tuple[tuple, int]]):
        if self._plan is None:
            base: Dict[tuple, int] = {}
            available = [0] * len(self.weights)
            for key, n in sorted(counts):
                group = self.groups[key[0]]
                base[key] = available[group]
                available[group] += n
            wanted = self.wanted
            if wanted is None:  # --until_exhausted
                wanted = allocate(exhausting_total(available, self.weights), self.weights)
            taken = [selection(self.seed, g, available[g], wanted[g]) for g in range(len(wanted))]
            # Occurrence k of source g (counting in record order) goes to shard
            # (k + offset_g) % num_shards: shards get equal shares of every source.
            before = [np.concatenate([[0], np.cumsum(t)[:-1]]).astype(np.int64) for t in taken]
            offsets = np.concatenate([[0], np.cumsum(wanted)[:-1]]).astype(np.int64)
            self._plan = (base, taken, before, offsets)
        return self._plan

    def process(self, rng: _stages.FileRange, counts):
        base, taken, before, offsets = self._prepare(counts)
        first = base[(rng.file_number, rng.start)]
        group = rng.group
        coverage: list = []
        bad: list = []
        report = (lambda f, o, r: bad.append(CorruptRecord(f, o, r))) if self.skip_corrupt else None
        for batch in _stages.read_range(rng, True, coverage, report):
            while bad:
                yield beam.pvalue.TaggedOutput(_stages.CORRUPT, bad.pop(0))
            n = len(batch.payloads)
            times = taken[group][first : first + n]
            starts = before[group][first : first + n]
            first += n
            if not times.any():
                continue
            picked = np.repeat(np.arange(n), times)
            occurrence = np.repeat(starts, times) + (np.arange(len(picked)) - np.repeat(np.cumsum(times) - times, times))
            payloads = [batch.payloads[i] for i in picked.tolist()]
            keys = _stages.seeded_keys(self.seed, 0x6B6579, group, *batch.order, size=len(payloads))
            chosen = _stages.Batch(batch.order, batch.record_offsets[picked], payloads, group)
            yield beam.pvalue.TaggedOutput("digest", _stages.payload_digest(payloads))
            yield from _stages.route(chosen, (occurrence + offsets[group]) % self.num_shards, keys)
        for record in bad:
            yield beam.pvalue.TaggedOutput(_stages.CORRUPT, record)
        for c in coverage:
            yield beam.pvalue.TaggedOutput(_stages.COVERAGE, c)


def run(args: argparse.Namespace, options) -> Summary:
    staged = _common.open_output(args, "mix")  # before any work: writable, not another run's
    sources = parse_sources(args.source)
    if args.total_records is not None and args.total_records < 0:
        raise JobError("--total_records must be >= 0")
    if args.num_shards < 1:
        raise JobError("--num_shards must be at least 1")
    files: List[str] = []
    groups: List[int] = []
    per_source_files: List[List[str]] = []
    for number, (glob, _) in enumerate(sources):
        found = _common.expand_inputs([glob], "--source")
        per_source_files.append(found)
        files += found
        groups += [number] * len(found)
    weights = [w for _, w in sources]
    wanted = None if args.until_exhausted else allocate(args.total_records, weights)
    ranges = _stages.plan_ranges(files, args.split_bytes, args.input_compression, groups)
    spec = _common.output_spec(args.output_prefix, args.num_shards, args.output_compression, staged, not args.no_index)
    target = "until the first source is exhausted" if wanted is None else f"{args.total_records} records {wanted}"
    _common.progress(f"mix: {len(sources)} sources, {len(files)} files -> {target} in {args.num_shards} shards")
    seed, num_shards = args.seed, args.num_shards
    dead_letters = _common.dead_letters(args, staged)
    skip = dead_letters is not None

    def build(p):
        plan = p | "Plan" >> beam.Create(ranges)
        counts = plan | "Count" >> beam.Map(count_range, skip)
        selected = (
            plan
            | "Spread" >> beam.Reshuffle()
            | "Select" >> beam.ParDo(SelectFn(seed, wanted, weights, groups, num_shards, skip), beam.pvalue.AsList(counts))
            .with_outputs("digest", _stages.COVERAGE, _stages.CORRUPT, main="routed")
        )
        gaps = _stages.check_coverages(selected[_stages.COVERAGE], skip_corrupt=skip)
        if skip:
            dead_letters.write((selected[_stages.CORRUPT], gaps) | "AllCorrupt" >> beam.Flatten())
        results = _stages.write_shards(selected.routed, spec, shuffled=True)
        _stages.verify_digests(p, selected.digest, results, spec, "mix")

        def save_counts(_, all_counts):
            available = [0] * len(sources)
            for (file_number, _start), n in all_counts:
                available[groups[file_number]] += n
            _stages._write_result(spec.path("_results"), "available.json", {"available": available})

        _ = p | "Once" >> beam.Create([None]) | "SaveCounts" >> beam.Map(save_counts, beam.pvalue.AsList(counts))

    manifest_path = args.manifest or (args.output_prefix + ".manifest.json")
    if True:  # (indentation kept for the merge)
        _common.run_pipeline(build, options)
        available = [r for r in _common.read_json_results(staged, "_results") if "available" in r][0]["available"]
        if wanted is None:
            wanted = allocate(exhausting_total(available, weights), weights)
        total = sum(wanted)
        results, check = _common.collect(staged, spec, "mix", True)
        finals = [staged.final_path(r["name"]) for r in results]
        manifest = {
            "total_records": total, "mode": "until_exhausted" if args.until_exhausted else "total_records", "seed": seed, "num_shards": num_shards,
            "sources": [
                {
                    "pattern": glob, "weight": weight, "share": weight / sum(w for _, w in sources),
                    "files": per_source_files[i], "available_records": available[i], "selected_records": wanted[i],
                    "sampling": "without replacement" if wanted[i] <= available[i] else
                    f"repeated: every record {wanted[i] // available[i]}x, plus {wanted[i] % available[i]} sampled",
                }
                for i, (glob, weight) in enumerate(sources)
            ],
            "shards": [
                {"file": f, "records": r["records"], "per_source": (r["groups"] + [0] * len(sources))[: len(sources)]}
                for f, r in zip(finals, results)
            ],
            "checksum": {"records": check["written"][0], "bytes": check["written"][1],
                         "fingerprint_sum": f"{check['written'][2]:016x}"},
        }
        # The default manifest lies beside the shards: staged and committed with them.
        inside = args.manifest is None
        if inside:
            _common.write_json(staged.temp_path(staged.name + ".manifest.json"), manifest)
        finals, corrupt = _common.commit_shards(staged, spec, results, [staged.name + ".manifest.json"] if inside else (),
                                                details={"mix": manifest})
        if not inside:
            _common.write_json(manifest_path, manifest)
    extra = {
        "sources": len(sources), "per_source_records": wanted, "available_records": available,
        "output_shards": num_shards, "manifest": manifest_path,
        "verified": f"yes: {check['written'][0]} records, checksum {check['written'][2]:016x} equal to the selection",
        "outputs": finals, **corrupt,
    }
    return Summary("mix", files=len(results), records=sum(r["records"] for r in results),
                   bytes=sum(r["file_bytes"] for r in results), extra=extra)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return _common.run_job("mix", build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
