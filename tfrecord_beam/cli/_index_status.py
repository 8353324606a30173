"""Whether a data file's `.tfindex` describes it, checked as a scan reads the data.

`index_status` checks a whole index at once; `IndexCheck` compares it chunk by chunk with the
rows a scan reads (inspect, verify), holding a piece of the index at a time, never all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from .. import fs
from .._tfindex import default_index_path, iter_index_starts, part_difference
from ..compression import resolve as resolve_compression
from ..errors import IndexMismatchError


@dataclass
class IndexStatus:
    """Whether a data file's `.tfindex` is there and describes it.

    `state`: "absent", "valid", "stale" (describes some other data), "invalid" (not an index
    file), or "unchecked" (present, but a compressed file would have to be inflated to check).
    """

    path: str
    state: str
    detail: str = ""


def index_status(
    data_path: str, compression: Optional[str] = "auto", frames: Optional[np.ndarray] = None, complete: bool = True
) -> IndexStatus:
    """Check the default `.tfindex` beside `data_path`.

    With `frames` (the (n, 2) offsets and frame lengths read from the data, all of them when
    `complete`) the index is compared entry by entry. Without them, an uncompressed file gets
    the cheap check: the index's last record must end exactly at the end of the file (indexes
    are contiguous from offset 0 by construction, `load_index` checks that). A scan that reads
    the data a chunk at a time compares as it goes with `IndexCheck` instead.
    """
    check = IndexCheck(data_path, compression)
    if frames is not None:
        check.add(frames)
    return check.status(complete, compared=frames is not None)


class IndexCheck:
    """`index_status` for a scan that reads the data a chunk at a time: `add(rows)` for each
    chunk's (k, 2) rows, in order, then `status(complete)`. The index text is parsed in pieces
    in step with the rows (`_tfindex.iter_index_starts`): it holds the index rows of a piece
    not yet compared and the first difference, never the whole index nor the rows read (16
    bytes a record each). `status` parses the rest of the text (the whole of it must be well
    formed and contiguous, as `load_index` requires) for the count and where the index ends.
    An error that `index_status` would raise is raised by `status`."""

    def __init__(self, data_path: str, compression: Optional[str] = "auto") -> None:
        self.data_path, self.compression = data_path, compression
        self.path = default_index_path(data_path)
        self.rows = 0  # rows added so far
        self.difference: Optional[Tuple[int, str]] = None
        self._pieces: Optional[Iterator[Tuple[np.ndarray, int]]] = None  # None: not opened or all parsed
        self._opened = False
        self._entries = 0  # index entries parsed so far
        self._end = 0  # where the last of them ends
        self._pending = np.zeros((0, 2), np.int64)  # parsed index rows from record `self.rows` on
        self._known: Optional[IndexStatus] = None  # decided by the index alone
        self._error: Optional[BaseException] = None  # raised by `status`

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        try:
            if not fs.exists(self.path):
                self._known = IndexStatus(self.path, "absent")
                return
        except Exception as exc:  # noqa: BLE001 - kept for `status`, never the scan's error
            self._error = exc
            return
        self._pieces = iter_index_starts(self.path)

    def _comparing(self) -> bool:
        """Whether rows added are still compared: an index is there, well formed so far, and
        no difference found yet."""
        return self.difference is None and self._known is None and self._error is None

    def _parse_piece(self) -> Optional[np.ndarray]:
        """The (k, 2) rows of the next piece of the index; None when there is none (all
        parsed, or the index is invalid: `_known` / `_error` says so)."""
        if self._pieces is None:
            return None
        try:
            starts, end = next(self._pieces)
        except StopIteration:
            self._pieces = None
            return None
        except (IndexMismatchError, OSError, UnicodeDecodeError) as exc:
            self._pieces, self._known = None, IndexStatus(self.path, "invalid", str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - kept for `status`, never the scan's error
            self._pieces, self._error = None, exc
            return None
        rows = np.empty((len(starts), 2), dtype=np.int64)
        rows[:, 0] = starts  # the chain holds: each length is where the next entry starts, less its own start
        np.subtract(starts[1:], starts[:-1], out=rows[:-1, 1])
        rows[-1, 1] = end - int(starts[-1])
        self._entries, self._end = self._entries + len(starts), end
        return rows

    def add(self, frames: np.ndarray) -> None:
        """Compare the next rows read from the data (records `self.rows` on) with the index."""
        self._open()
        frames = np.asarray(frames, dtype=np.int64).reshape(-1, 2)
        if self._comparing():
            parts, have = [self._pending], len(self._pending)
            while have < len(frames):
                rows = self._parse_piece()
                if rows is None:
                    break
                parts.append(rows)
                have += len(rows)
            self._pending = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if self._known is None and self._error is None:
                part, self._pending = self._pending[: len(frames)], self._pending[len(frames) :]
                self.difference = part_difference(part, frames, "the data", self.rows)
                if self.difference is not None:
                    self._pending = np.zeros((0, 2), np.int64)
        self.rows += len(frames)

    def count(self, rows: int) -> None:
        """Note rows read but not compared: only when the index is absent (`absent`)."""
        if not self.absent():
            raise ValueError(f"{self.path}: rows of data with an index must be compared (add), not counted")
        self.rows += rows

    def absent(self) -> bool:
        """Whether there is no index beside the data (nothing to compare rows with)."""
        self._open()
        return self._known is not None and self._known.state == "absent"

    def add_chunk(self, chunk: Any, take: int) -> None:
        """`add` the rows of a reader chunk's first `take` records, made only while they are
        compared (no index, or a difference already found: only counted)."""
        self._open()
        if self._comparing():
            self.add(chunk.frames()[:take])
        else:
            self.rows += take

    def status(self, complete: bool = True, compared: bool = True) -> IndexStatus:
        """The index's state after the rows added (all of the data's when `complete`); with
        `compared=False` no rows were read and an uncompressed file gets the cheap size check."""
        self._open()
        self._pending = np.zeros((0, 2), np.int64)
        while self._parse_piece() is not None:  # the rest: its validity, count and end
            pass
        if self._error is not None:
            raise self._error
        if self._known is not None:
            return self._known
        end = self._end
        if compared:
            difference = self.difference or part_difference(
                np.zeros((0, 2), np.int64),
                np.zeros((0, 2), np.int64),
                "the data",
                self.rows,
                self._entries if complete else None,
            )
            if difference is not None:
                return IndexStatus(self.path, "stale", difference[1])
            if complete:
                return IndexStatus(self.path, "valid", "")
        if resolve_compression(self.data_path, self.compression) is not None:
            return IndexStatus(self.path, "unchecked", "compressed data: only a full read can check it")
        size = fs.file_size(self.data_path)
        if end != size:
            return IndexStatus(self.path, "stale", f"index ends at byte {end} but the file has {size} bytes")
        return IndexStatus(self.path, "valid", "size and first records checked" if compared else "")
