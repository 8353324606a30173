"""Batches of Examples / SequenceExamples as columns, and columns back to Examples.

This is the fast path the torch and Beam faces use: a batch of serialized records goes in, and
per described feature comes out one `Column` (numpy arrays, no per-value Python objects):

- `values`: float32 or int64 values of every record back to back; for bytes features, one
  uint8 buffer with `value_offsets` (int64, one per value plus a leading 0);
- `row_splits`: int64, n+1 (record i owns values[row_splits[i]:row_splits[i+1]]), as in
  tf.RaggedTensor and Arrow's ListArray;
- `status`: uint8 per record, MISSING (0: no such key), NO_KIND (1: key there, no kind set) or
  PRESENT (2: values there, possibly none). Missing and kind-less rows hold zero values.

`Column.to_numpy()` gives a 2-D array when every record has the same number of values and
`(values, row_splits)` otherwise. SequenceExample feature lists come back as `SequenceColumn`s
with two levels of splits (record -> steps -> values).

The work is done by the compiled core (`tfrecord_beam._native._core`) or, where it is not built
or `TFRECORD_BEAM_PURE=1`, by its pure-Python twin; both give identical results.

    >>> cols = decode_examples(payloads, {"label": "float", "tokens": "int"})
    >>> cols["tokens"].to_numpy()          # (n, 20) int64 when every record has 20 tokens
    >>> encode_examples(cols)              # back to serialized Examples (upb-identical bytes)
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from google.protobuf.message import DecodeError as _PbDecodeError

from . import _engine, _proto
from ._engine._common import ERR_KIND, KIND_CODE, KIND_DTYPE, KIND_NAME, MISSING, NO_KIND, PRESENT
from .errors import DecodeError, FeatureKindError
from .example import Description, _Where, feature_kind, normalize_description

__all__ = [
    "Column",
    "to_records",
    "to_sequence_records",
    "SequenceColumn",
    "FeatureKindError",
    "MISSING",
    "NO_KIND",
    "PRESENT",
    "decode_examples",
    "decode_example_records",
    "decode_sequence_examples",
    "encode_examples",
    "encoded_lengths",
    "read_example_batches",
    "read_sequence_example_batches",
]

_DTYPE = {name: KIND_DTYPE[code] for name, code in KIND_CODE.items()}


def _as_bytes_values(
    values: np.ndarray, value_offsets: np.ndarray, start: int = 0, stop: Optional[int] = None
) -> List[bytes]:
    """The bytes values [start, stop) of a bytes column as a list of `bytes`."""
    buf = values.tobytes() if values.size else b""
    offs = value_offsets.tolist()
    stop = len(offs) - 1 if stop is None else stop
    return [buf[offs[k] : offs[k + 1]] for k in range(start, stop)]


class _Batched:
    """What a Column and a SequenceColumn share: a feature of a batch, values split per record."""

    __slots__ = ("name", "kind", "values", "row_splits", "value_offsets", "status")

    def __init__(
        self,
        name: str,
        kind: str,
        values: np.ndarray,
        row_splits: np.ndarray,
        value_offsets: Optional[np.ndarray] = None,
        status: Optional[np.ndarray] = None,
    ) -> None:
        self.name = name
        self.kind = kind  # "byte" | "float" | "int"
        self.values = values
        self.row_splits = row_splits
        self.value_offsets = value_offsets
        self.status = np.full(len(row_splits) - 1, PRESENT, np.uint8) if status is None else status

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def _bytes(self, start: int = 0, stop: Optional[int] = None) -> List[bytes]:
        """The bytes values [start, stop) of a bytes column; ValueError without value_offsets."""
        if self.value_offsets is None:
            raise ValueError(f"feature {self.name!r}: bytes columns need value_offsets")
        return _as_bytes_values(self.values, self.value_offsets, start, stop)


class Column(_Batched):
    """One feature of a batch of records, in columnar form (see the module docstring)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Column({self.name!r}, {self.kind!r}, records={len(self)}, values={self.num_values()})"

    def num_values(self) -> int:
        """Number of values over all records."""
        return int(self.row_splits[-1]) if len(self.row_splits) else 0

    def lengths(self) -> np.ndarray:
        """Number of values of each record (int64)."""
        return np.diff(self.row_splits)

    def fixed_length(self) -> Optional[int]:
        """The common number of values per record, or None when records differ (or none)."""
        lens = self.lengths()
        if len(lens) == 0 or np.any(lens != lens[0]):
            return None
        return int(lens[0])

    def flat_values(self) -> np.ndarray:
        """All values: the numeric array, or for bytes an object array of `bytes`."""
        if self.kind != "byte":
            return self.values
        out = np.empty(self.num_values(), dtype=object)
        out[:] = self._bytes()
        return out

    def to_dense(self) -> np.ndarray:
        """A 2-D array (records x values); ValueError unless every record has as many values."""
        k = self.fixed_length()
        if k is None:
            if len(self) == 0:
                return self.flat_values().reshape(0, 0)
            raise ValueError(f"feature {self.name!r}: records have different numbers of values")
        return self.flat_values().reshape(len(self), k)

    def to_ragged(self) -> Tuple[np.ndarray, np.ndarray]:
        """`(flat_values, row_splits)`."""
        return self.flat_values(), self.row_splits

    def to_numpy(self) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """`to_dense()` when every record has the same number of values, else `to_ragged()`."""
        return self.to_dense() if self.fixed_length() is not None else self.to_ragged()

    def row(self, i: int) -> Union[np.ndarray, List[bytes]]:
        """Values of record i: an array, or a list of `bytes`."""
        a, b = int(self.row_splits[i]), int(self.row_splits[i + 1])
        return self._bytes(a, b) if self.kind == "byte" else self.values[a:b]

    def to_list(self) -> List[list]:
        """Per record, a Python list of its values (bytes, float or int)."""
        flat = self._bytes() if self.kind == "byte" else self.values.tolist()
        s = self.row_splits.tolist()
        return [flat[s[i] : s[i + 1]] for i in range(len(self))]

    @classmethod
    def from_rows(
        cls,
        name: str,
        kind: str,
        rows: Sequence[Union[Sequence[Any], np.ndarray]],
        status: Optional[Sequence[int]] = None,
    ) -> "Column":
        """Build a column from per-record lists of values (bytes, float or int)."""
        kind = _kind(kind, name)
        lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        splits = np.concatenate([np.zeros(1, np.int64), np.cumsum(lens, dtype=np.int64)])
        flat = [v for r in rows for v in r]
        st = None if status is None else np.asarray(status, dtype=np.uint8)
        if kind == "byte":
            values, offsets = _pack_bytes(flat, name)
            return cls(name, kind, values, splits, offsets, st)
        return cls(name, kind, np.asarray(flat, dtype=_DTYPE[kind]).reshape(-1), splits, None, st)


