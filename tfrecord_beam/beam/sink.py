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
survives next to new data.

Elements are encoded with the sink's `coder` as in Beam (the default BytesCoder takes bytes,
and lists of bytes as batches). Two private element kinds come from the fixed-shard path of
`_write`: `Encoded` (payloads already encoded) and `Piece` (a temporary file of framed
records whose frames are copied in, CRCs checked).
"""

from __future__ import annotations

import copy
import uuid
from typing import List, Optional, Tuple, Union

import numpy as np
from apache_beam import coders
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.display import DisplayDataItem

from .. import _engine
from .._framing_py import FOOTER_SIZE, FRAME_OVERHEAD, HEADER_SIZE
from ..index import default_index_path, format_index
from ..records import RecordReader
from . import _coders, _fs, _metrics, _paths

#: Framed bytes are handed to the file in pieces of about this size.
FLUSH_BYTES = 1 << 20


def _not_bytes(value) -> TypeError:
    return TypeError(
        f"WriteToTFRecord writes bytes (or lists of bytes), got {type(value).__name__}: serialize "
        "first (EncodeExamples turns dicts into Example bytes) or pass a coder (coder=...)"
    )


def all_bytes(values: List) -> bool:
    """Whether every item of a list is bytes (checked at C speed for the common case)."""
    return set(map(type, values)) <= _BYTES or all(isinstance(v, bytes) for v in values)


_BYTES = {bytes}


class Encoded(list):
    """Payloads already encoded with the sink's coder (the fixed-shard write path batches
    them before its GroupByKey); the sink adds them as they are."""


class Piece(str):
    """The path of a temporary, uncompressed file of framed records (part of one shard that
    the fixed-shard write path wrote before its GroupByKey); the sink copies its frames in."""


class _ShardFile:
    """One temporary shard: buffers payloads, frames them in bulk, and writes the `.tfindex`
    lines of what it wrote as it goes (memory stays bounded whatever the shard's size)."""

    def __init__(self, handle, index_path: Optional[str]) -> None:
        self._handle = handle
        self._index = (
            None if index_path is None
            else FileSystems.create(index_path, "text/plain", CompressionTypes.UNCOMPRESSED)
        )
        self._offset = 0  # uncompressed offset of the next frame
        self._pending: List[bytes] = []
        self._pending_bytes = 0

    def add(self, payload: Union[bytes, List[bytes]]) -> None:
        """Add one payload, or a list of them (a batch from ReadFromTFRecordBatched)."""
        if isinstance(payload, bytes):
            self._pending.append(payload)
            self._pending_bytes += len(payload)
        elif type(payload) is Encoded or (isinstance(payload, list) and all_bytes(payload)):
            self._pending.extend(payload)
            self._pending_bytes += sum(map(len, payload))
        else:
            raise _not_bytes(payload)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def add_piece(self, path: str) -> None:
        """Copy the frames of a piece file (their CRCs checked on the way) after what is here."""
        self.flush()
        with _fs.open_input(path) as raw:
            for chunk in RecordReader(raw, None).chunks():
                first = int(chunk.payload_offsets[0]) - HEADER_SIZE
                end = int(chunk.payload_offsets[-1] + chunk.payload_lengths[-1]) + FOOTER_SIZE
                self._handle.write(memoryview(chunk.buffer)[first:end])
                self._note(chunk.payload_lengths)

    def flush(self) -> None:
        payloads = self._pending
        if not payloads:
            return
        self._handle.write(_engine.frame_records(payloads))
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        self._note(lengths)
        _metrics.counter(_metrics.RECORDS_WRITTEN).inc(len(payloads))
        _metrics.counter(_metrics.BYTES_WRITTEN).inc(int(lengths.sum()))
        self._pending = []
        self._pending_bytes = 0

    def _note(self, lengths: np.ndarray) -> None:
        """Index the frames just written (payload `lengths`)."""
        sizes = lengths.astype(np.int64) + FRAME_OVERHEAD
        if self._index is not None:
            offsets = self._offset + np.cumsum(sizes) - sizes
            self._index.write(format_index(np.stack([offsets, sizes], axis=1)))
        self._offset += int(sizes.sum())

    def close(self) -> None:
        self.flush()
        self._handle.close()
        if self._index is not None:
            self._index.close()


class _TFRecordSink(FileBasedSink):
    """A FileBasedSink of TFRecord payloads with one `.tfindex` per final shard.

    Beam's `_TFRecordSink` parameters in Beam's order; ours keyword-only. Elements are
    encoded with `coder` (Beam's default `BytesCoder` leaves bytes as they are and also
    takes lists of bytes, each list written in order).
    """

    def __init__(
        self,
        file_path_prefix,
        coder: Optional[coders.Coder] = None,
        file_name_suffix="",
        num_shards: int = 0,
        shard_name_template: Optional[str] = None,
        compression_type: _paths.Compression = "auto",
        triggering_frequency: Optional[int] = None,
        *,
        write_index: bool = True,
        max_records_per_shard: Optional[int] = None,
    ) -> None:
        coder = _coders.check_coder(coder)
        beam_compression = _paths.to_beam(compression_type)
        super().__init__(
            _paths.local_absolute(file_path_prefix),
            coder=coder,
            file_name_suffix=file_name_suffix,
            num_shards=num_shards,
            shard_name_template=shard_name_template,
            mime_type="application/octet-stream",
            compression_type=beam_compression,
            max_records_per_shard=max_records_per_shard,
            triggering_frequency=triggering_frequency,
        )
        self.write_index = write_index
        self._encode = _coders.encoder(coder)
        if self.file_path_prefix.is_accessible() and self.file_name_suffix.is_accessible():
            written = _paths.written_compression(
                self.file_path_prefix.get(), self.file_name_suffix.get(), beam_compression
            )
            if beam_compression == CompressionTypes.AUTO:
                _paths.check_written_name(self._get_final_name(0, max(self.num_shards, 1)), written)

    def display_data(self):
        data = super().display_data()
        data.update(
            coder=DisplayDataItem(str(self.coder), label="Coder"),
            write_index=DisplayDataItem(self.write_index, label="Write .tfindex files"),
            triggering_frequency=DisplayDataItem(
                self.triggering_frequency, label="Triggering frequency (s)"
            ).drop_if_default(0),
            max_records_per_shard=DisplayDataItem(
                self.max_records_per_shard, label="Max records per shard"
            ).drop_if_none(),
        )
        return data

    def with_template(self, shard_name_template: str) -> "_TFRecordSink":
        """A copy of this sink naming its shards by another template (Beam's WriteToTFRecord
        switches unbounded input to the windowed default the same way)."""
        sink = copy.copy(self)
        sink.shard_name_template = shard_name_template
        sink.shard_name_format = self._template_to_format(shard_name_template)
        sink.shard_name_glob_format = self._template_to_glob_format(shard_name_template)
        return sink

    def encodes_bytes_as_is(self) -> bool:
        """Whether a bytes element is its own payload (the default BytesCoder)."""
        return self._encode is None

    def encode_payloads(self, value) -> List[bytes]:
        """One element as the payloads it writes: its coder's bytes, or (BytesCoder) the
        element itself or the list of bytes it is."""
        if self._encode is not None:
            return [self._encode(value)]
        if isinstance(value, bytes):
            return [value]
        if isinstance(value, list) and all_bytes(value):
            return value
        raise _not_bytes(value)

    # -- per bundle ---------------------------------------------------------------------------
    def open(self, temp_path: str) -> _ShardFile:
        index_path = default_index_path(temp_path) if self.write_index else None
        return _ShardFile(super().open(temp_path), index_path)

    def open_piece(self, temp_dir: str) -> Tuple[str, _ShardFile]:
        """A new piece file in `temp_dir` (uncompressed, no index): (its path, its writer)."""
        path = FileSystems.join(temp_dir, f"piece-{uuid.uuid4().hex}")
        return path, _ShardFile(FileSystems.create(path, self.mime_type, CompressionTypes.UNCOMPRESSED), None)

    def write_record(self, file_handle: _ShardFile, value) -> None:
        kind = type(value)
        if kind is Piece:
            file_handle.add_piece(value)
        elif self._encode is not None and kind is not Encoded:
            file_handle.add(self._encode(value))
        else:
            file_handle.add(value)

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
