"""The `tfrecord-beam` command: look inside TFRecord files without TensorFlow.

    tfrecord-beam inspect data/train-*.tfrecord      records, sizes, index, per-feature stats
    tfrecord-beam inspect --json -n 1000 gs://b/x.tfrecord.gz
    tfrecord-beam head data.tfrecord -n 3            the first records, decoded
    tfrecord-beam count 'data/*.tfrecord'            record counts (from valid indexes: fast)
    tfrecord-beam verify data/                       check every CRC; exit 1 on any problem
    tfrecord-beam schema data.tfrecord               a reader description and an Arrow schema

FILE arguments are paths, globs (quote them), directories (their *.tfrecord* files), a job's
output (its directory or prefix, e.g. out/train: the shards its _MANIFEST.NAME.json lists;
count takes the counts from it, verify checks every shard against it) or remote URIs (gs://,
s3://, hdfs:// through pyarrow.fs, others through fsspec; a query string such as
?endpoint_override=HOST:PORT&scheme=http is kept). Compression comes from the name (.gz,
.zlib) unless --compression says otherwise. Exit status: 0 ok, 1 bad or unreadable data, 2 usage.
The work is in `inspection.py` and `verify.py`; this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from typing import Any, Callable, Dict, List, Optional

from .. import _engine_info, fs
from .. import manifest as _manifest
from ..errors import TFRecordError
from ..example import feature_values
from ..records import RecordReader, resolve_compression
from . import _format as fmt
from .inspection import (
    INVALID,
    SchemaInferenceError,
    collect_stats,
    count_records,
    infer_arrow_schema,
    infer_description,
    parse_record,
)
from .verify import verify_file

PROG = "tfrecord-beam"


class UsageError(Exception):
    """Bad arguments (exit status 2)."""


# What reading a bad or missing file raises: reported, then the next file is read.
_READ_ERRORS = (TFRecordError, OSError, ValueError, zlib.error)


def _message(exc: BaseException, path: str) -> str:
    """An error's text, with the path in front unless it already names it (TFRecordError does)."""
    return str(exc) if isinstance(exc, TFRecordError) else f"{path}: {exc}"


# -- shared plumbing ---------------------------------------------------------------------------


# shard path -> its manifest entry, for the files `_expand` took from a job's manifest
_LISTED: Dict[str, "_manifest.ShardEntry"] = {}


def _expand(patterns: List[str]) -> List[str]:
    """Files named by paths, globs, directories (index files and dot-files left out) and job
    outputs (the shards their manifest lists)."""
    files: List[str] = []
    try:
        _manifest.check_no_commit_pending(patterns)  # a half-committed output reads as neither old nor new
    except _manifest.ManifestError as exc:
        raise UsageError(str(exc)) from None
    for pattern in patterns:
        try:
            found = _manifest.find_manifest(pattern)
            manifest = _manifest.read_manifest(found) if found else None
        except _manifest.ManifestError as exc:
            raise UsageError(str(exc)) from None
        if manifest is not None:
            assert found is not None  # a manifest was read from it
            paths = _manifest.shard_paths(manifest, found)
            _LISTED.update({p: e for p, e in zip(paths, manifest.shards) if e.compression != "parquet"})
            files.extend(p for p, e in zip(paths, manifest.shards) if e.compression != "parquet")
            if manifest.corrupt_records:
                print(
                    f"{PROG}: note: {found}: the job skipped {manifest.corrupt_records} corrupt records "
                    f"(listed in {manifest.dead_letters})",
                    file=sys.stderr,
                )
            continue
        _note_unfinished(pattern)
        matched = fs.data_files(pattern)
        if not matched:
            raise UsageError(f"no TFRecord files match {pattern!r}")
        files.extend(matched)
    return files


def _note_unfinished(target: str) -> None:
    """Say so when a directory holds a job's staging (an unfinished or running commit)."""
    base = fs.split_query(target)[0]
    if fs.is_glob(base) or "://" in base or not os.path.isdir(base):
        return
    if any(n.startswith(".tfrecord_beam-tmp-") for n in os.listdir(base)):
        print(
            f"{PROG}: note: {target} holds a job's unfinished output (.tfrecord_beam-tmp-*): files there "
            "without a _MANIFEST.*.json may be incomplete",
            file=sys.stderr,
        )


