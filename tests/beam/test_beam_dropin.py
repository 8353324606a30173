"""tfrecord_beam.beam as a drop-in for apache_beam.io.tfrecordio: Beam's documented behaviour of
ReadFromTFRecord / ReadAllFromTFRecord / WriteToTFRecord, side by side with Beam's own
transforms where they can be compared, on the FnApiRunner (unbounded input: TestStream on the
DirectRunner in streaming mode, which the FnApiRunner cannot run)."""

from __future__ import annotations

import gzip
import inspect
import logging
import os
import zlib

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam  # noqa: E402
from apache_beam import coders  # noqa: E402
from apache_beam.io import tfrecordio  # noqa: E402
from apache_beam.io.filesystems import FileSystems  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing.test_stream import TestStream as _TestStream  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402
from apache_beam.transforms import window  # noqa: E402
from apache_beam.transforms.display import DisplayData  # noqa: E402
from helpers import codecs  # noqa: E402
from helpers.beam_data import plain_payloads, write_file  # noqa: E402

from tfrecord_beam import compression, records  # noqa: E402
from tfrecord_beam.beam import ReadAllFromTFRecord, ReadFromTFRecord, WriteToTFRecord  # noqa: E402
from tfrecord_beam.errors import CorruptRecordError  # noqa: E402
from tfrecord_beam.index import default_index_path, verify_index  # noqa: E402

WORDS = ["alpha", "", "gamma", "délta", "x" * 300]


def _pipeline():
    return beam.Pipeline(runner=FnApiRunner())


def _data_files(directory):
    return sorted(n for n in os.listdir(directory) if not n.endswith(".tfindex"))


def _read_dir(directory, compression="auto"):
    return sorted(
        p for n in _data_files(directory) for p in records.read_records(os.path.join(directory, n), compression)
    )


# -- signatures -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ours, theirs",
    [
        (ReadFromTFRecord, tfrecordio.ReadFromTFRecord),
        (ReadAllFromTFRecord, tfrecordio.ReadAllFromTFRecord),
        (WriteToTFRecord, tfrecordio.WriteToTFRecord),
    ],
)
def test_beam_parameters_in_beams_order_with_beams_defaults(ours, theirs):
    mine = list(inspect.signature(ours.__init__).parameters.values())[1:]
    beams = list(inspect.signature(theirs.__init__).parameters.values())[1:]
    assert [p.name for p in mine[: len(beams)]] == [p.name for p in beams]
    for a, b in zip(mine, beams):
        assert a.kind == b.kind and a.default == b.default, a.name
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in mine[len(beams) :])


def test_positional_coder_and_non_coder_is_a_clear_error(tmp_path):
    path = write_file(tmp_path / "a.tfrecord", plain_payloads(5))
    with _pipeline() as p:
        assert_that(p | ReadFromTFRecord(path, coders.BytesCoder()), equal_to(plain_payloads(5)))
    with pytest.raises(TypeError, match="compression_type="):
        ReadFromTFRecord(path, "gzip")


# -- coders -----------------------------------------------------------------------------------
def test_coder_roundtrip_both_ways_with_beams_transforms(tmp_path):
    ours_dir, beams_dir = tmp_path / "ours", tmp_path / "beams"
    with _pipeline() as p:
        words = p | beam.Create(WORDS)
        _ = words | "Ours" >> WriteToTFRecord(str(ours_dir / "w"), coders.StrUtf8Coder(), num_shards=2)
        _ = words | "Beams" >> tfrecordio.WriteToTFRecord(str(beams_dir / "w"), coders.StrUtf8Coder(), num_shards=2)
    assert _read_dir(ours_dir) == _read_dir(beams_dir) == sorted(w.encode() for w in WORDS)
    with _pipeline() as p:
        mine = p | "Mine" >> ReadFromTFRecord(str(beams_dir / "w-*"), coders.StrUtf8Coder())
        assert_that(mine, equal_to(WORDS), label="ours reads Beam's")
        theirs = p | "Theirs" >> tfrecordio.ReadFromTFRecord(str(ours_dir / "w-*-of-*[0-9]"), coders.StrUtf8Coder())
        assert_that(theirs, equal_to(WORDS), label="Beam reads ours")
        assert mine.element_type is str


