"""IndexedTFRecordDataset: len(), random access, errors, DataLoader with shuffling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.torch_data import INDEXED, add_one_to_id, ids_of, write_files  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tfrecord_beam.errors import CorruptRecordError, IndexMismatchError  # noqa: E402
from tfrecord_beam.torch import IndexedTFRecordDataset, TFRecordDataset  # noqa: E402


@pytest.fixture()
def files(tmp_path):
    return write_files(tmp_path, INDEXED)


def test_len_and_getitem_match_sequential_reading(files):
    paths, indexes, ids = files
    ds = IndexedTFRecordDataset(paths, indexes)
    assert len(ds) == len(ids)
    sequential = list(TFRecordDataset(paths, indexes))
    for i in (0, 1, 30, 31, 32, len(ids) - 1):
        a, b = ds[i], sequential[i]
        assert a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
    assert int(ds[-1]["id"][0]) == ids[-1]


def test_indexes_built_in_memory_when_absent(files):
    paths, _, ids = files
    ds = IndexedTFRecordDataset(paths, None, ["id"], transform=add_one_to_id)
    assert [int(ds[i]["id"][0]) for i in range(len(ds))] == [i + 1 for i in ids]


def test_out_of_range_and_bad_keys(files):
    paths, indexes, ids = files
    ds = IndexedTFRecordDataset(paths, indexes)
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ids)]
    with pytest.raises(IndexError):
        ds[-len(ids) - 1]
    with pytest.raises(TypeError, match="integers"):
        ds["1"]


def test_compressed_files_are_refused(tmp_path):
    paths, _, _ = write_files(tmp_path, [("z.tfrecord.gz", 3, False)])
    with pytest.raises(ValueError, match=r"z\.tfrecord\.gz.*uncompressed"):
        IndexedTFRecordDataset(paths)


def test_corrupt_record_is_named(files):
    paths, indexes, ids = files
    ds = IndexedTFRecordDataset(paths[0], indexes[0])
    with open(paths[0], "r+b") as handle:  # flip a payload byte of record 3
        offset = int(ds._indexes[0][3, 0]) + 14
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    ds = IndexedTFRecordDataset(paths[0], indexes[0])
    assert int(ds[2]["id"][0]) == 2
    with pytest.raises(CorruptRecordError, match=r"record 3.*CRC"):
        ds[3]


def test_stale_index_is_refused(files):
    paths, indexes, _ = files
    with open(paths[1], "ab") as handle:
        handle.write(b"\0" * 20)
    with pytest.raises(IndexMismatchError, match="stale index"):
        IndexedTFRecordDataset(paths, indexes)


def test_dataloader_shuffled_with_workers_reads_everything_once(files):
    paths, indexes, ids = files
    ds = IndexedTFRecordDataset(paths, indexes, ["id"])
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == len(ds)
    loader = DataLoader(ds, batch_size=5, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(0))
    assert sorted(ids_of(loader)) == ids
