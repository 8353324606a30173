"""`.tfindex` files: build, load (0, 1, N lines), verify, shard ranges, no partial output."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import codecs
from helpers.fixtures import FIXTURES

from tfrecord_beam import index, records
from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError


def _write(path, payloads, **kw):
    records.write_records(str(path), payloads, **kw)
    return path


@pytest.mark.parametrize("count", [0, 1, 5])
def test_load_files_of_zero_one_and_n_lines(tmp_path, count):
    path = _write(tmp_path / "d.tfrecord", [b"x" * i for i in range(count)])
    built = index.create_index(path)
    loaded = index.load_index(tmp_path / "d.tfindex")
    assert loaded.shape == (count, 2) and loaded.dtype == np.int64
    assert np.array_equal(loaded, built)
    assert (tmp_path / "d.tfindex").read_text() == "".join(f"{o} {n}\n" for o, n in built.tolist())


def test_frame_lengths_are_header_payload_footer(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [b"abc", b""])
    assert index.build_index(path).tolist() == [[0, 19], [19, 16]]


def test_default_index_paths():
    assert index.default_index_path("a/x.tfrecord") == "a/x.tfindex"
    assert index.default_index_path("a/x.tfrecords") == "a/x.tfindex"
    assert index.default_index_path("a/x.tfrecord.gz") == "a/x.tfrecord.gz.tfindex"
    assert index.default_index_path("gs://b/train-00001-of-00010") == "gs://b/train-00001-of-00010.tfindex"


def test_verify_detects_a_stale_index(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [b"a", b"bb", b"ccc"])
    index.create_index(path)
    assert len(index.verify_index(tmp_path / "d.tfindex", path)) == 3
    old_index = (tmp_path / "d.tfindex").read_bytes()
    _write(path, [b"a", b"bbbb", b"ccc"])  # the writer drops the old index; put it back: stale
    (tmp_path / "d.tfindex").write_bytes(old_index)
    with pytest.raises(IndexMismatchError, match="record 1.*stale index"):
        index.verify_index(tmp_path / "d.tfindex", path)
    _write(path, [b"a", b"bb", b"ccc", b"d"])
    (tmp_path / "d.tfindex").write_bytes(old_index)
    with pytest.raises(IndexMismatchError, match="lists 3 records but .* holds 4"):
        index.verify_index(tmp_path / "d.tfindex", path)


def test_malformed_index_lines_are_named(tmp_path):
    bad = tmp_path / "bad.tfindex"
    bad.write_text("0 20\nnot numbers\n")
    with pytest.raises(IndexMismatchError, match="line 2"):
        index.load_index(bad)
    gap = tmp_path / "gap.tfindex"
    gap.write_text("0 20\n25 20\n")
    with pytest.raises(IndexMismatchError, match="not contiguous"):
        index.load_index(gap)


def test_create_index_leaves_nothing_for_a_corrupt_file(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [b"a" * 10, b"b" * 10])
    data = bytearray(path.read_bytes())
    data[26 + 3] ^= 0xFF  # second record's length field
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        index.create_index(path)
    assert info.value.record_number == 1 and info.value.offset == 26
    assert sorted(os.listdir(tmp_path)) == ["d.tfrecord"]


def test_seek_walk_reads_only_headers_unless_verifying(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [b"a" * 10, b"b" * 10])
    data = bytearray(path.read_bytes())
    data[12 + 2] ^= 1  # a payload bit: only a verifying build notices
    path.write_bytes(bytes(data))
    assert len(index.build_index(path)) == 2
    with pytest.raises(CorruptRecordError, match="payload CRC"):
        index.build_index(path, verify=True)


@pytest.mark.parametrize("compression", codecs.COMPRESSED)
def test_compressed_index_uses_uncompressed_offsets(tmp_path, compression):
    payloads = [b"a" * 10, b"b" * 300, b""]
    plain = _write(tmp_path / "p.tfrecord", payloads)
    packed = _write(tmp_path / "c.tfrecord", payloads, compression=compression)
    assert np.array_equal(index.build_index(packed, compression), index.build_index(plain))


def test_shard_ranges_partition_records():
    idx = np.array([[i * 20, 20] for i in range(10)], dtype=np.int64)
    seen = []
    for k in (1, 3, 4, 11):
        covered = []
        for s in range(k):
            first, last, start, end = index.shard_range(idx, s, k)
            covered.extend(range(first, last))
            assert start == (idx[first, 0] if first < 10 else 200)
            assert end == (idx[last, 0] if last < 10 else None)
        seen.append(covered)
    assert all(c == list(range(10)) for c in seen)
    with pytest.raises(ValueError):
        index.shard_range(idx, 3, 3)


def test_verify_fixture_indexes():
    for name in ("examples", "hand_encoded", "large_record", "sequence_examples", "empty"):
        index.verify_index(FIXTURES / f"{name}.tfindex", FIXTURES / f"{name}.tfrecord")


def test_an_index_missing_its_first_lines_is_refused(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [b"aaaa", b"bbbb", b"cccc"])
    index.create_index(path)
    idx = tmp_path / "d.tfindex"
    idx.write_text("".join(idx.read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(IndexMismatchError, match="does not start at offset 0"):
        index.load_index(idx)


def test_huge_numbers_in_an_index_name_the_line(tmp_path):
    bad = tmp_path / "bad.tfindex"
    bad.write_text("0 20\n99999999999999999999 5\n")
    with pytest.raises(IndexMismatchError, match="line 2"):
        index.load_index(bad)


def test_check_index_compares_the_end_with_the_data_size(tmp_path):
    path = _write(tmp_path / "d.tfrecord", [b"aaaa", b"bbbb"])
    built = index.create_index(path)
    assert index.check_index(built, path.stat().st_size) is built
    with pytest.raises(IndexMismatchError, match="stale index"):
        index.check_index(built, path.stat().st_size + 20, "d.tfindex", "d.tfrecord")
    assert index.check_index(built, None) is built  # compressed data: size unknown