def _progress(args) -> fmt.Progress:
    return fmt.Progress(enabled=not args.quiet)


def _summary(args, progress: fmt.Progress, files: int, records: int, nbytes: Optional[int], extra: str = "") -> None:
    """The closing line on stderr: files, records, bytes (when known), seconds."""
    progress.done()
    if not args.quiet:
        size = "" if nbytes is None else f"{fmt.human_bytes(nbytes)}, "
        print(
            f"{PROG} {args.command}: {files} file{'s' if files != 1 else ''}, {records} records, "
            f"{size}{progress.elapsed():.2f} s{extra}",
            file=sys.stderr,
        )


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


# -- inspect -----------------------------------------------------------------------------------


def cmd_inspect(args) -> int:
    files = _expand(args.files)
    progress = _progress(args)
    stats = collect_stats(files, args.compression, limit=args.limit, progress=progress)
    errors = [info.error for info in stats.files if info.error]
    if args.json:
        _print_json(stats.to_dict())
    else:
        print(fmt.format_file_table(stats.files))
        types = ", ".join(f"{n} {t}" for t, n in sorted(stats.record_types.items()))
        print(f"\n{stats.records} records scanned; record type: {stats.record_type}" + (f" ({types})" if types else ""))
        for info in stats.files:
            if info.index is not None and info.index.detail and info.index.state != "valid":
                print(f"index {info.index.path}: {info.index.state}: {info.index.detail}")
        if stats.features:
            print(f"\n{stats.feature_section}:")
            print(fmt.format_feature_table(_sorted(stats.features), stats.records))
        if stats.feature_lists:
            print("\nfeature_lists:")
            print(fmt.format_feature_table(_sorted(stats.feature_lists), stats.records, sequence=True))
    for message in errors:
        _error(message)
    _summary(args, progress, len(files), stats.records, sum(f.data_bytes for f in stats.files))
    return 1 if errors else 0


def _sorted(features: Dict[str, Any]) -> List[Any]:
    return [features[name] for name in sorted(features)]


# -- head --------------------------------------------------------------------------------------


def _record_lines(payload: bytes, args) -> List[str]:
    rtype, features, lists = parse_record(payload)
    if rtype == INVALID:
        return [f"  not an Example or SequenceExample: {fmt.shorten_bytes(payload, args.bytes_limit)}"]
    triples = []
    for name in sorted(features):
        kind, values = feature_values(features[name])
        triples.append((name, kind, values))
    limits = dict(max_items=args.max_values, bytes_limit=args.bytes_limit)
    if lists is None:
        return fmt.format_feature_lines(triples, **limits)
    sequences = []
    for name in sorted(lists):
        steps = [feature_values(step) for step in lists[name].feature]
        sequences.append((name, steps))
    return (
        ["  context:"]
        + fmt.format_feature_lines(triples, indent="    ", **limits)
        + ["  feature_lists:"]
        + fmt.format_sequence_lines(sequences, indent="    ", **limits)
    )


def cmd_head(args) -> int:
    files = _expand(args.files)
    progress = _progress(args)
    failed = False
    records = nbytes = 0
    for number, path in enumerate(files):
        if len(files) > 1:
            print(f"{'' if number == 0 else chr(10)}==> {path} <==")
        try:
            reader = RecordReader(path, args.compression)
            for index, (offset, payload) in enumerate(reader.records_with_offsets()):
                if index >= args.n:
                    break
                rtype = parse_record(payload)[0]
                print(f"record {index}  offset {offset}  {len(payload)} bytes  {rtype}")
                print("\n".join(_record_lines(payload, args)))
                records += 1
                nbytes += len(payload)
        except _READ_ERRORS as exc:
            failed = True
            _error(_message(exc, path))
    _summary(args, progress, len(files), records, nbytes)
    return 1 if failed else 0


# -- count -------------------------------------------------------------------------------------


