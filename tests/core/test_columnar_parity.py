"""Columnar decode/encode: compiled core and pure twin give identical results on fixtures,
generated Examples/SequenceExamples encoded every valid way, and hostile bytes."""

import os
import random
import struct

import numpy as np
import pytest
from helpers import wire as _wire
from helpers.fixtures import FIXTURES
from helpers.parity import KIND_CODE, both, manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_beam._engine import _framing
from tfrecord_beam._proto import Example


def examples(n: int):
    """Settings for a generated test: n examples, or TFRB_HYPOTHESIS_EXAMPLES for a deeper run.

    The n below are sized by what one example holds, not by habit: almost all of these tests'
    CPU is hypothesis drawing the wire bytes (the engines' work is under 5%), and each example
    is many records, each record many map entries and features, so the rare encodings the
    generators pick per feature (1 in 6 to 1 in 13: no kind, a replaced kind, split lists,
    unknown fields, reversed entries) each come up dozens of times even at n = 40. The
    deterministic cases beside them (the fixtures, 1,200 mutated records, the depth limits and
    tests/fuzz_corpus) cover hostile bytes; these cover valid encodings."""
    return settings(
        max_examples=int(os.environ.get("TFRB_HYPOTHESIS_EXAMPLES", n)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def frames(name):
    buf = (FIXTURES / name).read_bytes()
    offs, lens, _, _ = _framing.scan_frames(buf, verify=False)
    return buf, offs, lens


def fixture_description(name):
    """{name: kind code} over a fixture's records (the first kind seen), as lists of bytes/ints."""
    files = manifest()["files"][name]
    kinds, lists = {}, {}
    for rec in files["records"]:
        c = rec["content"]
        for k, f in c.get("features", c.get("context", {})).items():
            if f["kind"]:
                kinds.setdefault(k, KIND_CODE[f["kind"]])
        for k, steps in c.get("feature_lists", {}).items():
            for f in steps:
                if f["kind"]:
                    lists.setdefault(k, KIND_CODE[f["kind"]])
    return kinds, lists


def _decode_value(kind, v):
    if kind == "bytes_list":
        import base64

        return base64.b64decode(v) if isinstance(v, str) else None
    if kind == "float_list":
        return int(v, 16)
    return int(v)


def _column_values(col, kind_code):
    values, splits, voffs, status = col
    if kind_code == 1:
        raw = values.tobytes()
        flat = [raw[voffs[k] : voffs[k + 1]] for k in range(len(voffs) - 1)]
    elif kind_code == 2:
        flat = values.view(np.uint32).tolist()
    else:
        flat = values.tolist()
    return [flat[splits[i] : splits[i + 1]] for i in range(len(splits) - 1)], status.tolist()


@pytest.mark.parametrize("name", ["examples.tfrecord", "hand_encoded.tfrecord", "large_record.tfrecord"])
def test_example_fixtures_match_manifest(name):
    """Per record (one at a time, so one kind mismatch does not hide the rest): the decoded
    values are what protobuf says the record holds."""
    buf, offs, lens = frames(name)
    records = manifest()["files"][name]["records"]
    for i, rec in enumerate(records):
        for feat, f in rec["content"]["features"].items():
            for code in (1, 2, 3):
                cols, err = both("decode_examples", buf, [feat.encode()], [code], offs[i : i + 1], lens[i : i + 1])
                if f["kind"] is None:
                    assert err is None and cols[0][3].tolist() == [1]
                elif KIND_CODE[f["kind"]] != code:
                    assert err == (2, 0, 0, KIND_CODE[f["kind"]])
                else:
                    assert err is None
                    got, status = _column_values(cols[0], code)
                    want = [_decode_value(f["kind"], v) for v in f["value"]]
                    if None not in want:
                        assert got == [want]
                    assert status == [2]
        cols, err = both("decode_examples", buf, [b"no such feature"], [3], offs[i : i + 1], lens[i : i + 1])
        assert cols[0][3].tolist() == [0]


@pytest.mark.parametrize(
    "name", ["examples.tfrecord", "hand_encoded.tfrecord", "large_record.tfrecord", "sequence_examples.tfrecord"]
)
def test_fixture_batches_both_input_forms(name):
    buf, offs, lens = frames(name)
    kinds, lists = fixture_description(name)
    names, codes = [k.encode() for k in kinds], list(kinds.values())
    payloads = [buf[o : o + n] for o, n in zip(offs.tolist(), lens.tolist())]
    if name.startswith("sequence"):
        a = both(
            "decode_sequence_examples", buf, names, codes, [k.encode() for k in lists], list(lists.values()), offs, lens
        )
        b = both("decode_sequence_examples", payloads, names, codes, [k.encode() for k in lists], list(lists.values()))
    else:
        a = both("decode_examples", buf, names, codes, offs, lens)
        b = both("decode_examples", [memoryview(p) for p in payloads], names, codes)
    assert repr(a) == repr(b)


def test_sequence_fixture_matches_manifest():
    buf, offs, lens = frames("sequence_examples.tfrecord")
    records = manifest()["files"]["sequence_examples.tfrecord"]["records"]
    for i, rec in enumerate(records):
        for feat, steps in rec["content"]["feature_lists"].items():
            kinds = {KIND_CODE[s["kind"]] for s in steps if s["kind"]} or {3}
            if len(kinds) > 1:
                continue
            code = kinds.pop()
            ctx, lists, err = both(
                "decode_sequence_examples", buf, [], [], [feat.encode()], [code], offs[i : i + 1], lens[i : i + 1]
            )
            assert err is None
            values, row_splits, step_splits, voffs, status = lists[0]
            assert row_splits.tolist() == [0, len(steps)] and status.tolist() == [2]
            got, _ = _column_values((values, step_splits, voffs, np.zeros(len(steps), np.uint8)), code)
            want = [[_decode_value(s["kind"], v) for v in s["value"]] if s["kind"] else [] for s in steps]
            assert got == want


@examples(60)
@given(st.lists(_wire.example(), max_size=6), _wire.DESCRIPTION)
def test_generated_examples_parity(records, description):
    names, codes = [k.encode() for k in description], list(description.values())
    cols, err = both("decode_examples", records, names, codes)
    for r in records:  # upb accepts every generated record
        Example.FromString(r)
    if err is None:
        assert all(len(c[1]) == len(records) + 1 for c in cols)


@examples(40)
@given(st.lists(_wire.sequence_example(), max_size=5), _wire.DESCRIPTION, _wire.DESCRIPTION)
def test_generated_sequence_examples_parity(records, cdesc, sdesc):
    both(
        "decode_sequence_examples",
        records,
        [k.encode() for k in cdesc],
        list(cdesc.values()),
        [k.encode() for k in sdesc],
        list(sdesc.values()),
    )


def _mutate(rng, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[rng.randrange(len(b))] = rng.choice([0x00, 0x80, 0xFF, 0x0A, 0x12, 0x1A, 0x03, 0x04, 0x07])
        elif op == 2:
            del b[rng.randrange(len(b) + 1) :]
        else:
            pos = rng.randrange(len(b) + 1)
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    return bytes(b)


@pytest.mark.parametrize("name", ["examples.tfrecord", "hand_encoded.tfrecord", "sequence_examples.tfrecord"])
def test_hostile_mutations_parity(name):
    buf, offs, lens = frames(name)
    kinds, lists = fixture_description(name)
    names, codes = [k.encode() for k in kinds], list(kinds.values())
    payloads = [buf[o : o + n] for o, n in zip(offs.tolist(), lens.tolist())]
    rng = random.Random(name)
    for _ in range(400):
        rec = _mutate(rng, rng.choice(payloads))
        if name.startswith("sequence"):
            both("decode_sequence_examples", [rec], names, codes, [k.encode() for k in lists], list(lists.values()))
        else:
            both("decode_examples", [rec], names, codes)


def test_hostile_arguments_same_errors():
    both("decode_examples", b"abc", [b"a"], [3], [0], [4])  # length past the buffer
    both("decode_examples", b"abc", [b"a"], [3], [-1], [1])
    both("decode_examples", b"abc", [b"a"], [3], [0, 1], [1])
    both("decode_examples", [b""], [b"a"], [7])
    both("encode_examples", [(b"a", 3, np.arange(3), np.array([0, 2, 5]), None, None)], 2)
    both("encode_examples", [(b"a", 3, np.arange(3), np.array([0, 2]), None, None)], 2)
    both("encode_examples", [(b"a", 1, np.zeros(3, np.uint8), np.array([0, 1, 2]), np.array([0, 2, 9]), None)], 2)
    assert both("encode_examples", [(b"\xff", 3, np.arange(1), np.array([0, 1]), None, None)], 1) is UnicodeDecodeError
    assert both("example_lengths", [(b"a", 3, np.arange(3), np.array([0, 2, 5]), None, None)], 2) is ValueError
    assert both("example_lengths", [(b"a", 3, np.arange(3), np.array([0, 2]), None, None)], 2) is ValueError
    assert (
        both("example_lengths", [(b"a", 1, np.zeros(3, np.uint8), np.array([0, 1, 2]), np.array([0, 2, 9]), None)], 2)
        is ValueError
    )
    assert both("example_lengths", [(b"\xff", 3, np.arange(1), np.array([0, 1]), None, None)], 1) is UnicodeDecodeError
    assert both("example_lengths", [], -1) is ValueError


def _list_variants(kind):
    """A list message of each kind written every way upb reads it: packed, unpacked, runs
    split, a padded varint, empty (the generators below draw from the same space at random)."""
    w = _wire
    if kind == 1:
        vals = [b"x", b"", b"yz"]
        return [b"", b"".join(w.ld(1, v) for v in vals), w.ld(1, vals[0]) + w.UNKNOWN_FIELDS[0] + w.ld(1, vals[2])]
    if kind == 2:
        raw = b"".join(struct.pack("<I", v) for v in (0x7FC00001, 0x80000000, 0x3F800000))
        unpacked = b"".join(w.tag(1, 5) + raw[k : k + 4] for k in range(0, len(raw), 4))
        return [b"", w.ld(1, raw), unpacked, w.ld(1, raw[:4]) + unpacked[5:], w.ld(1, b"")]
    enc = [w.varint(v) for v in (-1, 0, 2**63 - 1, 300)]
    return [
        b"",
        w.ld(1, b"".join(enc)),
        b"".join(w.tag(1, 0) + e for e in enc),
        w.ld(1, b"".join(enc[:2])) + w.tag(1, 0) + enc[2] + w.ld(1, enc[3]),
        w.ld(1, w.varint(5, pad=2)),
    ]


def _feature_variants():
    """Features of every shape: no kind, each list form, a kind replaced (once, and back again:
    what came before the other kind is dropped), the same kind twice (lists merge), an unknown
    field."""
    w, out = _wire, [b""]
    for k in (1, 2, 3):
        other = 3 if k != 3 else 2
        firsts = _list_variants(k)
        out += [w.ld(k, lst) for lst in firsts]
        out += [
            w.ld(other, _list_variants(other)[1]) + w.ld(k, firsts[1]),
            w.ld(k, firsts[1]) + w.ld(other, b""),
            w.ld(k, firsts[1]) + w.ld(other, b"") + w.ld(k, firsts[-1]),
            w.ld(k, firsts[1]) + w.ld(k, firsts[-1]),
            w.ld(k, firsts[1]) + w.UNKNOWN_FIELDS[4],
        ]
    return out


def _entry_variants(name: bytes, value: bytes):
    """Map entries: key then value, value then key, no key, no value, a second key (the last
    wins), an unknown field (upb drops the entry)."""
    w = _wire
    key, val = w.ld(1, name), w.ld(2, value)
    return [key + val, val + key, val, key, w.ld(1, b"zz") + key + val, key + val + w.UNKNOWN_FIELDS[3]]


def test_every_encoding_variant_parity():
    """Every feature shape in every entry shape, alone, after a duplicate key, in Features
    repeated and behind an unknown field, decoded as each kind: the generated tests below
    sample this space at random; this walks it."""
    w = _wire
    feats = _feature_variants()
    records = []
    for f in feats:
        for e in _entry_variants(b"a", f):
            first = w.ld(1, w.ld(1, w.ld(1, b"a") + w.ld(2, feats[1])))  # a duplicate "a" before
            records += [w.ld(1, w.ld(1, e)), first + w.ld(1, w.ld(1, e)), w.UNKNOWN_FIELDS[1] + w.ld(1, w.ld(1, e))]
    for want in (1, 2, 3):
        for r in records:  # one record per call: a kind mismatch ends a batch
            both("decode_examples", [r], [b"a", b"b"], [want, 3])
        both("decode_examples", records[:40], [b"a", b"zz"], [want, want])
    for i, f in enumerate(feats):
        steps = w.ld(1, f) + w.ld(1, b"") + w.ld(1, feats[(i * 7) % len(feats)])
        for e in _entry_variants(b"a", steps):
            ctx, lists = w.ld(1, w.ld(1, w.ld(1, b"a") + w.ld(2, f))), w.ld(2, w.ld(1, e))
            for rec in (ctx + lists, lists + ctx + w.UNKNOWN_FIELDS[2]):
                for want in (1, 2, 3):
                    both("decode_sequence_examples", [rec], [b"a"], [want], [b"a", b"zz"], [want, 1])


def test_depth_limit_parity():
    def grp(d):
        return _wire.tag(5, 3) * d + _wire.tag(5, 4) * d

    for d in (96, 97, 99, 100, 101):
        inner = _wire.ld(1, _wire.ld(1, _wire.ld(1, b"a") + _wire.ld(2, _wire.ld(3, grp(d)))))
        both("decode_examples", [grp(d), inner], [b"a"], [3])
        both("decode_examples", [inner], [b"a"], [3])


def _packed_run_values(raw: bytes):
    """The int64 values of a packed run as upb reads it, or None when the run is malformed (a
    varint longer than 10 bytes or not ending inside the run); bits past 64 are dropped."""
    vals, v, n = [], 0, 0
    for b in raw:
        v |= (b & 0x7F) << (7 * n)
        n += 1
        if b < 0x80:
            v &= (1 << 64) - 1
            vals.append(v - (1 << 64) if v >> 63 else v)
            v = n = 0
        elif n == 10:
            return None
    return None if n else vals


def _packed_runs():
    """Packed Int64List runs at the edges of the compiled core's word-at-a-time path: varints
    of every length 1-10 mixed at random (so they straddle 8-byte words), padded ones, runs cut
    mid-varint (at 8-byte boundaries too), a 10th byte >= 0x80 or below it with high bits, an
    11-byte varint, a long run of 1-byte values, empty runs."""
    rng = random.Random(8)

    def of_length(n):
        if n == 10:
            return rng.choice([-1, -(2**63), rng.randrange(-(2**63), 0), rng.randrange(2**63, 2**64)])
        return rng.randrange(1 << (7 * (n - 1)), 1 << (7 * n)) if n > 1 else rng.randrange(128)

    runs = [b"", bytes(range(128)) * 3, b"\x7f" * 64]
    for n in range(1, 11):
        runs += [_wire.varint(of_length(n)) * k for k in (1, 2, 3, 9)]
    runs += [b"\xff" * 9 + bytes([b]) for b in (0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF)]  # the 10th byte
    runs += [b"\x80" * 9 + b"\x00", b"\x80" * 10 + b"\x00", b"\x01" * 7 + b"\x80" * 10 + b"\x00"]
    runs += [_wire.varint(5, pad=p) for p in (6, 7, 8, 9, 10)]
    runs += [b"\x01" * 7 + b"\x80", b"\x01" * 15 + b"\xff", b"\x81" * 8, b"\x81" * 16]  # cut at a word's end
    for _ in range(300):
        lengths = rng.choice([[1, 2, 3], [1, 2, 3, 8, 9, 10], list(range(1, 11)), [2, 3]])
        raw = b"".join(_wire.varint(of_length(rng.choice(lengths))) for _ in range(rng.randrange(1, 40)))
        roll = rng.randrange(6)
        if roll == 0:  # cut: mid-varint or not, at a word boundary or anywhere
            raw = raw[: rng.choice([8, 16, 24, rng.randrange(len(raw) + 1)])]
        elif roll == 1 and raw:  # one continuation bit flipped
            i = rng.randrange(len(raw))
            raw = raw[:i] + bytes([raw[i] ^ 0x80]) + raw[i + 1 :]
        runs.append(raw)
    return runs


def test_packed_int64_run_edges():
    """Each run decoded (and only validated, when not described) with 0-12 bytes of record
    after it (the core reads ahead up to the record's end), in the usual one-run layout and in
    the general list walk: the values are upb's (checked here too, not only between engines),
    a malformed run is the record's error."""
    w = _wire
    for raw in _packed_runs():
        want = _packed_run_values(raw)
        for after in (0, 2, 3, 9, 12):  # an unknown field after the features, of `after` bytes
            for lst in (w.ld(1, raw), w.UNKNOWN_FIELDS[0] + w.ld(1, raw)):
                features = w.ld(1, w.ld(1, w.ld(1, b"a") + w.ld(2, w.ld(3, lst))))
                rec = features + (w.ld(15, b"x" * (after - 2)) if after else b"")
                for names in ([b"a"], []):
                    cols, err = both("decode_examples", [rec], names, [3] * len(names))
                    if want is None:
                        assert err == (1, 0, -1, 0)
                    elif names == [b"a"]:
                        assert err is None and cols[0][0].tolist() == want


# -- encode ----------------------------------------------------------------------------------

ROWS = {
    1: st.lists(st.lists(st.binary(max_size=5), max_size=4), min_size=1, max_size=6),
    2: st.lists(st.lists(st.integers(0, 2**32 - 1), max_size=4), min_size=1, max_size=6),
    3: st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4), min_size=1, max_size=6),
}


@st.composite
def encode_columns(draw):
    n = draw(st.integers(0, 6))
    cols = []
    for name in draw(st.lists(_wire.NAMES, unique=True, max_size=5)):
        kind = draw(st.integers(1, 3))
        rows = draw(st.lists(ROWS[kind].map(lambda r: r[0]), min_size=n, max_size=n))
        lens = [len(r) for r in rows]
        splits = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        flat = [v for r in rows for v in r]
        voffs = None
        if kind == 1:
            values = np.frombuffer(b"".join(flat), np.uint8)
            voffs = np.concatenate([[0], np.cumsum([len(v) for v in flat])]).astype(np.int64)
        elif kind == 2:
            values = np.array(flat, dtype=np.uint32).view(np.float32)
        else:
            values = np.array(flat, dtype=np.int64)
        status = draw(st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=n, max_size=n)))
        if status is not None:
            status = np.array(status, dtype=np.uint8)
        cols.append((name.encode(), kind, values, splits, voffs, status))
    return n, cols


