"""Framing and CRC32C: the compiled core against the pure twin (fixtures, mutations, sizes)."""

import os
import random

import google_crc32c
import numpy as np
import pytest
from helpers.fixtures import FIXTURES
from helpers.parity import NATIVE, both, needs_native


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.tfrecord")))
def test_scan_fixture_parity(name):
    buf = (FIXTURES / name).read_bytes()
    for verify in (True, False, 2):
        for max_records in (-1, 0, 1, 3):
            both("scan_frames", buf, verify, max_records)
    for cut in range(0, min(len(buf), 64)):
        both("scan_frames", buf[: len(buf) - cut])


def test_scan_mutations_parity():
    buf = (FIXTURES / "examples.tfrecord").read_bytes()
    rng = random.Random(3)
    for _ in range(300):
        b = bytearray(buf)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        both("scan_frames", bytes(b), rng.choice([True, True, False, 2]))


def test_scan_many_records_and_memoryview():
    payloads = [os.urandom(i % 37) for i in range(5000)]  # crosses the binding's growth steps
    framed = both("frame_records", payloads)
    offs, lens, consumed, status = both("scan_frames", framed)
    assert (consumed, status, len(offs)) == (len(framed), 0, 5000)
    both("scan_frames", memoryview(framed)[100:], True, 10)


@needs_native
@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 1023, 3071, 3072, 3073, 9216, 100_003])
def test_crc32c_paths_agree(size):
    data = os.urandom(size)
    want = google_crc32c.value(data)
    assert NATIVE.crc32c(data) == want
    assert NATIVE.crc32c(data, True) == want
    both("masked_crc32c", data)
    both("masked_crc32c", bytearray(data))


def test_verify_lengths_checks_headers_but_not_payloads():
    from tfrecord_beam._engine._common import STATUS_BAD_LENGTH_CRC, STATUS_OK, VERIFY_LENGTHS

    framed = bytearray(both("frame_records", [b"abc", b"defg"]))
    framed[13] ^= 1  # payload of record 0
    offs, _, consumed, status = both("scan_frames", bytes(framed), VERIFY_LENGTHS)
    assert (len(offs), consumed, status) == (2, len(framed), STATUS_OK)
    framed[19 + 2] ^= 1  # length field of record 1
    offs, _, consumed, status = both("scan_frames", bytes(framed), VERIFY_LENGTHS)
    assert (len(offs), consumed, status) == (1, 19, STATUS_BAD_LENGTH_CRC)
    assert both("scan_frames", bytes(framed), 3) is ValueError  # both engines refuse unknown levels


def test_find_length_crc_parity():
    framed = both("frame_records", [b"abc", b"", os.urandom(300), b"x" * 70])
    rng = random.Random(5)
    for start in range(0, len(framed) + 2):
        both("find_length_crc", framed, start)
    noisy = bytearray(framed)
    for _ in range(40):
        noisy[rng.randrange(len(noisy))] ^= 1 << rng.randrange(8)
        for start in (0, 1, 17, 200):
            both("find_length_crc", bytes(noisy), start)
    assert both("find_length_crc", b"short", 0) == -1
    assert both("find_length_crc", framed, -1) is ValueError


def test_find_length_crcs_lists_what_find_length_crc_finds():
    framed = both("frame_records", [b"abc", b"", os.urandom(300), b"x" * 70] * 200)  # > 256 hits: grows
    rng = random.Random(6)
    noisy = bytearray(framed)
    for _ in range(60):
        noisy[rng.randrange(len(noisy))] ^= 1 << rng.randrange(8)
    for data in (framed, bytes(noisy)):
        for start in (0, 1, 13, len(data) // 2, len(data) - 11, len(data) + 3):
            found = both("find_length_crcs", data, start)
            walk, i = [], both("find_length_crc", data, start)
            while i >= 0:
                walk.append(i)
                i = both("find_length_crc", data, i + 1)
            assert found.dtype == np.int64 and found.tolist() == walk
    assert len(both("find_length_crcs", framed, 0)) >= 800
    assert both("find_length_crcs", b"short", 0).tolist() == []
    assert both("find_length_crcs", framed, -1) is ValueError
