"""Torch datasets over block-gzip files: sharded inside the file like uncompressed ones, ds[i] by one member."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.torch_data import ids_of, payload  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tfrecord_beam import blockgzip, index  # noqa: E402
from tfrecord_beam.errors import CorruptRecordError  # noqa: E402
from tfrecord_beam.records import RecordWriter  # noqa: E402
from tfrecord_beam.torch import (  # noqa: E402
    IndexedTFRecordDataset,
    TFRecordDataset,
    sampling,  # noqa: E402
)


def _write(path, ids, block_bytes=2048):
    with RecordWriter(str(path), index_path=True, block_bytes=block_bytes) as writer:
        writer.write_many([payload(i) for i in ids])
    return str(path), index.default_index_path(str(path))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bgz")
    a = _write(root / "a.tfrecord.gz", range(0, 300))
    b = _write(root / "b.tfrecord.gz", range(300, 340))
    return [a[0], b[0]], [a[1], b[1]], list(range(340))


def test_block_gzip_files_are_planned_like_uncompressed_ones(files):
    paths, indexes, _ = files
    ds = TFRecordDataset(paths, indexes, ["id"])
    infos = ds.sources[0].infos()
    assert not any(info.compressed for info in infos)  # seekable: cut by record ranges, not whole files
    plan = sampling.plan_shards(infos, 4)
    assert all(p.kind == sampling.RECORDS for shard in plan for p in shard) and len(plan[0]) == 1


@pytest.mark.parametrize("shuffle", [None, 7])
def test_ranks_and_workers_read_each_record_once(files, shuffle):
    paths, indexes, ids = files
    for ranks, workers in [(1, 3), (2, 2), (3, 4)]:
        seen = []
        for rank in range(ranks):
            ds = TFRecordDataset(
                paths, indexes, ["id"], shuffle_queue_size=shuffle, seed=1, rank=rank, world_size=ranks
            )
            for worker in range(workers):
                seen.extend(ids_of(ds.iter_worker(worker, workers)))
        assert Counter(seen) == Counter(ids), (ranks, workers)


def test_a_shard_inflates_only_its_own_members(files, tmp_path):
    paths, _, _ = files
    path, ipath = _write(tmp_path / "c.tfrecord.gz", range(300))
    table = blockgzip.member_table_for(path)
    data = bytearray(open(path, "rb").read())
    for k in range(40, 80):  # damage member 0
        data[k] ^= 0x5A
    open(path, "wb").write(bytes(data))
    ds = TFRecordDataset(path, ipath, ["id"])
    with pytest.raises(CorruptRecordError):
        list(ds.iter_worker(0, 2))
    assert ids_of(ds.iter_worker(1, 2)) == list(range(150, 300)) and len(table) > 10


def test_dataloader_with_two_workers(files):
    paths, indexes, ids = files
    loader = DataLoader(TFRecordDataset(paths, indexes, ["id"], batch_size=16), batch_size=None, num_workers=2)
    assert sorted(ids_of(loader)) == ids


def test_indexed_dataset_reads_one_member_per_item(files):
    paths, indexes, ids = files
    ds = IndexedTFRecordDataset(paths, indexes, ["id"])
    assert len(ds) == len(ids)
    order = np.random.default_rng(0).permutation(len(ids)).tolist()
    assert [int(ds[i]["id"][0]) for i in order] == order
    assert int(ds[-1]["id"][0]) == ids[-1]


def test_indexed_dataset_names_a_damaged_member(tmp_path):
    path, ipath = _write(tmp_path / "d.tfrecord.gz", range(100))
    table = blockgzip.member_table_for(path)
    data = bytearray(open(path, "rb").read())
    data[int(table.compressed[2]) + 60] ^= 0xFF
    open(path, "wb").write(bytes(data))
    ds = IndexedTFRecordDataset(path, ipath, ["id"])
    assert int(ds[0]["id"][0]) == 0
    r = int(np.searchsorted(index.load_index(ipath)[:, 0], table.uncompressed[2]))
    with pytest.raises(CorruptRecordError, match=r"d\.tfrecord\.gz"):
        ds[r]


def test_gzip_without_member_table_is_still_refused(tmp_path):
    path = str(tmp_path / "e.tfrecord.gz")
    with RecordWriter(path, index_path=True, block_bytes=0) as writer:
        writer.write_many([payload(i) for i in range(5)])
    with pytest.raises(ValueError, match="member table"):
        IndexedTFRecordDataset(path, index.default_index_path(path))
    assert ids_of(TFRecordDataset(path, index.default_index_path(path), ["id"])) == list(range(5))
