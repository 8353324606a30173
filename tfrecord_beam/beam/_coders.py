"""Beam's `coder=` parameter of the TFRecord transforms, as Beam's tfrecordio means it.

A record's payload is `coder.encode(element)` when writing and `coder.decode(payload)` the
element when reading. The default `BytesCoder` is the identity on bytes, so it is skipped
(and lets the sink take lists of bytes as batches).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from apache_beam import coders
from apache_beam.coders import coder_impl
from apache_beam.typehints import Any as AnyHint
from apache_beam.typehints import List as ListHint
from apache_beam.typehints import Tuple as TupleHint
from apache_beam.typehints.typehints import ListConstraint


def check_coder(coder: Optional[coders.Coder]) -> coders.Coder:
    """The coder to use (BytesCoder for None); a clear error for anything not a Coder (a
    compression name passed where Beam's second parameter, the coder, goes)."""
    if coder is None:
        return coders.BytesCoder()
    if not isinstance(coder, coders.Coder):
        raise TypeError(
            f"coder must be an apache_beam.coders.Coder (e.g. coders.BytesCoder()), got {coder!r}; "
            "to set the compression pass compression_type=..."
        )
    return coder


def decoder(coder: coders.Coder) -> Optional[Callable[[bytes], Any]]:
    """`coder.decode`, or None where it is the identity (BytesCoder)."""
    return None if isinstance(coder, coders.BytesCoder) else coder.decode


def encoder(coder: coders.Coder) -> Optional[Callable[[Any], bytes]]:
    """`coder.encode`, or None where it is the identity (BytesCoder)."""
    return None if isinstance(coder, coders.BytesCoder) else coder.encode


def element_hint(coder: coders.Coder):
    """The type of the elements a coder decodes to (`bytes` for BytesCoder), for type hints."""
    try:
        return coder.to_type_hint()
    except (NotImplementedError, AttributeError):
        return AnyHint


class _PayloadListImpl(coder_impl.ListCoderImpl):
    """ListCoderImpl (same bytes) whose size estimate sums the payload lengths in one C-level
    pass. Beam samples the size of some 50 elements of every PCollection; the stock estimate
    encodes each payload of a batch into a counting stream (~0.1 us each, thousands per batch)."""

    def estimate_size(self, value, nested=False):
        return 4 + len(value) + sum(map(len, value))  # count, a 1-byte length prefix each, payloads

    def get_estimated_size_and_observables(self, value, nested=False):
        return self.estimate_size(value, nested), []


class PayloadListCoder(coders.ListCoder):
    """ListCoder[BytesCoder] (the same encoding) with the cheap size estimate of
    `_PayloadListImpl`: the coder of batched reads' lists of payloads."""

    def __init__(self, elem_coder: Optional[coders.Coder] = None) -> None:
        super().__init__(elem_coder or coders.BytesCoder())

    def _create_impl(self):
        return _PayloadListImpl(self._elem_coder.get_impl())

    def to_type_hint(self):
        return PayloadList()


class PayloadList(ListConstraint):
    """The type hint `List[bytes]` of batched reads (a ListConstraint, so it is consistent with
    `List[bytes]` wherever that is declared), mapped to PayloadListCoder in Beam's registry."""

    def __init__(self, list_type=bytes) -> None:
        super().__init__(bytes)

    def __eq__(self, other) -> bool:  # equal to List[bytes] both ways (a subclass's __eq__ goes first)
        return isinstance(other, ListConstraint) and other.inner_type is bytes

    def __hash__(self) -> int:
        return hash(ListHint[bytes])


coders.registry.register_coder(PayloadList, PayloadListCoder)


def read_output(coder: coders.Coder, *, with_filename: bool, batched: bool) -> Tuple[coders.Coder, Any]:
    """(PCollection coder, type hint) of a read's main output."""
    element_coder, hint = coder, element_hint(coder)
    if batched and isinstance(coder, coders.BytesCoder):
        element_coder, hint = PayloadListCoder(), PayloadList()
    elif batched:
        element_coder, hint = coders.ListCoder(element_coder), ListHint[hint]
    if with_filename:
        element_coder = coders.TupleCoder([coders.StrUtf8Coder(), element_coder])
        hint = TupleHint[str, hint]
    return element_coder, hint
