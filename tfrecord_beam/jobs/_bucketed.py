"""A bounded-memory shuffle of framed records: spill keyed runs, merge them bucket by bucket.

Readers give each record they emit a destination shard and an i.i.d. random 64-bit key. The
key's top bits pick one of the shard's `buckets` (so a bucket holds about 1/buckets of the
shard); a `RunSpiller` buffers at most `RUN_BYTES` of frames, sorts them by (shard, bucket,
key) and appends them to one temporary file as segments (keys, then frames). Each segment is
described by a row of 6 numbers (48 B), which goes to a local temporary file as its run is
written; at the end the rows are sorted there by (shard, bucket, run) and appended to the
spill file (`sort_rows`), and one `SegmentTable` per shard says where its rows are (the
runner moves one small element per spill file and shard, whatever the segments). A shard
writer then takes its buckets in order, reads the rows of one bucket from each table
(`TableRows`) and every segment of the bucket, sorts the records by key and writes them
(`merge_bucket`): the shard is its records in key order, a uniform permutation that is a
pure function of the keys. Memory is a run or a bucket, never a shard, and no segment's row
is held longer than its run or its bucket. A bucket that turns out larger than the
writer may hold (`write_merged(max_bytes=...)`: compressed inputs inflate past their
estimate, or random variation) is first cut by key quantiles into smaller ones through
temporary files (`split_bucket`); each segment's keys are sorted, so a cut is a few
contiguous slices per segment and the order is kept.

Both external shuffles use this module: `mix` (destinations chosen by its sampler, buckets
by shard size) and `reshard --shuffle` (`tfrecord_beam.beam.shuffle`: the shard too is a
key range).
"""

from __future__ import annotations

import io
import math
import shutil
import tempfile
import uuid
from typing import BinaryIO, Callable, ContextManager, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .. import _engine
from .._engine._common import FRAME_OVERHEAD, HEADER_SIZE, STATUS_OK, VERIFY_ALL, VERIFY_LENGTHS
from ..errors import CorruptRecordError
from ._walk import footers_at

RUN_BYTES = 4 << 20  # frames buffered by a reader before it spills a run
BUCKET_BYTES = 4 << 20  # target size of one bucket of a shard
BLOCK_BYTES = 4 << 20  # a merged bucket goes to the writer in blocks of about this size


class Segment(NamedTuple):
    """The records of one (shard, bucket) in one run of one spill file."""

    shard: int
    bucket: int
    path: str
    run: Tuple[int, int]  # (task, run number): orders segments deterministically
    offset: int  # where the keys start; the frames follow them
    records: int
    frame_bytes: int
    group: int


ROW = 6  # int64 numbers a segment's row: (shard, run, bucket, offset, records, frame bytes)
ROW_BYTES = 8 * ROW


class SegmentTable(NamedTuple):
    """Where the segments of one spill file's runs bound for one shard are described: `rows`
    rows of `ROW` int64 (shard, run number of `task`'s, bucket, offset, records, frame bytes)
    at `offset` of the spill file, sorted by (bucket, run). A few numbers whatever the
    segments: the runner moves one small element per spill file and shard, and the rows are
    read back bucket by bucket (`TableRows`)."""

    shard: int
    path: str
    task: int
    group: int
    offset: int
    rows: int

    def segments(self, open_input: Callable[[str], BinaryIO]) -> List[Segment]:
        """All of the table's segments, in (bucket, run) order (tests, small tables)."""
        handles = Handles(open_input)
        try:
            cursor = TableRows(self, handles, block_rows=max(1, self.rows))
            return [segment for bucket in by_bucket([cursor]) for segment in bucket]
        finally:
            handles.close()


def buckets_for(shard_bytes: float, bucket_bytes: int = BUCKET_BYTES) -> int:
    """How many buckets a shard of about `shard_bytes` needs."""
    return max(1, int(np.ceil(shard_bytes / bucket_bytes)))


