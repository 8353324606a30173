"""The `tfrecord-beam` commands: inspect, head, count, verify, schema (`cmd_NAME(args)`).

`tfrecord_beam.cli` parses the arguments (without loading this module for --help) and calls
the handler; the work is in `inspection.py` and `verify.py`, this module expands the FILE
arguments and prints.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

from .. import fs
from .. import manifest as _manifest
from .._usage import EXIT_BAD_DATA, EXIT_FAILURE, EXIT_OK, UsageError, plural
from ..compression import resolve as resolve_compression
from ..errors import TFRecordError
from ..example import feature_values
from ..records import RecordReader
from . import _format as fmt
from . import _json
from ._scan import READ_ERRORS
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


def prepare(args) -> None:
    """Before a command runs: forget the last run's manifests; a usage error for a
    --compression value no reader takes."""
    _LISTED.clear()
    try:
        resolve_compression(None, args.compression)
    except ValueError as exc:
        raise UsageError(f"--compression: {exc}") from None


def _status(errors: List[BaseException]) -> int:
    """The exit status after reading every file: 0 clean, 1 when a file could not be read
    (missing, no permission), else 3 when bad data was found and reported."""
    if not errors:
        return EXIT_OK
    unreadable = any(isinstance(e, OSError) and not isinstance(e, TFRecordError) for e in errors)
    return EXIT_FAILURE if unreadable else EXIT_BAD_DATA


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
        if pattern == "-" and not os.path.lexists(pattern):  # `-` is standard input: refused like a FIFO
            raise UsageError(
                "-: standard input is not read: TFRecord tools read files they can seek; save the stream "
                "to a file first (a file named - is ./-)"
            )
        try:
            fs.refuse_special(pattern)  # stdin, a pipe, a FIFO: one line, never opened
        except fs.SpecialFileError as exc:
            raise UsageError(str(exc)) from None
        try:
            found = _manifest.find_manifest(pattern)
            manifest = _manifest.read_manifest(found) if found else None
        except _manifest.ManifestError as exc:
            raise UsageError(str(exc)) from None
        if manifest is not None:
            assert found is not None  # a manifest was read from it
            paths = _manifest.shard_paths(manifest, found)
            if all(e.compression == "parquet" for e in manifest.shards) and manifest.shards:
                raise UsageError(f"{pattern} is a Parquet output ({found}): it holds no TFRecord shards")
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
        incomplete = _manifest.incomplete_output(pattern)
        if incomplete:
            raise UsageError(incomplete)
        matched = fs.data_files(pattern)
        if not matched:
            raise UsageError(f"no TFRecord files match {pattern!r}")
        files.extend(matched)
    return fs.unique_files(files)  # each file once, however it was named


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
            f"{PROG} {args.command}: {plural(files, 'file')}, {plural(records, 'record')}, "
            f"{size}{progress.elapsed():.2f} s{extra}",
            file=sys.stderr,
        )


def _print_json(value: Any) -> None:
    print(_json.dumps(value))


def _error(message: str) -> None:
    """One error line on stderr; a file name's bytes that are not UTF-8 as `\\xHH`, as --json has them."""
    print(f"{PROG}: error: {_json.text(message)}", file=sys.stderr)


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
    return _status([info.exception for info in stats.files if info.exception is not None])


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
    failed: List[BaseException] = []
    records = nbytes = 0
    for number, path in enumerate(files):
        if len(files) > 1:
            print(f"{'' if number == 0 else chr(10)}==> {_json.text(path)} <==")  # `\xHH` as --json
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
        except READ_ERRORS as exc:
            failed.append(exc)
            _error(_message(exc, path))
    _summary(args, progress, len(files), records, nbytes)
    return _status(failed)


# -- count -------------------------------------------------------------------------------------


def cmd_count(args) -> int:
    files = _expand(args.files)
    progress = _progress(args)
    rows: List[Dict[str, Any]] = []
    failed: List[BaseException] = []
    total = 0
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
        except READ_ERRORS as exc:
            failed.append(exc)
            rows.append({"path": path, "records": None, "source": None, "error": _message(exc, path)})
            continue
        total += count
        rows.append({"path": path, "records": count, "source": how, "error": None})
    if args.json:
        _print_json({"files": rows, "total": total, "failed": len(failed)})
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
    return _status(failed)


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
    if any(p.kind == "unreadable" for r in bad for p in r.problems):
        return EXIT_FAILURE
    return EXIT_BAD_DATA if failed else EXIT_OK


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
    status = _status([info.exception for info in stats.files if info.exception is not None])
    return status or (EXIT_BAD_DATA if schema_error else EXIT_OK)
