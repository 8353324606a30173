"""Splittable TFRecord source: `_TFRecordSource(FileBasedSource)`, shaped like Beam's `_TextSource`.

All reading happens in `read_records(file_name, range_tracker)` (one range's reading state is
`_range_read`'s). A record belongs to the range
that holds its header offset; the reader claims records before it yields them, so initial
splits and dynamic splits (`split_at_fraction`) both work. Records are claimed in runs (see
`_claims.claim`: one `try_claim` and one position update per run, 1, 2, 4, ... up to 1024 records),
since a tracker call per record cost more than reading the record:

* uncompressed with a `.tfindex` beside the file: start at the first indexed record at or
  after the range start (exact, and record numbers are known for error messages); what is
  read is checked against the index, and a stale one raises IndexMismatchError;
* uncompressed without an index: start at the next true record boundary
  (`records.find_record_start`), and check at the end that the next range starts where this
  one's records continue (else SplitPointError: the file needs an index to be split);
* block-gzip (GZIP with a gzip member table in its `.tfindex`): split at gzip members,
  positions being file offsets (`_blockgzip`);
* other GZIP / ZLIB: not splittable (Beam gives such files one unsplittable range); read whole.

With `batched=True` it yields lists of payloads instead (one list per read chunk, about 1 MiB
of records, claimed as one run), which saves Beam's per-element cost. With `runs=True` it
yields each claimed run as a list, which ReadFromTFRecord turns back into records in a DoFn
downstream: an element a DoFn outputs costs the runner less than one an SDF (Beam's Read)
outputs, for which it also observes a watermark, so this is ~2x faster per record.

Files are opened through Beam's `FileSystems` (`beam/_fs.py`), as Beam's own sources do, so
pipeline options and credentials apply. Payloads are decoded by the `coder` (Beam's
`BytesCoder` default leaves them as bytes). `.tfindex` sidecars a glob matches are skipped
(`_sidecars`).

Corrupt data raises `CorruptRecordError` (file, offset, record) by default. With
`skip_corrupt=True` the source yields a `CorruptRecord(file, offset, reason)` in its place,
counts it, resynchronises past it and reads on; `ReadFromTFRecord` routes those to its
dead-letter output.
"""

from __future__ import annotations

from itertools import repeat
from typing import Iterator, List, Optional, Union

from apache_beam import coders
from apache_beam.io.concat_source import ConcatSource
from apache_beam.io.filebasedsource import FileBasedSource
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.transforms.display import DisplayDataItem

from ..compression import seeks_by_members
from ..errors import CorruptRecordError
from . import _blockgzip, _coders, _fs, _paths, _range_read, _sidecars
from ._corrupt import CorruptRecord

#: A pattern's data is split into at least this many ranges, while they stay >= MIN_SPLIT_BYTES.
#: Runners deal the initial ranges to their workers in turn (the DirectRunner's
#: multi_processing mode round-robin), and Beam's rule (`Read.get_desired_chunk_size`, about
#: sqrt(size) * 1000 bytes a range) cuts a 44 MB file into 7 ranges: 4/7 of the work for one
#: of 2 workers. 16 ranges keep any worker count up to 4 within 1/16 of an even share.
MIN_SPLITS = 16
MIN_SPLIT_BYTES = 1 << 20


