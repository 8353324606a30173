"""The pieces of planned jobs without Beam: header walk, digest, plans, streaming copies,
block-wise selection, keyed runs, progress lines. Both engines where the engine matters."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from tfrecord_beam import _engine
from tfrecord_beam import fs as core_fs
from tfrecord_beam._engine import _framing
from tfrecord_beam.errors import CorruptRecordError, TruncatedRecordError
from tfrecord_beam.index import build_index, load_index
from tfrecord_beam.jobs import _bucketed, _copy, _plan, _walk
from tfrecord_beam.records import RecordReader, RecordWriter, write_records


@pytest.fixture(params=["native", "pure"])
def engine(request, monkeypatch):
    """Run the test on one engine's framing functions (whatever TFRECORD_BEAM_PURE says)."""
    impl = _framing
    if request.param == "native":
        impl = pytest.importorskip("tfrecord_beam._native._core", reason="compiled core not built")
    for name in ("scan_frames", "masked_crc32c", "find_length_crc", "walk_headers"):
        monkeypatch.setattr(_engine, name, getattr(impl, name))
    return request.param


def _payloads(sizes):
    return [bytes([i % 251]) * int(n) for i, n in enumerate(sizes)]


MIXED = [3, 0, 200] * 30 + [_walk.SEEK_FRAME_BYTES, 5, _walk.SEEK_FRAME_BYTES * 3] * 20 + [50_000, 7] * 10 + [1] * 500


def _walk_all(path, compression=None, **kw):
    with open(path, "rb") as raw:
        return list(_walk.walk_frames(raw, compression, str(path), **kw))


@pytest.mark.parametrize("read_bytes", [64, 1000, _walk.READ_BYTES])
def test_walk_equals_a_sequential_index(tmp_path, engine, monkeypatch, read_bytes):
    monkeypatch.setattr(_walk, "READ_BYTES", read_bytes)  # reads ending inside headers and frames
    path = tmp_path / "a.tfrecord"
    payloads = _payloads(MIXED)
    write_records(str(path), payloads)
    ref = build_index(str(path))
    blocks = _walk_all(path)
    assert np.array_equal(np.concatenate([b.offsets for b in blocks]), ref[:, 0])
    assert np.array_equal(np.concatenate([b.sizes for b in blocks]), ref[:, 1])
    assert [b.first_record for b in blocks] == np.cumsum([0] + [len(b) for b in blocks])[:-1].tolist()
    footers = np.concatenate([b.footers for b in blocks])
    assert footers.tolist() == [_framing.masked_crc32c(p) for p in payloads]
    mid = 100  # from a record boundary inside the file
    later = _walk_all(path, start_offset=int(ref[mid, 0]), first_record=mid)
    assert later[0].first_record == mid and np.array_equal(np.concatenate([b.offsets for b in later]), ref[mid:, 0])


@pytest.mark.parametrize(
    "sizes",
    [[_walk.SEEK_FRAME_BYTES * 2] * 50, [30_000, 9] * 25, [100] * 50],
    ids=["big", "alternating", "small"],
)
def test_walk_footers_are_the_files(tmp_path, engine, monkeypatch, sizes):
    """Each block's footers are the 4 bytes that end its frames in the file, for big records
    (the header walk, a block of at most BLOCK_RECORDS at a time), small ones (the scan) and
    both in turn; no record twice or missed."""
    monkeypatch.setattr(_walk, "BLOCK_RECORDS", 7)
    monkeypatch.setattr(_walk, "READ_BYTES", 40_000)  # the scan's first read sees the big records
    path = tmp_path / "a.tfrecord"
    write_records(str(path), [np.random.default_rng(i).bytes(n) for i, n in enumerate(sizes)])
    raw = path.read_bytes()
    blocks = _walk_all(path)
    offsets = np.concatenate([b.offsets for b in blocks])
    assert np.array_equal(offsets, build_index(str(path))[:, 0])
    for block in blocks:
        assert block.footers.dtype == np.uint32 and block.offsets.dtype == block.sizes.dtype == np.int64
        ends = (block.offsets + block.sizes).tolist()
        assert block.footers.tolist() == [int.from_bytes(raw[e - 4 : e], "little") for e in ends]
    if sizes[0] >= _walk.SEEK_FRAME_BYTES:  # after the first read, walked by headers: blocks of BLOCK_RECORDS
        assert len(blocks) > 5 and max(len(b) for b in blocks[1:]) == 7


