"""Concatenated gzip members and streams opened at a member: every byte exactly once, and the
offsets (uncompressed and compressed) of the whole stream in positions and errors.

Regression tests for two `InflatingReader` bugs: at a member's end zlib leaves the leftover
input in both `unconsumed_tail` and `unused_data` when the same call also hits its output
limit, and the reader subtracted both (it went before its own input: wrong bytes, then
"incorrect data check" at a negative compressed offset); and a block-gzip range read started
the reader's offsets at 0 instead of the member's. Each case runs with both inflaters, on
seekable and read-only input, for read sizes from 1 byte to 100,000.
"""

from __future__ import annotations

import gzip
import io
import random
import re
from pathlib import Path

import pytest

from tfrecord_beam import _streams, blockgzip, index
from tfrecord_beam._engine import _framing
from tfrecord_beam.errors import CorruptRecordError, CorruptStreamError
from tfrecord_beam.records import RecordReader, RecordWriter

READ_SIZES = [1, 2, 3, 7, 64, 999, 1000, 1001, 4096, 65536, 100000]
INFLATER_NAMES = sorted(_streams.INFLATERS)


class ReadOnly:
    """A file with read() only: no tell, no seek (a pipe, a socket)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._data.read(n)

    def close(self) -> None:
        pass


def _pieces(seed: int, count: int, big: int = 0):
    """Uncompressed member contents of many sizes (0 too), compressible and not; `big` of them
    random and larger than the reader's 1 MiB file reads, so members also cross those."""
    rng = random.Random(seed)
    sizes = [0, 1, 2, 999, 1000, 1001, 3000, 4096] + [rng.randrange(0, 3000) for _ in range(count - 8)]
    out = []
    for i, n in enumerate(sizes):
        if i % 3 == 0:
            out.append(rng.randbytes(n))  # incompressible: input runs out before the output limit
        else:
            out.append(bytes([65 + i % 26]) * n)  # 1000:1, the output limit comes first
    out += [rng.randbytes(700_000) for _ in range(big)]
    return out


def _members(pieces) -> bytes:
    return b"".join(gzip.compress(p, mtime=0) for p in pieces)


def _read_all(reader: _streams.InflatingReader, size: int, start: int = 0) -> bytes:
    """Everything `reader` gives in reads of `size`, checking `position` after each read."""
    out = []
    at = start
    while True:
        data = reader.read(size)
        assert len(data) <= size
        if not data:
            break
        at += len(data)
        assert reader.position == at
        out.append(data)
    assert reader.read(size) == b""  # and it stays at the end
    return b"".join(out)


SMALL = _pieces(1, 60)  # ~60 KB in 60 members


@pytest.mark.parametrize("size", READ_SIZES)
@pytest.mark.parametrize("name", INFLATER_NAMES)
@pytest.mark.parametrize("seekable", [True, False])
def test_many_small_members_inflate_exactly(size, name, seekable):
    # reads of 1-7 bytes meet every member's end at the output limit whatever the members hold:
    # the first 20 (the chosen sizes 0 ... 4096 and 12 drawn) do that at a third of the cost of
    # 60 read a byte at a time (2.4 of the test's 2.9 CPU s went to sizes 1-7)
    pieces = SMALL if size >= 64 else SMALL[:20]
    blob = _members(pieces)
    raw = io.BytesIO(blob) if seekable else ReadOnly(blob)
    reader = _streams.InflatingReader(raw, "gzip", "x", inflater=name)
    assert _read_all(reader, size) == b"".join(pieces)
    assert reader.complete and reader.damage is None


@pytest.mark.parametrize("size", [1000, 4096, 100000])
@pytest.mark.parametrize("name", [None] + INFLATER_NAMES)
@pytest.mark.parametrize("seekable", [True, False])
def test_members_across_file_reads_inflate_exactly(size, name, seekable):
    pieces = _pieces(2, 12, big=3)  # ~2.1 MB of random members, then small ones
    pieces = pieces[-3:] + pieces[:-3]
    blob = _members(pieces)
    raw = io.BytesIO(blob) if seekable else ReadOnly(blob)
    reader = _streams.InflatingReader(raw, "gzip", "x", inflater=name)
    assert _read_all(reader, size) == b"".join(pieces) and reader.complete


