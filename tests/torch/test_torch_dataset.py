"""TFRecordDataset: decoding, batches, DataLoader workers, shuffling, seeds, errors, spawn."""

from __future__ import annotations

import copy
import pickle
import random
import shutil
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.fixtures import FIXTURES  # noqa: E402
from helpers.torch_data import INDEXED, MIXED, add_one_to_id, ids_of, write_files  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tfrecord_beam import compat  # noqa: E402
from tfrecord_beam.errors import DecodeError, IndexMismatchError  # noqa: E402
from tfrecord_beam.example import encode_example  # noqa: E402
from tfrecord_beam.records import write_records  # noqa: E402
from tfrecord_beam.torch import TFRecordDataset  # noqa: E402

# these tests describe features absent from their files on purpose (they must decode as missing);
# the warning that names such features is tested in test_described_features and test_torch_sample_collate
pytestmark = pytest.mark.filterwarnings("ignore::tfrecord_beam._described.FeatureNameWarning")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("mixed"), MIXED)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("indexed"), INDEXED)


def test_import_paths_match_the_tfrecord_package():
    from tfrecord_beam.torch import MultiTFRecordDataset as M1
    from tfrecord_beam.torch.dataset import MultiTFRecordDataset as M2
    from tfrecord_beam.torch.dataset import TFRecordDataset as T2

    assert T2 is TFRecordDataset and M1 is M2


def test_records_decode_as_the_compat_loader(indexed):
    paths, indexes, ids = indexed
    got = list(TFRecordDataset(paths[0], indexes[0]))
    want = list(compat.tfrecord_loader(paths[0], indexes[0]))
    assert len(got) == len(want) == 31
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key]))


def test_glob_and_list_inputs(tmp_path):
    paths, indexes, ids = write_files(tmp_path, INDEXED)
    by_glob = ids_of(TFRecordDataset(str(tmp_path / "p*.tfrecord"), str(tmp_path / "p*.tfrecord.tfindex"), ["id"]))
    by_list = ids_of(TFRecordDataset(paths, indexes, ["id"]))
    no_index = ids_of(TFRecordDataset(str(tmp_path / "p*.tfrecord"), None, ["id"]))
    assert by_glob == by_list == no_index == ids


def test_batches_are_padded_tensors_with_lengths(indexed):
    paths, indexes, ids = indexed
    ds = TFRecordDataset(
        paths, indexes, {"id": "int", "vals": "float", "name": "byte", "missing": "float"}, batch_size=8
    )
    batches = list(ds)
    assert [len(b["name"]) for b in batches] == [8] * 7 + [3]
    tags = TFRecordDataset(paths, indexes, ["tags"], batch_size=3)
    assert next(iter(tags))["tags"].tolist() == [[], b"t0", [b"t0", b"t1"]]  # 0 or 2+ values: lists
    first = batches[0]
    assert first["id"].dtype == torch.int64 and first["id"].shape == (8, 1)
    assert first["vals"].dtype == torch.float32
    lengths = first["vals_lengths"].tolist()
    assert lengths == [i % 5 for i in range(8)]
    assert first["vals"].shape == (8, max(lengths))
    for row, uid in enumerate(range(8)):
        n = lengths[row]
        assert first["vals"][row, :n].tolist() == [float(uid + k) for k in range(n)]
        assert first["vals"][row, n:].eq(0).all()
    assert isinstance(first["name"], np.ndarray) and first["name"].dtype == object
    assert first["name"].tolist() == [f"r{i}".encode() for i in range(8)]
    assert first["missing"].shape == (8, 0) and first["missing_lengths"].tolist() == [0] * 8
    assert ids_of(batches) == ids


