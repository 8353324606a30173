"""Public Beam PTransforms: ReadFromTFRecord, ReadFromTFRecordBatched, ReadAllFromTFRecord,
WriteToTFRecord, DecodeExamples, EncodeExamples. Thin wrappers over `source.py`, `sink.py`,
`_write.py` and `_codec.py`.

Dead letters: with `skip_corrupt=True`, ReadFromTFRecord / ReadAllFromTFRecord /
DecodeExamples return a tuple-like result with two PCollections, `result.records` (or
`result.examples` for DecodeExamples) and `result.corrupt` of `CorruptRecord(file, offset,
reason)`; otherwise they return one PCollection and bad input fails the pipeline with an
error naming the file, offset and record.
"""

from __future__ import annotations

from functools import partial
from typing import Any, List, Optional

import apache_beam as beam
from apache_beam.io.iobase import Read
from apache_beam.utils.windowed_value import WindowedValue

from .. import example
from . import _blockgzip, _codec, _metrics, _paths
from ._corrupt import CORRUPT_TAG, CorruptRecord
from ._write import WriteShards
from .sink import _TFRecordSink
from .source import _create_source, _TFRecordSource

RECORDS_TAG = "records"
EXAMPLES_TAG = "examples"
DEFAULT_BATCH_SIZE = 1024


class _RouteCorrupt(beam.DoFn):
    """Sends CorruptRecord elements to the dead-letter output, the rest to the main one."""

    def process(self, element):
        if isinstance(element, CorruptRecord):
            yield beam.pvalue.TaggedOutput(CORRUPT_TAG, element)
        else:
            yield element


def _split_dead_letters(pcoll, skip_corrupt: bool, main: str):
    if not skip_corrupt:
        return pcoll
    return pcoll | "RouteCorrupt" >> beam.ParDo(_RouteCorrupt()).with_outputs(CORRUPT_TAG, main=main)


class ReadFromTFRecord(beam.PTransform):
    """Read the records (payload bytes) of the TFRecord files matching `file_pattern`.

    Splittable inside files: uncompressed files are split at record boundaries, exactly
    through the `.tfindex` beside a file when there is one, otherwise by byte ranges with a
    resync to the next valid record. GZIP / ZLIB files are read whole, one worker per file.

    Args:
        file_pattern: a file, glob, or URI glob (anything Beam's FileSystems match).
        compression_type: "auto" (by suffix: .gz, .deflate), None, "gzip", "zlib", or a Beam
            `CompressionTypes` value.
        validate: fail at construction when nothing matches.
        with_filename: emit (file name, payload) pairs instead of payloads.
        use_index: split by the `.tfindex` beside each file when present (a stale index
            raises IndexMismatchError; pass False to ignore indexes).
        verify: check both CRCs of every record (default True).
        skip_corrupt: instead of failing, count bad records (counter
            `tfrecord_beam/corrupt_records`) and emit CorruptRecord(file, offset, reason) on
            the `corrupt` output; the result is then `(records, corrupt)` accessed as
            `result.records` / `result.corrupt`.
        min_bundle_size: smallest byte range an initial split may produce.

    Counters: `tfrecord_beam/records_read`, `bytes_read` (payload bytes), `corrupt_records`.
    """

    def __init__(
        self,
        file_pattern: str,
        compression_type: _paths.Compression = "auto",
        validate: bool = True,
        with_filename: bool = False,
        *,
        use_index: bool = True,
        verify: bool = True,
        skip_corrupt: bool = False,
        min_bundle_size: int = 0,
    ) -> None:
        super().__init__()
        self._skip_corrupt = skip_corrupt
        self._source = _TFRecordSource(
            file_pattern, compression_type, validate, min_bundle_size=min_bundle_size,
            use_index=use_index, verify=verify, skip_corrupt=skip_corrupt, with_filename=with_filename,
            batched=self._BATCHED,
        )

    _BATCHED = False

    def expand(self, pbegin):
        records = pbegin | "Read" >> Read(self._source)
        return _split_dead_letters(records, self._skip_corrupt, RECORDS_TAG)