def test_walk_of_compressed_and_verified_files(tmp_path):
    payloads = _payloads(MIXED)
    write_records(str(tmp_path / "a.tfrecord.gz"), payloads)
    write_records(str(tmp_path / "a.tfrecord"), payloads)
    ref = build_index(str(tmp_path / "a.tfrecord"))
    for name, compression, verify in (
        ("a.tfrecord.gz", "gzip", _framing.VERIFY_LENGTHS),
        ("a.tfrecord", None, _framing.VERIFY_ALL),
    ):
        blocks = _walk_all(tmp_path / name, compression, verify=verify)
        assert np.array_equal(np.concatenate([b.offsets for b in blocks]), ref[:, 0])


def test_walk_of_a_part_with_unknown_record_numbers(tmp_path):
    path = tmp_path / "a.tfrecord"  # a local uncompressed file: the walk that needs numbers is not taken
    write_records(str(path), _payloads(MIXED))
    ref = build_index(str(path))
    blocks = _walk_all(path, start_offset=int(ref[100, 0]), first_record=None)
    assert np.array_equal(np.concatenate([b.offsets for b in blocks]), ref[100:, 0])
    assert blocks[0].first_record == 0  # counted from the part's start
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(TruncatedRecordError) as info:
        _walk_all(path, start_offset=int(ref[100, 0]), first_record=None)
    assert info.value.record_number is None and info.value.offset == int(ref[-1, 0])


@pytest.mark.parametrize("victim", [0, 89, 91, 150, 209, 660])
def test_walk_names_a_bad_length_crc(tmp_path, engine, victim):
    path = tmp_path / "a.tfrecord"
    write_records(str(path), _payloads(MIXED))
    ref = build_index(str(path))
    raw = bytearray(path.read_bytes())
    raw[int(ref[victim, 0]) + 2] ^= 0x10
    path.write_bytes(bytes(raw))
    # at offset 0 the reader says the file does not start with a TFRecord header (`_diagnose`)
    reason = "the file does not start with a valid TFRecord header" if victim == 0 else "length CRC"
    with pytest.raises(CorruptRecordError, match=f"record {victim}, byte offset {ref[victim, 0]}: {reason}"):
        _walk_all(path)


@pytest.mark.parametrize("cut", [-3, -20, 5])
def test_walk_names_a_truncated_record(tmp_path, engine, cut):
    path = tmp_path / "a.tfrecord"
    write_records(str(path), _payloads(MIXED))
    ref = build_index(str(path))
    big = int(np.flatnonzero(ref[:, 1] >= _walk.SEEK_FRAME_BYTES)[-1])
    end = len(path.read_bytes()) + cut if cut < 0 else int(ref[big, 0]) + cut
    path.write_bytes(path.read_bytes()[:end])
    with pytest.raises(TruncatedRecordError) as info:
        _walk_all(path)
    assert info.value.record_number == int(np.searchsorted(ref[:, 0], end, side="right")) - 1  # the one cut


def test_frame_digest_is_order_independent_and_sensitive():
    payloads = [b"a", b"bb", b"", b"a"]
    crcs = np.array([_framing.masked_crc32c(p) for p in payloads], np.uint32)
    sizes = np.array([len(p) + 16 for p in payloads], np.int64)
    d = _walk.frame_digest(crcs, sizes)
    assert d[:2] == (4, 4)
    assert d == _walk.frame_digest(crcs[::-1], sizes[::-1])
    assert d != _walk.frame_digest(crcs[:3], sizes[:3])
    assert d != _walk.frame_digest(np.r_[crcs[:3], crcs[1:2]], np.r_[sizes[:3], sizes[1:2]])
    halves = _walk.add_digests(_walk.frame_digest(crcs[:2], sizes[:2]), _walk.frame_digest(crcs[2:], sizes[2:]))
    assert halves == d


