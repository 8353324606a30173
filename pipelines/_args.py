"""The jobs' arguments, parsed before anything slow is imported.

Each job module builds its parser from this module (standard library only) and calls
`parse_then_load` before its Beam imports: `python -m pipelines.NAME --help`, `--version` and
usage errors answer at once, and the leftovers (Beam's flags) are checked against Beam's own
parser once Beam is loaded (`check_leftovers`), so no argument is ever silently dropped.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, List, Optional, Sequence

from tfrecord_beam import compression as _compression
from tfrecord_beam import jobtools

OUTPUTS_HELP = """\
outputs:
  Shards are staged in OUTPUT_DIR/.tfrecord_beam-tmp-* and committed with OUTPUT_DIR/_MANIFEST.NAME.json
  written last: without the manifest an output is incomplete. Existing output under the prefix
  is an error unless --overwrite (which replaces it as one commit). A run killed mid-commit is
  completed by the next run; staging left by dead runs on this host is removed by the next run
  (and reported). To clean by hand: make sure no run writes there, then delete
  OUTPUT_DIR/.tfrecord_beam-tmp-* (each holds _OWNER.json: host, pid, start time; one holding
  _JOURNAL.json is a begun commit, which running the job again completes) and hidden .*.tmp-*
  files. --skip_corrupt lists skipped records in OUTPUT_DIR/_CORRUPT.NAME.jsonl.
"""

INPUTS_HELP = """\
inputs:
  --input takes one or more values and may be repeated: --input a.tfrecord b.tfrecord and
  --input a.tfrecord --input b.tfrecord are the same, so a glob the shell expanded is read whole.
  Quote globs to let the job expand them (remote ones must be quoted). Any word no flag takes is
  an error naming it, never dropped. A local name that exists is taken literally, even with
  [ ] * ?; stdin, pipes and FIFOs are refused (in a directory: left out, never opened).
  A directory means its data files, or the one committed output it holds (no other data files
  beside it); two outputs, or an output beside loose files, are refused. An output's prefix
  (out/train) means that output. (docs/jobs.md: "Arguments, paths and exit status".)