class ReadFromTFRecordBatched(ReadFromTFRecord):
    """ReadFromTFRecord that emits lists of payloads (about 1 MiB of records each) instead of
    single payloads: same splitting, options, counters and dead letters.

    Beam spends a few microseconds on every element; for small records that dominates, so
    copy, count or filter whole batches when per-record elements are not needed.
    WriteToTFRecord accepts these lists directly (`ReadFromTFRecordBatched(...) |
    WriteToTFRecord(...)` copies records without per-record elements); `beam.FlatMap(lambda
    b: b)` turns them back into single payloads.
    """

    _BATCHED = True


class ReadAllFromTFRecord(beam.PTransform):
    """Read a PCollection of file patterns (str); each file split as ReadFromTFRecord does.

    Same options as ReadFromTFRecord, plus `desired_bundle_size` (bytes per split range) and
    `batched` (emit lists of payloads, as ReadFromTFRecordBatched).
    Patterns matching nothing are not an error.
    """

    def __init__(
        self,
        compression_type: _paths.Compression = "auto",
        with_filename: bool = False,
        *,
        use_index: bool = True,
        verify: bool = True,
        skip_corrupt: bool = False,
        desired_bundle_size: int = 64 << 20,
        min_bundle_size: int = 0,
        batched: bool = False,
    ) -> None:
        super().__init__()
        self._skip_corrupt = skip_corrupt
        beam_compression = _paths.to_beam(compression_type)
        self._read_all = _blockgzip.ReadAllFiles(  # Beam's, splitting block-gzip files too
            splittable=True,
            compression_type=beam_compression,
            desired_bundle_size=desired_bundle_size,
            min_bundle_size=min_bundle_size,
            source_from_file=partial(
                _create_source, compression_type=beam_compression, use_index=use_index,
                verify=verify, skip_corrupt=skip_corrupt, with_filename=with_filename, batched=batched,
            ),
            with_filename=False,  # the source adds file names itself (dead letters carry their own)
            use_index=use_index,
        )

    def expand(self, patterns):
        records = patterns | "ReadAllFiles" >> self._read_all
        return _split_dead_letters(records, self._skip_corrupt, RECORDS_TAG)


class WriteToTFRecord(beam.PTransform):
    """Write a PCollection of bytes as TFRecord shards, each with its `.tfindex`.

    An element may also be a list of payloads (as ReadFromTFRecordBatched emits), written in
    order into one shard.

    Output names follow Beam's template: `file_path_prefix + shard_name_template +
    file_name_suffix` (default `-SSSSS-of-NNNNN`, e.g. `out-00000-of-00004.tfrecord`); each
    shard's index is `tfrecord_beam.index.default_index_path(shard)` (`out-00000-of-00004.tfindex`).
    Shards appear only when the write finalizes; retried bundles leave no duplicates.

    Args:
        file_path_prefix: output path prefix (local or any Beam FileSystems URI).
        file_name_suffix: appended to every shard name; ".tfrecord.gz" with "auto"
            compression writes GZIP.
        num_shards: exact number of shards, or 0 to let the runner choose (one per bundle).
        shard_name_template: Beam's template ("" writes a single file named by the prefix
            and suffix, forcing one shard).
        compression_type: "auto" (by suffix), None, "gzip", "zlib", or a Beam CompressionTypes.
        write_index: write the `.tfindex` of every shard (offsets in the uncompressed stream).
        max_records_per_shard: start a new shard after this many elements (with num_shards=0).

    Returns the PCollection of final shard names. Counters: `tfrecord_beam/records_written`,
    `bytes_written` (payload bytes).
    """

    def __init__(
        self,
        file_path_prefix: str,
        file_name_suffix: str = ".tfrecord",
        num_shards: int = 0,
        shard_name_template: Optional[str] = None,
        compression_type: _paths.Compression = "auto",
        write_index: bool = True,
        *,
        max_records_per_shard: Optional[int] = None,
    ) -> None:
        super().__init__()
        self._sink = _TFRecordSink(
            file_path_prefix, file_name_suffix, num_shards, shard_name_template,
            compression_type, write_index, max_records_per_shard,
        )

    def expand(self, pcoll):
        return pcoll | "Write" >> WriteShards(self._sink)