def _surveys(paths, compression=None):
    out = []
    for number, p in enumerate(paths):
        with open(p, "rb") as raw:
            out.append(_plan.survey(raw, str(p), compression, number))
    return out


@pytest.mark.parametrize("balance", ["records", "bytes"])
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_contiguous_plans_copied_are_the_inputs_in_order(tmp_path, monkeypatch, balance, compression):
    monkeypatch.setattr(_plan, "CHECKPOINT_RECORDS", 7)  # many checkpoints: pieces start between them
    monkeypatch.setattr(_copy, "COPY_READ_BYTES", 300)
    suffix = ".tfrecord.gz" if compression else ".tfrecord"
    counts = [40, 0, 1, 23]
    all_payloads, paths = [], []
    for k, n in enumerate(counts):
        payloads = _payloads(np.random.default_rng(k).integers(0, 120, n))
        paths.append(tmp_path / f"in-{k}{suffix}")
        write_records(str(paths[-1]), payloads)
        all_payloads += payloads
    surveys = _surveys(paths, compression)
    assert [s.records for s in surveys] == counts
    assert all(
        s.checkpoints == [(0, 0)] + [(r, int(build_index(str(p), compression)[r, 0])) for r, _ in s.checkpoints[1:]]
        for s, p in zip(surveys, paths)
    )
    plans = _plan.plan_contiguous(surveys, 5, balance)
    assert [p.shard for p in plans] == list(range(5))
    out, digest = [], (0, 0, 0)
    for plan in plans:
        dest = tmp_path / f"out-{plan.shard}.tfrecord"
        stats = _copy.copy_pieces(
            plan.pieces, str(dest), str(dest) + ".idx", None, core_fs.open_input, core_fs.atomic_output
        )
        shard = list(RecordReader(str(dest)))
        assert stats["records"] == len(shard) and np.array_equal(load_index(str(dest) + ".idx"), build_index(str(dest)))
        if balance == "records":
            assert stats["records"] == plan.records
        digest = _walk.add_digests(digest, (stats["records"], stats["bytes"], stats["checksum"]))
        out += shard
    assert out == all_payloads
    assert digest == _plan.total_digest(surveys)
    if balance == "records":
        sizes = [p.records for p in plans]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(all_payloads)


def test_a_failed_copy_leaves_nothing(tmp_path):
    path = tmp_path / "in.tfrecord"
    write_records(str(path), _payloads([100] * 50))
    [survey] = _surveys([path])
    raw = bytearray(path.read_bytes())
    raw[116 * 30 + 20] ^= 1  # record 30's payload
    path.write_bytes(bytes(raw))
    [plan] = _plan.plan_contiguous([survey], 1)
    with pytest.raises(CorruptRecordError, match="record 30, byte offset 3480: payload CRC"):
        _copy.copy_pieces(
            plan.pieces,
            str(tmp_path / "o.tfrecord"),
            str(tmp_path / "o.idx"),
            None,
            core_fs.open_input,
            core_fs.atomic_output,
        )
    assert sorted(os.listdir(tmp_path)) == ["in.tfrecord"]


def test_block_extras_are_exact_and_deterministic():
    from pipelines import mix

    sizes = [65536, 100, 0, 7, 65536]
    extras = mix.block_extras(3, 0, sizes, 30000)
    assert extras.sum() == 30000 and np.all(extras <= sizes)
    assert np.array_equal(extras, mix.block_extras(3, 0, sizes, 30000))
    assert not np.array_equal(extras, mix.block_extras(4, 0, sizes, 30000))
    huge = mix.block_extras(1, 0, [6 * 10**8, 6 * 10**8, 5], 1000)  # past numpy's hypergeometric limit
    assert huge.sum() == 1000 and huge[2] <= 5
    assert mix.block_extras(1, 0, [5, 5], 10).tolist() == [5, 5]


