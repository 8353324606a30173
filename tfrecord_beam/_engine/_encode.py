"""Pure twin of the compiled `encode_examples`: columns -> serialized Examples, vectorised
with numpy; and the one SequenceExample batch encoder (both engines use it).

The output bytes equal upb's deterministic serialization (`example.encode_example`) for the
same values, map keys in upb's order; `tests/_encode_oracle.py` keeps a per-record upb
encoder as the reference the parity tests compare against. Every step works on whole columns
(varints of all values at once, length prefixes of all rows at once); bytes are copied into
the output in one gather per leaf (long pieces one slice copy each). Measured on 50,000
D2-like records: 0.07 CPU s, against 0.41 s for the per-record upb loop that was the twin
before (`bench/RESULTS.md`, "Engine package").

Columns come in the compiled encoder's form, `(name bytes, kind 1|2|3, values, row_splits,
value_offsets or None, status or None)`: `values` int64, float32, or one uint8 buffer plus
`value_offsets`; `row_splits` (int64, n+1); `status` per record MISSING (no map entry),
NO_KIND (a Feature with no kind set) or PRESENT. A feature-list column (SequenceExample) is
`(name, kind, values, row_splits, step_splits, value_offsets, status)` as
`decode_sequence_examples` returns it: `row_splits` (n+1) index steps, `step_splits` values.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ._common import KIND_BYTES, KIND_DTYPE, KIND_FLOAT, KIND_INT64, MISSING, NO_KIND
from ._framing import frame_records

__all__ = [
    "encode_examples",
    "example_lengths",
    "encode_sequence_examples",
    "split_payloads",
    "varint_sizes",
    "varints",
    "upb_key",
    "check_column",
    "checked_arrays",
]

_KIND_TAG = {KIND_BYTES: 0x0A, KIND_FLOAT: 0x12, KIND_INT64: 0x1A}  # Feature.bytes_list / float_list / int64_list
_SHORT = 12  # pieces up to this long are copied position by position
_LONG = 256  # pieces this long on average are copied one slice each (index arrays cost 8x the bytes)
_GATHER_BYTES = 1 << 22  # copy at most this many bytes per gather (bounds the index arrays)
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


class _Col(NamedTuple):
    """One checked column: `splits` index values per row (per step for feature lists)."""

    name: str
    kind: int
    values: np.ndarray
    splits: np.ndarray
    value_offsets: Optional[np.ndarray]
    present: Optional[np.ndarray]  # bool per record, None when all are present
    empty: Optional[np.ndarray]  # bool per record: a Feature with no kind set (NO_KIND)
    groups: Optional[np.ndarray]  # feature lists: steps per record (n+1), else None


def upb_key(name: str) -> Tuple[int, ...]:
    """Sort key giving upb's deterministic map order: bytewise, and a longer key before its prefix."""
    return tuple(name.encode("utf-8")) + (256,)


# ---------------------------------------------------------------------------------------------
# Pieces: per-row byte strings kept as references into source buffers until the final gather.


