"""Columns -> serialized Example / SequenceExample payloads, vectorised with numpy.

The pure twin of the compiled `columnar.encode_examples`: the output bytes equal upb's
deterministic serialization (`example.encode_example`) for the same values, map keys in
upb's order. Every step works on whole columns (varints of all values at once, length
prefixes of all rows at once); bytes are copied into the output in one gather per leaf.

Column form (shared with the compiled encoder): per feature a `values` array (int64,
float32, or one uint8 buffer plus `value_offsets`), `row_splits` (int64, n+1) and an
optional `present` mask (absent rows have empty splits and no feature in their record).
A sequence column adds `step_splits` (n+1): `row_splits` then splits values into steps and
`step_splits` groups steps into records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

BYTES, FLOAT, INT = "byte", "float", "int"
_KIND_TAG = {BYTES: 0x0A, FLOAT: 0x12, INT: 0x1A}  # Feature.bytes_list / float_list / int64_list
_SHORT = 12  # pieces up to this long are copied position by position
_LONG = 256  # pieces this long on average are copied row by row (memory: the rows, not 8x their bytes)
_GATHER_BYTES = 1 << 22  # copy at most this many bytes per gather (bounds the index arrays)
_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


@dataclass
class Column:
    """One feature of a batch in columnar form (see the module docstring)."""

    name: str
    kind: str
    values: np.ndarray
    row_splits: np.ndarray
    value_offsets: Optional[np.ndarray] = None
    present: Optional[np.ndarray] = None
    step_splits: Optional[np.ndarray] = None

    @property
    def num_rows(self) -> int:
        splits = self.step_splits if self.step_splits is not None else self.row_splits
        return len(splits) - 1


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
    if total >= _LONG * len(length):  # long pieces: a slice copy per row, no index arrays (8 bytes per byte)
        for d, s, k in zip(dest.tolist(), src.tolist(), length.tolist()):
            out[d : d + k] = buf[s : s + k]
        return
    longest = int(length.max())
    if longest <= _SHORT:  # varints and other short pieces: one pass per byte position
        for k in range(longest):
            if k:
                more = length > k
                dest, src, length = dest[more], src[more], length[more]
            out[dest + k] = buf[src + k]
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


def _list_bodies(col: Column) -> _Pieces:
    """The BytesList / FloatList / Int64List message body of each row of `col.row_splits`."""
    splits = np.asarray(col.row_splits, dtype=np.int64)
    counts = np.diff(splits)
    if col.kind == BYTES:
        offsets = np.asarray(col.value_offsets, dtype=np.int64)
        data = np.frombuffer(col.values, dtype=np.uint8) if not isinstance(col.values, np.ndarray) else col.values
        data = data.view(np.uint8)
        if offsets[0] != 0:
            data, offsets = data[offsets[0] :], offsets - offsets[0]
        value = _Pieces.ragged(data, offsets)
        per_value = _Pieces.const(b"\x0a", len(offsets) - 1).then(varints(value.lengths), value)
        return _regroup(per_value, splits - splits[0])
    if col.kind == FLOAT:
        raw = np.ascontiguousarray(col.values, dtype=np.float32).view(np.uint8)
        packed = _Pieces.ragged(raw, splits * 4)
    else:
        data, offsets = _varint_buffer(np.ascontiguousarray(col.values, dtype=np.int64))
        packed = _Pieces.ragged(data, offsets[splits])
    return _length_delimited(0x0A, packed, counts > 0)


def _features(cols: Sequence[Column], n: int) -> _Pieces:
    """The Features message body (map entries in upb order) of each of n rows."""
    body = _Pieces(n, np.zeros(n, dtype=np.int64), [])
    for col in sorted(cols, key=lambda c: upb_key(c.name)):
        body = body.then(_map_entry(col.name, _feature_pieces(col), col.present))
    return body


def _feature_pieces(col: Column) -> _Pieces:
    """The Feature message (kind tag + list) of each row of `col.row_splits`."""
    return _length_delimited(_KIND_TAG[col.kind], _list_bodies(col))


def _map_entry(name: str, value: _Pieces, present: Optional[np.ndarray]) -> _Pieces:
    """`0a varint(len) {0a name 12 varint(len) value}` per row; absent rows are empty."""
    key = name.encode("utf-8")
    key_field = b"\x0a" + _varint_bytes(len(key)) + key + b"\x12"
    if present is not None and not present.all():
        present = np.asarray(present, dtype=bool)
        value = _compact(value, present)
    entry = _Pieces.const(key_field, value.n).then(varints(value.lengths), value)
    wrapped = _length_delimited(0x0A, entry)
    return wrapped.expand(present) if present is not None and not present.all() else wrapped


def _compact(pieces: _Pieces, present: np.ndarray) -> _Pieces:
    keep = np.flatnonzero(present)
    leaves = [
        (buf, None if src is None else src[keep], length[keep], None if rel is None else rel[keep])
        for buf, src, length, rel in pieces.leaves
    ]
    return _Pieces(len(keep), pieces.lengths[keep], leaves)


def _feature_lists(cols: Sequence[Column], n: int) -> _Pieces:
    """The FeatureLists message body of each row (one map entry per present sequence column)."""
    body = _Pieces(n, np.zeros(n, dtype=np.int64), [])
    for col in sorted(cols, key=lambda c: upb_key(c.name)):
        steps = _length_delimited(0x0A, _feature_pieces(col))  # FeatureList.feature, one per step
        step_splits = np.asarray(col.step_splits, dtype=np.int64)
        feature_list = _regroup(steps, step_splits - step_splits[0])
        body = body.then(_map_entry(col.name, feature_list, col.present))
    return body


def encode_examples(columns: Sequence[Column], num_rows: int) -> Tuple[np.ndarray, np.ndarray]:
    """Serialize `num_rows` Examples from columns; returns (uint8 buffer, int64 offsets n+1)."""
    return _length_delimited(0x0A, _features(columns, num_rows)).materialize()


def encode_sequence_examples(
    context: Sequence[Column], sequences: Sequence[Column], num_rows: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Serialize `num_rows` SequenceExamples (context features + feature lists), as upb does.

    `feature_lists` is written only in rows that have at least one feature list, matching
    `example.encode_sequence_example`.
    """
    ctx = _length_delimited(0x0A, _features(context, num_rows))
    lists = _feature_lists(sequences, num_rows)
    has_lists = np.zeros(num_rows, dtype=bool)
    for col in sequences:
        has_lists |= np.ones(num_rows, dtype=bool) if col.present is None else np.asarray(col.present, dtype=bool)
    return ctx.then(_length_delimited(0x12, lists, has_lists)).materialize()


def split_payloads(data: np.ndarray, offsets: np.ndarray) -> List[bytes]:
    """One bytes object per record of an encoded batch."""
    buf = data.tobytes()
    bounds = offsets.tolist()
    return [buf[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
