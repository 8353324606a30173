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

A batch of SequenceExamples is a `SequenceBatch(context, sequences)` (a named tuple, so
`context, sequences = batch` works and the DataLoader keeps it a tuple):

* `context`: the context features, laid out exactly as an Example batch above.
* numeric feature list `s`: `sequences["s"]` is a float32 / int64 tensor [B, T, L], T the most
  steps of any record in the batch and L the longest step, zero-padded;
  `sequences["s_steps"]` (int64 [B]) is each record's number of steps and
  `sequences["s_lengths"]` (int64 [B, T]) each step's number of values (0 for padding steps).
  Record i's step t holds `s[i, t, :s_lengths[i, t]]` for `t < s_steps[i]`.
* bytes feature list `s`: `sequences["s"]` is a 1-D numpy object array of B entries, each a
  list of the record's steps (possibly empty), each step `bytes` when it holds exactly one
  value, else a list of `bytes` (possibly empty): the Example convention, one level deeper.
  No `s_steps` / `s_lengths`: the lists carry their lengths.
* A missing feature list has 0 steps (and a step whose Feature has no kind set, 0 values), as
  in `tfrecord_beam.columnar`.

Decoding happens in one place, `_decode`: payloads into columns (values + splits) by
`tfrecord_beam.columnar` (compiled, or its pure twin); everything after that works on the
columnar decoder's `Column`s / `SequenceColumn`s.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .. import columnar
from ..columnar import Column, SequenceColumn
from ..errors import DecodeError
from ..example import (
    BYTES,
    decode_example,
    decode_sequence_example,
    has_all_kinds,
    parse_example,
    parse_sequence_example,
)
from . import _ring
from ._stream import AnyBlock, Block, Item

LENGTHS_SUFFIX = "_lengths"
STEPS_SUFFIX = "_steps"

Names = Optional[Dict[str, Optional[str]]]  # a normalized description; None = every feature


def decode_record(
    item: Item,
    description: Optional[Dict[str, Optional[str]]],
    sequence_description: Optional[Dict[str, Optional[str]]],
    sequence: bool,
) -> Any:
    """One record as the `tfrecord` package yields it: a dict (a `Sample`), or (context, sequences)."""
    payload, path, offset, number = item
    if sequence:
        context, lists = decode_sequence_example(
            payload, description, sequence_description, path=path, offset=offset, record_number=number
        )
        return Sample(context), Sample(lists)
    return Sample(decode_example(payload, description, path=path, offset=offset, record_number=number))


def decode_records(
    blocks: Sequence[AnyBlock], description: Names, sequence_description: Names, sequence: bool
) -> Iterator[Any]:
    """The records of parts of blocks, each exactly as `decode_record` gives it, decoded together.

    When the descriptions give every kind, each part is decoded in one columnar call (straight
    from its reader buffer) and the per-record values are cut out of the columns in C;
    otherwise, or in a part holding a bad record, records are decoded one by one, so the
    records before a bad one still come out and its error is the per-record decoder's.
    """
    together = has_all_kinds(description) and (not sequence or has_all_kinds(sequence_description))
    for block in blocks:
        samples: Optional[Iterator[Any]] = None
        if together:
            try:
                if sequence:  # built lazily, record by record: what the consumer drops dies young
                    context, lists = decode_sequence_batch([block], description, sequence_description)
                    samples = ((Sample(c), Sample(s)) for c, s in columnar.to_sequence_records(context, lists))
                elif isinstance(block, Block):  # straight from the reader buffer, bytes copied once
                    samples = map(
                        Sample,
                        columnar.decode_example_records(
                            block.buffer, description, offsets=block.payload_offsets, lengths=block.payload_lengths
                        ),
                    )
                else:
                    samples = map(Sample, columnar.to_records(decode_batch([block], description)))
            except DecodeError:  # FeatureKindError too: decoded one by one below, named as always
                samples = None
        if samples is None:
            samples = (decode_record(item, description, sequence_description, sequence) for item in block.items())
        yield from samples


def _feature_names(blocks: Sequence[AnyBlock], sequence: bool) -> Tuple[Dict[str, None], Dict[str, None]]:
    """(context / Example feature names, feature list names) in the batch, in order of first
    appearance: what a description of None stands for."""
    features: Dict[str, None] = {}
    lists: Dict[str, None] = {}
    for block in blocks:
        for i, payload in enumerate(block.payloads()):
            path, offset, number = block.where(i)
            if sequence:
                message = parse_sequence_example(payload, path=path, offset=offset, record_number=number)
                features.update(dict.fromkeys(message.context.feature))
                lists.update(dict.fromkeys(message.feature_lists.feature_list))
            else:
                features.update(
                    dict.fromkeys(
                        parse_example(payload, path=path, offset=offset, record_number=number).features.feature
                    )
                )
    return features, lists