@pytest.mark.parametrize("size", [1, 7, 1000, 100000])
@pytest.mark.parametrize("name,seekable", [(n, True) for n in INFLATER_NAMES] + [(None, False)])
def test_garbage_after_many_members_keeps_every_byte_and_names_both_offsets(size, name, seekable):
    blob = _members(SMALL)
    raw = io.BytesIO(blob + b"GARBAGE-GARBAGE") if seekable else ReadOnly(blob + b"GARBAGE-GARBAGE")
    reader = _streams.InflatingReader(raw, "gzip", "x", inflater=name)
    got = []
    with pytest.raises(CorruptStreamError) as info:
        while True:
            data = reader.read(size)
            assert data  # the damage is an error, not an end
            got.append(data)
    total = sum(map(len, SMALL))
    assert b"".join(got) == b"".join(SMALL) and reader.position == total
    assert info.value.offset == total and f"(compressed offset {len(blob)})" in info.value.reason


def _cut_records(payloads, seed: int) -> bytes:
    """The records as gzip members cut at random places (inside headers and payloads too)."""
    stream = _framing.frame_records(payloads)
    rng = random.Random(seed)
    cuts = sorted({0, len(stream), *(rng.randrange(len(stream)) for _ in range(len(payloads) // 2))})
    return _members([stream[a:b] for a, b in zip(cuts, cuts[1:])])


@pytest.mark.parametrize("chunk_size", [64, 1000, 1 << 20])
def test_records_cut_across_many_members_read_back(tmp_path, engine, inflater, chunk_size):
    rng = random.Random(3)
    payloads = [bytes([i % 256]) * rng.randrange(0, 400) for i in range(300)]
    blob = _cut_records(payloads, 4)
    path = tmp_path / "cat.tfrecord.gz"
    path.write_bytes(blob)
    assert list(RecordReader(path, chunk_size=chunk_size)) == payloads
    assert list(RecordReader(ReadOnly(blob), "gzip", chunk_size=chunk_size)) == payloads


# -- streams opened at a member (block-gzip range reads) -------------------------------------------

PAYLOADS = [bytes([i % 251]) * (i * 37 % 300) for i in range(400)]


@pytest.fixture(scope="module")
def block_file(tmp_path_factory):
    """A block-gzip file of small members (records of ~600 bytes per member), its table and index."""
    path = str(tmp_path_factory.mktemp("members") / "b.tfrecord.gz")
    with RecordWriter(path, index_path=True, block_bytes=600) as writer:
        writer.write_many(PAYLOADS)
    table = blockgzip.member_table_for(path)
    assert len(table) > 50
    return path, table, index.load_index(index.default_index_path(path))


def _uncompressed(path: str) -> bytes:
    return gzip.decompress(Path(path).read_bytes())


@pytest.mark.parametrize("name", INFLATER_NAMES)
def test_a_stream_opened_at_a_member_reports_whole_stream_offsets(block_file, monkeypatch, name):
    path, table, _ = block_file
    monkeypatch.setattr(_streams, "DEFAULT_INFLATER", name)
    full = _uncompressed(path)
    u, c = table.uncompressed.tolist(), table.compressed.tolist()
    for m, last in [(0, 0), (3, 3), (7, 20), (len(table) - 5, len(table) - 2), (len(table) - 1, None)]:
        for size in (1, 500, 100000):
            end = None if last is None else u[last + 1]
            with open(path, "rb") as raw:
                stream, at = blockgzip.open_at(raw, table, u[m] + 1 if u[m + 1] > u[m] + 1 else u[m], path, end)
                assert at == u[m] and stream.position == u[m]
                stop = c[last + 1] if last is not None else table.file_size
                assert stream.compressed_size == stop  # the window ends the input
                assert stream.max_remaining() <= (stop - c[m]) * _streams.DEFLATE_MAX_RATIO + (1 << 20)
                got = _read_all(stream, size, start=u[m])
            assert got == full[u[m] : end if end is not None else len(full)] and stream.complete


@pytest.mark.parametrize("name", INFLATER_NAMES)
def test_range_reads_with_ends_cover_every_record_once(block_file, engine, monkeypatch, name):
    path, table, ix = block_file
    monkeypatch.setattr(_streams, "DEFAULT_INFLATER", name)
    offsets = ix[:, 0].tolist()
    starts = set(table.uncompressed[:-1].tolist())
    on_members = [i for i, o in enumerate(offsets) if o in starts]
    inside = [i for i, o in enumerate(offsets) if o not in starts]
    rng = random.Random(5)
    bounds = sorted({0, len(PAYLOADS), *on_members[::7], *rng.sample(inside, 15)})
    got = []
    for a, b in zip(bounds, bounds[1:]):
        end = offsets[b] if b < len(offsets) else None
        part = list(RecordReader(path, start_offset=offsets[a], end_offset=end, chunk_size=rng.choice([64, 4096])))
        assert part == PAYLOADS[a:b], (a, b)
        got += part
    assert got == PAYLOADS


def _damaged(tmp_path, block_file, member: int, at: str) -> str:
    """A copy of the block file (and its index) with member `member` damaged: its gzip header,
    or the CRC in its trailer (then every byte of it inflates, and the check fails)."""
    path, table, _ = block_file
    data = bytearray(Path(path).read_bytes())
    c = table.compressed.tolist()
    data[c[member] if at == "header" else c[member + 1] - 8] ^= 0xFF
    out = tmp_path / "damaged.tfrecord.gz"
    out.write_bytes(bytes(data))
    Path(index.default_index_path(str(out))).write_bytes(Path(index.default_index_path(path)).read_bytes())
    return str(out)


@pytest.mark.parametrize("at", ["header", "crc"])
@pytest.mark.parametrize("with_end", [True, False])
def test_damage_in_a_range_names_whole_stream_offsets(tmp_path, block_file, engine, inflater, at, with_end):
    _, table, ix = block_file
    k = 20
    path = _damaged(tmp_path, block_file, k, at)
    u, c = table.uncompressed.tolist(), table.compressed.tolist()
    offsets = ix[:, 0].tolist()
    first, stop = offsets.index(u[k - 2]), offsets.index(u[k + 3])
    damage = u[k] if at == "header" else u[k + 1]  # a bad CRC fails after the member's last byte
    intact = offsets.index(damage)
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for payload in RecordReader(
            path, start_offset=u[k - 2], end_offset=u[k + 3] if with_end else None, first_record_number=first
        ):
            got.append(payload)
    assert got == PAYLOADS[first:intact] and stop > intact
    assert (info.value.offset, info.value.record_number) == (damage, intact)
    where = int(re.search(r"\(compressed offset (-?\d+)\)", info.value.reason).group(1))
    assert (where == c[k]) if at == "header" else (c[k] < where < c[k + 1])


@pytest.mark.parametrize("at", ["header", "crc"])
@pytest.mark.parametrize("name,seekable", [(n, True) for n in INFLATER_NAMES] + [(None, False)])
@pytest.mark.parametrize("size", [1, 1000, 100000])
def test_a_stream_given_its_start_offsets_counts_from_there(tmp_path, block_file, size, name, seekable, at):
    """A reader over the file's bytes from member k on (a slice: its own offsets start at 0)."""
    _, table, _ = block_file
    k, bad = 10, 14
    path = _damaged(tmp_path, block_file, bad, at)
    u, c = table.uncompressed.tolist(), table.compressed.tolist()
    data = Path(path).read_bytes()[c[k] :]
    reader = _streams.InflatingReader(
        io.BytesIO(data) if seekable else ReadOnly(data),
        "gzip",
        path,
        name,
        uncompressed_offset=u[k],
        compressed_offset=c[k],
    )
    assert reader.position == u[k] and reader.compressed_size == (table.file_size if seekable else None)
    got = []
    with pytest.raises(CorruptStreamError) as info:
        while True:
            data = reader.read(size)
            assert data  # the damage is an error, not an end
            got.append(data)
    damage = u[bad] if at == "header" else u[bad + 1]  # a bad CRC fails after the member's last byte
    assert b"".join(got) == _uncompressed(block_file[0])[u[k] : damage] and reader.position == damage
    where = int(re.search(r"\(compressed offset (-?\d+)\)", info.value.reason).group(1))
    assert info.value.offset == damage and ((where == c[bad]) if at == "header" else (c[bad] < where < c[bad + 1]))
