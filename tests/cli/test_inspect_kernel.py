"""inspect's fast statistics: the compiled `example_stats` (records in the form writers produce,
anything else stopping it before that record) and the scan of a big file as two halves at once,
each held to the per-record parse (protobuf) and to the read of the file in one chain."""

from __future__ import annotations

import functools
import os
import struct

import numpy as np
import pytest
from helpers.inspect_stats import batched_stats_of, one_buffer, stats_of

from tfrecord_beam import _engine
from tfrecord_beam._engine._framing import frame_records
from tfrecord_beam.cli import _scan
from tfrecord_beam.cli.inspection import collect_stats
from tfrecord_beam.example import decode_example, encode_example, encode_sequence_example
from tfrecord_beam.index import create_index, default_index_path
from tfrecord_beam.records import RecordReader, write_records

needs_native = pytest.mark.skipif(not _engine.NATIVE, reason="compiled core not built")


@pytest.fixture(params=["compiled", "pure"])
def statistics_engine(request, monkeypatch):
    """The compiled statistics, or the pure engine's way (the batched decoder's columns)."""
    if request.param == "compiled":
        if not _engine.NATIVE:
            pytest.skip("compiled core not built")
    else:
        from tfrecord_beam._engine import _decode, _encode

        monkeypatch.setattr(_engine, "example_stats", None)
        monkeypatch.setattr(_engine, "decode_examples", _decode.decode_examples)
        monkeypatch.setattr(_engine, "example_lengths", _encode.example_lengths)
    return request.param


# -- hand-made wire forms ----------------------------------------------------------------------


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(key: bytes, feature: bytes) -> bytes:
    return _field(1, _field(1, key) + _field(2, feature))


def _example(*entries: bytes) -> bytes:
    return _field(1, b"".join(entries))


def _packed_ints(encoded: bytes) -> bytes:
    """A Feature holding an Int64List of one packed run of these varint bytes."""
    return _field(3, _field(1, encoded))


def _odd_records():
    """Records the writers never make but protobuf reads: each must give the per-record parse's
    statistics whichever way it goes."""
    five_long = b"\x85\x00"  # 5 in two bytes: not the shortest form
    minus_one = _varint(-1)  # ten bytes
    return [
        b"",  # an empty Example
        _example(_entry(b"v", _packed_ints(five_long + _varint(100)))),
        _example(_entry(b"v", _packed_ints(_varint(3) + five_long))),  # the long form at the run's end
        _example(_entry(b"v", _packed_ints(minus_one + _varint(7) + _varint(2**62)))),
        _example(_entry(b"v", _packed_ints(b"".join(_varint(k) for k in range(60))))),  # 1-byte values
        _example(_entry(b"v", _field(3, b"\x08\x05\x08\x06"))),  # unpacked ints
        _example(_entry(b"x", _field(2, b"\x0d" + struct.pack("<f", 1.5) + b"\x0d" + struct.pack("<f", -3.0)))),
        _example(_entry(b"v", _packed_ints(_varint(1))), _entry(b"v", _packed_ints(_varint(9)))),  # key twice
        _example(_entry(b"v", _field(1, _field(1, b"a")) + _field(3, _field(1, _varint(4))))),  # oneof twice
        _example(_entry(b"v", _packed_ints(_varint(1)))) + _field(5, b"zz"),  # unknown field
        _example(_entry(b"v", _packed_ints(_varint(1)) + b"\x28\x01")),  # unknown field in the Feature
        _field(1, _field(1, _field(2, _packed_ints(_varint(8))) + _field(1, b"v"))),  # value before key
        _example(_entry(b"v", _packed_ints(_varint(11)))) + _example(_entry(b"w", _packed_ints(_varint(12)))),
        _example(_entry(b"\xff\xfe", _packed_ints(_varint(1)))),  # a key that is not UTF-8: invalid
        _example(_entry(b"k\xc3\xa9", _packed_ints(_varint(1)))),  # a UTF-8 key
        _example(_entry(b"v", b"")),  # no kind
        _example(_entry(b"v", _field(3, b""))),  # an empty list
        _example(_entry(b"t", _field(1, b"".join(_field(1, v) for v in _tricky_bytes())))),
        b"\x0a\x05\x0a\x03\x0a\x01",  # cut short
    ]


