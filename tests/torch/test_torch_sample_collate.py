"""The per-record torch path's collate and worker set-up (issue 14, D1): the DataLoader's
batches of `Sample`s are exactly torch's own `default_collate` of the same records as plain
dicts (keys, types, dtypes, shapes, values), with 0 and 2 workers, on both engines; the
one-call numpy stacking falls back to torch's path (and its errors) for anything else; a
DataLoader worker freezes what it inherited, the main process is left alone."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import zygote  # noqa: E402
from torch.utils.data import DataLoader, default_collate  # noqa: E402
from torch.utils.data._utils.collate import collate, default_collate_fn_map  # noqa: E402

from tfrecord_beam import example  # noqa: E402
from tfrecord_beam.records import write_records  # noqa: E402
from tfrecord_beam.torch import IndexedTFRecordDataset, TFRecordDataset  # noqa: E402
from tfrecord_beam.torch._collate import Sample, _stacked  # noqa: E402

HERE = Path(__file__).resolve().parent  # tests/torch/: this module, imported by the fresh process below
DESC = {"image": "byte", "label": "float", "index": "int", "box": "float", "pair": "int"}


def write_images(path: str, n: int = 45) -> str:
    """D1-like records: an image of bytes (sizes vary), scalar label and index, fixed-size vectors,
    and a bytes feature of two values (a list per record)."""
    rng = np.random.default_rng(5)
    write_records(
        path,
        [
            example.encode_example(
                {
                    "image": (rng.bytes(100 + 37 * i), "byte"),
                    "label": (float(rng.random()), "float"),
                    "index": (i, "int"),
                    "box": (rng.random(4).astype(np.float32), "float"),
                    "pair": ([i, -i], "int"),
                    "names": ([b"a%d" % i, b"b"], "byte"),
                }
            )
            for i in range(n)
        ],
    )
    return path


def same_batch(got, expected) -> None:
    """Equal as torch's collate makes them: same keys in order, same types, tensors of the same
    dtype, shape and values (contiguous, resizable), lists of the same bytes."""
    assert type(got) is Sample and list(got) == list(expected)
    for key, want in expected.items():
        have = got[key]
        assert type(have) is type(want), key
        if isinstance(want, torch.Tensor):
            assert have.dtype == want.dtype and have.shape == want.shape and have.is_contiguous(), key
            assert torch.equal(have, want), key
        else:
            assert have == want and [type(v) for v in have] == [type(v) for v in want], key


def check_loader(path: str, workers: int) -> int:
    """Every DataLoader batch equals default_collate of the dataset's records as plain dicts."""
    records = [dict(s) for s in TFRecordDataset(path, None, DESC)]
    batches = list(DataLoader(TFRecordDataset(path, None, DESC), batch_size=8, num_workers=workers))
    # each worker yields batches of its shard: the batch's records, by index, are what it collates
    chunks = [[records[int(i)] for i in batch["index"][:, 0]] for batch in batches]
    assert sorted(int(c["index"][0]) for chunk in chunks for c in chunk) == list(range(len(records)))
    assert len(batches) == len(chunks)
    for batch, chunk in zip(batches, chunks):
        same_batch(batch, default_collate(chunk))
    return len(batches)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_torchs_collate_of_the_records(tmp_path, workers):
    assert check_loader(write_images(str(tmp_path / "d1.tfrecord")), workers)