def test_output_type_hints():
    assert ReadFromTFRecord("x", validate=False).expand(beam.Pipeline() | beam.Impulse()).element_type is bytes
    p = beam.Pipeline()
    named = p | ReadFromTFRecord("x", coders.StrUtf8Coder(), validate=False, with_filename=True)
    assert named.element_type == beam.typehints.Tuple[str, str]
    all_named = p | beam.Create(["x"]) | ReadAllFromTFRecord(with_filename=True)
    assert all_named.element_type == beam.typehints.Tuple[str, bytes]


# -- compression ------------------------------------------------------------------------------
def test_compressed_suffix_auto_and_explicit(tmp_path):
    """Every compressed kind (codecs.COMPRESSED), each in its own directory, written by one
    pipeline and read by another (a pipeline's fixed cost was most of each kind's time when
    each had its own two)."""
    with _pipeline() as p:
        payloads = p | beam.Create(plain_payloads(20))
        for kind in codecs.COMPRESSED:
            suffix = compression.CODECS[kind].beam_suffix  # the suffix Beam's AUTO reads as the codec
            _ = payloads | f"Write {kind}" >> WriteToTFRecord(
                str(tmp_path / kind / "result"), file_name_suffix=suffix, num_shards=1
            )
    for kind in codecs.COMPRESSED:
        codec = compression.CODECS[kind]
        (name,) = _data_files(tmp_path / kind)
        assert name == f"result-00000-of-00001{codec.beam_suffix}", kind
        shard = os.path.join(tmp_path / kind, name)
        with open(shard, "rb") as handle:
            assert handle.read(1) == codec.magic[:1], kind
        assert list(records.read_records(shard, kind)) == plain_payloads(20), kind
        verify_index(default_index_path(shard), shard)
        os.rename(shard, tmp_path / kind / "renamed.bin")  # no suffix: AUTO reads it as uncompressed, so say what it is
    with _pipeline() as p:
        for kind in codecs.COMPRESSED:
            beam_kind, renamed = compression.CODECS[kind].beam_type, str(tmp_path / kind / "renamed.bin")
            auto = p | f"Auto {kind}" >> ReadFromTFRecord(str(tmp_path / kind / "result") + "-*")
            assert_that(auto, equal_to([]), label=f"{kind}: nothing left under the prefix")
            explicit = p | f"Explicit {kind}" >> ReadFromTFRecord(renamed, compression_type=beam_kind)
            assert_that(explicit, equal_to(plain_payloads(20)), label=f"{kind}: explicit")
            theirs = p | f"Theirs {kind}" >> tfrecordio.ReadFromTFRecord(renamed, compression_type=beam_kind)
            assert_that(theirs, equal_to(plain_payloads(20)), label=f"{kind}: Beam reads it")


def test_suffix_checks_use_the_full_shard_name_and_advise_right(tmp_path):
    WriteToTFRecord(str(tmp_path / "result"), file_name_suffix=".gz")  # issue 13: used to raise
    with pytest.raises(ValueError, match=r"pass compression_type='zlib'.*or end file_name_suffix in \.deflate"):
        WriteToTFRecord(str(tmp_path / "result"), file_name_suffix=".tfrecord.zlib")
    with pytest.raises(ValueError, match=r"written gzip.*file_name_suffix='\.gz'"):
        WriteToTFRecord(str(tmp_path / "out.gz"))  # Beam would write GZIP into out.gz-00000-of-00001
    with pytest.raises(ValueError, match="not bzip2"):
        WriteToTFRecord(str(tmp_path / "result"), file_name_suffix=".bz2")
    # following the advice writes ZLIB, read back with the same compression_type
    prefix = str(tmp_path / "z")
    with _pipeline() as p:
        _ = (
            p
            | beam.Create(plain_payloads(9))
            | WriteToTFRecord(prefix, file_name_suffix=".tfrecord.zlib", compression_type="zlib", num_shards=1)
        )
    (name,) = _data_files(tmp_path)
    assert zlib.decompress(open(tmp_path / name, "rb").read())  # really ZLIB
    assert list(records.read_records(str(tmp_path / name), "zlib")) == plain_payloads(9)
    with _pipeline() as p:
        assert_that(p | ReadFromTFRecord(prefix + "-*", compression_type="zlib"), equal_to(plain_payloads(9)))


