"""Reading one offset range of one file for the Beam source: claims, resync, index checks, damage.

A record belongs to the range that holds its header offset, and is claimed before it is
yielded, in runs (`_claims`: one `try_claim` and one position update per run of 1, 2, 4, ...
up to 1024 records), so initial and dynamic splits (`split_at_fraction`) both work. Claimed
runs come out as lists of payloads; the source decodes them and makes Beam's elements.

* With a `.tfindex`: the range starts at the first indexed record at or after its start, whose
  header must agree with the index; the offsets read must be the index's, and where the
  records continue after the range must be the index's next record. Any disagreement is an
  IndexMismatchError naming the index (a stale index is never reported as corrupt data).
* Without one: the range starts where `Resync.find` lands, and when it ends, the resync from
  its end must land where its records continue (`Resync.check_split`), or SplitPointError: a
  payload embeds record-like frames and the file needs an index to be split. Exactly once, or
  a loud failure.
* Compressed files are one unsplittable range, read whole; a record whose payload alone is
  damaged is stepped over in the stream (the rest of the file after stream damage is lost).

With `skip_corrupt`, damage yields a `CorruptRecord` (counted) and reading goes on after it;
after damage the reader reads small, growing windows, so densely damaged data costs time in
proportion to its size (one `Resync` per range shares the search work).
"""

from __future__ import annotations

from typing import Generator, Iterator, List, NamedTuple, Optional, Tuple, Union

from .._engine._common import FRAME_OVERHEAD
from .._resync import Resync
from ..errors import CorruptRecordError
from ..records import DEFAULT_CHUNK_SIZE, RecordReader
from . import _fs, _index_cache, _metrics
from ._claims import ClaimGroups, claim
from ._corrupt import CorruptRecord

_DAMAGE_WINDOW = 4096  # bytes read after damage; doubles with each clean window


class Options(NamedTuple):
    """The source's reading options."""

    verify: bool = True
    skip_corrupt: bool = False
    batched: bool = False  # claim whole chunks (one list each) rather than growing runs
    use_index: bool = True


def read_range(
    file_name: str, compression: Optional[str], tracker, options: Options
) -> Iterator[Union[List[bytes], CorruptRecord]]:
    """The records of `tracker`'s range of `file_name` (module docstring)."""
    total = None if compression is not None else _fs.file_size(file_name)
    text = _index_cache.index_text(file_name, total) if options.use_index and total is not None else None
    with _fs.open_input(file_name) as raw:
        yield from _RangeRead(file_name, raw, compression, total, text, options).records(tracker)


