"""The batched read path's pieces: payload slicing (compiled and pure twin alike, bounds
checked) and the coder of batched reads' lists (ListCoder's bytes, a cheap size estimate,
the `List[bytes]` type hint)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers.parity import both

apache_beam = pytest.importorskip("apache_beam")
from apache_beam import coders  # noqa: E402
from apache_beam.coders.typecoders import registry  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.typehints import List as ListHint  # noqa: E402

from tfrecord_beam import records  # noqa: E402
from tfrecord_beam.beam import ReadFromTFRecordBatched  # noqa: E402
from tfrecord_beam.beam._coders import PayloadList, PayloadListCoder  # noqa: E402


def test_slice_payloads_parity_and_bounds():
    rng = np.random.default_rng(1)
    buf = os.urandom(5000)
    offsets = rng.integers(0, 5000, 700)
    lengths = np.minimum(rng.integers(0, 300, 700), 5000 - offsets)
    expected = [buf[o : o + n] for o, n in zip(offsets.tolist(), lengths.tolist())]
    for source in (buf, bytearray(buf), memoryview(buf), np.frombuffer(buf, np.uint8)):
        got = both("slice_payloads", source, offsets, lengths)
        assert got == expected and all(type(p) is bytes for p in got)
    assert both("slice_payloads", buf, np.zeros(0, np.int64), np.zeros(0, np.int64)) == []
    assert both("slice_payloads", buf, [5000], [0]) == [b""]
    for offset, length in ((-1, 1), (4999, 2), (5001, 0), (0, -1), (1, 1 << 62)):
        assert both("slice_payloads", buf, [0, offset], [1, length]) is ValueError
    assert both("slice_payloads", buf, [0, 1], [1]) is ValueError


def test_chunk_payloads_are_the_records(tmp_path):
    payloads = [os.urandom(i % 50) for i in range(3000)]
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, payloads)
    chunks = records.RecordReader(path, None, chunk_size=4096).chunks()
    assert [p for chunk in chunks for p in chunk.payloads()] == payloads


@pytest.mark.parametrize("value", [[], [b""], [b"a" * 200, b"b"], [os.urandom(n % 300) for n in range(2000)]])
def test_payload_list_coder_is_list_coder_with_a_cheap_estimate(value):
    ours, stock = PayloadListCoder(), coders.ListCoder(coders.BytesCoder())
    assert ours.encode(value) == stock.encode(value) and ours.decode(stock.encode(value)) == value
    exact = len(stock.encode(value))
    estimate = ours.get_impl().estimate_size(value)
    assert exact - len(value) <= estimate <= exact + len(value)  # off by the length prefixes at most
    assert ours.get_impl().get_estimated_size_and_observables(value) == (estimate, [])


def test_payload_list_hint_is_list_of_bytes_and_picks_the_coder():
    hint = PayloadList()
    assert hint == ListHint[bytes] and ListHint[bytes] == hint and hash(hint) == hash(ListHint[bytes])
    assert hint != ListHint[int]
    assert isinstance(registry.get_coder(hint), PayloadListCoder)
    assert isinstance(registry.get_coder(ListHint[bytes]), coders.ListCoder)
    assert not isinstance(registry.get_coder(ListHint[bytes]), PayloadListCoder)  # others' lists untouched


def test_batched_read_emits_payload_lists(tmp_path):
    payloads = [b"r%d" % i for i in range(500)]
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, payloads)
    with apache_beam.Pipeline() as p:
        batches = p | ReadFromTFRecordBatched(path)
        assert isinstance(registry.get_coder(batches.element_type), PayloadListCoder)
        assert_that(batches | apache_beam.FlatMap(lambda b: b), equal_to(payloads))
