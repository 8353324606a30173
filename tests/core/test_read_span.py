"""`ReadSpan`: a `RecordReader`'s keyword arguments as one frozen value (issue 25, item 4), so a
reader that opens several `RecordReader`s over one file (`SkippingReader`) passes one value."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from tfrecord_beam.records import ReadSpan, RecordReader, write_records
from tfrecord_beam.skipping import SkippingReader


def test_the_span_has_exactly_the_readers_keywords_and_defaults():
    """The two cannot drift apart: a keyword added to RecordReader belongs in ReadSpan."""
    params = inspect.signature(RecordReader.__init__).parameters
    keywords = {n: p.default for n, p in params.items() if n not in ("self", "source", "on_bad_payload")}
    fields = {f.name: f.default for f in dataclasses.fields(ReadSpan)}
    assert fields == keywords


def test_a_span_reads_what_the_keywords_read(tmp_path):
    path = str(tmp_path / "x.tfrecord.gz")
    payloads = [b"r%03d" % i for i in range(50)]
    write_records(path, payloads, index_path=True)
    offsets = [o for o, _ in RecordReader(path).records_with_offsets()]
    span = ReadSpan("auto", start_offset=offsets[10], end_offset=offsets[20], first_record_number=10, chunk_size=64)
    assert list(RecordReader.over(path, span)) == payloads[10:20]
    assert list(RecordReader(path, **span.keywords())) == payloads[10:20]
    moved = span.at(offsets[30], 30)
    assert (moved.start_offset, moved.first_record_number, moved.end_offset, moved.chunk_size) == (
        offsets[30],
        30,
        offsets[20],
        64,
    )
    assert list(RecordReader.over(path, dataclasses.replace(moved, end_offset=None))) == payloads[30:]
    with pytest.raises(dataclasses.FrozenInstanceError):
        span.start_offset = 0  # type: ignore[misc]


def test_the_skipping_reader_resolves_auto_from_the_name_once(tmp_path):
    path = str(tmp_path / "y.tfrecord.gz")
    write_records(path, [b"a", b"b"])
    reader = SkippingReader(path, ReadSpan(), open_file=lambda: open(path, "rb"))
    assert reader.compression == "gzip"  # the readers it opens see file objects, not the name
    assert [p for c in reader.chunks() for p in c.payloads()] == [b"a", b"b"]
