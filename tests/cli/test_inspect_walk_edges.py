"""Edges of inspect's compiled statistics walk that the kernel tests leave out: more features
than its first hash table holds, keys in another order in each record (the order guess misses),
a key twice where the first of them came by the order guess; the halves read stopping when
the main thread is interrupted, and counting rows uncompared only where there is no index."""

from __future__ import annotations

import functools
import threading
import types

import numpy as np
import pytest
from helpers.inspect_stats import one_buffer

from tfrecord_beam import _engine
from tfrecord_beam.cli import _scan
from tfrecord_beam.cli.inspection import DatasetStats, IndexCheck, collect_stats
from tfrecord_beam.example import encode_example
from tfrecord_beam.index import create_index
from tfrecord_beam.records import RecordReader, write_records

needs_native = pytest.mark.skipif(not _engine.NATIVE, reason="compiled core not built")


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _entry(key: bytes, value: int) -> bytes:
    """A map entry: key, then a Feature holding one packed int64 (value < 128)."""
    return _field(1, _field(1, key) + _field(2, _field(3, _field(1, bytes([value])))))


def _walked(payloads) -> DatasetStats:
    stats = DatasetStats()
    stats.add_payloads(*one_buffer(payloads))
    return stats


def _parsed(payloads) -> DatasetStats:
    stats = DatasetStats()
    for payload in payloads:
        stats.add_record(payload)
    return stats


@needs_native
def test_many_features_in_shuffled_orders_are_the_per_record_parse():
    """300 features (the walk's table grows from 64 slots several times), each record holding a
    random subset in a random order, so that the guess of the record before misses at once."""
    rng = np.random.default_rng(3)
    names = [f"feature_{k}" for k in range(300)]
    payloads = []
    for _ in range(400):
        picked = rng.choice(len(names), size=int(rng.integers(0, 120)), replace=False)
        payloads.append(
            encode_example({names[k]: ([int(v) for v in rng.integers(-9, 9, size=k % 4)], "int") for k in picked})
        )
    taken, summaries = _engine.example_stats(*one_buffer(payloads))
    assert taken == len(payloads) and len(summaries) > 64
    assert len({s[0] for s in summaries}) == len(summaries)  # one tuple a feature, found again after each growth
    assert _walked(payloads).to_dict() == _parsed(payloads).to_dict()


@needs_native
def test_a_key_twice_after_the_order_guess_took_it_is_not_walked():
    """Record 2 repeats record 1's keys in order (the guess takes them), then "a" again: protobuf
    keeps the last entry, so the walk leaves the record to the per-record parse."""
    payloads = [
        _field(1, _entry(b"a", 1) + _entry(b"b", 2)),
        _field(1, _entry(b"a", 3) + _entry(b"b", 4) + _entry(b"a", 5)),
        _field(1, _entry(b"a", 6)),
    ]
    taken, _ = _engine.example_stats(*one_buffer(payloads))
    assert taken == 1
    walked = _walked(payloads).to_dict()
    assert walked == _parsed(payloads).to_dict()
    assert [(f["name"], f["min"], f["max"]) for f in walked["features"]] == [("a", 1, 6), ("b", 2, 4)]


class _Interrupted(Exception):
    """What the main thread's wait raises in the test (a Ctrl-C stand-in)."""


@needs_native
def test_an_interrupt_stops_the_halves(tmp_path, monkeypatch):
    """Interrupted while it waits for the two halves (Ctrl-C), the scan ends at their next chunk
    rather than reading the rest of the file before the interrupt gets out. The interrupt is
    raised by the main thread's wait once a half reported a chunk (no signal: its timing would
    depend on where the main thread happens to be)."""
    path = tmp_path / "big.tfrecord"
    write_records(str(path), [encode_example({"id": (i, "int")}) for i in range(20000)])
    monkeypatch.setattr(_scan, "_SPLIT_MIN", 1)
    monkeypatch.setattr(_scan, "RecordReader", functools.partial(RecordReader, chunk_size=4096))
    events = []

    class Recorded(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            events.append(self)

    monkeypatch.setattr(_scan, "threading", types.SimpleNamespace(Lock=threading.Lock, Event=Recorded))
    reported = threading.Event()
    calls = []

    def progress(*done) -> None:  # in a half's thread, under the halves' lock
        calls.append(done)
        if len(calls) == 1:
            reported.set()
            events[0].wait(10)  # until the halves are told to stop (the main thread's part)

    class Pool(_scan.ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            future = super().submit(*args, **kwargs)

            def interrupted(timeout=None):
                reported.wait(10)
                raise _Interrupted()

            future.exception = interrupted
            return future

    monkeypatch.setattr(_scan, "ThreadPoolExecutor", Pool)
    with pytest.raises(_Interrupted):
        collect_stats([str(path)], progress=progress)
    assert len(calls) <= 2  # at most the other half's chunk in hand, then both stopped
    assert len(calls) < 20000 // 400  # the file holds many more chunks


def test_rows_are_counted_uncompared_only_without_an_index(tmp_path):
    """`IndexCheck.count` (the halves' way) refuses data with an index: its rows must be compared."""
    path = tmp_path / "data.tfrecord"
    write_records(str(path), [b"a", b"bb", b"ccc"])
    bare = IndexCheck(str(path), None)
    bare.count(3)
    assert bare.absent() and bare.status().state == "absent" and bare.rows == 3
    create_index(str(path))
    indexed = IndexCheck(str(path), None)
    assert not indexed.absent()
    with pytest.raises(ValueError, match="must be compared"):
        indexed.count(3)


@needs_native
def test_sequence_example_data_goes_the_per_record_way_without_walking(monkeypatch):
    """Each SequenceExample stops the walk: once one was seen, the records go straight to the
    per-record parse (no walk started per record), with the same statistics."""
    from tfrecord_beam.example import encode_sequence_example

    calls = []
    real = _engine.example_stats
    monkeypatch.setattr(_engine, "example_stats", lambda *a: calls.append(a[3] if len(a) > 3 else 0) or real(*a))
    payloads = [encode_example({"id": (i, "int")}) for i in range(5)]
    payloads += [encode_sequence_example({"id": (i, "int")}, {"s": ([[i], [1, 2]], "int")}) for i in range(200)]
    walked = DatasetStats()
    walked.add_payloads(*one_buffer(payloads))
    walked.add_payloads(*one_buffer(payloads[:50]))  # a later chunk: no walk at all
    assert calls == [0]  # one walk, stopped at the first SequenceExample
    parsed = DatasetStats()
    for payload in payloads + payloads[:50]:
        parsed.add_record(payload)
    assert walked.to_dict() == parsed.to_dict()
