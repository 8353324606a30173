"""The per-record torch path (no `batch_size`): records decoded in runs are exactly the
records decoded one by one, checkpoints stay exact inside a run, errors are unchanged, and
the DataLoader's collated batches are `Sample`s that cross from workers."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.parity import same  # noqa: E402
from helpers.torch_data import MIXED, ids_of, write_files  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from tfrecord_beam import compat, example  # noqa: E402
from tfrecord_beam.errors import DecodeError, FeatureKindError  # noqa: E402
from tfrecord_beam.records import write_records  # noqa: E402
from tfrecord_beam.torch import TFRecordDataset  # noqa: E402
from tfrecord_beam.torch import dataset as dataset_module  # noqa: E402
from tfrecord_beam.torch._collate import Sample  # noqa: E402

# these tests describe features absent from their files on purpose (they must decode as missing);
# the warning that names such features is tested in test_described_features and test_torch_sample_collate
pytestmark = pytest.mark.filterwarnings("ignore::tfrecord_beam._described.FeatureNameWarning")

DESC = {"id": "int", "vals": "float", "name": "byte", "pad": "byte", "tags": "byte", "absent": "float"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("mixed"), MIXED)


@pytest.fixture(autouse=True)
def short_runs(monkeypatch):
    monkeypatch.setattr(dataset_module, "RECORD_RUN", 7)  # runs end inside files and chunks


def _one_by_one(paths, description):
    out = []
    for path in paths:
        for number, offset, payload in compat._records(path, None, None, compat.ReadOptions.dropin()):
            out.append(example.decode_example(payload, description, path=path, offset=offset, record_number=number))
    return out


def test_runs_decode_as_one_by_one(mixed):
    paths, indexes, ids = mixed
    got = list(TFRecordDataset(paths, indexes, DESC))
    assert all(type(s) is Sample for s in got)
    assert same([dict(s) for s in got], _one_by_one(paths, DESC))


@pytest.mark.parametrize("shuffle", [None, 4])
def test_checkpoints_inside_a_run_are_exact(mixed, shuffle):
    paths, indexes, _ = mixed

    def make():
        return TFRecordDataset(paths, indexes, DESC, shuffle_queue_size=shuffle, seed=3)

    full = ids_of(make())
    for cut in (0, 1, 6, 7, 8, 40):
        first = make()
        head = ids_of(itertools.islice(iter(first), cut))
        second = make()
        second.load_state_dict(pickle.loads(pickle.dumps(first.state_dict())))
        assert head + ids_of(second) == full, cut


@pytest.mark.parametrize("bad", ["garbage", "kind"])
def test_a_bad_record_raises_as_before_after_the_good_ones(tmp_path, bad):
    path = str(tmp_path / "b.tfrecord")
    good = [example.encode_example({"id": ([i], "int")}) for i in range(20)]
    wrong = b"\x0a\x03junk" if bad == "garbage" else example.encode_example({"id": ([1.5], "float")})
    write_records(path, good[:11] + [wrong] + good[11:])
    seen = []
    with pytest.raises(DecodeError) as got:
        for s in TFRecordDataset(path, None, {"id": "int"}):
            seen.append(int(s["id"][0]))
    assert seen == list(range(11))
    with pytest.raises(DecodeError) as expected:
        example.decode_example(wrong, {"id": "int"}, path=path, offset=11 * len(good[0]) + 11 * 16, record_number=11)
    assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)
    assert (bad == "kind") == isinstance(got.value, FeatureKindError)


def test_sequence_records_decode_as_the_loader(tmp_path):
    path = str(tmp_path / "s.tfrecord")
    write_records(
        path,
        [
            example.encode_sequence_example(
                {"n": (i, "int")}, {"s": ([[i] * (i % 3)] * (i % 4), "float"), "w": ([[b"a"]], "byte")}
            )
            for i in range(30)
        ],
    )
    got = list(TFRecordDataset(path, None, {"n": "int"}, sequence_description={"s": "float", "w": "byte", "x": "int"}))
    expected = list(compat.sequence_loader(path, None, {"n": "int"}, {"s": "float", "w": "byte", "x": "int"}))
    assert same([(dict(c), dict(s)) for c, s in got], expected)


def test_collated_batches_are_samples_and_cross_from_workers(mixed):
    paths, indexes, ids = mixed
    desc = {"id": "int", "name": "byte"}
    local = list(DataLoader(TFRecordDataset(paths, indexes, desc), batch_size=4))
    remote = list(DataLoader(TFRecordDataset(paths, indexes, desc), batch_size=4, num_workers=1))
    assert all(type(b) is Sample for b in local + remote)
    assert all(isinstance(b["id"], torch.Tensor) for b in remote)
    assert [b["id"].tolist() for b in local] == [b["id"].tolist() for b in remote]
    assert [b["name"] for b in local] == [b["name"] for b in remote]
    assert sorted(ids_of(remote)) == sorted(ids)
    assert np.array_equal(pickle.loads(pickle.dumps(local[0]))["id"].numpy(), local[0]["id"].numpy())
