"""Batch Example codec used by DecodeExamples / EncodeExamples: the one place that decodes.

The transforms hand whole batches here. Examples described with every kind are decoded in
one call by the columnar decoder (`tfrecord_beam.columnar`, compiled where built); other
batches, SequenceExamples, `strict`, and batches holding a bad record when skipping go
record by record through `tfrecord_beam.example`, which isolates the bad ones.
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Sequence

from .. import columnar, example
from ..errors import DecodeError
from ._corrupt import CorruptRecord


class DecodeSpec(NamedTuple):
    """What to decode: Examples (`sequence=False`) or SequenceExamples, and which features."""

    description: Optional[dict]
    sequence_description: Optional[dict]
    sequence: bool
    strict: bool


def _decoder(spec: DecodeSpec) -> Callable[[bytes], Any]:
    if spec.sequence:
        return lambda payload: example.decode_sequence_example(
            payload, spec.description, spec.sequence_description, strict=spec.strict
        )
    return lambda payload: example.decode_example(payload, spec.description, strict=spec.strict)


def _columnar_ok(spec: DecodeSpec) -> bool:
    desc = spec.description
    return not spec.sequence and not spec.strict and desc is not None and bool(desc) and all(desc.values())


def decode_batch(payloads: Sequence[bytes], spec: DecodeSpec, skip_corrupt: bool = False) -> List[Any]:
    """Decode many payloads; a bad one raises DecodeError, or becomes a CorruptRecord when skipping."""
    if _columnar_ok(spec) and payloads:
        try:
            return list(columnar.to_records(columnar.decode_examples(list(payloads), spec.description)))
        except DecodeError as exc:
            if not skip_corrupt:  # its record number counts within this batch: meaningless here
                raise type(exc)(None, None, None, exc.reason) from None
            # fall through: record by record, so the good records of this batch survive
    decode = _decoder(spec)
    if not skip_corrupt:
        return [decode(p) for p in payloads]
    out: List[Any] = []
    for payload in payloads:
        try:
            out.append(decode(payload))
        except (DecodeError, KeyError, TypeError) as exc:
            reason = exc.reason if isinstance(exc, DecodeError) else str(exc)
            out.append(CorruptRecord(None, None, reason))
    return out


def encode_batch(rows: Sequence[Any], sequence: bool = False) -> List[bytes]:
    """Serialize many {name: value | (value, kind)} dicts (or (context, feature_lists) pairs)."""
    if sequence:
        return [example.encode_sequence_example(context, lists) for context, lists in rows]
    return [example.encode_example(row) for row in rows]
