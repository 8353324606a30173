"""WriteToTFRecord / _TFRecordSink: shards, their indexes, retries, failures, compression."""

from __future__ import annotations

import glob
import os

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from helpers.beam_data import plain_payloads  # noqa: E402

from tfrecord_beam import records  # noqa: E402
from tfrecord_beam.beam import WriteToTFRecord  # noqa: E402
from tfrecord_beam.beam.sink import _TFRecordSink  # noqa: E402
from tfrecord_beam.index import default_index_path, verify_index  # noqa: E402


def _shards(prefix):
    return sorted(p for p in glob.glob(prefix + "*") if not p.endswith(".tfindex"))


def _read_all(paths, compression="auto"):
    out = []
    for path in paths:
        out += list(records.read_records(path, compression))
    return out


def _write(payloads, prefix, **kwargs):
    kwargs.setdefault("file_name_suffix", ".tfrecord")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create(payloads, reshuffle=False) | WriteToTFRecord(prefix, **kwargs)


@pytest.mark.parametrize("num_shards", [1, 3])
def test_shards_and_indexes(tmp_path, num_shards):
    payloads = plain_payloads(200)
    prefix = str(tmp_path / "out")
    _write(payloads, prefix, num_shards=num_shards)
    shards = _shards(prefix)
    assert [os.path.basename(s) for s in shards] == [
        f"out-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)
    ]
    assert sorted(_read_all(shards)) == sorted(payloads)
    for shard in shards:
        verify_index(default_index_path(shard), shard, verify_crc=True)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(s) for s in shards] + [os.path.basename(default_index_path(s)) for s in shards]
    )  # no temporary files or directories left


def test_gzip_shards_index_uncompressed_offsets(tmp_path):
    payloads = plain_payloads(50)
    prefix = str(tmp_path / "out")
    _write(payloads, prefix, file_name_suffix=".tfrecord.gz", num_shards=2)
    shards = _shards(prefix)
    assert len(shards) == 2 and all(s.endswith(".tfrecord.gz") for s in shards)
    with open(shards[0], "rb") as handle:
        assert handle.read(2) == b"\x1f\x8b"
    assert sorted(_read_all(shards)) == sorted(payloads)
    for shard in shards:
        assert default_index_path(shard) == shard + ".tfindex"
        verify_index(default_index_path(shard), shard)


def test_single_file_template_and_no_index_removes_stale_index(tmp_path):
    target = str(tmp_path / "single.tfrecord")
    stale = default_index_path(target)
    with open(stale, "w") as handle:
        handle.write("0 99\n")
    _write(plain_payloads(20), str(tmp_path / "single"), shard_name_template="", write_index=False)
    assert _read_all([target]) == plain_payloads(20)
    assert not os.path.exists(stale)


def test_retried_bundle_leaves_no_duplicate(tmp_path):
    """Drive the sink protocol as a runner does when a bundle's first attempt fails."""
    prefix = str(tmp_path / "out")
    sink = _TFRecordSink(prefix, file_name_suffix=".tfrecord", num_shards=0)
    init = sink.initialize_write()
    failed = sink.open_writer(init, "attempt-1")
    for payload in plain_payloads(10):
        failed.write(payload)
    failed.close()  # wrote a complete temporary file, but the runner discards this attempt
    retry = sink.open_writer(init, "attempt-2")
    for payload in plain_payloads(10):
        retry.write(payload)
    committed = [retry.close()]
    final = list(sink.finalize_write(init, committed, sink.pre_finalize(init, committed)))
    assert final == [prefix + "-00000-of-00001.tfrecord"]
    assert _read_all(final) == plain_payloads(10)
    verify_index(default_index_path(final[0]), final[0])
    assert not os.path.exists(init)  # the temp dir, with the failed attempt's files, is gone
    # finalize itself may be retried: a second run changes nothing and does not fail
    assert list(sink.finalize_write(init, committed, None)) == []
    assert _read_all(final) == plain_payloads(10)
    verify_index(default_index_path(final[0]), final[0])