def test_keyed_runs_merge_into_key_order(tmp_path):
    payloads = _payloads(np.random.default_rng(0).integers(0, 60, 400))
    path = tmp_path / "in.tfrecord"
    write_records(str(path), payloads)
    framed = path.read_bytes()
    index = build_index(str(path))
    keys = np.random.default_rng(1).integers(0, 2**64 - 1, len(payloads), dtype=np.uint64, endpoint=True)
    shards = np.arange(len(payloads)) % 2
    spiller = _bucketed.RunSpiller(str(tmp_path / "runs"), 0, 0, [3, 3], core_fs.atomic_output, run_bytes=2000)
    for a in range(0, len(payloads), 50):
        sl = slice(a, a + 50)
        spiller.add(framed, index[sl, 0], index[sl, 1], shards[sl], keys[sl])
    tables = spiller.close()
    assert sorted(t.shard for t in tables) == [0, 1]  # one table per shard for all the runs
    assert all(len({s.run for s in t.segments(core_fs.open_input)}) > 4 for t in tables)  # several runs each
    for shard in (0, 1):
        dest = tmp_path / f"s{shard}.tfrecord"
        writer = RecordWriter(str(dest))
        opened: list = []

        def open_input(path, opened=opened):
            opened.append(path)
            return core_fs.open_input(path)

        digest, groups = _bucketed.write_merged([t for t in tables if t.shard == shard], writer, open_input)
        writer.close()
        assert opened == [str(tmp_path / "runs")]  # the spill file is opened once per shard, not per segment
        mine = np.flatnonzero(shards == shard)
        expected = [payloads[i] for i in mine[np.argsort(keys[mine])]]
        assert list(RecordReader(str(dest))) == expected and groups == [len(mine)]


def test_spiller_memory_does_not_grow_with_its_segments(tmp_path):
    """A reader's spiller writes each run's segment rows (48 B per (run, shard, bucket)) to a
    local file as it spills the run, and `close` sorts them there into the spill file's tail:
    its tracemalloc peak, `close` included, is the same for 15 runs and for 45 (100 shards of
    small records, ~100 segments a run; a spiller that held the rows until `close` grew by
    ~95 B a segment here). The tables it returns point at the rows (one small tuple a shard)."""
    import tracemalloc

    shards, n, size = 100, 600, 100
    framed = bytes(n * size)
    starts, sizes = np.arange(n, dtype=np.int64) * size, np.full(n, size, np.int64)

    def spill(runs, traced=True):
        path = str(tmp_path / f"runs-{runs}")
        spiller = _bucketed.RunSpiller(path, 7, 0, [1] * shards, core_fs.atomic_output, run_bytes=n * size)
        rng = np.random.default_rng(runs)
        if traced:
            tracemalloc.start()
        try:
            for _ in range(runs):
                spiller.add(
                    framed, starts, sizes, rng.integers(0, shards, n), rng.integers(0, 2**63, n, dtype=np.uint64)
                )
            tables = spiller.close()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        segments = [s for t in tables for s in t.segments(core_fs.open_input)]
        return peak, tables, segments

    spill(2, traced=False)  # one-time allocations (caches of the modules used) before measuring
    small, _, few = spill(15)
    large, tables, many = spill(45)
    assert len(many) - len(few) > 2900
    assert large - small < 10 * (len(many) - len(few)), (small, large, len(few), len(many))
    assert sorted(t.shard for t in tables) == list(range(shards))
    assert sum(s.records for s in many) == 45 * n and {s.run for s in many} == {(7, r) for r in range(45)}
    assert all(s.shard == t.shard for t in tables for s in t.segments(core_fs.open_input))


