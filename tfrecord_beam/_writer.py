"""Writing TFRecord framing: `RecordWriter` (re-exported by `records`), atomic and with an
optional index written in the same pass, and the settling of writers left open (garbage
collection, interpreter exit).
"""

from __future__ import annotations

import atexit
import io
import os
import sys
import warnings
import weakref
from typing import Any, BinaryIO, Callable, Iterable, Optional, Union

import numpy as np

from . import _blockgzip_write, _engine, _tfindex, blockgzip, fs
from . import compression as _compression
from . import digest as _digest
from ._engine._common import FRAME_OVERHEAD
from .errors import UnclosedWriterWarning, WriterFailedError

__all__ = ["RecordWriter", "WRITE_BUFFER_SIZE"]

WRITE_BUFFER_SIZE = 1 << 17  # RecordWriter.write's buffer: small, as many writers may be open at once
_EMPTY_BUFFER = bytearray()  # a writer's buffer until its first single-record write
_SYNC_FILES = (io.BufferedWriter, io.FileIO)


class RecordWriter:
    """Write payloads as TFRecords, optionally with a `.tfindex` written in the same pass.

    The data (and index) go to temporary names beside the targets and are renamed on
    `close()`; an exception inside the `with` block, or `abort()`, removes them, so an
    interrupted write leaves nothing that looks complete.

    Args:
        dest: a path, `file://` or remote URI.
        compression: None (uncompressed), a codec name ("gzip", "zlib", "zstd", any spelling
            `compression.normalize` accepts) or "auto" (from the file name).
        index_path: where to write the `.tfindex` (offsets of the uncompressed stream); None
            for no index, True for the default name beside the data (`index.default_index_path`).
        compression_level: the codec's level, -1 its default (zlib's 1-9, as TensorFlow; zstd's
            1-22, default 3). Block-gzip
            members are deflated by ISA-L when installed, levels mapped onto its 1-3.
        block_bytes: GZIP only: write block-gzip (`blockgzip`): gzip members of whole records,
            about this many uncompressed bytes each, whose table goes at the end of the index,
            so readers can seek. None (default): 1 MiB blocks when an index is written, else
            one gzip stream; 0: one stream. Ignored for uncompressed files.
        commit_unclosed: what happens to a writer that is garbage-collected, or still open at
            interpreter exit, without `close()`: False (default) drops its data, True commits
            it (the `tfrecord` package's behaviour, used by `TFRecordWriter`); either way an
            `UnclosedWriterWarning` names the file. Nothing is committed when the interpreter
            ends on an uncaught exception, nor when a `with` block exits on one.
        atomic_output: the file layer to write through (default the core's
            `fs.atomic_output`; Beam code passes `tfrecord_beam.beam._fs.atomic_output`). Such a
            writer writes into a job's fresh staging directory: it neither checks the index
            path for an existing non-index file nor removes a stale index beside the data.
    """

    def __init__(
        self,
        dest: Union[str, "os.PathLike[str]"],
        compression: Optional[str] = "auto",
        index_path: Union[None, bool, str] = None,
        compression_level: int = -1,
        *,
        block_bytes: Optional[int] = None,
        commit_unclosed: bool = False,
        atomic_output: Optional[fs.AtomicOutput] = None,
    ) -> None:
        self.path = os.fspath(dest)
        self.compression = _compression.resolve(self.path, compression)
        if index_path is True:
            index_path = _tfindex.default_index_path(self.path)
        self.index_path = os.fspath(index_path) if index_path else None
        self._atomic_output = atomic_output or fs.atomic_output
        self._own_layer = atomic_output is None  # the core's files: check and clean up beside the data
        if self.index_path is not None and self._own_layer:
            _tfindex.check_index_target(self.index_path, self.path)
        self._data_cm = self._atomic_output(self.path)
        self._file: BinaryIO
        self._commit: fs.Commit
        self._file, self._commit = self._data_cm.__enter__()
        self._deflater = None
        self._index: Optional[_tfindex.IndexStream] = None
        try:
            self._blocks = _blockgzip_write.compressor_for(
                self._file, self.compression, bool(self.index_path), block_bytes, compression_level, self.path
            )
            if self.compression is not None and self._blocks is None:
                self._deflater = _compression.compressor(self.compression, compression_level, self.path)
            # index lines go to a temporary file as frames are handed on: nothing per record is kept
            if self.index_path:
                self._index = _tfindex.IndexStream(self.index_path, self._atomic_output)
        except BaseException:  # e.g. the index's folder is missing: leave no temporary data file
            self._commit.abort()
            raise
        self._offset = 0  # uncompressed bytes handed on (to the compressor or the file)
        self._records = 0  # records handed on
        # (records, payload bytes, checksum) of the frames handed on, from their own footers:
        # the proof of what was written (see `digest`), not of what a caller meant to write
        self._digest: _digest.Digest = (0, 0, 0)
        self._file_bytes = 0  # bytes handed to the file (compressed bytes for a compressed stream)
        self._buf = _EMPTY_BUFFER  # frames of single writes, handed on when full (see `write`)
        self._pos = 0
        self.closed = False
        self.members: Optional[blockgzip.MemberTable] = None  # after close: the block-gzip member table written, if any
        self._commit_unclosed = commit_unclosed
        # the error a hand-on of bytes raised (a full disk, say): the file may end mid-frame and
        # lacks what came after, so it is never committed (`_check_sound`, `_unclosed`)
        self._failed: Optional[BaseException] = None
        self._failed_in = "write"  # or "close"
        self._pid = os.getpid()
        _open_writers.add(self)

    @property
    def offset(self) -> int:
        """Uncompressed bytes written so far (the offset the next record will have)."""
        return self._offset + self._pos

    @property
    def digest(self) -> "_digest.Digest":
        """(records, payload bytes, checksum) of the frames handed on so far (`digest.frame_digest`),
        read from the footers of the bytes this writer wrote; after `close()`, of the whole file."""
        if self._pos:
            view = memoryview(self._buf)[: self._pos]
            lengths = _engine.scan_frames(view, False)[1]
            return _digest.add_digests(self._digest, _digest.framed_digest(view, lengths + FRAME_OVERHEAD))
        return self._digest

    @property
    def file_bytes(self) -> int:
        """Bytes this writer wrote to its file; after `close()`, the size the file must have."""
        return self._file_bytes

    @property
    def records_written(self) -> int:
        """Records written so far."""
        return self._records + (
            len(_engine.scan_frames(memoryview(self._buf)[: self._pos], False)[0]) if self._pos else 0
        )

    def write(self, payload: bytes) -> None:
        """Frame and write one serialized record.

        Frames go into a write buffer (WRITE_BUFFER_SIZE bytes, allocated by the first call)
        that is handed to the compressor or the file when full, so a per-record loop costs
        one compiled call per record; a record larger than the buffer is written on its own.
        """
        self._check_open()
        try:
            pos = _engine.append_frame(self._buf, self._pos, payload)
        except (TypeError, BufferError, ValueError):  # not a plain buffer: as write_many takes it
            self.write_many([payload])
            return
        if pos < 0:
            self._make_room()
            pos = _engine.append_frame(self._buf, 0, payload)
            if pos < 0:
                payload = payload if isinstance(payload, bytes) else bytes(memoryview(payload).cast("B"))
                self.write_framed(_engine.frame_records([payload]), [FRAME_OVERHEAD + len(payload)])
                return
        self._pos = pos

    def append_record(self, append: Callable[..., Optional[int]], *args: Any) -> bool:
        """Let a compiled encoder write one whole frame straight into the write buffer.

        `append(buffer, position, *args)` returns where its frame ends, -1 when the frame does
        not fit (nothing written), or None when it declines the input. Returns False (nothing
        written) when it declined or the record is larger than the buffer: the caller then
        encodes the record itself and calls `write`.
        """
        self._check_open()
        pos = append(self._buf, self._pos, *args)
        if pos is None:
            return False
        if pos < 0:
            self._make_room()
            pos = append(self._buf, 0, *args)
            if pos is None or pos < 0:
                return False
        self._pos = pos
        return True

    def _check_open(self) -> None:
        """ValueError unless more records may be written: no write (or close) failed
        (WriterFailedError, whether closed since or not) and the writer is open."""
        self._check_sound()
        if self.closed:
            raise ValueError(f"{self.path}: write to a closed RecordWriter")

    def _check_sound(self) -> None:
        """WriterFailedError when an earlier write failed: what is in the temporary file is not
        the records written (it may end mid-frame), so nothing more goes there and it is never
        committed."""
        if self._failed is not None:
            raise WriterFailedError(
                f"{self.path}: an earlier {self._failed_in} failed ({self._failed!r}); this writer's file is "
                "incomplete and is not committed (the file there before, if any, is left as it was)"
            ) from self._failed

    def _hand_on(self, step: Callable[[], None]) -> None:
        """Run `step`, which hands bytes on (to the index, the compressor, the file); an error
        there marks the writer failed (see `_check_sound`) before it propagates."""
        try:
            step()
        except BaseException as exc:
            self._failed = exc
            raise

    def _make_room(self) -> None:
        """An empty write buffer: the buffered frames handed on (or the buffer made)."""
        self._drain()
        if self._buf is _EMPTY_BUFFER:
            self._buf = bytearray(WRITE_BUFFER_SIZE)

    def _drain(self) -> None:
        """Hand the buffered frames on, in order, before any other bytes (and at close)."""
        if self._pos:
            self._hand_on(self._drain_buffer)

    def _drain_buffer(self) -> None:
        pos = self._pos
        view = memoryview(self._buf)[:pos]
        lengths = _engine.scan_frames(view, False)[1]
        if self._index is not None:
            self._index.add(lengths + FRAME_OVERHEAD)
        digest = _digest.framed_digest(view, lengths + FRAME_OVERHEAD)
        if self._blocks is not None:  # block-gzip members: the compressor keeps what it is given
            self._blocks.add(bytes(view), lengths + FRAME_OVERHEAD)
        else:  # local files copy (or write) synchronously; other streams may keep what they are given
            self._emit(view if self._deflater is not None or isinstance(self._file, _SYNC_FILES) else bytes(view))
        view.release()
        # counted once handed on: a failed hand-on leaves the frames in the buffer, which `digest`
        # counts (as `records_written` does), so they are not counted twice
        self._digest = _digest.add_digests(self._digest, digest)
        self._offset += pos
        self._records += len(lengths)
        self._pos = 0

    def write_many(self, payloads: Iterable[bytes]) -> None:
        """Frame and write many serialized records in one buffer (fast path for batches)."""
        payloads = [p if isinstance(p, bytes) else bytes(p) for p in payloads]
        if payloads:
            self.write_framed(_engine.frame_records(payloads), [FRAME_OVERHEAD + len(p) for p in payloads])

    def write_framed(self, framed: Union[bytes, memoryview], record_sizes: Iterable[int]) -> None:
        """Write bytes that are already whole frames; `record_sizes` are their frame sizes."""
        self._check_open()
        sizes = np.asarray(
            record_sizes if isinstance(record_sizes, (np.ndarray, list)) else list(record_sizes), dtype=np.int64
        )  # an int64 array passes through without a copy
        if int(sizes.sum()) != len(framed):
            raise ValueError(f"{self.path}: record sizes add up to {int(sizes.sum())}, not {len(framed)} bytes")
        self._drain()
        self._hand_on(lambda: self._write_frames(framed, sizes))

    def _write_frames(self, framed: Union[bytes, memoryview], sizes: np.ndarray) -> None:
        if self._index is not None:
            self._index.add(sizes)
        digest = _digest.framed_digest(framed, sizes)
        if self._blocks is not None:
            self._blocks.add(framed, sizes)
        else:
            self._emit(framed)
        self._digest = _digest.add_digests(self._digest, digest)  # as `records_written`: once handed on
        self._offset += len(framed)
        self._records += len(sizes)

    def _emit(self, data: Union[bytes, memoryview]) -> None:
        if self._deflater is not None:
            data = self._deflater.compress(data)
        if data:
            self._file.write(data)
            self._file_bytes += len(data)

    def flush(self) -> None:
        """Flush buffered bytes to the temporary file (the target appears only on close)."""
        if not self.closed:
            self._check_sound()
            self._drain()
            self._hand_on(self._file.flush)
        else:
            self._file.flush()

    def close(self) -> None:
        """Finish the file and its index and move both into place in `_publish`'s order (old
        index out, data in, new index in), so a crash or a full disk never leaves data beside
        an index of other data. A stale index at the data's default index name is removed
        when no new index is written."""
        if self.closed:
            self._check_sound()  # a writer whose write or close failed says so every time: never committed
            return
        from . import _publish

        index_commit = None
        try:
            self._check_sound()  # a writer whose write failed never commits
            self._drain()  # the write buffer's frames come first
            if self._deflater is not None:
                tail = self._deflater.flush()
                self._file.write(tail)
                self._file_bytes += len(tail)
            members = self.members = self._blocks.finish() if self._blocks is not None else None
            if members is not None:
                self._file_bytes = members.file_size
            if self._index is not None:
                index_final = self.index_path
            elif self._own_layer:  # a stale index at the default name goes; a non-index file is never touched
                index_final = _tfindex.default_index_path(self.path)
                if fs.exists(index_final) and not _tfindex.looks_like_index(index_final):
                    index_final = None
            else:
                index_final = None
            # the old index goes first: an object store's object appears as soon as it is finished
            if index_final is not None and self._own_layer:
                _publish.remove_old_indexes([index_final], exists=fs.exists, delete=fs.delete)
            self._commit.finish()
            if self._index is not None:
                index_commit = self._index.finish(members)
            self._commit.move()
            if index_commit is not None:
                assert index_final is not None  # an index is written only under an index path
                _publish.move_new_indexes(
                    [index_commit], [index_final], rename=lambda commits, _finals: [c.move() for c in commits]
                )
        except BaseException as exc:
            if self._failed is None:  # a failed close: a later close or write says so (WriterFailedError)
                self._failed, self._failed_in = exc, "close"
            self._commit.abort()
            if self._index is not None:
                self._index.abort()
            raise
        finally:
            self.closed = True
            _open_writers.discard(self)

    def abort(self) -> None:
        """Drop everything written so far; neither the data nor the index appears."""
        if not self.closed:
            self._commit.abort()
            if self._index is not None:
                self._index.abort()
            self.closed = True
            _open_writers.discard(self)

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        try:
            self._unclosed(at_exit=False)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def _unclosed(self, at_exit: bool) -> None:
        """A writer dropped (or left open at exit) without `close()`: commit it when it was made
        with `commit_unclosed=True` and the interpreter is not ending on an uncaught exception,
        otherwise drop its data; either way warn, naming the file."""
        if self.closed or self._pid != os.getpid():  # a forked child's copy is its parent's to settle
            return
        failed = at_exit and (
            getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None
        )
        if self._failed is not None:
            warnings.warn(
                f"{self.path}: a write failed ({self._failed!r}); its {self.records_written} records "
                "were discarded and the file there before, if any, is left as it was",
                UnclosedWriterWarning,
                stacklevel=2,
            )
            self.abort()
        elif self._commit_unclosed and not failed:
            warnings.warn(
                f"{self.path}: writer was never closed; committing its {self.records_written} "
                "records now (call close() or use `with`)",
                UnclosedWriterWarning,
                stacklevel=2,
            )
            self.close()
        else:
            why = "the program ended on an uncaught exception" if failed else "it was never closed"
            warnings.warn(
                f"{self.path}: {why}; its {self.records_written} records were discarded (call close() or use `with`)",
                UnclosedWriterWarning,
                stacklevel=2,
            )
            self.abort()


_open_writers: "weakref.WeakSet[RecordWriter]" = weakref.WeakSet()


@atexit.register
def _settle_open_writers() -> None:
    """At interpreter exit, settle every writer still open (see `RecordWriter._unclosed`)."""
    for writer in list(_open_writers):
        try:
            writer._unclosed(at_exit=True)
        except Exception as exc:  # noqa: BLE001 - report and go on with the others
            sys.stderr.write(f"tfrecord_beam: could not settle unclosed writer {writer.path}: {exc}\n")
