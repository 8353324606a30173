"""The splittable TFRecord source: splits agree with a whole-file read, with and without index."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("apache_beam")

from apache_beam.io import source_test_utils  # noqa: E402
from apache_beam.io.range_trackers import OffsetRangeTracker  # noqa: E402
from helpers.beam_data import nested_payloads, plain_payloads, write_file  # noqa: E402
from helpers.fixtures import FIXTURES  # noqa: E402

from tfrecord_beam import records  # noqa: E402
from tfrecord_beam.beam import CorruptRecord  # noqa: E402
from tfrecord_beam.beam.source import _TFRecordSource  # noqa: E402
from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError  # noqa: E402
from tfrecord_beam.index import build_index  # noqa: E402
from tfrecord_beam.records import find_record_start  # noqa: E402


def _single_file_source(path, **kwargs):
    """The per-file source FileBasedSource splits into (what runners actually read)."""
    (bundle,) = list(_TFRecordSource(path, **kwargs).split(desired_bundle_size=1 << 40))
    return bundle.source


def _read_range(path, start, stop, **kwargs):
    return list(_single_file_source(path, **kwargs).read(OffsetRangeTracker(start, stop)))


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
@pytest.mark.parametrize("kind", ["plain", "nested"])
def test_initial_splits_equal_whole_read(tmp_path, indexed, kind):
    payloads = plain_payloads(40) if kind == "plain" else nested_payloads()
    path = write_file(tmp_path / "data.tfrecord", payloads, index=indexed)
    source = _TFRecordSource(path)
    assert source_test_utils.read_from_source(source) == payloads
    for bundle_size in (13, 50, 333, 1000):
        splits = list(source.split(desired_bundle_size=bundle_size))
        assert len(splits) > 1
        source_test_utils.assert_sources_equal_reference_source(
            (source, None, None), [(s.source, s.start_position, s.stop_position) for s in splits]
        )


def test_initial_splits_make_enough_ranges_to_balance_workers(tmp_path):
    """Beam's size rule would cut 17 MiB into 5 ranges (3/5 for one of 2 workers); the
    source makes at least MIN_SPLITS ranges of >= 1 MiB, read exactly once between them."""
    from apache_beam.io.iobase import Read

    from tfrecord_beam.beam.source import MIN_SPLIT_BYTES, MIN_SPLITS

    payloads = [os.urandom(4096 - 16) for _ in range(17 * 256)]
    path = write_file(tmp_path / "data.tfrecord", payloads, index=True)
    source = _TFRecordSource(path)
    beam_rule = Read.get_desired_chunk_size(source.estimate_size())
    assert beam_rule > (17 << 20) // 6
    splits = list(source.split(desired_bundle_size=beam_rule))
    assert len(splits) >= MIN_SPLITS and all(s.weight >= MIN_SPLIT_BYTES for s in splits[:-1])
    got = [p for s in splits for p in source_test_utils.read_from_source(s.source, s.start_position, s.stop_position)]
    assert got == payloads
    assert len(list(_TFRecordSource(write_file(tmp_path / "small.tfrecord", payloads[:100])).split(beam_rule))) == 1


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
@pytest.mark.parametrize("kind", ["plain", "nested"])
def test_split_at_fraction_exhaustive(tmp_path, indexed, kind):
    payloads = plain_payloads(14) if kind == "plain" else nested_payloads()
    path = write_file(tmp_path / "data.tfrecord", payloads, index=indexed)
    source = _single_file_source(path)
    source_test_utils.assert_split_at_fraction_exhaustive(source, perform_multi_threaded_test=False)


def test_every_byte_split_point_is_consistent(tmp_path):
    """Two readers split at any byte read every record exactly once (no index: resync)."""
    payloads = nested_payloads()
    path = write_file(tmp_path / "data.tfrecord", payloads)
    size = len(open(path, "rb").read())
    for cut in range(0, size + 1):
        assert _read_range(path, 0, cut) + _read_range(path, cut, size) == payloads, cut


def test_resync_lands_on_true_boundaries(tmp_path):
    payloads = nested_payloads()
    path = write_file(tmp_path / "data.tfrecord", payloads)
    starts = build_index(path)[:, 0].tolist()
    size = len(open(path, "rb").read())
    with open(path, "rb") as raw:
        for offset in range(1, size):
            expected = next((s for s in starts if s >= offset), size)
            assert find_record_start(raw, offset, size) == expected, offset


def test_split_reader_uses_index_record_numbers(tmp_path):
    payloads = plain_payloads(20)
    path = write_file(tmp_path / "data.tfrecord", payloads, index=True)
    offsets = build_index(path)[:, 0]
    # corrupt record 12's payload: the error must carry the index's record number
    data = bytearray(open(path, "rb").read())
    data[int(offsets[12]) + 13] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        _read_range(path, int(offsets[10]), len(data))
    assert info.value.record_number == 12 and info.value.offset == int(offsets[12])
    assert info.value.path == path


@pytest.mark.parametrize("suffix", [".tfrecord.gz", ".tfrecord.deflate"])
def test_compressed_files_are_read_whole(tmp_path, suffix):
    payloads = plain_payloads(40)
    path = write_file(tmp_path / ("data" + suffix), payloads)
    source = _TFRecordSource(path)
    splits = list(source.split(desired_bundle_size=10))
    assert len(splits) == 1  # Beam keeps compressed files in one unsplittable range
    assert source_test_utils.read_from_source(source) == payloads


def test_stale_index_is_an_error(tmp_path):
    path = write_file(tmp_path / "data.tfrecord", plain_payloads(10), index=True)
    old_index = (tmp_path / "data.tfindex").read_bytes()
    write_file(path, plain_payloads(12))  # rewrite the data (the writer drops the old index) ...
    (tmp_path / "data.tfindex").write_bytes(old_index)  # ... and put it back by hand
    with pytest.raises(IndexMismatchError, match="stale index"):
        source_test_utils.read_from_source(_TFRecordSource(path))
    assert source_test_utils.read_from_source(_TFRecordSource(path, use_index=False)) == plain_payloads(12)


def _corrupt_copy(tmp_path, name):
    target = tmp_path / name
    shutil.copy(FIXTURES / name, target)
    return str(target)


@pytest.mark.parametrize(
    "name", ["corrupt_data_crc.tfrecord", "corrupt_length_crc.tfrecord", "truncated_mid_payload.tfrecord"]
)
def test_corrupt_fixture_fails_with_location_by_default(tmp_path, name):
    path = _corrupt_copy(tmp_path, name)
    with pytest.raises(CorruptRecordError) as info:
        source_test_utils.read_from_source(_TFRecordSource(path))
    assert info.value.path == path and info.value.offset is not None


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
def test_skip_corrupt_reports_each_bad_record_once_across_splits(tmp_path, indexed):
    payloads = plain_payloads(30)
    path = write_file(tmp_path / "data.tfrecord", payloads, index=indexed)
    layout = build_index(path)
    data = bytearray(open(path, "rb").read())
    bad = [5, 6, 17]  # two adjacent bad payloads and one alone
    for number in bad:
        start, length = (int(v) for v in layout[number])
        data[start + length - 5] ^= 0x55  # the last payload byte
    open(path, "wb").write(bytes(data))
    source = _TFRecordSource(path, skip_corrupt=True)
    whole = source_test_utils.read_from_source(source)
    assert [r for r in whole if not isinstance(r, CorruptRecord)] == [p for i, p in enumerate(payloads) if i not in bad]
    dead = [r for r in whole if isinstance(r, CorruptRecord)]
    assert [d.offset for d in dead] == [int(layout[n, 0]) for n in bad]
    assert all(d.file == path and "CRC" in d.reason for d in dead)
    for bundle_size in (13, 97, 500, 1 << 20):
        got = []
        for split in source.split(desired_bundle_size=bundle_size):
            got += source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)
        assert got == whole, bundle_size


def test_with_filename(tmp_path):
    path = write_file(tmp_path / "data.tfrecord", plain_payloads(5))
    got = source_test_utils.read_from_source(_TFRecordSource(path, with_filename=True))
    assert got == [(path, p) for p in plain_payloads(5)]


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
def test_batched_splits_cover_every_record_once(tmp_path, indexed):
    payloads = nested_payloads() + plain_payloads(40)
    path = write_file(tmp_path / "data.tfrecord", payloads, index=indexed)
    source = _TFRecordSource(path, batched=True)
    whole = source_test_utils.read_from_source(source)
    assert all(isinstance(batch, list) for batch in whole)
    assert [p for batch in whole for p in batch] == payloads
    for bundle_size in (29, 400):
        got = []
        for split in source.split(desired_bundle_size=bundle_size):
            for batch in source_test_utils.read_from_source(split.source, split.start_position, split.stop_position):
                got += batch
        assert got == payloads, bundle_size


def test_index_lookup_in_place_and_malformed_fallback(tmp_path):
    from tfrecord_beam.beam import _index_cache

    path = write_file(tmp_path / "data.tfrecord", plain_payloads(40), index=True)
    index = build_index(path)
    total = int(index[-1].sum())
    lookup = _index_cache.record_offsets(path, total)
    for offset in list(range(0, total + 1, 7)) + index[:, 0].tolist():
        number = int((index[:, 0] < offset).sum())
        expected = int(index[number, 0]) if number < len(index) else total
        assert lookup.first_at_or_after(offset, total) == (number, expected)
    # a hand-edited index with CRLF line ends goes through the full parser, same answers
    crlf = tmp_path / "data.tfindex"
    crlf.write_bytes(crlf.read_bytes().replace(b"\n", b"\r\n"))
    other = _index_cache.record_offsets(path, total)
    assert other is not lookup
    assert all(other.first_at_or_after(o, total) == lookup.first_at_or_after(o, total) for o in range(0, total, 11))
    crlf.write_bytes(b"0 10\nxx yy\n" + b"\n".join(f"{o} {n}".encode() for o, n in index[2:].tolist()) + b"\n")
    with pytest.raises(IndexMismatchError):
        source_test_utils.read_from_source(_TFRecordSource(path))


def test_index_cache_keeps_offsets_only_within_its_byte_budget(tmp_path, monkeypatch):
    from tfrecord_beam.beam import _index_cache

    monkeypatch.setattr(_index_cache, "_cache", type(_index_cache._cache)())
    monkeypatch.setattr(_index_cache, "_CACHE_BYTES", 40 * 8 * 2)  # two files' offsets
    paths = [write_file(tmp_path / f"d{i}.tfrecord", plain_payloads(40), index=True) for i in range(3)]
    sizes = [os.path.getsize(p) for p in paths]
    first = _index_cache.record_offsets(paths[0], sizes[0])
    assert first.nbytes == 40 * 8  # the offsets alone, int64: no (n, 2) table is kept
    assert _index_cache.record_offsets(paths[0], sizes[0]) is first  # cached
    _index_cache.record_offsets(paths[1], sizes[1])
    _index_cache.record_offsets(paths[2], sizes[2])
    assert len(_index_cache._cache) == 2 and _index_cache.record_offsets(paths[0], sizes[0]) is not first
    monkeypatch.setattr(_index_cache, "_CACHE_BYTES", 1)  # the newest stays even over the budget
    assert _index_cache.record_offsets(paths[1], sizes[1]) is not None and len(_index_cache._cache) == 1


def test_truncated_gzip_with_skip_corrupt_keeps_the_good_prefix(tmp_path):
    path = _corrupt_copy(tmp_path, "truncated.tfrecord.gz")
    good = []
    with pytest.raises(CorruptRecordError):
        for payload in records.RecordReader(path):
            good.append(payload)
    got = source_test_utils.read_from_source(_TFRecordSource(path, skip_corrupt=True))
    assert got[:-1] == good and isinstance(got[-1], CorruptRecord)
    assert got[-1].file == path and "rest of this gzip file" in got[-1].reason


def test_auto_compression_names_both_rules_disagree_on_are_refused(tmp_path):
    from tfrecord_beam.beam import WriteToTFRecord
    from tfrecord_beam.beam._paths import check_auto

    check_auto("x.tfrecord.gz")
    check_auto("x.tfrecord")
    with pytest.raises(ValueError, match="pass compression_type='zlib'"):
        check_auto("x.tfrecord.zlib")
    path = write_file(tmp_path / "data.tfrecord", plain_payloads(3))
    zpath = tmp_path / "data.tfrecord.zlib"
    records.write_records(str(zpath), plain_payloads(3))
    with pytest.raises(ValueError, match="compression_type='zlib'"):
        source_test_utils.read_from_source(_TFRecordSource(str(zpath)))
    assert source_test_utils.read_from_source(_TFRecordSource(str(zpath), compression_type="zlib")) == plain_payloads(3)
    assert source_test_utils.read_from_source(_TFRecordSource(path)) == plain_payloads(3)
    with pytest.raises(ValueError, match="compression_type='zlib'"):
        WriteToTFRecord(str(tmp_path / "out"), file_name_suffix=".tfrecord.zlib")


# -- claiming records in runs ---------------------------------------------------------------
@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
def test_split_at_fraction_exhaustive_with_concurrent_splits(tmp_path, indexed):
    """Splits racing the reader from another thread (Beam's multi-threaded check)."""
    path = write_file(tmp_path / "data.tfrecord", plain_payloads(12), index=indexed)
    source_test_utils.assert_split_at_fraction_exhaustive(_single_file_source(path))


class _CountingTracker(OffsetRangeTracker):
    def __init__(self, *args, split_at=None):
        super().__init__(*args)
        self.claims = 0
        self._split_at = split_at

    def try_claim(self, position):
        self.claims += 1
        return super().try_claim(position)

    def set_current_position(self, position):
        if self._split_at is not None and position >= self._split_at:
            # a split inside the run being claimed lands between the reader's read of the
            # stop position and this update
            assert self.try_split(self._split_at)
            self._split_at = None
        super().set_current_position(position)


def test_records_are_claimed_in_runs(tmp_path):
    payloads = plain_payloads(3000)
    path = write_file(tmp_path / "data.tfrecord", payloads, index=True)
    tracker = _CountingTracker(0, os.path.getsize(path))
    assert list(_single_file_source(path).read(tracker)) == payloads
    assert tracker.claims < 30  # runs of 1, 2, 4, ... 1024 records, not one claim per record


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
def test_a_split_racing_a_run_claim_keeps_each_record_once(tmp_path, indexed):
    payloads = plain_payloads(200)
    path = write_file(tmp_path / "data.tfrecord", payloads, index=indexed)
    starts = build_index(path)[:, 0].tolist()
    size = os.path.getsize(path)
    for cut in (starts[9] + 1, starts[20], starts[40] - 3, starts[150]):
        tracker = _CountingTracker(0, size, split_at=cut)
        primary = list(_single_file_source(path).read(tracker))
        assert tracker.stop_position() == cut
        assert primary + _read_range(path, cut, size) == payloads, cut


class _NoPositionTracker(OffsetRangeTracker):
    def set_current_position(self, position):
        raise NotImplementedError


def test_trackers_without_set_current_position_claim_every_record(tmp_path):
    payloads = plain_payloads(50)
    path = write_file(tmp_path / "data.tfrecord", payloads)
    cut = build_index(path)[30, 0]
    tracker = _NoPositionTracker(0, int(cut))
    assert list(_single_file_source(path).read(tracker)) == payloads[:30]
