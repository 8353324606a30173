"""Splittable TFRecord source: `_TFRecordSource(FileBasedSource)`, shaped like Beam's `_TextSource`.

All reading happens in `read_records(file_name, range_tracker)`. A record belongs to the range
that holds its header offset, and the reader calls `range_tracker.try_claim(offset)` before
each record, so initial splits and dynamic splits (`split_at_fraction`) both work:

* uncompressed with a `.tfindex` beside the file: start at the first indexed record at or
  after the range start (exact, and record numbers are known for error messages);
* uncompressed without an index: start at the next true record boundary
  (`records.find_record_start`);
* block-gzip (GZIP with a gzip member table in its `.tfindex`): split at gzip members,
  positions being file offsets (`_blockgzip`);
* other GZIP / ZLIB: not splittable (Beam gives such files one unsplittable range); read whole.

With `batched=True` it yields lists of payloads instead (one list per read chunk, about 1 MiB
of records, each record still claimed on its own), which saves Beam's per-element cost.

Corrupt data raises `CorruptRecordError` (file, offset, record) by default. With
`skip_corrupt=True` the source yields a `CorruptRecord(file, offset, reason)` in its place,
counts it, resynchronises past it and reads on; `ReadFromTFRecord` routes those to its
dead-letter output.
"""

from __future__ import annotations

from typing import Iterator, Optional, Tuple, Union

from apache_beam import coders
from apache_beam.io.filebasedsource import FileBasedSource

from .. import fs
from .._framing_py import FRAME_OVERHEAD, HEADER_SIZE
from ..errors import CorruptRecordError
from ..records import RecordReader, find_record_start, header_length
from . import _blockgzip, _index_cache, _metrics, _paths
from ._corrupt import CorruptRecord


