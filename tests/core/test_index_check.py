"""A stale index of the right byte size is an index problem, never corrupt data or lost records
(issue 10, item 5): Beam ranges and torch record pieces check what they read against it."""

from __future__ import annotations

import pytest

from tfrecord_beam import records
from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError
from tfrecord_beam.example import encode_example
from tfrecord_beam.index import build_index, create_index, default_index_path


def _stale_pair(tmp_path, old, new):
    """A data file holding `new` beside the index of `old` (the same byte size)."""
    path = str(tmp_path / "data.tfrecord")
    records.write_records(path, old)
    create_index(path)
    old_index = open(default_index_path(path), "rb").read()
    records.write_records(path, new)  # the writer drops the index it makes stale ...
    with open(default_index_path(path), "wb") as handle:  # ... so put it back by hand
        handle.write(old_index)
    assert len(open(path, "rb").read()) == sum(16 + len(p) for p in old)
    return path, default_index_path(path)


def _example(size: int, i: int) -> bytes:
    """An Example serialized in exactly `size` bytes (so torch can decode it)."""
    payload = encode_example({"p": (bytes([i]) * (size - 13), "byte")})
    assert len(payload) == size
    return payload


# 30 records of 30 bytes indexed, 20 of 45 written (900 bytes both): the case, in Examples
OLD = [_example(14, i) for i in range(30)]
NEW = [_example(29, i) for i in range(20)]
# the same first half, then other sizes: every range start agrees with the index until later
HALF = [_example(14, i) for i in range(15)] + [_example(29, i) for i in range(10)]


def _beam_read(path, bundle, **kwargs):
    from apache_beam.io import source_test_utils

    from tfrecord_beam.beam.source import _TFRecordSource

    got = []
    for split in _TFRecordSource(path, **kwargs).split(desired_bundle_size=bundle):
        got += source_test_utils.read_from_source(split.source, split.start_position, split.stop_position)
    return got


@pytest.mark.parametrize("new", [NEW, HALF], ids=["other-sizes", "second-half-differs"])
@pytest.mark.parametrize("skip_corrupt", [True, False])
def test_beam_stale_index_of_the_same_size_is_an_index_error(tmp_path, new, skip_corrupt):
    pytest.importorskip("apache_beam")
    path, index_path = _stale_pair(tmp_path, OLD, new)
    for bundle in (225, 1000):  # 4 ranges (the case), and one
        with pytest.raises(IndexMismatchError, match="stale index") as info:
            _beam_read(path, bundle, skip_corrupt=skip_corrupt)
        assert info.value.path == index_path and not isinstance(info.value, CorruptRecordError)
    assert _beam_read(path, 225, use_index=False) == new


def test_beam_damaged_header_with_a_true_index_is_still_corrupt_data(tmp_path):
    """The neighbours of an unreadable indexed header agree with the index: that is damage."""
    pytest.importorskip("apache_beam")
    from tfrecord_beam.beam import CorruptRecord

    payloads = [bytes([i]) * (10 + i) for i in range(30)]
    path = str(tmp_path / "data.tfrecord")
    records.write_records(path, payloads)
    create_index(path)
    layout = build_index(path)
    data = bytearray(open(path, "rb").read())
    for number in (11, 12):  # two damaged headers in a row
        data[int(layout[number, 0]) + 2] ^= 0x40
    open(path, "wb").write(bytes(data))
    start = int(layout[11, 0])
    for bundle in (start, 97, 1 << 20):  # a range starting exactly at the damaged header, and others
        got = _beam_read(path, bundle, skip_corrupt=True)
        assert [r for r in got if not isinstance(r, CorruptRecord)] == payloads[:11] + payloads[13:]
        assert [r.offset for r in got if isinstance(r, CorruptRecord)] == [int(layout[11, 0]), int(layout[12, 0])]


@pytest.mark.parametrize("new", [NEW, HALF], ids=["other-sizes", "second-half-differs"])
def test_torch_stale_index_of_the_same_size_is_an_index_error(tmp_path, new):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    path, index_path = _stale_pair(tmp_path, OLD, new)
    ds = TFRecordDataset(path, index_path)
    true_records = [bytes(p) for p in new]
    for workers in (1, 4):
        failed = 0
        for worker in range(workers):  # each worker's piece on its own: stale, or exactly the data
            try:
                got = [
                    record["p"].tobytes() if hasattr(record["p"], "tobytes") else record["p"]
                    for record in ds.iter_worker(worker, workers)
                ]
            except IndexMismatchError as err:
                assert "stale index" in str(err) and err.path == index_path
                failed += 1
            else:
                assert all(encode_example({"p": (g, "byte")}) in true_records for g in got)
        assert failed >= 1


def test_map_style_dataset_blames_a_stale_index_not_the_data(tmp_path):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import IndexedTFRecordDataset

    path, index_path = _stale_pair(tmp_path, OLD, NEW)
    ds = IndexedTFRecordDataset(path, index_path)
    assert len(ds) == len(OLD)
    with pytest.raises(IndexMismatchError, match="stale index") as info:
        ds[5]  # its offset falls inside a record of the new data
    assert info.value.path == index_path
