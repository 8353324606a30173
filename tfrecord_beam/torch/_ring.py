"""Carrying batches' `bytes` home from forked DataLoader workers through shared memory.

A DataLoader worker sends each batch to the main process pickled through a pipe: for a batch
of 256 images of 16 KiB that is 4 MB copied into the pickle, through the pipe and out of it
again, about 1 GB/s on two cores, and a dataset that reads nothing is held to that rate. A
`BytesRing` is one shared memory file (`memfd`) that a dataset maps in the main process;
forked workers inherit the mapping (the same pages). When a worker's batch is pickled for the
DataLoader's queue (`multiprocessing`'s ForkingPickler: `pickle`, `torch.save` and `deepcopy`
still get the whole batch), its `bytes` (a collated list of `bytes`, or a 1-D object array of
them, 64 KiB or more in all) are copied into a slot of the ring once and the pickle carries
the slot and their lengths; the main process cuts them out of the slot (one copy) as it
unpickles the batch and frees the slot. The pages are reused from batch to batch and epoch to
epoch, so the pipe carries a few hundred bytes per batch.

Slots are claimed and freed under a lock on the file (`lockf`: the kernel drops it when its
holder dies, so a worker killed while holding it cannot stall the others) and a thread lock.
Each claim bumps the slot's generation, and the reader checks it before and after copying and
again as it frees the slot, so a slot taken back from a dead worker is never read as another
batch's data: that is an error. A batch that finds no free slot within 50 ms, or does not fit
one, goes through the pipe as before. Nothing changes without fork (spawn / forkserver workers,
the default from Python 3.14: the ring does not pickle; pass `multiprocessing_context="fork"`
to the DataLoader) or with `num_workers=0` (the batches never leave the process). The file
takes memory only for the pages batches have used, and keeps them while the dataset lives: up
to the bytes of the batches in flight at once.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
import time
import uuid
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import fs

__all__ = ["BytesRing", "make", "serve", "pack", "unpack"]

SLOTS = 16
SLOT_BYTES = 32 << 20  # a batch whose bytes need more goes through the pipe
MIN_BYTES = 64 << 10  # smaller batches' bytes go through the pipe (a claim costs more than they do)
_SLOT_HEADER = struct.Struct("<BxxxiQ")  # state, owner pid, generation
_HEADER_BYTES = 4096
_FREE, _TAKEN = 0, 1
_LOCK_WAIT = 0.05  # seconds a process waits for the slot lock before giving up (the pipe)

_rings: "weakref.WeakValueDictionary[str, BytesRing]" = weakref.WeakValueDictionary()
_served: Optional["BytesRing"] = None  # the ring this worker process sends through
_served_pid: Optional[int] = None

Packed = Tuple[str, int, int, List[Tuple[str, bool, List[int]]]]  # token, slot, generation, values


class BytesRing:
    """A shared memory file in `slots` slots, mapped in the process that will read the batches
    (module docstring). Pickled (spawn / forkserver workers), it becomes no ring at all."""

    def __init__(self, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES) -> None:
        if not 0 < slots <= _HEADER_BYTES // _SLOT_HEADER.size:
            raise ValueError(f"slots must be in [1, {_HEADER_BYTES // _SLOT_HEADER.size}], not {slots}")
        self.slots, self.slot_bytes = slots, slot_bytes
        self.token = uuid.uuid4().hex
        self.reader_pid = os.getpid()
        self._fd = os.memfd_create("tfrecord_beam-ring", os.MFD_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)
        os.ftruncate(self._fd, _HEADER_BYTES + slots * slot_bytes)  # sparse: no page until used
        self._map = mmap.mmap(self._fd, _HEADER_BYTES + slots * slot_bytes, flags=mmap.MAP_SHARED)
        self._thread_lock = threading.Lock()
        _rings[self.token] = self

    def __reduce__(self):
        return (_no_ring, ())

    # -- the lock ----------------------------------------------------------------------------
    def _acquire(self) -> bool:
        """Take the slot lock (this process's threads, then the processes'), or False after
        `_LOCK_WAIT` seconds."""
        deadline = time.monotonic() + _LOCK_WAIT
        if not self._thread_lock.acquire(timeout=_LOCK_WAIT):
            return False
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    self._thread_lock.release()
                    return False
                time.sleep(0.0002)

    def _release(self) -> None:
        fcntl.lockf(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def _header(self, slot: int) -> Tuple[int, int, int]:
        return _SLOT_HEADER.unpack_from(self._map, slot * _SLOT_HEADER.size)

    # -- the worker's side -----------------------------------------------------------------
    def put(self, values: Sequence[Sequence[bytes]]) -> Optional[Tuple[int, int]]:
        """Copy every `bytes` of `values` into a free slot, one after the other; (slot,
        generation), or None when none is free or they do not fit one."""
        total = sum(len(b) for seq in values for b in seq)
        if total > self.slot_bytes:
            return None
        claimed = self._claim()
        if claimed is None:
            return None
        slot, generation = claimed
        ring, at = self._map, _HEADER_BYTES + slot * self.slot_bytes
        for seq in values:
            for b in seq:
                ring[at : at + len(b)] = b
                at += len(b)
        return slot, generation

    def _claim(self) -> Optional[Tuple[int, int]]:
        """Take a free slot (or one whose owner has died) for this process; (slot, generation).
        None when none is, or when the lock cannot be had in time."""
        if not self._acquire():
            return None
        try:
            for slot in range(self.slots):
                state, owner, generation = self._header(slot)
                if state == _FREE or not _alive(owner):
                    generation += 1
                    _SLOT_HEADER.pack_into(self._map, slot * _SLOT_HEADER.size, _TAKEN, os.getpid(), generation)
                    return slot, generation
            return None
        finally:
            self._release()

    # -- the reader's side -----------------------------------------------------------------
    def take(self, slot: int, generation: int, lengths: Sequence[Sequence[int]]) -> List[List[bytes]]:
        """The `bytes` a worker put in `slot` (claim `generation`), cut into `lengths`; frees it."""
        if self._header(slot)[0::2] != (_TAKEN, generation):
            raise RuntimeError(f"tfrecord_beam: shared-memory slot {slot} was reused before its batch was read")
        ring, at = self._map, _HEADER_BYTES + slot * self.slot_bytes
        out = []
        for seq in lengths:
            part = []
            for n in seq:
                part.append(ring[at : at + n])  # one copy, straight into a new bytes
                at += n
            out.append(part)
        self._free(slot, generation)
        return out

    def _free(self, slot: int, generation: int) -> None:
        """Free `slot` if it still holds claim `generation` (checked under the lock); raise if
        it was taken back while its batch was read. Without the lock in time it stays taken
        until its owner ends (then the next claim takes it back)."""
        if not self._acquire():
            if self._header(slot)[0::2] != (_TAKEN, generation):
                raise RuntimeError(f"tfrecord_beam: shared-memory slot {slot} was reused while its batch was read")
            return
        try:
            if self._header(slot)[0::2] != (_TAKEN, generation):  # taken back (its worker died) as we copied
                raise RuntimeError(f"tfrecord_beam: shared-memory slot {slot} was reused while its batch was read")
            self._map[slot * _SLOT_HEADER.size] = _FREE
        finally:
            self._release()


def _after_fork_in_child() -> None:
    """A forked child gets fresh thread locks: one held by another thread of the parent at the
    fork would stay held in the child for good (file locks are not inherited at all)."""
    for ring in list(_rings.values()):
        ring._thread_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def make() -> Optional[BytesRing]:
    """A ring for a dataset made in this process, or None where the platform gives none
    (no fork, no memfd or file locks, or no shared memory of that size)."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods() or not hasattr(os, "memfd_create"):
        return None
    try:
        return BytesRing()
    except (OSError, ValueError, ImportError):
        return None


