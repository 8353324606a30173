"""The `tfrecord-beam` command: look inside TFRecord files without TensorFlow.

    tfrecord-beam inspect data/train-*.tfrecord      records, sizes, index, per-feature stats
    tfrecord-beam inspect --json -n 1000 gs://b/x.tfrecord.gz
    tfrecord-beam head data.tfrecord -n 3            the first records, decoded
    tfrecord-beam count 'data/*.tfrecord'            record counts (from valid indexes: fast)
    tfrecord-beam verify data/                       check every CRC; exit 3 on any problem
    tfrecord-beam schema data.tfrecord               a reader description and an Arrow schema

FILE arguments are paths, globs (quote them), directories (their *.tfrecord* files), a job's
output (its directory or prefix, e.g. out/train: the shards its _MANIFEST.NAME.json lists;
count takes the counts from it, verify checks every shard against it) or remote URIs (gs://,
s3://, hdfs:// through pyarrow.fs, others through fsspec; a query string such as
?endpoint_override=HOST:PORT&scheme=http is kept). Compression comes from the name (.gz,
.zlib, .zst) unless --compression says otherwise. A path that exists is taken literally even when its
name holds glob characters ([ ] * ?). Standard input (-) and FIFOs are refused in one line (exit 2), never opened: the
tools read files they can seek, so save a stream to a file first; a FIFO found while
listing a directory is skipped, never opened.
Exit status: 0 ok, 1 a file could not be read, 2 usage error, 3 bad data found and reported,
130 interrupted.
This module parses the arguments (standard library only, so --help answers at once);
`commands.py` runs them.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .. import _bounded, _usage
from .. import compression as _compression

PROG = "tfrecord-beam"
UsageError = _usage.UsageError


# -- arguments ---------------------------------------------------------------------------------


_EXAMPLES = {
    "inspect": """examples:
  tfrecord-beam inspect data.tfrecord
  tfrecord-beam inspect 'data/train-*.tfrecord.gz' --limit 10000
  tfrecord-beam inspect --json gs://bucket/data.tfrecord > stats.json""",
    "head": """examples:
  tfrecord-beam head data.tfrecord            the first 5 records
  tfrecord-beam head data.tfrecord -n 1 --max-values 100""",
    "count": """examples:
  tfrecord-beam count data.tfrecord
  tfrecord-beam count 'data/*.tfrecord' --json
  tfrecord-beam count --no-index data.tfrecord   scan even when an index is there""",
    "verify": """examples:
  tfrecord-beam verify data.tfrecord
  tfrecord-beam verify data/ --parse            also check every payload is an Example""",
    "schema": """examples:
  tfrecord-beam schema data.tfrecord
  tfrecord-beam schema 'data/*.tfrecord' --limit 1000 --strings""",
}


