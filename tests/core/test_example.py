"""Example / SequenceExample codec: descriptions, missing features, errors, round trips."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.fixtures import FIXTURES, REPO
from helpers.parity import same_floats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_beam import _proto, example
from tfrecord_beam.errors import DecodeError


def test_descriptions_accept_the_spellings_people_write():
    assert example.normalize_description({"a": "bytes", "b": "int ", "c": " float32", "d": "int64", "e": None}) == {
        "a": "byte",
        "b": "int",
        "c": "float",
        "d": "int",
        "e": None,
    }
    assert example.normalize_description(["x", "y"]) == {"x": None, "y": None}
    assert example.normalize_description(None) is None and example.normalize_description({}) is None
    with pytest.raises(ValueError, match="feature 'a': unknown kind 'double'"):
        example.normalize_description({"a": "double"})


def test_missing_and_kind_unset_features_decode_empty_or_raise_when_strict():
    payload = example.encode_example({"present": ([1, 2], "int")})
    message = _proto.Example.FromString(payload)
    message.features.feature["unset"].SetInParent()  # a Feature with no kind
    payload = message.SerializeToString()
    got = example.decode_example(payload, {"present": "int", "absent": "float", "unset": "byte", "nodtype": None})
    assert got["present"].tolist() == [1, 2]
    assert got["absent"].dtype == np.float32 and got["absent"].size == 0
    assert got["unset"].dtype == object and got["unset"].size == 0
    assert got["nodtype"] is None
    with pytest.raises(KeyError, match="record 7: feature 'absent' is missing"):
        example.decode_example(payload, {"absent": "float"}, strict=True, record_number=7)
    with pytest.raises(KeyError, match="feature 'unset' has no kind set"):
        example.decode_example(payload, {"unset": "byte"}, strict=True)


def test_kind_mismatch_names_feature_and_record():
    payload = example.encode_example({"label": (1.5, "float")})
    with pytest.raises(TypeError, match=r"f.tfrecord, record 3: feature 'label' is 'float'.*asks for 'int'") as info:
        example.decode_example(payload, {"label": "int"}, path="f.tfrecord", record_number=3)
    assert isinstance(info.value, example.FeatureKindError) and info.value.record_number == 3


def test_malformed_payload_is_a_decode_error_naming_the_record():
    with pytest.raises(DecodeError) as info:
        example.decode_example(b"\x0a\xff\xff", path="f", offset=40, record_number=2)
    assert (info.value.path, info.value.offset, info.value.record_number) == ("f", 40, 2)
    assert "not a valid Example" in str(info.value)


def test_bytes_conventions_follow_the_tfrecord_package_without_losing_values():
    payload = example.encode_example({"one": b"a\x00", "many": [b"x\x00", b"", b"z"], "none": ([], "byte")})
    got = example.decode_example(payload)
    assert got["one"] == b"a\x00"
    assert got["many"].dtype == object and got["many"].tolist() == [b"x\x00", b"", b"z"]  # NULs kept
    assert got["none"].tolist() == []


def test_inference_and_explicit_kinds():
    payload = example.encode_example(
        {
            "i": 3,
            "f": 0.5,
            "s": "héllo",
            "b": b"\x01",
            "arr_f": np.array([1, 2], np.float64),
            "arr_u8": (np.array([1, 2, 3], np.uint8), "byte"),
            "arr_i": np.array([-1, 5], np.int32),
            "flag": True,
            "list_f": [1.0, 2.5],
            "explicit": ([1, 2], "float"),
        }
    )
    got = example.decode_example(payload)
    assert got["i"].tolist() == [3] and got["f"].tolist() == [0.5]
    assert got["s"] == "héllo".encode() and got["b"] == b"\x01"
    assert got["arr_f"].dtype == np.float32 and got["arr_u8"] == b"\x01\x02\x03"
    assert got["arr_i"].tolist() == [-1, 5] and got["flag"].tolist() == [1]
    assert got["explicit"].dtype == np.float32
    with pytest.raises(TypeError, match="empty list"):
        example.encode_example({"e": []})


@pytest.mark.parametrize("value", [1 << 63, -(1 << 63) - 1, np.array([1 << 63], dtype=np.uint64), [0, 1 << 64]])
def test_ints_outside_int64_raise(value):
    with pytest.raises(ValueError, match="feature 'big': value outside the int64 range"):
        example.encode_example({"big": (value, "int")})


def test_int64_extremes_survive():
    payload = example.encode_example({"x": ([-(1 << 63), (1 << 63) - 1, -1], "int")})
    assert example.decode_example(payload)["x"].tolist() == [-(1 << 63), (1 << 63) - 1, -1]


def test_output_matches_deterministic_protobuf_serialization():
    datum = {"z": ([1, 2], "int"), "a": ([0.5], "float"), "m": ([b"q"], "byte")}
    message = _proto.Example()
    message.features.feature["z"].int64_list.value.extend([1, 2])
    message.features.feature["a"].float_list.value.extend([0.5])
    message.features.feature["m"].bytes_list.value.extend([b"q"])
    assert example.encode_example(datum) == message.SerializeToString(deterministic=True)


def test_private_pool_coexists_with_tensorflow_named_protos_in_the_default_pool():
    """In a child process: registering `tensorflow.Example` in protobuf's default pool (what
    TensorFlow does when imported) is process-wide and permanent, and in the test worker it made
    a later `import tfrecord.reader` (the `tfrecord` package registers the same names from its
    own file) fail with "duplicate symbol 'tensorflow.BytesList'" in whichever tests ran after
    this one (tests/core/test_read_options.py's signature tests, issue 37 item 8)."""
    code = textwrap.dedent(
        """
        from google.protobuf import descriptor_pool

        from tfrecord_beam import example
        from tfrecord_beam._proto import _build_file

        proto = _build_file()
        proto.name = "tensorflow/core/example/example_for_test.proto"
        pool = descriptor_pool.Default()
        pool.Add(proto)  # what TensorFlow does when it is imported
        assert pool.FindMessageTypeByName("tensorflow.Example") is not None
        payload = example.encode_example({"a": 1})
        assert example.decode_example(payload)["a"].tolist() == [1]
        print("ok")
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_no_test_leaves_tensorflow_names_in_the_default_pool():
    """The guard for the test above: the worker's default pool holds `tensorflow.Example` only
    from the `tfrecord` package's own file (example.proto), never from a test."""
    from google.protobuf import descriptor_pool

    try:
        found = descriptor_pool.Default().FindMessageTypeByName("tensorflow.Example")
    except KeyError:
        return
    assert found.file.name == "example.proto", found.file.name


def test_sequence_example_round_trip_and_missing_lists():
    payload = example.encode_sequence_example(
        {"length": (3, "int"), "label": (1, "int")},
        {"tokens": ([[0, 0, 1], [0, 1, 0], [1, 0, 0]], "int"), "seq_labels": ([0, 1, 1], "int")},
    )
    context, lists = example.decode_sequence_example(payload, {"length": "int"}, {"tokens": "int", "nope": "float"})
    assert context["length"].tolist() == [3]
    assert [t.tolist() for t in lists["tokens"]] == [[0, 0, 1], [0, 1, 0], [1, 0, 0]]
    assert lists["nope"] == []
    with pytest.raises(KeyError, match="feature list 'nope' is missing"):
        example.decode_sequence_example(payload, None, {"nope": "float"}, strict=True)
    with pytest.raises(TypeError, match="cannot infer"):
        example.encode_sequence_example({}, {"e": [[], []]})


def test_hand_encoded_fixture_follows_protobuf_semantics():
    from tfrecord_beam.records import RecordReader

    got = [example.decode_example(p) for p in RecordReader(FIXTURES / "hand_encoded.tfrecord")]
    assert got[2]["ints"].tolist() == [1, 2, 3]  # split packed runs (TensorFlow drops the 3)
    assert got[3]["dup"] == b"second"  # duplicate map key: last wins
    assert got[4]["ints"].dtype == np.float32  # oneof set twice: last kind wins
    assert set(got[6]) == {"merged_a", "merged_b"}  # repeated Features merged
    assert got[8]["no_kind"] is None and "" in got[9]


# --- property tests ----------------------------------------------------------------------

_names = st.text(min_size=0, max_size=8)
_floats = st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=6)
_ints = st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), max_size=6)
_bytes = st.lists(st.binary(max_size=12), max_size=4)
_feature = st.one_of(
    _floats.map(lambda v: (v, "float")), _ints.map(lambda v: (v, "int")), _bytes.map(lambda v: (v, "byte"))
)