def test_shard_writer_memory_does_not_grow_with_the_segments(tmp_path):
    """A shard writer reads each table's rows a block at a time, bucket by bucket, not every
    segment of its shard first: its tracemalloc peak is the same for 10 runs into 40 buckets
    (400 segments) and 30 runs into 120 (3,600), buckets of the same size (a writer that
    gathered the shard's segments first grew by ~200 B a segment here)."""
    import tracemalloc

    from tfrecord_beam._engine._framing import frame_records

    n = 600
    payloads = [bytes([i % 251]) * 80 for i in range(n)]
    framed = frame_records(payloads)
    sizes = np.full(n, 96, np.int64)
    starts = np.cumsum(sizes) - sizes

    class Writer:
        records = 0

        def write_framed(self, data, frame_sizes):
            self.records += len(frame_sizes)

    def write(runs, buckets):
        spiller = _bucketed.RunSpiller(str(tmp_path / f"r{runs}"), 1, 0, [buckets], core_fs.atomic_output, n * 96)
        rng = np.random.default_rng(runs)
        for _ in range(runs):
            keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
            spiller.add(framed, starts, sizes, np.zeros(n, np.int64), keys)
        tables = spiller.close()
        writer = Writer()
        tracemalloc.start()
        try:
            digest, _ = _bucketed.write_merged(tables, writer, core_fs.open_input)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert writer.records == digest[0] == runs * n
        return peak, tables[0].rows

    write(2, 8)  # one-time allocations before measuring
    small, few = write(10, 40)
    large, many = write(30, 120)
    assert many - few > 3000
    assert large - small < 20 * (many - few), (small, large, few, many)


def test_sort_rows_is_a_stable_sort_by_shard_and_bucket_in_blocks(tmp_path):
    """`close`'s sort of the segment rows through local files, a few rows at a time, gives the
    rows in (shard, bucket) order with the runs in order within each pair (as a stable sort)."""
    import tempfile

    rng = np.random.default_rng(5)
    rows = np.zeros((2000, _bucketed.ROW), np.int64)
    rows[:, 0] = rng.integers(0, 7, len(rows))  # shard
    rows[:, 1] = np.arange(len(rows)) // 50  # run: runs in order, as the spiller writes them
    rows[:, 2] = rng.integers(0, 30, len(rows))  # bucket
    rows[:, 3:] = rng.integers(0, 1 << 40, (len(rows), 3))
    with tempfile.TemporaryFile(dir=tmp_path) as source, tempfile.TemporaryFile(dir=tmp_path) as out:
        source.write(rows.astype("<i8").tobytes())
        codes, counts = _bucketed.sort_rows(source, len(rows), out, block_rows=97)
        out.seek(0)
        got = np.frombuffer(out.read(), "<i8").reshape(-1, _bucketed.ROW)
    expected = rows[np.lexsort((rows[:, 1], rows[:, 2], rows[:, 0]))]
    assert np.array_equal(got, expected)
    pairs, times = np.unique((expected[:, 0] << 32) | expected[:, 2], return_counts=True)
    assert codes.tolist() == pairs.tolist() and counts.tolist() == times.tolist()


def _spill_tables(tmp_path, runs=12, shards=3, buckets=5):
    """A spill file's tables: `runs` runs of 200 (unframed) records into `shards` x `buckets`."""
    n, size = 200, 40
    spiller = _bucketed.RunSpiller(str(tmp_path / "runs"), 2, 0, [buckets] * shards, core_fs.atomic_output, n * size)
    rng = np.random.default_rng(3)
    starts, sizes = np.arange(n, dtype=np.int64) * size, np.full(n, size, np.int64)
    for _ in range(runs):
        spiller.add(bytes(n * size), starts, sizes, rng.integers(0, shards, n), rng.integers(0, 2**63, n, np.uint64))
    return spiller.close()


def test_table_rows_are_read_bucket_by_bucket_a_block_at_a_time(tmp_path):
    """A shard writer reads a table's rows a block at a time, bucket by bucket: the same
    segments in the same order whatever the block, each bucket's in run order."""
    tables = _spill_tables(tmp_path)
    for table in tables:
        whole = table.segments(core_fs.open_input)
        assert [(s.bucket, s.run) for s in whole] == sorted((s.bucket, s.run) for s in whole)
        assert len(whole) == table.rows and len({s.run for s in whole}) == 12
        handles = _bucketed.Handles(core_fs.open_input)
        cursor = _bucketed.TableRows(table, handles, block_rows=2)
        got, bucket = [], cursor.head()
        while bucket is not None:
            assert cursor.take(bucket - 1) == []  # a bucket before the head's has none
            got.append(cursor.take(bucket))
            bucket = cursor.head()
        handles.close()
        assert [s for part in got for s in part] == whole
        assert [p[0].bucket for p in got] == sorted({s.bucket for s in whole})  # a bucket's rows in one take
        assert all(len({s.bucket for s in p}) == 1 for p in got)


