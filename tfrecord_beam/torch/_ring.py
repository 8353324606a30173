"""Carrying batches' `bytes` home from forked DataLoader workers through shared memory.

A DataLoader worker sends each batch to the main process pickled through a pipe: for a batch
of 256 images of 16 KiB that is 4 MB copied into the pickle, through the pipe and out of it
again, about 1 GB/s on two cores, and a dataset that reads nothing is held to that rate. A
`BytesRing` is one shared anonymous memory map that a dataset makes in the main process;
forked workers inherit it (the same pages). A worker's batch then pickles its `bytes`
(a collated list of `bytes`, or a 1-D object array of them) as a slot of the ring plus their
lengths, after copying them into the slot once; the main process cuts them out of the slot
(one copy) as it unpickles the batch and frees the slot. The pages are reused from batch to
batch and epoch to epoch, so the pipe carries a few hundred bytes per batch.

Slots are claimed under a lock made with the ring (inherited too). Each claim bumps the
slot's generation, and the reader checks it before and after copying (a seqlock), so a slot
taken back from a dead worker can never be read as another batch's data: that is an error.
A worker whose batch finds no free slot, or does not fit one, sends it through the pipe as
before. Nothing changes without fork (spawn / forkserver workers get no ring: it does not
pickle) or with `num_workers=0` (the batches never leave the process). The map reserves
address space only: a slot's pages exist once a batch has used it.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import struct
import uuid
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["BytesRing", "make", "serve", "pack", "unpack"]

SLOTS = 16
SLOT_BYTES = 32 << 20  # a batch whose bytes need more goes through the pipe
_SLOT_HEADER = struct.Struct("<BxxxiQ")  # state, owner pid, generation
_HEADER_BYTES = 4096
_FREE, _TAKEN = 0, 1
_LOCK_WAIT = 0.05  # seconds a worker waits for the slot lock before using the pipe

_rings: "weakref.WeakValueDictionary[str, BytesRing]" = weakref.WeakValueDictionary()
_served: Optional["BytesRing"] = None  # the ring this worker process sends through
_served_pid: Optional[int] = None

Packed = Tuple[str, int, int, List[Tuple[str, bool, List[int]]]]  # token, slot, generation, values


class BytesRing:
    """A shared memory map in `SLOTS` slots, made in the process that will read the batches
    (module docstring). Pickled (spawn / forkserver workers), it becomes no ring at all."""

    def __init__(self, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES) -> None:
        self.slots, self.slot_bytes = slots, slot_bytes
        self.token = uuid.uuid4().hex
        self.reader_pid = os.getpid()
        self._map = mmap.mmap(-1, _HEADER_BYTES + slots * slot_bytes, flags=mmap.MAP_SHARED)
        self._lock = multiprocessing.get_context("fork").Lock()
        _rings[self.token] = self

    def __reduce__(self):
        return (_no_ring, ())

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
        None when none is, or when the lock stays taken (a worker killed while holding it
        must not stop the others: they send through the pipe)."""
        if not self._lock.acquire(timeout=_LOCK_WAIT):
            return None
        try:
            for slot in range(self.slots):
                state, owner, generation = _SLOT_HEADER.unpack_from(self._map, slot * _SLOT_HEADER.size)
                if state == _FREE or not _alive(owner):
                    generation += 1
                    _SLOT_HEADER.pack_into(self._map, slot * _SLOT_HEADER.size, _TAKEN, os.getpid(), generation)
                    return slot, generation
            return None
        finally:
            self._lock.release()

    # -- the reader's side -----------------------------------------------------------------
    def take(self, slot: int, generation: int, lengths: Sequence[Sequence[int]]) -> List[List[bytes]]:
        """The `bytes` a worker put in `slot` (claim `generation`), cut into `lengths`; frees it."""
        header = slot * _SLOT_HEADER.size
        if self._generation(header) != generation:
            raise RuntimeError(f"tfrecord_beam: shared-memory slot {slot} was reused before its batch was read")
        ring, at = self._map, _HEADER_BYTES + slot * self.slot_bytes
        out = []
        for seq in lengths:
            part = []
            for n in seq:
                part.append(ring[at : at + n])  # one copy, straight into a new bytes
                at += n
            out.append(part)
        if self._generation(header) != generation:  # taken back (its worker died) while we copied
            raise RuntimeError(f"tfrecord_beam: shared-memory slot {slot} was reused while its batch was read")
        self._map[header] = _FREE
        return out

    def _generation(self, header: int) -> int:
        return _SLOT_HEADER.unpack_from(self._map, header)[2]


def make() -> Optional[BytesRing]:
    """A ring for a dataset made in this process, or None where the platform gives none
    (no fork start method, or no shared memory map of that size)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    try:
        return BytesRing()
    except (OSError, ValueError):
        return None


def _no_ring() -> None:
    return None


def _alive(pid: int) -> bool:
    """Whether process `pid` still exists (this process always does)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(ring: Optional[BytesRing]) -> None:
    """In a DataLoader worker process, send batches' `bytes` through `ring` (a forked worker
    inherits it; None: through the pipe). The main process never serves."""
    global _served, _served_pid
    import torch.utils.data

    if ring is not None and ring.reader_pid != os.getpid() and torch.utils.data.get_worker_info() is not None:
        _served, _served_pid = ring, os.getpid()


def _flat_bytes(value: Any) -> Optional[bool]:
    """Whether `value` is a list (False) or 1-D object array (True) of `bytes` only; else None."""
    if type(value) is list:
        items = value
    elif type(value) is np.ndarray and value.dtype == object and value.ndim == 1:
        items = value.tolist()
    else:
        return None
    if not items or not all(type(b) is bytes for b in items):
        return None
    return type(value) is np.ndarray


def pack(others: Dict[str, Any]) -> Optional[Packed]:
    """In a worker serving a ring: the `bytes` values of `others` (a batch's values that are
    not tensors) put in one slot, as (token, slot, generation, [(key, is array, lengths)]);
    those keys are then left out of `others`. None (and `others` untouched) otherwise."""
    ring = _served
    if ring is None or _served_pid != os.getpid():
        return None
    keys = [(k, kind) for k, v in others.items() if (kind := _flat_bytes(v)) is not None]
    if not keys:
        return None
    values = [others[k].tolist() if is_array else others[k] for k, is_array in keys]
    placed = ring.put(values)
    if placed is None:
        return None
    for k, _ in keys:
        del others[k]
    slot, generation = placed
    return ring.token, slot, generation, [(k, is_array, [len(b) for b in v]) for (k, is_array), v in zip(keys, values)]


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