# -- file names: templates, write-then-read, index sidecars -----------------------------------
SHARD_NAME_CASES = [
    {},
    {"num_shards": 3},
    {"num_shards": 2, "shard_name_template": "-SS-of-NN"},
    {"shard_name_template": ""},
    {"file_name_suffix": ".tfrecord", "num_shards": 2},
]


def test_shard_names_match_beams(tmp_path):
    """Every case written by both transforms in one pipeline (a pipeline's fixed cost was most
    of each case's time when each had its own)."""
    with _pipeline() as p:
        payloads = p | beam.Create(plain_payloads(30))
        for i, kwargs in enumerate(SHARD_NAME_CASES):
            _ = payloads | f"Ours {i}" >> WriteToTFRecord(str(tmp_path / str(i) / "ours" / "out"), **kwargs)
            _ = payloads | f"Beams {i}" >> tfrecordio.WriteToTFRecord(
                str(tmp_path / str(i) / "beams" / "out"), **kwargs
            )
    for i, kwargs in enumerate(SHARD_NAME_CASES):
        case = tmp_path / str(i)
        ours, beams = _data_files(case / "ours"), _data_files(case / "beams")
        if kwargs.get("num_shards"):
            assert ours == beams, kwargs
        elif "shard_name_template" in kwargs:
            assert ours == beams == ["out"], kwargs
        else:  # one shard per bundle: the count may differ, the template not
            count = len(ours)
            assert ours == [f"out-{i:05d}-of-{count:05d}" for i in range(count)], kwargs
        assert _read_dir(case / "ours") == _read_dir(case / "beams") == sorted(plain_payloads(30)), kwargs
        indexes = sorted(n for n in os.listdir(case / "ours") if n.endswith(".tfindex"))
        assert indexes == sorted(os.path.basename(default_index_path(n)) for n in ours), kwargs


def test_write_then_read_prefix_glob_skips_index_sidecars(tmp_path, caplog):
    prefix = str(tmp_path / "prefix")
    with _pipeline() as p:
        _ = p | beam.Create(plain_payloads(40)) | WriteToTFRecord(prefix, num_shards=3)
    assert len(os.listdir(tmp_path)) == 6  # 3 shards + 3 indexes
    with caplog.at_level(logging.DEBUG, logger="tfrecord_beam.beam"):
        with _pipeline() as p:
            assert_that(p | "Read" >> ReadFromTFRecord(prefix + "-*"), equal_to(plain_payloads(40)), label="read")
            read_all = p | beam.Create([prefix + "-*"]) | ReadAllFromTFRecord(with_filename=True)
            assert_that(read_all | beam.Values(), equal_to(plain_payloads(40)), label="read all")
    skipped = {
        r.getMessage().split("skipping ")[1].split(",")[0] for r in caplog.records if "skipping" in r.getMessage()
    }
    assert skipped == {os.path.join(tmp_path, n) for n in os.listdir(tmp_path) if n.endswith(".tfindex")}


def test_an_index_read_as_data_says_it_is_an_index(tmp_path):
    path = write_file(tmp_path / "a.tfrecord", plain_payloads(8), index=True)
    index = default_index_path(path)
    with pytest.raises(Exception, match=r"a\.tfindex.*this is an index file"):
        with _pipeline() as p:
            _ = p | ReadFromTFRecord(index)
    other = tmp_path / "renamed.idx"  # any name: the contents give it away
    os.rename(index, other)
    with pytest.raises(CorruptRecordError, match="this is an index file"):
        from apache_beam.io import source_test_utils

        from tfrecord_beam.beam.source import _TFRecordSource

        source_test_utils.read_from_source(_TFRecordSource(str(other)))


