"""Splittable TFRecord source: `_TFRecordSource(FileBasedSource)`, shaped like Beam's `_TextSource`.

All reading happens in `read_records(file_name, range_tracker)`. A record belongs to the range
that holds its header offset, and the reader calls `range_tracker.try_claim(offset)` before
each record, so initial splits and dynamic splits (`split_at_fraction`) both work:

* uncompressed with a `.tfindex` beside the file: start at the first indexed record at or
  after the range start (exact, and record numbers are known for error messages);
* uncompressed without an index: start at the next true record boundary (`_resync`);
* GZIP / ZLIB: not splittable (Beam gives such files one unsplittable range); read whole.

Corrupt data raises `CorruptRecordError` (file, offset, record) by default. With
`skip_corrupt=True` the source yields a `CorruptRecord(file, offset, reason)` in its place,
counts it, resynchronises past it and reads on; `ReadFromTFRecord` routes those to its
dead-letter output.
"""

from __future__ import annotations

from typing import Iterator, Union

import numpy as np
from apache_beam import coders
from apache_beam.io.filebasedsource import FileBasedSource

from .. import fs
from .._framing_py import FRAME_OVERHEAD
from ..errors import CorruptRecordError
from ..records import RecordReader
from . import _compression, _index_cache, _metrics
from ._corrupt import CorruptRecord
from ._resync import next_record_start


class _TFRecordSource(FileBasedSource):
    """A FileBasedSource of TFRecord payloads (bytes); see the module docstring."""

    def __init__(
        self,
        file_pattern,
        compression_type: _compression.Compression = "auto",
        validate: bool = True,
        *,
        min_bundle_size: int = 0,
        use_index: bool = True,
        verify: bool = True,
        skip_corrupt: bool = False,
        with_filename: bool = False,
    ) -> None:
        super().__init__(
            file_pattern,
            min_bundle_size=min_bundle_size,
            compression_type=_compression.to_beam(compression_type),
            splittable=True,
            validate=validate,
        )
        self._use_index = use_index
        self._verify = verify
        self._skip_corrupt = skip_corrupt
        self._with_filename = with_filename

    def default_output_coder(self):
        if self._skip_corrupt:
            return coders.PickleCoder()  # bytes, (file, bytes) or CorruptRecord
        if self._with_filename:
            return coders.TupleCoder([coders.StrUtf8Coder(), coders.BytesCoder()])
        return coders.BytesCoder()

    # -- reading -----------------------------------------------------------------------------
    def read_records(self, file_name: str, range_tracker) -> Iterator[Union[bytes, tuple, CorruptRecord]]:
        compression = _compression.for_file(file_name, self._compression_type)
        if compression is not None:
            yield from self._read_chain(file_name, compression, range_tracker, 0, 0, None, None)
            return
        total = fs.file_size(file_name)
        offsets = _index_cache.record_offsets(file_name, total) if self._use_index else None
        start = range_tracker.start_position()
        if offsets is not None:
            number = int(np.searchsorted(offsets, start, side="left"))
            position = int(offsets[number]) if number < len(offsets) else total
        else:
            number = 0 if start == 0 else None
            with fs.open_input(file_name) as raw:
                position = next_record_start(raw, start, total)
        if position < total:
            yield from self._read_chain(file_name, None, range_tracker, position, number, total, offsets)

    def _read_chain(self, file_name, compression, tracker, position, number, total, offsets):
        """Read records from the boundary `position` until the tracker refuses a claim.

        `total` is None for compressed files (positions are uncompressed offsets, unbounded).
        """
        records = _metrics.counter(_metrics.RECORDS_READ)
        payload_bytes = _metrics.counter(_metrics.BYTES_READ)
        while position is not None:
            stop = tracker.stop_position()
            if total is not None and position >= stop:
                return  # the next range starts at (or before) this boundary and reads on from it
            end = stop if total is not None and stop < total else None
            reader = RecordReader(
                file_name, compression, verify=self._verify, start_offset=position,
                end_offset=end, first_record_number=number,
            )
            boundary = position  # the record boundary our chain has reached
            try:
                for chunk in reader.chunks():
                    starts = chunk.record_offsets.tolist()
                    claimed = 0
                    for offset, payload in zip(starts, chunk.payloads()):
                        if not tracker.try_claim(offset):
                            break
                        yield (file_name, payload) if self._with_filename else payload
                        claimed += 1
                    if claimed:
                        done = chunk.payload_lengths[:claimed]
                        records.inc(claimed)
                        payload_bytes.inc(int(done.sum()))
                        boundary = starts[claimed - 1] + FRAME_OVERHEAD + int(done[-1])
                    if claimed < len(starts):
                        return
                if total is not None and offsets is None and boundary < total:
                    self._check_frame(file_name, boundary, total)  # the record just past our range
                return
            except CorruptRecordError as err:
                position, number = yield from self._corrupt(err, file_name, compression, tracker, total, offsets)

    def _check_frame(self, file_name: str, offset: int, total: int) -> None:
        """Verify the record at the first boundary past this range.

        Without an index the next range resynchronises to the next *valid* record, so a corrupt
        record sitting exactly at the boundary would be skipped by both readers; this reader
        owns reporting it.
        """
        chunks = RecordReader(file_name, None, verify=self._verify, start_offset=offset, end_offset=offset + 1).chunks()
        try:
            next(chunks, None)
        finally:
            chunks.close()

    def _corrupt(self, err: CorruptRecordError, file_name, compression, tracker, total, offsets):
        """Handle a bad record: raise, or report it and return where to carry on (or None)."""
        if not self._skip_corrupt:
            raise err
        offset = int(err.offset)
        ours = offset < tracker.stop_position() and tracker.try_claim(offset)
        # Past our range: with an index the next range starts exactly there and reports it;
        # without one it resynchronises past it, so it is ours to report (see _check_frame).
        if ours or offsets is None:
            reason = err.reason
            if total is None:  # a compressed stream cannot be re-entered after damage
                reason += f"; the rest of this {compression} file is unreadable and was skipped"
            _metrics.counter(_metrics.CORRUPT_RECORDS).inc()
            yield CorruptRecord(file_name, offset, reason)
        if not ours or total is None:
            return None, None
        if offsets is not None:
            number = int(np.searchsorted(offsets, offset, side="right"))
            position = int(offsets[number]) if number < len(offsets) else total
        else:
            number = None
            with fs.open_input(file_name) as raw:
                position = next_record_start(raw, offset + 1, total)
        return (position, number) if position < total else (None, None)


def _create_source(file_pattern: str, **kwargs) -> _TFRecordSource:
    """A source for one file or pattern of ReadAllFromTFRecord (no existence check: globs may be empty)."""
    return _TFRecordSource(file_pattern, validate=False, **kwargs)