def bucket_of(keys: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Bucket of each key (its top 32 bits scaled to [0, buckets))."""
    top = (np.asarray(keys, dtype=np.uint64) >> np.uint64(32)).astype(np.uint64)
    return ((top * np.asarray(buckets, dtype=np.uint64)) >> np.uint64(32)).astype(np.int64)


class RunSpiller:
    """Collects selected frames of chunks, spills them as sorted runs into one file, then the
    runs' segment rows sorted by (shard, bucket, run) (`close`). Memory is one run, whatever
    the number of runs: each run's rows go to a local temporary file as the run is written
    (48 B a segment, ~1.6 M segments for 100 GB in 64 MB runs into 1,000 buckets), and are
    sorted there (`sort_rows`)."""

    def __init__(
        self,
        path: str,
        task: int,
        group: int,
        buckets: Sequence[int],
        atomic_output: Callable[[str], ContextManager],
        run_bytes: int = RUN_BYTES,
    ) -> None:
        self.path, self.task, self.group = path, task, group
        self.buckets = np.asarray(buckets, dtype=np.int64)
        self.run_bytes = run_bytes
        self._cm = atomic_output(path)
        self._handle, self._commit = self._cm.__enter__()
        self._written = 0
        self._runs = 0
        self._pending: list = []  # (chunk bytes, frame starts, sizes, shards, keys)
        self._pending_bytes = 0
        self._rows: Optional[io.BufferedRandom] = None  # local temporary file: the runs' rows, in run order
        self._row_count = 0
        self._block_rows = max(1024, run_bytes // 256)  # rows sorted at a time: ~0.6 of a run's bytes

    def add(self, framed, starts: np.ndarray, sizes: np.ndarray, shards: np.ndarray, keys: np.ndarray) -> None:
        """Frames framed[starts[i] : starts[i] + sizes[i]] go to shards[i] with keys[i]."""
        if not len(starts):
            return
        selected = int(sizes.sum())
        framed = memoryview(framed)  # slices of it are views: a spill copies each frame once
        if 2 * selected < len(framed):  # a sparse selection: keep only its frames, not the chunk
            framed = memoryview(b"".join([framed[a : a + n] for a, n in zip(starts.tolist(), sizes.tolist())]))
            starts = np.cumsum(sizes) - sizes
        self._pending.append((framed, starts, sizes, shards, keys))
        self._pending_bytes += max(len(framed), selected)
        if self._pending_bytes >= self.run_bytes:
            self._spill()

    def _spill(self) -> None:
        if not self._pending:
            return
        chunk_id = np.concatenate([np.full(len(p[1]), i, np.int64) for i, p in enumerate(self._pending)])
        starts = np.concatenate([p[1] for p in self._pending])
        sizes = np.concatenate([p[2] for p in self._pending])
        shards = np.concatenate([p[3] for p in self._pending]).astype(np.int64)
        keys = np.concatenate([p[4] for p in self._pending])
        buckets = bucket_of(keys, self.buckets[shards])
        order = np.lexsort((keys, buckets, shards))
        dest = np.stack([shards[order], buckets[order]], axis=1)
        bounds = np.flatnonzero(np.any(dest[1:] != dest[:-1], axis=1)) + 1
        chunks = [p[0] for p in self._pending]
        rows: List[Tuple[int, int, int, int, int, int]] = []
        for part in np.split(order, bounds):
            shard, bucket = int(shards[part[0]]), int(buckets[part[0]])
            key_bytes = keys[part].astype("<u8").tobytes()
            frames = b"".join(
                [
                    chunks[c][s : s + n]
                    for c, s, n in zip(chunk_id[part].tolist(), starts[part].tolist(), sizes[part].tolist())
                ]
            )
            self._handle.write(key_bytes)
            self._handle.write(frames)
            rows.append((shard, self._runs, bucket, self._written, len(part), len(frames)))
            self._written += len(key_bytes) + len(frames)
        if self._rows is None:
            self._rows = tempfile.TemporaryFile(prefix="tfrb-rows-")
        self._rows.write(np.asarray(rows, dtype="<i8").tobytes())
        self._row_count += len(rows)
        self._runs += 1
        self._pending, self._pending_bytes = [], 0

    def close(self) -> List[SegmentTable]:
        """Spill what is left, append the runs' rows sorted by (shard, bucket, run) to the file
        (sorted in a second local temporary file: the spill file is written in order), commit
        it; one SegmentTable per shard present, pointing at its rows."""
        self._spill()
        tables: List[SegmentTable] = []
        if self._rows is not None:
            with tempfile.TemporaryFile(prefix="tfrb-rows-") as ordered:
                codes, counts = sort_rows(self._rows, self._row_count, ordered, self._block_rows, self.path)
                ordered.seek(0)
                shutil.copyfileobj(ordered, self._handle, ROW_BYTES * self._block_rows)
            self._rows.close()
            self._rows = None
            shard_of = codes >> 32
            shards, firsts = np.unique(shard_of, return_index=True)
            starts = np.concatenate([[0], np.cumsum(counts)])
            ends = [*firsts[1:].tolist(), len(codes)]
            for shard, first, end in zip(shards.tolist(), firsts.tolist(), ends):
                at, stop = int(starts[first]), int(starts[end])
                tables.append(
                    SegmentTable(shard, self.path, self.task, self.group, self._written + ROW_BYTES * at, stop - at)
                )
        self._commit()
        self._cm.__exit__(None, None, None)
        return tables

    def abort(self) -> None:
        if self._rows is not None:
            self._rows.close()
            self._rows = None
        self._cm.__exit__(RuntimeError, RuntimeError("aborted"), None)


def _row_blocks(source: io.BufferedRandom, rows: int, block_rows: int, name: str) -> Iterator[np.ndarray]:
    """The `rows` rows of a local file, `block_rows` at a time, each block read into the same
    buffer (a block is valid until the next one is read)."""
    buffer = bytearray(ROW_BYTES * min(block_rows, rows))
    view = memoryview(buffer)
    source.seek(0)
    for first in range(0, rows, block_rows):
        n = min(block_rows, rows - first)
        if source.readinto(view[: ROW_BYTES * n]) != ROW_BYTES * n:
            raise CorruptRecordError(name, ROW_BYTES * first, None, "segment rows cut short (local temporary file)")
        yield np.frombuffer(buffer, dtype="<i8", count=ROW * n).reshape(n, ROW)


def sort_rows(
    source: io.BufferedRandom, rows: int, out: io.BufferedRandom, block_rows: int, name: str = "segment rows"
) -> Tuple[np.ndarray, np.ndarray]:
    """A stable counting sort of the `rows` segment rows of `source` (a local file) by (shard,
    bucket) into `out` (a local file: each block's rows go to their computed places), in
    memory of a block of `block_rows` rows and a count per (shard, bucket) present; `name`
    names the spill file in errors. Returns the pairs present, in order, as codes
    `shard << 32 | bucket`, and their row counts."""

    def codes_of(block: np.ndarray) -> np.ndarray:
        return (block[:, 0] << 32) | block[:, 2]

    codes, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for block in _row_blocks(source, rows, block_rows, name):  # first pass: rows per pair
        present, times = np.unique(codes_of(block), return_counts=True)
        merged = np.union1d(codes, present)
        total = np.zeros(len(merged), np.int64)
        total[np.searchsorted(merged, codes)] += counts
        total[np.searchsorted(merged, present)] += times
        codes, counts = merged, total
    free = np.cumsum(counts) - counts  # next row of each pair's range in `out`
    for block in _row_blocks(source, rows, block_rows, name):  # second pass: each row to its place
        pair = np.searchsorted(codes, codes_of(block))
        order = np.argsort(pair, kind="stable")  # stable: runs stay in order within a pair
        pair, block = pair[order], block[order]
        cuts = [0, *(np.flatnonzero(pair[1:] != pair[:-1]) + 1).tolist(), len(pair)]
        for a, b in zip(cuts[:-1], cuts[1:]):
            p = int(pair[a])
            out.seek(ROW_BYTES * int(free[p]))
            out.write(block[a:b].tobytes())
            free[p] += b - a
    return codes, counts


class Handles:
    """Spill files opened once each and kept open while a shard is written: a bucket reads one
    small segment from each run (a few records each for large records), and opening a file per
    segment through Beam's FileSystems cost more than reading it (mix on 16 KiB records)."""

    def __init__(self, open_input: Callable[[str], BinaryIO], most: int = 64) -> None:
        self.open_input, self.most = open_input, most
        self._open: dict = {}  # path -> handle, least recently used first

    def get(self, path: str) -> BinaryIO:
        handle = self._open.pop(path, None)
        if handle is None:
            if len(self._open) >= self.most:  # bounded: a job of many tasks must not run out of descriptors
                self._open.pop(next(iter(self._open))).close()
            handle = self.open_input(path)
        self._open[path] = handle
        return handle

    def close(self) -> None:
        for handle in self._open.values():
            handle.close()
        self._open.clear()


class TableRows:
    """A table's rows read from its spill file `block_rows` at a time, bucket by bucket in
    order: memory is a block, or one bucket's rows of the file (one a run), never the table."""

    def __init__(self, table: SegmentTable, handles: Handles, block_rows: int = 64) -> None:
        self.table, self.handles, self.block_rows = table, handles, block_rows
        self._read = 0
        self._buffer = np.zeros((0, ROW), np.int64)

    def _more(self) -> bool:
        n = min(self.block_rows, self.table.rows - self._read)
        if n <= 0:
            return False
        at = self.table.offset + ROW_BYTES * self._read
        data = memoryview(bytearray(ROW_BYTES * n))
        _read_exactly(self.table.path, at, self.handles.get(self.table.path), data)
        rows = np.frombuffer(data, dtype="<i8").reshape(n, ROW)
        buckets = np.concatenate([self._buffer[-1:, 2], rows[:, 2]])
        if np.any(rows[:, 0] != self.table.shard) or np.any(buckets[1:] < buckets[:-1]):
            raise CorruptRecordError(self.table.path, at, None, "segment rows damaged (temporary file)")
        self._buffer = np.concatenate([self._buffer, rows]) if len(self._buffer) else rows
        self._read += n
        return True

    def head(self) -> Optional[int]:
        """The bucket of the next segment; None after the last."""
        if not len(self._buffer) and not self._more():
            return None
        return int(self._buffer[0, 2])

    def take(self, bucket: int) -> List[Segment]:
        """The segments of `bucket` (the head's, else none), in run order."""
        while True:
            k = int(np.searchsorted(self._buffer[:, 2], bucket, side="right"))
            if k < len(self._buffer) or not self._more():
                break
        part, self._buffer = self._buffer[:k], self._buffer[k:]
        t = self.table
        return [Segment(t.shard, b, t.path, (t.task, r), o, n, f, t.group) for _, r, b, o, n, f in part.tolist()]


def _read_exactly(path: str, offset: int, handle: BinaryIO, into: memoryview) -> None:
    """Fill `into` from `offset` of a spill file; CorruptRecordError when the file ends early."""
    handle.seek(offset)
    done = 0
    while done < len(into):
        data = handle.read(len(into) - done)  # read, not readinto: any binary file object will do
        got = len(data)
        into[done : done + got] = data
        if not got:
            raise CorruptRecordError(path, offset, None, "spill file ends early (removed or truncated?)")
        done += got


def _check_frames(segment: Segment, frames, verify: int) -> Tuple[np.ndarray, np.ndarray]:
    """(payload offsets, payload lengths) of a segment's frames, checked at `verify`."""
    offsets, lengths, consumed, status = _engine.scan_frames(frames, verify)
    if status != STATUS_OK or consumed != len(frames) or len(offsets) != segment.records:
        where = segment.offset + 8 * segment.records + consumed
        raise CorruptRecordError(segment.path, where, None, "spilled records fail their CRCs (temporary file damaged)")
    return offsets, lengths


def read_segment(
    segment: Segment, open_input: Callable[[str], BinaryIO], verify: int = VERIFY_ALL
) -> Tuple[np.ndarray, memoryview, np.ndarray, np.ndarray]:
    """(keys, frames, payload offsets, payload lengths) of one segment, its frames checked at
    `verify` (a temporary file damaged on disk is an error naming it, never a silent loss)."""
    data = memoryview(bytearray(8 * segment.records + segment.frame_bytes))
    with open_input(segment.path) as handle:
        _read_exactly(segment.path, segment.offset, handle, data)
    keys = np.frombuffer(data, dtype="<u8", count=segment.records)
    frames = data[8 * segment.records :]
    offsets, lengths = _check_frames(segment, frames, verify)
    return keys, frames, offsets, lengths


def merge_bucket(
    segments: Sequence[Segment],
    open_input: Callable[[str], BinaryIO],
    block_bytes: int = BLOCK_BYTES,
    handles: Optional[Handles] = None,
) -> Iterator[Tuple[bytes, np.ndarray, np.ndarray, List[int]]]:
    """The records of one bucket in key order, as blocks of about `block_bytes` of (framed
    bytes, frame sizes, footers, records per group): memory is the bucket read back plus one
    block. Frames are CRC-checked again (both CRCs) as they are read back. The segments are
    read into one buffer (through `handles`, kept open by the caller, else opened here), so
    the footers and the blocks come from one array however many segments there are."""
    segments = sorted(segments, key=lambda s: s.run)
    if not segments:
        return
    own = handles is None
    handles = Handles(open_input) if handles is None else handles
    sizes_on_disk = [8 * seg.records + seg.frame_bytes for seg in segments]
    positions = np.concatenate([[0], np.cumsum(sizes_on_disk)]).tolist()
    whole = memoryview(bytearray(positions[-1]))
    keys_l, starts_l, sizes_l, group_l = [], [], [], []
    groups: dict = {}
    try:
        for seg, pos, end in zip(segments, positions[:-1], positions[1:]):
            _read_exactly(seg.path, seg.offset, handles.get(seg.path), whole[pos:end])
            frames_at = pos + 8 * seg.records
            offsets, lengths = _check_frames(seg, whole[frames_at:end], VERIFY_ALL)
            keys_l.append(np.frombuffer(whole, dtype="<u8", count=seg.records, offset=pos))
            starts_l.append(frames_at + offsets - HEADER_SIZE)
            sizes_l.append(lengths + FRAME_OVERHEAD)
            group_l.append(np.full(len(offsets), seg.group, np.int64))
            groups[seg.group] = groups.get(seg.group, 0) + seg.records
    finally:
        if own:
            handles.close()
    keys = np.concatenate(keys_l)
    order = np.argsort(keys, kind="stable")
    starts = np.concatenate(starts_l)[order]
    sizes = np.concatenate(sizes_l)[order]
    footers = footers_at(whole, starts + sizes - 4)
    group_of = np.concatenate(group_l)[order]
    width = max(groups) + 1
    ends = np.cumsum(sizes)
    cuts = [
        0,
        *(np.searchsorted(ends, np.arange(block_bytes, int(ends[-1]), block_bytes), side="left") + 1).tolist(),
        len(sizes),
    ]
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        if lo >= hi:
            continue
        framed = b"".join([whole[a : a + n] for a, n in zip(starts[lo:hi].tolist(), sizes[lo:hi].tolist())])
        yield framed, sizes[lo:hi], footers[lo:hi], np.bincount(group_of[lo:hi], minlength=width).tolist()


class Scratch(NamedTuple):
    """Where `split_bucket` puts its temporary files, and how it makes and removes them (the
    caller's filesystem layer: this module imports none)."""

    directory: str
    create: Callable[[str], BinaryIO]
    remove: Callable[[str], None]  # removes a directory and what it holds (absent: no error)


def split_bucket(
    segments: Sequence[Segment], parts: int, open_input: Callable[[str], BinaryIO], scratch: Scratch
) -> List[List[Segment]]:
    """The bucket's records cut by key quantiles into `parts` smaller buckets (in key order),
    one temporary file each under `scratch.directory`: every segment is read once, its keys
    (sorted) cut by the bounds, and each slice appended to its part as a new segment."""
    keys = []
    for seg in segments:  # the keys alone first (they lead each segment): exact quantile bounds
        with open_input(seg.path) as handle:
            handle.seek(seg.offset)
            raw = handle.read(8 * seg.records)
        if len(raw) != 8 * seg.records:
            raise CorruptRecordError(seg.path, seg.offset, None, "spill file ends early (removed or truncated?)")
        keys.append(np.frombuffer(raw, dtype="<u8"))
    every = np.sort(np.concatenate(keys))
    bounds = np.unique(every[[len(every) * j // parts for j in range(1, parts)]])
    paths = [f"{scratch.directory.rstrip('/')}/part-{j:04d}" for j in range(len(bounds) + 1)]
    outs = [scratch.create(path) for path in paths]
    pos = [0] * len(outs)
    pieces: List[List[Segment]] = [[] for _ in outs]
    try:
        for seg in sorted(segments, key=lambda s: s.run):
            seg_keys, frames, offsets, lengths = read_segment(seg, open_input, VERIFY_LENGTHS)
            edges = [0, *np.searchsorted(seg_keys, bounds, side="left").tolist(), seg.records]
            ends = [0, *np.cumsum(lengths + FRAME_OVERHEAD).tolist()]
            for j, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
                if a == b:
                    continue
                outs[j].write(seg_keys[a:b].tobytes())
                outs[j].write(frames[ends[a] : ends[b]])
                pieces[j].append(
                    seg._replace(path=paths[j], offset=pos[j], records=b - a, frame_bytes=ends[b] - ends[a])
                )
                pos[j] += 8 * (b - a) + ends[b] - ends[a]
    finally:
        for out in outs:
            out.close()
    return [p for p in pieces if p]


def merge_bounded(
    segments: Sequence[Segment],
    open_input: Callable[[str], BinaryIO],
    max_bytes: Optional[int],
    scratch: Optional[Scratch],
    depth: int = 0,
    handles: Optional[Handles] = None,
) -> Iterator[Tuple[bytes, np.ndarray, np.ndarray, List[int]]]:
    """`merge_bucket`, in memory of about `max_bytes`: a larger bucket is split first."""
    total = sum(s.frame_bytes for s in segments)
    if (
        max_bytes is None
        or scratch is None
        or total <= max_bytes
        or sum(s.records for s in segments) <= 1
        or depth >= 8
    ):
        yield from merge_bucket(segments, open_input, handles=handles)
        return
    sub = scratch._replace(directory=f"{scratch.directory.rstrip('/')}/split-{uuid.uuid4().hex[:12]}")
    try:
        parts = split_bucket(segments, max(2, math.ceil(total / (max_bytes / 2))), open_input, sub)
        if len(parts) == 1:  # no progress (e.g. every key equal): splitting again would only copy it
            yield from merge_bucket(parts[0], open_input)
            return
        for part in parts:
            yield from merge_bounded(part, open_input, max_bytes, sub, depth + 1)
    finally:
        scratch.remove(sub.directory)


def by_bucket(cursors: Sequence["TableRows"]) -> Iterator[List[Segment]]:
    """The segments of the tables behind `cursors`, one list per bucket, buckets in order: each
    table's rows are in (bucket, run) order, so a bucket is the merge of the tables' heads."""
    while True:
        heads = [cursor.head() for cursor in cursors]
        live = [h for h in heads if h is not None]
        if not live:
            return
        bucket = min(live)
        yield [s for cursor, h in zip(cursors, heads) if h == bucket for s in cursor.take(bucket)]


def write_merged(
    tables: Sequence[SegmentTable],
    writer,
    open_input,
    progress: Optional[Callable[[int, int], None]] = None,
    max_bytes: Optional[int] = None,
    scratch: Optional[Scratch] = None,
) -> Tuple[Tuple[int, int, int], List[int]]:
    """Write a shard from its segment tables, bucket by bucket (each table's rows read a block
    at a time, `TableRows`); (digest, records per group). With `max_bytes` and `scratch`, a
    bucket of more frame bytes is split before it is sorted."""
    from ._walk import add_digests, frame_digest

    digest = (0, 0, 0)
    groups: List[int] = []
    handles = Handles(open_input)  # spill files stay open from bucket to bucket
    try:
        for segments in by_bucket([TableRows(table, handles) for table in tables]):
            for framed, sizes, footers, counts in merge_bounded(
                segments, open_input, max_bytes, scratch, handles=handles
            ):
                writer.write_framed(framed, sizes)
                part = frame_digest(footers, sizes)
                digest = add_digests(digest, part)
                groups = [
                    a + b
                    for a, b in zip(
                        groups + [0] * (len(counts) - len(groups)), counts + [0] * (len(groups) - len(counts))
                    )
                ]
                if progress is not None:
                    progress(part[0], len(framed))
    finally:
        handles.close()
    return digest, groups