class _Pieces:
    """n rows, each the concatenation of leaves; a leaf is (buffer, src start, length, offset in row)."""

    __slots__ = ("n", "lengths", "leaves")

    def __init__(self, n: int, lengths: np.ndarray, leaves: list) -> None:
        self.n, self.lengths, self.leaves = n, lengths, leaves

    @classmethod
    def ragged(cls, data: np.ndarray, offsets: np.ndarray) -> "_Pieces":
        lengths = np.diff(offsets)
        return cls(len(lengths), lengths, [(data, offsets[:-1], lengths, None)])

    @classmethod
    def const(cls, blob: bytes, n: int, mask: Optional[np.ndarray] = None) -> "_Pieces":
        lengths = np.full(n, len(blob), dtype=np.int64)
        if mask is not None:
            lengths[~mask] = 0
        return cls(n, lengths, [(blob, None, lengths, None)])

    def then(self, *others: "_Pieces") -> "_Pieces":
        """Row-wise concatenation: row i = self[i] + others[0][i] + ..."""
        leaves = list(self.leaves)
        shift = self.lengths.copy()
        for other in others:
            for buf, src, length, rel in other.leaves:
                leaves.append((buf, src, length, shift.copy() if rel is None else rel + shift))
            shift += other.lengths
        return _Pieces(self.n, shift, leaves)

    def expand(self, present: np.ndarray) -> "_Pieces":
        """Spread m rows over the True slots of `present` (length n); the other rows are empty."""
        n = len(present)
        where = np.flatnonzero(present)

        def spread(arr):
            if arr is None:
                return None
            out = np.zeros(n, dtype=np.int64)
            out[where] = arr
            return out

        leaves = [(buf, spread(src), spread(length), spread(rel)) for buf, src, length, rel in self.leaves]
        return _Pieces(n, spread(self.lengths), leaves)

    def materialize(self) -> Tuple[np.ndarray, np.ndarray]:
        """(uint8 buffer, int64 offsets n+1) of the concatenated rows."""
        offsets = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), dtype=np.uint8)
        starts = offsets[:-1]
        for buf, src, length, rel in self.leaves:
            dest = starts if rel is None else starts + rel
            _gather(out, dest, buf, src, length)
        return out, offsets