def _same(kind, got, want):
    if kind == "float":
        return same_floats(got, want)
    if kind == "int":
        return got.tolist() == list(want)
    got = [got] if isinstance(got, bytes) else got.tolist()
    return got == list(want)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_names, _feature, max_size=5))
def test_examples_round_trip(datum):
    payload = example.encode_example(datum)
    got = example.decode_example(payload, {k: kind for k, (_, kind) in datum.items()})
    for name, (values, kind) in datum.items():
        assert _same(kind, got[name], values)
    assert example.decode_example(payload).keys() == datum.keys()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(_names, _feature, max_size=3),
    st.dictionaries(
        _names,
        st.one_of(
            st.lists(_floats, max_size=4).map(lambda v: (v, "float")),
            st.lists(_ints, max_size=4).map(lambda v: (v, "int")),
            st.lists(_bytes, max_size=4).map(lambda v: (v, "byte")),
        ),
        max_size=3,
    ),
)
def test_sequence_examples_round_trip(context, lists):
    payload = example.encode_sequence_example(context, lists)
    got_ctx, got_lists = example.decode_sequence_example(
        payload, {k: kind for k, (_, kind) in context.items()}, {k: kind for k, (_, kind) in lists.items()}
    )
    for name, (values, kind) in context.items():
        assert _same(kind, got_ctx[name], values)
    for name, (steps, kind) in lists.items():
        assert len(got_lists[name]) == len(steps)
        for got, want in zip(got_lists[name], steps):
            assert _same(kind, got, want)
