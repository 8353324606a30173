"""The `tfrecord` package's API (loaders, TFRecordWriter) as thin functions over our modules.

Same names, parameters and return conventions; differences (all fixes) are listed in the
README's "Coming from `tfrecord`" section: CRCs are checked, missing features do not crash,
an index without a shard reads from the first record, every yielded record is its own
buffer, compressed files are inflated once per pass, and sharding without an index gives
each record to exactly one shard.

Each public loader turns its arguments into one `ReadOptions` (`ReadOptions.dropin`: None
compression means "from the file name") and hands that down; our additions to the package's
signatures (`verify`, `strict`, `seed`) are keyword-only.
"""

from __future__ import annotations

import struct
import typing

import numpy as np

from . import _engine, blockgzip, fs, iterator_utils
from . import compression as _compression
from . import example as _example
from . import index as _index
from ._read_options import ReadOptions, dropin_compression
from .compression import resolve as _resolve
from .errors import DecodeError, FeatureKindError
from .records import RecordChunk, RecordReader, RecordWriter

Description = _example.Description

_memoryview: typing.Callable[[bytes], memoryview] = memoryview  # (mypy cannot infer `map(memoryview, ...)`)

TYPENAME_MAPPING = {"byte": "bytes_list", "float": "float_list", "int": "int64_list"}


def process_feature(
    feature, typename: typing.Optional[str], typename_mapping: typing.Dict[str, str] = TYPENAME_MAPPING, key: str = "?"
) -> typing.Any:
    """The `tfrecord` package's helper: one protobuf `Feature` -> its decoded value (float32 /
    int64 array; bytes: the value itself when there is one, else a list).

    `typename` ("byte", "float", "int" or None) is checked against the feature's kind
    (FeatureKindError, a TypeError as in the package). A feature with no kind set decodes to
    an empty value of `typename` (the package raised IndexError).
    """
    kind = _example.feature_kind(feature)
    wanted = _example.normalize_kind(typename, key) if typename is not None else None
    if typename is not None and wanted is not None:
        field = _example.KIND_TO_FIELD[wanted]
        if typename_mapping.get(typename, field) != field:
            raise ValueError(f"typename_mapping maps {typename!r} to {typename_mapping[typename]!r}, not {field!r}")
    if kind is None:
        return _example.empty_value(wanted) if wanted else np.zeros(0, dtype=np.float32)
    if wanted is not None and kind != wanted:
        from .errors import FeatureKindError

        raise FeatureKindError(None, None, None, f"Incompatible type '{typename}' for `{key}` (should be '{kind}')")
    return _example.as_decoded(kind, getattr(feature, _example.KIND_TO_FIELD[kind]).value)


def extract_feature_dict(
    features, description: Description, typename_mapping: typing.Dict[str, str] = TYPENAME_MAPPING
) -> typing.Dict[str, typing.Any]:
    """The `tfrecord` package's helper: a `Features` message -> {name: value}, or a
    `FeatureLists` message -> {name: [value per step]}, for the names of `description` (a
    list, a {name: typename} dict, or None / empty for every feature). A described name the
    message lacks raises KeyError naming the names it has, as in the package."""
    from . import _proto

    if isinstance(features, _proto.FeatureLists):
        table = features.feature_list

        def value(key, typename):
            return [process_feature(f, typename, typename_mapping, key) for f in table[key].feature]
    elif isinstance(features, _proto.Features):
        table = features.feature

        def value(key, typename):
            return process_feature(table[key], typename, typename_mapping, key)
    else:
        raise TypeError(
            f"features should be an example_pb2.Features or example_pb2.FeatureLists, not {type(features).__name__}"
        )
    names = list(table.keys())
    if not description:
        description = dict.fromkeys(names)
    elif isinstance(description, (list, tuple)):
        description = dict.fromkeys(description)
    elif not isinstance(description, typing.Mapping):
        raise TypeError(f"description must be a list or dict of feature names, not {type(description).__name__}")
    out = {}
    for key, typename in description.items():
        if key not in table:
            raise KeyError(f"Key {key} doesn't exist (select from {names})!")
        out[key] = value(key, typename)
    return out


def _shard_chunks(
    data_path, index_path, shard, options: ReadOptions
) -> typing.Iterator[typing.Tuple[RecordChunk, typing.Optional[np.ndarray]]]:
    """The chunks holding this shard's records, each with the rows of it that belong to the shard.

    With an index, shard (i, k) is the contiguous record range n*i//k .. n*(i+1)//k (rows None:
    all of the chunk); without one, every k-th record starting at i.
    """
    compression, verify = options.compression, options.verify
    if shard is not None:
        shard_idx, shard_count = shard
        if not 0 <= shard_idx < shard_count:
            raise ValueError(f"shard {shard!r}: index must be in [0, count)")
    if index_path is not None and shard is not None:
        index = _index.load_index(index_path)
        kind = _resolve(data_path, compression)
        if kind is None:
            _index.check_index(index, fs.file_size(data_path), index_path, data_path)
        members = (
            blockgzip.checked_member_table(data_path, index_path, index)
            if _compression.seeks_by_members(kind)
            else None
        )
        first, last, start, end = _index.shard_range(index, shard_idx, shard_count)
        if first == last:
            return
        reader = RecordReader(
            data_path,
            compression,
            verify=verify,
            start_offset=start,
            end_offset=end,
            first_record_number=first,
            members=members or False,
        )
        for chunk in reader.chunks():
            yield chunk, None
        return
    for chunk in RecordReader(data_path, compression, verify=verify).chunks():
        if shard is None:
            yield chunk, None
        else:
            assert chunk.first_record_number is not None  # read from the file's start
            numbers = chunk.first_record_number + np.arange(len(chunk))
            yield chunk, np.flatnonzero(numbers % shard_count == shard_idx)


