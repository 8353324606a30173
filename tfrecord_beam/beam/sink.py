"""TFRecord sink that writes a `.tfindex` beside every shard: `_TFRecordSink(FileBasedSink)`.

The FileBasedSink protocol does the rest (driven by `_write.WriteShards`, or Beam's `Write`
for unbounded input): each bundle writes a temporary file in a `beam-temp-*` directory; only
the results of bundles that committed reach `finalize_write`, which renames them to the final
shard names and deletes the temporary directory (so a retried bundle's first attempt leaves
nothing behind, and a failed run leaves only that temporary directory, never a file with a
final shard name).

Indexes ride along: each temporary shard gets its index beside it
(`index.default_index_path(temp_path)`), written from the frame sizes as the records are
written (no second pass over the data). Just before Beam renames the data files, each index is
renamed to `default_index_path(final_shard)`, after any old data at the final names is
deleted. Index first, data second: a crash between the two leaves an index without its
shard, never a shard with a missing index, nor a new index beside old data. With
`write_index=False` an old index at a final name is deleted instead, so no stale index
survives next to new data. GZIP shards written with an index are block-gzip
(`tfrecord_beam.blockgzip`: whole records per gzip member, the member table in the index), so
they split and seek like uncompressed ones.
"""

from __future__ import annotations

from typing import List, Optional, Union

import numpy as np
from apache_beam import coders
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from .. import _engine
from .._blockgzip_write import DEFAULT_BLOCK_BYTES, BlockCompressor
from .._framing_py import FRAME_OVERHEAD
from ..index import default_index_path, format_index
from . import _metrics, _paths

#: Framed bytes are handed to the file in pieces of about this size.
FLUSH_BYTES = 1 << 20
DEFAULT_SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"


class _ShardFile:
    """One temporary shard: buffers payloads, frames them in bulk, records frame sizes."""

    def __init__(self, handle, index_path: Optional[str], blocks: Optional[BlockCompressor] = None) -> None:
        self._handle = handle
        self._index_path = index_path
        self._blocks = blocks  # block-gzip: members go to the (uncompressed) handle, the table to the index
        self._pending: List[bytes] = []
        self._pending_bytes = 0
        self._sizes: List[np.ndarray] = []

    def add(self, payload: Union[bytes, List[bytes]]) -> None:
        """Add one payload, or a list of them (a batch from ReadFromTFRecordBatched)."""
        if isinstance(payload, bytes):
            self._pending.append(payload)
            self._pending_bytes += len(payload)
        elif isinstance(payload, list) and all(isinstance(p, bytes) for p in payload):
            self._pending.extend(payload)
            self._pending_bytes += sum(map(len, payload))
        else:
            raise TypeError(
                f"WriteToTFRecord writes bytes (or lists of bytes), got {type(payload).__name__}: "
                "serialize first (EncodeExamples turns dicts into Example bytes)"
            )
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        payloads = self._pending
        if not payloads:
            return
        framed = _engine.frame_records(payloads)
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        if self._blocks is not None:
            self._blocks.add(framed, lengths + FRAME_OVERHEAD)
        else:
            self._handle.write(framed)
        if self._index_path is not None:
            self._sizes.append(lengths + FRAME_OVERHEAD)
        _metrics.counter(_metrics.RECORDS_WRITTEN).inc(len(payloads))
        _metrics.counter(_metrics.BYTES_WRITTEN).inc(int(lengths.sum()))
        self._pending = []
        self._pending_bytes = 0

    def close(self) -> None:
        self.flush()
        members = self._blocks.finish() if self._blocks is not None else None
        self._handle.close()
        if self._index_path is None:
            return
        sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, dtype=np.int64)
        offsets = np.cumsum(sizes) - sizes
        index = np.stack([offsets, sizes], axis=1)
        with FileSystems.create(self._index_path, "text/plain", CompressionTypes.UNCOMPRESSED) as out:
            out.write(format_index(index))
            if members is not None:
                out.write(members.format())


class _TFRecordSink(FileBasedSink):
    """A FileBasedSink of TFRecord payloads (bytes) with one `.tfindex` per final shard."""

    def __init__(
        self,
        file_path_prefix: str,
        file_name_suffix: str = ".tfrecord",
        num_shards: int = 0,
        shard_name_template: Optional[str] = None,
        compression_type: _paths.Compression = "auto",
        write_index: bool = True,
        max_records_per_shard: Optional[int] = None,
    ) -> None:
        if _paths.to_beam(compression_type) == CompressionTypes.AUTO:
            _paths.check_auto(str(file_name_suffix))
        super().__init__(
            _paths.local_absolute(file_path_prefix),
            coder=coders.BytesCoder(),
            file_name_suffix=file_name_suffix,
            num_shards=num_shards,
            shard_name_template=DEFAULT_SHARD_NAME_TEMPLATE if shard_name_template is None else shard_name_template,
            mime_type="application/octet-stream",
            compression_type=_paths.to_beam(compression_type),
            max_records_per_shard=max_records_per_shard,
        )
        self.write_index = write_index

    # -- per bundle ---------------------------------------------------------------------------
    def open(self, temp_path: str) -> _ShardFile:
        index_path = default_index_path(temp_path) if self.write_index else None
        if index_path is not None and _paths.for_file(temp_path, self.compression_type) == "gzip":
            # block-gzip (`tfrecord_beam.blockgzip`): we write the gzip members ourselves
            handle = FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
            return _ShardFile(handle, index_path, BlockCompressor(handle, DEFAULT_BLOCK_BYTES))
        return _ShardFile(super().open(temp_path), index_path)

    def write_record(self, file_handle: _ShardFile, value: Union[bytes, List[bytes]]) -> None:
        file_handle.add(value)  # no coder: payloads are bytes already

    def close(self, file_handle: _ShardFile) -> None:
        file_handle.close()

    # -- finalize -----------------------------------------------------------------------------
    def _check_state_for_finalize_write(self, writer_results, num_shards, *args, **kwargs):
        """Beam's check of which temporary shards still need renaming; we move their indexes here.

        Runs at the start of `finalize_write`, right before the data renames.
        """
        src_files, dst_files, delete_files, num_skipped = super()._check_state_for_finalize_write(
            writer_results, num_shards, *args, **kwargs
        )
        self._move_indexes(src_files, dst_files)
        return src_files, dst_files, delete_files, num_skipped

    def _move_indexes(self, src_files: List[str], dst_files: List[str]) -> None:
        dst_indexes = [default_index_path(d) for d in dst_files]
        if not self.write_index:
            stale = [p for p in dst_indexes if FileSystems.exists(p)]
            if stale:
                FileSystems.delete(stale)
            return
        sources, targets = [], []
        for src, dst_index in zip(src_files, dst_indexes):
            src_index = default_index_path(src)
            if FileSystems.exists(src_index):
                sources.append(src_index)
                targets.append(dst_index)
            elif not FileSystems.exists(dst_index):  # neither moved before nor written
                raise BeamIOError(f"index {src_index} of temporary shard {src} is missing")
        if sources:
            # Old data at the final names goes first: a crash between the index and the data
            # renames then leaves a new index without data, never a new index beside old data.
            old = [d for d in dst_files if FileSystems.exists(d)]
            if old:
                FileSystems.delete(old)
            FileSystems.rename(sources, targets)
