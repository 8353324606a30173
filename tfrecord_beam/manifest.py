"""`DIR/_MANIFEST.NAME.json`: the record of a complete job output, written last.

A job's output `out/train` is its shards (`out/train-00000-of-00004.tfrecord`, ...), their
indexes, an optional dead-letter file (`out/_CORRUPT.train.jsonl`) and this manifest
(`out/_MANIFEST.train.json`). The leading `_` keeps both out of globs of the data and out
of Parquet / Spark dataset readers, which skip `_` and `.` files; the name part keeps
several outputs in one directory apart. The
manifest is the last file a commit writes (and the first an overwrite removes), so its
presence is what says "complete": shards without it are an interrupted or failed output.

It lists the job and its arguments, and per shard its name, record count, file size,
payload bytes, the order-independent payload checksum (`tfrecord_beam.digest`) and the name
of its index; the corrupt records skipped (`--skip_corrupt`) and the dead-letter file that
lists them; and the run that wrote it. Names are relative to the manifest's directory.

Readers (`tfrecord-beam inspect/verify/count`, the torch datasets) find it with
`find_manifest(target)` for an output directory or prefix, and check a shard against it with
`check_shard` (size only, or every record and the checksum). Core module: no Beam import.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from . import fs
from .errors import TFRecordError

__all__ = [
    "FORMAT",
    "ManifestError",
    "ShardEntry",
    "Manifest",
    "manifest_name",
    "is_manifest_name",
    "manifest_path",
    "dead_letter_name",
    "read_manifest",
    "write_manifest",
    "find_manifest",
    "shard_paths",
    "index_paths",
    "check_shard",
    "owned_by_prefix",
]

FORMAT = "tfrecord_beam.manifest/1"
MANIFEST_PREFIX, MANIFEST_SUFFIX = "_MANIFEST.", ".json"
DEAD_LETTER_PREFIX, DEAD_LETTER_SUFFIX = "_CORRUPT.", ".jsonl"
STAGING_PREFIX = ".tfrecord_beam-tmp-"  # a job's staging directory beside its output (beam.commit)
JOURNAL_NAME = "_JOURNAL.json"  # in a staging directory: a commit has begun (beam.commit)


class ManifestError(TFRecordError):
    """A manifest that cannot be read or does not hold what a manifest must."""

    def __init__(self, path: Optional[str], reason: Optional[str] = None) -> None:
        super().__init__(path, None, None, reason)  # reason None: one message (TFRecordError)

    def __reduce__(self):
        if self._text is not None:
            return (type(self), (self._text,))
        return (type(self), (self.path, self.reason))


class CommitInProgressError(ManifestError):
    """A job's commit into this location has begun and not finished: its files are a mix of
    the old output and the new one (read it once the commit is done, or run the job again
    if it was killed: that finishes the commit)."""


@dataclass
class ShardEntry:
    """One data file of an output."""

    name: str  # file name, relative to the manifest's directory
    records: int
    file_bytes: int  # size of the file as stored (compressed size for compressed shards)
    payload_bytes: Optional[int] = None
    checksum: Optional[str] = None  # tfrecord_beam.digest checksum, 16 hex digits; None if not computed
    index: Optional[str] = None  # name of its .tfindex, None without one
    compression: Optional[str] = None  # None or a codec name of `compression` (parquet: "parquet")


@dataclass
class Manifest:
    """What a complete output holds (see the module docstring)."""

    job: str
    output_prefix: str  # the name part of the prefix (`train` for `out/train`)
    shards: List[ShardEntry]
    arguments: Dict[str, Any] = field(default_factory=dict)
    corrupt_records: int = 0
    dead_letters: Optional[str] = None  # name of the dead-letter file, None when nothing was skipped
    run: Dict[str, Any] = field(default_factory=dict)  # host, pid, started, committed
    details: Dict[str, Any] = field(default_factory=dict)  # job-specific (mix: sources and selection)
    format: str = FORMAT

    @property
    def records(self) -> int:
        return sum(s.records for s in self.shards)

    def files(self) -> List[str]:
        """Every name the output owns, the manifest itself excluded."""
        names = [s.name for s in self.shards] + [s.index for s in self.shards if s.index]
        return names + ([self.dead_letters] if self.dead_letters else [])

    def to_json(self) -> str:
        value = asdict(self)
        value["records"] = self.records
        return json.dumps(value, indent=1, sort_keys=True, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str, path: Optional[str] = None) -> "Manifest":
        """Parse and validate; ManifestError naming the path and the problem otherwise."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ManifestError(path, f"not JSON ({exc})") from None
        if not isinstance(value, dict) or value.get("format") != FORMAT:
            raise ManifestError(
                path, f"not a {FORMAT} manifest (format {value.get('format') if isinstance(value, dict) else None!r})"
            )
        try:
            shards = [ShardEntry(**s) for s in value["shards"]]
            manifest = cls(
                job=str(value["job"]),
                output_prefix=str(value["output_prefix"]),
                shards=shards,
                arguments=dict(value.get("arguments") or {}),
                corrupt_records=int(value.get("corrupt_records", 0)),
                dead_letters=value.get("dead_letters"),
                run=dict(value.get("run") or {}),
                details=dict(value.get("details") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(path, f"malformed manifest ({type(exc).__name__}: {exc})") from None
        for name in manifest.files():
            if not isinstance(name, str) or not name or "/" in name or name.startswith(".") or name in ("..",):
                raise ManifestError(path, f"bad file name {name!r} in the manifest")
        for s in shards:
            if not isinstance(s.records, int) or s.records < 0 or not isinstance(s.file_bytes, int) or s.file_bytes < 0:
                raise ManifestError(path, f"bad counts for {s.name!r}")
        if "records" in value and value["records"] != manifest.records:
            raise ManifestError(path, f"records {value['records']} is not the sum over the shards ({manifest.records})")
        return manifest


def manifest_name(name_prefix: str) -> str:
    """The manifest's file name for an output named `name_prefix` (`train` -> `_MANIFEST.train.json`)."""
    return MANIFEST_PREFIX + name_prefix + MANIFEST_SUFFIX


def is_manifest_name(name: str) -> bool:
    return name.startswith(MANIFEST_PREFIX) and name.endswith(MANIFEST_SUFFIX) and len(name) > 15


def manifest_path(output_prefix: str) -> str:
    """`out/train` -> `out/_MANIFEST.train.json` (a URI's query string kept)."""
    base, query = fs.split_query(output_prefix)
    head, _, name = base.rpartition("/")
    return fs.with_query((head + "/" if head or base.startswith("/") else "") + manifest_name(name), query)


def dead_letter_name(name_prefix: str) -> str:
    """The dead-letter file's name for an output named `name_prefix` (`_CORRUPT.train.jsonl`)."""
    return DEAD_LETTER_PREFIX + name_prefix + DEAD_LETTER_SUFFIX


def read_manifest(path: str) -> Manifest:
    """Read and validate a manifest file."""
    try:
        with fs.open_input(path) as handle:
            text = handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, f"cannot read ({exc})") from None
    return Manifest.from_json(text, path)


def write_manifest(manifest: Manifest, path: str) -> None:
    """Write a manifest atomically (local or remote; Beam code writes through its own layer)."""
    with fs.atomic_output(path) as (handle, commit):
        handle.write(manifest.to_json().encode("utf-8"))
        commit()


def find_manifest(target: str, parquet: bool = False) -> Optional[str]:
    """The manifest of an output named by `target`, or None when there is none.

    `target` may be the manifest itself, an output prefix (`out/train`), or a directory; what a
    directory means is `directory_output`'s rule. Globs name files, not outputs: None.
    `parquet` says which outputs the caller reads (Parquet or TFRecord shards).
    """
    target = os.fspath(target)
    base, query = fs.split_query(target)
    if fs.is_glob(base):
        return None
    if is_manifest_name(base.rsplit("/", 1)[-1]):
        return target if fs.exists(target) else None
    candidate = manifest_path(target)
    if fs.exists(candidate):
        return candidate
    if fs.is_dir(target):
        return directory_output(target, parquet)
    return None


def directory_output(
    directory: str,
    parquet: bool = False,
    names: Optional[List[str]] = None,
    read: Optional[Callable[[str], bytes]] = None,
) -> Optional[str]:
    """What a directory argument means, the same in every command, job and dataset:

    - it holds no committed output of the kind read (TFRecord shards, or Parquet with
      `parquet`): its data files (None: the caller lists them; another kind's manifest, e.g.
      tfrecord_to_parquet's output written beside its TFRecord input, changes nothing);
    - exactly one such output and no other data files of that kind: that output (its manifest);
    - anything else (two outputs, or an output beside data files no manifest lists): a
      ManifestError naming both, never a silent merge: name the output by its prefix
      (DIR/NAME) or the files by a quoted glob.

    `names` (the directory's file names) and `read` (a file's bytes) let a Beam job look
    through Beam's filesystems with its pipeline options instead of this package's.
    """
    names = fs.list_dir(directory) if names is None else names
    outputs, listed = [], set()
    for name in sorted(n for n in names if is_manifest_name(n)):
        path = fs.join(directory, name)
        manifest = read_manifest(path) if read is None else Manifest.from_json(read(path).decode("utf-8"), path)
        shards = [e.name for e in manifest.shards]
        listed.update(shards)
        if any((e.compression == "parquet") == parquet for e in manifest.shards):
            outputs.append(name)
    if not outputs:
        return None
    pattern = "*.parquet" if parquet else "*.tfrecord*"
    others = [
        n
        for n in names
        if fnmatch.fnmatchcase(n, pattern) and n not in listed and not fs.is_sidecar(n) and not n.endswith(".tfindex")
    ]
    if len(outputs) == 1 and not others:
        return fs.join(directory, outputs[0])
    what = f"{len(outputs)} outputs ({', '.join(outputs)})"
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        what += f" and {len(others)} data files no manifest lists ({shown})"
    raise ManifestError(
        directory,
        f"holds {what}: name one output by its prefix (DIR/NAME) or the files by a quoted glob ('DIR/{pattern}')",
    )


def incomplete_output(target: str) -> Optional[str]:
    """Why `target` reads as nothing when it is an output prefix whose shards are there without
    their manifest (its job still running, killed or failed); None otherwise."""
    base = fs.split_query(os.fspath(target))[0]
    if fs.is_glob(base) or fs.is_dir(target) or fs.exists(target):
        return None
    prefix = base.rstrip("/").rsplit("/", 1)[-1]
    try:
        names = fs.list_dir(fs.dirname(target))
    except OSError:
        return None
    shards = [n for n in names if n.startswith(prefix + "-") and "-of-" in n and not fs.is_sidecar(n)]
    if not shards:
        return None
    return (
        f"{target}: incomplete output: {len(shards)} shard file(s) ({shards[0]}, ...) but no "
        f"{manifest_name(prefix)}: its job did not commit it (still running, killed or failed); run the "
        "job again, or name the files by a quoted glob"
    )


def shard_paths(manifest: Manifest, manifest_file: str) -> List[str]:
    """Full paths of the manifest's shards."""
    directory = fs.dirname(manifest_file)
    return [fs.join(directory, s.name) for s in manifest.shards]


def index_paths(manifest: Manifest, manifest_file: str) -> List[Optional[str]]:
    """Full paths of the shards' indexes (None where a shard has none)."""
    directory = fs.dirname(manifest_file)
    return [fs.join(directory, s.index) if s.index else None for s in manifest.shards]


def check_shard(entry: ShardEntry, path: str, full: bool = False) -> List[str]:
    """Problems of one shard against its manifest entry ([] when it matches).

    Always: the file exists with the recorded size, and its index exists. With `full`: every
    record is read (CRCs checked) and the count, payload bytes and checksum are compared.
    """
    from . import digest

    problems = []
    if not fs.exists(path):
        return [f"{path}: listed in the manifest but missing"]
    size = fs.file_size(path)
    if size != entry.file_bytes:
        problems.append(f"{path}: {size} bytes, the manifest says {entry.file_bytes}")
    if entry.index and not fs.exists(fs.join(fs.dirname(path), entry.index)):
        problems.append(f"{path}: its index {entry.index} is missing")
    if full and not problems and entry.compression != "parquet":
        try:
            records, payload_bytes, checksum = digest.file_digest(path, entry.compression or "auto")
        except TFRecordError as err:
            return problems + [str(err)]
        if records != entry.records:
            problems.append(f"{path}: {records} records, the manifest says {entry.records}")
        if entry.payload_bytes is not None and payload_bytes != entry.payload_bytes:
            problems.append(f"{path}: {payload_bytes} payload bytes, the manifest says {entry.payload_bytes}")
        if entry.checksum is not None and digest.format_checksum(checksum) != entry.checksum:
            problems.append(
                f"{path}: payload checksum {digest.format_checksum(checksum)}, the manifest says {entry.checksum}"
            )
    return problems


_SHARD_NAME = r"-\d{5}-of-\d{5}"


def owned_by_prefix(name_prefix: str, names: List[str]) -> List[str]:
    """Which of `names` (in the output's directory) belong to an output named `name_prefix`:
    its shards (`NAME-SSSSS-of-NNNNN...`, indexes included), its manifest, its dead letters.
    Another output's files (`NAME2-...`, `NAMEx.tfrecord`) are not."""
    pattern = re.compile(re.escape(name_prefix) + _SHARD_NAME + r"($|\.)")
    own = {manifest_name(name_prefix), dead_letter_name(name_prefix)}
    return [n for n in names if n in own or pattern.match(n)]


def check_no_commit_pending(
    targets: Union[str, Sequence[str]],
    *,
    glob: Callable[[str], Sequence[str]] = fs.expand,
    read_bytes: Optional[Callable[[str], bytes]] = None,
    is_dir: Callable[[str], bool] = fs.is_dir,
) -> None:
    """CommitInProgressError when a target (a directory, output prefix, manifest, file or
    glob a reader is about to read) is touched by a commit that has begun and not finished:
    a `STAGING_PREFIX*/_JOURNAL.json` beside it names the files it moves or removes and the
    manifest it writes. A directory is touched by any such commit in it.

    Between the journal and the manifest the old manifest is gone and the directory holds
    old and new shards at once, so a reader that went on would read a mix. Each directory is
    searched once however many targets lie in it. The filesystem calls default to the
    core's (pyarrow.fs); Beam code passes its own (`beam._fs`).
    """
    journals: Dict[Tuple[str, str], List[Tuple[str, Set[str]]]] = {}
    for target in [targets] if isinstance(targets, (str, os.PathLike)) else targets:
        target = os.fspath(target)
        base, query = fs.split_query(target)
        whole = not fs.is_glob(base) and is_dir(target)
        if whole:
            directory, pattern = base.rstrip("/") or "/", ""
        else:
            directory, _, pattern = base.rpartition("/")
            directory = directory or "."
            if fs.is_glob(directory):
                continue  # globs over directories: each matched directory is not an output's
        key = (directory, query)
        if key not in journals:
            journals[key] = _pending_journals(directory, query, glob, read_bytes or _read_bytes)
        for journal_path, touched in journals[key]:
            if whole or _touches(pattern, touched, glob, directory, query):
                raise CommitInProgressError(
                    target,
                    f"a job's commit into {directory} has begun and not finished ({journal_path}): "
                    "its files are a mix of the old and the new output; read it when the commit is done "
                    "(if that job was killed, running it again finishes the commit)",
                )


def _pending_journals(directory: str, query: str, glob, read_bytes) -> List[Tuple[str, Set[str]]]:
    """(journal path, the names it touches) of each begun commit in `directory`."""
    found = []
    for journal_path in glob(fs.with_query(fs.join(directory, STAGING_PREFIX + "*/" + JOURNAL_NAME), query)):
        try:
            journal = json.loads(read_bytes(journal_path).decode("utf-8"))
            found.append((journal_path, {journal["manifest"], *journal["moves"], *journal["remove"]}))
        except Exception:  # noqa: BLE001 - finished meanwhile (gone), or being written
            continue
    return found


def _touches(pattern: str, touched: Set[str], glob, directory: str, query: str) -> bool:
    """Whether the file, glob, output prefix or manifest named `pattern` meets `touched`."""
    if pattern in touched or manifest_name(pattern) in touched:  # one of its files, its manifest, its prefix
        return True
    if fs.is_glob(pattern):
        names = {
            fs.split_query(p)[0].rsplit("/", 1)[-1] for p in glob(fs.with_query(fs.join(directory, pattern), query))
        }
        return bool(names & touched)
    return False


def _read_bytes(path: str) -> bytes:
    with fs.open_input(path) as handle:
        return handle.read()