def _tricky_bytes():
    """Bytes values at the edges of UTF-8 (Python's strict decoder is the judge)."""
    return [
        b"plain",
        "é日本".encode(),
        "\U0001f600".encode(),
        b"\xc0\x80",  # overlong
        b"\xed\xa0\x80",  # a surrogate
        b"\xf4\x90\x80\x80",  # past U+10FFFF
        b"ab\xe6\x97",  # cut in the middle of a character
        b"12345678\xff",  # a bad byte after a whole ASCII word
        b"\x89PNG\r\n\x1a\n" + bytes(16),
        b"",
    ]


def _varied(n: int, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        features = {"id": (i, "int")}
        if i % 3:
            features["score"] = ([float(v) for v in rng.normal(size=i % 4)] + [float("nan")] * (i % 7 == 0), "float")
        if i % 5 != 1:
            features["name"] = ([f"n{i}".encode(), b"\xff\xfe" if i % 11 == 0 else b""], "byte")
        if i % 4 == 0:
            top = int(rng.choice([2**7, 2**14, 2**21, 2**35, 2**56, 2**63]))
            features["tokens"] = (rng.integers(-top if i % 8 == 0 else 0, top, size=int(rng.integers(0, 70))), "int")
        if i % 17 == 0:
            features[f"rare{i % 2}"] = ([-(2**63), 2**63 - 1], "int")
        out.append(encode_example(features))
    return out


# -- the statistics ------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 9, 400])
def test_statistics_are_the_per_record_parse_whatever_the_records(statistics_engine, batch):
    """Odd wire forms (long varints, a key twice, a oneof set twice, unknown fields, entries in
    another order, Features twice, bad keys, bytes at UTF-8's edges), SequenceExamples and
    broken records among plain ones give exactly the per-record statistics."""
    # the pure engine a record at a time learns features record by record: fewer records there
    plain = _varied(600 if statistics_engine == "compiled" or batch > 1 else 150, seed=batch)
    sequence = encode_sequence_example({"id": (3, "int")}, {"steps": ([[1, 2], [3]], "int")})
    for extra in ([], [sequence]):
        payloads = plain[:250] + _odd_records() + extra + plain[250:]
        assert batched_stats_of(payloads, batch).to_dict() == stats_of(payloads).to_dict()


def _signed(stats) -> str:
    """The statistics as JSON text, where -0.0 and 0.0 differ (they compare equal as floats)."""
    import json

    return json.dumps(stats.to_dict(), sort_keys=True)


def _zero_records():
    """Float features holding -0.0 and 0.0 (equal, but not the same value) in every order,
    beside NaN, infinities and empty lists, one value list a record."""
    import itertools

    nan, inf = float("nan"), float("inf")
    lists = [list(p) for p in itertools.permutations([-0.0, 0.0, nan])]
    lists += [[0.0], [-0.0], [], [nan], [inf, -0.0], [0.0, -inf], [-inf, inf, nan], [-0.0, -0.0, 0.0, 0.0]]
    return lists


@pytest.mark.parametrize("batch", [1, 2, 3, 400])
@pytest.mark.parametrize("order", ["forward", "backward", "negative_zero_first", "zero_first"])
def test_signed_zero_nan_and_inf_give_the_same_range_every_way(statistics_engine, batch, order):
    """Of -0.0 and 0.0 the first seen is the min (and the max) kept, whichever way a batch
    goes; NaN is counted apart, infinities are in the range (issue 34 item 11: the pure
    engine's batches said max 0.0 where the per-record parse said -0.0)."""
    lists = _zero_records()
    if order == "backward":
        lists = lists[::-1]
    elif order == "negative_zero_first":
        lists = [[-0.0, 0.0], [0.0], [-0.0, 0.0, 0.0], [0.0, -0.0]]
    elif order == "zero_first":
        lists = [[0.0, -0.0], [-0.0], [0.0, -0.0, -0.0], [-0.0, 0.0]]
    payloads = [encode_example({"f": (values, "float")}) for values in lists]
    expected = stats_of(payloads)
    got = batched_stats_of(payloads, batch)
    assert _signed(got) == _signed(expected)
    lo, hi = expected.features["f"].float_range
    first_zero = next(v for values in lists for v in values if v == 0)
    if order.endswith("zero_first"):  # the first zero seen is both ends, with its sign
        assert str(lo) == str(hi) == str(first_zero)


@needs_native
def test_int_ranges_of_random_packed_runs():
    """Packed int64 runs of every length class (1-10 bytes), shortest form or not, ending at the
    record's end or not, each the only run of its feature: each range and count is the one
    protobuf reads (wherever in an 8-byte word the smallest and largest value lie)."""
    rng = np.random.default_rng(7)
    payloads = []
    for i in range(3000):
        bits = int(rng.integers(1, 65))
        values = [int(v) for v in rng.integers(0, 2**bits, size=int(rng.integers(0, 40)), dtype=np.uint64)]
        encoded = [_varint(v) for v in values]
        if i % 5 == 0 and encoded:  # one value in a longer form than it needs
            k = int(rng.integers(0, len(encoded)))
            if len(encoded[k]) < 10:
                encoded[k] = encoded[k][:-1] + bytes([encoded[k][-1] | 0x80, 0])
        entries = [_entry(b"v%d" % i, _packed_ints(b"".join(encoded)))]  # a feature per run: its own range
        if i % 2:
            entries.append(_entry(b"z", _packed_ints(_varint(i))))  # the run is not the record's end
        payloads.append(_example(*entries))
    for payload in payloads[:50]:
        decode_example(payload)  # protobuf reads them all
    assert batched_stats_of(payloads, 100).to_dict() == stats_of(payloads).to_dict()


@needs_native
def test_compiled_statistics_take_what_writers_make_in_one_call():
    """Plain Example data never leaves the compiled walk: one call takes the whole batch."""
    payloads = _varied(500, seed=2)
    taken, summaries = _engine.example_stats(*one_buffer(payloads))
    assert taken == len(payloads)
    assert sorted(s[0] for s in summaries) == sorted(stats_of(payloads).features)


@needs_native
def test_compiled_statistics_stop_before_the_record_they_do_not_take():
    """The walk stops before a record in another form and counts nothing of it; `start` goes on
    after it; offsets outside the buffer are an error naming the record."""
    good = encode_example({"a": ([1, 2], "int")})
    odd = good + _field(5, b"zz")
    buffer, offsets, lengths = one_buffer([good, good, odd, good])
    taken, summaries = _engine.example_stats(buffer, offsets, lengths)
    assert taken == 2 and summaries[0][1] == 2  # two records hold "a"
    taken, summaries = _engine.example_stats(buffer, offsets, lengths, 3)
    assert taken == 1 and summaries[0][1] == 1
    with pytest.raises(ValueError, match="record 1: offset"):
        _engine.example_stats(buffer, offsets, lengths + np.array([0, 10**6, 0, 0]))
    with pytest.raises(ValueError, match="start"):
        _engine.example_stats(buffer, offsets, lengths, 5)


# -- two halves at once ------------------------------------------------------------------------


def _scan_both_ways(path, monkeypatch, **kwargs):
    """collect_stats of one file read as halves, and in one chain; and whether the halves
    accounted it."""
    halves = []
    real = _scan._scan_halves
    monkeypatch.setattr(_scan, "_SPLIT_MIN", 1)
    monkeypatch.setattr(_scan, "RecordReader", functools.partial(RecordReader, chunk_size=2048))
    monkeypatch.setattr(_scan, "_scan_halves", lambda *a: halves.append(real(*a)) or halves[-1])
    lines = []
    split = collect_stats([str(path)], progress=lambda *done: lines.append(done), **kwargs)
    monkeypatch.setattr(_scan, "_halves_apply", lambda *a: False)
    chain = collect_stats([str(path)], **kwargs)
    return split, chain, halves, lines


def _same(split, chain) -> None:
    a, b = split.to_dict(), chain.to_dict()
    for f in a["files"] + b["files"]:
        f["error"] = f["error"] and f["error"].split(":")[0]  # the path; the text is compared below
    assert a == b
    assert [f.error for f in split.files] == [f.error for f in chain.files]


@needs_native
def test_halves_give_the_statistics_of_one_chain(tmp_path, monkeypatch):
    payloads = (
        _varied(3000, seed=5)
        + _odd_records()[:13]
        + [encode_sequence_example({"id": (1, "int")}, {"s": ([[1]], "int")})]
    )
    path = tmp_path / "big.tfrecord"
    write_records(str(path), payloads)
    split, chain, halves, lines = _scan_both_ways(path, monkeypatch)
    assert halves == [True]  # the halves accounted the file
    _same(split, chain)
    assert split.files[0].records == len(payloads) and split.files[0].complete
    assert split.to_dict()["files"][0]["data_bytes"] == path.stat().st_size
    got, want = split.to_dict(), stats_of(payloads).to_dict()
    got.pop("files"), want.pop("files")
    assert got == want
    records = [done[3] for done in lines]
    assert records == sorted(records) and records[-1] == len(payloads)  # progress only grows


@needs_native
@pytest.mark.parametrize("where", [0.2, 0.8])
def test_a_corrupt_record_in_either_half_reads_one_chain(tmp_path, monkeypatch, where):
    """Bad data in a half: nothing of the halves is kept, and the one-chain read reports the
    record by number with every record before it counted."""
    payloads = _varied(3000, seed=6)
    path = tmp_path / "bad.tfrecord"
    write_records(str(path), payloads)
    bad = int(len(payloads) * where)
    data = bytearray(path.read_bytes())
    data[sum(16 + len(p) for p in payloads[:bad]) + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    split, chain, halves, _ = _scan_both_ways(path, monkeypatch)
    assert halves == [False]
    _same(split, chain)
    assert split.files[0].records == bad and f"record {bad}" in split.files[0].error


@needs_native
@pytest.mark.parametrize("builder", ["phantom_file", "phantom_over_a_boundary"])
def test_a_split_the_resync_cannot_find_reads_one_chain(tmp_path, monkeypatch, builder):
    """A payload embedding a whole frame where the halves meet (`phantom_file`), or a frame
    inside the record before a middle that is a record boundary, passing for a record that
    spans it (`phantom_over_a_boundary`: the second half's resync skips the next record, which
    the halves lost without a word before the first half checked its end there too): the
    first half's end check finds the resync does not land where its records continue, and the
    file is read in one chain, intact."""
    from helpers import crafted

    path = tmp_path / "phantom.tfrecord"
    payloads = getattr(crafted, builder)(path)
    split, chain, halves, _ = _scan_both_ways(path, monkeypatch)
    assert halves == [False]
    _same(split, chain)
    assert split.files[0].records == len(payloads) and split.files[0].error is None


@needs_native
def test_halves_only_where_they_can_be_exact(tmp_path, monkeypatch):
    """An index to compare with (in order), a limit, a compressed file or a small one: one chain."""
    payloads = _varied(400, seed=8)
    plain, packed = tmp_path / "plain.tfrecord", tmp_path / "packed.tfrecord.gz"
    write_records(str(plain), payloads)
    write_records(str(packed), payloads, compression="gzip")
    monkeypatch.setattr(_scan, "_SPLIT_MIN", 1)
    tried = []
    real = _scan._scan_halves
    monkeypatch.setattr(_scan, "_scan_halves", lambda *a: tried.append(a[1]) or real(*a))
    collect_stats([str(plain)], limit=100)
    collect_stats([str(packed)])
    assert tried == []
    create_index(str(plain))
    stats = collect_stats([str(plain)])
    assert tried == [] and stats.files[0].index.state == "valid"
    monkeypatch.setattr(_scan, "_SPLIT_MIN", plain.stat().st_size + 1)
    os.unlink(default_index_path(str(plain)))
    collect_stats([str(plain)])
    assert tried == []


def test_merged_statistics_are_those_of_the_records_together():
    """DatasetStats.merge: the statistics of A's records then B's, sample and all."""
    payloads = _varied(300, seed=9) + [encode_sequence_example({"id": (1, "int")}, {"s": ([[1, 2], [3]], "int")})]
    payloads += [
        frame_records([b"x"]),
        _example(_entry(b"t", _field(1, b"".join(_field(1, v) for v in _tricky_bytes())))),
    ]
    for cut in (0, 1, 150, len(payloads)):
        merged = stats_of(payloads[:cut])
        merged.merge(stats_of(payloads[cut:]))
        assert merged.to_dict() == stats_of(payloads).to_dict()
