"""A bounded local cache of remote byte ranges, shared by every process of a host.

Entries are files `<cache_dir>/ranges/<hash>.blk`: a 24-byte header (magic, data length,
CRC32C of the data) and the data. They are written under a temporary name
(`.NAME.tmp-PID@HOST-RANDOM`, as `fs.atomic_output` names them) and renamed into place, so a
reader sees a whole entry or none; a killed writer leaves only a temporary file, which no
reader opens and the next eviction removes once its writer is gone. Every entry read is
checked against its header (length and CRC32C); a damaged one is deleted and reads as a miss,
so the caller fetches the range again. So is anything at an entry's path that is not a regular
file (a directory, a symlink, a FIFO: opened without following links and without blocking). The records' own CRCs are checked after that as usual.

`cache_limit` bounds the bytes of all entries (headers included): before an entry is renamed
into place, under an exclusive `flock` on `<cache_dir>/ranges/.lock`, the least recently used
entries (by modification time, which every hit refreshes) are deleted until the new one fits.
An entry larger than the limit is not kept. A reader that has an entry open when it is evicted
still reads it whole (POSIX unlink). What is being written at the moment (a few blocks per
reader) is not counted until it is renamed in.

`put_soon` hands the write to this process's writer thread (at most `_PENDING` entries wait,
so memory stays bounded), so a reader does not wait for the disk before it decodes what it
fetched; `flush` waits until they are written (the read-ahead reader calls it when it closes).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import queue
import shutil
import stat
import struct
import threading
from typing import Any, Iterator, List, Optional, Tuple

import google_crc32c

from . import fs

__all__ = ["RangeCache", "ENTRY_SUFFIX"]

_PENDING = 2  # entries waiting for the writer thread, at most
_writer: Tuple[int, Optional["queue.Queue[Any]"]] = (-1, None)
_writer_lock = threading.Lock()
_MAGIC = b"TFRBRC01"
_HEADER = struct.Struct("<8sQI4x")  # magic, data length, crc32c of the data, padding
ENTRY_SUFFIX = ".blk"


class RangeCache:
    """Byte ranges on local disk, keyed by a string (`RangeSource.cache_key`)."""

    def __init__(self, directory: str, limit: Optional[int] = None) -> None:
        self.directory = os.path.join(os.fspath(directory), "ranges")
        self.limit = None if limit is None else int(limit)
        os.makedirs(self.directory, exist_ok=True)
        self.corrupt = 0  # damaged entries found (and deleted) by this process

    def path_of(self, key: str) -> str:
        name = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        return os.path.join(self.directory, name + ENTRY_SUFFIX)

    def get(self, key: str, length: int) -> Optional[bytes]:
        """The data stored under `key` when a whole, undamaged entry of `length` bytes is there;
        else None (a damaged entry is deleted)."""
        path = self.path_of(key)
        try:
            header, data = _read_entry(path, length)
        except FileNotFoundError:
            return None
        except OSError:  # not a regular file (a directory, a link, a FIFO), or unreadable
            header, data = b"", b""
        if not self._whole(header, data, length):
            self.corrupt += 1
            _remove_entry(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used
        return data

    @staticmethod
    def _whole(header: bytes, data: bytes, length: int) -> bool:
        if len(header) != _HEADER.size:
            return False
        magic, size, crc = _HEADER.unpack(header)
        return magic == _MAGIC and size == length == len(data) and google_crc32c.value(data) == crc

    def put(self, key: str, data: bytes) -> None:
        """Keep `data` under `key` (atomically), evicting the least recently used entries."""
        size = _HEADER.size + len(data)
        if self.limit is not None and size > self.limit:
            return
        final = self.path_of(key)
        temp = os.path.join(self.directory, fs.temp_basename(os.path.basename(final)))
        try:
            with open(temp, "wb") as handle:
                handle.write(_HEADER.pack(_MAGIC, len(data), google_crc32c.value(data)))
                handle.write(data)
            with self._locked():
                if self.limit is not None:
                    self._evict(size, final)
                os.replace(temp, final)
        except OSError:  # a full disk or a vanished directory costs the cache, never the read
            with contextlib.suppress(OSError):
                os.remove(temp)

    def put_soon(self, key: str, data: bytes) -> None:
        """`put` on this process's writer thread (waits while `_PENDING` entries are queued)."""
        _queue().put((self, key, data))

    @staticmethod
    def flush() -> None:
        """Wait until every entry this process queued with `put_soon` is written (or dropped)."""
        pid, pending = _writer
        if pending is not None and pid == os.getpid():
            pending.join()

    def entries(self) -> List[Tuple[int, int, str]]:
        """(last use in ns, bytes, path) of every complete entry."""
        out = []
        with os.scandir(self.directory) as found:
            for entry in found:
                if entry.name.endswith(ENTRY_SUFFIX) and not entry.name.startswith("."):
                    with contextlib.suppress(FileNotFoundError):
                        info = entry.stat()
                        out.append((info.st_mtime_ns, info.st_size, entry.path))
        return out

    def size(self) -> int:
        """Bytes held by complete entries."""
        return sum(size for _, size, _ in self.entries())

    def _evict(self, incoming: int, keep: str) -> None:
        for stale in fs.stale_temp_files(self.directory):  # killed writers' leftovers
            with contextlib.suppress(OSError):
                os.remove(stale)
        entries = sorted(e for e in self.entries() if e[2] != keep)
        total = sum(size for _, size, _ in entries)
        assert self.limit is not None
        for _, size, path in entries:
            if total + incoming <= self.limit:
                break
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            total -= size

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(os.path.join(self.directory, ".lock"), "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read_entry(path: str, length: int) -> Tuple[bytes, bytes]:
    """(header, up to `length` + 1 bytes of data) of the entry file at `path`: opened without
    following a symlink and without blocking on a FIFO, and only read when it is a regular file
    (else OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return handle.read(_HEADER.size), handle.read(length + 1)


def _remove_entry(path: str) -> None:
    """Remove what is at an entry's path, whatever it is (a directory: with its contents), so
    the range is written there again; what cannot be removed costs the cache, never the read."""
    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _queue() -> "queue.Queue[Any]":
    """This process's queue of entries to write, and its writer thread (a forked child starts
    its own: the parent's thread is not there)."""
    global _writer
    with _writer_lock:
        pid, pending = _writer
        if pending is None or pid != os.getpid():
            pending = queue.Queue(_PENDING)
            threading.Thread(target=_write_entries, args=(pending,), name="tfrb-cache-writer", daemon=True).start()
            _writer = (os.getpid(), pending)
        return pending


def _write_entries(pending: "queue.Queue[Any]") -> None:
    while True:
        cache, key, data = pending.get()
        try:
            cache.put(key, data)
        except Exception:  # noqa: BLE001 - a cache that cannot write costs the cache, not the read
            pass
        finally:
            pending.task_done()