class _RangeRead:
    """One range's reading state over one open file (see the module docstring)."""

    def __init__(
        self,
        file_name: str,
        raw,
        compression: Optional[str],
        total: Optional[int],
        index: Optional[_index_cache.IndexText],
        options: Options,
    ) -> None:
        self.file_name = file_name
        self.raw = raw
        self.compression = compression
        self._total = total  # None: compressed (its uncompressed size is unknown)
        self.index = index
        # With an index: its entries around the range (record numbers count from the window's
        # first entry; errors give the file's numbers, `_numbered`).
        self.offsets: Optional[_index_cache.Window] = None
        self.options = options
        self._resync: Optional[Resync] = None
        self._records_read = _metrics.counter(_metrics.RECORDS_READ)
        self._bytes_read = _metrics.counter(_metrics.BYTES_READ)
        self._window: Optional[int] = None  # None: read to the range end in 1 MiB chunks
        self._groups = ClaimGroups(whole_chunks=options.batched)

    @property
    def total(self) -> int:
        """The size of an uncompressed file (the chain's methods are for those only)."""
        if self._total is None:
            raise AssertionError(f"{self.file_name}: a compressed file has no record chain to split")
        return self._total

    @property
    def resync(self) -> Resync:
        """The file's `Resync`, made on first use (one per range: it shares the search work)."""
        if self._resync is None:
            self._resync = Resync(self.raw, self.total, self.file_name)
        return self._resync

    def records(self, tracker) -> Iterator:
        """The range's claimed runs (lists of payloads) and dead letters."""
        if self._total is None:
            yield from self._compressed(tracker)
            return
        start = tracker.start_position()
        number: Optional[int]
        if self.index is not None:
            self.offsets = self.index.window(start, tracker.stop_position())
            number, position = self.offsets.first_at_or_after(start)
            if position < self.total:
                self.offsets.check_entry(self.raw, number)
        else:
            number = 0 if start == 0 else None
            position = self.resync.find(start) if start > 0 else 0
        if position < self.total:
            yield from self._chain(tracker, position, number)

    # -- uncompressed: a chain of records from a boundary ----------------------------------
    def _reader(self, position: int, end: Optional[int], number: Optional[int]) -> RecordReader:
        chunk = DEFAULT_CHUNK_SIZE
        if self._window is not None:
            chunk = min(self._window, DEFAULT_CHUNK_SIZE)
            window_end = position + self._window
            end = window_end if end is None else min(end, window_end)
            if end >= self.total:
                end = None
        reader = RecordReader(
            self.raw,
            None,
            verify=self.options.verify,
            start_offset=position,
            end_offset=end,
            first_record_number=number,
            chunk_size=chunk,
            check_end=False,  # a read window: the chain goes on from it, and `_check_split` checks the range's end
        )
        reader.path = self.file_name
        return reader

    def _chain(self, tracker, position: int, number: Optional[int]) -> Iterator:
        """Read records from the boundary `position` until the range ends or a claim is refused.

        Each pass reads from one boundary (`_read_from`); it comes back with the next boundary
        to read from (after damage, or after a clean damage window), or None when the range
        is done.
        """
        resume: Optional[Tuple[int, Optional[int]]] = (position, number)
        while resume is not None:
            resume = yield from self._read_from(tracker, *resume)

    def _read_from(
        self, tracker, position: int, number: Optional[int]
    ) -> Generator[Union[List[bytes], CorruptRecord], None, Optional[Tuple[int, Optional[int]]]]:
        """One pass of `_chain`: claim and yield the records from `position` (record `number`)
        up to the range's stop, the end of a damage window or the first damage; returns where
        the next pass starts, or None when the range is done (its split point checked)."""
        stop = tracker.stop_position()
        if position >= stop:
            yield from self._range_end(stop, position)
            return None
        reader = self._reader(position, stop if stop < self.total else None, number)
        boundary = position  # the record boundary the chain has reached
        try:
            for chunk in reader.chunks():
                starts = chunk.record_offsets
                self._check_index(chunk)
                claimed = yield from self._emit(tracker, chunk, starts)
                if claimed:
                    boundary = int(starts[claimed - 1]) + FRAME_OVERHEAD + int(chunk.payload_lengths[claimed - 1])
                    first = chunk.first_record_number
                    number = None if first is None else first + claimed
                if claimed < len(starts):  # refused: the range (perhaps split since) ends here
                    self._check_split(tracker.stop_position(), int(starts[claimed]))
                    return None
        except CorruptRecordError as err:
            return (yield from self._skip_damage(tracker, err))
        if reader.end_offset is None or reader.end_offset >= stop or boundary == position:
            yield from self._range_end(tracker.stop_position(), boundary)  # (split since, perhaps)
            return None
        self._grow_window()
        return boundary, number

    def _check_index(self, chunk) -> None:
        """With an index, the chunk's records must sit where it says (else IndexMismatchError)."""
        if self.offsets is None:
            return
        first = chunk.first_record_number
        if first is None:  # every chain of an indexed file starts at a numbered record
            raise AssertionError(f"{self.file_name}: an indexed chain lost its record numbers")
        self.offsets.check_records(first, chunk.record_offsets)

    def _skip_damage(
        self, tracker, err: CorruptRecordError
    ) -> Generator[CorruptRecord, None, Optional[Tuple[int, Optional[int]]]]:
        """Damage found by the reader: raise it, or (with `skip_corrupt`) claim it, yield its dead
        letter and return the boundary after it, read next in a small window; None when the
        damage lies past the range (then the range ends before it)."""
        if err.offset is None:  # RecordReader's errors carry their offset; without one, no going on
            raise self._numbered(err)
        offset = int(err.offset)
        if self.offsets is not None:
            self.offsets.check_damage(self.raw, err.record_number, offset)
        if not self.options.skip_corrupt:
            raise self._numbered(err)
        if not (offset < tracker.stop_position() and tracker.try_claim(offset)):
            yield from self._range_end(tracker.stop_position(), offset)
            return None
        yield self._report(offset, err.reason)
        resume = self._after_bad(offset)
        self._window = _DAMAGE_WINDOW
        return resume

    def _grow_window(self) -> None:
        """A damage window ended cleanly: read on in one twice as large, up to plain chunks."""
        if self._window is not None:
            self._window = None if self._window >= DEFAULT_CHUNK_SIZE else self._window * 2

    def _range_end(self, stop: int, boundary: int) -> Iterator[CorruptRecord]:
        """The chain has reached `boundary`, the first record boundary at or past `stop`.

        Without an index the next range resynchronises to the next candidate (a valid length
        CRC), so it owns a record at `boundary` whose header is sound, damaged payload or not.
        A damaged header, or one cut short by the end of the file, is a candidate for no resync:
        this range owns it, reports it and goes on to the boundary after it. Then the split
        point is checked: the next range must start exactly where this chain continues.
        """
        while self.offsets is None and boundary < self.total:
            if self.resync.header_at(boundary) is not None:
                break  # a sound header: the next range's resync lands on it
            try:
                next(iter(self._reader(boundary, boundary + 1, None)), None)
                break
            except CorruptRecordError as err:
                if not self.options.skip_corrupt:
                    raise
                yield self._report(boundary, err.reason)
                boundary, _ = self._after_bad(boundary)
        self._check_split(stop, boundary)

    def _check_split(self, stop: int, next_start: int) -> None:
        """The next range (from `stop`) must start at `next_start`, where this chain continues."""
        if stop >= self.total:
            return
        if self.offsets is not None:
            self.offsets.check_next(stop, next_start)
        else:
            self.resync.check_split(stop, next_start)

    def _after_bad(self, offset: int) -> Tuple[int, Optional[int]]:
        """(next record boundary, its record number or None) after a corrupt record at `offset`.

        With an index, the next indexed record. Without one, the end of the bad frame when its
        length field passes its CRC (only the payload is damaged), else a resync.
        """
        if self.offsets is not None:
            number, position = self.offsets.first_after(offset)
            return position, number
        position, _, _ = self.resync.after_bad(offset)
        return position, None

    def _emit(self, tracker, chunk, starts) -> Generator[List[bytes], None, int]:
        """Claim a chunk's records in runs (`_claims`) and yield each claimed run as a list of
        payloads; returns how many were ours (fewer than the chunk's: the range ends there)."""
        payloads = chunk.payloads()
        claimed = 0
        for lo, hi in self._groups.of(len(starts)):
            got = claim(tracker, starts, lo, hi)
            if got:
                yield payloads[lo : lo + got] if got < len(payloads) else payloads
            claimed += got
            if got < hi - lo:
                break
        if claimed:
            self._records_read.inc(claimed)
            self._bytes_read.inc(int(chunk.payload_lengths[:claimed].sum()))
        return claimed

    def _numbered(self, err: CorruptRecordError) -> CorruptRecordError:
        """`err` of a reader that counted records from the index window's first entry, with the
        file's record number (counted only now, for the message)."""
        if self.offsets is None or err.record_number is None:
            return err
        return type(err)(err.path, err.offset, self.offsets.number(err.record_number), err.reason)

    def _report(self, offset: int, reason: str) -> CorruptRecord:
        return report(self.file_name, offset, reason)

    # -- compressed: one unsplittable range ----------------------------------------------
    def _compressed(self, tracker) -> Iterator:
        """A compressed stream is read whole, as one range. A record whose payload alone is
        damaged is a dead letter and the stream inflates on past it (`RecordReader`'s
        `on_bad_payload`); damage to the stream or to a length cannot be re-entered: report
        it and stop."""
        stepped: List[Tuple[int, str]] = []  # payload damage the reader went on past, not yet claimed
        reader = RecordReader(
            self.raw,
            self.compression,
            verify=self.options.verify,
            first_record_number=0,
            on_bad_payload=(lambda offset, _n, reason, _end: stepped.append((offset, reason)))
            if self.options.skip_corrupt
            else None,
        )
        reader.path = self.file_name
        try:
            for chunk in reader.chunks():
                if not (yield from self._claim_stepped(tracker, stepped)):
                    return
                claimed = yield from self._emit(tracker, chunk, chunk.record_offsets)
                if claimed < len(chunk):
                    return
            yield from self._claim_stepped(tracker, stepped)
        except CorruptRecordError as err:
            if not self.options.skip_corrupt or err.offset is None:
                raise
            if not (yield from self._claim_stepped(tracker, stepped)):
                return
            offset = int(err.offset)
            tracker.try_claim(offset)
            reason = f"{err.reason}; the rest of this {self.compression} file is unreadable and was skipped"
            yield self._report(offset, reason)

    def _claim_stepped(self, tracker, stepped: List[Tuple[int, str]]) -> Generator[CorruptRecord, None, bool]:
        """Claim and yield the dead letters of `stepped` (in offset order, before the records
        after them); False when a claim is refused (the range ends there)."""
        for offset, reason in stepped:
            if not tracker.try_claim(offset):
                return False
            yield self._report(offset, reason)
        stepped.clear()
        return True


def report(file_name: str, offset: int, reason: str) -> CorruptRecord:
    """A dead letter for damage at `offset` of `file_name`, counted in the source's metrics."""
    _metrics.counter(_metrics.CORRUPT_RECORDS).inc()
    return CorruptRecord(file_name, offset, reason)