def test_batches_cross_processes_as_tensors(indexed):
    paths, indexes, ids = indexed
    ds = TFRecordDataset(paths, indexes, ["id", "vals", "name"], batch_size=8)
    batch = next(iter(ds))
    clone = pickle.loads(pickle.dumps(batch))
    assert type(clone) is type(batch) and list(clone) == list(batch)
    assert all(torch.equal(clone[k], batch[k]) for k in ("id", "vals", "vals_lengths"))
    assert clone["name"].dtype == object and clone["name"].tolist() == batch["name"].tolist()
    shallow = copy.copy(batch)
    assert type(shallow) is type(batch) and all(shallow[k] is batch[k] for k in batch)
    got = next(iter(DataLoader(ds, batch_size=None, num_workers=1)))
    assert isinstance(got["vals"], torch.Tensor) and torch.equal(got["vals"], batch["vals"])


def test_drop_last_and_batch_transform(indexed):
    paths, indexes, ids = indexed
    ds = TFRecordDataset(paths, indexes, ["id"], batch_size=8, drop_last=True, transform=add_one_to_id)
    batches = list(ds)
    assert len(batches) == 7
    assert ids_of(batches) == [i + 1 for i in ids[:56]]


def test_record_transform(indexed):
    paths, indexes, ids = indexed
    assert ids_of(TFRecordDataset(paths, indexes, ["id"], transform=add_one_to_id)) == [i + 1 for i in ids]


def test_batch_without_description_takes_every_feature(indexed):
    paths, indexes, _ = indexed
    batch = next(iter(TFRecordDataset(paths, indexes, batch_size=4)))
    assert set(batch) == {"id", "id_lengths", "vals", "vals_lengths", "name", "pad", "tags"}


def test_batch_feature_changing_kind_names_the_record(tmp_path):
    path = str(tmp_path / "k.tfrecord")
    write_records(path, [encode_example({"x": ([1], "int")}), encode_example({"x": ([1.5], "float")})])
    with pytest.raises(DecodeError, match=r"k\.tfrecord, record 1.*feature .x. holds float"):
        list(TFRecordDataset(path, None, batch_size=2))


def test_lengths_key_clash_is_an_error(tmp_path):
    path = str(tmp_path / "c.tfrecord")
    write_records(path, [encode_example({"x": ([1], "int"), "x_lengths": ([2], "int")})])
    with pytest.raises(ValueError, match="clashes"):
        list(TFRecordDataset(path, None, batch_size=1))


def test_sequence_examples(tmp_path):
    path = tmp_path / "s.tfrecord"
    shutil.copy(FIXTURES / "sequence_examples.tfrecord", path)
    got = list(TFRecordDataset(str(path), None, description=[], sequence_description=[]))
    want = list(compat.sequence_loader(str(path), None, [], []))
    assert len(got) == len(want) > 0
    assert all(
        isinstance(g, tuple) and g[0].keys() == w[0].keys() and g[1].keys() == w[1].keys() for g, w in zip(got, want)
    )


def test_golden_fixtures_plain_and_compressed(tmp_path):
    import json

    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    for name in ("examples.tfrecord", "examples.tfrecord.gz", "examples.tfrecord.zlib"):
        shutil.copy(FIXTURES / name, tmp_path / name)
        count = manifest["files"][name]["record_count"]
        for workers in (1, 3):
            ds = TFRecordDataset(str(tmp_path / name), None)
            assert sum(len(list(ds.iter_worker(w, workers))) for w in range(workers)) == count


def test_dataloader_workers_and_ranks_read_each_record_once(mixed):
    paths, indexes, ids = mixed
    for ranks, workers, batch in [(1, 2, None), (2, 2, 5)]:
        seen = []
        for rank in range(ranks):
            ds = TFRecordDataset(
                paths, indexes, ["id"], shuffle_queue_size=4, seed=3, batch_size=batch, rank=rank, world_size=ranks
            )
            loader = DataLoader(ds, batch_size=None if batch else 4, num_workers=workers)
            seen.extend(ids_of(loader))
        assert Counter(seen) == Counter(ids), (ranks, workers)


