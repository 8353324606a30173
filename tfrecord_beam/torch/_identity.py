"""What a saved dataset position refers to: one identity, built in one place, that a loaded
state must match before its positions are trusted.

A position counts records (per shard and pass, or a place in the elastic order), so it only
means something over the same records in the same order. Every parameter that decides which
records a position counts, or their order, is one named entry here; a state saves them all
(`state["identity"]`) and `StateIdentity.check` compares them entry by entry, naming each that
differs with both values. The per-shard path and `elastic=True` use the same entries:

* `files` (per source): the files' count, total size and a digest of names and sizes
  (`FileSet.fingerprint`): a file added, removed, renamed or resized holds other records.
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

States of version 1 (before this identity) saved the files and, elastic only, a digest of
the order (`v1_order`): an elastic one whose files, order and seed match is provably the same
order and is accepted; any other is refused, saying what it lacks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .sampling import FileInfo

STATE_VERSION = 2
_V1 = 1
VERSIONS = (_V1, STATE_VERSION)  # the state forms `check` reads
_ABSENT = object()


def _digest(value: Any) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=8).hexdigest()


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

    @classmethod
    def build(
        cls,
        *,
        files: Sequence[str],
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
        """The identity of a dataset over `files` (fingerprints) with these infos and codecs per source."""
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
        return cls(json.loads(json.dumps(entries)), legacy)  # as a state saved to disk holds them

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
            same = (
                state.get("files") == self.entries["files"]
                and state["elastic"].get("order") == self.legacy_order
                and int(state.get("seed", -1)) == self.entries["seed"]
            )
            if same:
                return  # the files, the order's digest and the seed match: the same order
            raise ValueError(
                "elastic state saved by an earlier tfrecord_beam (state version 1) over another order: its "
                f"files {state.get('files')}, order {state['elastic'].get('order')} and seed {state.get('seed')} "
                f"differ from this dataset's ({self.entries['files']}, {self.legacy_order}, {self.entries['seed']}): "
                "its files, record counts, seed, shuffle_queue_size, shuffle_block, weights or infinite differ"
            )
        raise ValueError(
            "state saved by an earlier tfrecord_beam (state version 1)"
            + (" without elastic=True" if "elastic" not in state else "")
            + ": it does not record shuffle_queue_size, weights, infinite, skip_corrupt, the indexes or the "
            "compression, so whether its position means the same records here cannot be checked; resume it "
            "with the version that saved it, or start its epoch afresh (set_epoch) without loading it"
        )


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(not recorded)"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)