def cmd_count(args) -> int:
    files = _expand(args.files)
    progress = _progress(args)
    rows: List[Dict[str, Any]] = []
    failed, total = 0, 0
    for number, path in enumerate(files, start=1):

        def tick(count: int, number=number, path=path) -> None:
            progress(number, len(files), path, count, None)

        entry = _LISTED.get(path)
        if entry is not None and not args.no_index and not _manifest.check_shard(entry, path):
            total += entry.records
            rows.append({"path": path, "records": entry.records, "source": "manifest", "error": None})
            continue
        try:
            count, how = count_records(path, args.compression, use_index=not args.no_index, progress=tick)
        except _READ_ERRORS as exc:
            failed += 1
            rows.append({"path": path, "records": None, "source": None, "error": _message(exc, path)})
            continue
        total += count
        rows.append({"path": path, "records": count, "source": how, "error": None})
    if args.json:
        _print_json({"files": rows, "total": total, "failed": failed})
    else:
        width = max([len(str(total))] + [len(str(r["records"])) for r in rows])
        for row in rows:
            if row["error"] is None:
                print(f"{str(row['records']).rjust(width)}  {row['path']}  ({row['source']})")
        if len(rows) > 1:
            print(f"{str(total).rjust(width)}  total")
    for row in rows:
        if row["error"]:
            _error(row["error"])
    _summary(args, progress, len(files), total, None)
    return 1 if failed else 0


# -- verify ------------------------------------------------------------------------------------


def cmd_verify(args) -> int:
    files = _expand(args.files)
    progress = _progress(args)
    results, mismatched = [], 0
    for number, path in enumerate(files, start=1):

        def tick(records: int, nbytes: int, number=number, path=path) -> None:
            progress(number, len(files), path, records, nbytes)

        result = verify_file(path, args.compression, max_problems=args.max_problems, parse=args.parse, progress=tick)
        results.append(result)
        entry = _LISTED.get(path)
        # a sound file must also be the shard its manifest committed (records, size, checksum)
        mismatch = _manifest.check_shard(entry, path, full=True) if entry is not None and result.ok else []
        mismatched += bool(mismatch)
        if not args.json:
            progress.done()
            if mismatch:
                print(f"FAIL  {path}: {result.records} intact records, but not the shard its manifest lists")
                for line in mismatch:
                    print(f"      {line}")
            elif result.ok:
                index = (
                    "" if result.index is None or result.index.state == "absent" else f", index {result.index.state}"
                )
                listed = ", matches the manifest" if entry is not None else ""
                print(f"OK    {path}: {result.records} records{index}{listed}")
            else:
                rest = "" if result.complete else "; the rest could not be checked"
                print(f"FAIL  {path}: {len(result.problems)} problem(s), {result.records} intact records{rest}")
                for problem in result.problems:
                    print(f"      {problem.message}")
    bad = [r for r in results if not r.ok]
    if args.json:
        _print_json(
            {
                "ok": not bad and not mismatched,
                "manifest_mismatches": mismatched,
                "files": [r.to_dict() for r in results],
            }
        )
    records = sum(r.records for r in results)
    failed = len(bad) + mismatched
    _summary(
        args,
        progress,
        len(files),
        records,
        sum(r.data_bytes for r in results),
        f", {failed} with problems" if failed else "",
    )
    return 1 if failed else 0


# -- schema ------------------------------------------------------------------------------------


def cmd_schema(args) -> int:
    files = _expand(args.files)
    progress = _progress(args)
    stats = collect_stats(files, args.compression, limit=args.limit, progress=progress)
    errors = [info.error for info in stats.files if info.error]
    inferred = infer_description(stats)
    schema, schema_error = None, None
    try:
        schema = infer_arrow_schema(stats, strings=args.strings)
    except SchemaInferenceError as exc:
        schema_error = str(exc)
    if args.json:
        _print_json(
            {
                "record_type": stats.record_type,
                "records": stats.records,
                "description": inferred.description,
                "sequence_description": inferred.sequence_description,
                "notes": inferred.notes,
                "arrow_schema": None
                if schema is None
                else [
                    {
                        "name": f.name,
                        "type": str(f.type),
                        "kind": f.metadata[b"tfrecord.kind"].decode(),
                        "section": f.metadata[b"tfrecord.section"].decode(),
                    }
                    for f in schema
                ],
                "arrow_error": schema_error,
            }
        )
    else:
        print(f"# {stats.record_type} records, {stats.records} scanned in {len(files)} file(s)")
        print(
            "# reader description: TFRecordDataset(path, index_path, description=description"
            + (", sequence_description=sequence_description)" if inferred.sequence_description is not None else ")")
        )
        print(fmt.python_dict("description", inferred.description))
        if inferred.sequence_description is not None:
            print(fmt.python_dict("sequence_description", inferred.sequence_description))
        for note in inferred.notes:
            print(f"# {note}")
        print("\n# Arrow schema (what a TFRecord -> Parquet conversion would use)")
        if schema is not None:
            print("import pyarrow as pa")
            print(fmt.arrow_schema_code(schema))
        else:
            print(f"# cannot infer: {schema_error}")
    for message in errors + ([schema_error] if schema_error else []):
        _error(message)
    _summary(args, progress, len(files), stats.records, sum(f.data_bytes for f in stats.files))
    return 1 if errors or schema_error else 0


