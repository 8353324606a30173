"""zstd, the codec added as one entry of the codec table (`tfrecord_beam.compression`): its
stream's damage, truncation and hostile lengths, and every layer that takes a compression
(reader and writer, CLI, jobs, Beam IO, torch datasets) reading and writing it."""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import struct

import pytest
import zstandard
from helpers import codecs
from helpers.fixtures import FIXTURES
from helpers.jobs import FAST, read_shards, run_job, summary_json, write_files

from tfrecord_beam import compression, records
from tfrecord_beam._engine import _framing
from tfrecord_beam.errors import CorruptRecordError, TruncatedRecordError
from tfrecord_beam.index import build_index, verify_index
from tfrecord_beam.records import RecordReader, RecordWriter

PAYLOADS = [b"zstd-%04d-" % i * (1 + i % 9) for i in range(2000)]
MAGIC = b"\x28\xb5\x2f\xfd"


def _write(path, payloads=PAYLOADS, **kwargs) -> str:
    with RecordWriter(str(path), "auto", **kwargs) as writer:
        writer.write_many(payloads)
    return str(path)


def test_written_zstd_is_standard_zstd_with_checksums(tmp_path):
    path = _write(tmp_path / "d.tfrecord.zst")
    blob = open(path, "rb").read()
    assert blob[:4] == MAGIC
    assert zstandard.get_frame_parameters(blob).has_checksum
    stream = zstandard.ZstdDecompressor().decompressobj().decompress(blob)
    assert stream == _framing.frame_records(PAYLOADS)
    assert list(records.read_records(path)) == PAYLOADS  # the suffix says zstd


def test_reads_what_other_tools_write_and_concatenated_frames(tmp_path):
    first, second = PAYLOADS[:700], PAYLOADS[700:]
    blob = zstandard.ZstdCompressor(level=19).compress(_framing.frame_records(first))  # no checksum
    blob += zstandard.ZstdCompressor(level=1, write_checksum=True).compress(_framing.frame_records(second))
    path = tmp_path / "cat.tfrecord.zstd"
    path.write_bytes(blob)
    assert list(RecordReader(path)) == PAYLOADS
    assert list(RecordReader(io.BytesIO(blob), "ZST", chunk_size=333)) == PAYLOADS  # a stream, any spelling


def test_truncated_file_keeps_its_records_then_says_truncated(tmp_path):
    # zstd hands out whole blocks (128 KiB): enough data that blocks before the cut decode
    payloads = [os.urandom(200 + i % 300) for i in range(3000)]
    path = _write(tmp_path / "d.tfrecord.zst", payloads)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) * 2 // 3])
    got = []
    with pytest.raises(TruncatedRecordError) as info:
        for payload in RecordReader(path):
            got.append(payload)
    assert got == payloads[: len(got)] and len(got) > 1000
    assert info.value.path == path
    got_tail = list(RecordReader(path, allow_truncated_tail=True))
    assert got_tail == got