def test_pure_engine_in_a_fresh_process(tmp_path):
    """TFRECORD_BEAM_PURE=1 as users set it: the same check, 0 and 2 workers."""
    env = dict(
        os.environ,
        TFRECORD_BEAM_PURE="1",
        PYTHONPATH=os.pathsep.join(
            [str(HERE.parents[1]), str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")]
        ),
    )
    script = (
        "import sys\n"
        "from tfrecord_beam import _engine\n"
        "assert _engine.ENGINE == 'pure', _engine.ENGINE\n"
        "import test_torch_sample_collate as t\n"
        "path = t.write_images(sys.argv[1])\n"
        "print('checked', t.check_loader(path, 0), t.check_loader(path, 2))\n"
    )
    # a clean process (this one has imported the compiled engine): forked from the worker's zygote
    proc = zygote.run([sys.executable, "-c", script, str(tmp_path / "d1.tfrecord")], text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "checked 6 6" in proc.stdout


def _samples(*columns):
    return [Sample(x=v) for v in columns]


def _torchs(values):
    """torch's own collate of one feature (the path before the one-call stacking)."""
    return collate(list(values), collate_fn_map={k: v for k, v in default_collate_fn_map.items() if k is not Sample})


@pytest.mark.parametrize(
    "values",
    [
        [np.array([1.5], np.float32), np.array([2.5], np.float32)],
        [np.array(3, np.int64), np.array(4, np.int64)],  # 0-d arrays
        [np.array([True, False]), np.array([False, False])],
        [np.arange(6, dtype=np.uint8).reshape(2, 3), np.ones((2, 3), np.uint8)],
        [np.array([1 + 2j], np.complex64), np.array([3j], np.complex64)],
        [np.arange(4, dtype=np.float64)[::2], np.array([7.0, 8.0])],  # a strided view
    ],
)
def test_stacking_equals_torchs_collate(values):
    expected = _torchs(values)
    got = _stacked(values)
    assert got is not None and got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected) and got.is_contiguous()
    got.resize_(0)  # a tensor of its own (not numpy memory), as torch.stack makes it
    same_batch(default_collate(_samples(*values)), {"x": expected})


def _outcome(fn, *args):
    """fn's result, or (exception class, message): what both paths must agree on."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)


@pytest.mark.parametrize(
    "values",
    [
        [np.array([1.0], np.float32), np.array([2.0], np.float64)],  # mixed dtypes: torch promotes
        [np.array([1], np.int64), 5],  # not all arrays
        [np.array([1], ">i8"), np.array([2], ">i8")],  # another byte order
        [np.array([b"a"], object), np.array([b"b"], object)],  # several bytes values
        [np.array(["a"]), np.array(["b"])],
        [b"one", b"two"],
    ],
)
def test_other_values_take_torchs_path(values):
    assert _stacked(values) is None
    expected = _outcome(_torchs, values)
    got = _outcome(lambda: default_collate(_samples(*values))["x"])
    assert type(got) is type(expected)
    assert torch.equal(got, expected) if isinstance(expected, torch.Tensor) else got == expected


def test_a_ragged_feature_is_named():
    with pytest.raises(RuntimeError, match="feature 'x' has \\[1, 2\\] values"):
        default_collate(_samples(np.array([1.0]), np.array([1.0, 2.0])))


def test_a_custom_collate_map_is_used():
    """A collate map of the caller's own for numpy arrays is what collates them."""
    custom = dict(default_collate_fn_map)
    custom[np.ndarray] = lambda batch, collate_fn_map=None: ("mine", len(batch))
    assert collate(_samples(np.array([1]), np.array([2])), collate_fn_map=custom)["x"] == ("mine", 2)


def frozen_count(sample):
    """A transform that records, in the process that decodes, how many objects are frozen."""
    sample["frozen"] = np.array([gc.get_freeze_count()], np.int64)
    return sample


def test_workers_freeze_what_they_inherited_and_the_main_process_is_left_alone(tmp_path):
    path = write_images(str(tmp_path / "d1.tfrecord"), 8)
    before = gc.get_freeze_count()
    local = next(iter(DataLoader(TFRecordDataset(path, None, DESC, transform=frozen_count), batch_size=8)))
    assert gc.get_freeze_count() == before and int(local["frozen"][0, 0]) == before
    remote = next(
        iter(DataLoader(TFRecordDataset(path, None, DESC, transform=frozen_count), batch_size=8, num_workers=1))
    )
    assert int(remote["frozen"].min()) > 1000  # the worker froze the heap it was forked with
    indexed = IndexedTFRecordDataset(path, None, DESC, transform=frozen_count)
    assert int(indexed[0]["frozen"][0]) == before
    remote = next(iter(DataLoader(indexed, batch_size=8, num_workers=1)))
    assert int(remote["frozen"].min()) > 1000
    assert gc.get_freeze_count() == before


def test_only_worker_0_looks_for_described_features_no_record_has(tmp_path):
    """Workers are forked anew each epoch: one of them (per rank) reads the sample and warns."""
    import warnings

    from tfrecord_beam._described import FeatureNameWarning

    path = write_images(str(tmp_path / "d1.tfrecord"), 8)
    ds = TFRecordDataset(path, None, {"imgae": "byte"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(ds.iter_worker(1, 2))  # its share of the records, quietly
    with pytest.warns(FeatureNameWarning, match="'imgae' \\(did you mean 'image'\\?\\)"):
        ds.iter_worker(0, 2)


@pytest.mark.parametrize("large", [1, 1 << 30])
def test_batched_bytes_are_the_records_bytes_cut_either_way(tmp_path, monkeypatch, large):
    """Batches cut bytes values out of the column one by one (large values) or from one copy
    (small ones): the same `bytes` as the per-record path, rows of one value or of several."""
    from tfrecord_beam.torch import _collate

    monkeypatch.setattr(_collate, "LARGE_VALUE", large)
    path = str(tmp_path / "big.tfrecord")
    rng = np.random.default_rng(1)
    write_records(
        path,
        [
            example.encode_example(
                {
                    "image": (rng.bytes(3000 + 17 * i), "byte"),
                    "index": (i, "int"),
                    "parts": ([rng.bytes(1500 + i) for _ in range(i % 3)], "byte"),
                }
            )
            for i in range(30)
        ],
    )
    desc = {"image": "byte", "index": "int", "parts": "byte"}
    records = list(TFRecordDataset(path, None, desc))
    batched = list(TFRecordDataset(path, None, desc, batch_size=7))
    images = [v for b in batched for v in b["image"]]
    parts = [v for b in batched for v in b["parts"]]
    assert images == [r["image"] for r in records] and all(type(v) is bytes for v in images)
    for got, record in zip(parts, records):
        want = list(record["parts"])
        assert got == want[0] if len(want) == 1 else list(got) == want, record["index"]