def test_shuffle_is_seeded_by_seed_and_epoch(mixed):
    paths, indexes, ids = mixed

    def order(seed, epoch=None):
        ds = TFRecordDataset(paths, indexes, ["id"], shuffle_queue_size=10, seed=seed)
        if epoch is not None:
            ds.set_epoch(epoch)
        return ids_of(ds)

    first = order(1)
    assert sorted(first) == sorted(ids) and first != ids
    assert order(1) == first
    assert order(1, epoch=0) == first
    assert order(1, epoch=1) != first and sorted(order(1, epoch=1)) == sorted(ids)
    assert order(2) != first


def test_each_worker_shuffles_repeatably(indexed):
    paths, indexes, ids = indexed
    ds = TFRecordDataset(paths, indexes, ["id"], shuffle_queue_size=50, seed=4)
    plain = TFRecordDataset(paths, indexes, ["id"])
    union = []
    for worker in range(2):
        got = ids_of(ds.iter_worker(worker, 2))
        assert got == ids_of(ds.iter_worker(worker, 2))
        assert got != ids_of(plain.iter_worker(worker, 2))
        union.extend(got)
    assert sorted(union) == sorted(ids)  # the shuffled file order is shared by all workers


def test_global_rngs_are_never_touched(mixed):
    paths, indexes, _ = mixed
    np.random.seed(123)
    torch.manual_seed(123)
    random.seed(123)
    np_state, torch_state, py_state = np.random.get_state()[1].copy(), torch.get_rng_state().clone(), random.getstate()
    for batch in (None, 4):
        ds = TFRecordDataset(paths, indexes, ["id"], shuffle_queue_size=8, seed=9, batch_size=batch)
        ds.set_epoch(3)
        for worker in range(2):
            list(ds.iter_worker(worker, 2))
    assert np.array_equal(np.random.get_state()[1], np_state)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == py_state


def test_stale_index_is_reported(tmp_path):
    paths, indexes, ids = write_files(tmp_path, [("s.tfrecord", 10, True)])
    write_records(paths[0], [encode_example({"id": ([i], "int")}) for i in range(12)])
    with pytest.raises(IndexMismatchError, match="stale index"):
        list(TFRecordDataset(paths, indexes, ["id"], rank=0, world_size=2))


def test_bad_arguments_are_clear(tmp_path, indexed):
    paths, indexes, _ = indexed
    with pytest.raises(FileNotFoundError, match="no TFRecord files match"):
        TFRecordDataset(str(tmp_path / "nothing*.tfrecord"), None)
    with pytest.raises(ValueError, match="one index per data file"):
        TFRecordDataset(paths, indexes[:2])
    with pytest.raises(ValueError, match="batch_size"):
        TFRecordDataset(paths, indexes, batch_size=0)
    with pytest.raises(ValueError, match="worker 2"):
        TFRecordDataset(paths, indexes).iter_worker(2, 2)


def test_garbage_payload_names_the_record(tmp_path):
    path = str(tmp_path / "g.tfrecord")
    write_records(path, [encode_example({"id": ([0], "int")}), b"\xff\xff\xff not a protobuf"])
    with pytest.raises(DecodeError, match=r"g\.tfrecord, record 1"):
        list(TFRecordDataset(path, None, batch_size=2))


def test_dataset_pickles(indexed):
    paths, indexes, ids = indexed
    ds = TFRecordDataset(paths, indexes, ["id"], shuffle_queue_size=5, seed=1, batch_size=4, transform=add_one_to_id)
    clone = pickle.loads(pickle.dumps(ds))
    assert ids_of(clone) == ids_of(ds)


def test_spawn_workers(indexed):
    paths, indexes, ids = indexed
    ds = TFRecordDataset(paths, indexes, ["id"], batch_size=6, transform=add_one_to_id)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    assert sorted(ids_of(loader)) == [i + 1 for i in ids]