# -- with_filename ----------------------------------------------------------------------------
def test_with_filename_like_beams_read_all(tmp_path):
    a = write_file(tmp_path / "a.tfrecord", plain_payloads(6))
    b = write_file(tmp_path / "b.tfrecord.gz", plain_payloads(4))
    expected = [(a, x) for x in plain_payloads(6)] + [(b, x) for x in plain_payloads(4)]
    with _pipeline() as p:
        patterns = p | beam.Create([str(tmp_path / "*.tfrecord*")])
        assert_that(patterns | "Ours" >> ReadAllFromTFRecord(with_filename=True), equal_to(expected), label="ours")
        theirs = patterns | "Beams" >> tfrecordio.ReadAllFromTFRecord(with_filename=True)
        assert_that(theirs, equal_to(expected), label="Beam's")
        one = p | ReadFromTFRecord(str(tmp_path / "*.tfrecord*"), with_filename=True)
        assert_that(one, equal_to(expected), label="ReadFromTFRecord")


# -- display data -----------------------------------------------------------------------------
def test_display_data_of_sources_and_sinks(tmp_path):
    path = write_file(tmp_path / "a.tfrecord", plain_payloads(3))
    items = {i.key: i.value for i in DisplayData.create_from(ReadFromTFRecord(path, skip_corrupt=True)._source).items}
    assert items["file_pattern"] == path and items["compression"] == "auto"
    assert items["skip_corrupt"] is True and items["use_index"] is True and "BytesCoder" in items["coder"]
    write = WriteToTFRecord(str(tmp_path / "out"), coders.StrUtf8Coder(), num_shards=4)
    items = {i.key: i.value for i in DisplayData.create_from(write._sink).items}
    assert items["shards"] == 4 and items["write_index"] is True and "StrUtf8Coder" in items["coder"]
    assert items["file_pattern"] == str(tmp_path / "out") + "-%(shard_num)05d-of-%(num_shards)05d"
    nested = {i.key for i in DisplayData.create_from(write).items}
    assert "write_index" in nested


# -- unbounded input --------------------------------------------------------------------------
def _streaming_pipeline():
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(runner="DirectRunner", options=options)


def _two_windows():
    """A TestStream of 5 records: 3 in [0, 10), 2 in [10, 20)."""
    return (
        _TestStream()
        .advance_watermark_to(0)
        .add_elements([window.TimestampedValue(b"a%d" % i, i) for i in range(3)])
        .advance_watermark_to(10)
        .add_elements([window.TimestampedValue(b"b%d" % i, 10 + i) for i in range(2)])
        .advance_watermark_to_infinity()
    )


def _check_windowed_output(directory, expected_names):
    names = _data_files(directory)
    assert names == expected_names
    for name in names:
        shard = os.path.join(directory, name)
        verify_index(default_index_path(shard), shard, verify_crc=True)
    assert sorted(n for n in os.listdir(directory) if n.endswith(".tfindex")) == sorted(
        os.path.basename(default_index_path(n)) for n in names
    )
    return {name: sorted(records.read_records(os.path.join(directory, name))) for name in names}