def _add(sub, name: str, handler: str, help_text: str, description: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name, help=help_text, description=description, epilog=_EXAMPLES[name] + "\n\n" + _usage.EXIT_HELP
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files, globs, directories or URIs")
    _compression.add_argument(parser, "--compression", default="auto", auto=True, what="the files' codec")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress or summary on stderr")
    parser.add_argument(
        "--timeout",
        type=_usage.timeout_seconds,
        metavar="SECONDS",
        help="give up a remote call (s3://, gs://: an open, a listing, a read) that has no answer within "
        f"this many seconds, naming the object and the byte range (default: ${_bounded.TIMEOUT_ENV}, "
        f"else {_bounded.DEFAULT_TIMEOUT_S:g})",
    )
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `tfrecord-beam` (all subcommands)."""
    parser = _usage.ArgumentParser(
        prog=PROG,
        description="Look inside TFRecord files without TensorFlow.",
        epilog=__doc__.split("\n", 2)[2].split("\nThis module parses")[0],
    )
    _usage.add_version(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = _add(
        sub,
        "inspect",
        "cmd_inspect",
        "records, sizes, index and per-feature statistics",
        "Records, bytes, compression, index state, record type (Example or SequenceExample), and per "
        "feature: kind, how many records have it, values per record (min/mean/max), numeric range, "
        "a bytes sample.",
    )
    p.add_argument("-n", "--limit", type=_usage.positive_int, help="read at most this many records of each file")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p = _add(
        sub,
        "head",
        "cmd_head",
        "print the first records, decoded",
        "Print the first records of each file, decoded: bytes shortened (text shown as text), "
        "images noted by format, dimensions and size.",
    )
    p.add_argument("-n", type=_usage.positive_int, default=5, help="records per file (at least 1; default 5)")
    p.add_argument("--max-values", type=_usage.positive_int, default=8, help="values shown per feature (default 8)")
    p.add_argument(
        "--bytes-limit", type=_usage.positive_int, default=40, help="characters shown per bytes value (default 40)"
    )

    p = _add(
        sub,
        "count",
        "cmd_count",
        "count records (from a valid index when there is one)",
        "Count records. An uncompressed file whose .tfindex ends exactly at the end of the file is "
        "counted from the index; otherwise the record headers are scanned (compressed files are "
        "inflated).",
    )
    p.add_argument("--no-index", action="store_true", help="always scan, never trust an index")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = _add(
        sub,
        "verify",
        "cmd_verify",
        "check every CRC; exit 3 on any problem",
        "Check the length and payload CRC of every record, and the .tfindex beside a clean file. "
        "Each problem is reported with its byte offset and record number. After a bad payload "
        "CRC the check goes on with the next record; after a bad length CRC it resyncs at the "
        "next valid record (uncompressed files) and goes on.",
    )
    p.add_argument(
        "--max-problems", type=_usage.positive_int, default=100, help="stop a file after this many (default 100)"
    )
    p.add_argument("--parse", action="store_true", help="also check that every payload is an Example/SequenceExample")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = _add(
        sub,
        "schema",
        "cmd_schema",
        "print a reader description and the Arrow schema",
        "Print a description dict to paste into TFRecordDataset(...), and the Arrow schema a "
        "TFRecord -> Parquet conversion would use: int -> int64, float -> float32, bytes -> binary "
        "(string with --strings when every value is UTF-8), one value in every record -> scalar, "
        "otherwise list<...>, SequenceExample feature lists -> list<list<...>>.",
    )
    p.add_argument("-n", "--limit", type=_usage.positive_int, help="read at most this many records of each file")
    p.add_argument("--strings", action="store_true", help="bytes features whose values are all UTF-8 -> string")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run `tfrecord-beam` with `argv` (default: sys.argv[1:]); returns the exit status.

    As the process's command (`argv` None: the console script, `python -m tfrecord_beam[.cli]`),
    a run that gave up a remote call which is still running in the object store's client (a
    server trickling a body byte by byte: `_bounded`) ends the process with `os._exit` once its
    error and output are flushed: an ordinary exit waits for that request in pyarrow's client
    finalization, for as long as the server keeps trickling (minutes; issue 34 item 6). Called
    in-process with `argv`, it returns as always.
    """
    status = _main(argv)
    if argv is None and _bounded.abandoned_calls():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)
    return status


def _main(argv: Optional[List[str]] = None) -> int:
    """Run `tfrecord-beam` with `argv` (default: sys.argv[1:]); returns the exit status.

    `--help` returns 0 and bad arguments return 2 (one line on stderr) instead of raising
    SystemExit, so callers in-process get a status either way. The commands (numpy, the engine)
    load only after the arguments parsed.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else _usage.EXIT_USAGE
    if "numpy" not in sys.modules:
        # no command does linear algebra: without this, OpenBLAS starts a thread per core at
        # numpy's import, and they spin beside the scan's own threads for a while
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from . import commands

    _bounded.set_remote_timeout(args.timeout)  # None: $TFRECORD_BEAM_TIMEOUT, else the default
    try:
        commands.prepare(args)
        return getattr(commands, args.handler)(args)
    except UsageError as exc:
        print(_usage.usage_error(f"{PROG} {args.command}", str(exc)), file=sys.stderr)
        return _usage.EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return _usage.EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `tfrecord-beam head x | head -1`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return _usage.EXIT_FAILURE
    except (OSError, ValueError) as exc:  # naming the inputs failed (a bad URI, an unreachable store)
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return _usage.EXIT_FAILURE
    finally:
        _bounded.set_remote_timeout(None)  # the flag is this run's (main may be called again in-process)


if __name__ == "__main__":
    sys.exit(main())
