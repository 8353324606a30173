"""What a saved dataset position refers to: one identity, built in one place, that a loaded
state must match before its positions are trusted.

A position counts records (per shard and pass, or a place in the elastic order), so it only
means something over the same records in the same order. Every parameter that decides which
records a position counts, or their order, is one named entry here; a state saves them all
(`state["identity"]`) and `StateIdentity.check` compares them entry by entry, naming each that
differs with both values. The per-shard path and `elastic=True` use the same entries:

* `files` (per source): the files' count, total size and a digest of, per position, the
  file's path below the directory all the dataset's files share, its size and its ends'
  content (`files_entries`): a file added, removed, renamed, moved, resized, rewritten or
  listed in another place (same-named files of other directories swapped) holds other records,
  while a copy of the whole tree elsewhere (another root, local or remote) resumes.
* `indexes` (per source): which files have an index, their record counts, and which can be
  entered mid-file. The per-shard plan cuts indexed files by record and the others by byte
  (another share per rank x worker), a resume skips indexed records unread by number, and the
  elastic order is built from the counts.
* `compression` (per source): each file's codec: compressed files are shared out whole or by
  stride, not cut, so the shards' records differ.
* `seed`: file order, shuffle buffer, mixer draws and the elastic order.
* `shuffle_queue_size` (0 and None are both "no shuffle"): the per-shard path shuffles the
  file order and through a buffer of this many records; the elastic order's window.
* `shuffle_block`: the elastic order's blocks when shuffled (None where it is not used).
* `weights`: each source's split and weight in order (None: one source): the mixer's draws.
* `infinite`: whether a source restarts (new order) when it runs out.
* `skip_corrupt`: a per-shard position counts records handed out, and a corrupt record is
  handed out only without it (else raises); so the same count is another record.
* `elastic`: what a position is (records per shard, or a place in one global order).

Not in it, since positions do not depend on them: `batch_size`, `drop_last`, `slot_size`
(positions count records; an elastic worker's unit is checked with the worker's state),
descriptions, `transform`, the remote reading options. The topology (rank, world size,
DataLoader worker) is checked when an iteration starts, where the workers are known
(`_ShardedIterable._start`); an elastic state resumes on any.

States of version 1 (before this identity) saved the files (names without directories) and,
elastic only, a digest of the order (`v1_order`) without the split names: an elastic one whose
files, order and seed match, over files whose names are distinct across every source (so a
name proves which position and split a file is), is provably the same order and is accepted;
any other is refused, saying what it lacks.

`validate` checks a state's shape (every field's type and range) in one place, before any
position in it is used.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .sampling import FileInfo

STATE_VERSION = 2
_V1 = 1
VERSIONS = (_V1, STATE_VERSION)  # the state forms `check` reads
_ABSENT = object()


def _digest(value: Any) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=8).hexdigest()


def _parts(path: str) -> List[str]:
    """A path's components ('/'-separated; a local one normalised first)."""
    if "://" not in path:
        path = os.path.normpath(path).replace(os.sep, "/")
    return path.rstrip("/").split("/")


def files_entries(
    paths: Sequence[Sequence[str]], sizes: Sequence[Sequence[int]], ends: Sequence[Sequence[str]]
) -> List[str]:
    """Each source's `files`: its count, total size and a digest of, per position, the path
    below the directory every file of every source shares, the size and the ends' digest."""
    split = [[_parts(p) for p in source] for source in paths]
    dirs = [parts[:-1] for source in split for parts in source]
    root = 0
    if dirs:
        shortest = min(len(d) for d in dirs)
        while root < shortest and all(d[root] == dirs[0][root] for d in dirs):
            root += 1
    out = []
    for parts, size, end in zip(split, sizes, ends):
        digest = hashlib.sha1()
        for rel, n, e in zip(parts, size, end):
            digest.update(f"{'/'.join(rel[root:])}\0{n}\0{e}\n".encode("utf-8", "surrogateescape"))
        out.append(f"{len(parts)} files, {sum(size)} bytes, {digest.hexdigest()[:16]}")
    return out


def v1_files_entry(paths: Sequence[str], sizes: Sequence[int]) -> str:
    """One source's `files` as version-1 states saved it: names without directories and sizes."""
    digest = hashlib.sha1()
    for path, size in zip(paths, sizes):
        digest.update(f"{path.rstrip('/').rsplit('/', 1)[-1]}\0{size}\n".encode("utf-8", "surrogateescape"))
    return f"{len(paths)} files, {sum(sizes)} bytes, {digest.hexdigest()[:16]}"


def indexes_entry(infos: Sequence[FileInfo]) -> str:
    """One source's `indexes`: files indexed, their records, and a digest of each file's
    (record count or None, whether it can be entered mid-file)."""
    counts = [info.num_records for info in infos]
    if all(n is None for n in counts):
        return f"no index ({len(counts)} files)"
    indexed = [n for n in counts if n is not None]
    return (
        f"{len(indexed)} of {len(counts)} files indexed, {sum(indexed)} records, "
        f"{_digest([(n, info.compressed) for n, info in zip(counts, infos)])}"
    )


