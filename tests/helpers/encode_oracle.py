"""The reference columns -> Examples encoder: one upb message per record (slow, obviously right).

It was the pure engine's twin of the compiled `encode_examples` until the vectorised numpy
encoder (`tfrecord_beam._engine._encode`, 5x faster) took that place; the parity tests keep it
as the oracle both engines' bytes must equal. Same arguments and argument checks.
"""

from __future__ import annotations

import numpy as np

from tfrecord_beam._engine._common import KIND_BYTES, KIND_FLOAT, KIND_INT64, MISSING, NO_KIND, PRESENT
from tfrecord_beam._engine._encode import checked_arrays
from tfrecord_beam._engine._framing import frame_records
from tfrecord_beam._proto import Example

_FIELD_OF = {KIND_BYTES: "bytes_list", KIND_FLOAT: "float_list", KIND_INT64: "int64_list"}


def _packed_float_list(vals: np.ndarray) -> bytes:
    """A serialized FloatList holding `vals` bit for bit."""
    raw = vals.astype("<f4").tobytes()
    n, head = len(raw), bytearray(b"\x0a")
    while n >= 0x80:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + raw


def encode_examples(columns, n: int, framed: bool = False):
    """Serialize n Examples from columns `(name, kind, values, row_splits, value_offsets,
    status)` with upb's deterministic serialization. Returns `(payload bytes as uint8 array,
    offsets int64 n+1)`, or one framed bytes object when `framed`."""
    if n < 0:
        raise ValueError("n < 0")
    cols = []
    for j, (name, kind, values, splits, voffs, status) in enumerate(columns):
        values, splits, voffs, status = checked_arrays(j, kind, values, splits, voffs, status, n)
        cols.append((name.decode("utf-8"), kind, values, splits, voffs, status))
    payloads = []
    for i in range(n):
        ex = Example()
        ex.features.SetInParent()
        fmap = ex.features.feature
        for name, kind, values, splits, voffs, status in cols:
            s = PRESENT if status is None else int(status[i])
            if s == MISSING:
                continue
            feature = fmap[name]
            feature.SetInParent()
            if s == NO_KIND:
                continue
            lst = getattr(feature, _FIELD_OF[kind])
            lst.SetInParent()
            a, b = int(splits[i]), int(splits[i + 1])
            if kind == KIND_FLOAT and b > a:
                lst.MergeFromString(_packed_float_list(values[a:b]))
            elif kind == KIND_INT64:
                lst.value.extend(values[a:b].tolist())
            elif kind == KIND_BYTES:
                lst.value.extend(bytes(values[voffs[k] : voffs[k + 1]]) for k in range(a, b))
        payloads.append(ex.SerializeToString(deterministic=True))
    if framed:
        return frame_records(payloads)
    lens = np.fromiter((len(p) for p in payloads), dtype=np.int64, count=n)
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lens, dtype=np.int64)])
    return np.frombuffer(b"".join(payloads), dtype=np.uint8).copy(), offsets