class _TFRecordSource(FileBasedSource):
    """A FileBasedSource of TFRecord payloads (bytes); see the module docstring."""

    def __init__(
        self,
        file_pattern,
        compression_type: _paths.Compression = "auto",
        validate: bool = True,
        *,
        min_bundle_size: int = 0,
        use_index: bool = True,
        verify: bool = True,
        skip_corrupt: bool = False,
        with_filename: bool = False,
        batched: bool = False,
    ) -> None:
        super().__init__(
            _paths.local_absolute(file_pattern),
            min_bundle_size=min_bundle_size,
            compression_type=_paths.to_beam(compression_type),
            splittable=True,
            validate=validate,
        )
        self._use_index = use_index
        self._verify = verify
        self._skip_corrupt = skip_corrupt
        self._with_filename = with_filename
        self._batched = batched

    def default_output_coder(self):
        if self._skip_corrupt or self._batched:
            return coders.PickleCoder()  # bytes, (file, bytes) or CorruptRecord
        if self._with_filename:
            return coders.TupleCoder([coders.StrUtf8Coder(), coders.BytesCoder()])
        return coders.BytesCoder()

    def _get_concat_source(self):
        concat = super()._get_concat_source()
        if self._use_index:  # block-gzip files split at their gzip members
            _blockgzip.mark_splittable(concat, self._compression_type)
        return concat

    # -- reading -----------------------------------------------------------------------------
    def read_records(self, file_name: str, range_tracker) -> Iterator[Union[bytes, tuple, CorruptRecord]]:
        compression = _paths.for_file(file_name, self._compression_type)
        table = _blockgzip.member_table(file_name) if compression == "gzip" and self._use_index else None
        if table is not None:
            yield from _blockgzip.read_members(self, file_name, range_tracker, table)
            return
        if compression is not None:
            _blockgzip.check_whole_range(file_name, range_tracker)
            yield from self._read_chain(file_name, compression, range_tracker, 0, 0, None, None)
            return
        total = fs.file_size(file_name)
        offsets = _index_cache.record_offsets(file_name, total) if self._use_index else None
        start = range_tracker.start_position()
        if offsets is not None:
            number, position = offsets.first_at_or_after(start, total)
        else:
            number = 0 if start == 0 else None
            with fs.open_input(file_name) as raw:
                position = find_record_start(raw, start, total, file_name) if start > 0 else 0
        if position < total:
            yield from self._read_chain(file_name, None, range_tracker, position, number, total, offsets)

    def _read_chain(self, file_name, compression, tracker, position, number, total, offsets):
        """Read records from the boundary `position` until the tracker refuses a claim.

        `total` is None for compressed files (positions are uncompressed offsets, unbounded).
        """
        records = _metrics.counter(_metrics.RECORDS_READ)
        payload_bytes = _metrics.counter(_metrics.BYTES_READ)
        while True:
            stop = tracker.stop_position()
            if total is not None and position >= stop:
                yield from self._past_range(file_name, position, total, offsets)
                return
            end = stop if total is not None and stop < total else None
            reader = RecordReader(
                file_name, compression, verify=self._verify, start_offset=position,
                end_offset=end, first_record_number=number,
            )
            boundary = position  # the record boundary our chain has reached
            try:
                for chunk in reader.chunks():
                    starts = chunk.record_offsets.tolist()
                    if self._batched:
                        claimed = _claim_all(tracker, starts)
                        if claimed:
                            batch = chunk.payloads()[:claimed] if claimed < len(starts) else chunk.payloads()
                            yield (file_name, batch) if self._with_filename else batch
                    else:
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
            except CorruptRecordError as err:
                if not self._skip_corrupt:
                    raise
                offset = int(err.offset)
                if total is None:  # a compressed stream cannot be re-entered after damage
                    tracker.try_claim(offset)
                    reason = f"{err.reason}; the rest of this {compression} file is unreadable and was skipped"
                    yield self._report(file_name, offset, reason)
                    return
                if not (offset < tracker.stop_position() and tracker.try_claim(offset)):
                    yield from self._past_range(file_name, offset, total, offsets)
                    return
                yield self._report(file_name, offset, err.reason)
                position, number = self._after_bad(file_name, offset, total, offsets)
                continue
            if total is not None:  # stopped at the range end, not at a refused claim
                yield from self._past_range(file_name, boundary, total, offsets)
            return

    def _past_range(self, file_name: str, boundary: int, total: int, offsets) -> Iterator[CorruptRecord]:
        """Report damage at `boundary`, the first record boundary past this range, that no resync finds.

        Without an index the next range resynchronises to the next position with a valid length
        CRC (`records.find_record_start`), so it lands on a record at `boundary` whose header is
        sound, damaged payload or not, and owns it. A damaged header, or one cut short by the end
        of the file, is a candidate for no resync: the reader whose chain reaches it owns it.
        (With an index the next range starts exactly at the boundary and owns everything.)
        """
        while offsets is None and boundary < total:
            with fs.open_input(file_name) as raw:
                raw.seek(boundary)
                header = raw.read(HEADER_SIZE)
            if header_length(header) is not None:
                return  # a sound header: the next range's resync lands on it
            try:
                next(iter(RecordReader(file_name, None, verify=self._verify, start_offset=boundary,
                                       end_offset=boundary + 1)), None)
                return
            except CorruptRecordError as err:
                if not self._skip_corrupt:
                    raise
                yield self._report(file_name, boundary, err.reason)
                boundary, _ = self._after_bad(file_name, boundary, total, offsets)

    @staticmethod
    def _report(file_name: str, offset: int, reason: str) -> CorruptRecord:
        _metrics.counter(_metrics.CORRUPT_RECORDS).inc()
        return CorruptRecord(file_name, offset, reason)

    @staticmethod
    def _after_bad(file_name: str, offset: int, total: int, offsets) -> Tuple[int, Optional[int]]:
        """(next record boundary, its record number or None) after a corrupt record at `offset`.

        With an index, the next indexed record. Without one, the end of the bad frame when its
        length field passes its CRC (only the payload is damaged), else a resync.
        """
        if offsets is not None:
            number, position = offsets.first_after(offset, total)
            return position, number
        with fs.open_input(file_name) as raw:
            raw.seek(offset)
            header = raw.read(HEADER_SIZE)
            length = header_length(header)
            if length is not None and offset + FRAME_OVERHEAD + length <= total:
                return offset + FRAME_OVERHEAD + length, None
            return find_record_start(raw, offset + 1, total, file_name), None


def _claim_all(tracker, starts) -> int:
    """Claim a batch of record offsets; return how many (from the first) are ours.

    Claiming the last offset claims the whole batch: a split can only fall after the last
    claimed position, so no record before it can go to another reader. Only when that claim
    is refused (the range ends inside the batch) are records claimed one by one.
    """
    if starts and tracker.try_claim(starts[-1]):
        return len(starts)
    for done, offset in enumerate(starts):
        if not tracker.try_claim(offset):
            return done
    return len(starts)


def _create_source(file_pattern: str, **kwargs) -> _TFRecordSource:
    """A source for one file or pattern of ReadAllFromTFRecord (no existence check: globs may be empty)."""
    return _TFRecordSource(file_pattern, validate=False, **kwargs)