class SequenceColumn(_Batched):
    """One feature list of a batch of SequenceExamples: record -> steps -> values.

    `row_splits` (n+1) index steps, `step_splits` (steps+1) index values. A feature list that is
    absent has status MISSING and no steps; a step whose Feature has no kind set has no values.
    """

    __slots__ = ("step_splits",)

    def __init__(self, name, kind, values, row_splits, step_splits, value_offsets=None, status=None) -> None:
        super().__init__(name, kind, values, row_splits, value_offsets, status)
        self.step_splits = step_splits

    def __repr__(self) -> str:
        return f"SequenceColumn({self.name!r}, {self.kind!r}, records={len(self)}, steps={len(self.step_splits) - 1})"

    def steps(self) -> Column:
        """The steps as a flat Column (one row per step, all records back to back)."""
        return Column(self.name, self.kind, self.values, self.step_splits, self.value_offsets)

    def num_steps(self) -> np.ndarray:
        """Number of steps of each record."""
        return np.diff(self.row_splits)

    def to_dense(self) -> np.ndarray:
        """A 3-D array (records x steps x values); ValueError unless all counts agree."""
        steps = self.num_steps()
        if len(steps) and np.any(steps != steps[0]):
            raise ValueError(f"feature list {self.name!r}: records have different numbers of steps")
        flat = self.steps().to_dense()
        return flat.reshape(len(self), int(steps[0]) if len(steps) else 0, flat.shape[1] if flat.ndim == 2 else 0)

    def to_list(self) -> List[List[list]]:
        """Per record, a list of steps, each a Python list of values."""
        steps = self.steps().to_list()
        s = self.row_splits.tolist()
        return [steps[s[i] : s[i + 1]] for i in range(len(self))]


