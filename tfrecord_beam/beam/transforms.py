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
from itertools import repeat
from typing import Any, List, Optional

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.filebasedsink import DEFAULT_SHARD_NAME_TEMPLATE, DEFAULT_WINDOW_SHARD_NAME_TEMPLATE
from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.iobase import Read
from apache_beam.utils.windowed_value import WindowedValue

from .. import example
from . import _blockgzip, _codec, _coders, _fs, _metrics, _paths, _sidecars
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


class _Records(beam.DoFn):
    """The source's claimed runs (lists of records, or (file, list) pairs) -> single records
    (or (file, record) pairs); dead letters to their own output. `process` returns the run
    itself (no generator to resume per record)."""

    def __init__(self, with_filename: bool) -> None:
        self._with_filename = with_filename

    def process(self, element):
        if isinstance(element, CorruptRecord):
            return [beam.pvalue.TaggedOutput(CORRUPT_TAG, element)]
        if self._with_filename:
            name, run = element
            return zip(repeat(name), run)
        return element


def _split_dead_letters(pcoll, skip_corrupt: bool, main: str, hint=None, dofn=None):
    """`pcoll` through `dofn` (default: dead letters routed off), typed `hint`; a
    `(main, corrupt)` result with `skip_corrupt`."""
    if dofn is None:
        if not skip_corrupt:
            return pcoll
        dofn = _RouteCorrupt()
    step = beam.ParDo(dofn)
    if hint is not None:
        step = step.with_output_types(hint)
    if skip_corrupt:
        step = step.with_outputs(CORRUPT_TAG, main=main)
    return pcoll | ("RouteCorrupt" if type(dofn) is _RouteCorrupt else "Records") >> step


class ReadFromTFRecord(beam.PTransform):
    """Read the records of the TFRecord files matching `file_pattern`, decoded by `coder`.

    A drop-in for `apache_beam.io.ReadFromTFRecord`: Beam's parameters in Beam's order with
    Beam's defaults and meaning; ours are keyword-only. Beyond Beam it splits inside files:
    uncompressed files at record boundaries, exactly through the `.tfindex` beside a file
    when there is one, otherwise by byte ranges with a resync to the next valid record.
    GZIP / ZLIB files are read whole, one worker per file (Beam reads every file whole).
    `.tfindex` files a glob matches (e.g. `prefix-*` after a WriteToTFRecord) are skipped,
    with a debug log line; an index named exactly and read as data fails saying it is one.

    Args:
        file_pattern: a file, glob, or URI glob (anything Beam's FileSystems match).
        coder: decodes each record's payload (default `BytesCoder`: the payload bytes).
        compression_type: `CompressionTypes.AUTO` (by suffix: .gz, .deflate, .zst), or
            UNCOMPRESSED / GZIP / DEFLATE / ZSTD; also None, "auto" and the codec names of
            `tfrecord_beam.compression` ("gzip", "zlib", "zstd").
        validate: fail at construction when nothing matches.
        with_filename: (ours) emit `(file name, record)` pairs instead of records, the file
            name as Beam's FileSystems matched it (as Beam's ReadAllFromTFRecord does).
        use_index: (ours) split by the `.tfindex` beside each file when present (a stale index
            raises IndexMismatchError; pass False to ignore indexes).
        verify: (ours) check both CRCs of every record (default True; Beam checks them too).
        skip_corrupt: (ours) instead of failing, count bad records (counter
            `tfrecord_beam/corrupt_records`) and emit CorruptRecord(file, offset, reason) on
            the `corrupt` output; the result is then `(records, corrupt)` accessed as
            `result.records` / `result.corrupt`.
        min_bundle_size: (ours) smallest byte range an initial split may produce.

    Output type: the coder's type (`bytes` by default), `Tuple[str, T]` with file names.
    Counters: `tfrecord_beam/records_read`, `bytes_read` (payload bytes), `corrupt_records`.
    """

    _BATCHED = False

    def __init__(
        self,
        file_pattern: str,
        coder: coders.Coder = coders.BytesCoder(),  # noqa: B008 - Beam's own signature and default
        compression_type: _paths.Compression = CompressionTypes.AUTO,
        validate: bool = True,
        *,
        with_filename: bool = False,
        use_index: bool = True,
        verify: bool = True,
        skip_corrupt: bool = False,
        min_bundle_size: int = 0,
    ) -> None:
        super().__init__()
        self._skip_corrupt = skip_corrupt
        self._with_filename = with_filename
        self._source = _TFRecordSource(
            file_pattern,
            coder,
            compression_type,
            validate,
            min_bundle_size=min_bundle_size,
            use_index=use_index,
            verify=verify,
            skip_corrupt=skip_corrupt,
            with_filename=with_filename,
            batched=self._BATCHED,
            runs=not self._BATCHED,
        )
        self._hint = _coders.read_output(self._source._coder, with_filename=with_filename, batched=self._BATCHED)[1]

    def expand(self, pvalue):
        read = pvalue.pipeline | "Read" >> Read(self._source)
        if self._BATCHED and not self._skip_corrupt:
            return _typed(read, self._hint)
        explode = None if self._BATCHED else _Records(self._with_filename)
        return _split_dead_letters(read, self._skip_corrupt, RECORDS_TAG, self._hint, explode)

    def display_data(self):
        return {"source_dd": self._source}


