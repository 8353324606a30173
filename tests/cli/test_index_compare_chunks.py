"""A stale index is found by comparing it with the data a chunk at a time (`IndexCheck`,
`verify_index`'s walk), and reported in the same words, naming the same record, as the
whole-file comparison: differences and record counts beyond the first chunk and window."""

from __future__ import annotations

import numpy as np
import pytest

from tfrecord_beam import index, records
from tfrecord_beam.cli.inspection import collect_stats, index_status
from tfrecord_beam.cli.verify import verify_file
from tfrecord_beam.errors import IndexMismatchError
from tfrecord_beam.index import build_index, default_index_path, first_difference, write_index

N = 3000  # 1,016-byte frames: 3 MB, three reader chunks of 1 MiB


def _sizes(case):
    sizes = [1000] * N
    if case == "moved boundary":  # the same bytes, one record boundary moved at record 2500
        sizes[2500], sizes[2501] = 900, 1100
    elif case == "one more record":
        sizes.append(5)
    elif case == "one record less":
        sizes.pop()
    return sizes


@pytest.mark.parametrize("case", ["moved boundary", "one more record", "one record less"])
def test_chunked_comparison_reports_what_the_whole_one_does(tmp_path, monkeypatch, case):
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, [b"x" * 1000] * N, index_path=False)
    old = build_index(path)
    records.write_records(path, [b"y" * n for n in _sizes(case)], index_path=False)
    write_index(old, default_index_path(path))  # now stale
    expected = first_difference(old, build_index(path), "the data")
    assert expected is not None and expected[0] >= 2500  # beyond the first chunk

    assert index_status(path, frames=build_index(path)).detail == expected[1]  # the whole rows at once
    stats = collect_stats([path])
    assert (stats.files[0].index.state, stats.files[0].index.detail) == ("stale", expected[1])
    result = verify_file(path)
    assert result.index.state == "stale" and result.index.detail == expected[1]

    monkeypatch.setattr(index, "WALK_WINDOW", 4096)  # verify_index walks the headers in windows
    with pytest.raises(IndexMismatchError) as info:
        index.verify_index(default_index_path(path), path)
    whole = first_difference(old, build_index(path), path)
    assert info.value.record_number == whole[0] and f"{whole[1]} (stale index)" in str(info.value)


def test_chunked_comparison_passes_a_valid_index(tmp_path, monkeypatch):
    path = str(tmp_path / "d.tfrecord")
    records.write_records(path, [bytes(n % 2000) for n in range(N)], index_path=True)  # with its index
    monkeypatch.setattr(index, "WALK_WINDOW", 4096)
    assert np.array_equal(index.verify_index(default_index_path(path), path), build_index(path))
    assert collect_stats([path]).files[0].index.state == "valid"
    assert verify_file(path).index.state == "valid"
