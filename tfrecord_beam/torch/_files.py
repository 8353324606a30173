"""One source of records for the datasets: its files, their indexes, and reading a shard's pieces.

Records travel as `Block`s of a reader's chunk (see `_stream`), which remember where each
record came from so that decode errors can name it (the record number is None when a reader
started at a byte offset without an index and so does not know it).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .. import _index_check, blockgzip, fs
from .. import compression as _compression
from .. import index as _index
from .. import manifest as _manifest
from .._engine._common import HEADER_SIZE
from .._rangecache import RangeCache
from .._ranges import STAT_FIELDS, BlockMemory, ObjectChangedError, RangeSource, RemoteOptions
from .._readahead import ReadAheadFile, ReadAheadPlan
from .._reader import DEFAULT_CHUNK_SIZE, ReadSpan, RecordReader
from ..blockgzip import MemberTable
from ..errors import IndexMismatchError
from ..skipping import SkippingReader
from ._counters import CorruptCounter, SharedCounts
from ._stream import Block, drop_first
from .sampling import BYTES, RECORDS, STRIDE, FileInfo, Piece

Paths = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]

__all__ = ["CorruptCounter", "FileSet", "Paths", "RemoteCounts", "expand_data_paths", "pair_index_paths"]

_log = logging.getLogger("tfrecord_beam.torch")
MEMORY_LIMIT = 256 << 20  # bytes of blocks `keep_blocks` keeps in memory, at most
ENDS_BYTES = 64  # bytes of each end of a file in its content digest (`ends`)
_METADATA_THREADS = 16  # remote files whose size and index are asked for at once
# How long after this process took a remote file's identity (`FileSet.stat`, at listing) the
# first pass that reads the file takes it as checked: asking the store again moments later (one
# HEAD per file) would only repeat the answer. Later passes, other processes (DataLoader
# workers, forked or spawned) and a first pass begun later than this check as before.
FRESH_IDENTITY_S = 10.0


def _stop(piece: Piece) -> int:
    """The stop of a RECORDS or STRIDE piece (only BYTES pieces may leave it open)."""
    if piece.stop is None:
        raise AssertionError(f"a {piece.kind} piece without a stop: {piece}")
    return piece.stop


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
        if not directory:
            fs.refuse_special(pattern)  # a FIFO or pipe: read as 0 records (its size), exit 0
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


def _skipped(pieces: Sequence[Piece], skip: int) -> List[Optional[Piece]]:
    """`pieces` as `FileSet.stream` reads them after skipping `skip` records: the leading
    indexed pieces it skips unread are None, the one it starts inside is cut (the skip past a
    piece without an index is only known once read: the pieces after it are left whole)."""
    out: List[Optional[Piece]] = []
    for piece in pieces:
        if skip and piece.kind == RECORDS:
            size = _stop(piece) - piece.start
            if size <= skip:
                skip -= size
                out.append(None)
                continue
            piece = Piece(piece.file, RECORDS, piece.start + skip, piece.stop)
            skip = 0
        elif skip:
            skip = 0
        out.append(piece)
    return out


class RemoteCounts(SharedCounts):
    """Remote reads (`_ranges.STAT_FIELDS`) of a dataset's process and its DataLoader workers."""

    def __init__(self) -> None:
        super().__init__(STAT_FIELDS)


def _first_then(first: Any, then: Callable[[], Any]) -> Callable[[], Any]:
    """An opener that returns `first` (already open) once, then calls `then`."""
    pending = [first]
    return lambda: pending.pop() if pending else then()


