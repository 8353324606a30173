"""`tfrecord_beam.torch._files` directly: which files and indexes a source has, and what each
kind of piece reads (records by index, a byte range, a stride, a whole file), with every
record's path, offset and number, the skip of `stream`, stale indexes and skipped corrupt
records. The oracle is the plain reader (`read_records`) and the index."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

pytest.importorskip("torch")

from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError  # noqa: E402
from tfrecord_beam.index import build_index, create_index, default_index_path  # noqa: E402
from tfrecord_beam.records import write_records  # noqa: E402
from tfrecord_beam.torch._files import CorruptCounter, FileSet, expand_data_paths, pair_index_paths  # noqa: E402
from tfrecord_beam.torch.sampling import BYTES, RECORDS, STRIDE, WHOLE, Piece  # noqa: E402


def _payloads(tag: int, n: int):
    return [bytes([tag]) * (1 + (i * 29) % 200) + i.to_bytes(2, "little") for i in range(n)]


@pytest.fixture
def files(tmp_path):
    """Two indexed files, one without an index and one gzip file: (paths, their payloads)."""
    paths, payloads = [], []
    for tag, (name, n) in enumerate([("a.tfrecord", 40), ("b.tfrecord", 25), ("c.tfrecord", 10)]):
        path = str(tmp_path / name)
        write_records(path, _payloads(tag, n))
        if name != "c.tfrecord":
            create_index(path)
        paths.append(path)
        payloads.append(_payloads(tag, n))
    gz = str(tmp_path / "d.tfrecord.gz")
    write_records(gz, _payloads(9, 12), compression="gzip")
    paths.append(gz)
    payloads.append(_payloads(9, 12))
    return paths, payloads


def _items(blocks):
    return [item for block in blocks for item in block.items()]


def _expected(path, payloads, numbers):
    offsets = build_index(path)[:, 0].tolist()
    return [(payloads[n], path, offsets[n], n) for n in numbers]


def test_files_indexes_and_infos(files):
    paths, payloads = files
    indexes = [default_index_path(p) for p in paths[:2]] + [None, None]
    fileset = FileSet(paths, indexes)
    assert len(fileset) == 4 and fileset.paths == paths
    assert fileset.compressions == [None, None, None, "gzip"]
    assert [fileset.index(i) is None for i in range(4)] == [False, False, True, True]
    assert np.array_equal(fileset.index(0), build_index(paths[0]))
    infos = fileset.infos()
    assert [i.num_records for i in infos] == [40, 25, None, None]
    assert [i.compressed for i in infos] == [False, False, False, True]
    assert [i.size for i in infos] == [len(open(p, "rb").read()) for p in paths]


def test_each_piece_kind_reads_its_records_with_where_they_came_from(files):
    paths, payloads = files
    fileset = FileSet(paths[:2], [default_index_path(p) for p in paths[:2]])
    assert _items(fileset.read(Piece(0, RECORDS, 7, 31))) == _expected(paths[0], payloads[0], range(7, 31))
    assert _items(fileset.read(Piece(1, RECORDS, 0, 25))) == _expected(paths[1], payloads[1], range(25))
    assert _items(fileset.read(Piece(0, STRIDE, 2, 3))) == _expected(paths[0], payloads[0], range(2, 40, 3))
    assert _items(fileset.read(Piece(1, WHOLE))) == _expected(paths[1], payloads[1], range(25))


def test_byte_ranges_cover_every_record_once(files):
    paths, payloads = files
    fileset = FileSet(paths[2])  # no index: byte ranges, records found by resync
    size = fileset.infos()[0].size
    cuts = [0, 1, size // 3, size // 2 + 5, size]
    got = []
    for start, stop in zip(cuts, cuts[1:]):
        got += [item[0] for item in _items(fileset.read(Piece(0, BYTES, start, stop)))]
    assert got == payloads[2]
    assert [item[0] for item in _items(fileset.read(Piece(0, BYTES, 0, None)))] == payloads[2]


def test_gzip_file_reads_whole(files):
    paths, payloads = files
    fileset = FileSet(paths[3])
    items = _items(fileset.read(Piece(0, WHOLE)))
    assert [i[0] for i in items] == payloads[3] and [i[3] for i in items] == list(range(12))
    assert items == [(p, paths[3], o, n) for n, (p, o) in enumerate(zip(payloads[3], build_index(paths[3])[:, 0]))]


@pytest.mark.parametrize("skip", [0, 1, 5, 24, 25, 26, 40, 64, 65, 100])
def test_stream_skips_exactly_the_first_records(files, skip):
    paths, payloads = files
    fileset = FileSet(paths[:2], [default_index_path(p) for p in paths[:2]])
    pieces = [Piece(1, RECORDS, 0, 25), Piece(0, STRIDE, 0, 1), Piece(1, RECORDS, 20, 25)]
    everything = payloads[1] + payloads[0] + payloads[1][20:]
    assert [item[0] for item in _items(fileset.stream(pieces, skip))] == everything[skip:]


def test_stale_index_is_an_error_naming_the_index(files, tmp_path):
    paths, _ = files
    other = str(tmp_path / "other.tfrecord")
    write_records(other, [b"x"] * 40)
    create_index(other)
    with pytest.raises(IndexMismatchError) as err:
        FileSet(paths[0], default_index_path(other)).index(0)
    assert default_index_path(other) in str(err.value)


def test_index_paths_pair_with_data_files(files, tmp_path):
    paths, _ = files
    assert pair_index_paths(paths[:2], None) == [None, None]
    assert pair_index_paths(paths[:2], [default_index_path(paths[0]), None]) == [default_index_path(paths[0]), None]
    assert pair_index_paths(paths[:2], str(tmp_path / "*.tfindex")) == [default_index_path(p) for p in paths[:2]]
    with pytest.raises(ValueError, match="2 data files but 1 index paths"):
        pair_index_paths(paths[:2], default_index_path(paths[0]))
    assert expand_data_paths(str(tmp_path / "[ab].tfrecord")) == paths[:2]
    with pytest.raises(FileNotFoundError, match="nothing"):
        expand_data_paths(str(tmp_path / "nothing*.tfrecord"))


def test_skip_corrupt_counts_and_goes_on(files):
    paths, payloads = files
    data = bytearray(open(paths[2], "rb").read())
    offsets = build_index(paths[2])[:, 0]
    data[int(offsets[4]) + 14] ^= 0x40  # a payload byte: that record's CRC fails
    with open(paths[2], "wb") as handle:
        handle.write(bytes(data))
    with pytest.raises(CorruptRecordError):
        _items(FileSet(paths[2]).read(Piece(0, WHOLE)))
    fileset = FileSet(paths[2], skip_corrupt=True)
    got = [item[0] for item in _items(fileset.read(Piece(0, WHOLE)))]
    assert got == payloads[2][:4] + payloads[2][5:] and fileset.counter.value == 1


def test_corrupt_counter_sums_and_pickles_as_a_snapshot():
    counter = CorruptCounter()
    counter.add()
    counter.add(4)
    assert counter.value == 5
    copy = pickle.loads(pickle.dumps(counter))  # not a worker start: a snapshot
    assert copy.value == 5
    copy.add()
    assert (copy.value, counter.value) == (6, 5)


# -- issue 22 item 7: damage at the split point between two workers' pieces --------------------
def _damaged_copies(tmp_path, n: int = 40):
    """A clean file of `n` numbered records and every copy with one byte flipped from the start
    of record n/2 - 1 to 8 bytes into record n/2 + 1: (clean path, record offsets, [(damaged
    path, number of the damaged record, flipped byte relative to the split)])."""
    from tfrecord_beam.records import RecordReader

    payloads = [i.to_bytes(4, "little") * 4 for i in range(n)]
    clean = str(tmp_path / "clean.tfrecord")
    write_records(clean, payloads)
    offsets = [o for o, _ in RecordReader(clean).records_with_offsets()]
    data = open(clean, "rb").read()
    split = n // 2
    copies = []
    for k in range(offsets[split - 1], offsets[split + 1] + 8):
        path = str(tmp_path / f"damaged-{k}.tfrecord")
        flipped = bytearray(data)
        flipped[k] ^= 0xFF
        open(path, "wb").write(flipped)
        copies.append((path, max(i for i in range(n) if offsets[i] <= k), k - offsets[split]))
    return clean, offsets, copies


def _numbers_read(files: FileSet, pieces):
    return [int.from_bytes(bytes(p)[:4], "little") for piece in pieces for b in files.read(piece) for p in b.payloads()]


def test_damage_at_a_split_is_skipped_once_and_every_intact_record_arrives_once(tmp_path):
    """Indexed pieces [0, s) and [s, n) (the two workers' shares) with one damaged byte at
    every position around s: the first piece stopped at the damaged header of the second's
    first record, reported it too and then called its index stale."""
    n = 40
    clean, offsets, copies = _damaged_copies(tmp_path, n)
    index = str(tmp_path / "clean.tfrecord.tfindex")
    create_index(clean, index)
    for path, bad, where in copies:
        files = FileSet(path, index, None, skip_corrupt=True)
        got = _numbers_read(files, [Piece(0, RECORDS, 0, n // 2), Piece(0, RECORDS, n // 2, n)])
        assert sorted(got) == [i for i in range(n) if i != bad], where
        assert files.counter.value == 1, where


def test_damage_near_a_byte_range_split_is_skipped_once(tmp_path):
    """The same damage without an index: byte-range pieces cut at every byte around it."""
    n = 40
    _, offsets, copies = _damaged_copies(tmp_path, n)
    split = n // 2
    for path, bad, where in copies[::3]:
        for cut in range(offsets[split - 1] - 2, offsets[split + 1] + 14):
            files = FileSet(path, None, None, skip_corrupt=True)
            got = _numbers_read(files, [Piece(0, BYTES, 0, cut), Piece(0, BYTES, cut, None)])
            assert sorted(got) == [i for i in range(n) if i != bad], (where, cut)
            assert files.counter.value == 1, (where, cut)


def test_damaged_length_at_the_workers_split_with_two_dataloader_workers(tmp_path):
    """The issue's run: 2,000 indexed records, the length of record 1,000 damaged, two workers."""
    from torch.utils.data import DataLoader

    from tfrecord_beam.example import encode_example
    from tfrecord_beam.records import RecordReader
    from tfrecord_beam.torch import TFRecordDataset

    n = 2000
    path, index = str(tmp_path / "f.tfrecord"), str(tmp_path / "f.tfrecord.tfindex")
    write_records(path, [encode_example({"id": i}) for i in range(n)])
    create_index(path, index)
    offset = [o for o, _ in RecordReader(path).records_with_offsets()][n // 2]
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"\xff")
    dataset = TFRecordDataset(path, index, {"id": "int"}, skip_corrupt=True)
    ids = [int(r["id"][0]) for r in DataLoader(dataset, batch_size=None, num_workers=2)]
    assert sorted(ids) == [i for i in range(n) if i != n // 2]
    assert dataset.corrupt_records == 1