"""

TFRECORD_INPUT = "input files, globs or directories (their *.tfrecord* files); one or more, repeatable"
PARQUET_INPUT = "Parquet files, globs or directories (their *.parquet files); one or more, repeatable"


def add_input(parser: argparse.ArgumentParser, help_text: str = TFRECORD_INPUT) -> None:
    """The --input flag every job takes (one or more values, repeatable: all are one input)."""
    parser.add_argument("--input", action="extend", nargs="+", required=True, metavar="PATH", help=help_text)


def add_input_compression(parser: argparse.ArgumentParser, *aliases: str) -> None:
    """--input_compression: the codec of the input files (choices from `compression`'s table)."""
    _compression.add_argument(parser, "--input_compression", *aliases, default="auto", auto=True, what="input codec")


def add_output_compression(parser: argparse.ArgumentParser) -> None:
    """--output_compression: the codec the shards are written with (choices from the table)."""
    _compression.add_argument(parser, "--output_compression", default="none", auto=False, what="output codec")


def make_parser(prog: str, description: str, examples: str, outputs: bool = True) -> argparse.ArgumentParser:
    """A parser whose --help ends with usage examples and a note on Beam flags, with the flags
    every job shares: --skip_corrupt, --verbose and (jobs with an --output_prefix) --overwrite."""
    epilog = (
        "examples:\n"
        + examples.rstrip()
        + "\n\n"
        + INPUTS_HELP
        + "\n"
        + (OUTPUTS_HELP + "\n" if outputs else "")
        + "Any other --flag goes to Beam's PipelineOptions, e.g.\n"
        "  --runner=DirectRunner --direct_running_mode=multi_processing --direct_num_workers=4\n"
        "  --runner=PrismRunner --prism_location=PATH_TO_PRISM (runners/prism.sh build makes one)\n"
        "  --runner=DataflowRunner --project P --region R --temp_location gs://B/tmp\n"
        "    --extra_package wheelhouse/tfrecord_beam-VERSION-...whl (`make wheel`; --dry_run=True builds, submits nothing)\n"
        "  --runner=PortableRunner --job_endpoint=HOST:PORT --environment_type=... (Flink or Spark behind Beam's\n"
        "    job server: `make runners` prints the flags of its own; docs/runners.md, Flink and Spark)\n"
        "  --s3_endpoint_url=http://HOST:9000 --s3_access_key_id=K --s3_secret_access_key=S (s3://, with [aws])\n"
        "Without --runner a job runs on the in-process FnApiRunner, online or not: Beam's DirectRunner\n"
        "would run it on Prism when it can download Prism from GitHub and on the FnApiRunner when it\n"
        "cannot. The summary's runner: line says which runner ran.\n"
        "An unknown flag, an abbreviation or a single-valued flag given twice is a usage error.\n"
        "\n" + jobtools.EXIT_HELP + "\n"
    )
    parser = jobtools.ArgumentParser(prog=f"python -m pipelines.{prog}", description=description, epilog=epilog)
    jobtools.add_version(parser)
    if outputs:
        parser.add_argument(
            "--overwrite", action="store_true", help="replace an existing output under the prefix (as one commit)"
        )
    parser.add_argument(
        "--skip_corrupt",
        action="store_true",
        help="skip corrupt records instead of failing: counted, listed (file, offset, reason) in a "
        "dead-letter file beside the output (OUTPUT_DIR/_CORRUPT.NAME.jsonl), in the summary and manifest",
    )
    parser.add_argument("--verbose", action="store_true", help="show Beam's log lines and the traceback of a failure")
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=None,
        metavar="SECONDS",
        help="bound on each remote call of the launcher's planning (listing, sizes, index reads; default "
        f"${jobtools.TIMEOUT_ENV}, else {jobtools.DEFAULT_TIMEOUT_S:g}): a store that stalls fails the job naming the object",
    )
    return parser


def _timeout(text: str) -> float:
    """--timeout's value: seconds > 0 (argparse's usage error otherwise)."""
    try:
        return jobtools.parse_timeout(text, "--timeout")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def split_list(values: Optional[Sequence[str]]) -> List[str]:
    """Names given as `a,b` or `a b` (or both, or repeated): each once, in order."""
    out: List[str] = []
    for value in values or ():
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return list(dict.fromkeys(out))


def parse_then_load(module_name: str, build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Called by each job before its Beam imports: when the job runs as a script, parse its
    arguments first (--help, --version and usage errors answer without loading Beam); then
    import Beam without its import-time log noise."""
    if module_name == "__main__":
        build_parser().parse_known_args(sys.argv[1:])
    from tfrecord_beam.jobtools import require_beam

    require_beam("pipelines")


def check_leftovers(prog: str, job_parser: argparse.ArgumentParser, leftovers: Sequence[str]) -> None:
    """Every argument the job did not take must be one of Beam's flags, spelled out in full,
    given once; else a UsageError naming it (a stray word, e.g. the rest of an unquoted glob,
    is never dropped). Beam's parser is the one PipelineOptions builds (no abbreviations)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    captured: List[argparse.ArgumentParser] = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=captured.append)
    beam_parser = captured[0]
    _, unknown = beam_parser.parse_known_args(list(leftovers))
    if unknown:
        known = [s for p in (job_parser, beam_parser) for a in p._actions for s in a.option_strings]
        raise jobtools.UsageError(jobtools.unknown_arguments_message(unknown, known, "neither this job's nor Beam's"))
    repeated = jobtools.repeated_flags(beam_parser, leftovers)
    if repeated:
        raise jobtools.UsageError(f"{repeated[0]} given more than once (it takes one value)")