def test_crash_between_index_and_data_rename_recovers(tmp_path, monkeypatch):
    prefix = str(tmp_path / "out")
    sink = _TFRecordSink(prefix, file_name_suffix=".tfrecord", num_shards=0)
    init = sink.initialize_write()
    writer = sink.open_writer(init, "only")
    for payload in plain_payloads(7):
        writer.write(payload)
    committed = [writer.close()]
    real_rename = beam.io.filesystems.FileSystems.rename
    calls = []

    def flaky_rename(sources, targets):
        calls.append(list(sources))
        if any(s.endswith(".tfrecord") for s in sources):
            raise OSError("simulated crash before the data rename")
        return real_rename(sources, targets)

    monkeypatch.setattr(beam.io.filesystems.FileSystems, "rename", staticmethod(flaky_rename))
    with pytest.raises(Exception, match="simulated crash"):
        list(sink.finalize_write(init, committed, None))
    assert _shards(prefix) == [] and not glob.glob(prefix + "*.tfindex")  # nothing looks complete
    monkeypatch.setattr(beam.io.filesystems.FileSystems, "rename", staticmethod(real_rename))
    final = list(sink.finalize_write(init, committed, None))
    assert _read_all(final) == plain_payloads(7)
    verify_index(default_index_path(final[0]), final[0])


def test_crash_while_overwriting_never_leaves_a_new_index_beside_old_data(tmp_path, monkeypatch):
    prefix = str(tmp_path / "out")

    def committed_writes(payloads):
        sink = _TFRecordSink(prefix, file_name_suffix=".tfrecord", num_shards=0)
        init = sink.initialize_write()
        writer = sink.open_writer(init, "only")
        for payload in payloads:
            writer.write(payload)
        return sink, init, [writer.close()]

    sink, init, committed = committed_writes(plain_payloads(3))
    old = list(sink.finalize_write(init, committed, None))
    sink, init, committed = committed_writes(plain_payloads(9))
    real_rename = beam.io.filesystems.FileSystems.rename

    def flaky_rename(sources, targets):
        if any(s.endswith(".tfrecord") for s in sources):
            raise OSError("simulated crash before the data rename")
        return real_rename(sources, targets)

    monkeypatch.setattr(beam.io.filesystems.FileSystems, "rename", staticmethod(flaky_rename))
    with pytest.raises(Exception, match="simulated crash"):
        list(sink.finalize_write(init, committed, None))
    # the old index went first, the data rename failed: the old data is whole, without an index
    assert _shards(prefix) == old and _read_all(old) == plain_payloads(3)
    assert not os.path.exists(default_index_path(old[0]))
    monkeypatch.setattr(beam.io.filesystems.FileSystems, "rename", staticmethod(real_rename))
    final = list(sink.finalize_write(init, committed, None))
    assert final == old and _read_all(final) == plain_payloads(9)
    verify_index(default_index_path(final[0]), final[0])


def test_crash_after_the_data_rename_leaves_new_data_without_an_index(tmp_path, monkeypatch):
    prefix = str(tmp_path / "out")
    sink = _TFRecordSink(prefix, file_name_suffix=".tfrecord", num_shards=0)
    init = sink.initialize_write()
    writer = sink.open_writer(init, "only")
    for payload in plain_payloads(5):
        writer.write(payload)
    committed = [writer.close()]
    real_rename = beam.io.filesystems.FileSystems.rename

    def flaky_rename(sources, targets):
        if any(s.endswith(".tfindex") for s in sources):
            raise OSError("simulated crash before the index rename")
        return real_rename(sources, targets)

    monkeypatch.setattr(beam.io.filesystems.FileSystems, "rename", staticmethod(flaky_rename))
    with pytest.raises(Exception, match="simulated crash"):
        list(sink.finalize_write(init, committed, None))
    shards = _shards(prefix)
    assert len(shards) == 1 and _read_all(shards) == plain_payloads(5)
    assert not os.path.exists(default_index_path(shards[0]))  # no index rather than a wrong one


class _FailAfter(beam.DoFn):
    def __init__(self, limit):
        self._limit = limit

    def process(self, element):
        if element == self._limit:
            raise RuntimeError("boom: simulated failure")
        yield element


def test_failed_pipeline_leaves_no_shard(tmp_path):
    prefix = str(tmp_path / "out")
    payloads = plain_payloads(30)
    with pytest.raises(Exception, match="boom"):
        with beam.Pipeline(runner=FnApiRunner()) as p:
            _ = (
                p
                | beam.Create(payloads, reshuffle=False)
                | beam.ParDo(_FailAfter(payloads[20]))
                | WriteToTFRecord(prefix, num_shards=2)
            )
    assert _shards(prefix) == []
    assert not glob.glob(str(tmp_path / "*.tfindex"))


def test_non_bytes_element_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match="EncodeExamples"):
        _write([{"a": 1}], str(tmp_path / "out"))


