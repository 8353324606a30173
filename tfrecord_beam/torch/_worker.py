"""What a DataLoader worker process does once, before it reads: freeze what it inherited.

A forked worker inherits the parent's whole heap (torch alone is ~170k objects), shared page
by page until either side writes to a page. Python's cyclic collector writes into every
object it visits, so the first full collection in a worker (and the parent's counters often
make the first collection a full one) walks the parent's heap and copies each page holding
an object: measured on D1 (16 KiB images, 2 workers), about half of the workers' CPU time,
~0.6 s per worker per epoch under load, for either dataset (ours or the `tfrecord` package's).

`gc.freeze()` moves every object tracked so far into the collector's permanent generation,
which it never walks: the worker then collects only what it allocates itself, and the
inherited pages stay shared. Objects frozen are still freed by reference counting; only an
inherited garbage cycle outlives the collector in that worker (its twin in the parent is
collected there). The main process and `num_workers=0` are left alone.
"""

from __future__ import annotations

import gc
import os

_settled_pid = None  # the process that has frozen its inherited objects


def settle_worker() -> None:
    """In a DataLoader worker process, freeze the inherited objects (once per process)."""
    global _settled_pid
    pid = os.getpid()
    if _settled_pid == pid:
        return
    import torch.utils.data

    if torch.utils.data.get_worker_info() is None:
        return  # the main process (or num_workers=0): the caller's heap, not ours to freeze
    _settled_pid = pid
    gc.freeze()
