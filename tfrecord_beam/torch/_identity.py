"""What a saved dataset position refers to: one identity, built in one place, that a loaded
state must match before its positions are trusted.

A position counts records, so it only means something over the same records in the same
order. The identity has two parts, saved in every state (`files`, and `elastic.order` with
`elastic=True`) and checked together by `StateIdentity.check`, the clearer cause first:

* `files`, per source: the files' count, total size and a digest of their names (without
  directories: a copy of the data elsewhere resumes) and sizes, so a file added, removed,
  renamed or resized is refused, naming both sets;
* `order` (elastic only): the records of each source, and a digest of every file's record
  count, the shuffle (`shuffle_queue_size`, `shuffle_block`) and the mix (`weights`,
  `infinite`), which fix the global order a position indexes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence


def order_id(
    records: Sequence[int],
    file_counts: Sequence[Sequence[int]],
    queue: int,
    block: int,
    weights: Optional[Sequence[float]],
    infinite: bool,
) -> List[Any]:
    """The elastic order's part: [records per source, digest of what else fixes the order]."""
    parts = (
        [list(counts) for counts in file_counts],
        queue,
        block if queue else 0,
        None if weights is None else [float(w) for w in weights],
        bool(infinite),
    )
    return [list(records), hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()]


@dataclass(frozen=True)
class StateIdentity:
    """The files of each source (`FileSet.fingerprint()`) and, with elastic, the order's id."""

    files: List[str]
    order: Optional[List[Any]] = None

    def check(self, state: Mapping[str, Any]) -> None:
        """Refuse a state saved over other files, or (elastic) over another order of them."""
        saved_files = state.get("files")  # absent in states saved before it was recorded
        if saved_files is not None and list(saved_files) != self.files:
            raise ValueError(
                f"state was saved over other files than this dataset reads (saved: {list(saved_files)}; now: "
                f"{self.files}): its positions would skip or repeat records; resume over the same files"
            )
        if self.order is None:
            return
        saved = state["elastic"].get("order")
        if saved is not None and list(saved) == self.order:
            return
        saved = saved or [None, None]
        why = (
            "the files' names and sizes match, so their indexes' record counts, shuffle_queue_size, "
            "shuffle_block, weights or infinite differ"
            if saved_files is not None
            else "its files, their record counts, shuffle_queue_size, shuffle_block, weights or infinite differ"
        )
        raise ValueError(
            f"state of another elastic order: saved over {saved[0]} records (per source), order {saved[1]}; "
            f"this dataset's is over {self.order[0]}, order {self.order[1]}: {why}, so the saved "
            "position would lose or repeat records"
        )
