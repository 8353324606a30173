"""Error messages say what the bytes are (issue 10, item 11): no "length CRC mismatch" for a
file that is no TFRecord, no "truncated file" for a few trailing bytes, no negative offsets
from an index, no inverted byte ranges."""

from __future__ import annotations

import gzip
import re

import pytest
from helpers import codecs

from tfrecord_beam import _engine, records
from tfrecord_beam.cli.verify import verify_file
from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError, SplitPointError, TruncatedRecordError
from tfrecord_beam.index import check_index, load_index

PAYLOADS = [b"r%d" % i * i for i in range(6)]


def _good_bytes(tmp_path) -> bytes:
    path = str(tmp_path / "good.tfrecord")
    records.write_records(path, PAYLOADS)
    return open(path, "rb").read()


def _read_error(path, error=CorruptRecordError, **kwargs):
    with pytest.raises(error) as info:
        list(records.RecordReader(str(path), **kwargs))
    return info.value


@pytest.mark.parametrize(
    "head, looks",
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(40), "PNG image"),
        (b"PAR1" + bytes(40) + b"PAR1", "Parquet file (PAR1 magic)"),
        (b"GZIP", "gzip data: name the file *.gz"),  # replaced by a real gzip stream below
        (b"ZSTD", "zstd data: name the file *.zst or pass compression='zstd'"),  # and a zstd stream
        (b"a,b,c\n1,2,3\n4,5,6\n", "text"),
    ],
)
def test_a_file_that_is_not_tfrecord_says_what_it_looks_like(tmp_path, head, looks):
    if head == b"GZIP":
        head = gzip.compress(_good_bytes(tmp_path))
    if head == b"ZSTD":
        head = codecs.compress("zstd", _good_bytes(tmp_path))
    path = tmp_path / "not-really.tfrecord"
    path.write_bytes(head)
    err = _read_error(path)
    assert err.offset == 0 and err.path == str(path)
    assert "does not start with a valid TFRecord header" in err.reason and looks in err.reason
    assert "CRC mismatch" not in err.reason
    result = verify_file(str(path))  # verify says the same
    assert not result.ok and "does not start with a valid TFRecord header" in result.problems[0].message


def test_damage_after_the_start_is_still_a_crc_mismatch(tmp_path):
    data = bytearray(_good_bytes(tmp_path))
    data[len(_engine.frame_records(PAYLOADS[:2])) + 3] ^= 1  # record 2's length
    path = tmp_path / "damaged.tfrecord"
    path.write_bytes(bytes(data))
    err = _read_error(path)
    assert err.record_number == 2 and err.reason == "length CRC mismatch (corrupted record)"


@pytest.mark.parametrize("tail", [b"\0" * 5, b"\0" * 11, b"xyz"])
def test_a_few_trailing_bytes_are_described_not_called_truncated(tmp_path, tail):
    path = tmp_path / "tail.tfrecord"
    path.write_bytes(_good_bytes(tmp_path) + tail)
    err = _read_error(path, TruncatedRecordError)
    assert err.record_number == len(PAYLOADS)
    assert f"ends with {len(tail)} bytes after the last record ({tail.hex(' ')})" in err.reason
    assert "too few for a 12-byte record header" in err.reason and "truncated" not in err.reason
    assert ("all zero" in err.reason) == (not tail.strip(b"\0"))
    assert list(records.RecordReader(str(path), allow_truncated_tail=True)) == PAYLOADS


def test_a_file_shorter_than_a_header(tmp_path):
    path = tmp_path / "tiny.tfrecord"
    path.write_bytes(b"PAR")
    err = _read_error(path, TruncatedRecordError)
    assert "holds 3 bytes" in err.reason and "fewer than one 12-byte TFRecord header" in err.reason


@pytest.mark.parametrize("tail", [b"junk!", b"\x01\x02\x03\x04\x05\x06\x07\x08\x09"])
def test_bytes_after_the_last_gzip_member_are_trailing_bytes(tmp_path, tail):
    path = tmp_path / "data.tfrecord.gz"
    path.write_bytes(gzip.compress(_good_bytes(tmp_path)) + tail)
    err = _read_error(path, TruncatedRecordError)
    assert f"{len(tail)} bytes after the end of the last gzip member ({tail.hex(' ')})" in err.reason
    assert "truncated file" not in err.reason
    got = []
    with pytest.raises(TruncatedRecordError):
        for record in records.RecordReader(str(path)):
            got.append(record)
    assert got == PAYLOADS  # every record before them was read


def test_a_cut_gzip_stream_is_still_truncated(tmp_path):
    path = tmp_path / "cut.tfrecord.gz"
    path.write_bytes(gzip.compress(_good_bytes(tmp_path))[:-3])
    assert "truncated file" in _read_error(path, TruncatedRecordError).reason


@pytest.mark.parametrize(
    "text, line",
    [
        ("0 30\n30 9223372036854775807\n", 2),
        ("0 30\n30 30\n9223372036854775800 30\n", 3),
        ("0 9223372036854775808\n", 1),
    ],
)
def test_index_numbers_overflowing_int64_are_named_never_negative(tmp_path, text, line):
    index_path = tmp_path / "x.tfindex"
    index_path.write_text(text)
    with pytest.raises(IndexMismatchError) as info:
        check_index(load_index(str(index_path)), 90, str(index_path), "x.tfrecord")
    reason = info.value.reason
    assert f"index line {line} " in reason and "64 bits" in reason
    assert not re.search(r"-\d", reason) and (info.value.offset is None or info.value.offset >= 0)


def test_overlapping_ranges_are_a_split_point_error_not_an_inverted_range():
    pytest.importorskip("apache_beam")
    from tfrecord_beam.beam.stages import Coverage, check_coverage

    parts = [Coverage("f", 0, 0, 1572927, 2000000), Coverage("f", 1000000, 1572897, 2000000, 2000000)]
    with pytest.raises(SplitPointError, match="needs an index to be split") as info:
        check_coverage("f", parts)
    assert "1572927..1572897" not in str(info.value) and info.value.offset == 1572897
    with pytest.raises(CorruptRecordError, match=r"bytes 100\.\.200 hold no readable record"):
        check_coverage("f", [Coverage("f", 0, 0, 100, 300), Coverage("f", 150, 200, 300, 300)])