def _no_ring() -> None:
    return None


def _alive(pid: int) -> bool:
    """Whether process `pid` still exists (this process always does)."""
    return pid == os.getpid() or fs.pid_alive(pid)


def serve(ring: Optional[BytesRing]) -> None:
    """In a DataLoader worker process, send batches' `bytes` through `ring` (a forked worker
    inherits it; None: through the pipe). The main process never serves."""
    global _served, _served_pid
    import torch.utils.data

    if ring is not None and ring.reader_pid != os.getpid() and torch.utils.data.get_worker_info() is not None:
        _served, _served_pid = ring, os.getpid()


def _flat_bytes(value: Any) -> Optional[List[bytes]]:
    """The items of `value` when it is a list or 1-D object array of `bytes` only, else None."""
    if type(value) is list:
        items = value
    elif type(value) is np.ndarray and value.dtype == object and value.ndim == 1:
        items = value.tolist()
    else:
        return None
    return items if items and all(type(b) is bytes for b in items) else None


def pack(others: Dict[str, Any]) -> Optional[Packed]:
    """In a worker serving a ring: the `bytes` values of `others` (a batch's values that are
    not tensors) put in one slot, as (token, slot, generation, [(key, is array, lengths)]);
    those keys are then left out of `others`. None (and `others` untouched) otherwise."""
    ring = _served
    if ring is None or _served_pid != os.getpid():
        return None
    found = [(k, type(v) is np.ndarray, items) for k, v in others.items() if (items := _flat_bytes(v)) is not None]
    if not found or sum(len(b) for _, _, items in found for b in items) < MIN_BYTES:
        return None
    placed = ring.put([items for _, _, items in found])
    if placed is None:
        return None
    for k, _, _ in found:
        del others[k]
    slot, generation = placed
    return ring.token, slot, generation, [(k, is_array, [len(b) for b in items]) for k, is_array, items in found]


def unpack(packed: Packed) -> Dict[str, Any]:
    """The reader's side of `pack`: {key: list or object array of the `bytes`}."""
    token, slot, generation, entries = packed
    ring = _rings.get(token)
    if ring is None:
        raise RuntimeError("tfrecord_beam: a batch names a shared-memory ring this process does not have")
    parts = ring.take(slot, generation, [lengths for _, _, lengths in entries])
    out: Dict[str, Any] = {}
    for (key, is_array, _), part in zip(entries, parts):
        if is_array:
            array = np.empty(len(part), dtype=object)
            array[:] = part
            out[key] = array
        else:
            out[key] = part
    return out