# -- arguments ---------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _compression(text: str) -> str:
    try:
        resolve_compression(None, text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


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


def _add(sub, name: str, handler: Callable, help_text: str, description: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name,
        help=help_text,
        description=description,
        epilog=_EXAMPLES[name],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files, globs, directories or URIs")
    parser.add_argument(
        "--compression",
        default="auto",
        type=_compression,
        help="none, gzip, zlib or auto (default: from the file name)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress or summary on stderr")
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `tfrecord-beam` (all subcommands)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Look inside TFRecord files without TensorFlow.",
        epilog=__doc__.split("\n", 2)[2].split("\nThe work is in")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=_engine_info.describe(),
        help="print the version and the engine in use (native or pure, CRC32C, inflater)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = _add(
        sub,
        "inspect",
        cmd_inspect,
        "records, sizes, index and per-feature statistics",
        "Records, bytes, compression, index state, record type (Example or SequenceExample), and per "
        "feature: kind, how many records have it, values per record (min/mean/max), numeric range, "
        "a bytes sample.",
    )
    p.add_argument("-n", "--limit", type=_positive, help="read at most this many records of each file")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p = _add(
        sub,
        "head",
        cmd_head,
        "print the first records, decoded",
        "Print the first records of each file, decoded: bytes shortened (text shown as text), "
        "images noted by format, dimensions and size.",
    )
    p.add_argument("-n", type=int, default=5, help="records per file (default 5)")
    p.add_argument("--max-values", type=_positive, default=8, help="values shown per feature (default 8)")
    p.add_argument("--bytes-limit", type=_positive, default=40, help="characters shown per bytes value (default 40)")

    p = _add(
        sub,
        "count",
        cmd_count,
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
        cmd_verify,
        "check every CRC; exit 1 on any problem",
        "Check the length and payload CRC of every record, and the .tfindex beside a clean file. "
        "Each problem is reported with its byte offset and record number. After a bad payload "
        "CRC the check goes on with the next record; after a bad length CRC it resyncs at the "
        "next valid record (uncompressed files) and goes on.",
    )
    p.add_argument("--max-problems", type=_positive, default=100, help="stop a file after this many (default 100)")
    p.add_argument("--parse", action="store_true", help="also check that every payload is an Example/SequenceExample")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = _add(
        sub,
        "schema",
        cmd_schema,
        "print a reader description and the Arrow schema",
        "Print a description dict to paste into TFRecordDataset(...), and the Arrow schema a "
        "TFRecord -> Parquet conversion would use: int -> int64, float -> float32, bytes -> binary "
        "(string with --strings when every value is UTF-8), one value in every record -> scalar, "
        "otherwise list<...>, SequenceExample feature lists -> list<list<...>>.",
    )
    p.add_argument("-n", "--limit", type=_positive, help="read at most this many records of each file")
    p.add_argument("--strings", action="store_true", help="bytes features whose values are all UTF-8 -> string")
    p.add_argument("--json", action="store_true", help="print JSON")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run `tfrecord-beam` with `argv` (default: sys.argv[1:]); returns the exit status.

    `--help` returns 0 and bad arguments return 2 (argparse's message on stderr) instead of
    raising SystemExit, so callers in-process get a status either way.
    """
    _LISTED.clear()
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.handler(args)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `tfrecord-beam head x | head -1`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
