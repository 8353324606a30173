"""Every TensorFlow-written golden file is read and compared with its manifest."""

from __future__ import annotations

import hashlib
import math

import pytest
from helpers.fixtures import FIXTURES, MANIFEST, fixture_files, manifest_value

from tfrecord_beam import example, index
from tfrecord_beam.errors import CorruptRecordError, TruncatedRecordError
from tfrecord_beam.records import RecordReader

READABLE = fixture_files(lambda n, m: "records" in m)
DAMAGED = fixture_files(lambda n, m: "corruption" in m)
_KIND_NAMES = {"byte": "bytes_list", "float": "float_list", "int": "int64_list", None: None}


def _feature_content(feature):
    kind, values = example.feature_values(feature)
    return {"kind": _KIND_NAMES[kind], "value": values}


def _expected_feature(meta):
    return {"kind": meta["kind"], "value": [manifest_value(meta["kind"], v) for v in meta["value"]]}


def _same(a, b):
    assert a["kind"] == b["kind"]
    assert len(a["value"]) == len(b["value"])
    for x, y in zip(a["value"], b["value"]):
        if isinstance(y, dict):  # large bytes values are recorded by length and sha256
            assert len(x) == y["length"] and hashlib.sha256(x).hexdigest() == y["sha256"]
        elif isinstance(x, float):
            assert (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
        else:
            assert x == y


def _check_content(kind, payload, content):
    if kind == "Example":
        features = example.parse_example(payload).features.feature
        assert sorted(features) == sorted(content["features"])
        for name, meta in content["features"].items():
            _same(_feature_content(features[name]), _expected_feature(meta))
    else:
        message = example.parse_sequence_example(payload)
        context = message.context.feature
        assert sorted(context) == sorted(content["context"])
        for name, meta in content["context"].items():
            _same(_feature_content(context[name]), _expected_feature(meta))
        lists = message.feature_lists.feature_list
        assert sorted(lists) == sorted(content["feature_lists"])
        for name, steps in content["feature_lists"].items():
            assert len(lists[name].feature) == len(steps)
            for got, meta in zip(lists[name].feature, steps):
                _same(_feature_content(got), _expected_feature(meta))


@pytest.mark.parametrize("name", READABLE)
def test_readable_fixture_matches_manifest(name):
    meta = MANIFEST["files"][name]
    pairs = list(RecordReader(FIXTURES / name).records_with_offsets())
    assert len(pairs) == meta["record_count"]
    for (offset, payload), want in zip(pairs, meta["records"]):
        assert offset == want["offset"]
        assert len(payload) == want["length"]
        assert hashlib.sha256(payload).hexdigest() == want["sha256"]
        _check_content(meta["kind"], payload, want["content"])


@pytest.mark.parametrize("name", fixture_files(lambda n, m: "index_file" in m))
def test_our_index_equals_the_fixture_index_byte_for_byte(name):
    meta = MANIFEST["files"][name]
    expected = (FIXTURES / meta["index_file"]).read_bytes()
    assert index.format_index(index.build_index(FIXTURES / name)) == expected
    assert index.format_index(index.build_index(FIXTURES / name, verify=True)) == expected
    assert index.default_index_path(str(FIXTURES / name)) == str(FIXTURES / meta["index_file"])


@pytest.mark.parametrize("name", fixture_files(lambda n, m: "records" in m and m["compression"] != "NONE"))
def test_compressed_fixture_index_counts_uncompressed_offsets(name):
    meta = MANIFEST["files"][name]
    built = index.build_index(FIXTURES / name)
    assert [tuple(r) for r in built.tolist()] == [(r["offset"], r["length"] + 16) for r in meta["records"]]


@pytest.mark.parametrize("name", DAMAGED)
def test_damaged_fixture_fails_after_the_intact_records(name):
    meta = MANIFEST["files"][name]
    good = []
    with pytest.raises(CorruptRecordError) as info:
        for payload in RecordReader(FIXTURES / name):
            good.append(payload)
    tf = meta["tensorflow_read"]
    assert len(good) == tf["good_records"]
    err = info.value
    assert err.path == str(FIXTURES / name)
    assert err.record_number == len(good)
    assert str(FIXTURES / name) in str(err) and f"record {len(good)}" in str(err)
    region = meta["corruption"].get("region", "")
    if meta["corruption"]["type"] == "truncate":
        assert isinstance(err, TruncatedRecordError)
    else:
        assert not isinstance(err, TruncatedRecordError)
        assert ("length" if "length" in region else "payload") in err.reason
    source = MANIFEST["files"][meta["corruption"]["derived_from"]]
    if "records" in source and len(good) < len(source["records"]):
        assert err.offset == source["records"][len(good)]["offset"]


def test_truncated_tail_is_tolerated_only_on_request():
    meta = MANIFEST["files"]["truncated_mid_header.tfrecord"]
    got = list(RecordReader(FIXTURES / "truncated_mid_header.tfrecord", allow_truncated_tail=True))
    assert len(got) == meta["intact_records_before"]
    for name in ("truncated_mid_payload.tfrecord", "truncated_mid_footer.tfrecord", "truncated.tfrecord.gz"):
        got = list(RecordReader(FIXTURES / name, allow_truncated_tail=True))
        assert len(got) == MANIFEST["files"][name]["tensorflow_read"]["good_records"]


@pytest.mark.parametrize("name", ["corrupt_data_crc.tfrecord", "corrupt_payload_bitflip.tfrecord"])
def test_verify_false_reads_payload_damage_through(name):
    meta = MANIFEST["files"][name]
    assert len(list(RecordReader(FIXTURES / name, verify=False))) == meta["records_in_source"]