# -- descriptions -------------------------------------------------------------------------------


def _kind(kind: Any, name: str) -> str:
    from .example import normalize_kind

    k = normalize_kind(kind, name)
    if k is None:
        raise ValueError(f"feature {name!r}: a kind is needed ('byte', 'float' or 'int')")
    return k


def _example_map(payload: bytes):
    return _proto.Example.FromString(payload).features.feature


def _context_map(payload: bytes):
    return _proto.SequenceExample.FromString(payload).context.feature


def _lists_map(payload: bytes):
    return _proto.SequenceExample.FromString(payload).feature_lists.feature_list


def _list_kind(feature_list) -> Optional[str]:
    return next((feature_kind(f) for f in feature_list.feature if feature_kind(f)), None)


def _resolve(description: Description, payloads, map_of=_example_map, kind_of=feature_kind) -> Dict[str, str]:
    """{name: kind} from a description; kinds left out are taken from the first record that has
    the feature with a kind set (int when none has, as TensorFlow does)."""
    desc = normalize_description(description) or {}
    todo = [n for n, k in desc.items() if k is None]
    found: Dict[str, str] = {}
    if todo:
        for payload in payloads():
            try:
                fmap = map_of(bytes(payload))
            except _PbDecodeError:
                break  # the decoder reports the bad record with its number
            for n in todo:
                if n not in found and n in fmap and kind_of(fmap[n]):
                    found[n] = kind_of(fmap[n])
            if len(found) == len(todo):
                break
    return {n: k or found.get(n, "int") for n, k in desc.items()}


def _names_kinds(desc: Mapping[str, str]) -> Tuple[List[bytes], List[int]]:
    return [n.encode("utf-8") for n in desc], [KIND_CODE[k] for k in desc.values()]


# -- errors ------------------------------------------------------------------------------------


def _locator(path: Optional[str], first_record_number: Optional[int], record_offsets=None) -> Callable[[int], _Where]:
    """Names record i of a batch in errors (`example._Where`): from the path, the first record
    number and the records' offsets in the file."""

    def where(i: int) -> _Where:
        return _Where(
            path,
            None if record_offsets is None else int(record_offsets[i]),
            None if first_record_number is None else first_record_number + i,
        )

    return where


def _raise(
    err: Tuple[int, int, int, int], names: List[str], kinds: List[str], where: Callable[[int], _Where], what: str
) -> None:
    code, i, j, found = err
    w = where(i)
    if code == ERR_KIND:
        raise FeatureKindError(
            w.path, w.offset, w.record, f"feature {names[j]!r} holds {KIND_NAME[found]} values, described as {kinds[j]}"
        )
    raise DecodeError(w.path, w.offset, w.record, f"not a valid {what} protobuf")


def _check_strict(columns: Mapping[str, Any], where: Callable[[int], _Where]) -> None:
    for name, col in columns.items():
        bad = np.flatnonzero(col.status != PRESENT)
        if len(bad):
            i = int(bad[0])
            w = where(i)
            why = "is missing" if col.status[i] == MISSING else "has no kind set"
            raise KeyError(f"{w.name() if w.record is not None else f'batch record {i}'}: feature {name!r} {why}")


def _chunk_args(records, offsets, lengths, first_record_number, record_offsets):
    """Unpack a `tfrecord_beam.records.RecordChunk` given as `records` (buffer, offsets and the
    record numbers/offsets its errors should name); anything else passes through."""
    if offsets is None and hasattr(records, "payload_offsets") and hasattr(records, "buffer"):
        c = records
        return c.buffer, c.payload_offsets, c.payload_lengths, c.first_record_number, c.record_offsets
    return records, offsets, lengths, first_record_number, record_offsets


