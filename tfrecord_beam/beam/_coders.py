"""Beam's `coder=` parameter of the TFRecord transforms, as Beam's tfrecordio means it.

A record's payload is `coder.encode(element)` when writing and `coder.decode(payload)` the
element when reading. The default `BytesCoder` is the identity on bytes, so it is skipped
(and lets the sink take lists of bytes as batches).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from apache_beam import coders
from apache_beam.typehints import Any as AnyHint
from apache_beam.typehints import List as ListHint
from apache_beam.typehints import Tuple as TupleHint


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


def read_output(coder: coders.Coder, *, with_filename: bool, batched: bool) -> Tuple[coders.Coder, Any]:
    """(PCollection coder, type hint) of a read's main output."""
    element_coder, hint = coder, element_hint(coder)
    if batched:
        element_coder, hint = coders.ListCoder(element_coder), ListHint[hint]
    if with_filename:
        element_coder = coders.TupleCoder([coders.StrUtf8Coder(), element_coder])
        hint = TupleHint[str, hint]
    return element_coder, hint