def _records(data_path, index_path, shard, options: ReadOptions) -> typing.Iterator[typing.Tuple[int, int, bytes]]:
    """(record number, offset, payload) for the records of this shard."""
    for chunk, rows in _shard_chunks(data_path, index_path, shard, options):
        yield from _chunk_records(chunk, rows)


def _chunk_records(
    chunk: RecordChunk, rows: typing.Optional[np.ndarray]
) -> typing.Iterator[typing.Tuple[int, int, bytes]]:
    assert chunk.first_record_number is not None  # `_shard_chunks` reads with record numbers
    payloads = chunk.payloads()
    offsets = chunk.record_offsets.tolist()
    for i in range(len(chunk)) if rows is None else rows.tolist():
        yield chunk.first_record_number + i, offsets[i], payloads[i]


def tfrecord_iterator(
    data_path: str,
    index_path: typing.Optional[str] = None,
    shard: typing.Optional[typing.Tuple[int, int]] = None,
    compression_type: typing.Optional[str] = None,
    *,
    verify: bool = True,
) -> typing.Iterator[memoryview]:
    """Yield each record's payload as a memoryview (of its own buffer: safe to keep).

    `shard=(i, k)` with an index reads records n*i//k .. n*(i+1)//k; without an index it
    yields every k-th record starting at i (exactly once across shards either way).
    `compression_type=None` means "from the file name" (`_read_options.dropin_compression`).
    """
    return _payloads(data_path, index_path, shard, ReadOptions.dropin(compression_type=compression_type, verify=verify))


def _payloads(data_path, index_path, shard, options: ReadOptions) -> typing.Iterator[memoryview]:
    for chunk, rows in _shard_chunks(data_path, index_path, shard, options):
        payloads = chunk.payloads()
        if rows is not None:
            payloads = [payloads[i] for i in rows.tolist()]
        yield from map(_memoryview, payloads)


def example_loader(
    data_path: str,
    index_path: typing.Optional[str],
    description: Description = None,
    shard: typing.Optional[typing.Tuple[int, int]] = None,
    compression_type: typing.Optional[str] = None,
    *,
    strict: bool = False,
) -> typing.Iterator[typing.Dict[str, typing.Any]]:
    """Yield each Example as {name: value} (see `tfrecord_beam.example`).

    When every described feature has a kind (and not `strict`), records are decoded a chunk at
    a time by the columnar decoder; otherwise one by one. Bad settings (an unknown kind or
    compression) raise here, before anything is read.
    """
    options = ReadOptions.dropin(description, None, compression_type, strict=strict)
    return _examples(data_path, index_path, shard, options)


def _examples(data_path, index_path, shard, options: ReadOptions) -> typing.Iterator[typing.Dict[str, typing.Any]]:
    description, strict = options.description, options.strict
    if options.all_kinds and not strict:
        from . import columnar

        for chunk, rows in _shard_chunks(data_path, index_path, shard, options):
            yield from columnar.decode_example_records(
                chunk, description, path=data_path, rows=None if rows is None else rows.tolist()
            )
        return
    for number, offset, payload in _records(data_path, index_path, shard, options):
        yield _example.decode_example(
            payload, description, strict=strict, path=data_path, offset=offset, record_number=number
        )


def sequence_loader(
    data_path: str,
    index_path: typing.Optional[str],
    context_description: Description = None,
    features_description: Description = None,
    shard: typing.Optional[typing.Tuple[int, int]] = None,
    compression_type: typing.Optional[str] = None,
    *,
    strict: bool = False,
) -> typing.Iterator[typing.Tuple[typing.Dict[str, typing.Any], typing.Dict[str, typing.List[typing.Any]]]]:
    """Yield each SequenceExample as (context, {name: list of per-step values}).

    When both descriptions give every kind (and not `strict`), records are decoded a chunk at
    a time by the columnar decoder; otherwise one by one.
    """
    options = ReadOptions.dropin(
        context_description, features_description, compression_type, strict=strict, sequence=True
    )
    return _sequences(data_path, index_path, shard, options)