def test_damage_in_a_later_frame_keeps_the_earlier_frames(tmp_path):
    first, second = PAYLOADS[:1000], PAYLOADS[1000:]
    s1 = _framing.frame_records(first)
    frame2 = bytearray(codecs.compress("zstd", _framing.frame_records(second)))
    frame2[len(frame2) // 2] ^= 0xFF
    path = tmp_path / "bad.tfrecord.zst"
    path.write_bytes(codecs.compress("zstd", s1) + bytes(frame2))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for payload in RecordReader(path):
            got.append(payload)
    assert got[:1000] == first and got == PAYLOADS[: len(got)]
    assert info.value.offset is not None and info.value.offset >= len(s1)
    assert "invalid zstd data" in info.value.reason


def test_garbage_after_the_frames_is_an_error_after_every_record(tmp_path):
    path = tmp_path / "junk.tfrecord.zst"
    path.write_bytes(codecs.compress("zstd", _framing.frame_records(PAYLOADS)) + b"GARBAGE-GARBAGE")
    got = []
    with pytest.raises(CorruptRecordError, match="invalid zstd data"):
        for payload in RecordReader(path):
            got.append(payload)
    assert got == PAYLOADS


def test_a_huge_length_field_is_refused_before_reading(tmp_path):
    head = struct.pack("<Q", 1 << 40)
    frame = head + struct.pack("<I", _framing.masked_crc32c(head)) + b"x" * 100
    path = tmp_path / "huge.tfrecord.zst"
    path.write_bytes(codecs.compress("zstd", frame))
    with pytest.raises(TruncatedRecordError, match="the rest of the zstd stream can inflate to at most"):
        list(RecordReader(path))


def test_ranges_and_index_use_uncompressed_offsets(tmp_path):
    path = _write(tmp_path / "d.tfrecord.zst", index_path=True)
    verify_index(path + ".tfindex", path)
    index = build_index(path)
    assert len(index) == len(PAYLOADS)
    start, end = int(index[100, 0]), int(index[300, 0])
    assert list(RecordReader(path, start_offset=start, end_offset=end, first_record_number=100)) == PAYLOADS[100:300]
    with pytest.raises(ValueError, match="block_bytes needs GZIP"):
        RecordWriter(str(tmp_path / "x.zst"), block_bytes=1024)


def test_levels(tmp_path):
    small = os.path.getsize(_write(tmp_path / "a.zst", compression_level=19))
    fast = os.path.getsize(_write(tmp_path / "b.zst", compression_level=1))
    assert small <= fast
    assert list(records.read_records(str(tmp_path / "a.zst"))) == PAYLOADS


def test_a_missing_module_names_the_extra(tmp_path, monkeypatch):
    codec = dataclasses.replace(compression.CODECS["zstd"], module="no_such_module_for_tfrecord_beam")
    monkeypatch.setitem(compression.CODECS, "zstd", codec)
    with pytest.raises(ImportError, match=r"x.zst: zstd needs .*pip install 'tfrecord_beam\[zstd\]'"):
        RecordWriter(str(tmp_path / "x.zst"))


# -- the edges: spellings, flags --------------------------------------------------------------


def test_spellings_resolve_once_to_the_name():
    assert [compression.normalize(s) for s in ("zstd", "ZST", " Zstandard ", "none", "auto")] == [
        "zstd",
        "zstd",
        "zstd",
        None,
        "auto",
    ]
    assert compression.resolve("gs://b/x.tfrecord.zst?endpoint_override=h") == "zstd"
    with pytest.raises(ValueError, match="use None, 'gzip', 'zlib', 'zstd' or 'auto'"):
        compression.normalize("lz4")


def test_flags_take_choices_and_help_from_the_table(capsys):
    parser = argparse.ArgumentParser()
    compression.add_argument(parser, "--output_compression", default="none", auto=False)
    assert parser.parse_args(["--output_compression", "ZST"]).output_compression == "zstd"
    assert parser.parse_args(["--output_compression", "uncompressed"]).output_compression == "none"
    with pytest.raises(SystemExit):
        parser.parse_args(["--output_compression", "lz4"])
    assert "invalid choice: 'lz4'" in capsys.readouterr().err
    assert "zstd" in parser.format_help()


def test_cli_reads_zstd(tmp_path, capsys):
    from tfrecord_beam.cli import main

    path = _write(tmp_path / "d.tfrecord.zst")
    renamed = str(tmp_path / "d.bin")
    os.rename(path, renamed)
    assert main(["count", renamed, "--compression", "zstd"]) == 0
    assert str(len(PAYLOADS)) in capsys.readouterr().out
    assert main(["verify", renamed, "--compression", "ZSTD"]) == 0


# -- jobs, Beam IO, torch ---------------------------------------------------------------------


def test_reshard_reads_zst_by_suffix_and_writes_zstd(tmp_path, capsys):
    from pipelines import reshard

    data = write_files(tmp_path / "in", "z", [300, 200], suffix=".tfrecord.zst")
    out = tmp_path / "out"
    args = ["--input", str(tmp_path / "in" / "*"), "--output_prefix", str(out / "y"), "--num_shards", "3"]
    code, stdout, err = run_job(reshard.main, args + ["--output_compression", "zstd"] + FAST, capsys)
    assert code == 0, err
    assert summary_json(stdout)["output_shards"] == 3
    shards = sorted(out.glob("y-*.tfrecord.zst"))
    assert len(shards) == 3 and all(p.read_bytes()[:4] == MAGIC for p in shards)
    assert sorted(p for s in read_shards(out, "y-*.tfrecord.zst") for p in s) == sorted(data)
    for shard in shards:
        verify_index(str(shard) + ".tfindex", str(shard))


def test_beam_write_and_read_zstd(tmp_path):
    import apache_beam as beam
    from apache_beam.io import tfrecordio
    from apache_beam.testing.util import assert_that, equal_to

    from tfrecord_beam.beam import ReadFromTFRecord, WriteToTFRecord

    prefix = str(tmp_path / "b")
    with beam.Pipeline("FnApiRunner") as p:
        _ = p | beam.Create(PAYLOADS[:50]) | WriteToTFRecord(prefix, file_name_suffix=".tfrecord.zst", num_shards=1)
    (shard,) = [str(p) for p in tmp_path.glob("b-*.tfrecord.zst")]
    assert open(shard, "rb").read(4) == MAGIC
    assert list(records.read_records(shard)) == PAYLOADS[:50]
    with beam.Pipeline("FnApiRunner") as p:
        assert_that(p | "Ours" >> ReadFromTFRecord(prefix + "-*"), equal_to(PAYLOADS[:50]), label="ours")
        theirs = p | "Theirs" >> tfrecordio.ReadFromTFRecord(shard)
        assert_that(theirs, equal_to(PAYLOADS[:50]), label="Beam reads it")


def test_torch_dataset_reads_zstd(tmp_path):
    pytest.importorskip("torch")
    from tfrecord_beam.torch import TFRecordDataset

    payloads = list(RecordReader(FIXTURES / "examples.tfrecord"))
    path = _write(tmp_path / "examples.tfrecord.zst", payloads)
    plain = [sorted(r) for r in TFRecordDataset(str(FIXTURES / "examples.tfrecord"), None)]
    for workers in (1, 3):
        ds = TFRecordDataset(path, None)
        got = [sorted(r) for w in range(workers) for r in ds.iter_worker(w, workers)]
        assert len(got) == len(payloads) and sorted(map(str, got)) == sorted(map(str, plain))
    assert len(list(TFRecordDataset(path, None, compression_type="zstd"))) == len(payloads)