def _gather(out: np.ndarray, dest: np.ndarray, buf, src: Optional[np.ndarray], length: np.ndarray) -> None:
    """out[dest[i] : dest[i] + length[i]] = buf[src[i] : src[i] + length[i]] for every row i."""
    if src is None:  # a constant blob in every row where length > 0
        blob = bytes(buf)
        if blob and length.any():
            rows = dest if length.all() else dest[length > 0]
            for k, byte in enumerate(blob):  # one pass per byte: cheaper than an n x len index
                out[rows + k] = byte
        return
    total = int(length.sum())
    if total == 0:
        return
    keep = length > 0
    if not keep.all():
        dest, src, length = dest[keep], src[keep], length[keep]
    if len(length) == total:  # one byte per row
        out[dest] = buf[src]
        return
    longest = int(length.max())
    if longest <= _SHORT:  # varints and other short pieces: one pass per byte position
        for k in range(longest):
            if k:
                more = length > k
                dest, src, length = dest[more], src[more], length[more]
            out[dest + k] = buf[src + k]
        return
    if total >= _LONG * len(length):  # long pieces (images): one slice copy (memcpy) per piece
        for d, a, k in zip(dest.tolist(), src.tolist(), length.tolist()):
            out[d : d + k] = buf[a : a + k]
        return
    if total > _GATHER_BYTES and len(length) > 1:  # bounded index arrays: gather in slices of rows
        ends = np.cumsum(length)
        cuts = np.searchsorted(ends, np.arange(_GATHER_BYTES, total, _GATHER_BYTES), side="right")
        bounds = [0, *sorted(set(cuts.tolist()) - {0, len(length)}), len(length)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            _gather(out, dest[a:b], buf, src[a:b], length[a:b])
        return
    first = int(src[0])
    contiguous = int(src[-1] + length[-1]) - first == total and np.array_equal(src[1:], src[:-1] + length[:-1])
    index = np.repeat(dest - (src - first) if contiguous else dest, length)
    if contiguous:
        index += _arange(total)
        out[index] = buf[first : first + total]
        return
    within = _arange(total) - np.repeat(np.cumsum(length) - length, length)
    out[index + within] = buf[np.repeat(src, length) + within]


_ARANGE = np.arange(0, dtype=np.int64)


def _arange(n: int) -> np.ndarray:
    """A read-only view of 0..n-1, kept between calls (allocating big aranges is what costs);
    `_gather` never asks for more than _GATHER_BYTES, so it stays at most 32 MiB."""
    global _ARANGE
    if len(_ARANGE) < n:
        _ARANGE = np.arange(max(n, 2 * len(_ARANGE)), dtype=np.int64)
        _ARANGE.flags.writeable = False
    return _ARANGE[:n]


# ---------------------------------------------------------------------------------------------
# Varints


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of the base-128 varint of each value (int64 values as their two's complement)."""
    u = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    sizes = np.ones(len(u), dtype=np.int64)
    for threshold in _THRESHOLDS:
        more = u >= threshold
        if not more.any():
            break
        sizes += more
    return sizes


def _varint_buffer(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The varints of all values back to back, and where each starts (n+1 offsets)."""
    u = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    sizes = varint_sizes(u)
    offsets = np.zeros(len(u) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if len(u) and sizes.max() == 1:
        return u.astype(np.uint8), offsets
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    starts = offsets[:-1]
    for k in range(int(sizes.max(initial=0))):
        rows = np.flatnonzero(sizes > k) if k else slice(None)
        chunk = ((u[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        chunk |= (sizes[rows] > k + 1).astype(np.uint8) << 7
        out[starts[rows] + k] = chunk
    return out, offsets


def varints(values: np.ndarray) -> _Pieces:
    """Each value as its varint: one row per value."""
    return _Pieces.ragged(*_varint_buffer(values))


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: int, body: _Pieces, mask: Optional[np.ndarray] = None) -> _Pieces:
    """Each row as `tag varint(len) body` (rows where `mask` is False stay empty)."""
    head = _Pieces.const(bytes([tag]), body.n, mask)
    size = varints(body.lengths)
    if mask is not None and not mask.all():
        size = _masked(size, mask)
    return head.then(size, body)


def _masked(pieces: _Pieces, mask: np.ndarray) -> _Pieces:
    lengths = np.where(mask, pieces.lengths, 0)
    leaves = [(buf, src, np.where(mask, length, 0), rel) for buf, src, length, rel in pieces.leaves]
    return _Pieces(pieces.n, lengths, leaves)


def _regroup(pieces: _Pieces, splits: np.ndarray) -> _Pieces:
    """Rows of `pieces` joined into groups by `splits` (materializes them once)."""
    if len(splits) == pieces.n + 1 and np.array_equal(splits, np.arange(pieces.n + 1)):
        return pieces  # one row per group: nothing to join
    data, offsets = pieces.materialize()
    return _Pieces.ragged(data, offsets[splits])


# ---------------------------------------------------------------------------------------------
# Features


def _list_bodies(col: _Col) -> _Pieces:
    """The BytesList / FloatList / Int64List message body of each row of `col.splits`."""
    splits = col.splits
    counts = np.diff(splits)
    if col.kind == KIND_BYTES:
        data, offsets = col.values, col.value_offsets
        assert offsets is not None  # checked_arrays rejects a bytes column without value_offsets
        if offsets[0] != 0:
            data, offsets = data[offsets[0] :], offsets - offsets[0]
        value = _Pieces.ragged(data, offsets)
        per_value = _Pieces.const(b"\x0a", len(offsets) - 1).then(varints(value.lengths), value)
        return _regroup(per_value, splits)
    if col.kind == KIND_FLOAT:
        packed = _Pieces.ragged(col.values.view(np.uint8), splits * 4)
    else:
        data, offsets = _varint_buffer(col.values)
        packed = _Pieces.ragged(data, offsets[splits])
    return _length_delimited(0x0A, packed, counts > 0)


def _feature_pieces(col: _Col) -> _Pieces:
    """The Feature message (kind tag + list) of each row of `col.splits`."""
    return _length_delimited(_KIND_TAG[col.kind], _list_bodies(col))


def _features(cols: Sequence[_Col], n: int) -> _Pieces:
    """The Features message body (map entries in upb order) of each of n rows."""
    body = _Pieces(n, np.zeros(n, dtype=np.int64), [])
    for col in sorted(cols, key=lambda c: upb_key(c.name)):
        feature = _feature_pieces(col)
        if col.empty is not None:  # NO_KIND rows: an empty Feature message
            feature = _masked(feature, ~col.empty)
        body = body.then(_map_entry(col.name, feature, col.present))
    return body


def _map_entry(name: str, value: _Pieces, present: Optional[np.ndarray]) -> _Pieces:
    """`0a varint(len) {0a name 12 varint(len) value}` per row; absent rows are empty."""
    key = name.encode("utf-8")
    key_field = b"\x0a" + _varint_bytes(len(key)) + key + b"\x12"
    if present is not None:
        value = _compact(value, present)
    entry = _Pieces.const(key_field, value.n).then(varints(value.lengths), value)
    wrapped = _length_delimited(0x0A, entry)
    return wrapped.expand(present) if present is not None else wrapped


def _compact(pieces: _Pieces, present: np.ndarray) -> _Pieces:
    keep = np.flatnonzero(present)
    leaves = [
        (buf, None if src is None else src[keep], length[keep], None if rel is None else rel[keep])
        for buf, src, length, rel in pieces.leaves
    ]
    return _Pieces(len(keep), pieces.lengths[keep], leaves)


def _feature_lists(cols: Sequence[_Col], n: int) -> _Pieces:
    """The FeatureLists message body of each row (one map entry per present feature list)."""
    body = _Pieces(n, np.zeros(n, dtype=np.int64), [])
    for col in sorted(cols, key=lambda c: upb_key(c.name)):
        steps = _length_delimited(0x0A, _feature_pieces(col))  # FeatureList.feature, one per step
        assert col.groups is not None  # _list_columns sets groups on every feature-list column
        body = body.then(_map_entry(col.name, _regroup(steps, col.groups), col.present))
    return body


# ---------------------------------------------------------------------------------------------
# Arguments, checked as the compiled encoder checks them


def check_column(j: int, kind: int, values: np.ndarray, splits: np.ndarray, voffs, status, n: int) -> None:
    """Raise ValueError unless splits/offsets index inside the values (as the C layer checks)."""
    if len(splits) != n + 1:
        raise ValueError(f"column {j}: row_splits must have n+1 = {n + 1} items")
    if status is not None and len(status) != n:
        raise ValueError("status must have n items")
    bad = bool(n and (np.any(splits[:n] < 0) or np.any(np.diff(splits) < 0)))
    nvalues = len(values) if kind != KIND_BYTES else len(voffs) - 1
    if kind == KIND_BYTES and not bad:
        bad = bool(np.any(voffs < 0) or np.any(np.diff(voffs) < 0) or voffs[-1] > len(values))
    if bad or splits[n] < 0 or splits[n] > nvalues:
        raise ValueError(f"column {j}: row_splits or value_offsets are not consistent with the values")


def checked_arrays(j: int, kind: int, values: Any, splits: Any, voffs: Any, status: Any, n: int):
    """(values, splits, value_offsets, status) as the encoders take them: contiguous arrays of
    the kind's dtype, int64 splits and offsets, uint8 status; ValueError as the C layer."""
    if kind not in KIND_DTYPE:
        raise ValueError("kind must be 1, 2 or 3")
    values = np.ascontiguousarray(values, dtype=KIND_DTYPE[kind]).ravel()
    splits = np.asarray(splits, dtype=np.int64).ravel()
    if kind == KIND_BYTES:
        if voffs is None:
            raise ValueError("bytes columns need value_offsets")
        voffs = np.asarray(voffs, dtype=np.int64).ravel()
        if len(voffs) < 1:
            raise ValueError("value_offsets is empty")
    else:
        voffs = None
    if status is not None:
        status = np.asarray(status, dtype=np.uint8).ravel()
    check_column(j, kind, values, splits, voffs, status, n)
    return values, splits, voffs, status


def _masks(status: Optional[np.ndarray]) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """(present, empty) of a status array; None for a mask that is all True / all False."""
    if status is None:
        return None, None
    present = status != MISSING
    empty = status == NO_KIND
    return (None if present.all() else present), (empty if empty.any() else None)


def _example_columns(columns: Sequence[tuple], n: int) -> List[_Col]:
    if n < 0:
        raise ValueError("n < 0")
    out = []
    for j, (name, kind, values, splits, voffs, status) in enumerate(columns):
        values, splits, voffs, status = checked_arrays(j, kind, values, splits, voffs, status, n)
        out.append(_Col(name.decode("utf-8"), kind, values, splits, voffs, *_masks(status), None))
    return out


def _list_columns(columns: Sequence[tuple], n: int, first: int) -> List[_Col]:
    out = []
    for j, (name, kind, values, row_splits, step_splits, voffs, status) in enumerate(columns, first):
        steps = np.asarray(step_splits, dtype=np.int64).ravel()
        groups = np.asarray(row_splits, dtype=np.int64).ravel()
        if len(groups) != n + 1 or (n and (np.any(np.diff(groups) < 0) or groups[0] < 0)) or groups[n] > len(steps) - 1:
            raise ValueError(f"column {j}: row_splits are not consistent with the steps")
        values, steps, voffs, _ = checked_arrays(j, kind, values, steps, voffs, None, len(steps) - 1)
        present = None if status is None else np.asarray(status, dtype=np.uint8).ravel() != MISSING
        if present is not None and len(present) != n:
            raise ValueError("status must have n items")
        out.append(
            _Col(
                name.decode("utf-8"),
                kind,
                values,
                steps,
                voffs,
                None if present is None or present.all() else present,
                None,
                groups,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Entry points


def encode_examples(
    columns: Sequence[tuple], n: int, framed: bool = False
) -> Union[Tuple[np.ndarray, np.ndarray], bytes]:
    """Serialize n Examples from columns (see the module docstring) as upb does. Returns
    `(payload bytes as uint8 array, offsets int64 n+1)`, or one framed bytes object when `framed`."""
    data, offsets = _examples(columns, n).materialize()
    return frame_records(split_payloads(data, offsets)) if framed else (data, offsets)


def example_lengths(columns: Sequence[tuple], n: int) -> np.ndarray:
    """The int64 length of each of the n payloads `encode_examples(columns, n)` would write:
    the lengths its pieces already know, before any byte is gathered."""
    return _examples(columns, n).lengths.astype(np.int64, copy=False)


def _examples(columns: Sequence[tuple], n: int) -> _Pieces:
    """The n Example payloads (field 1, the Features message) as pieces, not yet gathered."""
    return _length_delimited(0x0A, _features(_example_columns(columns, n), n))


def encode_sequence_examples(context: Sequence[tuple], lists: Sequence[tuple], n: int) -> Tuple[np.ndarray, np.ndarray]:
    """Serialize n SequenceExamples (context columns + feature-list columns), as upb does;
    `(uint8 buffer, int64 offsets n+1)`.

    `feature_lists` is written only in rows that have at least one feature list, matching
    `example.encode_sequence_example`. The compiled core has no SequenceExample batch
    encoder, so both engines run this one.
    """
    ctx_cols = _example_columns(context, n)
    list_cols = _list_columns(lists, n, len(ctx_cols))
    ctx = _length_delimited(0x0A, _features(ctx_cols, n))
    has_lists = np.zeros(n, dtype=bool)
    for col in list_cols:
        if col.present is None:
            has_lists[:] = True
        else:
            has_lists |= col.present
    return ctx.then(_length_delimited(0x12, _feature_lists(list_cols, n), has_lists)).materialize()


def split_payloads(data: np.ndarray, offsets: np.ndarray) -> List[bytes]:
    """One bytes object per record of an encoded batch."""
    buf = data.tobytes()
    bounds = offsets.tolist()
    return [buf[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
