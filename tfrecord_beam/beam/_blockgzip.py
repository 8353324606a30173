"""Splitting block-gzip files (`tfrecord_beam.blockgzip`) in the Beam source, at gzip members.

Beam gives every compressed file one unsplittable range (`FileBasedSource` decides from the
compression type alone). A GZIP file whose index carries a member table can be entered at
any member, so `mark_splittable` turns its range splittable again. Positions are then
offsets *in the file on disk*: a record belongs to the range holding the file offset of the
gzip member it lies in; the reader claims each member's offset before reading the member,
so initial splits and dynamic splits (`split_at_fraction`) fall between members.
`ReadAllFiles` does the same for ReadAllFromTFRecord (Beam's expands compressed files into one
range each).
"""

from __future__ import annotations

from typing import Iterator

from apache_beam import ParDo, Reshuffle
from apache_beam.io import filebasedsource
from apache_beam.io.range_trackers import OffsetRangeTracker
from apache_beam.io.restriction_trackers import OffsetRange

from .. import blockgzip
from ..compression import seeks_by_members
from ..errors import CorruptRecordError, IndexMismatchError
from ..records import RecordReader
from . import _fs, _metrics, _paths


def member_table(file_name: str, file_size=None):
    """The checked member table of a GZIP file from the index beside it, or None."""
    return blockgzip.member_table_for(
        file_name, opener=_fs.open_input, file_size=_fs.file_size(file_name) if file_size is None else file_size
    )


def mark_splittable(concat, compression_type) -> None:
    """Make the unsplittable per-file ranges of block-gzip files in `concat` splittable.

    `concat` is FileBasedSource's ConcatSource of `_SingleFileSource`s (one per file, built
    once and cached); each file is checked once, by reading its index's tail.
    """
    if getattr(concat, "_tfrecord_beam_marked", False):
        return
    for single in concat.sources:
        name = getattr(single, "_file_name", None)
        if getattr(single, "_splittable", True) or name is None:
            continue
        if seeks_by_members(_paths.for_file(name, compression_type)) and member_table(name) is not None:
            single._splittable = True
    concat._tfrecord_beam_marked = True


def check_whole_range(file_name: str, tracker) -> None:
    """Refuse a split range of a compressed file that has no member table (any more): it was
    split as block-gzip, but now only a whole read is possible, and ranges read as whole
    files would duplicate records."""
    if tracker.start_position() > 0 or tracker.stop_position() != OffsetRangeTracker.OFFSET_INFINITY:
        raise IndexMismatchError(
            file_name,
            None,
            None,
            f"range [{tracker.start_position()}, {tracker.stop_position()}) of a compressed file without a gzip "
            "member table: it was split as block-gzip but its index is gone or has no table (changed mid-job)",
        )


def read_members(source, file_name: str, tracker, table) -> Iterator:
    """Lists of the payloads of the members whose file offsets the tracker lets us claim, in
    order (the source turns them into its output form). `skip_corrupt` is the source's: a
    damaged member is reported as one CorruptRecord (the rest of that member is lost, and
    said so) and reading goes on with the next member, which inflates on its own.
    """
    with _fs.open_input(file_name) as raw:  # through Beam's FileSystems: the pipeline's options apply
        yield from _read_members(source, file_name, raw, tracker, table)


def _read_members(source, file_name: str, raw, tracker, table) -> Iterator:
    records = _metrics.counter(_metrics.RECORDS_READ)
    payload_bytes = _metrics.counter(_metrics.BYTES_READ)
    m = table.first_at_or_after(tracker.start_position())
    while m < len(table):
        offset = int(table.compressed[m])
        if not tracker.try_claim(offset):
            return
        start, end = int(table.uncompressed[m]), int(table.uncompressed[m + 1])
        reader = RecordReader(
            raw,
            "gzip",
            verify=source._verify,
            start_offset=start,
            end_offset=end if m + 1 < len(table) else None,
            members=table,
        )
        try:
            for chunk in reader.chunks():
                payloads = chunk.payloads()
                yield payloads
                records.inc(len(payloads))
                payload_bytes.inc(int(chunk.payload_lengths.sum()))
        except CorruptRecordError as err:
            if not source._skip_corrupt:
                raise
            assert err.offset is not None  # RecordReader names the offset of all damage it raises
            reason = f"{err.reason}; the rest of gzip member {m} (uncompressed bytes {err.offset}..{end}) was skipped"
            yield source._report(file_name, int(err.offset), reason)
        m += 1


class _ExpandWithMembers(filebasedsource._ExpandIntoRanges):
    """Beam's expansion of files into ranges, plus block-gzip files split into byte ranges too
    (Beam's own gives every compressed file one unsplittable range)."""

    def __init__(self, splittable, compression_type, desired_bundle_size, min_bundle_size, use_index: bool) -> None:
        super().__init__(splittable, compression_type, desired_bundle_size, min_bundle_size)
        self._use_index = use_index

    def process(self, element, *args, **kwargs):
        for metadata, rng in super().process(element, *args, **kwargs):
            size = metadata.size_in_bytes
            if (
                rng.stop == OffsetRangeTracker.OFFSET_INFINITY
                and self._splittable
                and self._use_index
                and size > 0
                and seeks_by_members(_paths.for_file(metadata.path, self._compression_type))
                and member_table(metadata.path, size) is not None
            ):
                for split in OffsetRange(0, size).split(self._desired_bundle_size, self._min_bundle_size):
                    yield metadata, split
            else:
                yield metadata, rng


class ReadAllFiles(filebasedsource.ReadAllFiles):
    """Beam's ReadAllFiles whose range expansion also splits block-gzip files (read at members
    by the source's `read_members`); `use_index=False` keeps them whole, as the source reads them."""

    def __init__(self, *args, use_index: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._use_index = use_index

    def expand(self, pvalue):
        pvalue = pvalue | "ExpandIntoRanges" >> ParDo(
            _ExpandWithMembers(
                self._splittable,
                self._compression_type,
                self._desired_bundle_size,
                self._min_bundle_size,
                self._use_index,
            )
        )
        if self._is_reshuffle:
            pvalue = pvalue | "Reshard" >> Reshuffle()
        return pvalue | "ReadRange" >> ParDo(
            filebasedsource._ReadRange(self._source_from_file, with_filename=self._with_filename)
        )
