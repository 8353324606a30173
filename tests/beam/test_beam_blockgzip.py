"""The Beam source over block-gzip files: split at gzip members, exactly once, like Beam's own checks."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam  # noqa: E402
from apache_beam.io import source_test_utils  # noqa: E402
from apache_beam.io.range_trackers import OffsetRangeTracker  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from tfrecord_beam import blockgzip, index  # noqa: E402
from tfrecord_beam.beam import CorruptRecord, ReadFromTFRecord  # noqa: E402
from tfrecord_beam.beam.source import _TFRecordSource  # noqa: E402
from tfrecord_beam.errors import IndexMismatchError  # noqa: E402
from tfrecord_beam.records import RecordWriter  # noqa: E402

PAYLOADS = [b"rec-%04d-" % i + b"z" * (i * 13 % 200) for i in range(400)]


def _write(path, payloads=PAYLOADS, block_bytes=1500, with_index=True):
    with RecordWriter(str(path), index_path=with_index, block_bytes=block_bytes) as writer:
        writer.write_many(payloads)
    return str(path)


def test_block_gzip_splits_and_splits_agree_with_a_whole_read(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz")
    source = _TFRecordSource(path)
    assert source_test_utils.read_from_source(source) == PAYLOADS
    for bundle_size in (500, 2000, 4000):
        splits = list(source.split(desired_bundle_size=bundle_size))
        assert len(splits) > 1
        source_test_utils.assert_sources_equal_reference_source(
            (source, None, None), [(s.source, s.start_position, s.stop_position) for s in splits]
        )


def test_split_at_fraction_exhaustive(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz", PAYLOADS[:24], block_bytes=300)
    assert len(blockgzip.member_table_for(path)) > 5
    (bundle,) = list(_TFRecordSource(path).split(desired_bundle_size=1 << 40))
    source_test_utils.assert_split_at_fraction_exhaustive(bundle.source, perform_multi_threaded_test=False)


def test_gzip_without_member_table_stays_one_range(tmp_path):
    plain = _write(tmp_path / "b.tfrecord.gz", block_bytes=0)
    no_index = _write(tmp_path / "c.tfrecord.gz", with_index=False)
    for path in (plain, no_index):
        splits = list(_TFRecordSource(path).split(desired_bundle_size=500))
        assert len(splits) == 1 and splits[0].stop_position == OffsetRangeTracker.OFFSET_INFINITY
        assert source_test_utils.read_from_source(splits[0].source) == PAYLOADS
    assert len(list(_TFRecordSource(_write(tmp_path / "d.tfrecord.gz"), use_index=False).split(500))) == 1


def test_a_split_range_whose_table_vanished_fails_loudly(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz")
    splits = list(_TFRecordSource(path).split(desired_bundle_size=2000))
    os.remove(index.default_index_path(path))
    with pytest.raises(IndexMismatchError, match="member table"):
        source_test_utils.read_from_source(splits[1].source, splits[1].start_position, splits[1].stop_position)


def test_pipeline_reads_block_gzip_once_and_reports_a_damaged_member(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz")
    table = blockgzip.member_table_for(path)
    data = bytearray(open(path, "rb").read())
    data[int(table.compressed[3]) + 50] ^= 0xFF
    open(path, "wb").write(bytes(data))
    lost = set(
        range(
            *[
                int(v)
                for v in index.load_index(index.default_index_path(path))[:, 0].searchsorted(table.uncompressed[3:5])
            ]
        )
    )
    with beam.Pipeline() as p:
        result = p | ReadFromTFRecord(path, skip_corrupt=True)
        assert_that(result.records, equal_to([x for i, x in enumerate(PAYLOADS) if i not in lost]))
        bad = result.corrupt | beam.Map(lambda c: (isinstance(c, CorruptRecord), "gzip member 3" in c.reason))
        assert_that(bad, equal_to([(True, True)]), label="corrupt")


def test_write_to_tfrecord_writes_block_gzip_shards_with_their_tables(tmp_path):
    from tfrecord_beam.beam import WriteToTFRecord

    payloads = [b"%06d" % i * 50 for i in range(4000)]  # ~1.2 MB per shard: two members at 1 MiB blocks
    with beam.Pipeline() as p:
        _ = (
            p
            | beam.Create(payloads, reshuffle=False)
            | WriteToTFRecord(str(tmp_path / "out"), file_name_suffix=".tfrecord.gz", num_shards=1)
        )
    (shard,) = [str(x) for x in tmp_path.glob("out-*.tfrecord.gz")]
    table = blockgzip.member_table_for(shard)
    assert len(table) == 2 and sorted(source_test_utils.read_from_source(_TFRecordSource(shard))) == sorted(payloads)
    assert len(list(_TFRecordSource(shard).split(desired_bundle_size=table.file_size // 2 + 1))) == 2


def test_read_all_splits_block_gzip_files_and_reads_them_once(tmp_path):
    from tfrecord_beam.beam import ReadAllFromTFRecord
    from tfrecord_beam.beam._blockgzip import _ExpandWithMembers

    block = _write(tmp_path / "a.tfrecord.gz")
    stream = _write(tmp_path / "b.tfrecord.gz", [p + b"!" for p in PAYLOADS], block_bytes=0)
    expand = _ExpandWithMembers(True, "auto", 2000, 0, use_index=True)
    assert len(list(expand.process(block))) > 2 and len(list(expand.process(stream))) == 1
    assert len(list(_ExpandWithMembers(True, "auto", 2000, 0, use_index=False).process(block))) == 1
    with beam.Pipeline() as p:
        got = p | beam.Create([str(tmp_path / "*.gz")]) | ReadAllFromTFRecord(desired_bundle_size=2000)
        assert_that(got, equal_to(PAYLOADS + [p + b"!" for p in PAYLOADS]))
