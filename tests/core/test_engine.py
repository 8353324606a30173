"""The engine package: one pure twin per compiled function, picked in one place, same results."""

from __future__ import annotations

import os
import random

import numpy as np
from helpers.parity import NATIVE, PURE, both, needs_native

from tfrecord_beam import _engine, _proto, columnar
from tfrecord_beam._engine import _common, _encode
from tfrecord_beam.example import encode_sequence_example

# Compiled functions whose pure twin is elsewhere: the plain CRC32C (tests of the C table and
# instruction), the per-record encoders, whose twin is example.py's Python path, and inspect's
# statistics, whose twin is cli/inspection's statistics of decoded columns
# (tests/cli/test_inspect_kernel.py holds both to the per-record parse).
_NO_TWIN_HERE = {
    "crc32c",
    "example_stats",
    "crc32c_hw",
    "encode_example",
    "encode_sequence_example",
    "append_example",
    "append_sequence_example",
}


@needs_native
def test_every_compiled_function_has_one_pure_twin():
    compiled = {n for n in dir(NATIVE) if not n.startswith("_") and callable(getattr(NATIVE, n))}
    assert compiled - _NO_TWIN_HERE <= set(PURE), sorted(compiled - _NO_TWIN_HERE - set(PURE))
    for name in compiled - _NO_TWIN_HERE:  # and the engine hands out one of the two
        assert getattr(_engine, name) in (getattr(NATIVE, name), PURE[name]), name


def test_frame_records_and_unverified_scans_agree():
    rng = random.Random(7)
    for _ in range(60):
        payloads = [os.urandom(rng.choice([0, 1, 9, 300, 5000])) for _ in range(rng.randrange(0, 12))]
        kinds = [bytes, bytearray, memoryview]
        framed = both("frame_records", [kinds[i % 3](p) for i, p in enumerate(payloads)])
        assert framed == b"".join(_common_frame(p) for p in payloads)
        for cut in (len(framed), len(framed) - 1, len(framed) // 2, 5):
            both("scan_frames", framed[: max(cut, 0)], False)


def _common_frame(payload: bytes) -> bytes:
    """One frame built from the format's definition, record by record."""
    import struct

    from tfrecord_beam._engine._framing import masked_crc32c

    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked_crc32c(head)) + payload + struct.pack("<I", masked_crc32c(payload))


def test_one_kind_table():
    assert _common.KIND_NAME[_common.KIND_CODE["float"]] == "float"
    assert (columnar.MISSING, columnar.NO_KIND, columnar.PRESENT) == (_common.MISSING, _common.NO_KIND, _common.PRESENT)


def test_sequence_encoder_writes_no_kind_and_missing_as_upb():
    """Context NO_KIND rows are a Feature with no kind; a MISSING feature list leaves the key out."""
    ctx = columnar.Column(
        "c",
        "int",
        np.array([4], np.int64),
        np.array([0, 1, 1, 1]),
        None,
        np.array([columnar.PRESENT, columnar.NO_KIND, columnar.MISSING], np.uint8),
    )
    lists = columnar.SequenceColumn(
        "s",
        "float",
        np.array([0.5, 1.5], np.float32),
        np.array([0, 2, 2, 2]),
        np.array([0, 1, 2]),
        None,
        np.array([columnar.PRESENT, columnar.MISSING, columnar.PRESENT], np.uint8),
    )
    data, offsets = _engine.encode_sequence_examples(
        columnar._engine_columns([ctx]), columnar._engine_list_columns([lists]), 3
    )
    got = _encode.split_payloads(data, offsets)
    kindless = _proto.SequenceExample()
    kindless.context.feature["c"].SetInParent()  # a Feature with no kind; no feature_lists at all
    empty_list = _proto.SequenceExample()
    empty_list.context.SetInParent()
    empty_list.feature_lists.feature_list["s"].SetInParent()  # present with no steps
    assert got == [
        encode_sequence_example({"c": ([4], "int")}, {"s": ([[0.5], [1.5]], "float")}),
        kindless.SerializeToString(deterministic=True),
        empty_list.SerializeToString(deterministic=True),
    ]
    assert _encode.split_payloads(*_encode.encode_sequence_examples([], [], 2)) == [encode_sequence_example({}, {})] * 2
