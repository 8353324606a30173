"""The splittable TFRecord source: splits agree with a whole-file read, with and without index."""

from __future__ import annotations

import os
import shutil

import numpy as np
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
    # one split source read at every cut (what a runner does with one bundle's source): making
    # it anew per cut, as _read_range does, cost 6 of the test's 9 CPU s in Beam's glob matching
    source = _single_file_source(path)
    for cut in range(0, size + 1):
        head = list(source.read(OffsetRangeTracker(0, cut)))
        assert head + list(source.read(OffsetRangeTracker(cut, size))) == payloads, cut


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
    lookup = _index_cache.index_text(path, total).window(0, total)
    for offset in list(range(0, total + 1, 7)) + index[:, 0].tolist():
        number = int((index[:, 0] < offset).sum())
        expected = int(index[number, 0]) if number < len(index) else total
        assert lookup.first_at_or_after(offset) == (number, expected)
    # a hand-edited index with CRLF line ends goes through the full parser, same answers
    crlf = tmp_path / "data.tfindex"
    crlf.write_bytes(crlf.read_bytes().replace(b"\n", b"\r\n"))
    other = _index_cache.index_text(path, total).window(0, total)
    assert other is not lookup
    assert all(other.first_at_or_after(o) == lookup.first_at_or_after(o) for o in range(0, total, 11))
    crlf.write_bytes(b"0 10\nxx yy\n" + b"\n".join(f"{o} {n}".encode() for o, n in index[2:].tolist()) + b"\n")
    with pytest.raises(IndexMismatchError):
        source_test_utils.read_from_source(_TFRecordSource(path))


def _window_cases(tmp_path, n=5000):
    from tfrecord_beam.beam import _index_cache

    path = write_file(tmp_path / "w.tfrecord", plain_payloads(n), index=True)
    index = build_index(path)
    total = int(index[-1].sum())
    return _index_cache.index_text(path, total), index, total


def test_a_range_parses_only_the_index_entries_around_it(tmp_path):
    """A range's window holds its own entries and a margin, not the whole index; its numbers
    count from its first entry, and `number` gives the file's (counted only when asked)."""
    from tfrecord_beam.beam import _index_cache

    text, index, total = _window_cases(tmp_path)
    rng = np.random.default_rng(3)
    for start, stop in [(0, total), (0, 1), (total - 1, total), (total, total)] + [
        tuple(sorted(rng.integers(0, total, 2).tolist())) for _ in range(40)
    ]:
        window = text.window(start, stop)
        first = int(np.searchsorted(index[:, 0], start))  # the range's first record
        last = int(np.searchsorted(index[:, 0], stop)) if stop < total else len(index)
        assert len(window) <= last - first + 2 * _index_cache._MARGIN + 1
        i, position = window.first_at_or_after(start)
        assert position == (int(index[first, 0]) if first < len(index) else total)
        if first < len(index):
            assert window.number(i) == first
            rows = window.starts[i : i + (last - first)]
            assert rows.tolist() == index[first:last, 0].tolist()
        j, _ = window.first_at_or_after(stop)  # where the next range starts: in the window too
        assert window.number(j) == last or (last == len(index) and j == len(window))


@pytest.mark.parametrize("piece", [None, 997])  # counted in one piece, or in many of 997 bytes
def test_window_errors_give_the_files_line_and_record_numbers(tmp_path, monkeypatch, piece):
    from tfrecord_beam.beam import _index_cache

    if piece is not None:
        monkeypatch.setattr(_index_cache, "_PIECE", piece)
    text, index, total = _window_cases(tmp_path)
    lines = (tmp_path / "w.tfindex").read_bytes().split(b"\n")
    bad = 3000
    lines[bad] = b"%d %d" % (index[bad, 0] + 1, index[bad, 1])  # a gap at record 3000 (line 3001)
    (tmp_path / "w.tfindex").write_bytes(b"\n".join(lines))
    from tfrecord_beam.beam import _index_cache

    fresh = _index_cache.index_text(str(tmp_path / "w.tfrecord"), total)
    fresh.window(0, int(index[100, 0]))  # far from the damage: this range does not read it
    with pytest.raises(IndexMismatchError) as info:
        fresh.window(int(index[bad - 2, 0]), int(index[bad + 2, 0]))
    assert info.value.record_number == bad and "index line 3001:" in info.value.reason
    lines[bad] = b"not an entry"
    (tmp_path / "w.tfindex").write_bytes(b"\n".join(lines))
    fresh = _index_cache.index_text(str(tmp_path / "w.tfrecord"), total)
    with pytest.raises(IndexMismatchError) as info:
        fresh.window(int(index[bad - 2, 0]), int(index[bad + 2, 0]))
    assert info.value.record_number == bad and "index line 3001 is not 'offset length'" in info.value.reason


