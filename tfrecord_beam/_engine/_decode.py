"""Pure-Python twin of the compiled columnar decoder: Example/SequenceExample batches -> columns.

Same functions, arguments and results as `tfrecord_beam._native._core.decode_examples` and
`decode_sequence_examples`; parsing goes through upb (protobuf's C parser), which is the
reference the compiled core mirrors. Record-data errors are returned, not raised, as
`(code, record, feature, found_kind)`; `tfrecord_beam.columnar` turns them into exceptions for
both engines.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from google.protobuf.message import DecodeError as _PbDecodeError

from .._proto import Example, SequenceExample
from ._common import (
    ERR_KIND,
    ERR_MALFORMED,
    KIND_BYTES,
    KIND_CODE,
    KIND_DTYPE,
    KIND_FIELD,
    KIND_FLOAT,
    KIND_INT64,
    KIND_NONE,
    MISSING,
    NO_KIND,
    PRESENT,
)

__all__ = ["decode_examples", "decode_sequence_examples"]

_FIELD_OF = {KIND_CODE[name]: field for name, field in KIND_FIELD.items()}
_KIND_OF: Dict[Optional[str], int] = {None: KIND_NONE, **{field: code for code, field in _FIELD_OF.items()}}

ErrorTuple = Tuple[int, int, int, int]


def _records(records, offsets, lengths) -> List[bytes]:
    """The payloads as bytes: a buffer sliced by offsets/lengths, or a sequence of bytes-likes."""
    if offsets is None and lengths is None:
        return [r if isinstance(r, bytes) else bytes(r) for r in records]
    if offsets is None or lengths is None:
        raise TypeError("give both offsets and lengths, or neither")
    view = memoryview(records).cast("B")
    offs = np.asarray(offsets, dtype=np.int64).ravel()
    lens = np.asarray(lengths, dtype=np.int64).ravel()
    if len(offs) != len(lens):
        raise ValueError("offsets and lengths differ in length")
    out = []
    for i, (o, n) in enumerate(zip(offs.tolist(), lens.tolist())):
        if o < 0 or n < 0 or o > len(view) or n > len(view) - o:
            raise ValueError(f"record {i}: offset {o} length {n} outside the buffer")
        out.append(bytes(view[o : o + n]))
    return out


def _description(names: Sequence[bytes], kinds: Sequence[int]) -> Tuple[List[Optional[str]], List[int]]:
    """(map keys, kind codes), checked as the compiled core checks them."""
    names, kinds = list(names), list(kinds)
    if len(names) != len(kinds):
        raise ValueError("names and kinds differ in length")
    if not all(isinstance(n, bytes) for n in names) or not all(int(k) in _FIELD_OF for k in kinds):
        raise TypeError("names must be bytes, kinds 1, 2 or 3")
    return [_key(n) for n in names], [int(k) for k in kinds]


def _key(name: bytes) -> Optional[str]:
    """A described name as a map key; None when it is not UTF-8 (upb would never hold it)."""
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _float_values(lst) -> np.ndarray:
    """A FloatList's values with their exact float32 bits (Python floats would quiet NaNs):
    upb writes the packed values first (tag, varint length, data), unknown fields after."""
    if not len(lst.value):
        return np.zeros(0, np.float32)
    raw = lst.SerializeToString()
    pos, size, shift = 1, 0, 0
    while True:
        byte = raw[pos]
        size |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            break
    return np.frombuffer(raw, dtype="<f4", count=size // 4, offset=pos).astype(np.float32)


class _Builder:
    """Collects one feature's values record by record (and step by step for feature lists)."""

    def __init__(self, kind: int, steps: bool) -> None:
        self.kind = kind
        self.steps = steps
        self.parts: list = []
        self.row_splits = [0]
        self.step_splits = [0]
        self.status: List[int] = []
        self.count = 0  # values so far

    def add_values(self, lst) -> None:
        vals: Union[np.ndarray, List[bytes]]  # an array for numbers, a list of bytes for BYTES
        if self.kind == KIND_FLOAT:
            vals = _float_values(lst)
        elif self.kind == KIND_INT64:
            vals = np.fromiter(lst.value, dtype=np.int64, count=len(lst.value))
        else:
            vals = list(lst.value)
        self.parts.append(vals)
        self.count += len(vals)

    def end_step(self) -> None:
        self.step_splits.append(self.count)

    def end_record(self, status: int) -> None:
        self.status.append(status)
        self.row_splits.append(len(self.step_splits) - 1 if self.steps else self.count)

    def result(self) -> tuple:
        i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
        offsets = None
        if self.kind == KIND_BYTES:
            flat = [b for part in self.parts for b in part]
            lens = np.fromiter((len(b) for b in flat), dtype=np.int64, count=len(flat))
            offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lens, dtype=np.int64)])
            values = np.frombuffer(b"".join(flat), dtype=np.uint8).copy()
        elif self.parts:
            values = np.concatenate(self.parts).astype(KIND_DTYPE[self.kind], copy=False)
        else:
            values = np.zeros(0, KIND_DTYPE[self.kind])
        status = np.asarray(self.status, dtype=np.uint8)
        if self.steps:
            return values, i64(self.row_splits), i64(self.step_splits), offsets, status
        return values, i64(self.row_splits), offsets, status


