"""Public transforms on the in-process FnApiRunner: read, write, decode, encode, dead letters."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.transforms import window  # noqa: E402
from helpers.beam_data import example_payloads, plain_payloads, write_file  # noqa: E402
from helpers.fixtures import FIXTURES  # noqa: E402

from tfrecord_beam import example, records  # noqa: E402
from tfrecord_beam.beam import (  # noqa: E402
    CorruptRecord,
    DecodeExamples,
    EncodeExamples,
    ReadAllFromTFRecord,
    ReadFromTFRecord,
    ReadFromTFRecordBatched,
    WriteToTFRecord,
)
from tfrecord_beam.index import build_index  # noqa: E402


def _pipeline():
    return beam.Pipeline(runner=FnApiRunner())


def test_read_write_roundtrip_with_filenames_and_readall(tmp_path):
    first = write_file(tmp_path / "a.tfrecord", plain_payloads(30), index=True)
    second = write_file(tmp_path / "b.tfrecord.gz", plain_payloads(7))
    with _pipeline() as p:
        both = p | "ReadGlob" >> ReadFromTFRecord(str(tmp_path / "*.tfrecord*"))
        assert_that(both, equal_to(plain_payloads(30) + plain_payloads(7)), label="glob")
        named = p | "Named" >> ReadFromTFRecord(first, with_filename=True)
        assert_that(named, equal_to([(first, x) for x in plain_payloads(30)]), label="named")
        patterns = p | beam.Create([first, second, str(tmp_path / "nothing-*.tfrecord")])
        read_all = patterns | ReadAllFromTFRecord(desired_bundle_size=64)
        assert_that(read_all, equal_to(plain_payloads(30) + plain_payloads(7)), label="readall")


def test_read_all_with_filename_and_dead_letters(tmp_path):
    path = write_file(tmp_path / "a.tfrecord", plain_payloads(12))
    data = bytearray(open(path, "rb").read())
    start, length = build_index(path)[4]
    data[int(start + length) - 5] ^= 1
    open(path, "wb").write(bytes(data))
    with _pipeline() as p:
        result = (
            p
            | beam.Create([path])
            | ReadAllFromTFRecord(with_filename=True, skip_corrupt=True, desired_bundle_size=100)
        )
        good = [(path, x) for i, x in enumerate(plain_payloads(12)) if i != 4]
        assert_that(result.records, equal_to(good), label="good")
        assert_that(
            result.corrupt | beam.Map(lambda c: (c.file, c.offset)), equal_to([(path, int(start))]), label="bad"
        )


def test_decode_examples_matches_per_record_decoder(tmp_path):
    payloads = example_payloads(300)
    path = write_file(tmp_path / "ex.tfrecord", payloads, index=True)
    description = {"label": "float", "index": "int", "tokens": "int", "name": "byte"}
    expected = [example.decode_example(p, description) for p in payloads]
    with _pipeline() as p:
        decoded = p | ReadFromTFRecord(path) | DecodeExamples(description, batch_size=64)
        as_tuples = decoded | beam.Map(
            lambda d: (float(d["label"][0]), int(d["index"][0]), tuple(d["tokens"].tolist()), d["name"])
        )
        assert_that(
            as_tuples,
            equal_to(
                [(float(e["label"][0]), int(e["index"][0]), tuple(e["tokens"].tolist()), e["name"]) for e in expected]
            ),
        )


def test_encode_then_write_then_read_decodes_back(tmp_path):
    rows = [
        {"x": (np.arange(i % 4, dtype=np.int64), "int"), "y": (float(i), "float"), "s": (f"r{i}".encode(), "byte")}
        for i in range(100)
    ]
    prefix = str(tmp_path / "enc")
    with _pipeline() as p:
        _ = (
            p
            | beam.Create(rows, reshuffle=False)
            | EncodeExamples(batch_size=16)
            | WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=2)
        )
    got = []
    for shard in sorted((tmp_path).glob("enc-*.tfrecord")):
        got += [example.decode_example(r) for r in records.read_records(shard)]
    got.sort(key=lambda d: float(d["y"][0]))
    assert [d["s"] for d in got] == [f"r{i}".encode() for i in range(100)]
    assert all(d["x"].tolist() == list(range(i % 4)) for i, d in enumerate(got))


def test_sequence_examples_roundtrip(tmp_path):
    pairs = [({"id": (i, "int")}, {"steps": ([[i, 1], [2]], "int")}) for i in range(10)]
    with _pipeline() as p:
        decoded = (
            p
            | beam.Create(pairs, reshuffle=False)
            | EncodeExamples(sequence=True)
            | DecodeExamples({"id": "int"}, {"steps": "int"})
            | beam.Map(lambda cs: (int(cs[0]["id"][0]), [s.tolist() for s in cs[1]["steps"]]))
        )
        assert_that(decoded, equal_to([(i, [[i, 1], [2]]) for i in range(10)]))


def test_decode_skip_corrupt_and_default_failure():
    good = example_payloads(5)
    bad = b"\xff\xff not a protobuf"
    with _pipeline() as p:
        result = p | beam.Create(good + [bad], reshuffle=False) | DecodeExamples(["index"], skip_corrupt=True)
        assert_that(result.examples | beam.Map(lambda d: int(d["index"][0])), equal_to(list(range(5))), label="ok")
        assert_that(
            result.corrupt | beam.Map(lambda c: (c.file, c.offset, "Example" in c.reason)),
            equal_to([(None, None, True)]),
            label="bad",
        )
    with pytest.raises(Exception, match="not a valid Example"):
        with _pipeline() as p:
            _ = p | beam.Create([bad]) | DecodeExamples()


def test_decode_keeps_windows_and_timestamps():
    payloads = example_payloads(6)
    with _pipeline() as p:
        stamped = (
            p
            | beam.Create(list(enumerate(payloads)), reshuffle=False)
            | beam.Map(lambda kv: window.TimestampedValue(kv[1], kv[0] * 10))
        )
        windowed = stamped | beam.WindowInto(window.FixedWindows(25)) | DecodeExamples(["index"], batch_size=4)
        counts = windowed | beam.Map(lambda d: ("n", 1)) | beam.CombinePerKey(sum) | beam.Values()
        assert_that(counts, equal_to([3, 2, 1]))  # windows [0,25) [25,50) [50,75)


def test_read_counters_and_corrupt_failure_names_file(tmp_path):
    payloads = plain_payloads(25)
    path = write_file(tmp_path / "a.tfrecord", payloads)
    pipeline = _pipeline()
    _ = pipeline | ReadFromTFRecord(path)
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    assert counters["records_read"] == 25 and counters["bytes_read"] == sum(map(len, payloads))
    data = bytearray(open(path, "rb").read())
    data[200] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(Exception, match=r"a\.tfrecord.*byte offset \d+.*CRC"):
        with _pipeline() as p:
            _ = p | ReadFromTFRecord(path)
    pipeline = _pipeline()
    result_tuple = pipeline | ReadFromTFRecord(path, skip_corrupt=True)
    assert_that(result_tuple.corrupt | beam.Map(lambda c: isinstance(c, CorruptRecord)), equal_to([True]))
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    assert counters["corrupt_records"] == 1 and counters["records_read"] == 24


def test_batched_read_feeds_write_directly(tmp_path):
    payloads = example_payloads(500)
    path = write_file(tmp_path / "in.tfrecord", payloads, index=True)
    prefix = str(tmp_path / "copy")
    with _pipeline() as p:
        batches = p | ReadFromTFRecordBatched(path)
        _ = batches | WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=1)
        assert_that(batches | beam.FlatMap(lambda b: b), equal_to(payloads))
    (shard,) = sorted(tmp_path.glob("copy-*.tfrecord"))
    assert list(records.read_records(shard)) == payloads  # one batch stays in order


def test_golden_tensorflow_files_read_with_matching_sha256(tmp_path):
    """Files TensorFlow wrote: every record's sha256 and offset match the manifest, plain and compressed."""
    import hashlib
    import json
    import shutil

    manifest = json.loads((FIXTURES / "manifest.json").read_text())["files"]
    names = [
        "examples.tfrecord",
        "examples.tfrecord.gz",
        "examples.tfrecord.zlib",
        "sequence_examples.tfrecord",
        "large_record.tfrecord",
    ]
    for name in names:
        shutil.copy(FIXTURES / name, tmp_path / name)  # never write beside the golden files
    expected = {name: [r["sha256"] for r in manifest[name]["records"]] for name in names}
    with _pipeline() as p:
        for name in names:
            compression = "zlib" if name.endswith(".zlib") else "auto"
            got = (
                p
                | f"Read {name}" >> ReadFromTFRecord(str(tmp_path / name), compression_type=compression)
                | f"Hash {name}" >> beam.Map(lambda b: hashlib.sha256(b).hexdigest())
            )
            assert_that(got, equal_to(expected[name]), label=f"check {name}")


def test_relative_globs_and_prefixes(tmp_path, monkeypatch):
    """Beam's local matcher misses "data*.tfrecord" without a directory; ours resolves it."""
    monkeypatch.chdir(tmp_path)
    write_file("data-a.tfrecord", plain_payloads(6))
    with _pipeline() as p:
        _ = (
            p
            | ReadFromTFRecord("data*.tfrecord")
            | WriteToTFRecord("copied", file_name_suffix=".tfrecord", num_shards=1)
        )
    assert list(records.read_records("copied-00000-of-00001.tfrecord")) == plain_payloads(6)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "copied-00000-of-00001.tfindex",
        "copied-00000-of-00001.tfrecord",
        "data-a.tfrecord",
    ]