def test_reader_errors_in_a_window_give_the_files_record_number(tmp_path):
    """A corrupt record met by a range in the middle of an indexed file is named by its number
    in the file, though the range counted from its window."""
    payloads = plain_payloads(3000)
    path = write_file(tmp_path / "c.tfrecord", payloads, index=True)
    index = build_index(path)
    data = bytearray(open(path, "rb").read())
    data[int(index[2500, 0]) + 14] ^= 0xFF  # record 2500's payload
    open(path, "wb").write(bytes(data))
    errors = []
    for split in _TFRecordSource(path).split(desired_bundle_size=len(data) // 8):
        try:
            source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)
        except CorruptRecordError as err:
            errors.append((split.start_position, err))
    assert len(errors) == 1 and errors[0][0] > 0  # a range that starts mid-file
    err = errors[0][1]
    assert err.record_number == 2500 and err.offset == int(index[2500, 0]) and "record 2500," in str(err)


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


def test_windows_step_over_blank_and_comment_lines(tmp_path):
    """The grammar allows blank and `#` lines anywhere: the binary search skips them and the
    file's record numbers do not count them (CRLF line ends too)."""
    text, index, total = _window_cases(tmp_path, n=400)
    lines = (tmp_path / "w.tfindex").read_bytes().split(b"\n")
    for at in (350, 200, 120, 5, 0):
        lines[at:at] = [b"", b"# a note", b"  \t"]
    (tmp_path / "w.tfindex").write_bytes(b"\r\n".join(lines))
    from tfrecord_beam.beam import _index_cache

    fresh = _index_cache.index_text(str(tmp_path / "w.tfrecord"), total)
    for first in (0, 3, 119, 120, 121, 199, 201, 349, 351, 399):
        window = fresh.window(int(index[first, 0]), total)
        i, position = window.first_at_or_after(int(index[first, 0]))
        assert position == int(index[first, 0]) and window.number(i) == first
    assert fresh.window(int(index[399, 0]) + 1, total).first_at_or_after(int(index[399, 0]) + 1) == (
        len(fresh.window(int(index[399, 0]) + 1, total)),
        total,
    )


def _padded_index(tmp_path, lines_before_first=10, drop_first=False, n=60):
    """An index with `lines_before_first` comment lines on top (and record 0's line dropped)."""
    path = write_file(tmp_path / "p.tfrecord", plain_payloads(n), index=True)
    index_file = tmp_path / "p.tfindex"
    lines = index_file.read_bytes().split(b"\n")
    if drop_first:
        lines = lines[1:]
    index_file.write_bytes(b"# note\n" * lines_before_first + b"\n".join(lines))
    return path


@pytest.mark.parametrize("padding", [0, 9, 10, 40])
def test_a_missing_first_entry_is_found_however_many_lines_come_first(tmp_path, padding):
    """The window that starts the index checks that it starts at 0, even when comment lines
    push its first entry past the margin (it used to pass silently, dropping record 0)."""
    path = _padded_index(tmp_path, padding, drop_first=True)
    for bundle in (None, 1):
        with pytest.raises(IndexMismatchError, match="does not start at offset 0"):
            if bundle is None:
                source_test_utils.read_from_source(_TFRecordSource(path))
            else:
                for split in _TFRecordSource(path).split(desired_bundle_size=bundle):
                    source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)