def _features_into(fmap, keys, kinds, builders, record: int, feature_base: int) -> Optional[ErrorTuple]:
    """Add one record's Features map to the builders; an error tuple on a kind mismatch."""
    for j, (key, want, b) in enumerate(zip(keys, kinds, builders)):
        if key is None or key not in fmap:  # `in` first: indexing a map would insert the key
            b.end_record(MISSING)
            continue
        feature = fmap[key]
        kind = _KIND_OF[feature.WhichOneof("kind")]
        if kind == KIND_NONE:
            b.end_record(NO_KIND)
        elif kind != want:
            return (ERR_KIND, record, feature_base + j, kind)
        else:
            b.add_values(getattr(feature, _FIELD_OF[kind]))
            b.end_record(PRESENT)
    return None


def _feature_lists_into(flmap, keys, kinds, builders, record: int, feature_base: int) -> Optional[ErrorTuple]:
    """Add one record's FeatureLists map to the builders (each Feature is a step)."""
    for j, (key, want, b) in enumerate(zip(keys, kinds, builders)):
        if key is None or key not in flmap:
            b.end_record(MISSING)
            continue
        for step in flmap[key].feature:
            kind = _KIND_OF[step.WhichOneof("kind")]
            if kind not in (KIND_NONE, want):
                return (ERR_KIND, record, feature_base + j, kind)
            if kind == want:
                b.add_values(getattr(step, _FIELD_OF[kind]))
            b.end_step()
        b.end_record(PRESENT)
    return None


def decode_examples(records, names: Sequence[bytes], kinds: Sequence[int], offsets=None, lengths=None):
    """Columns of the described features of a batch of Examples: `(columns, None)` or
    `(None, (code, record, feature, found_kind))`. Each column is
    `(values, row_splits, value_offsets or None, status)`."""
    payloads = _records(records, offsets, lengths)
    keys, kinds = _description(names, kinds)
    builders = [_Builder(k, steps=False) for k in kinds]
    for i, payload in enumerate(payloads):
        try:
            ex = Example.FromString(payload)
        except _PbDecodeError:
            return None, (ERR_MALFORMED, i, -1, 0)
        err = _features_into(ex.features.feature, keys, kinds, builders, i, 0)
        if err:
            return None, err
    return [b.result() for b in builders], None


def decode_sequence_examples(records, context_names, context_kinds, names, kinds, offsets=None, lengths=None):
    """Like decode_examples for SequenceExamples: `(context_columns, list_columns, None)` or
    `(None, None, error)`. List columns are `(values, row_splits, step_splits, value_offsets,
    status)`: row_splits map records to steps, step_splits steps to values."""
    payloads = _records(records, offsets, lengths)
    ckeys, ckinds = _description(context_names, context_kinds)
    skeys, skinds = _description(names, kinds)
    cb = [_Builder(k, steps=False) for k in ckinds]
    sb = [_Builder(k, steps=True) for k in skinds]
    for i, payload in enumerate(payloads):
        try:
            ex = SequenceExample.FromString(payload)
        except _PbDecodeError:
            return None, None, (ERR_MALFORMED, i, -1, 0)
        err = _features_into(ex.context.feature, ckeys, ckinds, cb, i, 0) or _feature_lists_into(
            ex.feature_lists.feature_list, skeys, skinds, sb, i, len(ckeys)
        )
        if err:
            return None, None, err
    return [b.result() for b in cb], [b.result() for b in sb], None
