"""Reading TFRecord files into statistics (inspect, schema) and counting their records.

`scan_file` reads one file into a `DatasetStats`: a big local uncompressed file with no index as
two halves at once (`_scan_halves`), any other in one chain of chunks whose statistics are taken
in threads ahead (`_scan_chain`); errors stay in the file's `FileStats`. `count_records` counts
by a valid index when there is one, else by walking the headers.
"""

from __future__ import annotations

import threading
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Iterable, Iterator, Optional, Tuple

from .. import _engine, blockgzip, fs
from .._engine._common import FRAME_OVERHEAD
from .._tfindex import default_index_path, iter_index_starts, load_index
from ..compression import resolve as resolve_compression
from ..compression import seeks_by_members
from ..errors import IndexMismatchError, TFRecordError
from ..index import iter_frame_arrays
from ..records import RecordReader
from ._index_status import IndexCheck, IndexStatus
from ._stats import DatasetStats, FileStats, _Decoded

READ_ERRORS = (TFRecordError, OSError, ValueError, zlib.error)
"""What reading a bad or missing file raises: a scan keeps it in the file's FileStats (a
command reports it and reads the next file)."""

Progress = Callable[[int, int, str, int, int], None]
"""progress(file_number, file_count, path, records_done, bytes_done) for long scans."""

# chunks whose first try (`decode_ahead`) runs at once ahead of the accounting. Measured with
# the batched decoder's try (decode + sizes pass ~4x read + statistics in CPU), before the
# compiled walk: with one, the decoder thread was the critical path under load (7.5 -> 3.5 s
# with two on 5 M small records); on a quiet 2-core machine 1, 2 and 3 took the same time
_DECODERS = 2
# an uncompressed local file at least this big, read whole and with no index, is read as two
# halves at once (`_scan_halves`): 1.8-2.0 -> 1.2-1.4 s on 5 M small records (the chunks no
# longer cross from the core that read them to the one that takes their statistics)
_SPLIT_MIN = 64 << 20


def scan_file(
    stats: DatasetStats,
    path: str,
    compression: Optional[str] = "auto",
    *,
    limit: Optional[int] = None,
    progress: Optional[Progress] = None,
    file_number: int = 1,
    file_count: int = 1,
) -> FileStats:
    """Read up to `limit` records of one file into `stats`; errors are kept in the FileStats.

    The records before a corrupt one are counted; the error text names file, offset, record.
    """
    info = FileStats(path)
    stats.files.append(info)
    check = IndexCheck(path, compression)  # compared chunk by chunk: the rows are not kept
    try:
        info.compression = resolve_compression(path, compression)
        info.size = fs.file_size(path)
        if seeks_by_members(info.compression):
            info.gzip_layout = blockgzip.layout(path)
        whole = (progress, file_number, file_count)
        if not (_halves_apply(path, info, limit, check) and _scan_halves(stats, path, info, check, whole)):
            _scan_chain(stats, path, info, check, limit, whole)
    except READ_ERRORS as exc:
        info.exception = exc
        info.error = str(exc) if isinstance(exc, TFRecordError) else f"{path}: {exc}"
    if info.error is None or info.size is not None:
        try:
            info.index = check.status(info.complete)
        except OSError as exc:
            info.index = IndexStatus(default_index_path(path), "invalid", str(exc))
    return info


def _scan_chain(
    stats: DatasetStats,
    path: str,
    info: FileStats,
    check: IndexCheck,
    limit: Optional[int],
    progress: Tuple[Optional[Progress], int, int],
) -> None:
    """`scan_file`'s read of the file in one chain of chunks, the statistics of each taken in
    threads ahead of the accounting (`_decoding_ahead`)."""
    report, file_number, file_count = progress
    with ThreadPoolExecutor(_DECODERS, thread_name_prefix="tfrb-inspect") as pool:
        ahead = _decoding_ahead(stats, pool, RecordReader(path, info.compression), limit, _DECODERS)
        for chunk, take, decoded in ahead:
            stats.add_payloads(chunk.buffer, chunk.payload_offsets[:take], chunk.payload_lengths[:take], decoded)
            check.add_chunk(chunk, take)
            info.records += take
            info.data_bytes += int(chunk.payload_lengths[:take].sum()) + FRAME_OVERHEAD * take
            if report is not None:
                report(file_number, file_count, path, info.records, info.data_bytes)
            if limit is not None and info.records >= limit:
                break
        else:
            info.complete = True


