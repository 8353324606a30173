"""Counters summed over a dataset's process and its DataLoader workers.

Shared memory without a cross-process lock (a lock of one multiprocessing context cannot
cross into another: fork vs spawn workers): one slot per process, each written by its process
only (under a thread lock: read-ahead threads count too), summed on reading. Forked and
spawned workers both inherit the memory; any other pickle is a snapshot.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from typing import Dict, List, Optional, Sequence


class SharedCounts:
    """Named counts shared with DataLoader workers (see module)."""

    SLOTS = 257  # the main process, then DataLoader workers 0..255

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)
        self._shared: Optional[object] = multiprocessing.RawArray("q", self.SLOTS * len(self.fields))
        self._local: List[int] = [0] * len(self.fields)
        self._lock: Optional[threading.Lock] = None
        self._lock_pid = -1

    def values(self) -> Dict[str, int]:
        """{field: count} over this process and its workers."""
        width = len(self.fields)
        if self._shared is None:
            return dict(zip(self.fields, self._local))
        shared = self._shared
        return {f: int(sum(shared[i::width])) for i, f in enumerate(self.fields)}  # type: ignore[index]

    def add(self, field: str, n: int = 1) -> None:
        i = self.fields.index(field)
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        assert self._lock is not None
        with self._lock:
            if self._shared is None:
                self._local[i] += n
                return
            import torch.utils.data

            info = torch.utils.data.get_worker_info()
            slot = 0 if info is None else 1 + info.id % (self.SLOTS - 1)
            self._shared[slot * len(self.fields) + i] += n  # type: ignore[index]

    def __getstate__(self):
        try:  # a worker being started: share the counts; any other pickle: a snapshot
            from multiprocessing.context import assert_spawning

            assert_spawning(self)
            return {"fields": self.fields, "_shared": self._shared, "_local": [0] * len(self.fields)}
        except RuntimeError:
            values = self.values()
            return {"fields": self.fields, "_shared": None, "_local": [values[f] for f in self.fields]}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._lock, self._lock_pid = None, -1


class CorruptCounter(SharedCounts):
    """How many corrupt records `skip_corrupt` skipped, counted across DataLoader workers."""

    def __init__(self) -> None:
        super().__init__(("corrupt",))

    @property
    def value(self) -> int:
        return self.values()["corrupt"]

    def add(self, n: int = 1) -> None:  # type: ignore[override]
        super().add("corrupt", n)
