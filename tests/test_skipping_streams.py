"""`--skip_corrupt` in a GZIP / ZLIB file: a record whose payload alone is damaged (its length
passes its CRC and the stream inflates on) is stepped over as in a plain file, so the intact
records after it are kept; damage to a length still ends the file (no resync in a stream)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest
from helpers.jobs import FAST, payloads, run_job, summary_json

from pipelines import reshard
from tfrecord_beam import fs
from tfrecord_beam._engine import frame_records
from tfrecord_beam._tfindex import frame_index
from tfrecord_beam.records import RecordReader
from tfrecord_beam.skipping import SkippingReader

N = 600
COMPRESS = {"gzip": (".gz", gzip.compress), "zlib": (".zlib", zlib.compress)}


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
        kind,
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