def _records_args(records, offsets, lengths):
    """(records, offsets, lengths) for the engine, and a way to iterate payloads for inference."""
    if offsets is None:
        records = records if isinstance(records, (list, tuple)) else list(records)
        return records, None, None, lambda: iter(records)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    view = memoryview(records).cast("B")
    return records, offsets, lengths, lambda: (view[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist()))


def _column_args(columns: Mapping[str, Any], steps: bool) -> Tuple[List[str], List[int], List[tuple]]:
    cols = list(columns.values())
    parts: List[tuple]
    if steps:
        parts = [(c.values, c.row_splits, c.step_splits, c.value_offsets, c.status) for c in cols]
    else:
        parts = [(c.values, c.row_splits, c.value_offsets, c.status) for c in cols]
    return list(columns), [KIND_CODE[c.kind] for c in cols], parts


def to_records(columns: Mapping[str, Column], rows: Optional[Sequence[int]] = None) -> Iterator[Dict[str, Any]]:
    """Per-record dicts, in `example.decode_example`'s convention, from a batch of columns.

    What the drop-in loaders and Beam's DecodeExamples yield: float32 / int64 arrays (copies,
    so a kept record does not pin the batch), a single bytes value as `bytes`, zero or several
    as an object array, and an empty array for a missing or kind-less feature. `rows` picks
    records (default: all). Built in C where the compiled core is (`_engine._rows` is the twin).
    """
    count = len(next(iter(columns.values()))) if columns else 0
    return iter(_engine.example_rows(*_column_args(columns, False), count, rows))


def to_sequence_records(
    context: Mapping[str, Column], lists: Mapping[str, "SequenceColumn"], rows: Optional[Sequence[int]] = None
) -> Iterator[Tuple[Dict[str, Any], Dict[str, List[Any]]]]:
    """Per-record `(context, {name: [value per step]})`, in `example.decode_sequence_example`'s
    convention, from decoded columns: each step's values as `to_records` gives a feature's, a
    missing feature list as []. Built in C where the compiled core is."""
    count = len(next(iter({**context, **lists}.values()))) if (context or lists) else 0
    return iter(_engine.sequence_rows(*_column_args(context, False), *_column_args(lists, True), count, rows))


# -- public decode / encode --------------------------------------------------------------------


def decode_examples(
    records: Any,
    description: Description,
    strict: bool = False,
    *,
    offsets: Optional[np.ndarray] = None,
    lengths: Optional[np.ndarray] = None,
    path: Optional[str] = None,
    first_record_number: Optional[int] = 0,
    record_offsets: Optional[np.ndarray] = None,
) -> Dict[str, Column]:
    """Decode a batch of serialized Examples into one `Column` per described feature.

    Args:
        records: a sequence of bytes-like payloads; or (with `offsets` and `lengths`) one buffer
            holding them, as `scan_frames` describes a file chunk; or a
            `tfrecord_beam.records.RecordChunk` (errors then name its records and offsets).
        description: `{name: "byte"|"float"|"int"}` (aliases such as "bytes", "int64",
            "float32" and stray spaces accepted), or a list of names whose kinds are then taken
            from the first record having them.
        strict: raise KeyError naming feature and record when a described feature is missing
            or has no kind set (otherwise that row is empty and `status` says which).
        path, first_record_number, record_offsets: only used to name records in errors.

    Raises:
        DecodeError: a payload is not a valid Example (the error names the record).
        FeatureKindError: a feature holds another kind than described.
    """
    records, offsets, lengths, first_record_number, record_offsets = _chunk_args(
        records, offsets, lengths, first_record_number, record_offsets
    )
    records, offsets, lengths, payloads = _records_args(records, offsets, lengths)
    desc = _resolve(description, payloads)
    names, codes = _names_kinds(desc)
    cols, err = _engine.decode_examples(records, names, codes, offsets, lengths)
    where = _locator(path, first_record_number, record_offsets)
    if err is not None:
        _raise(err, list(desc), list(desc.values()), where, "Example")
    out = {name: Column(name, kind, *c) for (name, kind), c in zip(desc.items(), cols)}
    if strict:
        _check_strict(out, where)
    return out


