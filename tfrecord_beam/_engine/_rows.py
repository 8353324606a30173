"""Pure twin of the compiled column -> per-record converters (`_native/py_rows.c`).

`example_rows`, `sequence_rows` and `decode_example_rows` take the compiled functions'
arguments and give the same records: per record a dict {name: value} in
`example.decode_example`'s convention (float32 / int64 arrays of their own, one bytes value
as `bytes`, zero or several as an object array, an empty array for a missing or kind-less
feature); feature lists give a list with one such value per step. The convention itself is
`_values.as_decoded` / `_values.empty_value` (re-exported by `example`).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ._common import BYTES, KIND_BYTES, KIND_NAME, PRESENT
from ._decode import decode_examples
from ._values import as_decoded, empty_value

__all__ = ["example_rows", "sequence_rows", "decode_example_rows"]


def _bytes_values(values, value_offsets) -> List[bytes]:
    buf = values.tobytes() if values.size else b""
    offs = value_offsets.tolist()
    return [buf[offs[k] : offs[k + 1]] for k in range(len(offs) - 1)]


def _indices(n: int, rows: Optional[Sequence[int]]):
    return range(n) if rows is None else rows


def example_rows(
    names: Sequence[str], kinds: Sequence[int], columns: Sequence[tuple], n: int, rows: Optional[Sequence[int]]
) -> Iterator[Dict[str, Any]]:
    """Per-record dicts of decoded columns `(values, row_splits, value_offsets, status)`."""
    views = []
    for name, code, (values, splits, voffs, status) in zip(names, kinds, columns):
        flat = _bytes_values(values, voffs) if code == KIND_BYTES else values
        views.append((name, KIND_NAME[code], flat, splits.tolist(), (status == PRESENT).tolist()))
    for i in _indices(n, rows):
        record = {}
        for name, kind, flat, splits, present in views:
            if not present[i]:
                record[name] = empty_value(kind)
            elif kind == BYTES:
                record[name] = as_decoded(kind, flat[splits[i] : splits[i + 1]])
            else:
                record[name] = flat[splits[i] : splits[i + 1]].copy()
        yield record


def sequence_rows(
    context_names: Sequence[str],
    context_kinds: Sequence[int],
    context_columns: Sequence[tuple],
    names: Sequence[str],
    kinds: Sequence[int],
    columns: Sequence[tuple],
    n: int,
    rows: Optional[Sequence[int]],
) -> Iterator[Tuple[Dict[str, Any], Dict[str, List[Any]]]]:
    """Per record `(context dict, {name: [value per step]})`; list columns are `(values,
    row_splits, step_splits, value_offsets, status)`; a missing feature list gives []."""
    contexts = example_rows(context_names, context_kinds, context_columns, n, rows)
    views = []
    for name, code, (values, splits, steps, voffs, _status) in zip(names, kinds, columns):
        flat = _bytes_values(values, voffs) if code == KIND_BYTES else values
        views.append((name, KIND_NAME[code], flat, splits.tolist(), steps.tolist()))
    for i, ctx in zip(_indices(n, rows), contexts):
        sequences = {}
        for name, kind, flat, splits, steps in views:
            if kind == BYTES:
                sequences[name] = [
                    as_decoded(kind, flat[steps[s] : steps[s + 1]]) for s in range(splits[i], splits[i + 1])
                ]
            else:
                sequences[name] = [flat[steps[s] : steps[s + 1]].copy() for s in range(splits[i], splits[i + 1])]
        yield ctx, sequences


def decode_example_rows(
    records: Any,
    names: Sequence[bytes],
    kinds: Sequence[int],
    offsets: Any,
    lengths: Any,
    keys: Sequence[str],
    rows: Optional[Sequence[int]],
):
    """`decode_examples` + `example_rows` in one: `(iterator, None)` or `(None, error)`."""
    if offsets is None or lengths is None:
        raise TypeError("decode_example_rows needs one buffer with offsets and lengths")
    columns, err = decode_examples(records, names, kinds, offsets, lengths)
    if err is not None:
        return None, err
    return example_rows(keys, kinds, columns, len(offsets), rows), None