def compression_entry(compressions: Sequence[Optional[str]]) -> str:
    """One source's `compression`: its codec, or the codecs with a digest of which file has
    which when they differ (file counts are `files`' business)."""
    names = [c or "none" for c in compressions]
    kinds = sorted(set(names))
    if len(kinds) < 2:
        return kinds[0] if kinds else "no files"
    return f"{', '.join(kinds)} ({_digest(names)})"


def v1_order(
    infos: Sequence[Sequence[FileInfo]], queue: int, block: int, weights: Optional[Sequence[float]], infinite: bool
) -> List[Any]:
    """The elastic order's digest as version-1 states saved it (`elastic.order`), to accept
    those that provably index the same order."""
    counts = [[int(info.num_records or 0) for info in source] for source in infos]
    parts = (
        counts,
        queue,
        block if queue else 0,
        None if weights is None else [float(w) for w in weights],
        bool(infinite),
    )
    return [[sum(c) for c in counts], hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()]


@dataclass(frozen=True)
class StateIdentity:
    """The named parameters a position depends on (`entries`, JSON-plain), and the version-1
    elastic order digest for states saved before them."""

    entries: Dict[str, Any]
    legacy_order: Optional[List[Any]] = None
    legacy_files: Optional[List[str]] = None  # version 1's `files`, where file names prove positions

    @classmethod
    def build(
        cls,
        *,
        files: Sequence[str],
        v1_files: Optional[Sequence[str]] = None,
        infos: Sequence[Sequence[FileInfo]],
        compressions: Sequence[Sequence[Optional[str]]],
        seed: int,
        shuffle_queue_size: Optional[int],
        shuffle_block: int,
        weights: Optional[Sequence[Tuple[str, float]]],
        infinite: bool,
        skip_corrupt: bool,
        elastic: bool,
    ) -> "StateIdentity":
        """The identity of a dataset over `files` (`files_entries`) with these infos and codecs per
        source; `v1_files`: version 1's entries, where they prove which file each position is."""
        queue = int(shuffle_queue_size or 0)
        entries = {
            "files": list(files),
            "indexes": [indexes_entry(source) for source in infos],
            "compression": [compression_entry(source) for source in compressions],
            "seed": int(seed),
            "shuffle_queue_size": queue or None,
            "shuffle_block": int(shuffle_block) if elastic and queue else None,
            "weights": None if weights is None else [[str(name), float(w)] for name, w in weights],
            "infinite": bool(infinite),
            "skip_corrupt": bool(skip_corrupt),
            "elastic": bool(elastic),
        }
        legacy = None
        if elastic:
            plain = None if weights is None else [w for _, w in weights]
            legacy = v1_order(infos, queue, int(shuffle_block), plain, infinite)
        v1 = None if v1_files is None else list(v1_files)
        return cls(json.loads(json.dumps(entries)), legacy, v1)  # as a state saved to disk holds them

    def saved(self) -> Dict[str, Any]:
        """What a state saves (a copy)."""
        return json.loads(json.dumps(self.entries))

    def check(self, state: Mapping[str, Any]) -> None:
        """Refuse a state whose position would mean other records here: name every entry that
        differs, with both values (version-1 states: see the module doc)."""
        if state.get("version") == _V1:
            self._check_v1(state)
            return
        saved = state.get("identity")
        if not isinstance(saved, Mapping):
            raise ValueError(f"not a state of this dataset: it has no identity (version {state.get('version')!r})")
        differ = [
            name
            for name in list(self.entries) + [n for n in saved if n not in self.entries]
            if saved.get(name, _ABSENT) != self.entries.get(name, _ABSENT)
        ]
        if differ:
            shown = "; ".join(
                f"{name}={_show(saved.get(name, _ABSENT))} when saved, {name}={_show(self.entries.get(name, _ABSENT))} now"
                for name in differ
            )
            raise ValueError(
                f"state was saved with other parameters than this dataset's ({shown}): its position would "
                "skip or repeat records here; resume with the parameters it was saved with, or start its "
                "epoch afresh (set_epoch) without loading it"
            )

    def _check_v1(self, state: Mapping[str, Any]) -> None:
        if self.legacy_order is not None and "elastic" in state:
            files = state.get("files")
            if files != self.entries["files"] and self.legacy_files is None:
                raise ValueError(
                    "elastic state saved by an earlier tfrecord_beam (state version 1): it records its files by "
                    "name without directory, and this dataset's file names repeat (in one source or across "
                    "splits), so which file (and split) each of its positions means cannot be proven; resume it "
                    "with the version that saved it, or start its epoch afresh (set_epoch) without loading it"
                )
            same = (
                files in (self.entries["files"], self.legacy_files)
                and state["elastic"].get("order") == self.legacy_order
                and state.get("seed") == self.entries["seed"]
            )
            if same:
                return  # the files, the order's digest and the seed match: the same order
            raise ValueError(
                "elastic state saved by an earlier tfrecord_beam (state version 1) over another order: its "
                f"files {files}, order {state['elastic'].get('order')} and seed {state.get('seed')!r} "
                f"differ from this dataset's ({self.legacy_files}, {self.legacy_order}, {self.entries['seed']}): "
                "its files, record counts, seed, shuffle_queue_size, shuffle_block, weights or infinite differ"
            )
        raise ValueError(
            "state saved by an earlier tfrecord_beam (state version 1)"
            + (" without elastic=True" if "elastic" not in state else "")
            + ": it does not record shuffle_queue_size, weights, infinite, skip_corrupt, the indexes or the "
            "compression, so whether its position means the same records here cannot be checked; resume it "
            "with the version that saved it, or start its epoch afresh (set_epoch) without loading it"
        )