def decode_example_records(
    records: Any,
    description: Description,
    *,
    offsets: Optional[np.ndarray] = None,
    lengths: Optional[np.ndarray] = None,
    path: Optional[str] = None,
    first_record_number: Optional[int] = 0,
    record_offsets: Optional[np.ndarray] = None,
    rows: Optional[Sequence[int]] = None,
) -> Iterator[Dict[str, Any]]:
    """`to_records(decode_examples(...), rows)` in one step: per-record dicts of a batch.

    With the compiled core and one buffer (`offsets` and `lengths`, or a RecordChunk), bytes
    values are cut straight out of the buffer into their `bytes` objects (one copy, not two).
    Arguments and errors as in `decode_examples` (not strict).
    """
    records, offsets, lengths, first_record_number, record_offsets = _chunk_args(
        records, offsets, lengths, first_record_number, record_offsets
    )
    if offsets is None:
        return to_records(
            decode_examples(
                records,
                description,
                offsets=offsets,
                lengths=lengths,
                path=path,
                first_record_number=first_record_number,
                record_offsets=record_offsets,
            ),
            rows,
        )
    records, offsets, lengths, payloads = _records_args(records, offsets, lengths)
    desc = _resolve(description, payloads)
    names, codes = _names_kinds(desc)
    rows_out, err = _engine.decode_example_rows(records, names, codes, offsets, lengths, list(desc), rows)
    if err is not None:
        _raise(err, list(desc), list(desc.values()), _locator(path, first_record_number, record_offsets), "Example")
    return rows_out


def decode_sequence_examples(
    records: Any,
    context_description: Description,
    sequence_description: Description,
    strict: bool = False,
    *,
    offsets: Optional[np.ndarray] = None,
    lengths: Optional[np.ndarray] = None,
    path: Optional[str] = None,
    first_record_number: Optional[int] = 0,
    record_offsets: Optional[np.ndarray] = None,
) -> Tuple[Dict[str, Column], Dict[str, SequenceColumn]]:
    """Decode a batch of serialized SequenceExamples: `(context columns, feature-list columns)`.

    Context features work as in `decode_examples`; each described feature list becomes a
    `SequenceColumn` (record -> steps -> values). `strict` also requires every described
    feature list to be there. Arguments and errors as in `decode_examples`.
    """
    records, offsets, lengths, first_record_number, record_offsets = _chunk_args(
        records, offsets, lengths, first_record_number, record_offsets
    )
    records, offsets, lengths, payloads = _records_args(records, offsets, lengths)
    cdesc = _resolve(context_description, payloads, _context_map)
    sdesc = _resolve(sequence_description, payloads, _lists_map, _list_kind)
    cn, ck = _names_kinds(cdesc)
    sn, sk = _names_kinds(sdesc)
    ccols, scols, err = _engine.decode_sequence_examples(records, cn, ck, sn, sk, offsets, lengths)
    where = _locator(path, first_record_number, record_offsets)
    if err is not None:
        _raise(err, list(cdesc) + list(sdesc), list(cdesc.values()) + list(sdesc.values()), where, "SequenceExample")
    context = {name: Column(name, kind, *c) for (name, kind), c in zip(cdesc.items(), ccols)}
    lists = {}
    for (name, kind), (values, row_splits, step_splits, voffs, status) in zip(sdesc.items(), scols):
        lists[name] = SequenceColumn(name, kind, values, row_splits, step_splits, voffs, status)
    if strict:
        _check_strict(context, where)
        _check_strict(lists, where)
    return context, lists


def _pack_bytes(flat: Sequence[Any], name: str) -> Tuple[np.ndarray, np.ndarray]:
    """Concatenate bytes values into (uint8 buffer, int64 offsets)."""
    items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat]
    lens = np.fromiter((len(v) for v in items), dtype=np.int64, count=len(items))
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lens, dtype=np.int64)])
    return np.frombuffer(b"".join(items), dtype=np.uint8), offsets


def _kind_of_dtype(dtype: np.dtype, name: str) -> str:
    if dtype.kind == "f":
        return "float"
    if dtype.kind in "iub":
        return "int"
    if dtype.kind in "OSUV":
        return "byte"
    raise TypeError(f"feature {name!r}: cannot encode values of dtype {dtype}")