def test_damaged_or_cut_segment_rows_are_reported(tmp_path):
    tables = _spill_tables(tmp_path)
    path = tmp_path / "runs"
    raw = bytearray(path.read_bytes())
    table = tables[1]
    raw[table.offset + _bucketed.ROW_BYTES * 3] ^= 0x40  # the shard of its fourth row
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError, match="segment rows damaged") as err:
        table.segments(core_fs.open_input)
    assert err.value.path == str(path)
    path.write_bytes(bytes(raw[: table.offset + 10]))
    with pytest.raises(CorruptRecordError, match="spill file ends early"):
        table.segments(core_fs.open_input)


def test_spill_handles_are_reused_and_bounded(tmp_path):
    opened, closed = [], []

    class Handle:
        def __init__(self, path):
            self.path = path
            opened.append(path)

        def close(self):
            closed.append(self.path)

    handles = _bucketed.Handles(Handle, most=2)
    assert handles.get("a") is handles.get("a") and opened == ["a"]
    handles.get("b")
    handles.get("a")  # used last: "b" is the least recently used now
    handles.get("c")
    assert opened == ["a", "b", "c"] and closed == ["b"]
    handles.close()
    assert sorted(closed) == ["a", "b", "c"]


def test_progress_lines(tmp_path):
    from tfrecord_beam.beam import _progress

    lines = []
    with _progress.ProgressReporter("job", lines.append, interval=0.05) as rep:
        assert rep.line() is None
        _progress.write_plan(rep.directory, "write", 1000, 10_000_000, "writing 2 shards")
        counter = _progress.ProgressFile(rep.directory, "write", "00000")
        counter.add(250, 2_500_000)
        counter.flush()
        time.sleep(0.3)
    assert lines and "job: writing 2 shards: 2.50 MB of 10.00 MB (25%), 250 of 1,000 records" in lines[-1]
    assert "MB/s" in lines[-1] and "ETA" in lines[-1]
    assert not os.path.exists(rep.directory)


def test_remote_runners_get_one_line_saying_where_to_watch():
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_beam.beam import _progress

    assert _progress.is_local(PipelineOptions(["--runner=DirectRunner"]))
    assert _progress.is_local(PipelineOptions([]))
    # Prism's default LOOPBACK workers run in the launching process; EXTERNAL/DOCKER ones do not
    assert _progress.is_local(PipelineOptions(["--runner=PrismRunner"]))
    assert _progress.is_local(PipelineOptions(["--runner=PrismRunner", "--environment_type=LOOPBACK"]))
    assert not _progress.is_local(PipelineOptions(["--runner=PrismRunner", "--environment_type=EXTERNAL"]))
    assert not _progress.is_local(PipelineOptions(["--runner=PortableRunner"]))
    lines = []
    with _progress.reporter("job", PipelineOptions(["--runner=DataflowRunner"]), lines.append) as rep:
        assert rep.directory is None
    assert len(lines) == 1 and _progress.NAMESPACE in lines[0]


def test_progress_interval_from_the_environment(monkeypatch):
    from tfrecord_beam.beam import _progress

    monkeypatch.setenv("TFRECORD_BEAM_PROGRESS_INTERVAL", "0.25")
    with _progress.ProgressReporter("job", lambda line: None) as rep:
        assert rep.interval == 0.25
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("TFRECORD_BEAM_PROGRESS_INTERVAL", bad)
        with pytest.raises(ValueError, match="TFRECORD_BEAM_PROGRESS_INTERVAL"):
            _progress.ProgressReporter("job", lambda line: None)
