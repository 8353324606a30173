"""The decoded-value convention (`example`'s module docstring): what one feature's values
decode to. Here, below both `example` and the engine's row converters (`_rows`), so that
neither has to import the other."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import BYTES, FLOAT, INT

__all__ = ["empty_value", "as_decoded"]

_EMPTY = {
    FLOAT: lambda: np.zeros(0, dtype=np.float32),
    INT: lambda: np.zeros(0, dtype=np.int64),
    BYTES: lambda: np.array([], dtype=object),
}


def empty_value(kind: str) -> Any:
    """What a described but missing (or kind-less) feature decodes to: an empty array."""
    return _EMPTY[kind]()


def as_decoded(kind: str, values) -> Any:
    """Values of one feature in the decoded convention (see `example`'s module docstring)."""
    if kind == FLOAT:
        return np.array(values, dtype=np.float32)
    if kind == INT:
        return np.array(values, dtype=np.int64)
    values = list(values)
    if len(values) == 1:
        return values[0]
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr
