"""Reading past corrupt records (`skip_corrupt`): one implementation for the jobs and the
torch datasets (the Beam source has its own, tied to its range tracker).

`SkippingReader` reads the records whose header starts in [start_offset, end_offset), like a
`RecordReader`; with `skip_corrupt` a bad record is reported to `on_corrupt(file, offset,
reason)` and reading goes on at the next record boundary:

* with an index (`boundaries`: the sorted record offsets), the next indexed record;
* else, when the bad record's length passes its CRC (only the payload is damaged), right
  after it; otherwise the next boundary a resync finds (both: `Resync.after_bad`);
* in a GZIP / ZLIB file, right after a record whose payload alone is damaged, in the same
  stream (`RecordReader`'s `on_bad_payload`: nothing is inflated twice); damage to the stream
  itself or to a length loses the rest of the file (no resync inside a stream);
* a truncated tail ends the file;
* with an index, damage met at or past `end_offset` (the reader looks at the next header to
  end its range) is the next range's, which starts there and reports it: this range just ends.

`end` is where the reader's chain stopped (the end of its last record or skipped span), so a
caller that checks that ranges tile a file counts skipped spans as covered. Without
`skip_corrupt` the first bad record raises, as `RecordReader` does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import BinaryIO, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from ._engine._common import FRAME_OVERHEAD, HEADER_SIZE
from ._resync import Resync, header_length
from .compression import read_at
from .compression import resolve as resolve_compression
from .errors import CorruptRecordError, CorruptStreamError, TruncatedRecordError
from .records import ReadSpan, RecordChunk, RecordReader

OnCorrupt = Callable[[str, int, str], None]


class SkippingReader:
    """Chunks of records of one file range, reporting and skipping corrupt records (see module).

    `span` (a `records.ReadSpan`) is which bytes of the file are read and how, as
    `RecordReader` reads them; each `RecordReader` this reader opens (one more after each
    skipped record) reads that span from where the last one stopped. The rest is about damage:
    `skip_corrupt`, `on_corrupt`, the index's record `boundaries` and the file's `size`.
    """

    def __init__(
        self,
        path: str,
        span: ReadSpan,
        *,
        open_file: Callable[[], BinaryIO],
        skip_corrupt: bool = False,
        on_corrupt: Optional[OnCorrupt] = None,
        boundaries: Union[Sequence[int], np.ndarray, None] = None,
        size: Optional[int] = None,
    ) -> None:
        self.path, self._open = path, open_file
        # resolved here, once: every reader after the first opens a file object, not a name
        self.span = replace(span, compression=resolve_compression(path, span.compression))
        self.start_offset = int(span.start_offset)  # where the first record read starts (set as reading goes)
        self.skip_corrupt, self.on_corrupt = skip_corrupt, on_corrupt
        self.boundaries = None if boundaries is None else np.asarray(boundaries, dtype=np.int64)
        self.size = size
        self.end: Optional[int] = None  # set as reading goes
        self.skipped = 0

    @property
    def compression(self) -> Optional[str]:
        return self.span.compression

    @property
    def end_offset(self) -> Optional[int]:
        return self.span.end_offset

    def chunks(self) -> Iterator[RecordChunk]:
        span = self.span
        first = True
        while True:
            raw = self._open()
            reader = RecordReader.over(
                raw,
                span,
                on_bad_payload=self._stepped_over if self.skip_corrupt and self.compression is not None else None,
            )
            try:
                for chunk in reader.chunks():
                    if first:
                        self.start_offset, first = reader.start_offset, False
                    self.end = int(chunk.record_offsets[-1] + chunk.payload_lengths[-1] + FRAME_OVERHEAD)
                    yield chunk
                if first:
                    self.start_offset, first = reader.start_offset, False
                return
            except CorruptRecordError as err:
                if first:
                    self.start_offset, first = reader.start_offset, False
                if self._next_pieces(err):
                    return
                if not self.skip_corrupt:
                    raise
                position, number = self._skip(err)
                if position is None:
                    return
                span = span.at(position, number)
            finally:
                raw.close()

    def _next_pieces(self, err: CorruptRecordError) -> bool:
        """Whether `err` is about the record at or after `end_offset` of an indexed range: the
        reader looked at the next record's header to end its range (`RecordReader`), but with
        an index the next range starts exactly there and reports it itself (reporting it here
        too counted one damaged record twice, and the range then called its index stale)."""
        return (
            self.boundaries is not None
            and self.end_offset is not None
            and err.offset is not None
            and int(err.offset) >= self.end_offset
        )

    def _report(self, offset: int, reason: str) -> None:
        self.skipped += 1
        if self.on_corrupt is not None:
            self.on_corrupt(self.path, offset, reason)

    def _stepped_over(self, offset: int, number: Optional[int], reason: str, frame_end: int) -> None:
        """The reader went on past a record whose payload alone is damaged: report it."""
        self._report(offset, reason)
        self.end = frame_end

    def _skip(self, err: CorruptRecordError):
        """Report `err`; (next boundary, its record number) to go on from, or (None, None)."""
        assert err.offset is not None  # RecordReader names the offset of all damage it raises
        offset = int(err.offset)
        if self.compression is not None:
            return self._skip_in_stream(err, offset)
        size = self.size if self.size is not None else self._file_size()
        if isinstance(err, TruncatedRecordError):
            self._report(offset, err.reason)
            self.end = size
            return None, None
        self._report(offset, err.reason)
        number = None
        if self.boundaries is not None:
            i = int(np.searchsorted(self.boundaries, offset, side="right"))
            nxt = int(self.boundaries[i]) if i < len(self.boundaries) else size
            number = i
        else:
            with self._open() as raw:
                nxt, number, _ = Resync(raw, size, self.path).after_bad(offset, err.record_number)
        self.end = nxt
        if nxt >= size or (self.end_offset is not None and nxt >= self.end_offset):
            return None, None
        return nxt, number

    def _skip_in_stream(self, err: CorruptRecordError, offset: int):
        """`_skip` in a GZIP / ZLIB file (payload damage never comes here: the reader steps over
        it, `_stepped_over`): a record too long to accept, whose length passes its CRC, is
        stepped over; damage to the stream or to a length loses the rest of the file (a
        compressed stream has no resync), which is reported as one span."""
        length = None
        if not isinstance(err, (CorruptStreamError, TruncatedRecordError)):
            with self._open() as raw:
                length = header_length(read_at(raw, self.compression, offset, HEADER_SIZE))
        if length is None:
            self._report(
                offset, f"{err.reason}; the rest of this {self.compression} file is unreadable and was skipped"
            )
            return None, None
        self._report(offset, err.reason)
        nxt = offset + FRAME_OVERHEAD + length
        self.end = nxt
        if self.end_offset is not None and nxt >= self.end_offset:
            return None, None
        return nxt, None if err.record_number is None else err.record_number + 1

    def _file_size(self) -> int:
        with self._open() as raw:
            return raw.seek(0, 2)
