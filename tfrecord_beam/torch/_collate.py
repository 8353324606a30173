"""Records -> samples and batches: the one place the datasets decode payloads.

Batch layout (what `TFRecordDataset(batch_size=...)` yields), one entry per feature:

* float / int feature `x`: `batch["x"]` is a float32 / int64 tensor of shape [B, L] where L
  is the longest row in the batch; shorter rows (variable-length or missing features) are
  padded with zeros, and `batch["x_lengths"]` (int64, [B]) says how many values each row
  really has. A fixed-length feature is therefore simply a dense [B, L] tensor.
* bytes feature `x`: `batch["x"]` is a list of B entries, each `bytes` when the record holds
  one value, else a list of `bytes` (as per-record decoding, with lists for object arrays).

`decode_batch` is the swap point for the compiled columnar decoder: it turns payloads into
columns (values + row splits); everything after that works on columns.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..example import BYTES, FLOAT, INT, decode_example, decode_sequence_example
from ._files import Item

LENGTHS_SUFFIX = "_lengths"
_DTYPES = {FLOAT: np.float32, INT: np.int64}

# A column: (kind, values, row_splits) for numbers; (BYTES, per-row values, None) for bytes.
Column = Tuple[Optional[str], Any, Optional[np.ndarray]]


def decode_record(item: Item, description: Optional[Dict[str, Optional[str]]],
                  sequence_description: Optional[Dict[str, Optional[str]]], sequence: bool) -> Any:
    """One record as the `tfrecord` package yields it: a dict, or (context, sequences)."""
    payload, path, offset, number = item
    if sequence:
        return decode_sequence_example(payload, description, sequence_description, path=path, offset=offset,
                                       record_number=number)
    return decode_example(payload, description, path=path, offset=offset, record_number=number)


def _row_kind(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return FLOAT
    if isinstance(value, np.ndarray) and value.dtype == np.int64:
        return INT
    return BYTES


def decode_batch(items: Sequence[Item], description: Optional[Dict[str, Optional[str]]]) -> Dict[str, Column]:
    """Decode Examples into columns, per feature (the columnar decoder's job once it lands).

    Features are the described ones, or (no description) every feature seen in the batch in
    order of first appearance. Raises TypeError naming the record when a feature changes kind
    between records.
    """
    rows = [decode_record(item, description, None, False) for item in items]
    names: List[str] = list(description) if description is not None else list(dict.fromkeys(k for r in rows for k in r))
    columns: Dict[str, Column] = {}
    for name in names:
        values = [r.get(name) for r in rows]
        kind = description.get(name) if description is not None else None
        for item, value in zip(items, values):
            row_kind = _row_kind(value)
            if row_kind is None:
                continue
            if kind is None:
                kind = row_kind
            elif row_kind != kind and not (isinstance(value, np.ndarray) and value.size == 0):
                where = f"{item[1]}, record {item[3]}" if item[3] is not None else f"{item[1]}, byte offset {item[2]}"
                raise TypeError(f"{where}: feature {name!r} is {row_kind!r} but earlier records have {kind!r}")
        if kind in _DTYPES:
            dtype = _DTYPES[kind]
            arrays = [np.zeros(0, dtype) if v is None or v.size == 0 else v for v in values]
            lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
            splits = np.zeros(len(arrays) + 1, dtype=np.int64)
            np.cumsum(lengths, out=splits[1:])
            flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype)
            columns[name] = (kind, flat.astype(dtype, copy=False), splits)
        else:
            rows_out = [list(v) if isinstance(v, np.ndarray) else v for v in values]
            columns[name] = (kind, rows_out, None)
    return columns


def padded(values: np.ndarray, row_splits: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(values as a zero-padded [B, max length] array, lengths [B]) from values + row splits."""
    lengths = np.diff(row_splits)
    rows = len(lengths)
    width = int(lengths.max()) if rows else 0
    if rows and np.all(lengths == width):
        return values.reshape(rows, width), lengths
    out = np.zeros((rows, width), dtype=values.dtype)
    out[np.arange(width) < lengths[:, None]] = values
    return out, lengths


def columns_to_batch(columns: Dict[str, Column]) -> Dict[str, Any]:
    """Columns as tensors (numbers) and lists (bytes), laid out as the module docstring says."""
    batch: Dict[str, Any] = {}
    for name, (kind, values, splits) in columns.items():
        if splits is None:
            batch[name] = values
            continue
        dense, lengths = padded(values, splits)
        key = name + LENGTHS_SUFFIX
        if key in columns:
            raise ValueError(f"feature {key!r} clashes with the lengths of feature {name!r} in a batch; "
                             "rename one of them or use a description without it")
        batch[name] = torch.from_numpy(np.ascontiguousarray(dense))
        batch[key] = torch.from_numpy(lengths)
    return batch


def collate_examples(items: Sequence[Item], description: Optional[Dict[str, Optional[str]]]) -> Dict[str, Any]:
    """A batch of Examples as tensors: `decode_batch` then `columns_to_batch`."""
    return columns_to_batch(decode_batch(items, description))