def _halves_apply(path: str, info: FileStats, limit: Optional[int], check: IndexCheck) -> bool:
    """Whether `scan_file` reads the file as two halves at once (`_scan_halves`): a local,
    uncompressed file of at least `_SPLIT_MIN` bytes, read whole (no limit), with no index
    to compare with (the comparison goes in order), on the compiled engine (the pure one
    holds the GIL)."""
    return (
        _engine.example_stats is not None
        and info.compression is None
        and limit is None
        and (info.size or 0) >= _SPLIT_MIN
        and not fs.is_remote(path)
        and check.absent()
    )


def _scan_halves(
    stats: DatasetStats,
    path: str,
    info: FileStats,
    check: IndexCheck,
    progress: Tuple[Optional[Progress], int, int],
) -> bool:
    """Read the file as two byte ranges in two threads, each reading, checking and taking
    statistics of its own chunks (a chunk's bytes stay in the cache of the core that read
    them), then merge them in file order. The second range finds its first record by resync
    and the first checks that it ends where that is (`RecordReader`'s end check), so no
    record is lost or counted twice. True when the whole file was accounted; False, with
    nothing accounted, when a range failed (bad data, or a split the resync cannot find
    because payloads embed frames): the caller reads the file in one chain then, which
    reports the error with its record number and keeps the records before it."""
    report, file_number, file_count = progress
    mid = (info.size or 0) // 2
    parts = [DatasetStats(), DatasetStats()]
    done = [[0, 0], [0, 0]]  # records, data bytes of each range so far
    lock = threading.Lock()
    failed = threading.Event()

    def scan(k: int) -> None:
        try:
            # resync=True on the first range too (it starts at 0: no search there): its end
            # check then runs even when its records continue exactly at `mid`, where a frame
            # in the record before can still move the second range's resync past a record
            reader = (
                RecordReader(path, None, end_offset=mid, resync=True)
                if k == 0
                else RecordReader(path, None, start_offset=mid, resync=True)
            )
            for chunk in reader.chunks():
                if failed.is_set():
                    return
                parts[k].add_payloads(chunk.buffer, chunk.payload_offsets, chunk.payload_lengths)
                with lock:
                    done[k][0] += len(chunk)
                    done[k][1] += int(chunk.payload_lengths.sum()) + FRAME_OVERHEAD * len(chunk)
                    if report is not None:
                        report(file_number, file_count, path, done[0][0] + done[1][0], done[0][1] + done[1][1])
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(2, thread_name_prefix="tfrb-inspect") as pool:
        try:
            futures = [pool.submit(scan, k) for k in (0, 1)]
            errors = [future.exception() for future in futures]
        except BaseException:  # an interrupt (Ctrl-C): the halves stop at their next chunk
            failed.set()
            raise
    for error in errors:
        if error is not None and not isinstance(error, READ_ERRORS):
            raise error
    if any(error is not None for error in errors):
        return False
    for part in parts:
        stats.merge(part)
    info.records = done[0][0] + done[1][0]
    info.data_bytes = done[0][1] + done[1][1]
    info.complete = True
    check.count(info.records)
    return True


