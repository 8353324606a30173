"""Arrow schema / RecordBatch <-> tf.train.Example (and SequenceExample), vectorised per batch.

Type mapping (Arrow -> Example feature):

| Arrow type                                              | Feature                               |
|---------------------------------------------------------|---------------------------------------|
| int8..int64, uint8..uint64, bool                         | int64_list (uint64 > int64 max: error) |
| float16, float32                                         | float_list                            |
| float64                                                  | float_list, rounded to float32        |
| string, large_string, string_view, dictionary<string>    | bytes_list (UTF-8)                    |
| binary, large_binary, binary_view, fixed_size_binary     | bytes_list                            |
| timestamp, duration, time32/64, date64                   | int64_list, in the type's own unit    |
| date32                                                   | int64_list, days since 1970-01-01     |
| list / large_list / fixed_size_list of the above         | the same list, several values         |
| list<list<...>> named in `sequence_columns`              | SequenceExample feature_list          |
| struct                                                   | error, or `a.b` features with `flatten_structs` |
| decimal                                                  | error, or float / UTF-8 text with `decimal_as` |
| map, union, list<list> not in `sequence_columns`         | error naming the column               |

A null cell leaves the feature out of that record; an empty list writes the feature with no
values; a null inside a list is an error naming column and row. Dictionary columns are decoded.

Encoding never loops over cells in Python: each column becomes numpy `values` + `row_splits`
straight from the Arrow buffers (a `columnar.Column`, or a `columnar.SequenceColumn` for a
sequence column), and `serialize_columns` turns a whole batch into payloads (byte-identical to
`example.encode_example`) through the engine's columns -> Examples encoder. The reverse,
`examples_to_record_batch`, takes a description or a schema (a flat schema decodes through
the compiled `columnar.decode_examples` when it is built), or infers one with
`inferred_type` (a feature with exactly one value in every record where it appears becomes a
scalar column, otherwise a list column), the rule `inspection.infer_arrow_schema` uses too.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

import numpy as np
import pyarrow as pa

from . import _engine
from ._engine._common import BYTES, FLOAT, FRAME_OVERHEAD, INT, MISSING, PRESENT
from ._engine._encode import split_payloads
from .columnar import Column, SequenceColumn, _engine_columns, _engine_list_columns, decode_examples, encoded_lengths
from .example import Description, feature_values, normalize_description, parse_example, parse_sequence_example

__all__ = [
    "ArrowConversionError",
    "DECIMAL_MODES",
    "ExampleEncoder",
    "column_from_arrow",
    "examples_to_record_batch",
    "inferred_type",
    "record_batch_to_examples",
    "record_misfit",
    "serialize_columns",
]

_INT64_MAX = (1 << 63) - 1
DECIMAL_MODES = (None, "float", "bytes")


class ArrowConversionError(ValueError):
    """An Arrow column or value that has no Example mapping (names the column, and the row)."""


# ---------------------------------------------------------------------------------------------
# Schema checks


def _is_list(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or (hasattr(pa.types, "is_list_view") and (pa.types.is_list_view(t) or pa.types.is_large_list_view(t)))
    )


def _leaf_kind(name: str, t: pa.DataType, decimal_as: Optional[str]) -> str:
    """The feature kind of a non-list Arrow type, or ArrowConversionError naming the column."""
    if pa.types.is_dictionary(t):
        return _leaf_kind(name, t.value_type, decimal_as)
    if pa.types.is_interval(t):
        raise ArrowConversionError(f"column {name!r}: interval type {t} has no Example mapping")
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
        return INT
    if pa.types.is_floating(t):
        return FLOAT
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or _is_view(t)
    ):
        return BYTES
    if pa.types.is_decimal(t):
        return _decimal_kind(name, t, decimal_as)
    if pa.types.is_null(t):
        return INT  # every cell is null: the feature is never written
    raise ArrowConversionError(_unmapped(name, t))


def _decimal_kind(name: str, t: pa.DataType, decimal_as: Optional[str]) -> str:
    """A decimal column's kind: what `decimal_as` asks for (no exact mapping exists)."""
    if decimal_as == "float":
        return FLOAT
    if decimal_as == "bytes":
        return BYTES
    raise ArrowConversionError(
        f"column {name!r}: decimal type {t} has no exact Example mapping; choose decimal_as='float' "
        "(rounded to float32) or decimal_as='bytes' (its text, e.g. b'12.34')"
    )


