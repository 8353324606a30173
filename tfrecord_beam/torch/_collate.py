"""Records -> samples and batches: the one place the datasets decode payloads.

Batch layout (what `TFRecordDataset(batch_size=...)` yields), one entry per feature:

* float / int feature `x`: `batch["x"]` is a float32 / int64 tensor of shape [B, L] where L
  is the longest row in the batch; shorter rows (variable-length or missing features) are
  padded with zeros, and `batch["x_lengths"]` (int64, [B]) says how many values each row
  really has. A fixed-length feature is therefore simply a dense [B, L] tensor.
* bytes feature `x`: `batch["x"]` is a 1-D numpy object array of B entries, each `bytes` when
  the record holds one value, else a list of `bytes` (an object array rather than a list
  because the DataLoader's `default_convert` walks lists element by element, which costs
  more than decoding them).

`decode_batch` is the one place batches are decoded: payloads into columns (values + row
splits) by `tfrecord_beam.columnar` (compiled, or its pure twin); everything after that
works on columns.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import columnar
from ..errors import DecodeError
from ..example import BYTES, decode_example, decode_sequence_example, parse_example
from ._stream import AnyBlock, Block, Item

LENGTHS_SUFFIX = "_lengths"

# A column: (kind, values, row_splits, value_offsets). Numbers: value_offsets is None. Bytes:
# values is one uint8 buffer and value_offsets (n values + 1) cut it.
Column = Tuple[Optional[str], Any, Optional[np.ndarray], Optional[np.ndarray]]


def decode_record(item: Item, description: Optional[Dict[str, Optional[str]]],
                  sequence_description: Optional[Dict[str, Optional[str]]], sequence: bool) -> Any:
    """One record as the `tfrecord` package yields it: a dict, or (context, sequences)."""
    payload, path, offset, number = item
    if sequence:
        return decode_sequence_example(payload, description, sequence_description, path=path, offset=offset,
                                       record_number=number)
    return decode_example(payload, description, path=path, offset=offset, record_number=number)


def _feature_names(blocks: Sequence[AnyBlock]) -> Dict[str, None]:
    """Every feature name in the batch, in order of first appearance (for description=None)."""
    names: Dict[str, None] = {}
    for block in blocks:
        for i, payload in enumerate(block.payloads()):
            path, offset, number = block.where(i)
            for name in parse_example(payload, path=path, offset=offset, record_number=number).features.feature:
                names.setdefault(name, None)
    return names


def _where(blocks: Sequence[AnyBlock], i: int) -> Tuple[str, int, Optional[int]]:
    """(path, offset, record number) of the batch's record i."""
    for block in blocks:
        if i < len(block):
            return block.where(i)
        i -= len(block)
    raise IndexError(i)


def decode_batch(blocks: Sequence[AnyBlock], description: Optional[Dict[str, Optional[str]]]) -> Dict[str, Column]:
    """Decode a batch of Examples into columns: the one place batches are decoded.

    A batch inside one reader chunk is decoded straight from the chunk's buffer. Features are
    the described ones or, without a description, every feature seen in the batch (kinds
    from the first record that has each). Errors name the file and record.
    """
    wanted = description if description is not None else _feature_names(blocks)
    if len(blocks) == 1 and isinstance(blocks[0], Block):
        block = blocks[0]
        records, offsets, lengths = block.buffer, block.payload_offsets, block.payload_lengths
    else:
        records, offsets, lengths = [p for block in blocks for p in block.payloads()], None, None
    try:
        columns = columnar.decode_examples(records, wanted, offsets=offsets, lengths=lengths, first_record_number=0)
    except DecodeError as exc:  # it names the batch position: name the file and record instead
        path, offset, number = _where(blocks, exc.record_number)
        raise type(exc)(path, offset, number, exc.reason) from None
    return {name: (c.kind, c.values, c.row_splits, c.value_offsets) for name, c in columns.items()}


def _object_array(values: List[Any], nested: bool = True) -> np.ndarray:
    """A 1-D object array holding `values` as they are (lists stay lists, not a 2nd axis)."""
    out = np.empty(len(values), dtype=object)
    if nested:
        for i, v in enumerate(values):
            out[i] = v
    else:
        out[:] = values
    return out


def _bytes_rows(values: np.ndarray, row_splits: np.ndarray, value_offsets: np.ndarray) -> np.ndarray:
    """Per row: `bytes` when it holds one value, else a list of `bytes` (an object array)."""
    buf = values.tobytes()
    offs = value_offsets.tolist()
    flat = [buf[a:b] for a, b in zip(offs, offs[1:])]
    if len(flat) == len(row_splits) - 1 and np.array_equal(row_splits, np.arange(len(row_splits))):
        return _object_array(flat, nested=False)  # one value per row, the common case
    splits = row_splits.tolist()
    return _object_array([flat[a] if b - a == 1 else flat[a:b] for a, b in zip(splits[:-1], splits[1:])])


def padded(values: np.ndarray, row_splits: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(values as a zero-padded [B, max length] array, lengths [B]) from values + row splits."""
    lengths = row_splits[1:] - row_splits[:-1]
    rows = len(lengths)
    width = int(lengths.max()) if rows else 0
    if rows and np.all(lengths == width):
        return values.reshape(rows, width), lengths
    out = np.zeros((rows, width), dtype=values.dtype)
    out[np.arange(width) < lengths[:, None]] = values
    return out, lengths


class Batch(dict):
    """A batch: a plain dict of tensors and object arrays, except in how it is pickled.

    Sent from a DataLoader worker, each tensor would go through its own shared-memory segment
    and file-descriptor handshake (about half a millisecond each here, more than decoding the
    batch); a `Batch` travels as numpy arrays in the pickle stream instead and becomes
    tensors again, without a copy, on arrival.
    """

    def __copy__(self) -> "Batch":  # the DataLoader's default_convert copies batches: stay cheap
        return Batch(self)

    def __reduce__(self):
        tensors = {k: v.numpy() for k, v in self.items() if isinstance(v, torch.Tensor) and not v.requires_grad}
        others = {k: v for k, v in self.items() if k not in tensors}
        return (_rebuild_batch, (tensors, others, list(self)))


def _rebuild_batch(tensors: Dict[str, np.ndarray], others: Dict[str, Any], order: List[str]) -> Batch:
    return Batch((k, torch.from_numpy(tensors[k]) if k in tensors else others[k]) for k in order)


def columns_to_batch(columns: Dict[str, Column]) -> Batch:
    """Columns as tensors (numbers) and object arrays (bytes), laid out as the module docstring says."""
    batch = Batch()
    for name, (kind, values, splits, value_offsets) in columns.items():
        if kind == BYTES:
            batch[name] = _bytes_rows(values, splits, value_offsets)
            continue
        dense, lengths = padded(values, splits)
        key = name + LENGTHS_SUFFIX
        if key in columns:
            raise ValueError(f"feature {key!r} clashes with the lengths of feature {name!r} in a batch; "
                             "rename one of them or use a description without it")
        batch[name] = torch.from_numpy(np.ascontiguousarray(dense))
        batch[key] = torch.from_numpy(np.ascontiguousarray(lengths))
    return batch


def collate_examples(blocks: Sequence[AnyBlock], description: Optional[Dict[str, Optional[str]]]) -> Batch:
    """A batch of Examples (parts of blocks) as tensors: `decode_batch` then `columns_to_batch`."""
    return columns_to_batch(decode_batch(blocks, description))
