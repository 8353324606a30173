"""The shared-memory ring that carries batches' `bytes` home from forked DataLoader workers
(`tfrecord_beam.torch._ring`): the same batches as without it, through it when it can be used,
through the pipe when it cannot, and never a batch read from a slot reused under it."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time

import numpy as np
import pytest
import torch
from helpers.torch_data import INDEXED, write_files
from torch.utils.data import DataLoader

from tfrecord_beam.torch import IndexedTFRecordDataset, TFRecordDataset, _ring
from tfrecord_beam.torch._collate import Batch, Sample

DESCRIPTION = {"id": "int", "name": "byte", "pad": "byte"}


def _generations(ring) -> list:
    return [_ring._SLOT_HEADER.unpack_from(ring._map, s * _ring._SLOT_HEADER.size)[2] for s in range(ring.slots)]


def _rows(batches) -> list:
    """(id, name, pad) per record, from batches of Samples (lists) or Batches (object arrays)."""
    out = []
    for b in batches:
        ids = b["id"].reshape(-1).tolist()
        assert all(type(v) is bytes for v in list(b["name"]) + list(b["pad"]))
        out += list(zip(ids, list(b["name"]), list(b["pad"])))
    return out


@pytest.fixture
def files(tmp_path):
    paths, indexes, ids = write_files(tmp_path, INDEXED)
    return paths, indexes, ids


def test_worker_batches_are_the_in_process_ones_and_go_through_the_ring(files):
    paths, indexes, ids = files
    ds = TFRecordDataset(paths, indexes, DESCRIPTION)
    assert ds._ring is not None
    alone = list(DataLoader(ds, batch_size=8))
    before = sum(_generations(ds._ring))
    for _ in range(2):  # two epochs: new workers, the same pages
        got = list(DataLoader(ds, batch_size=8, num_workers=2))
        assert sorted(_rows(got)) == sorted(_rows(alone)) and len(_rows(got)) == len(ids)
        assert all(type(b) is Sample and type(b["name"]) is list for b in got)
    assert sum(_generations(ds._ring)) - before >= len(got)  # every batch of 2 epochs took a slot
    states = [_ring._SLOT_HEADER.unpack_from(ds._ring._map, s * _ring._SLOT_HEADER.size)[0] for s in range(16)]
    assert states == [_ring._FREE] * 16  # each read batch gave its slot back


def test_batched_datasets_send_their_object_arrays_through_it(files):
    paths, indexes, ids = files
    ds = TFRecordDataset(paths, indexes, DESCRIPTION, batch_size=6)
    alone = list(DataLoader(ds, batch_size=None))
    before = sum(_generations(ds._ring))
    got = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(_rows(got)) == sorted(_rows(alone))
    assert all(type(b) is Batch and b["name"].dtype == object and b["name"].ndim == 1 for b in got)
    assert sum(_generations(ds._ring)) > before


def test_map_style_dataset_uses_it_too(files):
    paths, indexes, ids = files
    ds = IndexedTFRecordDataset(paths[0], indexes[0], DESCRIPTION)
    before = sum(_generations(ds._ring))
    got = list(DataLoader(ds, batch_size=4, num_workers=2))
    assert _rows(got) == _rows(DataLoader(ds, batch_size=4))
    assert sum(_generations(ds._ring)) > before


def test_an_abandoned_epoch_leaves_no_slot_lost(files):
    """Breaking out of an epoch drops batches the workers had put in slots; the next epoch's
    workers take those slots back (their owners are gone) and read every record."""
    paths, indexes, ids = files
    ds = TFRecordDataset(paths, indexes, DESCRIPTION)
    loader = DataLoader(ds, batch_size=2, num_workers=2, prefetch_factor=8)

    def taken() -> int:
        states = [_ring._SLOT_HEADER.unpack_from(ds._ring._map, s * _ring._SLOT_HEADER.size)[0] for s in range(16)]
        return states.count(_ring._TAKEN)

    it = iter(loader)
    next(it)
    deadline = time.monotonic() + 30
    while taken() == 0 and time.monotonic() < deadline:  # the workers fill slots ahead of the reader
        time.sleep(0.01)
    assert taken() >= 1
    del it  # the workers are shut down with batches still in flight
    assert len(_rows(loader)) == len(ids)


def _take_every_slot(ring, done) -> None:
    claims = [ring._claim() for _ in range(ring.slots + 1)]
    if claims[-1] is None and None not in claims[:-1]:  # every slot, then none left for itself
        done.set()


def test_slots_of_a_dead_worker_are_taken_back_with_a_new_generation():
    ring = _ring.BytesRing(slots=3, slot_bytes=64)
    ctx = multiprocessing.get_context("fork")
    done = ctx.Event()
    child = ctx.Process(target=_take_every_slot, args=(ring, done))
    child.start()
    child.join()
    assert done.is_set() and _generations(ring) == [1, 1, 1]
    slot, generation = ring._claim()  # the owner is dead: its slot is free again
    assert generation == 2 and _generations(ring)[slot] == 2


def test_a_reused_slot_is_an_error_not_another_batch():
    ring = _ring.BytesRing(slots=1, slot_bytes=64)
    slot, generation = ring.put([[b"abc", b"de"]])
    assert ring.take(slot, generation, [[3, 2]]) == [[b"abc", b"de"]]
    slot2, generation2 = ring.put([[b"xyz"]])
    assert slot2 == slot and generation2 == generation + 1
    with pytest.raises(RuntimeError, match="reused before its batch was read"):
        ring.take(slot, generation, [[3]])


def test_full_or_too_small_rings_and_other_processes_send_through_the_pipe(monkeypatch):
    ring = _ring.BytesRing(slots=1, slot_bytes=8)
    others = {"a": [b"1234", b"56"], "n": [1, 2]}
    assert _ring.pack(dict(others)) is None  # not a served worker (the main process): the pipe
    monkeypatch.setattr(_ring, "_served", ring)
    monkeypatch.setattr(_ring, "_served_pid", os.getpid())
    first = dict(others)
    packed = _ring.pack(first)
    assert packed is not None and first == {"n": [1, 2]}  # the bytes left the pickle
    assert _ring.unpack(packed) == {"a": [b"1234", b"56"]}
    held = _ring.pack({"a": [b"x"]})  # the one slot is in use now
    assert held is not None and _ring.pack({"a": [b"y"]}) is None
    _ring.unpack(held)
    assert _ring.pack({"a": [b"123456789"]}) is None  # more than a slot holds
    assert _ring.pack({"a": [b"1", 2]}) is None and _ring.pack({"a": []}) is None  # not only bytes
    batch = Sample(id=torch.arange(2), a=[b"p", b"q"])
    again = pickle.loads(pickle.dumps(batch))
    assert type(again) is Sample and again["a"] == [b"p", b"q"] and torch.equal(again["id"], torch.arange(2))


def test_it_does_not_pickle_so_spawned_workers_use_the_pipe(files):
    paths, indexes, ids = files
    ds = TFRecordDataset(paths, indexes, DESCRIPTION)
    assert pickle.loads(pickle.dumps(ds._ring)) is None
    assert pickle.loads(pickle.dumps(ds))._ring is None
    got = list(DataLoader(ds, batch_size=8, num_workers=1, multiprocessing_context="spawn"))
    assert sorted(r[0] for r in _rows(got)) == sorted(ids)


def test_object_arrays_come_back_as_object_arrays():
    ring = _ring.BytesRing(slots=1, slot_bytes=64)
    array = np.empty(2, dtype=object)
    array[:] = [b"ab", b"cd"]
    others = {"x": array}
    try:
        _ring._served, _ring._served_pid = ring, os.getpid()
        packed = _ring.pack(others)
    finally:
        _ring._served, _ring._served_pid = None, None
    back = _ring.unpack(packed)["x"]
    assert type(back) is np.ndarray and back.dtype == object and back.tolist() == [b"ab", b"cd"]


def test_a_lock_left_taken_sends_batches_through_the_pipe(monkeypatch):
    """A worker killed while it held the slot lock must not stall the others."""
    ring = _ring.BytesRing(slots=2, slot_bytes=64)
    monkeypatch.setattr(_ring, "_LOCK_WAIT", 0.01)
    assert ring._lock.acquire()
    try:
        assert ring.put([[b"abc"]]) is None
    finally:
        ring._lock.release()
    assert ring.put([[b"abc"]]) is not None