@examples(60)
@given(encode_columns())
def test_encode_parity_and_roundtrip(case):
    n, cols = case
    payloads, offsets = both("encode_examples", cols, n)
    framed = both("encode_examples", cols, n, True)
    assert both("example_lengths", cols, n).tolist() == np.diff(offsets).tolist()  # the sizes pass alone
    records = [payloads[offsets[i] : offsets[i + 1]].tobytes() for i in range(n)]
    assert framed == _framing.frame_records(records)
    for r in records:  # upb writes the very same bytes
        assert Example.FromString(r).SerializeToString(deterministic=True) == r
    decoded, err = both("decode_examples", records, [c[0] for c in cols], [c[1] for c in cols])
    assert err is None
    for (_name, kind, values, splits, voffs, status), (dv, ds, dvo, dst) in zip(cols, decoded):
        st_ = np.full(n, 2, np.uint8) if status is None else status
        assert dst.tolist() == st_.tolist()
        keep = [i for i in range(n) if st_[i] == 2]
        got, _ = _column_values((dv, ds, dvo, dst), kind)
        want, _ = _column_values((values.view(np.uint32) if kind == 2 else values, splits, voffs, st_), kind)
        if kind == 2:
            want = [[int(x) for x in row] for row in want]
        assert [got[i] for i in keep] == [want[i] for i in keep]


def test_upb_key_order_is_mirrored():
    names = ["ab", "a", "", "b", "abc", "aa", "é"]
    cols = [(k.encode(), 3, np.array([1]), np.array([0, 1]), None, None) for k in names]
    payloads, _ = both("encode_examples", cols, 1)
    ex = Example()
    for k in names:
        ex.features.feature[k].int64_list.value.append(1)
    assert payloads.tobytes() == ex.SerializeToString(deterministic=True)


def test_float_bits_survive_both_ways():
    bits = np.array([0x7FC00000, 0x7F800001, 0xFFC12345, 0x80000000, 1], dtype=np.uint32)
    cols = [(b"f", 2, bits.view(np.float32), np.array([0, 5]), None, None)]
    payloads, _ = both("encode_examples", cols, 1)
    decoded, _ = both("decode_examples", [payloads.tobytes()], [b"f"], [2])
    assert decoded[0][0].view(np.uint32).tolist() == bits.tolist()
    assert struct.pack("<5I", *bits.tolist()) in payloads.tobytes()
