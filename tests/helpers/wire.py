"""A tiny protobuf wire writer for tests: Examples encoded the many valid ways upb accepts
(packed/unpacked runs, split lists, duplicate keys, oneof replaced, unknown fields, entries
missing key or value), so the parity tests cover more than TensorFlow ever writes."""

from __future__ import annotations

import struct

from hypothesis import strategies as st


def varint(n: int, pad: int = 0) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n or pad > 0:
            out.append(b | 0x80)
            if not n:
                pad -= 1
                if pad == 0:
                    out.append(0)
                    return bytes(out)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wt: int) -> bytes:
    return varint(field << 3 | wt)


def ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


UNKNOWN_FIELDS = [  # one of each wire type upb keeps as unknown (varint, 32/64-bit, bytes, group)
    tag(9, 0) + b"\x05",
    tag(10, 5) + b"abcd",
    tag(11, 1) + b"12345678",
    ld(12, b"xy"),
    tag(13, 3) + tag(14, 0) + b"\x01" + tag(13, 4),
]
UNKNOWN = st.sampled_from(UNKNOWN_FIELDS)


@st.composite
def list_message(draw, kind: int, values: list) -> bytes:
    """BytesList / FloatList (values as float32 bit patterns) / Int64List, runs split at random."""
    out = b""
    i = 0
    while i < len(values) or (i == 0 and draw(st.booleans())):
        run = values[i : i + draw(st.integers(1, 4))] if values else []
        i += max(len(run), 1)
        if kind == 1:
            out += b"".join(ld(1, v) for v in run)
        elif kind == 2:
            raw = b"".join(struct.pack("<I", v) for v in run)
            out += (
                ld(1, raw)
                if draw(st.booleans())
                else b"".join(tag(1, 5) + raw[k : k + 4] for k in range(0, len(raw), 4))
            )
        else:
            pad = draw(st.sampled_from([0, 0, 0, 1]))
            enc = [varint(v, pad if v >= 0 and v < 1 << 56 else 0) for v in run]
            out += ld(1, b"".join(enc)) if draw(st.booleans()) else b"".join(tag(1, 0) + e for e in enc)
        if draw(st.integers(0, 9)) == 0:
            out += draw(UNKNOWN)
    return out


def values_of(kind: int):
    if kind == 1:
        return st.lists(st.binary(max_size=6), max_size=5)
    if kind == 2:
        return st.lists(
            st.one_of(
                st.integers(0, 2**32 - 1), st.sampled_from([0x7FC00000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001])
            ),
            max_size=6,
        )
    return st.lists(
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 2**63 - 1, -1, 0, 127, 128])), max_size=6
    )


@st.composite
def feature(draw) -> bytes:
    """A Feature: maybe no kind, maybe a replaced kind first, maybe unknown fields."""
    if draw(st.integers(0, 9)) == 0:
        return b""
    out = b""
    if draw(st.integers(0, 5)) == 0:  # a kind set first, then replaced (last kind wins)
        k = draw(st.integers(1, 3))
        out += ld(k, draw(list_message(k, draw(values_of(k)))))
    k = draw(st.integers(1, 3))
    vals = draw(values_of(k))
    if draw(st.integers(0, 5)) == 0:  # the same kind twice: lists merge
        cut = draw(st.integers(0, len(vals)))
        out += ld(k, draw(list_message(k, vals[:cut]))) + ld(k, draw(list_message(k, vals[cut:])))
    else:
        out += ld(k, draw(list_message(k, vals)))
    if draw(st.integers(0, 9)) == 0:
        out += draw(UNKNOWN)
    return out


NAMES = st.sampled_from(["a", "b", "tokens", "", "ключ", "é", "ab"])


@st.composite
def entry(draw, value: bytes, name: str) -> bytes:
    """A map entry: key/value in either order, maybe no key, value split in two, or an
    unknown field (upb then drops the entry)."""
    parts = [ld(1, name.encode())] if (name or draw(st.booleans())) else []
    parts.append(ld(2, value))
    if draw(st.integers(0, 3)) == 0:
        parts.reverse()
    if draw(st.integers(0, 12)) == 0:
        parts.append(draw(UNKNOWN))
    return b"".join(parts)


@st.composite
def features_map(draw, value_strategy, max_size: int = 6) -> list:
    """A list of map entries (serialized), duplicate keys included."""
    names = draw(st.lists(NAMES, max_size=max_size))
    return [ld(1, draw(entry(draw(value_strategy), n))) for n in names]


@st.composite
def example(draw) -> bytes:
    entries = draw(features_map(feature()))
    cut = draw(st.integers(0, len(entries)))
    out = ld(1, b"".join(entries[:cut]))
    if cut < len(entries) or draw(st.booleans()):  # Features repeated: maps merge
        out += ld(1, b"".join(entries[cut:]))
    if draw(st.integers(0, 6)) == 0:
        out = draw(UNKNOWN) + out
    return out


@st.composite
def feature_list(draw) -> bytes:
    return b"".join(ld(1, draw(feature())) for _ in range(draw(st.integers(0, 4))))


@st.composite
def sequence_example(draw) -> bytes:
    # the context is parsed as an Example's features (the same map and feature code in both
    # engines), which `example()` draws at full size: two entries here still mix context and
    # lists in one record, and the draws go to the feature lists (most of the generation time)
    ctx = b"".join(draw(features_map(feature(), max_size=2)))
    lists = b"".join(draw(features_map(feature_list())))
    parts = [ld(1, ctx), ld(2, lists)]
    if draw(st.booleans()):
        parts.reverse()
    if draw(st.integers(0, 6)) == 0:
        parts.append(draw(UNKNOWN))
    return b"".join(parts)


DESCRIPTION = st.dictionaries(
    st.sampled_from(["a", "b", "tokens", "", "ключ", "é", "missing"]), st.integers(1, 3), max_size=5
)
