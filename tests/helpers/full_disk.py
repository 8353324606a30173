"""A full disk, simulated: `fs.atomic_output` patched so that the temporary files of chosen
targets accept `budget` bytes and then raise OSError(ENOSPC) on every write, as a write(2) on
a full filesystem does. Only the writers' own writes see it; renames and reads do not."""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Any, Callable, Iterator

from tfrecord_beam import fs


class FullFile:
    """A binary file that takes `budget` bytes, then fails every write with ENOSPC."""

    def __init__(self, handle: Any, budget: int) -> None:
        self._handle = handle
        self._left = budget

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if size > self._left:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= size
        return self._handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def fill_disk(monkeypatch: Any, budget: int, which: Callable[[str], bool] = lambda path: True) -> None:
    """From now on, the temporary files of targets for which `which(path)` holds are full
    after `budget` bytes (`monkeypatch`: pytest's, or anything with `setattr`)."""
    real = fs.atomic_output

    @contextlib.contextmanager
    def atomic_output(path: Any) -> Iterator[Any]:
        with real(path) as (handle, commit):
            yield (FullFile(handle, budget) if which(os.fspath(path)) else handle), commit

    monkeypatch.setattr(fs, "atomic_output", atomic_output)
