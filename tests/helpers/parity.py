"""Shared helpers of the parity tests: fixtures, both engines, deep comparison of results."""

from __future__ import annotations

import numpy as np
import pytest

from tfrecord_beam._engine import _common, _decode, _encode, _framing, _index_text, _rows

from . import encode_oracle as _encode_oracle
from .fixtures import MANIFEST

try:
    from tfrecord_beam._native import _core as NATIVE
except ImportError:  # pragma: no cover - the extension is optional
    NATIVE = None

needs_native = pytest.mark.skipif(NATIVE is None, reason="compiled core not built")
KIND_CODE = {field: _common.KIND_CODE[kind] for kind, field in _common.KIND_FIELD.items()}  # by oneof field
PURE = {name: getattr(mod, name) for mod in (_framing, _decode, _encode, _rows, _index_text) for name in mod.__all__}
ORACLES = {"encode_examples": _encode_oracle.encode_examples}  # slow references the twins must match


def manifest() -> dict:
    return MANIFEST


def same(a, b) -> bool:
    """Deep equality of results (the one helper of the tests): arrays by dtype, shape and bytes
    (NaN bits; object arrays element by element), dicts by keys in order and values, lists and
    tuples by type and items, anything else by type and ==."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        return a.tobytes() == b.tobytes() if a.dtype != object else all(same(x, y) for x, y in zip(a.flat, b.flat))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def same_floats(a, b) -> bool:
    """Bit-exact float32 equality (NaN payloads and -0.0 included)."""
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


def run(fn, *args, **kw):
    """fn's result, or the class of the exception it raised."""
    try:
        return fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - the class is what the engines must agree on
        return type(exc)


def both(name: str, *args, **kw):
    """Run `name` on the pure twin and the compiled core (and its reference oracle, if it has
    one); assert identical results; return it."""
    expected = run(PURE[name], *args, **kw)
    if name in ORACLES:
        oracle = run(ORACLES[name], *args, **kw)
        assert same(expected, oracle), (
            f"{name}: pure twin differs from the oracle\npure:   {expected!r}\noracle: {oracle!r}"
        )
    if NATIVE is not None:
        got = run(getattr(NATIVE, name), *args, **kw)
        assert same(expected, got), f"{name}: engines differ\npure:   {expected!r}\nnative: {got!r}"
    return expected