def _where(blocks: Sequence[AnyBlock], i: int) -> Tuple[str, int, Optional[int]]:
    """(path, offset, record number) of the batch's record i."""
    for block in blocks:
        if i < len(block):
            return block.where(i)
        i -= len(block)
    raise IndexError(i)


def _decode(blocks: Sequence[AnyBlock], decoder: Callable[..., Any], *descriptions: Any) -> Any:
    """`decoder(records, *descriptions, ...)` over the batch's records: the one place batches
    are decoded. A batch inside one reader chunk is decoded straight from the chunk's buffer;
    errors name the file and record instead of the batch position."""
    if len(blocks) == 1 and isinstance(blocks[0], Block):
        block = blocks[0]
        records: Union[bytes, List[Any]] = block.buffer
        offsets, lengths = block.payload_offsets, block.payload_lengths
    else:
        # the payloads of a batch spanning blocks: views into the blocks' buffers (no copies)
        records, offsets, lengths = [p for block in blocks for p in block.views()], None, None
    try:
        return decoder(records, *descriptions, offsets=offsets, lengths=lengths, first_record_number=0)
    except DecodeError as exc:  # it names the batch position: name the file and record instead
        if exc.record_number is None:
            raise
        path, offset, number = _where(blocks, exc.record_number)
        raise type(exc)(path, offset, number, exc.reason) from None


def decode_batch(blocks: Sequence[AnyBlock], description: Names) -> Dict[str, Column]:
    """Decode a batch of Examples into columns.

    Features are the described ones or, without a description, every feature seen in the
    batch (kinds from the first record that has each).
    """
    wanted = description if description is not None else _feature_names(blocks, False)[0]
    return _decode(blocks, columnar.decode_examples, wanted)


def decode_sequence_batch(
    blocks: Sequence[AnyBlock], description: Names, sequence_description: Names
) -> Tuple[Dict[str, Column], Dict[str, SequenceColumn]]:
    """Decode a batch of SequenceExamples into (context columns, feature-list columns); a
    description of None means every context feature / feature list seen in the batch."""
    context: Mapping[str, Optional[str]]
    steps: Mapping[str, Optional[str]]
    if description is None or sequence_description is None:
        features, lists = _feature_names(blocks, True)
        context = features if description is None else description
        steps = lists if sequence_description is None else sequence_description
    else:
        context, steps = description, sequence_description
    return _decode(blocks, columnar.decode_sequence_examples, context, steps)


def _object_array(values: List[Any], nested: bool = True) -> np.ndarray:
    """A 1-D object array holding `values` as they are (lists stay lists, not a 2nd axis)."""
    out = np.empty(len(values), dtype=object)
    if nested:
        for i, v in enumerate(values):
            out[i] = v
    else:
        out[:] = values
    return out


LARGE_VALUE = 1024  # mean bytes per value from which values are cut from the array one by one


def _bytes_rows(values: np.ndarray, row_splits: np.ndarray, value_offsets: Optional[np.ndarray]) -> np.ndarray:
    """Per row: `bytes` when it holds one value, else a list of `bytes` (an object array).

    Small values are sliced out of one `bytes` copy of the values (a slice of `bytes` is the
    cheapest cut); large ones (images) straight out of the array, so each byte is copied once.
    """
    if value_offsets is None:
        raise ValueError("a bytes column without value offsets")
    offs = value_offsets.tolist()
    if len(offs) > 1 and values.nbytes >= LARGE_VALUE * (len(offs) - 1):
        view = np.ascontiguousarray(values).data
        flat = [view[a:b].tobytes() for a, b in zip(offs, offs[1:])]
    else:
        buf = values.tobytes()
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
    tensors again, without a copy, on arrival, and its `bytes` go through the dataset's
    shared-memory ring when the worker was forked (`_ring`).
    """

    def __copy__(self) -> "Batch":  # the DataLoader's default_convert copies batches: stay cheap
        return Batch(self)

    def __reduce__(self):
        return _reduce_batch(self, Batch)


def _reduce_batch(batch: "Batch", cls, queue: bool = False) -> tuple:
    """How a `Batch` or `Sample` pickles: tensors as numpy arrays; pickled for a DataLoader's
    queue (`queue`: multiprocessing's ForkingPickler) in a forked worker, its `bytes` through
    the dataset's shared-memory ring (`_ring`) when one is free. Any other pickle (`pickle`,
    `torch.save`, `deepcopy`) holds the whole batch."""
    tensors = {k: v.numpy() for k, v in batch.items() if isinstance(v, torch.Tensor) and not v.requires_grad}
    others = {k: v for k, v in batch.items() if k not in tensors}
    packed = _ring.pack(others) if queue else None
    return (_rebuild_batch, (tensors, others, list(batch), cls, packed))


def _rebuild_batch(
    tensors: Dict[str, np.ndarray], others: Dict[str, Any], order: List[str], cls=None, packed=None
) -> Batch:
    if packed is not None:
        others = {**others, **_ring.unpack(packed)}
    return (cls or Batch)((k, torch.from_numpy(tensors[k]) if k in tensors else others[k]) for k in order)


class Sample(Batch):
    """One record as the per-record datasets yield it: a plain dict of numpy arrays / bytes.

    A dict subclass for one reason: torch's `default_collate` builds a batch of dicts as a
    copy of the first record's type, so the DataLoader's batch is a `Sample` too and, sent
    from a worker, travels as numpy arrays in the pickle stream (as a `Batch` does) instead
    of one shared-memory handshake per tensor.
    """

    __slots__ = ()

    def __copy__(self) -> "Sample":
        return Sample(self)

    def __reduce__(self):
        return _reduce_batch(self, Sample)


def _check_clash(name: str, columns: Dict[str, Any], suffixes: Tuple[str, ...]) -> None:
    for suffix in suffixes:
        if name + suffix in columns:
            raise ValueError(
                f"feature {name + suffix!r} clashes with the {suffix[1:]} of feature {name!r} in a batch; "
                "rename one of them or use a description without it"
            )


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


def columns_to_batch(columns: Dict[str, Column]) -> Batch:
    """Columns as tensors (numbers) and object arrays (bytes), laid out as the module docstring says."""
    batch = Batch()
    for name, col in columns.items():
        if col.kind == BYTES:
            batch[name] = _bytes_rows(col.values, col.row_splits, col.value_offsets)
            continue
        _check_clash(name, columns, (LENGTHS_SUFFIX,))
        dense, lengths = padded(col.values, col.row_splits)
        batch[name] = _tensor(dense)
        batch[name + LENGTHS_SUFFIX] = _tensor(lengths)
    return batch


def padded_steps(
    values: np.ndarray, row_splits: np.ndarray, step_splits: np.ndarray
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values as a zero-padded [B, T, L] array, steps [B], step lengths [B, T]) from values +
    row splits (record -> steps) + step splits (step -> values)."""
    rows, step_lengths = padded(values, step_splits)  # [all steps, L]
    steps = row_splits[1:] - row_splits[:-1]
    records = len(steps)
    most = int(steps.max()) if records else 0
    if records and np.all(steps == most):
        return rows.reshape(records, most, rows.shape[1]), steps, step_lengths.reshape(records, most)
    real = np.arange(most) < steps[:, None]  # [B, T]: True for a record's steps, in order
    out = np.zeros((records, most, rows.shape[1]), dtype=rows.dtype)
    out[real] = rows
    lengths = np.zeros((records, most), dtype=np.int64)
    lengths[real] = step_lengths
    return out, steps, lengths


def _bytes_steps(col: SequenceColumn) -> np.ndarray:
    """Per record, the list of its steps, each as `_bytes_rows` gives a row."""
    steps = _bytes_rows(col.values, col.step_splits, col.value_offsets).tolist()
    splits = col.row_splits.tolist()
    return _object_array([steps[a:b] for a, b in zip(splits[:-1], splits[1:])])


def sequences_to_batch(lists: Dict[str, SequenceColumn]) -> Batch:
    """Feature lists as [B, T, L] tensors with steps and lengths (numbers) or nested lists
    (bytes), laid out as the module docstring says."""
    batch = Batch()
    for name, col in lists.items():
        if col.kind == BYTES:
            batch[name] = _bytes_steps(col)
            continue
        _check_clash(name, lists, (STEPS_SUFFIX, LENGTHS_SUFFIX))
        dense, steps, lengths = padded_steps(col.values, col.row_splits, col.step_splits)
        batch[name] = _tensor(dense)
        batch[name + STEPS_SUFFIX] = _tensor(steps)
        batch[name + LENGTHS_SUFFIX] = _tensor(lengths)
    return batch