def test_the_margin_counts_entries_not_lines(tmp_path):
    """Blank lines between entries do not shrink a window's margin: it always holds the 9
    entries on each side of its range (what `_index_check` looks at around damage)."""
    from tfrecord_beam.beam import _index_cache

    path = write_file(tmp_path / "m.tfrecord", plain_payloads(200), index=True)
    index = build_index(path)
    total = int(index[-1].sum())
    index_file = tmp_path / "m.tfindex"
    index_file.write_bytes(index_file.read_bytes().replace(b"\n", b"\n\n \n#x\n"))
    text = _index_cache.index_text(path, total)
    for first in (0, 5, 9, 10, 100, 180, 199):
        last = min(first + 7, 199)
        window = text.window(int(index[first, 0]), int(index[last, 0]))
        assert window.number(0) == max(0, first - _index_cache._MARGIN)  # pins the search, too
        assert window.number(len(window) - 1) == min(199, last + _index_cache._MARGIN)


def test_numbers_the_grammar_accepts_or_refuses_in_the_search(tmp_path):
    """Leading zeros (5,000 of them) are a valid entry; a number of 2**63 or more is an
    IndexMismatchError, as in `load_index`, not an OverflowError or ValueError."""
    from tfrecord_beam.beam import _index_cache

    path = write_file(tmp_path / "z.tfrecord", plain_payloads(30), index=True)
    index = build_index(path)
    index_file = tmp_path / "z.tfindex"
    lines = index_file.read_bytes().split(b"\n")
    lines[29] = b"0" * 5000 + lines[29]  # the last line, which the end check reads
    index_file.write_bytes(b"\n".join(lines))
    assert source_test_utils.read_from_source(_TFRecordSource(path)) == plain_payloads(30)
    lines[15] = b"99999999999999999999 5"
    index_file.write_bytes(b"\n".join(lines))
    total = int(index[-1].sum())
    for first in range(10, 20):
        with pytest.raises(IndexMismatchError, match="does not fit in 64 bits"):
            _index_cache.index_text(path, total).window(int(index[first, 0]), total)


def test_an_index_rewritten_in_place_is_an_error_not_a_crash(tmp_path):
    """The text is mapped; a file truncated under the mapping would kill the reader (SIGBUS),
    so a changed size is an IndexMismatchError instead."""
    from tfrecord_beam.beam import _index_cache

    path = write_file(tmp_path / "t.tfrecord", plain_payloads(30), index=True)
    index = build_index(path)
    total = int(index[-1].sum())
    text = _index_cache.index_text(path, total)
    text.window(0, total)
    with open(tmp_path / "t.tfindex", "r+b") as handle:
        handle.truncate(10)
    with pytest.raises(IndexMismatchError, match="rewritten in place"):
        text.window(0, total)


def test_remote_index_texts_are_cached_within_a_byte_budget(tmp_path, monkeypatch):
    from tfrecord_beam.beam import _index_cache

    paths = [write_file(tmp_path / f"r{i}.tfrecord", plain_payloads(40), index=True) for i in range(3)]
    monkeypatch.setattr(_index_cache, "_cache", type(_index_cache._cache)())
    monkeypatch.setattr(_index_cache.fs, "map_input", lambda p: (open(p, "rb").read(), None))  # as if remote
    size = (tmp_path / "r0.tfindex").stat().st_size
    monkeypatch.setattr(_index_cache, "_CACHE_BYTES", 2 * size)
    texts = [_index_cache.index_text(p, os.path.getsize(p)) for p in paths]
    assert all(t.resident_bytes == size for t in texts) and len(_index_cache._cache) == 2
    monkeypatch.setattr(_index_cache, "_CACHE_BYTES", 1)  # the newest stays, even over the budget
    _index_cache.index_text(paths[0], os.path.getsize(paths[0]))
    assert len(_index_cache._cache) == 1