class FileSet:
    """The data files of one source with their (optional) indexes and compression.

    `compression` is the core's setting (None = uncompressed, "auto" = from each file's name;
    the datasets pass `ReadOptions.compression`, where the drop-in None already became
    "auto"). Indexes are loaded on first use and kept (each DataLoader worker loads its own copy).

    Remote files (s3://, gs://, any URI but file://) are read through `ReadAheadFile`: each
    piece's byte range, planned from the index (or the gzip members holding its records), in
    blocks of `remote.readahead_bytes` with `remote.readahead_requests` in flight, through the
    local cache when `remote.cache_dir` is set; `remote_counts` counts the requests (shared
    with the DataLoader workers, like `counter`).
    """

    def __init__(
        self,
        data_path: Paths,
        index_path: Optional[Paths] = None,
        compression: Optional[str] = "auto",
        skip_corrupt: bool = False,
        counter: Optional[CorruptCounter] = None,
        remote: Optional[RemoteOptions] = None,
        remote_counts: Optional[SharedCounts] = None,
    ) -> None:
        data_path, index_path, self._committed_sizes = output_paths(data_path, index_path)
        self.skip_corrupt = skip_corrupt
        self.counter = counter if counter is not None else CorruptCounter()
        self.remote = remote if remote is not None else RemoteOptions()
        self.remote_counts = remote_counts if remote_counts is not None else RemoteCounts()
        self._stats: Dict[int, fs.FileStat] = {}
        self._sources: Dict[int, RangeSource] = {}
        self._checked: Set[int] = set()  # remote files checked to be the listed objects in this pass
        self._listed_at: Dict[int, Tuple[int, float]] = {}  # file -> (pid, monotonic time) of its `stat`
        self._passes = 0  # `new_pass` calls
        self._memory: Optional[BlockMemory] = None  # `keep_blocks`
        self.paths = expand_data_paths(data_path)
        self.index_paths = pair_index_paths(self.paths, index_path)
        self.compressions = [_compression.resolve(p, compression) for p in self.paths]
        self._indexes: List[Optional[np.ndarray]] = [None] * len(self.paths)
        self._members: List[Optional[MemberTable]] = [None] * len(self.paths)
        self._infos: Optional[List[FileInfo]] = None
        self._ends: Optional[List[str]] = None  # `ends`

    def __len__(self) -> int:
        return len(self.paths)

    def index(self, i: int) -> Optional[np.ndarray]:
        """The (n, 2) index of file `i`, or None without one; a stale one raises IndexMismatchError."""
        if self.index_paths[i] is None:
            return None
        if self._indexes[i] is None:
            index = _index.load_index(self.index_paths[i])
            size = self.stat(i).size if self.compressions[i] is None else None
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

    def ends(self) -> List[str]:
        """A digest of each file's first and last `ENDS_BYTES` bytes (the whole file when
        smaller), for a checkpoint's identity: a file rewritten with other records of the same
        size differs there (an uncompressed file ends with its last record's CRC, a gzip one
        with its data's CRC-32). One small read per file, asked once (remote: the first and last
        blocks, through the block cache and on a few threads; blocks an epoch reads anyway)."""
        if self._ends is None:

            def one(i: int) -> str:
                import hashlib

                size = self.stat(i).size
                with self.open_at(i, 0, None, readahead=False) as f:  # remote: its blocks, through the cache
                    if size <= 2 * ENDS_BYTES:
                        data = f.read()
                    else:
                        data = f.read(ENDS_BYTES)
                        f.seek(size - ENDS_BYTES)
                        data += f.read(ENDS_BYTES)
                return hashlib.blake2b(data, digest_size=8).hexdigest()

            remote = sum(fs.is_remote(p) for p in self.paths)
            if remote > 1:
                with ThreadPoolExecutor(min(_METADATA_THREADS, remote), thread_name_prefix="tfrb-ends") as pool:
                    self._ends = list(pool.map(one, range(len(self.paths))))
            else:
                self._ends = [one(i) for i in range(len(self.paths))]
        return self._ends

    def infos(self) -> List[FileInfo]:
        """What the shard planner needs for every file (remote files' sizes and indexes are
        asked for all at once: one round trip each, not one after another)."""
        if self._infos is None:
            self._fetch_remote_metadata()
            self._infos = []
            for i, path in enumerate(self.paths):
                index = self.index(i)
                size = self.stat(i).size
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

    def _fetch_remote_metadata(self) -> None:
        """Stat and load the index of every remote file on a few threads (errors are raised
        by the ordered pass that follows, for the first file in order that has one)."""
        remote = [i for i, path in enumerate(self.paths) if fs.is_remote(path)]
        if len(remote) < 2:
            return

        def load(i: int) -> None:
            try:
                self.index(i)
                self.stat(i)
            except Exception:  # noqa: BLE001 - raised again, in order, by the caller's pass
                pass

        with ThreadPoolExecutor(min(_METADATA_THREADS, len(remote)), thread_name_prefix="tfrb-meta") as pool:
            list(pool.map(load, remote))

    def read(self, piece: Piece, ahead: Optional[Tuple[ReadAheadPlan, int]] = None) -> Iterator[Block]:
        """The records of one piece, in file order, one `Block` per chunk the reader returns
        (`ahead`: a remote piece's blocks come from that plan's range, `plan`)."""
        path = self.paths[piece.file]
        compression = self.compressions[piece.file]
        expected = None
        starts = None

        open_file = self.opener(piece, ahead)

        def reader_of(boundaries: Optional[np.ndarray] = None, **where: Any) -> SkippingReader:
            return SkippingReader(
                path,
                ReadSpan(compression, **where),
                open_file=open_file,
                skip_corrupt=self.skip_corrupt,
                on_corrupt=self._corrupt,
                boundaries=boundaries,
            )

        if piece.kind == RECORDS:
            index = self.known_index(piece.file)
            first, last = piece.start, _stop(piece)
            expected = last - first
            end = int(index[last, 0]) if last < len(index) else None
            if compression is None:  # the index must describe the data it is read by
                starts = np.ascontiguousarray(index[:, 0])
                size = self.stat(piece.file).size
                raw = open_file()
                try:
                    _index_check.check_entry(raw, starts, first, size, self.index_paths[piece.file], path)
                except BaseException:
                    raw.close()
                    raise
                open_file = _first_then(raw, open_file)  # the reader goes on with the same blocks
            bounded = {}
            if compression is None and fs.is_remote(path):  # read what the range holds, not a whole
                # chunk past it: each byte past the planned range is a block fetched on its own
                span = (end if end is not None else self.stat(piece.file).size) - int(index[first, 0])
                # chunks are views of the read-ahead blocks (`ReadAheadFile.read_view`), read in
                # place up to a block's end: as large as a block, a batch lies in one chunk and
                # is decoded straight from it (no per-record list of payloads)
                largest = max(DEFAULT_CHUNK_SIZE, int(self.remote.readahead_bytes))
                bounded["chunk_size"] = max(1 << 12, min(largest, span + HEADER_SIZE))
            reader = reader_of(
                start_offset=int(index[first, 0]),
                end_offset=end,
                first_record_number=first,
                boundaries=index[:, 0],
                members=self.members(piece.file) or False,
                **bounded,
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

    # -- files and their bytes -------------------------------------------------------------------
    def stat(self, i: int) -> fs.FileStat:
        """The identity of file `i` (size; version and ETag for remote files) when the set was
        listed, asked once: every plan, index check and cache key of the file is of this one."""
        found = self._stats.get(i)
        if found is None:
            found = self._stats[i] = fs.file_stat(self.paths[i])
            self._listed_at[i] = (os.getpid(), time.monotonic())
        return found

    def _just_listed(self, i: int) -> bool:
        """Whether this process took file `i`'s identity under `FRESH_IDENTITY_S` ago and no
        pass has read the file since (then a pass's check would repeat the listing's answer)."""
        listed = self._listed_at.pop(i, None)
        return listed is not None and listed[0] == os.getpid() and time.monotonic() - listed[1] < FRESH_IDENTITY_S

    def new_pass(self) -> None:
        """A new pass over the files begins (an epoch's stream): each remote file read in it is
        checked again to be the object listed (`source`), so a replaced object is refused
        rather than read from its predecessor's cached blocks or against its old index."""
        self._checked = set()
        if self._passes:  # the listing's identities stand in for the first pass's check only
            self._listed_at = {}
        self._passes += 1

    def _check_identity(self, i: int) -> None:
        """ObjectChangedError naming remote file `i` when the store's object is no longer the
        one listed (another size, modification time or ETag)."""
        listed = self.stat(i)
        now = fs.file_stat(self.paths[i])
        if now != listed:
            raise ObjectChangedError(
                f"{fs.split_query(self.paths[i])[0]} was replaced after this dataset listed it (then: "
                f"{listed.describe()}; now: {now.describe()}): its planned reads, index and cached blocks are "
                "of the old object; make a new dataset to read the new one"
            )

    def source(self, i: int) -> RangeSource:
        """The ranges of remote file `i` (this process's reader of them), checked once per pass
        (`new_pass`) to be the object listed; the first pass in the process that listed it
        moments ago takes the listing as that check (`FRESH_IDENTITY_S`)."""
        if i not in self._checked and i in self._stats and not self._just_listed(i):
            self._check_identity(i)
        self._checked.add(i)
        found = self._sources.get(i)
        if found is None:
            remote = self.remote
            cache = None if remote.cache_dir is None else RangeCache(remote.cache_dir, remote.cache_limit)
            stat = self.stat(i)
            found = RangeSource(
                self.paths[i],
                stat.size,
                stat.version_key,
                remote,
                self.remote_counts,
                cache,
                self._memory,
                tag=stat.tag,
            )
            self._sources[i] = found
        return found

    def keep_blocks(self, records_span: int) -> None:
        """Keep the blocks last read of the remote files in memory, as many as `records_span`
        records fill (at the files' mean record size) and two more, at most `MEMORY_LIMIT`
        bytes: for readers that come back to them (an elastic order's chunks: the next one
        reads on in the blocks the last one ended in)."""
        if not any(fs.is_remote(p) for p in self.paths):
            return
        infos = self.infos()
        records = sum(info.num_records or 0 for info in infos)
        mean = sum(info.size for info in infos) / max(1, records)
        block = int(self.remote.readahead_bytes)
        blocks = -(-int(records_span * mean) // block) + 2
        self._memory = BlockMemory(max(2, min(blocks, MEMORY_LIMIT // block)))
        for source in self._sources.values():
            source.memory = self._memory

    def open_at(
        self,
        i: int,
        start: int = 0,
        stop: Optional[int] = None,
        readahead: bool = True,
        ahead: Optional[Tuple[ReadAheadPlan, int]] = None,
    ) -> Any:
        """File `i` opened for reading bytes [start, stop): a local file, or a `ReadAheadFile`
        that reads that range ahead (`readahead=False`: block by block as asked; `ahead`: as
        a range of that plan)."""
        if not fs.is_remote(self.paths[i]):
            return fs.open_input(self.paths[i])
        return ReadAheadFile(self.source(i), start, stop, readahead, ahead)

    def plan(self, pieces: Sequence[Optional[Piece]]) -> Optional[ReadAheadPlan]:
        """One read-ahead over the byte ranges of `pieces`, read in that order (range k is
        piece k's; None: a piece not read): the next remote piece's first blocks are fetched
        while this one is read. None when no piece is remote."""
        remote = [piece is not None and fs.is_remote(self.paths[piece.file]) for piece in pieces]
        if not any(remote):
            return None
        ranges = [
            (self.source(piece.file), *self.span(piece)) if piece is not None and far else (None, 0, 0)
            for piece, far in zip(pieces, remote)
        ]
        return ReadAheadPlan(ranges, self.remote.readahead_requests)

    def span(self, piece: Piece) -> "tuple[int, Optional[int]]":
        """The file bytes [start, stop) that reading `piece` touches (stop None: to the end)."""
        size = self.stat(piece.file).size
        if piece.kind == BYTES:
            return piece.start, None if piece.stop is None else min(size, piece.stop + HEADER_SIZE)
        if piece.kind != RECORDS:
            return 0, None
        index = self.known_index(piece.file)
        first, last = piece.start, _stop(piece)
        table = self.members(piece.file)
        if self.compressions[piece.file] is None:
            stop = int(index[last, 0]) + HEADER_SIZE if last < len(index) else size  # the next header is peeked at
            return int(index[first, 0]), min(stop, size)
        if table is None:  # an indexed stream without members: inflated from its start
            return 0, None
        start = int(table.compressed[table.member_at(int(index[first, 0]))])
        if last >= len(index):
            return start, None
        return start, int(table.compressed[table.member_at(int(index[last, 0])) + 1])

    def opener(self, piece: Piece, ahead: Optional[Tuple[ReadAheadPlan, int]] = None) -> Callable[[], Any]:
        """What the readers of `piece` open its file with (each call: a new file object)."""
        i = piece.file
        if not fs.is_remote(self.paths[i]):
            path = self.paths[i]
            return lambda: fs.open_input(path)
        start, stop = self.span(piece)
        return lambda: self.open_at(i, start, stop, ahead=ahead)

    def head(self, count: int) -> List[bytes]:
        """The first `count` payloads of the first file (a remote one: from its first block)."""
        with self.open_at(0, 0, None, readahead=False) as raw:
            # small chunks: only the blocks holding these records are fetched, not a whole 1 MiB chunk
            reader = RecordReader(raw, self.compressions[0], members=False, chunk_size=1 << 16)
            out: List[bytes] = []
            for chunk in reader.chunks():
                out.extend(chunk.payloads()[: count - len(out)])
                if len(out) >= count:
                    break
            return out

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_sources"] = {}  # a spawned worker opens its own
        state["_listed_at"] = {}  # and checks every file it reads: it listed none of them
        return state

    def _corrupt(self, path: str, offset: int, reason: str) -> None:
        self.counter.add()
        _log.warning("skipped a corrupt record: %s, byte offset %d: %s", path, offset, reason)

    def stream(self, pieces: Sequence[Piece], skip: int = 0) -> Iterator[Block]:
        """The records of `pieces` in order, in blocks, less the first `skip` (whole indexed
        pieces and the indexed part of a piece are skipped unread). Remote pieces are read
        through one `plan`, so reading ahead runs on from each piece into the next.

        With `skip_corrupt` the skip is counted by reading: a resumed position counts records
        handed out, which a skipped corrupt record is not, and the index's numbers count it."""
        self.new_pass()
        unread = not self.skip_corrupt
        plan = self.plan(_skipped(pieces, skip if unread else 0))
        try:
            for slot, piece in enumerate(pieces):
                if skip and unread and piece.kind == RECORDS:
                    size = _stop(piece) - piece.start
                    if size <= skip:
                        skip -= size
                        continue
                    piece = Piece(piece.file, RECORDS, piece.start + skip, piece.stop)
                    skip = 0
                for block in self.read(piece, None if plan is None else (plan, slot)):
                    block, skip = drop_first(block, skip)
                    if block is not None:
                        yield block
        finally:
            if plan is not None:
                plan.close()
