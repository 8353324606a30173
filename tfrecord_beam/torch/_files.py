"""One source of records for the datasets: its files, their indexes, and reading a shard's pieces.

Records travel as `Block`s of a reader's chunk (see `_stream`), which remember where each
record came from so that decode errors can name it (the record number is None when a reader
started at a byte offset without an index and so does not know it).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from typing import Any, Iterator, List, Optional, Sequence, Union

import numpy as np

from .. import _index_check, blockgzip, fs
from .. import compression as _compression
from .. import index as _index
from .. import manifest as _manifest
from ..blockgzip import MemberTable
from ..errors import IndexMismatchError
from ..skipping import SkippingReader
from ._stream import Block, drop_first
from .sampling import BYTES, RECORDS, STRIDE, FileInfo, Piece

Paths = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]

_log = logging.getLogger("tfrecord_beam.torch")


def _stop(piece: Piece) -> int:
    """The stop of a RECORDS or STRIDE piece (only BYTES pieces may leave it open)."""
    if piece.stop is None:
        raise AssertionError(f"a {piece.kind} piece without a stop: {piece}")
    return piece.stop


class CorruptCounter:
    """How many corrupt records `skip_corrupt` skipped, counted across DataLoader workers.

    Shared memory without a lock (a lock of one multiprocessing context cannot cross into
    another: fork vs spawn workers): one slot per worker, each written by its worker only,
    summed on reading. Forked and spawned workers both inherit it.
    """

    SLOTS = 257  # the main process, then DataLoader workers 0..255

    def __init__(self) -> None:
        self._shared = multiprocessing.RawArray("q", self.SLOTS)
        self._local = 0

    @property
    def value(self) -> int:
        return int(sum(self._shared)) if self._shared is not None else self._local

    def add(self, n: int = 1) -> None:
        if self._shared is None:
            self._local += n
            return
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        slot = 0 if info is None else 1 + info.id % (self.SLOTS - 1)
        self._shared[slot] += n

    def __getstate__(self):
        try:  # a worker being started: share the counter; any other pickle: a snapshot
            from multiprocessing.context import assert_spawning

            assert_spawning(self)
            return {"_shared": self._shared, "_local": 0}
        except RuntimeError:
            return {"_shared": None, "_local": self.value}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)


def output_paths(data_path: Paths, index_path: Optional[Paths]):
    """A job's output directory or prefix with a manifest -> (its shards, their indexes, their
    sizes by path); anything else -> (data_path, index_path, {}).

    An output (`out/train`, or `out/` holding one) is read through its `_MANIFEST.*.json`, so
    only the committed shards are read and their indexes come with them. Any path touched by
    a commit that has begun and not finished raises `CommitInProgressError`.
    """
    _manifest.check_no_commit_pending(  # a half-committed output reads as neither old nor new
        [os.fspath(data_path)] if isinstance(data_path, (str, os.PathLike)) else [os.fspath(p) for p in data_path]
    )
    if isinstance(data_path, (str, os.PathLike)):
        found = _manifest.find_manifest(os.fspath(data_path))
        if found is not None:
            manifest = _manifest.read_manifest(found)
            if manifest.shards and all(e.compression == "parquet" for e in manifest.shards):
                raise _manifest.ManifestError(found, "a Parquet output: it holds no TFRecord shards")
            indexes = _manifest.index_paths(manifest, found) if index_path is None else index_path
            paths = _manifest.shard_paths(manifest, found)
            return paths, indexes, {p: e.file_bytes for p, e in zip(paths, manifest.shards)}
    return data_path, index_path, {}


def expand_data_paths(data_path: Paths) -> List[str]:
    """A path, glob, directory (its data files, as `fs.data_files` lists them) or list of them
    as a sorted-per-pattern list of files; raises when none match."""
    patterns = [data_path] if isinstance(data_path, (str, os.PathLike)) else list(data_path)
    paths: List[str] = []
    for pattern in (os.fspath(p) for p in patterns):
        incomplete = _manifest.incomplete_output(pattern)
        if incomplete:
            raise FileNotFoundError(incomplete)
        directory = not fs.is_pattern(pattern) and fs.is_dir(pattern)
        paths.extend(fs.data_files(pattern) if directory else fs.expand(pattern))
    if not paths:
        raise FileNotFoundError(f"no TFRecord files match {data_path!r}")
    return paths


def pair_index_paths(data_paths: List[str], index_path: Optional[Paths]) -> List[Optional[str]]:
    """One index path (or None) per data file.

    `index_path` may be None (no indexes), a list (one per data file, entries may be None),
    a glob (expanded and sorted; must match the data files one for one), or a single path
    when there is a single data file.
    """
    if index_path is None:
        return [None] * len(data_paths)
    paths: List[Optional[str]]
    if isinstance(index_path, (list, tuple)):
        paths = [None if p is None else os.fspath(p) for p in index_path]
    elif isinstance(index_path, (str, os.PathLike)):
        text = os.fspath(index_path)
        paths = list(fs.expand(text)) if fs.is_glob(text) else [text]
    else:
        raise TypeError(f"index_path must be None, a path, a glob or a list of paths, not {type(index_path).__name__}")
    if len(paths) != len(data_paths):
        raise ValueError(
            f"{len(data_paths)} data files but {len(paths)} index paths from {index_path!r}; "
            "give one index per data file (a list, a glob matching as many, or None)"
        )
    return paths


class FileSet:
    """The data files of one source with their (optional) indexes and compression.

    `compression` is the core's setting (None = uncompressed, "auto" = from each file's name;
    the datasets pass `ReadOptions.compression`, where the drop-in None already became
    "auto"). Indexes are loaded on first use and kept (each DataLoader worker loads its own copy).
    """

    def __init__(
        self,
        data_path: Paths,
        index_path: Optional[Paths] = None,
        compression: Optional[str] = "auto",
        skip_corrupt: bool = False,
        counter: Optional[CorruptCounter] = None,
    ) -> None:
        data_path, index_path, self._committed_sizes = output_paths(data_path, index_path)
        self.skip_corrupt = skip_corrupt
        self.counter = counter if counter is not None else CorruptCounter()
        self.paths = expand_data_paths(data_path)
        self.index_paths = pair_index_paths(self.paths, index_path)
        self.compressions = [_compression.resolve(p, compression) for p in self.paths]
        self._indexes: List[Optional[np.ndarray]] = [None] * len(self.paths)
        self._members: List[Optional[MemberTable]] = [None] * len(self.paths)
        self._infos: Optional[List[FileInfo]] = None

    def __len__(self) -> int:
        return len(self.paths)

    def index(self, i: int) -> Optional[np.ndarray]:
        """The (n, 2) index of file `i`, or None without one; a stale one raises IndexMismatchError."""
        if self.index_paths[i] is None:
            return None
        if self._indexes[i] is None:
            index = _index.load_index(self.index_paths[i])
            size = fs.file_size(self.paths[i]) if self.compressions[i] is None else None
            self._indexes[i] = _index.check_index(index, size, self.index_paths[i], self.paths[i])
            if _compression.seeks_by_members(self.compressions[i]):
                self._members[i] = blockgzip.checked_member_table(self.paths[i], self.index_paths[i], index)
        return self._indexes[i]

    def known_index(self, i: int) -> np.ndarray:
        """The index of file `i`, which the caller knows it has (an indexed piece)."""
        index = self.index(i)
        if index is None:
            raise AssertionError(f"{self.paths[i]} has no index")
        return index

    def members(self, i: int) -> Optional[MemberTable]:
        """The member table of a block-gzip file `i` (from its index), else None."""
        self.index(i)
        return self._members[i]

    def infos(self) -> List[FileInfo]:
        """What the shard planner needs for every file."""
        if self._infos is None:
            self._infos = []
            for i, path in enumerate(self.paths):
                index = self.index(i)
                size = fs.file_size(path)
                committed = self._committed_sizes.get(path)
                if committed is not None and size != committed:  # the cheap check against the manifest
                    raise _manifest.ManifestError(
                        path,
                        f"{size} bytes, but its output's manifest says {committed}: "
                        "the shard changed after the job committed it",
                    )
                seekable = self.compressions[i] is None or self.members(i) is not None  # block-gzip seeks
                self._infos.append(FileInfo(not seekable, size, None if index is None else len(index)))
        return self._infos

    def read(self, piece: Piece) -> Iterator[Block]:
        """The records of one piece, in file order, one `Block` per chunk the reader returns."""
        path = self.paths[piece.file]
        compression = self.compressions[piece.file]
        expected = None
        starts = None

        def reader_of(**where: Any) -> SkippingReader:
            return SkippingReader(
                path,
                compression,
                open_file=lambda: fs.open_input(path),
                skip_corrupt=self.skip_corrupt,
                on_corrupt=self._corrupt,
                **where,
            )

        if piece.kind == RECORDS:
            index = self.known_index(piece.file)
            first, last = piece.start, _stop(piece)
            expected = last - first
            end = int(index[last, 0]) if last < len(index) else None
            if compression is None:  # the index must describe the data it is read by
                starts = np.ascontiguousarray(index[:, 0])
                size = fs.file_size(path)
                with fs.open_input(path) as raw:
                    _index_check.check_entry(raw, starts, first, size, self.index_paths[piece.file], path)
            reader = reader_of(
                start_offset=int(index[first, 0]),
                end_offset=end,
                first_record_number=first,
                boundaries=index[:, 0],
                members=self.members(piece.file) or False,
            )
        elif piece.kind == BYTES:  # resync also checks the split point at the end
            reader = reader_of(start_offset=piece.start, end_offset=piece.stop, resync=True)
        else:
            reader = reader_of()
        count = 0
        for chunk in reader.chunks():
            n = len(chunk)
            first_number = chunk.first_record_number
            if starts is not None:
                assert first_number is not None  # an indexed read knows its record numbers
                _index_check.check_records(
                    starts, first_number, chunk.record_offsets, self.index_paths[piece.file], path
                )
            numbers = None if first_number is None else np.arange(first_number, first_number + n, dtype=np.int64)
            block = Block(
                chunk.buffer, chunk.payload_offsets, chunk.payload_lengths, chunk.record_offsets, numbers, path
            )
            if piece.kind == STRIDE:
                assert numbers is not None  # a stride read starts at the file's first record
                block = block.part(numbers % _stop(piece) == piece.start)
            count += n
            if len(block):
                yield block
        if expected is not None and count + reader.skipped != expected:
            raise IndexMismatchError(
                self.index_paths[piece.file],
                None,
                piece.start,
                f"index lists {expected} records from record {piece.start} on but {path} holds {count} (stale index)",
            )

    def _corrupt(self, path: str, offset: int, reason: str) -> None:
        self.counter.add()
        _log.warning("skipped a corrupt record: %s, byte offset %d: %s", path, offset, reason)

    def stream(self, pieces: Sequence[Piece], skip: int = 0) -> Iterator[Block]:
        """The records of `pieces` in order, in blocks, less the first `skip` (whole indexed
        pieces and the indexed part of a piece are skipped unread)."""
        for piece in pieces:
            if skip and piece.kind == RECORDS:
                size = _stop(piece) - piece.start
                if size <= skip:
                    skip -= size
                    continue
                piece = Piece(piece.file, RECORDS, piece.start + skip, piece.stop)
                skip = 0
            for block in self.read(piece):
                block, skip = drop_first(block, skip)
                if block is not None:
                    yield block
