"""Block-gzip files: members of whole records, the member table in the index, seeking, interop."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers.fixtures import DATA

from tfrecord_beam import _engine, blockgzip, index
from tfrecord_beam._blockgzip_write import deflate_member
from tfrecord_beam._engine import _framing
from tfrecord_beam._streams import INFLATERS
from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError
from tfrecord_beam.records import RecordReader, RecordWriter

GOLDEN = DATA / "block_gzip"


def _payloads(n: int = 3000):
    rng = np.random.default_rng(7)
    return [rng.integers(0, 8, size=int(rng.integers(0, 700)), dtype=np.uint8).tobytes() for _ in range(n)]


PAYLOADS = _payloads()


@pytest.fixture(params=["default", "pure"])
def engine(request, monkeypatch):
    """The compiled framing where built, and the pure-Python twins: same results."""
    if request.param == "pure":
        for name in ("scan_frames", "frame_records", "masked_crc32c"):
            monkeypatch.setattr(_engine, name, getattr(_framing, name))
    return request.param


def _write(path, payloads=PAYLOADS, batch=97, **kwargs) -> str:
    with RecordWriter(str(path), index_path=True, **kwargs) as writer:
        for i in range(0, len(payloads), batch):
            writer.write_many(payloads[i : i + batch])
    return str(path)


def _zlib_members(data: bytes) -> bytes:
    """Inflate every gzip member with plain zlib, member after member."""
    out = []
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(d.decompress(data))
        assert d.eof
        data = d.unused_data
    return b"".join(out)


def test_members_hold_whole_records_and_every_gzip_reader_agrees(tmp_path, engine):
    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=8192)
    ix = index.load_index(index.default_index_path(path))
    table = blockgzip.member_table_for(path)
    sizes = np.diff(table.uncompressed)
    assert len(table) > 20 and np.all(sizes[:-1] >= 8192) and np.all(sizes[:-1] < 8192 + 16 + 700)
    assert set(table.uncompressed[:-1].tolist()) <= set(ix[:, 0].tolist())  # members start at records
    assert table.data_size == int(ix[-1].sum()) and table.file_size == os.path.getsize(path)
    framed = _framing.frame_records(PAYLOADS)
    raw = Path(path).read_bytes()
    assert gzip.decompress(raw) == framed == _zlib_members(raw)
    assert list(RecordReader(path)) == PAYLOADS
    rebuilt = blockgzip.scan_members(open(path, "rb"))
    assert np.array_equal(rebuilt.compressed, table.compressed) and np.array_equal(
        rebuilt.uncompressed, table.uncompressed
    )


def test_reader_seeks_to_the_member_instead_of_inflating_from_the_start(tmp_path, engine):
    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    ix = index.load_index(index.default_index_path(path))
    table = blockgzip.member_table_for(path)
    data = bytearray(Path(path).read_bytes())
    for k in range(40, 60):  # damage the deflate body of member 0: only a read from the start meets it
        data[k] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError):
        list(RecordReader(path))
    for r in (int(np.searchsorted(ix[:, 0], table.uncompressed[3])), 1500, len(PAYLOADS) - 1):
        end = int(ix[r + 5, 0]) if r + 5 < len(ix) else None
        got = list(RecordReader(path, start_offset=int(ix[r, 0]), end_offset=end, first_record_number=r))
        assert got == PAYLOADS[r : r + 5]


def test_ranges_cover_the_records_exactly_once(tmp_path, engine):
    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=5000)
    ranges = blockgzip.member_ranges(path)
    got = []
    for start, end, _ in ranges:
        got += list(RecordReader(path, start_offset=start, end_offset=end))
    assert got == PAYLOADS and ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_blocks_by_default_only_with_an_index(tmp_path):
    with_index = _write(tmp_path / "a.tfrecord.gz")
    assert blockgzip.member_table_for(with_index) is not None
    plain = str(tmp_path / "b.tfrecord.gz")
    with RecordWriter(plain) as writer:
        writer.write_many(PAYLOADS)
    assert blockgzip.scan_members(open(plain, "rb")) is None
    one_stream = _write(tmp_path / "c.tfrecord.gz", block_bytes=0)
    assert blockgzip.member_table_for(one_stream) is None
    ix = index.load_index(index.default_index_path(one_stream))  # no table: still reads from an offset
    assert list(RecordReader(one_stream, start_offset=int(ix[2000, 0]))) == PAYLOADS[2000:]
    with pytest.raises(ValueError, match="GZIP"):
        RecordWriter(str(tmp_path / "d.tfrecord.zlib"), block_bytes=1 << 20)


def test_index_readers_skip_the_member_table(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    ipath = index.default_index_path(path)
    text = Path(ipath).read_text()
    assert blockgzip.MARKER in text and text.rstrip().split("\n")[-1].startswith("#end ")
    plain = np.loadtxt(ipath, dtype=np.int64)  # what the `tfrecord` package does
    assert np.array_equal(plain, index.load_index(ipath)) and len(plain) == len(PAYLOADS)
    assert np.array_equal(index.verify_index(ipath, path), plain)


def test_stale_or_cut_table_is_an_error(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    ipath = index.default_index_path(path)
    with RecordWriter(path + ".new", "gzip", block_bytes=4096) as writer:  # other data, old index kept
        writer.write_many(PAYLOADS[:-1])
    os.replace(path + ".new", path)
    with pytest.raises(IndexMismatchError, match="stale"):
        blockgzip.member_table_for(path)
    with pytest.raises(IndexMismatchError):
        list(RecordReader(path, start_offset=100_000))
    text = Path(ipath).read_text()
    Path(ipath).write_text(text[: text.rindex("#end")] + "#m 5\n#end 12 13\n")
    with pytest.raises(IndexMismatchError, match="malformed"):
        blockgzip.load_member_table(ipath)


def test_a_large_record_gets_its_own_member_and_an_empty_file_one_empty_member(tmp_path, engine):
    big = [b"a" * 10, b"b" * 50_000, b"c" * 10]
    path = _write(tmp_path / "big.tfrecord.gz", big, block_bytes=1000)
    assert np.diff(blockgzip.member_table_for(path).uncompressed).tolist() == [16 + 10 + 16 + 50_000, 26]
    assert list(RecordReader(path, start_offset=26 + 50_016)) == big[2:]
    empty = _write(tmp_path / "empty.tfrecord.gz", [])
    assert gzip.decompress(Path(empty).read_bytes()) == b"" and list(RecordReader(empty)) == []
    assert len(blockgzip.member_table_for(empty)) == 1


def test_long_tables_load_from_the_index_tail(tmp_path):
    payloads = [b"%d" % i for i in range(20_000)]
    path = _write(tmp_path / "many.tfrecord.gz", payloads, batch=5000, block_bytes=64)  # ~5000 members
    table = blockgzip.member_table_for(path)
    assert len(table) > 4000 and len(table.format()) > 1 << 16
    assert np.array_equal(table.compressed, blockgzip.scan_members(open(path, "rb")).compressed)


@pytest.mark.parametrize("engine_name", sorted(INFLATERS))
def test_deflate_engines_write_the_same_records(engine_name):
    data = _framing.frame_records(PAYLOADS[:200])
    for level in (-1, 0, 1, 9):
        member = deflate_member(data, level, engine_name)
        assert gzip.decompress(member) == data == _zlib_members(member)


def test_golden_file_reads_as_its_manifest():
    """A committed block-gzip file (TensorFlow read it identically: tests/data/block_gzip/make_golden.py)."""
    manifest = json.loads((GOLDEN / "manifest.json").read_text())
    path = str(GOLDEN / manifest["file"])
    payloads = list(RecordReader(path))
    assert len(payloads) == manifest["records"]
    assert hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in payloads)).hexdigest() == manifest["sha256"]
    assert gzip.decompress(Path(path).read_bytes()) == _framing.frame_records(payloads)
    assert len(blockgzip.member_table_for(path)) == manifest["members"] > 1


def test_a_range_read_inflates_only_its_own_members(tmp_path, engine):
    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    ix = index.load_index(index.default_index_path(path))
    table = blockgzip.member_table_for(path)
    data = bytearray(Path(path).read_bytes())
    data[int(table.compressed[6]) + 60] ^= 0xFF  # damage member 6 only
    Path(path).write_bytes(bytes(data))
    first, mid = (int(np.searchsorted(ix[:, 0], table.uncompressed[k])) for k in (0, 6))
    assert list(RecordReader(path, end_offset=int(ix[mid, 0]))) == PAYLOADS[:mid]
    assert (
        list(RecordReader(path, start_offset=int(ix[mid - 3, 0]), end_offset=int(ix[mid, 0])))
        == PAYLOADS[mid - 3 : mid]
    )
    with pytest.raises(CorruptRecordError):
        list(RecordReader(path, start_offset=int(ix[mid - 3, 0]), end_offset=int(ix[mid + 1, 0])))


def test_create_index_rebuilds_the_member_table_from_the_data(tmp_path):
    path = str(tmp_path / "a.tfrecord.gz")
    with RecordWriter(path, block_bytes=4096) as writer:  # blocks, but no index written
        writer.write_many(PAYLOADS)
    assert blockgzip.layout(path)[0] == "unindexed"
    index.create_index(path)
    state, members, _ = blockgzip.layout(path)
    assert state == "indexed" and members == len(blockgzip.scan_members(open(path, "rb"))) > 10
    plain = str(tmp_path / "b.tfrecord.gz")
    with RecordWriter(plain) as writer:
        writer.write_many(PAYLOADS)
    index.create_index(plain)
    assert blockgzip.layout(plain)[0] == "stream" and "#" not in Path(plain + ".tfindex").read_text()


def test_inspect_says_whether_a_gzip_file_is_block_indexed(tmp_path, capsys):
    from tfrecord_beam import cli

    block = _write(tmp_path / "a.tfrecord.gz", block_bytes=8192)
    stream = _write(tmp_path / "b.tfrecord.gz", block_bytes=0)
    members = len(blockgzip.member_table_for(block))
    assert cli.main(["inspect", block, stream]) == 0
    out = capsys.readouterr().out
    assert f"gzip, block-indexed ({members} members)" in out and "gzip, one stream" in out
    assert cli.main(["inspect", "--json", block]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"][0]["gzip_blocks"] == {"state": "indexed", "members": members, "detail": ""}


def test_planner_ranges_merge_members_and_count_trusts_a_matching_table(tmp_path):
    from tfrecord_beam.inspection import count_records

    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    members = blockgzip.member_ranges(path)
    merged = blockgzip.member_ranges(path, split_bytes=5000)
    assert 1 < len(merged) < len(members) and merged[0][0] == 0 and merged[-1][1] == members[-1][1]
    assert all(a[1] == b[0] and b[2] - a[2] >= 5000 for a, b in zip(merged, merged[1:]))
    assert {m[2] for m in merged} <= {m[2] for m in members}
    got = [p for start, end, _ in merged for p in RecordReader(path, start_offset=start, end_offset=end)]
    assert got == PAYLOADS
    assert count_records(path) == (len(PAYLOADS), "index")
    stream = _write(tmp_path / "b.tfrecord.gz", block_bytes=0)
    assert count_records(stream) == (len(PAYLOADS), "scan") and blockgzip.member_ranges(stream) is None


def test_compat_loader_shards_seek_by_a_non_default_index(tmp_path):
    from tfrecord_beam import compat

    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    moved = str(tmp_path / "elsewhere.idx")
    os.replace(index.default_index_path(path), moved)
    data = bytearray(Path(path).read_bytes())
    data[50] ^= 0xFF  # damage member 0: shard 1 of 2 must not inflate it
    Path(path).write_bytes(bytes(data))
    got = [bytes(r) for r in compat.tfrecord_iterator(path, moved, (1, 2))]
    assert got == PAYLOADS[len(PAYLOADS) // 2 :]
    with pytest.raises(CorruptRecordError):
        list(compat.tfrecord_iterator(path, moved, (0, 2)))


def test_the_tfrecord_package_reads_our_file_and_index(tmp_path):
    """The peer (the `tfrecord` package, in the test extra) shards a block-gzip file by our index unchanged."""
    import tfrecord.reader as peer

    path = _write(tmp_path / "a.tfrecord.gz", block_bytes=4096)
    ipath = index.default_index_path(path)
    got = [bytes(r) for s in range(3) for r in peer.tfrecord_iterator(path, ipath, (s, 3), "gzip")]
    assert got == PAYLOADS