def _unmapped(name: str, t: pa.DataType) -> str:
    """Why a column of type `t` (no leaf type) cannot be written, and what would do."""
    if pa.types.is_struct(t):
        return f"column {name!r}: struct columns need flatten_structs=True (giving 'a.b' names)"
    if pa.types.is_map(t):
        return f"column {name!r}: map type {t} has no Example mapping"
    if _is_list(t):
        return f"column {name!r}: nested list type {t} is only allowed as a sequence column (sequence_columns)"
    return f"column {name!r}: Arrow type {t} has no Example mapping"


def _is_view(t: pa.DataType) -> bool:
    return any(getattr(pa.types, f, lambda _t: False)(t) for f in ("is_string_view", "is_binary_view"))


def _plan_field(name: str, t: pa.DataType, sequence: bool, decimal_as: Optional[str]) -> Tuple[str, int]:
    """(kind, list depth) of a column: depth 0 scalar, 1 list, 2 sequence (list<list>)."""
    depth = 0
    while _is_list(t) and depth < 2:
        t = t.value_type
        depth += 1
    if sequence and depth != 2:
        raise ArrowConversionError(
            f"column {name!r}: a sequence column must be list<list<...>>, not {t if depth == 0 else 'a list of ' + str(t)}"
        )
    if not sequence and depth == 2:
        raise ArrowConversionError(
            f"column {name!r}: list<list<...>> columns must be named in sequence_columns (they become "
            "SequenceExample feature lists)"
        )
    if depth and pa.types.is_struct(t):  # flatten_structs or not: only top-level structs flatten
        raise ArrowConversionError(
            f"column {name!r}: a list of structs ({'list<' * depth}struct>) has no Example mapping; "
            "flatten_structs flattens top-level struct columns only. Leave the column out, or turn it "
            "into one list column per field before converting"
        )
    return _leaf_kind(name, t, decimal_as), depth


# ---------------------------------------------------------------------------------------------
# Arrow -> columns


def _first_null_row(valid_values: np.ndarray, splits: np.ndarray) -> int:
    bad = int(np.flatnonzero(~valid_values)[0])
    return int(np.searchsorted(splits, bad, side="right") - 1)


def _leaf_values(name: str, arr: pa.Array, kind: str, row_of, decimal_as: Optional[str]):
    """(values, value_offsets) of a null-free leaf array as numpy (bytes: uint8 buffer + offsets)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if kind == BYTES:
        arr = arr.cast(pa.string() if pa.types.is_decimal(t) else arr.type).cast(pa.large_binary())
        _, offsets_buf, data_buf = arr.buffers()
        offsets = (
            np.frombuffer(offsets_buf, dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
            if offsets_buf
            else np.zeros(1, np.int64)
        )
        data = (
            np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and data_buf.size else np.zeros(0, np.uint8)
        )
        return data, offsets
    if kind == FLOAT:
        if pa.types.is_decimal(t):
            arr = arr.cast(pa.float64())
        # a float64 beyond float32's range rounds to +-inf, as TensorFlow's float_list stores it;
        # numpy's overflow warning would name this line, not the value, and is not a failure
        with np.errstate(over="ignore"):
            return arr.to_numpy(zero_copy_only=False).astype(np.float32), None
    if pa.types.is_null(t):
        return np.zeros(0, dtype=np.int64), None
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        arr = arr.cast(pa.int32())
    elif pa.types.is_temporal(t):
        arr = arr.cast(pa.int64())
    values = arr.to_numpy(zero_copy_only=False)
    # against np.uint64: numpy 1.x compares uint64 with a Python int as float64 (2**63 == 2**63 - 1)
    if values.dtype == np.uint64 and len(values) and values.max() > np.uint64(_INT64_MAX):
        at = int(np.flatnonzero(values > np.uint64(_INT64_MAX))[0])
        raise ArrowConversionError(
            f"column {name!r}, row {row_of(at)}: value {int(values[at])} is above the int64 maximum"
        )
    return values.astype(np.int64), None


def _splits_from_lengths(lengths: np.ndarray) -> np.ndarray:
    splits = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=splits[1:])
    return splits


def _valid_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _list_level(name: str, arr: pa.Array, row_of, what: str) -> Tuple[pa.Array, np.ndarray]:
    """(flattened values, splits) of one list level; nulls among the values are errors."""
    import pyarrow.compute as pc  # here, not at import: 0.12 s that schema inference never needs

    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = arr.flatten()
    splits = _splits_from_lengths(lengths)
    if values.null_count:
        at = _first_null_row(_valid_mask(values), splits)
        raise ArrowConversionError(
            f"column {name!r}, row {row_of(at)}: null {what} (nulls are only allowed as whole cells)"
        )
    return values, splits


def column_from_arrow(
    name: str,
    arr: pa.Array,
    *,
    sequence: bool = False,
    decimal_as: Optional[str] = None,
    first_row: int = 0,
) -> Union[Column, SequenceColumn]:
    """One Arrow column (no structs) as a `Column` (a `SequenceColumn` when `sequence`); null
    cells get status MISSING. `first_row` numbers rows in error messages."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    kind, depth = _plan_field(name, arr.type, sequence, decimal_as)
    present = _valid_mask(arr)
    step_splits = None
    if depth == 0:
        if _is_view(arr.type):  # filter kernels lack view types
            arr = arr.cast(pa.large_binary())
        values_arr = arr.drop_null() if arr.null_count else arr
        splits = _splits_from_lengths(present.astype(np.int64))
        leaf_row = lambda i: first_row + int(np.flatnonzero(present)[i])  # noqa: E731
    else:
        what = "step inside a sequence" if depth == 2 else "value inside a list"
        values_arr, splits = _list_level(name, arr, lambda r: first_row + r, what)
        leaf_row = lambda i: first_row + int(np.searchsorted(splits, i, side="right") - 1)  # noqa: E731
        if depth == 2:
            step_splits = splits
            values_arr, splits = _list_level(
                name,
                values_arr,
                lambda s: first_row + int(np.searchsorted(step_splits, s, side="right") - 1),
                "value inside a list",
            )
            outer = step_splits

            def leaf_row(i: int) -> int:  # value -> its step -> its record
                step = np.searchsorted(splits, i, side="right") - 1
                return first_row + int(np.searchsorted(outer, step, side="right") - 1)

    values, offsets = _leaf_values(name, values_arr, kind, leaf_row, decimal_as)
    status = None if present.all() else np.where(present, PRESENT, MISSING).astype(np.uint8)
    if step_splits is not None:  # records -> steps, steps -> values
        return SequenceColumn(name, kind, values, step_splits, splits, offsets, status)
    return Column(name, kind, values, splits, offsets, status)