class SequenceBatch(NamedTuple):
    """A batch of SequenceExamples: (context features, feature lists), each a `Batch`."""

    context: Batch
    sequences: Batch


def collate_batch(
    blocks: Sequence[AnyBlock], description: Names, sequence_description: Names, sequence: bool
) -> Union[Batch, SequenceBatch]:
    """A batch of records (parts of blocks) as tensors: a `Batch` of Examples, or a
    `SequenceBatch` of SequenceExamples when `sequence`."""
    if not sequence:
        return columns_to_batch(decode_batch(blocks, description))
    context, lists = decode_sequence_batch(blocks, description, sequence_description)
    return SequenceBatch(columns_to_batch(context), sequences_to_batch(lists))


_TORCH_DTYPES: Dict[np.dtype, torch.dtype] = {}  # numpy dtype -> the dtype torch.as_tensor gives it


def _stacked(values: List[Any]) -> Optional[torch.Tensor]:
    """default_collate's tensor for a feature whose values are numeric numpy arrays of one
    dtype and shape (what the per-record datasets hand out for float / int features),
    stacked by one numpy call into a fresh torch tensor; None for anything else.

    default_collate makes one tensor per record (`torch.as_tensor`) and then stacks them:
    ~2 us per record and feature, more than decoding the record. The result is the same
    tensor: same dtype, shape, values, contiguous and resizable (not a view of numpy memory).
    """
    first = values[0]
    if type(first) is not np.ndarray:
        return None
    dtype, shape = first.dtype, first.shape
    if dtype.kind not in "biufc" or not dtype.isnative:
        return None  # strings, objects, dates, other byte orders: torch's own path (and errors)
    for v in values:
        if type(v) is not np.ndarray or v.dtype != dtype or v.shape != shape:
            return None  # ragged or mixed: torch's own path (and its error, made clearer below)
    target = _TORCH_DTYPES.get(dtype)
    if target is None:
        try:
            target = _TORCH_DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype)).dtype
        except TypeError:  # a dtype torch has no tensor for: its own path says so
            return None
    out = torch.empty((len(values),) + shape, dtype=target)
    np.stack(values, out=out.numpy())
    return out


def _collate_samples(batch, *, collate_fn_map=None):
    """torch's default collate of per-record `Sample`s, with the numeric features stacked in
    one go (`_stacked`; whenever the collate map is torch's own for numpy arrays and tensors)
    and a clear error when a feature has a different number of values in different records
    (torch says only "stack expects each tensor to be equal size")."""
    from torch.utils.data._utils.collate import collate, collate_numpy_array_fn, collate_tensor_fn

    fast = (
        collate_fn_map is not None
        and collate_fn_map.get(np.ndarray) is collate_numpy_array_fn
        and collate_fn_map.get(torch.Tensor) is collate_tensor_fn
    )
    out = Sample()
    try:
        for key in batch[0]:
            values = [d[key] for d in batch]
            stacked = _stacked(values) if fast else None
            out[key] = stacked if stacked is not None else collate(values, collate_fn_map=collate_fn_map)
        return out
    except RuntimeError as exc:
        if "equal size" not in str(exc):
            raise
        for key in batch[0]:
            sizes = {len(d[key]) if hasattr(d[key], "__len__") else 1 for d in batch}
            if len(sizes) > 1:
                raise RuntimeError(
                    f"feature {key!r} has {sorted(sizes)} values in different records of this batch, so torch's "
                    "default_collate cannot stack it: pass batch_size= to the dataset (ragged features come as "
                    "values plus lengths), give the feature a fixed size in a transform (pad or a default value), "
                    "or pass your own collate_fn"
                ) from exc
        raise


def _register_queue_pickling() -> None:
    """Batches pickled by multiprocessing for its queues (a DataLoader worker's results) may
    send their `bytes` through shared memory (`_reduce_batch`)."""
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(Batch, lambda batch: _reduce_batch(batch, Batch, queue=True))
    ForkingPickler.register(Sample, lambda batch: _reduce_batch(batch, Sample, queue=True))


def _register_collate() -> None:
    """Let torch's default_collate use `_collate_samples` for our per-record samples."""
    try:
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError:  # an older torch without the registry: its own message stays
        return
    default_collate_fn_map.setdefault(Sample, _collate_samples)


_register_collate()
_register_queue_pickling()