def _as_column(name: str, spec: Any) -> Column:
    """A Column from what `encode_examples` accepts for one feature."""
    if isinstance(spec, Column):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2:  # (values, row_splits)
        values, splits = spec
        arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
        kind = _kind_of_dtype(arr.dtype if arr.size else np.dtype(np.float32), name)
        splits = np.asarray(splits, dtype=np.int64)
        if kind == "byte":
            buf, offs = _pack_bytes(list(values), name)
            return Column(name, kind, buf, splits, offs)
        return Column(name, kind, arr.reshape(-1).astype(_DTYPE[kind], copy=False), splits)
    dense = spec if isinstance(spec, np.ndarray) else None
    if dense is not None and dense.dtype != object and dense.ndim in (1, 2):  # dense: one row per record
        rows2 = dense.reshape(len(dense), -1)
        kind = _kind_of_dtype(dense.dtype, name)
        if kind == "byte":
            return Column.from_rows(name, kind, rows2.tolist())
        k = rows2.shape[1]
        splits = np.arange(len(dense) + 1, dtype=np.int64) * k
        return Column(name, kind, np.ascontiguousarray(rows2, dtype=_DTYPE[kind]).reshape(-1), splits)
    rows = [r if isinstance(r, (list, tuple, np.ndarray)) else [r] for r in spec]
    first = next((v for r in rows for v in r), 0)
    kind = (
        "byte"
        if isinstance(first, (bytes, bytearray, memoryview, str))
        else ("float" if isinstance(first, (float, np.floating)) else "int")
    )
    return Column.from_rows(name, kind, rows)


def _engine_columns(columns: Sequence[Column], names: Optional[Sequence[str]] = None) -> List[tuple]:
    """Columns in the engine encoders' form, `(name bytes, kind code, values, row_splits,
    value_offsets, status)`, named by `names` (default: their own names)."""
    out = []
    for name, c in zip(names or [c.name for c in columns], columns):
        if c.kind == "byte" and c.value_offsets is None:
            raise ValueError(f"feature {name!r}: bytes columns need value_offsets")
        out.append(
            (
                name.encode("utf-8"),
                KIND_CODE[c.kind],
                c.values,
                c.row_splits,
                c.value_offsets if c.kind == "byte" else None,
                c.status,
            )
        )
    return out


def _engine_list_columns(columns: Sequence[SequenceColumn]) -> List[tuple]:
    """Feature-list columns in `_engine.encode_sequence_examples`' form: `(name bytes, kind
    code, values, row_splits, step_splits, value_offsets, status)`."""
    return [
        (
            c.name.encode("utf-8"),
            KIND_CODE[c.kind],
            c.values,
            c.row_splits,
            c.step_splits,
            c.value_offsets if c.kind == "byte" else None,
            c.status,
        )
        for c in columns
    ]


def encode_examples(
    columns: Mapping[str, Any], n: Optional[int] = None, framed: bool = False
) -> Union[List[bytes], bytes]:
    """Serialize columns into Examples, byte-identical to upb's deterministic serialization.

    Args:
        columns: `{name: spec}`; a spec is a `Column` (its `status` decides per record: MISSING
            leaves the key out, NO_KIND writes a Feature with no kind), a 1-D array (one value
            per record) or 2-D array (records x values), a `(values, row_splits)` pair, or a
            list with one list of values per record. Kinds follow the dtype (float -> float,
            integer/bool -> int, bytes/str/object -> byte); use `Column` to choose.
        n: number of records (taken from the columns when None).
        framed: return one bytes object holding the records framed as TFRecords (length,
            CRCs), ready to append to a file, instead of a list of payloads.
    """
    cols = [_as_column(name, spec) for name, spec in columns.items()]
    counts = {len(c) for c in cols}
    if n is None:
        if len(counts) > 1:
            raise ValueError(f"columns hold different numbers of records: {sorted(counts)}")
        n = counts.pop() if counts else 0
    elif counts - {n}:
        raise ValueError(f"columns must hold {n} records, not {sorted(counts - {n})}")
    out = _engine.encode_examples(_engine_columns(cols, list(columns)), n, framed)
    if framed:
        return out
    buf, offs = out
    raw, o = buf.tobytes(), offs.tolist()
    return [raw[o[i] : o[i + 1]] for i in range(n)]