def test_records_counter(tmp_path):
    payloads = plain_payloads(40)
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = pipeline | beam.Create(payloads, reshuffle=False) | WriteToTFRecord(str(tmp_path / "out"))
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
    assert counters["records_written"] == 40
    assert counters["bytes_written"] == sum(map(len, payloads))


@pytest.mark.parametrize("count, num_shards, expected", [(1, 3, 3), (0, 0, 1), (0, 2, 2)])
def test_shard_count_is_met_with_empty_shards(tmp_path, count, num_shards, expected):
    prefix = str(tmp_path / "out")
    _write(plain_payloads(count + 1)[1:], prefix, num_shards=num_shards)  # payload 0 is empty: skip it
    shards = _shards(prefix)
    assert len(shards) == expected
    assert sorted(_read_all(shards)) == sorted(plain_payloads(count + 1)[1:])
    for shard in shards:
        verify_index(default_index_path(shard), shard)


def test_windowed_input_still_gets_the_shard_count(tmp_path):
    prefix = str(tmp_path / "out")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create(list(enumerate(plain_payloads(40))), reshuffle=False)
            | beam.Map(lambda kv: beam.window.TimestampedValue(kv[1], kv[0]))
            | beam.WindowInto(beam.window.FixedWindows(10))
            | WriteToTFRecord(prefix, num_shards=2)
        )
    shards = _shards(prefix)
    assert len(shards) == 2 and sorted(_read_all(shards)) == sorted(plain_payloads(40))


def test_rewrite_replaces_old_shards_and_indexes(tmp_path):
    prefix = str(tmp_path / "out")
    _write(plain_payloads(30), prefix, num_shards=2)
    _write(plain_payloads(12), prefix, num_shards=2)
    shards = _shards(prefix)
    assert sorted(_read_all(shards)) == sorted(plain_payloads(12))
    for shard in shards:
        verify_index(default_index_path(shard), shard)


@pytest.mark.parametrize("suffix", [".tfrecord", ".tfrecord.gz"])
def test_fixed_shards_through_piece_files(tmp_path, monkeypatch, suffix):
    """Shares of a shard too big for the dealer's buffer go through piece files, not the GroupByKey."""
    from tfrecord_beam.beam import _write as write_module

    monkeypatch.setattr(write_module, "KEYED_BUFFER_BYTES", 3000)
    monkeypatch.setattr(write_module, "_MIN_KEY_BUFFER_BYTES", 1000)
    opened = []
    real_open_piece = _TFRecordSink.open_piece
    monkeypatch.setattr(_TFRecordSink, "open_piece", lambda self, d: opened.append(1) or real_open_piece(self, d))
    payloads = plain_payloads(400)
    prefix = str(tmp_path / "out")
    pipeline = beam.Pipeline(runner=FnApiRunner())
    _ = (
        pipeline
        | beam.Create(payloads, reshuffle=False)
        | WriteToTFRecord(prefix, file_name_suffix=suffix, num_shards=3)
    )
    result = pipeline.run()
    result.wait_until_finish()
    shards = _shards(prefix)
    assert opened and len(shards) == 3 and sorted(_read_all(shards)) == sorted(payloads)
    counts = [len(list(records.read_records(s))) for s in shards]
    assert max(counts) - min(counts) <= 3  # dealt round-robin
    for shard in shards:
        verify_index(default_index_path(shard), shard, verify_crc=True)
    assert len(os.listdir(tmp_path)) == 6  # pieces went with the temporary directory
    written = sum(c.committed for c in result.metrics().query()["counters"] if c.key.metric.name == "records_written")
    assert written == 400  # a piece's records count once (when the piece is written)


def test_many_fixed_shards_send_lists_not_pieces(tmp_path, monkeypatch):
    from tfrecord_beam.beam import _write as write_module

    monkeypatch.setattr(write_module, "MAX_PIECE_SHARDS", 2)
    monkeypatch.setattr(write_module, "KEYED_BUFFER_BYTES", 3000)
    monkeypatch.setattr(write_module, "_MIN_KEY_BUFFER_BYTES", 1000)
    monkeypatch.setattr(_TFRecordSink, "open_piece", lambda *a: pytest.fail("no piece files past MAX_PIECE_SHARDS"))
    payloads = plain_payloads(300)
    prefix = str(tmp_path / "out")
    _write(payloads, prefix, num_shards=3)
    shards = _shards(prefix)
    assert len(shards) == 3 and sorted(_read_all(shards)) == sorted(payloads)
    for shard in shards:
        verify_index(default_index_path(shard), shard, verify_crc=True)