def _flatten_struct_columns(names: List[str], arrays: List[pa.Array], flatten_structs: bool):
    """Struct columns expanded to `parent.child` columns (parent nulls become child nulls)."""
    out_names, out_arrays = [], []
    for name, arr in zip(names, arrays):
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_struct(arr.type) and flatten_structs:
            children = arr.flatten()
            sub_names = [f"{name}.{arr.type.field(i).name}" for i in range(arr.type.num_fields)]
            n2, a2 = _flatten_struct_columns(sub_names, children, flatten_structs)
            out_names += n2
            out_arrays += a2
        else:
            out_names.append(name)
            out_arrays.append(arr)
    return out_names, out_arrays


def _flatten_schema_names(schema: pa.Schema, flatten_structs: bool) -> List[Tuple[str, pa.DataType]]:
    out = []

    def walk(name, t):
        if pa.types.is_struct(t) and flatten_structs:
            for i in range(t.num_fields):
                walk(f"{name}.{t.field(i).name}", t.field(i).type)
        else:
            out.append((name, t))

    for field in schema:
        walk(field.name, field.type)
    return out


def _selected_columns(schema: pa.Schema, columns: Optional[Sequence[str]]) -> List[str]:
    """The columns to encode (`columns`, else all), checked: the schema's names are unique and
    every name asked for is one of them."""
    names = schema.names
    seen = set()
    for name in names:
        if name in seen:
            raise ArrowConversionError(f"column {name!r} appears more than once in the schema")
        seen.add(name)
    if columns is None:
        return list(names)
    unknown = [c for c in columns if c not in seen]
    if unknown:
        raise ArrowConversionError(f"unknown column(s) {unknown}; the data has {names}")
    return list(columns)


def _check_known(keys: Iterable[str], message: str, flat_names: List[str]) -> None:
    """ArrowConversionError (`message` with the unknown keys and the names) unless every key
    is one of the (flattened) column names."""
    unknown = [k for k in keys if k not in flat_names]
    if unknown:
        raise ArrowConversionError(message.format(unknown, flat_names))