def encoded_lengths(columns: Mapping[str, Column], n: int) -> np.ndarray:
    """How long each of the n Examples `encode_examples(columns)` would write is (int64): what
    `tfrecord-beam inspect` on the pure engine compares with the records it decoded. The
    encoder's sizes pass alone: no payload is written."""
    return _engine.example_lengths(_engine_columns(list(columns.values())), n)


# -- batched file readers ------------------------------------------------------------------------


def _batches(
    path, batch_size: int, drop_remainder: bool, reader_kwargs
) -> Iterator[Tuple[Any, Any, Any, Optional[int], Any]]:
    """Yield `(records, offsets, lengths, first_record_number, record_offsets)` per batch of a
    file, slicing the reader's chunks without copying when a batch lies in one chunk."""
    from .records import RecordReader

    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    pending: List[Tuple[Any, int, int]] = []
    count = 0

    def flush():
        chunk, a, _ = pending[0]
        number = None if chunk.first_record_number is None else chunk.first_record_number + a
        rec_offs = np.concatenate([c.record_offsets[s:e] for c, s, e in pending])
        if len(pending) == 1:
            c, s, e = pending[0]
            return c.buffer, c.payload_offsets[s:e], c.payload_lengths[s:e], number, rec_offs
        views = []
        for c, s, e in pending:
            mv = memoryview(c.buffer)
            views.extend(
                mv[o : o + ln] for o, ln in zip(c.payload_offsets[s:e].tolist(), c.payload_lengths[s:e].tolist())
            )
        return views, None, None, number, rec_offs

    for chunk in RecordReader(path, **reader_kwargs).chunks():
        start = 0
        while start < len(chunk):
            take = min(batch_size - count, len(chunk) - start)
            pending.append((chunk, start, start + take))
            count += take
            start += take
            if count == batch_size:
                yield flush()
                pending, count = [], 0
    if pending and not drop_remainder:
        yield flush()


def read_example_batches(
    path: Any,
    description: Description,
    batch_size: int,
    *,
    strict: bool = False,
    drop_remainder: bool = False,
    **reader_kwargs: Any,
) -> Iterator[Dict[str, Column]]:
    """Read a TFRecord file of Examples as batches of columns (`decode_examples` per batch).

    `reader_kwargs` go to `tfrecord_beam.records.RecordReader` (compression, verify,
    start_offset, end_offset, ...). Kinds left out of the description are fixed by the first
    batch. The last batch may be short unless `drop_remainder`.
    """
    desc = normalize_description(description) or {}
    name = str(path) if not hasattr(path, "read") else getattr(path, "name", None)
    for records, offs, lens, number, rec_offs in _batches(path, batch_size, drop_remainder, reader_kwargs):
        cols = decode_examples(
            records,
            desc,
            strict,
            offsets=offs,
            lengths=lens,
            path=name,
            first_record_number=number,
            record_offsets=rec_offs,
        )
        desc = {k: c.kind for k, c in cols.items()}
        yield cols


def read_sequence_example_batches(
    path: Any,
    context_description: Description,
    sequence_description: Description,
    batch_size: int,
    *,
    strict: bool = False,
    drop_remainder: bool = False,
    **reader_kwargs: Any,
) -> Iterator[Tuple[Dict[str, Column], Dict[str, SequenceColumn]]]:
    """Read a TFRecord file of SequenceExamples as batches of `(context, feature lists)`."""
    cdesc = normalize_description(context_description) or {}
    sdesc = normalize_description(sequence_description) or {}
    name = str(path) if not hasattr(path, "read") else getattr(path, "name", None)
    for records, offs, lens, number, rec_offs in _batches(path, batch_size, drop_remainder, reader_kwargs):
        ctx, lists = decode_sequence_examples(
            records,
            cdesc,
            sdesc,
            strict,
            offsets=offs,
            lengths=lens,
            path=name,
            first_record_number=number,
            record_offsets=rec_offs,
        )
        cdesc = {k: c.kind for k, c in ctx.items()}
        sdesc = {k: c.kind for k, c in lists.items()}
        yield ctx, lists
