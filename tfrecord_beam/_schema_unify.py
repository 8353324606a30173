"""One Arrow schema for many Parquet files: unify their schemas, or say which file differs how.

The policy (parquet_to_tfrecord; docs/jobs.md): every file's schema is read from its footer
before anything runs, and they unify column by column into one planned schema.

- A column that some files lack is kept: their rows have no such feature (as a null cell).
  The same for a struct's children (`--flatten_structs`).
- Types of one column unify when every file's values become the same Example feature the same
  way: integers of any width or sign (-> int64), floats of any width (-> float64), strings and
  binaries of any flavour (bytes; -> large_string when all are text, else large_binary), lists
  of unifiable items (any list flavour, the same depth), structs by child name, a dictionary by
  its values, and the null type (an all-null column) with anything.
- Anything else must be equal: booleans, decimals (their text depends on the scale), temporal
  types (the values are counts of the type's unit: seconds and milliseconds never mix).
  Otherwise `SchemaDriftError` names the file, the column (`a.b` for a struct's child) and
  both types, before the pipeline starts.

No value is cast: each file's batches are encoded with their own types, struct children
included (the encoder maps each of a family's types to the same feature kind); `conform_batch`
only adds the columns and children a file lacks, as nulls. A file with two columns (or struct
children) of one name fails, named (`check_unique_names`). Workers check each file they open against the plan
(`check_file_schema`), so a file that changed after planning fails naming file and column.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import pyarrow as pa

from .arrow import ArrowConversionError

__all__ = [
    "SchemaDriftError",
    "UnifiedSchema",
    "check_file_schema",
    "check_unique_names",
    "conform_batch",
    "unify_schemas",
]


class SchemaDriftError(ArrowConversionError):
    """A file's column whose type does not unify with the other files' (or the plan's)."""


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_bytes(t: pa.DataType) -> bool:
    return any(
        getattr(pa.types, f, lambda _t: False)(t)
        for f in (
            "is_string",
            "is_large_string",
            "is_string_view",
            "is_binary",
            "is_large_binary",
            "is_binary_view",
            "is_fixed_size_binary",
        )
    )


def _is_text(t: pa.DataType) -> bool:
    return any(getattr(pa.types, f, lambda _t: False)(t) for f in ("is_string", "is_large_string", "is_string_view"))


def _family(t: pa.DataType) -> str:
    """Types of one family unify; a family named by the type itself holds that type alone."""
    if pa.types.is_dictionary(t):
        return _family(t.value_type)
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "floating point"
    if _is_bytes(t):
        return "bytes"
    if _is_list(t):
        return "list"
    if pa.types.is_struct(t):
        return "struct"
    return str(t)


class _Conflict(Exception):
    """Types that do not unify, at `column` (a dotted path into structs)."""

    def __init__(self, column: str, planned: pa.DataType, found: pa.DataType) -> None:
        super().__init__(column)
        self.column, self.planned, self.found = column, planned, found


def unify_type(a: pa.DataType, b: pa.DataType, column: str) -> pa.DataType:
    """The one type that holds column `column`'s values of types `a` and `b` (module docstring);
    `_Conflict` when there is none."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if pa.types.is_dictionary(a) or pa.types.is_dictionary(b):
        return unify_type(
            a.value_type if pa.types.is_dictionary(a) else a, b.value_type if pa.types.is_dictionary(b) else b, column
        )
    family = _family(a)
    if family != _family(b):
        raise _Conflict(column, a, b)
    if family == "integer":
        return pa.int64()
    if family == "floating point":
        return pa.float64()
    if family == "bytes":
        return pa.large_string() if _is_text(a) and _is_text(b) else pa.large_binary()
    if family == "list":
        try:
            item = unify_type(a.value_type, b.value_type, column)
        except _Conflict:
            raise _Conflict(column, a, b) from None
        return pa.large_list(item) if pa.types.is_large_list(a) or pa.types.is_large_list(b) else pa.list_(item)
    if family == "struct":
        children: Dict[str, pa.DataType] = {f.name: f.type for f in a}
        for child in b:
            known = children.get(child.name)
            path = f"{column}.{child.name}"
            children[child.name] = child.type if known is None else unify_type(known, child.type, path)
        return pa.struct([pa.field(n, t) for n, t in children.items()])
    raise _Conflict(column, a, b)  # equal types only (bool, decimal, temporal, ...): not equal


class UnifiedSchema:
    """The planned schema of many files, and what differed between them (`notes`)."""

    def __init__(self, schema: pa.Schema, notes: List[str]) -> None:
        self.schema, self.notes = schema, notes


def _selected(schema: pa.Schema, columns: Optional[Sequence[str]]) -> List[pa.Field]:
    return [f for f in schema if columns is None or f.name in columns]


def _duplicate(names: Sequence[str]) -> Optional[str]:
    seen = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def check_unique_names(path: str, schema: pa.Schema, columns: Optional[Sequence[str]] = None) -> None:
    """SchemaDriftError when file `path` has two (selected) columns of one name, or a struct two
    children of one name (legal in Parquet and Arrow): one Example feature cannot hold both, and
    reading it by name would find neither."""

    def walk(fields: Sequence[pa.Field], parent: str) -> None:
        twice = _duplicate([f.name for f in fields])
        if twice is not None:
            column = f"{parent}.{twice}" if parent else twice
            where = "column" if not parent else "struct child"
            raise SchemaDriftError(
                f"{path}: {where} {column!r} appears more than once in the file's schema: one Example feature "
                "cannot hold both; rename one of them (or leave the column out with --columns)"
            )
        for f in fields:
            t = f.type
            while _is_list(t):
                t = t.value_type
            if pa.types.is_struct(t):
                walk(list(t), f"{parent}.{f.name}" if parent else f.name)

    walk(_selected(schema, columns), "")


def unify_schemas(named: Sequence[Tuple[str, pa.Schema]], columns: Optional[Sequence[str]] = None) -> UnifiedSchema:
    """Unify the schemas of (path, schema) pairs, in their order; with `columns`, those columns
    only (the others are not converted, so they may differ). Columns are in the order first
    seen. Raises SchemaDriftError naming the file, the column and both types."""
    types: Dict[str, pa.DataType] = {}
    first: Dict[str, str] = {}  # column -> the first file that has it
    holders: Dict[str, int] = {}
    widened: Dict[Tuple[str, str], str] = {}  # (column, a type seen) -> the first file with it
    for path, schema in named:
        check_unique_names(path, schema, columns)
        for field in _selected(schema, columns):
            name = field.name
            holders[name] = holders.get(name, 0) + 1
            widened.setdefault((name, str(field.type)), path)
            if name not in types:
                types[name], first[name] = field.type, path
                continue
            try:
                types[name] = unify_type(types[name], field.type, name)
            except _Conflict as exc:
                raise SchemaDriftError(
                    f"{path}: column {exc.column!r} is {exc.found} there, but {exc.planned} in {first[name]} "
                    f"(or the files between): no one Example feature holds both; convert the files to "
                    f"one type, or leave the column out with --columns"
                ) from None
    notes = []
    for name, count in holders.items():
        if count < len(named):
            notes.append(
                f"column {name!r} is in {count} of {len(named)} files (first {first[name]}): "
                "the other files' rows do not have the feature"
            )
        seen = [(t, p) for (n, t), p in widened.items() if n == name]
        if len(seen) > 1:
            listed = ", ".join(f"{t} in {p}" for t, p in seen)
            notes.append(f"column {name!r} has {len(seen)} types ({listed} first): read as {types[name]}")
    return UnifiedSchema(pa.schema([pa.field(n, t) for n, t in types.items()]), notes)


def check_file_schema(path: str, found: pa.Schema, planned: pa.Schema, columns: Optional[Sequence[str]] = None) -> None:
    """SchemaDriftError unless file `path`'s schema `found` fits the planned schema: each of its
    (selected) columns is planned, with a type that unifies into the planned type unchanged.
    What a worker checks of each file it opens: a file replaced after planning (or one the
    launcher never saw) fails naming the file and the column, never loses a column."""
    check_unique_names(path, found, columns)
    for field in _selected(found, columns):
        if field.name not in planned.names:
            raise SchemaDriftError(
                f"{path}: column {field.name!r} ({field.type}) is not in the schema planned from the "
                f"files' footers (columns {planned.names}): the file changed after the job was planned? "
                "Run the job again"
            )
        want = planned.field(field.name).type
        try:
            fits = unify_type(want, field.type, field.name) == want
            column = field.name
        except _Conflict as exc:
            fits, column = False, exc.column
        if not fits:
            raise SchemaDriftError(
                f"{path}: column {column!r} is {field.type} there, but the schema planned from the files' "
                f"footers has {want}: the file changed after the job was planned? Run the job again"
            )


def _conform_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """`arr` with the struct children `target` has and it lacks added as nulls of the planned
    type (recursively); the children it has keep their own types (never cast: the encoder maps
    each type of a family to the same feature kind, as for top-level columns), in the planned
    order."""
    if not (pa.types.is_struct(target) and pa.types.is_struct(arr.type)) or arr.type == target:
        return arr
    children = dict(zip([f.name for f in arr.type], arr.flatten()))  # parent nulls pushed down
    arrays = [
        _conform_array(children[f.name], f.type) if f.name in children else pa.nulls(len(arr), f.type) for f in target
    ]
    fields = [pa.field(f.name, a.type) for f, a in zip(target, arrays)]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)


def conform_batch(batch: pa.RecordBatch, planned: pa.Schema, columns: Sequence[str]) -> pa.RecordBatch:
    """The batch's `columns` in that order, those it lacks (and struct children it lacks) added
    as all-null arrays of the planned type; values are never cast."""
    arrays = []
    for name in columns:
        target = planned.field(name).type
        at = batch.schema.get_field_index(name)
        arrays.append(pa.nulls(batch.num_rows, target) if at < 0 else _conform_array(batch.column(at), target))
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))
