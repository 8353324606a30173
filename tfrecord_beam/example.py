"""tf.train.Example and SequenceExample <-> Python dicts of numpy arrays, without TensorFlow.

Decoding follows the `tfrecord` package's conventions (float -> float32 array, int -> int64
array, a single bytes value -> `bytes`, zero or several -> object array of `bytes`) minus its
crashes: a described feature that is missing or has no kind set decodes to an empty array of
the described dtype (None where no dtype was described), or raises KeyError with `strict=True`.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
from google.protobuf.message import DecodeError as _ProtoDecodeError

from . import _engine, _proto
from ._engine._common import BYTES, FLOAT, INT, KIND_FIELD
from ._engine._values import as_decoded, empty_value  # noqa: F401 (the convention, re-exported)
from .errors import DecodeError, FeatureKindError  # noqa: F401 (re-exported)

KINDS = (BYTES, FLOAT, INT)
_KIND_ALIASES = {
    "byte": BYTES,
    "bytes": BYTES,
    "bytes_list": BYTES,
    "str": BYTES,
    "string": BYTES,
    "binary": BYTES,
    "float": FLOAT,
    "float32": FLOAT,
    "float_list": FLOAT,
    "int": INT,
    "int64": INT,
    "int64_list": INT,
}
KIND_TO_FIELD = KIND_FIELD
_ONEOF_TO_KIND = {field: kind for kind, field in KIND_FIELD.items()}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

Description = Union[None, Sequence[str], Mapping[str, Optional[str]]]


@overload
def normalize_kind(kind: str, name: str = ...) -> str: ...
@overload
def normalize_kind(kind: None, name: str = ...) -> None: ...
@overload
def normalize_kind(kind: Optional[str], name: str = ...) -> Optional[str]: ...
def normalize_kind(kind: Optional[str], name: str = "?") -> Optional[str]:
    """Canonical kind ("byte", "float", "int") of a user-written one ("bytes", "int64 ", ...)."""
    if kind is None:
        return None
    key = str(kind).strip().lower()
    if key not in _KIND_ALIASES:
        raise ValueError(f"feature {name!r}: unknown kind {kind!r} (use 'byte', 'float' or 'int')")
    return _KIND_ALIASES[key]


class _NormalizedDescription(dict):
    """A description `normalize_description` already produced: passing it again costs nothing.

    Read-only: one is built per dataset or loader (`ReadOptions`) and shared by every record,
    every worker's decoder and the options object, so a change would reach all of them.
    """

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a normalised description is read-only: normalise a changed copy, normalize_description(dict(description))"
        )

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> Any:  # pickled (spawned workers, deepcopy) without item assignment
        return (type(self), (list(self.items()),))


def normalize_description(description: Description) -> Optional[Dict[str, Optional[str]]]:
    """A description as {name: kind or None}; None or empty means "every feature present"."""
    if isinstance(description, _NormalizedDescription):
        return description  # the per-record loaders pass the same one for every record
    if not description:
        return None
    if isinstance(description, str):
        raise TypeError("description must be a list or dict of feature names, not a string")
    if isinstance(description, Mapping):
        return _NormalizedDescription((str(name), normalize_kind(kind, name)) for name, kind in description.items())
    return _NormalizedDescription((str(name), None) for name in description)


def has_all_kinds(description: Optional[Mapping[str, Optional[str]]]) -> bool:
    """Whether a normalised description names features and gives each a kind: what the
    columnar decoders need to decode whole chunks (None / no kind: per-record decoding)."""
    return description is not None and len(description) > 0 and all(description.values())


def feature_kind(feature) -> Optional[str]:
    """The kind set in a Feature message, or None when no kind is set."""
    oneof = feature.WhichOneof("kind")
    return _ONEOF_TO_KIND[oneof] if oneof else None


def feature_values(feature) -> Tuple[Optional[str], list]:
    """(kind, list of Python values) of a Feature message."""
    kind = feature_kind(feature)
    if kind is None:
        return None, []
    return kind, list(getattr(feature, KIND_TO_FIELD[kind]).value)


class _Where:
    """Where a record came from, for error messages."""

    __slots__ = ("path", "offset", "record")

    def __init__(self, path=None, offset=None, record=None):
        self.path, self.offset, self.record = path, offset, record

    def name(self) -> str:
        parts = [str(p) for p in (self.path,) if p is not None]
        if self.record is not None:
            parts.append(f"record {self.record}")
        return ", ".join(parts) or "record"


def _decode_one(feature, wanted: Optional[str], name: str, where: _Where, strict: bool):
    kind = feature_kind(feature) if feature is not None else None
    if kind is None:
        if strict:
            what = "is missing" if feature is None else "has no kind set"
            raise KeyError(f"{where.name()}: feature {name!r} {what}")
        return empty_value(wanted) if wanted else None
    if wanted is not None and kind != wanted:
        raise FeatureKindError(
            where.path,
            where.offset,
            where.record,
            f"feature {name!r} is {kind!r} ({KIND_TO_FIELD[kind]}) but the description asks for {wanted!r}",
        )
    return as_decoded(kind, getattr(feature, KIND_TO_FIELD[kind]).value)


def _decode_features(feature_map, description: Optional[Dict[str, Optional[str]]], where: _Where, strict: bool):
    if description is None:
        return {name: _decode_one(feature_map[name], None, name, where, strict) for name in feature_map}
    return {
        name: _decode_one(feature_map[name] if name in feature_map else None, kind, name, where, strict)
        for name, kind in description.items()
    }


def _parse(cls, payload, where: _Where):
    try:
        return cls.FromString(payload if isinstance(payload, bytes) else bytes(payload))
    except _ProtoDecodeError as exc:
        raise DecodeError(where.path, where.offset, where.record, f"not a valid {cls.DESCRIPTOR.name}: {exc}") from None


def parse_example(payload, *, path=None, offset=None, record_number=None):
    """The Example message of a payload; DecodeError names the record when it is malformed."""
    return _parse(_proto.Example, payload, _Where(path, offset, record_number))


def parse_sequence_example(payload, *, path=None, offset=None, record_number=None):
    """The SequenceExample message of a payload; DecodeError names the record when malformed."""
    return _parse(_proto.SequenceExample, payload, _Where(path, offset, record_number))


def decode_example(
    payload: bytes,
    description: Description = None,
    *,
    strict: bool = False,
    path: Optional[str] = None,
    offset: Optional[int] = None,
    record_number: Optional[int] = None,
) -> Dict[str, Any]:
    """Decode one serialized Example into {name: value} (see the module docstring)."""
    where = _Where(path, offset, record_number)
    message = _parse(_proto.Example, payload, where)
    return _decode_features(message.features.feature, normalize_description(description), where, strict)


def decode_sequence_example(
    payload: bytes,
    context_description: Description = None,
    sequence_description: Description = None,
    *,
    strict: bool = False,
    path: Optional[str] = None,
    offset: Optional[int] = None,
    record_number: Optional[int] = None,
) -> Tuple[Dict[str, Any], Dict[str, List[Any]]]:
    """Decode one SequenceExample into (context dict, {name: list of per-step values}).

    A described feature list that is missing decodes to [] (KeyError with `strict=True`).
    """
    where = _Where(path, offset, record_number)
    message = _parse(_proto.SequenceExample, payload, where)
    context = _decode_features(message.context.feature, normalize_description(context_description), where, strict)
    lists = message.feature_lists.feature_list
    seq_desc = normalize_description(sequence_description)
    names = seq_desc if seq_desc is not None else {name: None for name in lists}
    sequences: Dict[str, List[Any]] = {}
    for name, kind in names.items():
        if name not in lists:
            if strict:
                raise KeyError(f"{where.name()}: feature list {name!r} is missing")
            sequences[name] = []
            continue
        sequences[name] = [_decode_one(f, kind, name, where, strict) for f in lists[name].feature]
    return context, sequences


# ---------------------------------------------------------------------------------------------
# Encoding


def infer_kind(value: Any, name: str = "?") -> str:
    """The kind a bare value would be written as: numpy dtype or Python type decides."""
    if isinstance(value, (bytes, bytearray, memoryview, str, np.bytes_, np.str_)):
        return BYTES
    if isinstance(value, (bool, np.bool_, numbers.Integral)):
        return INT
    if isinstance(value, numbers.Real):
        return FLOAT
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return FLOAT
        if value.dtype.kind in "iub":
            return INT
        if value.dtype.kind in "SUO":
            return BYTES
        raise TypeError(f"feature {name!r}: cannot write numpy dtype {value.dtype}")
    if isinstance(value, (list, tuple)):
        if not value:
            raise TypeError(f"feature {name!r}: cannot infer the kind of an empty list; pass (value, kind)")
        return infer_kind(value[0], name)
    raise TypeError(f"feature {name!r}: cannot infer a feature kind for {type(value).__name__}")


def _as_bytes(v, name: str) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytearray, memoryview, np.bytes_)):
        return bytes(v)
    raise TypeError(f"feature {name!r}: expected bytes or str, got {type(v).__name__}")


def _as_list(value: Any, kind: str) -> Any:
    if kind == BYTES and isinstance(value, np.ndarray) and value.dtype == np.uint8:
        return [value.tobytes()]  # an encoded image as a uint8 array is one bytes value
    if isinstance(value, (list, tuple, np.ndarray)):
        return value
    return [value]


def _int_values(values: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values)
        # uint64 against uint64: numpy 1.x compares uint64 with a Python int as float64, where
        # 2**63 == 2**63 - 1 (so 2**63 would wrap to a negative int64)
        if arr.dtype.kind == "u" and arr.size and arr.max() > np.uint64(_INT64_MAX):
            raise OverflowError
        if arr.dtype.kind == "O" or arr.dtype.kind == "f":
            ints = [int(v) for v in np.ravel(arr)]
            if any(v < _INT64_MIN or v > _INT64_MAX for v in ints):
                raise OverflowError
            if arr.dtype.kind == "f" and np.any(np.asarray(ints) != np.ravel(arr)):
                raise TypeError(f"feature {name!r}: non-integral float for an int feature")
            return np.asarray(ints, dtype=np.int64)
        return np.ravel(arr).astype(np.int64)
    except OverflowError:
        raise ValueError(f"feature {name!r}: value outside the int64 range") from None


def make_feature(value: Any, kind: Optional[str] = None, name: str = "?"):
    """A Feature message holding `value` as `kind` (inferred from the value when None)."""
    kind = normalize_kind(kind, name) if kind is not None else infer_kind(value, name)
    values = _as_list(value, kind)
    if kind == BYTES:
        return _proto.Feature(bytes_list=_proto.BytesList(value=[_as_bytes(v, name) for v in values]))
    if kind == FLOAT:
        with np.errstate(over="ignore"):  # beyond float32's range: +-inf, as TensorFlow stores it (no warning)
            floats = np.ravel(np.asarray(values, dtype=np.float32))
        return _proto.Feature(float_list=_proto.FloatList(value=floats))
    return _proto.Feature(int64_list=_proto.Int64List(value=_int_values(values, name)))


def _split_spec(name: str, spec: Any) -> Tuple[Any, Optional[str]]:
    """`(value, "kind")` as the `tfrecord` package writes it, or a bare value."""
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and isinstance(spec[1], str)
        and spec[1].strip().lower() in _KIND_ALIASES
    ):
        return spec[0], spec[1]
    return spec, None


def _features_message(datum: Mapping[str, Any]):
    features = _proto.Features()
    for name, spec in datum.items():
        value, kind = _split_spec(name, spec)
        features.feature[name].CopyFrom(make_feature(value, kind, name))
    return features


def encode_example(datum: Mapping[str, Any]) -> bytes:
    """Serialize {name: (value, kind)} or {name: bare value} as an Example (keys sorted, as TF).

    The compiled encoder writes the bytes directly for the common value types (bytes, str,
    Python numbers, lists of them, numeric numpy arrays); it leaves anything else to the
    protobuf path below, its pure twin, which gives the same bytes and every error.
    """
    if _engine.encode_example is not None:
        payload = _engine.encode_example(datum)
        if payload is not None:
            return payload
    return encode_example_message(datum)


def encode_example_message(datum: Mapping[str, Any]) -> bytes:
    """`encode_example` through protobuf messages: the pure twin of the compiled encoder."""
    return _proto.Example(features=_features_message(datum)).SerializeToString(deterministic=True)


def encode_sequence_example(context: Mapping[str, Any], feature_lists: Mapping[str, Any]) -> bytes:
    """Serialize a SequenceExample: `context` as for Examples, `feature_lists` {name: (steps, kind)}.

    Compiled for the common value types, as `encode_example`; `encode_sequence_example_message`
    is the pure twin.
    """
    if _engine.encode_sequence_example is not None:
        payload = _engine.encode_sequence_example(context, feature_lists)
        if payload is not None:
            return payload
    return encode_sequence_example_message(context, feature_lists)


def encode_sequence_example_message(context: Mapping[str, Any], feature_lists: Mapping[str, Any]) -> bytes:
    """`encode_sequence_example` through protobuf messages (the pure twin)."""
    message = _proto.SequenceExample(context=_features_message(context or {}))
    for name, spec in (feature_lists or {}).items():
        steps, kind = _split_spec(name, spec)
        if kind is None:
            non_empty = [
                s
                for s in steps
                if not (isinstance(s, (list, tuple)) and len(s) == 0 or isinstance(s, np.ndarray) and s.size == 0)
            ]
            if not non_empty:
                raise TypeError(f"feature list {name!r}: cannot infer the kind of empty steps; pass (steps, kind)")
            kind = infer_kind(non_empty[0], name)
        target = message.feature_lists.feature_list[name]
        for step in steps:
            target.feature.append(make_feature(step, kind, name))
    return message.SerializeToString(deterministic=True)
