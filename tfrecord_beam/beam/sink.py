"""TFRecord sink that writes a `.tfindex` beside every shard: `_TFRecordSink(FileBasedSink)`.

The FileBasedSink protocol does the rest (driven by `_write.WriteShards`, or Beam's `Write`
for unbounded input): each bundle writes a temporary file in a `beam-temp-*` directory; only
the results of bundles that committed reach `finalize_write`, which renames them to the final
shard names and deletes the temporary directory (so a retried bundle's first attempt leaves
nothing behind, and a failed run leaves only that temporary directory, never a file with a
final shard name).

Indexes ride along: each temporary shard gets its index beside it
(`index.default_index_path(temp_path)`), written from the frame sizes as the records are
written (no second pass over the data). Finalize commits in `tfrecord_beam._publish`'s order,
the one `RecordWriter.close` uses: the old indexes at the final names are deleted, Beam renames
the data, then each new index is renamed to `default_index_path(final_shard)`. A crash in
between leaves shards with their own index or with none, never beside an index of other data;
with `write_index=False` the old indexes are deleted all the same, so no stale one survives. GZIP shards written with an index are block-gzip
(`tfrecord_beam.blockgzip`: whole records per gzip member, the member table in the index), so
they split and seek like uncompressed ones.

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

from .. import _engine, _publish
from .._blockgzip_write import DEFAULT_BLOCK_BYTES, BlockCompressor
from .._engine._common import FOOTER_SIZE, FRAME_OVERHEAD, HEADER_SIZE
from .._tfindex import default_index_path, format_index, frame_index
from ..compression import seeks_by_members
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

    def __init__(self, handle, index_path: Optional[str], blocks: Optional[BlockCompressor] = None) -> None:
        self._handle = handle
        self._blocks = blocks  # block-gzip: members go to the (uncompressed) handle, the table to the index
        self._index = (
            None if index_path is None else FileSystems.create(index_path, "text/plain", CompressionTypes.UNCOMPRESSED)
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
                self._write_frames(memoryview(chunk.buffer)[first:end], chunk.payload_lengths)

    def flush(self) -> None:
        payloads = self._pending
        if not payloads:
            return
        framed = _engine.frame_records(payloads)
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        self._write_frames(framed, lengths)
        _metrics.counter(_metrics.RECORDS_WRITTEN).inc(len(payloads))
        _metrics.counter(_metrics.BYTES_WRITTEN).inc(int(lengths.sum()))
        self._pending = []
        self._pending_bytes = 0

    def _write_frames(self, framed, lengths: np.ndarray) -> None:
        """Write whole frames (payload `lengths`), as block-gzip members when blocking, and
        index them."""
        sizes = lengths.astype(np.int64) + FRAME_OVERHEAD
        if self._blocks is not None:
            self._blocks.add(framed, sizes)
        else:
            self._handle.write(framed)
        if self._index is not None:
            self._index.write(format_index(frame_index(sizes, self._offset)))
        self._offset += int(sizes.sum())

    def close(self) -> None:
        self.flush()
        members = self._blocks.finish() if self._blocks is not None else None
        self._handle.close()
        if self._index is not None:
            if members is not None:
                self._index.write(members.format())
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
        if index_path is not None and seeks_by_members(_paths.for_file(temp_path, self.compression_type)):
            # block-gzip (`tfrecord_beam.blockgzip`): we write the gzip members ourselves
            handle = FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
            return _ShardFile(handle, index_path, BlockCompressor(handle, DEFAULT_BLOCK_BYTES))
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
    # Data and indexes are committed in `tfrecord_beam._publish`'s order, as RecordWriter.close
    # does: old indexes at the final names out, Beam's data renames, new indexes in.
    def _check_state_for_finalize_write(self, writer_results, num_shards, *args, **kwargs):
        """Beam's check of which temporary shards still need renaming; runs right before the
        data renames, so the old indexes at the final names are removed here (step 1)."""
        src_files, dst_files, delete_files, num_skipped = super()._check_state_for_finalize_write(
            writer_results, num_shards, *args, **kwargs
        )
        dst_indexes = [default_index_path(d) for d in dst_files]
        self._index_moves = []
        if self.write_index:
            for src, dst_index in zip(src_files, dst_indexes):
                src_index = default_index_path(src)
                if not FileSystems.exists(src_index):
                    raise BeamIOError(f"index {src_index} of temporary shard {src} is missing")
                self._index_moves.append((src_index, dst_index))
        _publish.remove_old_indexes(dst_indexes, exists=FileSystems.exists, delete=FileSystems.delete)
        return src_files, dst_files, delete_files, num_skipped

    def finalize_windowed_write(self, init_result, writer_results, pre_finalize_results, w=None):
        """Beam's finalize (data renames, then the temporary directory deleted), with the new
        indexes moved in after the data renames and before that directory goes (step 3)."""
        self._index_moves = []
        moved = False
        for final_name in super().finalize_windowed_write(init_result, writer_results, pre_finalize_results, w):
            if not moved:  # Beam yields the final names once every rename is done
                self._move_new_indexes()
                moved = True
            yield final_name

    def _move_new_indexes(self) -> None:
        moves, self._index_moves = self._index_moves, []
        if moves:
            _publish.move_new_indexes([src for src, _ in moves], [dst for _, dst in moves], rename=FileSystems.rename)