class ReadFromTFRecordBatched(ReadFromTFRecord):
    """ReadFromTFRecord that emits lists of records (about 1 MiB of records each) instead of
    single records: same parameters, splitting, counters and dead letters.

    Beam spends a few microseconds on every element; for small records that dominates, so
    copy, count or filter whole batches when per-record elements are not needed.
    WriteToTFRecord accepts these lists directly (`ReadFromTFRecordBatched(...) |
    WriteToTFRecord(...)` copies records without per-record elements); `beam.FlatMap(lambda
    b: b)` turns them back into single records. Output type `List[T]`.
    """

    _BATCHED = True


class _MatchDataFiles(beam.DoFn):
    """File patterns -> the FileMetadata of the data files they match, less the `.tfindex`
    sidecars a glob picks up. FileMetadata (e.g. from `fileio.MatchFiles`) pass through,
    except those of `.tfindex` files: they come from a match too."""

    def process(self, element):
        if isinstance(element, FileMetadata):
            yield from _sidecars.without_indexes(None, [element], lambda m: m.path)
        else:
            _fs.check_no_commit_pending(element)  # a half-committed output: neither old nor new
            yield from _sidecars.without_indexes(element, _fs.match(element), lambda m: m.path)


class ReadAllFromTFRecord(beam.PTransform):
    """Read a PCollection of file patterns (str, or FileMetadata); each file split as
    ReadFromTFRecord does. A drop-in for `apache_beam.io.ReadAllFromTFRecord`: Beam's
    parameters in Beam's order; ours keyword-only.

    Args:
        coder: decodes each record's payload (default `BytesCoder`).
        compression_type: as for ReadFromTFRecord (default `CompressionTypes.AUTO`).
        with_filename: emit `(file name, record)` pairs instead of records.
        use_index, verify, skip_corrupt, min_bundle_size: (ours) as for ReadFromTFRecord.
        desired_bundle_size: (ours) bytes per split range of an uncompressed file.
        batched: (ours) emit lists of records, as ReadFromTFRecordBatched.

    Patterns matching nothing are not an error; `.tfindex` files a glob matches are skipped.
    """

    def __init__(
        self,
        coder: coders.Coder = coders.BytesCoder(),  # noqa: B008 - Beam's own signature and default
        compression_type: _paths.Compression = CompressionTypes.AUTO,
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
        coder = _coders.check_coder(coder)
        beam_compression = _paths.to_beam(compression_type)
        self._hint = _coders.read_output(coder, with_filename=with_filename, batched=batched)[1]
        self._explode = None if batched else _Records(with_filename)
        self._read_all = _blockgzip.ReadAllFiles(  # Beam's, splitting block-gzip files too
            splittable=True,
            compression_type=beam_compression,
            desired_bundle_size=desired_bundle_size,
            min_bundle_size=min_bundle_size,
            source_from_file=partial(
                _create_source,
                coder=coder,
                compression_type=beam_compression,
                use_index=use_index,
                verify=verify,
                skip_corrupt=skip_corrupt,
                with_filename=with_filename,
                batched=batched,
                runs=not batched,
            ),
            with_filename=False,  # the source adds file names itself (dead letters carry their own)
            use_index=use_index,
        )

    def expand(self, patterns):
        files = patterns | "MatchDataFiles" >> beam.ParDo(_MatchDataFiles()).with_output_types(FileMetadata)
        read = files | "ReadAllFiles" >> self._read_all
        if self._explode is None and not self._skip_corrupt:
            return _typed(read, self._hint)
        return _split_dead_letters(read, self._skip_corrupt, RECORDS_TAG, self._hint, self._explode)


def _typed(pcoll, hint):
    """Declare the element type of a composite's output (its coder follows from it)."""
    pcoll.element_type = hint
    return pcoll


class WriteToTFRecord(beam.PTransform):
    """Write a PCollection as TFRecord shards, each record `coder.encode(element)`, each
    shard with its `.tfindex`.

    A drop-in for `apache_beam.io.WriteToTFRecord`: Beam's parameters in Beam's order with
    Beam's defaults and meaning; ours are keyword-only. One default differs from Beam's by
    adding something: `write_index=True` writes a `.tfindex` beside every shard (pass
    `write_index=False` for exactly Beam's files).

    With the default `BytesCoder` an element may also be a list of payloads (as
    ReadFromTFRecordBatched emits), written in order into one shard.

    Output names follow Beam's template: `file_path_prefix + shard_name_template +
    file_name_suffix`, by default `-SSSSS-of-NNNNN` for bounded input (`out-00000-of-00004`)
    and `-W-SSSSS-of-NNNNN` (the window in the name) for unbounded input, as Beam's. Each
    shard's index is `tfrecord_beam.index.default_index_path(shard)` (`out-00000-of-00004.tfindex`;
    `x.tfrecord` -> `x.tfindex`). Shards appear only when the write (of a window) finalizes;
    retried bundles leave no duplicates.

    Unbounded input is written as Beam's FileBasedSink writes it: per window (each window's
    shards finalized when its pane fires), in fixed windows of `triggering_frequency`
    seconds when that is set (it replaces the input's windowing), and a global-window
    unbounded input needs `triggering_frequency` (ValueError without it, as in Beam).

    Args:
        file_path_prefix: output path prefix (local or any Beam FileSystems URI).
        coder: encodes each element to its payload (default `BytesCoder`: bytes as they are).
        file_name_suffix: appended to every shard name (default '', as Beam); ".gz" or
            ".deflate" at its end writes GZIP / ZLIB under `CompressionTypes.AUTO`.
        num_shards: exact number of shards, or 0 to let the runner choose (one per bundle;
            for unbounded input one per window).
        shard_name_template: Beam's template ('' writes a single file named by the prefix
            and suffix, forcing one shard).
        compression_type: `CompressionTypes.AUTO` (by the name's end), or UNCOMPRESSED /
            GZIP / DEFLATE / ZSTD; also None, "auto" and the codec names ("gzip", "zlib", "zstd").
        triggering_frequency: seconds per window for unbounded input (see above).
        write_index: (ours) write the `.tfindex` of every shard (offsets in the uncompressed
            stream). Default True, unlike Beam, which writes no index.
        max_records_per_shard: (ours) start a new shard after this many elements (num_shards=0).

    Names that read back as another compression than is written are refused at
    construction (e.g. suffix ".tfrecord.zlib": Beam's AUTO writes it uncompressed).
    Returns the PCollection of final shard names. Counters: `tfrecord_beam/records_written`,
    `bytes_written` (payload bytes).
    """

    def __init__(
        self,
        file_path_prefix: str,
        coder: coders.Coder = coders.BytesCoder(),  # noqa: B008 - Beam's own signature and default
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: Optional[str] = None,
        compression_type: _paths.Compression = CompressionTypes.AUTO,
        triggering_frequency: Optional[int] = None,
        *,
        write_index: bool = True,
        max_records_per_shard: Optional[int] = None,
    ) -> None:
        super().__init__()
        self._sink = _TFRecordSink(
            file_path_prefix,
            coder,
            file_name_suffix,
            num_shards,
            shard_name_template,
            compression_type,
            triggering_frequency,
            write_index=write_index,
            max_records_per_shard=max_records_per_shard,
        )

    def expand(self, pcoll):
        sink = self._sink
        if not pcoll.is_bounded and sink.shard_name_template == DEFAULT_SHARD_NAME_TEMPLATE:
            sink = sink.with_template(DEFAULT_WINDOW_SHARD_NAME_TEMPLATE)  # as Beam's WriteToTFRecord
        return pcoll | "Write" >> WriteShards(sink)

    def display_data(self):
        return {"sink_dd": self._sink}


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

    def start_bundle(self) -> None:
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