def check_kind(state: Any) -> None:
    """Refuse what is no dataset state at all, or one of a version this one does not read."""
    if not isinstance(state, Mapping):
        raise ValueError(
            f"not a dataset state: got {type(state).__name__} {_short(state)} (load what state_dict() returned)"
        )
    if state.get("version") not in VERSIONS:
        raise ValueError(
            f"not a dataset state of a version this tfrecord_beam reads: version {_short(state.get('version'))} "
            f"(reads {', '.join(map(str, VERSIONS))})"
        )


def validate(
    state: Mapping[str, Any],
    *,
    sources: int,
    elastic: bool,
    mixed: bool,
    infinite: bool,
    records: Sequence[Optional[int]],
    total: Optional[int],
) -> None:
    """Refuse a state whose fields are not of the form `state_dict()` gives, or out of range
    here (`sources` sources holding `records` records each, None: unknown; an elastic order of
    `total` positions, None: endless), naming the field and what is wrong with it."""
    check_kind(state)
    _int(state.get("epoch", _ABSENT), "epoch")
    positions = state.get("sources", _ABSENT)
    if not isinstance(positions, list) or len(positions) != sources:
        raise _bad("sources", positions, f"a list of {sources} [pass, position] pairs (one per source)")
    for i, position in enumerate(positions):
        if not isinstance(position, list) or len(position) != 2:
            raise _bad(f"sources[{i}]", position, "a [pass, position] pair")
        _int(position[0], f"sources[{i}] pass", high=None if infinite else 0)
        _int(position[1], f"sources[{i}] position", high=records[i])
    topology = state.get("topology", _ABSENT)
    if topology is not None:
        if not isinstance(topology, list) or len(topology) != 4:
            raise _bad("topology", topology, "None or [rank, world_size, worker, num_workers]")
        for k, name in enumerate(("rank", "world_size", "worker", "num_workers")):
            _int(topology[k], f"topology {name}", low=1 if k % 2 else 0)
        if topology[0] >= topology[1] or topology[2] >= topology[3]:
            raise _bad("topology", topology, "a rank below world_size and a worker below num_workers")
    mixer = state.get("mixer", _ABSENT)
    if mixer is not None:
        if not mixed or not isinstance(mixer, Mapping):
            raise _bad("mixer", mixer, "None" if not mixed else "None or the mixer's {rng, live}")
        live = mixer.get("live")
        if not isinstance(live, list) or len(live) != sources or not all(isinstance(x, bool) for x in live):
            raise _bad("mixer live", live, f"a list of {sources} booleans")
        try:
            import numpy as np

            np.random.PCG64().state = mixer.get("rng")  # type: ignore[assignment]
        except (TypeError, ValueError, KeyError) as error:
            raise _bad("mixer rng", mixer.get("rng"), f"a PCG64 generator state ({error})") from None
    if not elastic:
        if "elastic" in state:
            raise _bad("elastic", state["elastic"], "absent (this dataset is not elastic=True)")
        return
    e = state.get("elastic", _ABSENT)
    if not isinstance(e, Mapping):
        raise _bad("elastic", e, "the elastic order's {start, taken, unit, consumed} (this dataset is elastic=True)")
    start = _int(e.get("start", _ABSENT), "elastic start", high=total)
    taken = e.get("taken", _ABSENT)
    if not isinstance(taken, list) or len(taken) != sources:
        raise _bad("elastic taken", taken, f"a list of {sources} record counts")
    for i, n in enumerate(taken):
        _int(n, f"elastic taken[{i}]")
    if sum(taken) != start:  # each position of the order is one record of one source
        raise _bad("elastic taken", taken, f"records per source summing to the position, {start}")
    if e.get("unit", _ABSENT) is not None:
        _int(e.get("unit", _ABSENT), "elastic unit", low=1)
    _int(e.get("consumed", _ABSENT), "elastic consumed")


def _int(value: Any, name: str, low: int = 0, high: Optional[int] = None) -> int:
    if value is _ABSENT:
        raise ValueError(f"not a usable dataset state: it has no {name}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise _bad(name, value, f"an integer >= {low}")
    if high is not None and int(value) > high:
        raise _bad(name, value, f"at most {high} here (past the end)")
    return int(value)


def _bad(name: str, value: Any, want: str) -> ValueError:
    if value is _ABSENT:
        return ValueError(f"not a usable dataset state: it has no {name}")
    return ValueError(f"not a usable dataset state: its {name} is {_short(value)}, expected {want}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(not recorded)"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)
