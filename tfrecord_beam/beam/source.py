"""Splittable TFRecord source: `_TFRecordSource(FileBasedSource)`, shaped like Beam's `_TextSource`.

All reading happens in `read_records(file_name, range_tracker)`, in `_range_read`: a record
belongs to the range that holds its header offset, and the reader calls
`range_tracker.try_claim(offset)` before each record, so initial splits and dynamic splits
(`split_at_fraction`) both work:

* uncompressed with a `.tfindex` beside the file: start at the first indexed record at or
  after the range start (exact, and record numbers are known for error messages); what is
  read is checked against the index, and a stale one raises IndexMismatchError;
* uncompressed without an index: start at the next true record boundary
  (`records.find_record_start`), and check at the end that the next range starts where this
  one's records continue (else SplitPointError: the file needs an index to be split);
* GZIP / ZLIB: not splittable (Beam gives such files one unsplittable range); read whole.

With `batched=True` it yields lists of payloads instead (one list per read chunk, about 1 MiB
of records, each record still claimed on its own), which saves Beam's per-element cost.

Corrupt data raises `CorruptRecordError` (file, offset, record) by default. With
`skip_corrupt=True` the source yields a `CorruptRecord(file, offset, reason)` in its place,
counts it, resynchronises past it and reads on; `ReadFromTFRecord` routes those to its
dead-letter output.
"""

from __future__ import annotations

from typing import Iterator, Union

from apache_beam import coders
from apache_beam.io.filebasedsource import FileBasedSource

from . import _paths, _range_read
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

    # -- reading -----------------------------------------------------------------------------
    def read_records(self, file_name: str, range_tracker) -> Iterator[Union[bytes, tuple, CorruptRecord]]:
        compression = _paths.for_file(file_name, self._compression_type)
        options = _range_read.Options(self._verify, self._skip_corrupt, self._with_filename, self._batched,
                                      self._use_index)
        yield from _range_read.read_range(file_name, compression, range_tracker, options)


def _create_source(file_pattern: str, **kwargs) -> _TFRecordSource:
    """A source for one file or pattern of ReadAllFromTFRecord (no existence check: globs may be empty)."""
    return _TFRecordSource(file_pattern, validate=False, **kwargs)