def _feature_names(
    flat: List[Tuple[str, pa.DataType]],
    rename: Mapping[str, str],
    sequence_columns: Set[str],
    decimal_as: Optional[str],
) -> Dict[str, str]:
    """{column: feature name} after `rename`, every column's type checked (`_plan_field`) and
    no two columns written as the same feature."""
    feature_names: Dict[str, str] = {}
    out_seen: Dict[str, str] = {}
    for name, t in flat:
        feature = rename.get(name, name)
        if feature in out_seen:
            raise ArrowConversionError(
                f"column {name!r} would be written as feature {feature!r}, which column "
                f"{out_seen[feature]!r} already uses (duplicate feature name)"
            )
        out_seen[feature] = name
        _plan_field(name, t, name in sequence_columns, decimal_as)
        feature_names[name] = feature
    return feature_names


class ExampleEncoder:
    """Encodes Arrow RecordBatches of one schema into serialized Example / SequenceExample payloads.

    The schema is checked once, when the encoder is built: unsupported types, duplicate names
    (after `rename` and struct flattening), unknown `columns` / `sequence_columns` / `rename`
    keys all raise ArrowConversionError naming the column, before any data is read.

    Args:
        schema: the Arrow schema of the batches.
        columns: keep only these columns (by their original name; struct parents select all
            their children); None keeps all.
        rename: {original name: feature name} (flattened names like "a.b" are renamable too).
        sequence_columns: list<list<...>> columns to write as SequenceExample feature lists;
            when any is given every record is a SequenceExample (other columns are context).
        flatten_structs: struct columns become "parent.child" features instead of an error.
        decimal_as: None (error), "float" (float32) or "bytes" (the decimal's text, UTF-8).
    """

    def __init__(
        self,
        schema: pa.Schema,
        *,
        columns: Optional[Sequence[str]] = None,
        rename: Optional[Mapping[str, str]] = None,
        sequence_columns: Sequence[str] = (),
        flatten_structs: bool = False,
        decimal_as: Optional[str] = None,
    ) -> None:
        if decimal_as not in DECIMAL_MODES:
            raise ValueError(f"decimal_as must be None, 'float' or 'bytes', not {decimal_as!r}")
        self.schema = schema
        self.flatten_structs = flatten_structs
        self.decimal_as = decimal_as
        self.columns = _selected_columns(schema, columns)
        flat = _flatten_schema_names(pa.schema([schema.field(c) for c in self.columns]), flatten_structs)
        flat_names = [n for n, _ in flat]
        self.rename = dict(rename or {})
        self.sequence_columns = set(sequence_columns)
        _check_known(self.rename, "cannot rename unknown column(s) {}; the columns are {}", flat_names)
        _check_known(sorted(self.sequence_columns), "unknown sequence column(s) {}; the columns are {}", flat_names)
        self.feature_names = _feature_names(flat, self.rename, self.sequence_columns, decimal_as)
        self.is_sequence = bool(self.sequence_columns)

    def to_columns(self, batch: pa.RecordBatch, first_row: int = 0) -> Tuple[List[Column], List[SequenceColumn]]:
        """(context or Example columns, sequence columns) of a batch; `first_row` for messages."""
        if batch.schema.names != self.schema.names:
            missing = [c for c in self.columns if c not in batch.schema.names]
            if missing:
                raise ArrowConversionError(f"batch lacks column(s) {missing}")
        arrays = [batch.column(batch.schema.get_field_index(c)) for c in self.columns]
        names, arrays = _flatten_struct_columns(self.columns, arrays, self.flatten_structs)
        context: List[Column] = []
        sequences: List[SequenceColumn] = []
        for name, arr in zip(names, arrays):
            is_seq = name in self.sequence_columns
            col = column_from_arrow(name, arr, sequence=is_seq, decimal_as=self.decimal_as, first_row=first_row)
            col.name = self.feature_names[name]
            if isinstance(col, SequenceColumn):  # exactly the sequence columns (`_plan_field`)
                sequences.append(col)
            else:
                context.append(col)
        return context, sequences

    def encode(self, batch: pa.RecordBatch, first_row: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """The batch's records as (uint8 buffer, int64 offsets n+1)."""
        context, sequences = self.to_columns(batch, first_row)
        return serialize_columns(context, sequences if self.is_sequence else None, batch.num_rows)

    def encode_payloads(self, batch: pa.RecordBatch, first_row: int = 0) -> List[bytes]:
        """The batch's records as a list of serialized payloads."""
        return split_payloads(*self.encode(batch, first_row))

    def encode_framed(self, batch: pa.RecordBatch, first_row: int = 0) -> Tuple[bytes, np.ndarray]:
        """The batch's records already framed as TFRecords: (bytes, int64 frame sizes), ready
        for `RecordWriter.write_framed` (the compiled encoder frames as it encodes)."""
        context, sequences = self.to_columns(batch, first_row)
        if not self.is_sequence:
            framed = _engine.encode_examples(_engine_columns(context), batch.num_rows, True)
            _, lengths, _, _ = _engine.scan_frames(framed, False)
            return framed, np.asarray(lengths, np.int64) + FRAME_OVERHEAD
        buffer, offsets = serialize_columns(context, sequences, batch.num_rows)
        framed = _engine.frame_records(split_payloads(buffer, offsets))
        return framed, np.diff(np.asarray(offsets, np.int64)) + FRAME_OVERHEAD


def serialize_columns(
    context: Sequence[Column], sequences: Optional[Sequence[SequenceColumn]], num_rows: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Columns -> serialized records (uint8 buffer, offsets): THE one columns-to-bytes step.

    `sequences` None writes Examples (the engine's `encode_examples`: compiled, or its numpy
    twin); a list (even empty) writes SequenceExamples (`encode_sequence_examples`, numpy).
    """
    if sequences is None:
        return _engine.encode_examples(_engine_columns(context), num_rows, False)
    return _engine.encode_sequence_examples(_engine_columns(context), _engine_list_columns(sequences), num_rows)


def record_batch_to_examples(batch: pa.RecordBatch, **options) -> List[bytes]:
    """Convenience: one batch (or Table) to serialized payloads (`ExampleEncoder` options)."""
    if isinstance(batch, pa.Table):
        encoder = ExampleEncoder(batch.schema, **options)
        out: List[bytes] = []
        row = 0
        for b in batch.to_batches():
            out += encoder.encode_payloads(b, row)
            row += b.num_rows
        return out
    return ExampleEncoder(batch.schema, **options).encode_payloads(batch)


# ---------------------------------------------------------------------------------------------
# Examples -> Arrow

_ARROW_OF_KIND = {INT: pa.int64(), FLOAT: pa.float32(), BYTES: pa.binary()}


def inferred_type(kind: Optional[str], *, depth: int = 1, one_value: bool = False, text: bool = False) -> pa.DataType:
    """The Arrow type an inferred schema gives a feature (the one rule of `examples_to_record_batch`
    and `inspection.infer_arrow_schema`): int -> int64, float -> float32, bytes -> binary
    (string with `text`), no kind ever set -> null; a scalar when `one_value` (exactly one value
    in every record that has the feature) and a kind is known, else list<item>;
    list<list<item>> for a SequenceExample feature list (`depth` 2)."""
    item = pa.null() if kind is None else pa.string() if text and kind == BYTES else _ARROW_OF_KIND[kind]
    if depth == 2:
        return pa.list_(pa.list_(item))
    return item if one_value and kind is not None else pa.list_(item)


class _Collector:
    """Values of one feature over a batch of records: per row the value count, or absent."""

    def __init__(self, name: str, kind: Optional[str], depth: int) -> None:
        self.name, self.kind, self.depth = name, kind, depth
        self.present: List[bool] = []
        self.counts: List[int] = []  # values per row (depth 1) or steps per row (depth 2)
        self.step_counts: List[int] = []  # values per step (depth 2)
        self.values: list = []

    def _kind_of(self, kind: Optional[str], row: int) -> None:
        if kind is None:
            return
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TypeError(
                f"record {row}: feature {self.name!r} is {kind!r} but was {self.kind!r} before (or described so)"
            )

    def add_missing(self) -> None:
        self.present.append(False)
        self.counts.append(0)

    def add_feature(self, feature, row: int) -> None:
        kind, values = feature_values(feature)
        self._kind_of(kind, row)
        self.present.append(True)
        self.counts.append(len(values))
        self.values.extend(values)

    def add_steps(self, features, row: int) -> None:
        self.present.append(True)
        self.counts.append(len(features))
        for feature in features:
            kind, values = feature_values(feature)
            self._kind_of(kind, row)
            self.step_counts.append(len(values))
            self.values.extend(values)

    def add_row(self, feature_map: Mapping, lists: Mapping, row: int) -> None:
        """Record `row`'s value of this feature (a feature list at depth 2), or its absence."""
        if self.depth == 2:
            if self.name in lists:
                self.add_steps(lists[self.name].feature, row)
            else:
                self.add_missing()
        elif self.name in feature_map:
            self.add_feature(feature_map[self.name], row)
        else:
            self.add_missing()

    def to_arrow(self, target: Optional[pa.DataType]) -> pa.Array:
        """The column: cast to `target`, or typed by `inferred_type` when None."""
        leaf = pa.array(self.values, type=_ARROW_OF_KIND[self.kind] if self.kind else pa.null())
        present = np.asarray(self.present, dtype=bool)
        mask = pa.array(~present) if not present.all() else None
        counts = np.asarray(self.counts, dtype=np.int64)
        inferred = None
        if target is None:
            one_value = self.depth == 1 and bool(present.any()) and bool(np.all(counts[present] == 1))
            inferred = inferred_type(self.kind, depth=self.depth, one_value=one_value)
        if self.depth == 2:
            inner = pa.LargeListArray.from_arrays(
                pa.array(_splits_from_lengths(np.asarray(self.step_counts, np.int64))), leaf
            )
            arr = pa.LargeListArray.from_arrays(pa.array(_splits_from_lengths(counts)), inner, mask=mask)
        elif not _is_list(target or inferred):
            bad = np.flatnonzero(present & (counts != 1))
            if len(bad):
                raise ArrowConversionError(
                    f"feature {self.name!r}, record {int(bad[0])}: {int(counts[bad[0]])} values for a scalar column"
                )
            arr = _spread(leaf, present)
        else:
            arr = pa.LargeListArray.from_arrays(pa.array(_splits_from_lengths(counts)), leaf, mask=mask)
        return arr.cast(inferred) if target is None else _cast_to(arr, target, self.name)


def _spread(leaf: pa.Array, present: np.ndarray) -> pa.Array:
    if present.all():
        return leaf
    index = np.full(len(present), -1, dtype=np.int64)
    index[present] = np.arange(len(leaf))
    return leaf.take(pa.array(index, mask=~present))


def _cast_to(arr: pa.Array, target: pa.DataType, name: str) -> pa.Array:
    """Cast decoded values to the type a schema asks for (int64 -> timestamp, binary -> string...)."""
    if _is_list(target):
        if not _is_list(arr.type):
            raise ArrowConversionError(f"feature {name!r}: cannot build list type {target} from {arr.type}")
        values = _cast_to(arr.values if not arr.offset else arr.flatten(), target.value_type, name)
        offsets = arr.offsets
        if pa.types.is_fixed_size_list(target):
            built = pa.LargeListArray.from_arrays(offsets, values, mask=arr.is_null() if arr.null_count else None)
            return built.cast(target)
        cls = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
        offsets = offsets.cast(pa.int64() if cls is pa.LargeListArray else pa.int32())
        return cls.from_arrays(offsets, values, type=target, mask=arr.is_null() if arr.null_count else None)
    try:
        if pa.types.is_date32(target) or pa.types.is_time32(target):
            arr = arr.cast(pa.int32())
        elif pa.types.is_boolean(target):
            import pyarrow.compute as pc

            return pc.not_equal(arr, 0)
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ArrowConversionError(f"feature {name!r}: cannot convert {arr.type} values to {target}: {exc}") from None


def examples_to_record_batch(
    payloads: Iterable[bytes],
    description: Description = None,
    *,
    schema: Optional[pa.Schema] = None,
    sequence_description: Description = None,
    sequence: bool = False,
    closed: bool = False,
) -> pa.RecordBatch:
    """Serialized Examples (or SequenceExamples with `sequence=True`) -> one Arrow RecordBatch.

    Columns come from `schema` (names and types; values are cast to them, a feature of
    another kind than its column's is an error), else from `description` ({name: kind} or
    names), else from every feature seen (in the order first seen; names new in the same
    record sorted).
    A feature missing from a record is null there. Without a schema, a feature with exactly
    one value wherever it appears is a scalar column (int64 / float32 / binary), otherwise a
    list column; SequenceExample feature lists are list<list<...>> columns.
    `closed`: every feature of every record must be a column (of `schema` or `description`):
    one that is not raises ArrowConversionError instead of being left out.
    """
    # The batch decoder only where it is compiled: its pure twin parses per record like the
    # collectors below and was slower (bench/RESULTS.md, issue 17 item 2).
    if schema is not None and not sequence and description is None and _engine.NATIVE:
        batch = _decode_with_columnar(payloads, schema, closed)
        if batch is not None:
            return batch
    collectors = _described_collectors(description, schema, sequence_description, sequence)
    _collect(payloads, collectors, sequence, fixed=bool(collectors), closed=closed)
    return _to_record_batch(collectors, schema)


def _not_a_column(name: str, row: int) -> ArrowConversionError:
    return ArrowConversionError(f"record {row}: feature {name!r} is not a column of the schema")


def _sequence_example(lists: Mapping, row: int) -> ArrowConversionError:
    return ArrowConversionError(f"record {row}: {_SEQUENCE_EXAMPLE_MISFIT.format(sorted(lists))}")


_SEQUENCE_EXAMPLE_MISFIT = (
    "the record is a SequenceExample (feature lists {}), read as an Example: its feature lists would be "
    "left out; read SequenceExamples with --sequence (sequence=True)"
)


def _check_closed(payload: bytes, row: int, columns: Iterable[str]) -> None:
    """`closed` decoding of Examples: every feature of the record is one of `columns`, and it is
    no SequenceExample (whose feature lists an Example read would leave out)."""
    from ._proto import parse_record

    _, features, lists = parse_record(payload)
    for name in features or {}:
        if name not in columns:
            raise _not_a_column(name, row)
    if lists:
        raise _sequence_example(lists, row)


def _kind_of_type(t: pa.DataType) -> Optional[str]:
    """The feature kind a column of type `t` holds (through lists); None when it has none."""
    while _is_list(t):
        t = t.value_type
    try:
        return None if pa.types.is_null(t) or pa.types.is_decimal(t) else _leaf_kind("", t, None)
    except ArrowConversionError:
        return None


def record_misfit(payload: bytes, schema: pa.Schema, *, sequence: bool = False, closed: bool = False) -> Optional[str]:
    """Why one record does not fit `schema` (`examples_to_record_batch` with it fails or, with
    `closed`, would leave a feature out), in words naming the feature; None when it fits as far
    as names, kinds and value counts tell. For messages that name the record themselves."""
    from ._proto import INVALID, parse_record

    rtype, features, lists = parse_record(payload)
    if rtype == INVALID:
        return "not a tf.train.Example or SequenceExample"
    sections = [(features or {}, False)] + ([(lists, True)] if lists and sequence else [])
    for section, is_list in sections:
        for name, value in section.items():
            if name not in schema.names:
                if closed:
                    return f"feature {name!r} is not a column of the schema"
                continue
            t = schema.field(name).type
            want = _kind_of_type(t)
            leaf = t
            while _is_list(leaf):
                leaf = leaf.value_type
            steps = list(value.feature) if is_list else [value]
            for kind, values in map(feature_values, steps):
                if kind is not None and want is not None and kind != want:
                    return f"feature {name!r} holds {kind} values, but its column is {t}"
                if kind is not None and pa.types.is_null(leaf):
                    return f"feature {name!r} holds {kind} values, but its column is {t} (no kind was seen for it)"
                if not is_list and not _is_list(t) and len(values) != 1:
                    return f"feature {name!r} holds {len(values)} values, but its column {t} is a scalar"
    if lists and not sequence:
        return _SEQUENCE_EXAMPLE_MISFIT.format(sorted(lists))
    return None


def _described_collectors(
    description: Description, schema: Optional[pa.Schema], sequence_description: Description, sequence: bool
) -> Dict[str, _Collector]:
    """A collector per column the caller named (the schema's fields, else the description's,
    then the sequence description's feature lists), in their order; none when nothing is named
    (every feature seen becomes a column)."""
    desc: Optional[Mapping[str, Optional[str]]]
    if schema is not None:  # each column's kind: a record holding another kind is an error, never cast
        desc = {f.name: _kind_of_type(f.type) for f in schema}
    else:
        desc = normalize_description(description)
    collectors: Dict[str, _Collector] = {}
    for name, kind in (desc or {}).items():
        target = schema.field(name).type if schema is not None else None
        depth = 2 if (target is not None and _is_list(target) and _is_list(target.value_type)) else 1
        if depth == 2 and not sequence:
            raise ArrowConversionError(f"column {name!r}: list<list> columns need sequence=True")
        collectors[name] = _Collector(name, kind, depth)
    for name, kind in (normalize_description(sequence_description) or {}).items():
        collectors[name] = _Collector(name, kind, 2)
    return collectors


def _features(payload: bytes, row: int, sequence: bool) -> Tuple[Mapping, Mapping]:
    """(features, feature lists) of one serialized Example (no lists) or SequenceExample."""
    if sequence:
        message = parse_sequence_example(payload, record_number=row)
        return message.context.feature, message.feature_lists.feature_list
    return parse_example(payload, record_number=row).features.feature, {}


def _collect(
    payloads: Iterable[bytes], collectors: Dict[str, _Collector], sequence: bool, *, fixed: bool, closed: bool = False
) -> None:
    """Feed every record to the collectors; unless the columns are `fixed`, a feature first
    seen in a record gets a collector then (absent in the rows before; names new in one
    record sorted, features before feature lists). `closed` (with `fixed`): a feature with no
    collector is an error."""
    for row, payload in enumerate(payloads):
        feature_map, lists = _features(payload, row, sequence)
        if closed and not sequence:  # a SequenceExample read as an Example would lose its lists
            from ._proto import parse_record

            _, _, seq_lists = parse_record(payload)
            if seq_lists:
                raise _sequence_example(seq_lists, row)
        if fixed and closed:
            for name in list(feature_map) + list(lists):
                if name not in collectors:
                    raise _not_a_column(name, row)
        if not fixed:
            for name in sorted(feature_map) + sorted(lists):
                if name not in collectors:
                    collectors[name] = _Collector(name, None, 2 if name in lists else 1)
                    collectors[name].present = [False] * row
                    collectors[name].counts = [0] * row
        for col in collectors.values():
            col.add_row(feature_map, lists, row)


def _to_record_batch(collectors: Dict[str, _Collector], schema: Optional[pa.Schema]) -> pa.RecordBatch:
    """The collected columns as one RecordBatch: cast to `schema` when given, else inferred."""
    names = list(collectors)
    arrays = [collectors[n].to_arrow(schema.field(n).type if schema is not None else None) for n in names]
    if schema is not None:
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.RecordBatch.from_arrays(arrays, names=names) if names else pa.RecordBatch.from_pydict({})


def _schema_kinds(schema: pa.Schema) -> Optional[Dict[str, str]]:
    """{name: feature kind} of a flat schema (scalars and single lists), or None if not flat."""
    kinds = {}
    for field in schema:
        t = field.type
        if _is_list(t):
            t = t.value_type
        if _is_list(t) or pa.types.is_decimal(t) or pa.types.is_dictionary(t) or pa.types.is_null(t):
            return None
        try:
            kinds[field.name] = _leaf_kind(field.name, t, None)
        except ArrowConversionError:
            return None
    return kinds


def _decode_with_columnar(payloads: Iterable[bytes], schema: pa.Schema, closed: bool) -> Optional[pa.RecordBatch]:
    """`examples_to_record_batch` for a flat schema through the batch decoder (no per-record
    Python); None when the schema is not flat. `closed`: a record whose encoding is longer than
    its decoded columns' (`columnar.encoded_lengths`, a sizes pass) holds something more, and is
    parsed to see whether that is a feature the schema lacks."""
    kinds = _schema_kinds(schema)
    if not kinds:
        return None
    payloads = list(payloads)
    columns = decode_examples(payloads, kinds)
    if closed:
        lengths = np.fromiter((len(p) for p in payloads), np.int64, len(payloads))
        for row in np.flatnonzero(encoded_lengths(columns, len(payloads)) != lengths):
            _check_closed(payloads[row], int(row), kinds)
    arrays = []
    for field in schema:
        col = columns[field.name]
        present = np.asarray(col.status) != MISSING  # a kind-less feature counts as present, empty
        if col.kind == BYTES:
            offsets = np.asarray(col.value_offsets, dtype=np.int64)
            leaf = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(np.asarray(col.values))]
            )
        else:
            leaf = pa.array(np.asarray(col.values))
        counts = np.diff(np.asarray(col.row_splits, dtype=np.int64))
        if _is_list(field.type):
            mask = None if present.all() else pa.array(~present)
            arr = pa.LargeListArray.from_arrays(pa.array(np.asarray(col.row_splits, dtype=np.int64)), leaf, mask=mask)
        else:
            bad = np.flatnonzero(present & (counts != 1))
            if len(bad):
                raise ArrowConversionError(
                    f"feature {field.name!r}, record {int(bad[0])}: {int(counts[bad[0]])} values for a scalar column"
                )
            arr = _spread(leaf, present)
        arrays.append(_cast_to(arr, field.type, field.name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