class _TFRecordSource(FileBasedSource):
    """A FileBasedSource of TFRecord payloads (decoded by `coder`); see the module docstring.

    Beam's `_TFRecordSource(file_pattern, coder, compression_type, validate)` parameters in
    Beam's order; ours are keyword-only.
    """

    def __init__(
        self,
        file_pattern,
        coder: Optional[coders.Coder] = None,
        compression_type: _paths.Compression = CompressionTypes.AUTO,
        validate: bool = True,
        *,
        min_bundle_size: int = 0,
        use_index: bool = True,
        verify: bool = True,
        skip_corrupt: bool = False,
        with_filename: bool = False,
        batched: bool = False,
        runs: bool = False,
    ) -> None:
        self._coder = _coders.check_coder(coder)
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
        self._runs = runs

    def default_output_coder(self):
        if self._skip_corrupt:
            return coders.PickleCoder()  # records and CorruptRecords
        lists = self._batched or self._runs
        return _coders.read_output(self._coder, with_filename=self._with_filename, batched=lists)[0]

    def display_data(self):
        data = super().display_data()
        data.update(
            coder=DisplayDataItem(str(self._coder), label="Coder"),
            use_index=DisplayDataItem(self._use_index, label="Split by .tfindex files"),
            verify=DisplayDataItem(self._verify, label="Check CRCs"),
            skip_corrupt=DisplayDataItem(self._skip_corrupt, label="Skip corrupt records"),
            with_filename=DisplayDataItem(self._with_filename, label="With file names"),
            batched=DisplayDataItem(self._batched, label="Lists of records"),
        )
        return data

    def _get_concat_source(self) -> ConcatSource:
        """Beam's per-file sources, less our `.tfindex` sidecars when a glob matched them."""
        if self._concat_source is None:
            pattern = self._pattern.get()
            _fs.check_no_commit_pending(pattern)  # a half-committed output: neither old nor new
            concat = super()._get_concat_source()
            kept = _sidecars.without_indexes(pattern, concat.sources, lambda s: s._file_name)
            self._concat_source = concat if len(kept) == len(concat.sources) else ConcatSource(kept)
            if self._use_index:  # block-gzip files split at their gzip members
                _blockgzip.mark_splittable(self._concat_source, self._compression_type)
        return self._concat_source

    def split(self, desired_bundle_size=None, start_position=None, stop_position=None):
        """Beam's initial splits, with ranges small enough to make at least MIN_SPLITS of them
        (none below MIN_SPLIT_BYTES)."""
        if desired_bundle_size is not None:
            even = max(MIN_SPLIT_BYTES, self.estimate_size() // MIN_SPLITS)
            desired_bundle_size = min(desired_bundle_size, even)
        return super().split(desired_bundle_size, start_position, stop_position)

    # -- reading -----------------------------------------------------------------------------
    def read_records(self, file_name: str, range_tracker) -> Iterator[Union[bytes, list, tuple, CorruptRecord]]:
        """The records of `file_name` in the tracker's range, decoded, as Beam wants them: each
        record, (file name, record), a list of records or (file name, list); dead letters as they are."""
        decode = _coders.decoder(self._coder)
        name = file_name if self._with_filename else None
        lists = self._batched or self._runs
        try:
            for item in self._read_file(file_name, range_tracker):
                if not isinstance(item, list):  # a dead letter
                    yield item
                    continue
                if decode is not None:
                    item = list(map(decode, item))
                if lists:
                    yield item if name is None else (name, item)
                elif name is None:
                    yield from item
                else:
                    yield from zip(repeat(name), item)
        except CorruptRecordError as err:
            raise _sidecars.explain_index_read_as_data(err, file_name) from None

    def _read_file(self, file_name: str, range_tracker) -> Iterator[Union[List[bytes], CorruptRecord]]:
        """Lists of claimed payloads (and dead letters) of `file_name` in the tracker's range."""
        compression = _paths.for_file(file_name, self._compression_type)
        table = _blockgzip.member_table(file_name) if seeks_by_members(compression) and self._use_index else None
        if table is not None:
            yield from _blockgzip.read_members(self, file_name, range_tracker, table)
            return
        if compression is not None:
            _blockgzip.check_whole_range(file_name, range_tracker)
        options = _range_read.Options(self._verify, self._skip_corrupt, self._batched, self._use_index)
        yield from _range_read.read_range(file_name, compression, range_tracker, options)

    def _report(self, file_name: str, offset: int, reason: str) -> CorruptRecord:
        """A dead letter for damage at `offset` (counted), for the block-gzip reader."""
        return _range_read.report(file_name, offset, reason)


def _create_source(file_pattern: str, **kwargs) -> _TFRecordSource:
    """A source for one file or pattern of ReadAllFromTFRecord (no existence check: globs may be empty)."""
    return _TFRecordSource(file_pattern, validate=False, **kwargs)