class _BatchDoFn(beam.DoFn):
    """Applies a batch function to up to `batch_size` elements at a time, keeping each
    element's window and timestamp; results may include CorruptRecords (dead letters)."""

    def __init__(self, fn, batch_size: int, counter_name: str) -> None:
        self._fn = fn
        self._batch_size = max(1, int(batch_size))
        self._counter_name = counter_name

    def setup(self):
        self._done = _metrics.counter(self._counter_name)
        self._bad = _metrics.counter(_metrics.UNDECODABLE_RECORDS)

    def start_bundle(self):
        self._elements: List[Any] = []
        self._where: List[tuple] = []

    def process(self, element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        self._elements.append(element)
        self._where.append((timestamp, window))
        if len(self._elements) >= self._batch_size:
            yield from self._flush()

    def finish_bundle(self):
        yield from self._flush()

    def _flush(self):
        if not self._elements:
            return
        results = self._fn(self._elements)
        where = self._where
        self._elements, self._where = [], []
        bad = 0
        for result, (timestamp, window) in zip(results, where):
            if isinstance(result, CorruptRecord):
                bad += 1
                yield beam.pvalue.TaggedOutput(CORRUPT_TAG, WindowedValue(result, timestamp, [window]))
            else:
                yield WindowedValue(result, timestamp, [window])
        self._done.inc(len(results) - bad)
        if bad:
            self._bad.inc(bad)


class DecodeExamples(beam.PTransform):
    """Decode serialized Examples (bytes) into {name: value} dicts, in batches.

    Values follow `tfrecord_beam.example.decode_example`: float -> float32 array, int -> int64
    array, one bytes value -> bytes, zero or several -> object array. Give
    `sequence_description` (or `sequence=True`) to decode SequenceExamples into
    (context dict, {name: [per-step values]}) pairs; `description` is then the context's.

    Args:
        description: feature names (list) or {name: "byte"|"float"|"int"}; None = all.
        sequence_description: feature-list names or {name: kind}; implies `sequence=True`.
        sequence: decode SequenceExamples even with no sequence_description (all lists).
        strict: a described feature that is missing raises instead of decoding to empty.
        batch_size: records decoded per call of the batch decoder.
        skip_corrupt: bad payloads go to `result.corrupt` as CorruptRecord(None, None, reason)
            instead of failing; good ones to `result.examples`.
    """

    def __init__(
        self,
        description: example.Description = None,
        sequence_description: example.Description = None,
        *,
        sequence: Optional[bool] = None,
        strict: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        skip_corrupt: bool = False,
    ) -> None:
        super().__init__()
        is_sequence = sequence_description is not None if sequence is None else bool(sequence)
        self._spec = _codec.DecodeSpec(
            example.normalize_description(description),
            example.normalize_description(sequence_description),
            is_sequence,
            strict,
        )
        self._batch_size = batch_size
        self._skip_corrupt = skip_corrupt

    def expand(self, pcoll):
        fn = partial(_codec.decode_batch, spec=self._spec, skip_corrupt=self._skip_corrupt)
        dofn = beam.ParDo(_BatchDoFn(fn, self._batch_size, _metrics.EXAMPLES_DECODED))
        if self._skip_corrupt:
            return pcoll | "Decode" >> dofn.with_outputs(CORRUPT_TAG, main=EXAMPLES_TAG)
        return pcoll | "Decode" >> dofn


class EncodeExamples(beam.PTransform):
    """Serialize dicts into Example bytes (or (context, feature_lists) pairs into
    SequenceExamples with `sequence=True`), in batches, ready for WriteToTFRecord.

    Values as `tfrecord_beam.example.encode_example` takes them: a bare value (kind inferred
    from its numpy dtype / Python type) or a `(value, "byte"|"float"|"int")` pair.
    """

    def __init__(self, *, sequence: bool = False, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        super().__init__()
        self._sequence = sequence
        self._batch_size = batch_size

    def expand(self, pcoll):
        fn = partial(_codec.encode_batch, sequence=self._sequence)
        return pcoll | "Encode" >> beam.ParDo(_BatchDoFn(fn, self._batch_size, _metrics.EXAMPLES_ENCODED))
