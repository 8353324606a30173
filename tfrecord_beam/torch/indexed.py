"""Map-style access to TFRecord files: `len()` and `dataset[i]` through `.tfindex` files.

Random access needs seeking: uncompressed files, and block-gzip files (`blockgzip`), where
`dataset[i]` inflates the one gzip member holding record i (the last member read is kept, so
reading in order inflates each member once). Each process keeps its own open file handles
(reopened after a fork, dropped when pickled for `spawn` workers).
"""

from __future__ import annotations

import numbers
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch.utils.data

from .. import _engine, _index_check, blockgzip
from .. import index as _index
from .._engine._common import FRAME_OVERHEAD, HEADER_SIZE, STATUS_OK
from .._ranges import RemoteOptions
from .._read_options import ReadOptions
from ..errors import CorruptRecordError, TruncatedRecordError
from ..example import Description
from . import _ring
from ._collate import decode_record
from ._files import FileSet, Paths
from ._worker import settle_worker
from .sampling import WHOLE, Piece


class IndexedTFRecordDataset(torch.utils.data.Dataset):
    """Records of one or more uncompressed or block-gzip TFRecord files, addressed by their global number.

    Args:
        data_path: a path, a glob, or a list of them (records are numbered file after file).
        index_path: one index per data file (list, glob or single path), or None to build the
            indexes in memory by scanning the files once.
        description, transform, sequence_description: as for `TFRecordDataset`.
        compression_type: None (from the file name); compressed files must be block-gzip with
            their index (its member table), others raise ValueError.
        verify: check both CRCs of every record read (default True; keyword-only, as is
            `skip_corrupt`).
        skip_corrupt: when the indexes are built here (`index_path=None`), leave corrupt records
            out (counted in `corrupt_records`, logged); with index files a corrupt record still
            raises on access, since `len()` was fixed by the index.
        cache_dir, cache_limit, readahead_bytes, request_timeout, request_attempts: for remote
            files, as for `TFRecordDataset`, except that random access reads no further ahead
            than the block (`readahead_bytes`) holding the record: with a `cache_dir`, every
            block is fetched once for all epochs; without one, pick a small `readahead_bytes`
            for random order (the last two blocks read are kept in memory).
    """

    def __init__(
        self,
        data_path: Paths,
        index_path: Optional[Paths] = None,
        description: Description = None,
        transform: Optional[Callable[[Any], Any]] = None,
        sequence_description: Description = None,
        compression_type: Optional[str] = None,
        *,
        verify: bool = True,
        skip_corrupt: bool = False,
        cache_dir: Optional[str] = None,
        cache_limit: Optional[int] = None,
        readahead_bytes: int = RemoteOptions.readahead_bytes,
        request_timeout: float = RemoteOptions.timeout,
        request_attempts: int = RemoteOptions.attempts,
    ) -> None:
        self.options = options = ReadOptions.dropin(
            description, sequence_description, compression_type, verify=verify, skip_corrupt=skip_corrupt
        )
        remote = RemoteOptions(
            readahead_bytes=int(readahead_bytes),
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache_limit=None if cache_limit is None else int(cache_limit),
            timeout=float(request_timeout),
            attempts=int(request_attempts),
        )
        self.files = FileSet(data_path, index_path, options.compression, options.skip_corrupt, remote=remote)
        for i, (path, kind) in enumerate(zip(self.files.paths, self.files.compressions)):
            if kind is not None and (self.files.index_paths[i] is None or self.files.members(i) is None):
                raise ValueError(
                    f"{path}: IndexedTFRecordDataset needs uncompressed or block-gzip files (with "
                    f"their index) for random access, but this one is {kind} without a gzip member "
                    "table; rewrite it with RecordWriter(..., index_path=True) or use TFRecordDataset"
                )
        self.description = description  # as given (reading uses `self.options`)
        self.sequence_description = sequence_description
        self.compression_type = compression_type
        self.transform = transform
        self._indexes: List[np.ndarray] = [
            self.files.known_index(i) if self.files.index_paths[i] is not None else self._scan(i)
            for i in range(len(self.files.paths))
        ]
        self._starts = np.concatenate([[0], np.cumsum([len(ix) for ix in self._indexes])]).astype(np.int64)
        self._handles: Dict[int, Any] = {}
        self._member: Tuple[int, int, bytes] = (-1, -1, b"")  # (file, member, its bytes): the last inflated
        self._pid = os.getpid()
        self._ring = _ring.make()  # made here, in the process that will read the batches

    @property
    def verify(self) -> bool:
        """Whether both CRCs of every record read are checked (`options.verify`; fixed at construction)."""
        return bool(self.options.verify)

    @property
    def corrupt_records(self) -> int:
        """Corrupt records left out while building the indexes (`skip_corrupt=True`)."""
        return self.files.counter.value

    def remote_stats(self) -> Dict[str, int]:
        """Remote reads so far, here and in DataLoader workers (as `TFRecordDataset.remote_stats`)."""
        return self.files.remote_counts.values()

    def _scan(self, i: int) -> np.ndarray:
        """The index of file `i` by one scan (both CRCs checked; bad records left out with skip_corrupt)."""
        if not self.files.skip_corrupt:
            return _index.build_index(self.files.paths[i], None)
        parts = [
            np.stack([b.record_offsets, b.payload_lengths + FRAME_OVERHEAD], axis=1)
            for b in self.files.read(Piece(i, WHOLE, 0, 0))
        ]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros((0, 2), np.int64)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def locate(self, i: int):
        """(file number, record number in that file) of global record `i` (negative counts from the end)."""
        if not isinstance(i, (numbers.Integral, np.integer)):
            raise TypeError(f"record numbers are integers, not {type(i).__name__}")
        n = len(self)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"record {i} is out of range for {n} records")
        f = int(np.searchsorted(self._starts, j, side="right")) - 1
        return f, j - int(self._starts[f])

    def __getitem__(self, i: int) -> Any:
        f, r = self.locate(i)
        path = self.files.paths[f]
        offset, length = (int(v) for v in self._indexes[f][r])
        frame = self._read(f, offset, length)
        payload = self._check(frame, f, offset, r, length)
        options = self.options
        sample = decode_record(
            (payload, path, offset, r), options.description, options.sequence_description, bool(options.sequence)
        )
        return self.transform(sample) if self.transform is not None else sample

    def _read(self, f: int, offset: int, length: int) -> bytes:
        if self._pid != os.getpid():  # forked: do not share file positions with the parent
            self._handles, self._pid = {}, os.getpid()
            settle_worker()  # a DataLoader worker: the collector stops walking the parent's heap
            _ring.serve(self._ring)  # batches' bytes go home through shared memory (`_ring`)
        handle = self._handles.get(f)
        if handle is None:
            handle = self._handles[f] = self.files.open_at(f, readahead=False)
        table = self.files.members(f) if self.files.compressions[f] is not None else None
        if table is None:
            handle.seek(offset)
            return handle.read(length)
        m = table.member_at(offset)
        if self._member[:2] != (f, m):
            self._member = (f, m, blockgzip.read_member(handle, table, m, self.files.paths[f]))
        start = offset - int(table.uncompressed[m])
        return self._member[2][start : start + length]

    def _check(self, frame: bytes, f: int, offset: int, r: int, length: int) -> bytes:
        path = self.files.paths[f]
        if len(frame) < length or length < FRAME_OVERHEAD:
            self._blame_index(f, r)
            raise TruncatedRecordError(
                path,
                offset,
                r,
                f"index says {length} bytes but only {len(frame)} are there (truncated file or stale index)",
            )
        offsets, lengths, consumed, status = _engine.scan_frames(frame, self.options.verify, 1)
        if status != STATUS_OK or consumed != length:
            self._blame_index(f, r)
            what = (
                "CRC mismatch"
                if status not in (STATUS_OK,)
                else f"frame of {consumed} bytes where the index says {length}"
            )
            raise CorruptRecordError(path, offset, r, f"{what} (corrupted record or stale index)")
        return frame[HEADER_SIZE : HEADER_SIZE + int(lengths[0])]

    def _blame_index(self, f: int, r: int) -> None:
        """Record `r` is not where file `f`'s index file says: raise IndexMismatchError when the
        headers around it disagree with the index (`_index_check.check_entry`), so a stale
        index is not reported as corrupt data."""
        if self.files.index_paths[f] is None or self.files.compressions[f] is not None:
            return  # an index built here from the data, or offsets of an inflated stream
        index = self._indexes[f]
        _index_check.check_entry(
            self._handles[f],
            np.ascontiguousarray(index[:, 0]),
            r,
            int(index[-1, 0]) + int(index[-1, 1]),
            self.files.index_paths[f],
            self.files.paths[f],
        )

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"] = {}
        state["_member"] = (-1, -1, b"")
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __del__(self) -> None:
        for handle in getattr(self, "_handles", {}).values():
            try:
                handle.close()
            except Exception:  # noqa: BLE001
                pass
