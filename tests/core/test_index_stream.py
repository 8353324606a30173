"""A writer's index is streamed to a temporary file as frames are handed on: the writer keeps
nothing per record (memory flat in the record count), and an aborted writer leaves no index."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers.rss import MiB, peak_growth

from tfrecord_beam._tfindex import IndexStream, frame_index
from tfrecord_beam.index import build_index, load_index
from tfrecord_beam.records import RecordWriter

BATCH = 20_000


def _write(path, records: int) -> None:
    with RecordWriter(str(path), None, index_path=True) as writer:
        for start in range(0, records, BATCH):
            writer.write_many([b"x" * 8] * min(BATCH, records - start))
            writer.write(b"one")  # per-record writes go through the same index stream


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_writer_with_index_keeps_nothing_per_record(tmp_path):
    growth = peak_growth(
        lambda: _write(tmp_path / "s.tfrecord", 200_000), lambda: _write(tmp_path / "b.tfrecord", 3_000_000)
    )
    # holding frame sizes and formatting the index at close costs > 100 MiB on 3 M records
    assert growth < 24 * MiB, f"writing 3 M records with an index grew the peak by {growth / MiB:.0f} MiB"
    index = load_index(str(tmp_path / "b.tfindex"))
    assert len(index) == 3_000_000 + 3_000_000 // BATCH
    np.testing.assert_array_equal(index, build_index(str(tmp_path / "b.tfrecord")))


def test_index_stream_lines_follow_each_other_and_abort_leaves_nothing(tmp_path):
    stream = IndexStream(str(tmp_path / "a.tfindex"))
    stream.add(np.array([20, 30]))
    stream.add(np.array([], dtype=np.int64))
    stream.add([16])
    stream.finish().move()  # as RecordWriter.close does, in _publish's order
    np.testing.assert_array_equal(load_index(str(tmp_path / "a.tfindex")), frame_index([20, 30, 16]))
    np.testing.assert_array_equal(frame_index([20, 30, 16], 100), [[100, 20], [120, 30], [150, 16]])
    aborted = IndexStream(str(tmp_path / "b.tfindex"))
    aborted.add([20])
    aborted.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tfindex"]


def test_aborted_writer_leaves_neither_data_nor_index(tmp_path):
    with pytest.raises(RuntimeError):
        with RecordWriter(str(tmp_path / "a.tfrecord"), None, index_path=True) as writer:
            writer.write_many([b"abc"] * 1000)
            writer.flush()
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
