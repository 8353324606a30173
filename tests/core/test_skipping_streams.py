"""`--skip_corrupt` in a GZIP / ZLIB file: a record whose payload alone is damaged (its length
passes its CRC and the stream inflates on) is stepped over as in a plain file, so the intact
records after it are kept; damage to a length still ends the file (no resync in a stream)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from helpers import codecs
from helpers.jobs import FAST, payloads, run_job, summary_json

from pipelines import reshard
from tfrecord_beam import compression, fs
from tfrecord_beam._engine import frame_records
from tfrecord_beam._tfindex import frame_index
from tfrecord_beam.errors import CorruptRecordError
from tfrecord_beam.records import ReadSpan, RecordReader
from tfrecord_beam.skipping import SkippingReader

N = 600
COMPRESS = {kind: (compression.suffix(kind), functools.partial(codecs.compress, kind)) for kind in codecs.COMPRESSED}


def _damaged(directory: Path, kind: str):
    """N records, compressed after damaging record 100's payload and record 400's length."""
    data = payloads(N)
    framed = bytearray(frame_records(data))
    offsets = frame_index([len(p) + 16 for p in data])[:, 0].tolist()
    framed[offsets[100] + 14] ^= 0xFF
    framed[offsets[400] + 2] ^= 0xFF
    suffix, compress = COMPRESS[kind]
    path = directory / f"d.tfrecord{suffix}"
    path.write_bytes(compress(bytes(framed)))
    return path, data, offsets


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_a_damaged_payload_in_a_stream_loses_only_that_record(tmp_path, kind):
    path, data, offsets = _damaged(tmp_path, kind)
    letters = []
    reader = SkippingReader(
        str(path),
        ReadSpan(kind),
        open_file=lambda: fs.open_input(str(path)),
        skip_corrupt=True,
        on_corrupt=lambda f, o, r: letters.append((o, r)),
    )
    got = [p for chunk in reader.chunks() for p in chunk.payloads()]
    assert got == data[:100] + data[101:400]
    assert [o for o, _ in letters] == [offsets[100], offsets[400]]
    assert "the rest of this" in letters[1][1] and "the rest" not in letters[0][1]


def test_planned_reshard_keeps_the_records_after_a_damaged_payload(tmp_path, capsys):
    path, data, offsets = _damaged(tmp_path, "gzip")
    out = tmp_path / "o" / "r"
    code, stdout, err = run_job(
        reshard.main,
        ["--input", str(path), "--output_prefix", str(out), "--num_shards", "3", "--skip_corrupt"] + FAST,
        capsys,
    )
    assert code == 0, err
    shards = sorted(out.parent.glob("r-*-of-00003.tfrecord"))
    assert [p for s in shards for p in RecordReader(str(s))] == data[:100] + data[101:400]
    assert summary_json(stdout)["corrupt_records"] == 2


def _densely_damaged(directory: Path, kind: str, bad=range(5, N, 10)):
    """N records, compressed after damaging the payload of every record in `bad`."""
    data = payloads(N)
    framed = bytearray(frame_records(data))
    offsets = frame_index([len(p) + 16 for p in data])[:, 0].tolist()
    for i in bad:
        framed[offsets[i] + 14] ^= 0xFF
    suffix, compress = COMPRESS[kind]
    path = directory / f"dense.tfrecord{suffix}"
    path.write_bytes(compress(bytes(framed)))
    return path, data, offsets, list(bad)


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_payload_damage_is_stepped_over_in_one_pass_of_the_stream(tmp_path, kind):
    """60 damaged payloads: the file is opened and inflated once (it used to be inflated from
    its start twice per damaged record), and every intact record comes out, in order."""
    path, data, offsets, bad = _densely_damaged(tmp_path, kind)
    opened, letters = [], []

    def open_file():
        opened.append(1)
        return fs.open_input(str(path))

    reader = SkippingReader(
        str(path),
        ReadSpan(kind),
        open_file=open_file,
        skip_corrupt=True,
        on_corrupt=lambda f, o, r: letters.append((o, r)),
    )
    got = [p for chunk in reader.chunks() for p in chunk.payloads()]
    assert got == [p for i, p in enumerate(data) if i not in bad]
    assert [o for o, _ in letters] == [offsets[i] for i in bad] and len(opened) == 1
    assert all(r == "payload CRC mismatch (corrupted record)" for _, r in letters)
    assert reader.end == offsets[-1] + len(data[-1]) + 16


@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_record_reader_reports_payload_damage_and_reads_on(tmp_path, kind):
    """`on_bad_payload` gets (offset, record number, reason, frame end) and the reader goes on;
    the numbers of the records after it stay right; without it the first damage raises."""
    last = N - 1  # the damaged record is also the very last one: the tail of the last chunk
    path, data, offsets, bad = _densely_damaged(tmp_path, kind, bad=[3, 250, last])
    seen = []
    reader = RecordReader(str(path), kind, chunk_size=4096, on_bad_payload=lambda *a: seen.append(a))
    chunks = list(reader.chunks())
    assert [p for c in chunks for p in c.payloads()] == [p for i, p in enumerate(data) if i not in bad]
    assert [s[:2] for s in seen] == [(offsets[i], i) for i in bad]
    assert [s[3] for s in seen] == [offsets[i] + len(data[i]) + 16 for i in bad]
    for c in chunks:  # each chunk's first record number is that record's place in the file
        assert c.first_record_number == offsets.index(int(c.record_offsets[0]))
    with pytest.raises(CorruptRecordError) as info:
        list(RecordReader(str(path), kind))
    assert info.value.offset == offsets[3] and info.value.record_number == 3


def test_a_range_reports_only_its_own_damage(tmp_path):
    """A damaged record past `end_offset` belongs to the next range: not reported, not read."""
    path, data, offsets, bad = _densely_damaged(tmp_path, "gzip", bad=[10, 20])
    seen = []
    reader = RecordReader(
        str(path), "gzip", end_offset=offsets[20], members=False, on_bad_payload=lambda *a: seen.append(a[0])
    )
    assert list(reader) == data[:10] + data[11:20] and seen == [offsets[10]]


def test_beam_source_keeps_the_records_after_a_damaged_payload_in_a_stream(tmp_path):
    """The Beam source read a GZIP file's rest as lost after any damage; payload damage now
    costs only its record (a dead letter), in offset order with the records."""
    from apache_beam.io import source_test_utils

    from tfrecord_beam.beam.source import _TFRecordSource

    path, data, offsets, bad = _densely_damaged(tmp_path, "gzip", bad=[7, 300])
    got = source_test_utils.read_from_source(_TFRecordSource(str(path), skip_corrupt=True))
    letters = [i for i, g in enumerate(got) if not isinstance(g, bytes)]
    assert [g for g in got if isinstance(g, bytes)] == [p for i, p in enumerate(data) if i not in bad]
    assert letters == [7, 300] and [got[i].offset for i in letters] == [offsets[7], offsets[300]]
    assert all("the rest" not in got[i].reason for i in letters)