def _sequences(
    data_path, index_path, shard, options: ReadOptions
) -> typing.Iterator[typing.Tuple[typing.Dict[str, typing.Any], typing.Dict[str, typing.List[typing.Any]]]]:
    context_description, features_description = options.description, options.sequence_description
    strict = options.strict

    def one_by_one(records):
        for number, offset, payload in records:
            yield _example.decode_sequence_example(
                payload,
                context_description,
                features_description,
                strict=strict,
                path=data_path,
                offset=offset,
                record_number=number,
            )

    if strict or not options.all_kinds:
        yield from one_by_one(_records(data_path, index_path, shard, options))
        return
    from . import columnar

    for chunk, rows in _shard_chunks(data_path, index_path, shard, options):
        try:
            context, lists = columnar.decode_sequence_examples(
                chunk, context_description, features_description, path=data_path
            )
        except (DecodeError, FeatureKindError):
            # a bad record in this chunk: decode it one by one, so that the records before it
            # come out and its error is the one the per-record decoder has always raised
            yield from one_by_one(_chunk_records(chunk, rows))
            continue
        yield from columnar.to_sequence_records(context, lists, None if rows is None else rows.tolist())


def _loader(data_path, index_path, shard, options: ReadOptions) -> typing.Iterator:
    """Examples or SequenceExamples, as `options.sequence` says."""
    if options.sequence:
        return _sequences(data_path, index_path, shard, options)
    return _examples(data_path, index_path, shard, options)


def tfrecord_loader(
    data_path: str,
    index_path: typing.Optional[str],
    description: Description = None,
    shard: typing.Optional[typing.Tuple[int, int]] = None,
    sequence_description: Description = None,
    compression_type: typing.Optional[str] = None,
    *,
    strict: bool = False,
) -> typing.Iterator:
    """Examples, or SequenceExamples when `sequence_description` is not None."""
    options = ReadOptions.dropin(description, sequence_description, compression_type, strict=strict)
    return _loader(data_path, index_path, shard, options)


def multi_tfrecord_loader(
    data_pattern: str,
    index_pattern: typing.Optional[str],
    splits: typing.Dict[str, float],
    description: Description = None,
    sequence_description: Description = None,
    compression_type: typing.Optional[str] = None,
    infinite: bool = True,
    shard: typing.Optional[typing.Tuple[int, int]] = None,
    *,
    seed: iterator_utils.Seed = None,
) -> typing.Iterator:
    """Mix the files `data_pattern.format(split)` in proportion to `splits` (seeded by `seed`)."""
    options = ReadOptions.dropin(description, sequence_description, compression_type)

    def factory(split):
        def make():
            index_path = index_pattern.format(split) if index_pattern is not None else None
            return _loader(data_pattern.format(split), index_path, shard, options)

        return make

    return iterator_utils.sample_iterators(
        [factory(s) for s in splits], list(splits.values()), infinite=infinite, seed=seed
    )


class TFRecordWriter:
    """The `tfrecord` package's writer: `write(datum, sequence_datum=None)` then `close()`.

    Writes atomically (the file appears on `close()`), optionally with an index
    (`index_path`), GZIP/ZLIB by `compression_type` or the file name. As with the package, a
    writer that is never closed keeps its data: it is committed when garbage-collected or at
    interpreter exit, with an `UnclosedWriterWarning` naming the file; nothing is committed
    when a `with` block exits on an exception or the program ends on an uncaught one.
    """

    def __init__(
        self,
        data_path: str,
        compression_type: typing.Optional[str] = None,
        index_path: typing.Union[None, bool, str] = None,
    ) -> None:
        self._writer = RecordWriter(
            data_path, dropin_compression(compression_type), index_path=index_path, commit_unclosed=True
        )

    def write(
        self, datum: typing.Dict[str, typing.Any], sequence_datum: typing.Optional[typing.Dict[str, typing.Any]] = None
    ) -> None:
        """Write an Example, or a SequenceExample (context `datum`) when `sequence_datum` is given."""
        writer = self._writer
        if sequence_datum is None:
            # the compiled encoder frames the record straight into the writer's buffer
            if _engine.append_example is None or not writer.append_record(_engine.append_example, datum):
                writer.write(_example.encode_example(datum))
        elif _engine.append_sequence_example is None or not writer.append_record(
            _engine.append_sequence_example, datum, sequence_datum
        ):
            writer.write(_example.encode_sequence_example(datum, sequence_datum))

    def close(self) -> None:
        """Finish the file (and its index) and move it into place."""
        self._writer.close()

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._writer.__exit__(exc_type, exc, tb)

    @staticmethod
    def masked_crc(data: bytes) -> bytes:
        """The masked CRC32C of `data`, as 4 little-endian bytes."""
        return struct.pack("<I", _engine.masked_crc32c(data))

    @staticmethod
    def serialize_tf_example(datum: typing.Dict[str, typing.Any]) -> bytes:
        """Serialize {name: (value, kind)} as an Example."""
        return _example.encode_example(datum)

    @staticmethod
    def serialize_tf_sequence_example(context_datum, features_datum) -> bytes:
        """Serialize a SequenceExample from context and feature-list dicts."""
        return _example.encode_sequence_example(context_datum, features_datum)