def _decoding_ahead(
    stats: DatasetStats, pool: ThreadPoolExecutor, reader: RecordReader, limit: Optional[int], depth: int
) -> Iterator[Tuple[Any, int, Optional[_Decoded]]]:
    """(chunk, records of it to take, its first try started in `pool` by `decode_ahead`) per
    chunk of the reader, the next `depth` chunks read and their tries started before one is
    yielded: reading and the compiled statistics or decoding (no GIL) overlap the accounting of
    the chunk before. A read error comes after the chunks before it, as it would without the
    look-ahead; memory is `depth` + 1 chunks and their tries' results."""
    chunks = reader.chunks()
    pending: Deque[Tuple[Any, int, Optional[_Decoded]]] = deque()
    taken = 0
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        except BaseException:
            while pending:
                yield pending.popleft()
            raise
        take = len(chunk) if limit is None else min(len(chunk), limit - taken)
        taken += take
        offsets, lengths = chunk.payload_offsets[:take], chunk.payload_lengths[:take]
        pending.append((chunk, take, stats.decode_ahead(pool, chunk.buffer, offsets, lengths)))
        if len(pending) > depth:
            yield pending.popleft()
        if limit is not None and taken >= limit:
            break  # no chunk is read past the limit
    while pending:
        yield pending.popleft()


def collect_stats(
    paths: Iterable[str],
    compression: Optional[str] = "auto",
    *,
    limit: Optional[int] = None,
    progress: Optional[Progress] = None,
) -> DatasetStats:
    """Scan files (at most `limit` records of each) into one DatasetStats; see `scan_file`."""
    paths = list(paths)
    stats = DatasetStats()
    for number, path in enumerate(paths, start=1):
        scan_file(stats, path, compression, limit=limit, progress=progress, file_number=number, file_count=len(paths))
    return stats


# -- counting ----------------------------------------------------------------------------------


def count_records(
    path: str,
    compression: Optional[str] = "auto",
    *,
    use_index: bool = True,
    progress: Optional[Callable[[int], None]] = None,
) -> Tuple[int, str]:
    """(record count, "index" or "scan"): from a valid index when there is one, else by scanning.

    The index is trusted only for uncompressed files whose index ends exactly at the end of
    the file (`index_status`'s cheap check), and for block-gzip files whose member table ends
    at the end of the file and matches the index. The scan checks every length CRC: it walks a
    local uncompressed file header to header (payloads skipped), reads a remote one through
    (payload CRCs unchecked) and inflates a compressed one (`index.iter_frame_arrays`), a chunk at a time.
    """
    kind = resolve_compression(path, compression)
    indexed = indexed_count(path, kind) if use_index else None
    if indexed is not None:
        return indexed, "index"
    count = 0
    for frames in iter_frame_arrays(path, kind):  # bounded chunks: memory does not grow with the file
        count += len(frames)
        if progress is not None:
            progress(count)
    return count, "scan"


def indexed_count(path: str, kind: Optional[str]) -> Optional[int]:
    """The record count of a file of resolved codec `kind` from a valid index beside it
    (`_indexed_count`, `_block_gzip_count`), else None: nothing read but the index."""
    if kind is None:
        return _indexed_count(path)
    if kind == "gzip":  # block-gzip: its member table ties the index to the file's size
        return _block_gzip_count(path)
    return None


def _indexed_count(path: str) -> Optional[int]:
    """The record count of an uncompressed file from its index when `index_status` calls the
    index valid (well formed, contiguous from offset 0, ending at the end of the file), else
    None. The text is parsed in pieces (`_tfindex.iter_index_starts`): memory bounded by a
    piece, where `load_index` holds 24 B a record."""
    ipath = default_index_path(path)
    if not fs.exists(ipath):
        return None
    count = end = 0
    try:
        for starts, piece_end in iter_index_starts(ipath):
            count, end = count + len(starts), piece_end
    except (IndexMismatchError, OSError, UnicodeDecodeError):  # what `index_status` calls an invalid index
        return None
    return count if end == fs.file_size(path) else None


def _block_gzip_count(path: str) -> Optional[int]:
    """The record count of a block-gzip file from its index, when its member table matches
    both the file (size on disk) and the index (records); else None."""
    ipath = default_index_path(path)
    try:
        index = load_index(ipath)
        table = blockgzip.checked_member_table(path, ipath, index)
    except (IndexMismatchError, OSError, UnicodeDecodeError):
        return None
    return None if table is None else len(index)