@pytest.mark.parametrize("num_shards", [0, 2])
def test_unbounded_windowed_input_keeps_every_window(tmp_path, num_shards):
    with _streaming_pipeline() as p:
        stream = p | _two_windows() | beam.WindowInto(window.FixedWindows(10))
        _ = stream | "Ours" >> WriteToTFRecord(str(tmp_path / "ours" / "x"), num_shards=num_shards)
        _ = stream | "Beams" >> tfrecordio.WriteToTFRecord(str(tmp_path / "beams" / "x"), num_shards=num_shards)
    count = max(num_shards, 1)
    expected = [f"x-[{lo}.0, {lo + 10}.0)-{i:05d}-of-{count:05d}" for lo in (0, 10) for i in range(count)]
    got = _check_windowed_output(tmp_path / "ours", expected)
    assert _data_files(tmp_path / "beams") == expected
    first = sorted(r for n, rs in got.items() if n.startswith("x-[0.0") for r in rs)
    second = sorted(r for n, rs in got.items() if n.startswith("x-[10.0") for r in rs)
    assert first == [b"a0", b"a1", b"a2"] and second == [b"b0", b"b1"]


def test_unbounded_global_window_needs_triggering_frequency(tmp_path):
    with pytest.raises(ValueError, match="triggering_frequency"):
        with _streaming_pipeline() as p:
            _ = p | _two_windows() | WriteToTFRecord(str(tmp_path / "x"))
    with _streaming_pipeline() as p:
        _ = p | _two_windows() | WriteToTFRecord(str(tmp_path / "x"), triggering_frequency=10)
    got = _check_windowed_output(tmp_path, ["x-[0.0, 10.0)-00000-of-00001", "x-[10.0, 20.0)-00000-of-00001"])
    assert list(got.values()) == [[b"a0", b"a1", b"a2"], [b"b0", b"b1"]]


def test_unbounded_triggering_frequency_replaces_the_input_windows(tmp_path):
    with _streaming_pipeline() as p:
        _ = (
            p
            | _two_windows()
            | beam.WindowInto(window.FixedWindows(100))
            | WriteToTFRecord(str(tmp_path / "x"), file_name_suffix=".gz", triggering_frequency=10)
        )
    got = _check_windowed_output(tmp_path, ["x-[0.0, 10.0)-00000-of-00001.gz", "x-[10.0, 20.0)-00000-of-00001.gz"])
    assert list(got.values()) == [[b"a0", b"a1", b"a2"], [b"b0", b"b1"]]
    with gzip.open(tmp_path / "x-[0.0, 10.0)-00000-of-00001.gz") as handle:
        assert handle.read(1)  # really gzip


def test_validate_and_file_metadata_input_as_beams(tmp_path):
    from apache_beam.io import fileio

    with pytest.raises(IOError, match="No files found"):
        ReadFromTFRecord(str(tmp_path / "missing-*"))
    ReadFromTFRecord(str(tmp_path / "missing-*"), validate=False)
    path = write_file(tmp_path / "a.tfrecord", plain_payloads(7), index=True)
    with _pipeline() as p:
        matched = p | fileio.MatchFiles(str(tmp_path / "a.*"))  # FileMetadata, the index among them
        assert_that(matched | ReadAllFromTFRecord(), equal_to(plain_payloads(7)))
    assert os.path.exists(default_index_path(path))


def test_the_source_reads_through_beam_filesystems(tmp_path, monkeypatch):
    """Data is opened with Beam's FileSystems.open (pipeline options and credentials apply),
    never with the core's pyarrow.fs; errors still name the file."""
    from apache_beam.io import source_test_utils

    import tfrecord_beam.fs as core_fs
    from tfrecord_beam.beam.source import _TFRecordSource

    path = write_file(tmp_path / "a.tfrecord", plain_payloads(30))
    opened = []
    real_open = FileSystems.open
    monkeypatch.setattr(FileSystems, "open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k))
    monkeypatch.setattr(core_fs, "open_input", lambda *a, **k: pytest.fail("read through pyarrow.fs"))
    source = _TFRecordSource(path)
    splits = [(s.source, s.start_position, s.stop_position) for s in source.split(desired_bundle_size=500)]
    source_test_utils.assert_sources_equal_reference_source((source, None, None), splits)
    assert opened and set(opened) == {path}
    data = bytearray(open(path, "rb").read())
    data[100] ^= 1
    open(path, "wb").write(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        source_test_utils.read_from_source(source)
    assert info.value.path == path
