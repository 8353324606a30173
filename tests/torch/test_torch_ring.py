"""The shared-memory ring that carries batches' `bytes` home from forked DataLoader workers
(`tfrecord_beam.torch._ring`): the same batches as without it, through it when it can be used,
through the pipe when it cannot, and never a batch read from a slot reused under it."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import struct
import time
from multiprocessing.reduction import ForkingPickler

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


@pytest.fixture(autouse=True)
def small_batches_use_the_ring(monkeypatch):
    """These tests' batches are small: let them through the ring (forked workers inherit this)."""
    monkeypatch.setattr(_ring, "MIN_BYTES", 0)


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
    while taken() < 12 and time.monotonic() < deadline:  # the workers fill slots ahead of the reader
        time.sleep(0.01)
    # at least one batch left in a slot: under load a worker that waits past _LOCK_WAIT for the
    # slot lock sends its batch through the pipe instead (CI beside a benchmark: 8 of 16 taken)
    assert taken() >= 1
    del it  # the workers are shut down with batches still in flight
    owners = {_ring._SLOT_HEADER.unpack_from(ds._ring._map, s * _ring._SLOT_HEADER.size)[1] for s in range(16)}
    while any(_ring._alive(pid) for pid in owners - {0}) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the old workers are gone (reaped)
    before = sum(_generations(ds._ring))
    assert len(_rows(loader)) == len(ids)
    assert sum(_generations(ds._ring)) > before  # the leaked slots were taken back and used
    owners = [_ring._SLOT_HEADER.unpack_from(ds._ring._map, s * _ring._SLOT_HEADER.size)[:2] for s in range(16)]
    assert all(state == _ring._FREE or not _ring._alive(owner) for state, owner in owners)


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


def test_a_reused_or_freed_slot_is_an_error_not_another_batch():
    ring = _ring.BytesRing(slots=1, slot_bytes=64)
    slot, generation = ring.put([[b"abc", b"de"]])
    assert ring.take(slot, generation, [[3, 2]]) == [[b"abc", b"de"]]
    with pytest.raises(RuntimeError, match="reused before its batch was read"):
        ring.take(slot, generation, [[3, 2]])  # the same pickle loaded twice: the slot is free now
    slot2, generation2 = ring.put([[b"xyz"]])
    assert slot2 == slot and generation2 == generation + 1
    with pytest.raises(RuntimeError, match="reused before its batch was read"):
        ring.take(slot, generation, [[3]])
    assert ring.take(slot2, generation2, [[3]]) == [[b"xyz"]]


def _hold_the_lock_and_die(ring) -> None:
    assert ring._acquire()
    os._exit(0)  # killed while holding it, as a worker's feeder thread can be


def test_a_worker_that_dies_holding_the_lock_does_not_stall_the_others(monkeypatch):
    ring = _ring.BytesRing(slots=2, slot_bytes=64)
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_hold_the_lock_and_die, args=(ring,))
    child.start()
    child.join()
    monkeypatch.setattr(_ring, "_LOCK_WAIT", 5.0)
    start = time.monotonic()
    assert ring.put([[b"abc"]]) is not None and time.monotonic() - start < 1.0  # the kernel dropped it


def _claim_write_check(ring, rounds, conflicts) -> None:
    me = struct.pack("<q", os.getpid())
    done, deadline = 0, time.monotonic() + 60
    while done < rounds:  # `rounds` claims, not attempts: under load most attempts find both slots held
        assert time.monotonic() < deadline, f"{done} of {rounds} claims in 60 s"
        claimed = ring._claim()
        if claimed is None:  # both held: give the CPU to a holder (two spinners on two cores starved it)
            time.sleep(0.0001)
            continue
        done += 1
        slot, generation = claimed
        at = _ring._HEADER_BYTES + slot * ring.slot_bytes
        ring._map[at : at + 8] = me
        time.sleep(0.0005)
        if ring._map[at : at + 8] != me:
            with conflicts.get_lock():
                conflicts.value += 1
        ring._free(slot, generation)


def test_claims_are_exclusive_across_processes():
    """Three processes claiming, writing and freeing the same two slots never share one."""
    ring = _ring.BytesRing(slots=2, slot_bytes=64)
    ctx = multiprocessing.get_context("fork")
    conflicts = ctx.Value("i", 0)
    children = [ctx.Process(target=_claim_write_check, args=(ring, 300, conflicts)) for _ in range(3)]
    for c in children:
        c.start()
    for c in children:
        c.join()
    assert all(c.exitcode == 0 for c in children) and conflicts.value == 0
    assert sum(_generations(ring)) == 3 * 300  # every claim, by any of the three, bumped one slot once


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
    monkeypatch.setattr(_ring, "_served", _ring.BytesRing(slots=1, slot_bytes=256))
    batch = Sample(id=torch.arange(2), a=[b"p" * 100, b"q"])
    whole = pickle.dumps(batch)  # pickle, torch.save, deepcopy: the whole batch, never the ring
    assert len(whole) > 100 and pickle.loads(whole)["a"] == [b"p" * 100, b"q"]
    queued = ForkingPickler.dumps(batch)  # a DataLoader queue's pickle: the slot, not the bytes
    assert len(queued) < len(whole) and b"p" * 100 not in bytes(queued)
    again = pickle.loads(queued)
    assert type(again) is Sample and again["a"] == [b"p" * 100, b"q"] and torch.equal(again["id"], torch.arange(2))
    monkeypatch.setattr(_ring, "MIN_BYTES", 1000)  # below it, the bytes stay in the pickle
    assert b"p" * 100 in bytes(ForkingPickler.dumps(batch))


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


def _hold_the_lock(ring, held, release) -> None:
    assert ring._acquire()
    held.set()
    release.wait(30)
    ring._release()


def test_a_lock_held_elsewhere_sends_batches_through_the_pipe(monkeypatch):
    """While another process holds the slot lock, a batch waits at most `_LOCK_WAIT`, then
    goes through the pipe; once it is free, through the ring again."""
    ring = _ring.BytesRing(slots=2, slot_bytes=64)
    monkeypatch.setattr(_ring, "_LOCK_WAIT", 0.05)
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_the_lock, args=(ring, held, release))
    child.start()
    try:
        assert held.wait(30)
        start = time.monotonic()
        assert ring.put([[b"abc"]]) is None and time.monotonic() - start < 1.0
    finally:
        release.set()
        child.join()
    assert ring.put([[b"abc"]]) is not None
