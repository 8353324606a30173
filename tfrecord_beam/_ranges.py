"""Byte ranges of one remote object: one request per range, retried with backoff, each attempt
under a timeout, counted, and (with a `RangeCache`) kept on local disk.

An object is read in blocks of a fixed grid (`RemoteOptions.readahead_bytes`: block g is bytes
[g*B, (g+1)*B) of the object), so every worker, rank and epoch asks for the same ranges and a
cache serves them all whatever the shard plan of the epoch. `ReadAheadFile` (`_readahead`) turns
blocks into a file object the record readers read.

A failed attempt (a 5xx answer, a cut connection, a short body, no answer within `timeout`
seconds) is retried after `backoff` seconds, doubled each time (capped, jittered), up to
`attempts` attempts in all; then `RemoteReadError` names the object and the byte range. A
missing object or a refused access is not retried. The object-store client's own retries are
turned off for these reads (`fs.ranged_filesystem`: pyarrow's S3 makes one attempt; its GCS
client, which retries for 15 minutes by default, retries for less than its first backoff), so
each request counted here is one request on the wire (but one: a gs:// download cut mid-body
is resumed once by the client inside the attempt, a second GET of the range) and a failing
range costs at most `attempts` x `timeout` plus the backoffs. (After a failed attempt pyarrow's GCS client still
sleeps its first backoff, 1-2 s, before it gives up: that wait is part of the attempt.)
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _retry, fs
from ._bounded import with_timeout
from .errors import RemoteReadError

__all__ = ["BlockMemory", "RemoteOptions", "RemoteStats", "RangeSource", "STAT_FIELDS"]

MiB = 1 << 20
STAT_FIELDS = ("requests", "bytes", "cache_hits", "cache_misses", "retries")


@dataclass(frozen=True)
class RemoteOptions:
    """How remote objects are read (the datasets' keyword arguments of the same names).

    readahead_bytes: size of one request, and the grid blocks are cut on.
    readahead_requests: requests in flight per reader (memory: about (this + 2) blocks).
    cache_dir, cache_limit: a local cache of blocks (`_rangecache`); None: no cache.
    timeout: seconds one attempt may take; attempts: attempts per range; backoff: the first
    wait between attempts, in seconds.
    """

    readahead_bytes: int = 16 * MiB
    readahead_requests: int = 3
    cache_dir: Optional[str] = None
    cache_limit: Optional[int] = None
    timeout: float = 60.0
    attempts: int = 5
    backoff: float = 0.25

    def __post_init__(self) -> None:
        if int(self.readahead_bytes) < 4096:
            raise ValueError(f"readahead_bytes must be >= 4096, got {self.readahead_bytes}")
        if int(self.readahead_requests) < 1:
            raise ValueError(f"readahead_requests must be >= 1, got {self.readahead_requests}")
        if self.cache_limit is not None and int(self.cache_limit) < 0:
            raise ValueError(f"cache_limit must be >= 0 bytes or None, got {self.cache_limit}")
        if self.cache_limit is not None and self.cache_dir is None:
            raise ValueError("cache_limit needs cache_dir (where the cache lives)")
        if int(self.attempts) < 1 or float(self.timeout) <= 0 or float(self.backoff) < 0:
            raise ValueError(
                f"attempts must be >= 1, timeout > 0 and backoff >= 0 (got {self.attempts}, "
                f"{self.timeout}, {self.backoff})"
            )


class RemoteStats:
    """Counts of this process's remote reads (`STAT_FIELDS`); thread-safe. The torch datasets
    pass a counter shared with their DataLoader workers instead (anything with `add`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Dict[str, int] = dict.fromkeys(STAT_FIELDS, 0)

    def add(self, field: str, n: int = 1) -> None:
        with self._lock:
            self.counts[field] += n

    def snapshot(self) -> Dict[str, int]:
        with self._lock:
            return dict(self.counts)


class BlockMemory:
    """The last `capacity` blocks read by a process, kept in memory for readers that come back
    to them: an elastic order's chunks each read the shuffle window they fall in, so without
    a `cache_dir` every block was fetched again by each chunk (4-10 requests per block).
    Least recently used out; thread-safe; a forked child starts empty."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._blocks: "collections.OrderedDict[str, bytes]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _here(self) -> None:
        if self._pid != os.getpid():  # the parent's blocks and lock are not this process's
            self._blocks, self._lock, self._pid = collections.OrderedDict(), threading.Lock(), os.getpid()

    def get(self, key: str) -> Optional[bytes]:
        self._here()
        with self._lock:
            data = self._blocks.get(key)
            if data is not None:
                self._blocks.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        self._here()
        if self.capacity <= 0:
            return
        with self._lock:
            self._blocks[key] = data
            self._blocks.move_to_end(key)
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)

    def __getstate__(self) -> Dict[str, Any]:
        return {"capacity": self.capacity}  # a spawned worker starts empty

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["capacity"])  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# The object store client, its own retries off


def _data_filesystem(path: str) -> Tuple[Any, str]:
    """(pyarrow filesystem, path inside it) for reading ranges of `path`: `fs.ranged_filesystem`
    (the one place clients are made and cached; for S3 and GCS, one attempt per request: the
    retries are ours)."""
    return fs.ranged_filesystem(path)


# ---------------------------------------------------------------------------------------------


class ObjectChangedError(OSError):
    """The object is not the one that was listed (another size, ETag or modification time): it
    was replaced, and its bytes would be read against the old size, index and cached blocks
    (not retried)."""


def _fatal(exc: BaseException, path: str) -> bool:
    """Errors a retry cannot mend: a replaced object, a missing one, a refused access (by type,
    errno or HTTP status: `_retry.is_permanent`, never by a message's words)."""
    return isinstance(exc, ObjectChangedError) or _retry.is_permanent(exc, path)


class RangeSource:
    """One remote object of known size (and version, when the store tells it), read by range.

    `version` (`fs.FileStat.version_key`: the object's modification time and ETag) is part of
    the cache key, so a replaced object is never served from its predecessor's blocks; every
    file opened of it is checked to be that object (its size, and its ETag where the listing
    had one: `tag`), so a replacement found mid-read fails naming the object. Handles are opened as needed, one per
    concurrent request (on GCS one per object, shared: `GCS_OPEN_FILES`), and dropped after a
    failure; after a fork they are opened afresh.
    """

    def __init__(
        self,
        path: str,
        size: int,
        version: Any,
        options: RemoteOptions,
        stats: Any,
        cache: Any = None,
        memory: Optional[BlockMemory] = None,
        tag: Optional[str] = None,
    ) -> None:
        self.path, self.size, self.version, self.tag = path, int(size), version, tag
        self.memory = memory
        self.options = options
        self.block = int(options.readahead_bytes)
        self.stats = stats
        self.cache = cache
        self._idle: List[Any] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._on_gcs: Optional[bool] = None  # the object's store is GCS: its files are shared (`_take`)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_idle"], state["_lock"] = [], None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock, self._pid = threading.Lock(), os.getpid()

    @property
    def blocks(self) -> int:
        return -(-self.size // self.block)

    def block_range(self, g: int) -> Tuple[int, int]:
        """(offset, length) of grid block `g`."""
        offset = g * self.block
        return offset, max(0, min(self.block, self.size - offset))

    def cache_key(self, offset: int, length: int) -> str:
        return f"{self.path}|{self.size}|{self.version}|{offset}|{length}"

    def read_block(self, g: int, write_behind: bool = False) -> bytes:
        """Block `g`: from `memory` or the cache when they hold it, else one request (retried),
        then kept in both (`write_behind`: the cache's copy by its writer thread; call `flush`
        later)."""
        offset, length = self.block_range(g)
        if length <= 0:
            return b""
        key = self.cache_key(offset, length)
        if self.memory is not None:
            data = self.memory.get(key)
            if data is not None:
                return data
            data = self._read_block(key, offset, length, write_behind)
            self.memory.put(key, data)
            return data
        return self._read_block(key, offset, length, write_behind)

    def _read_block(self, key: str, offset: int, length: int, write_behind: bool) -> bytes:
        if self.cache is not None:
            data = self.cache.get(key, length)
            if data is not None:
                self.stats.add("cache_hits")
                return data
            self.stats.add("cache_misses")
        data = self.fetch(offset, length)
        if self.cache is not None:
            (self.cache.put_soon if write_behind else self.cache.put)(key, data)
        return data

    def flush(self) -> None:
        """Wait for the cache entries written behind (`read_block(write_behind=True)`)."""
        if self.cache is not None:
            self.cache.flush()

    # -- requests ------------------------------------------------------------------------------
    def fetch(self, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) by one request, retried as the module says."""
        options = self.options
        _data_filesystem(self.path)  # the client is made once, outside the timed attempts
        started = time.monotonic()
        wait = float(options.backoff)
        last: BaseException = OSError("no attempt made")
        for attempt in range(int(options.attempts)):
            if attempt:
                self.stats.add("retries")
                time.sleep(wait * (0.5 + random.random()))
                wait = min(wait * 2, 8.0)
            self.stats.add("requests")
            try:
                data = with_timeout(lambda: self._attempt(offset, length), float(options.timeout))
            except TimeoutError:
                last = TimeoutError(f"no answer within {options.timeout:g} s")
                continue
            except Exception as exc:  # noqa: BLE001 - a transport error of any client
                if _fatal(exc, self.path):
                    cause = self._replaced_or(exc)
                    raise _failure(self.path, offset, length, cause, attempt + 1, started) from exc
                last = exc
                continue
            self.stats.add("bytes", len(data))
            return data
        raise _failure(self.path, offset, length, last, int(options.attempts), started)

    def _attempt(self, offset: int, length: int) -> bytes:
        handle, shared, reused = self._take()
        try:
            data = handle.read_at(length, offset) if hasattr(handle, "read_at") else _seek_read(handle, offset, length)
            if len(data) != length:
                raise OSError(
                    f"short read: {len(data)} of {length} bytes (the object changed, or the connection was cut)"
                )
            if reused:
                self._still_listed()
        except BaseException:
            if shared:  # the other readers of it may still be using it: it closes after them
                _GCS_FILES.drop(self._shared_key(), handle)
            else:
                _close(handle)
            raise
        if not shared:
            self._give(handle)
        return bytes(data) if not isinstance(data, bytes) else data

    def _replaced_or(self, exc: BaseException) -> BaseException:
        """`exc` (a read no retry mends), or an ObjectChangedError saying the object was replaced
        when it is there under another identity: a GCS read of the generation that was opened
        fails with NOT_FOUND once the object is replaced, which told the user the object was
        missing. One stat, made only on such a failure."""
        if not isinstance(exc, FileNotFoundError):
            return exc
        try:
            now = fs.file_stat(self.path)
        except Exception:  # noqa: BLE001 - missing now too (or unreachable): the read's own error
            return exc
        then = str(self.version).split("|", 1)[0]
        if now.size == self.size and str(now.version) == then and (self.tag is None or now.tag == self.tag):
            return exc  # the same object: the read's own error
        was = f"{self.size} bytes, modified {then} ns" + (f", ETag {self.tag}" if self.tag else "")
        return ObjectChangedError(
            f"{fs.split_query(self.path)[0]} was replaced while it was being read (size/updated changed: "
            f"{now.describe()} now, {was} when listed); read it again from the start (the store answered: "
            f"{' '.join(str(exc).split())[:120]})"
        )

    def _shared_key(self) -> Tuple[str, int, Any]:
        return (self.path, self.size, self.version)

    def _take(self) -> Tuple[Any, bool, bool]:
        """(an open file of the object, whether it is shared: a GCS file, see `GCS_OPEN_FILES`,
        whether it was used before: its identity was checked at an earlier request's open).
        Which kind the object's store is is learnt once; the store is asked for only when a
        file is opened, not on every request."""
        if self._on_gcs is None:
            self._on_gcs = isinstance(_data_filesystem(self.path)[0], _gcs_class())
        if self._on_gcs:
            return _GCS_FILES.get(self._shared_key(), self._open), True, False
        with self._lock_here():
            if self._idle:
                return self._idle.pop(), False, True
        return self._open(), False, False

    def _still_listed(self) -> None:
        """After a ranged read on a reused S3 handle: one HEAD (a new handle's open, checked
        as `_open` checks) to make sure the bytes just read are the listed object's. pyarrow's
        S3 file checks the object's size and ETag only at its open: a ranged GET on it sends
        no If-Match and hides the answer's ETag, so an object replaced by one of the same size
        between two blocks would hand out the new object's bytes as the old's, mixing two
        versions with no error. The HEAD comes after the GET (not beside it), so an object
        that had been replaced when the GET was answered is seen as replaced: a version
        mixed in would have to be replaced back to the listed ETag within the GET-to-HEAD
        time (the same bytes, for S3's MD5 ETags). A local file needs no check (read through
        one descriptor); a GCS file reads the generation it opened (`_open`'s)."""
        if _data_filesystem(self.path)[0] is None:
            return
        _close(self._open())  # the open is the request (HEAD); closing it sends none

    def _open(self) -> Any:
        """A new file of the object, checked to be the size listed."""
        filesystem, inner = _data_filesystem(self.path)
        handle = open(inner, "rb") if filesystem is None else filesystem.open_input_file(inner)
        size = handle.size() if hasattr(handle, "size") else os.fstat(handle.fileno()).st_size
        tag = fs.stat_of_handle(handle).tag if self.tag is not None else None
        if size != self.size or tag != self.tag:  # a new handle asks the store: still the listed object?
            _close(handle)
            then = f"{self.size} bytes" + (f", ETag {self.tag}" if self.tag else "")
            now = f"{size} bytes" + (f", ETag {tag}" if tag else "")
            raise ObjectChangedError(
                f"{fs.split_query(self.path)[0]} is {now} now but was {then} when listed: "
                "the object was replaced while it was being read; read it again from the start"
            )
        return handle

    def _give(self, handle) -> None:
        with self._lock_here():
            if self._pid == os.getpid():
                self._idle.append(handle)
                return
        _close(handle)

    def _lock_here(self) -> threading.Lock:
        if self._pid != os.getpid():  # forked: the parent's handles and lock are not ours
            self._idle, self._lock, self._pid = [], threading.Lock(), os.getpid()
        return self._lock


# pyarrow's GCS file starts a download of the whole object at its first use, whatever that is
# (every call checks `closed()`, which opens the file's lazy sequential stream: arrow's gcsfs.cc,
# GcsRandomAccessFile::InitializeStream), and a range read never reads it: the client takes in
# what its buffers hold (0.2-4 MB of a large object measured on loopback, all of a smaller one)
# and keeps that connection until the file is closed. One file per concurrent request, kept
# idle per object, made that download readahead_requests times per object and held a socket
# for each file kept (126 sockets after reading 40 objects). So a GCS file is opened once per
# object per process and shared by the threads reading it (each `read_at` is a ranged request
# of its own: sharing one is safe once its stream has started, which `_open`'s size check
# does), and at most this many stay open, the least recently used dropped first.
GCS_OPEN_FILES = 8


def _gcs_class() -> Any:
    from pyarrow import fs as pafs

    return getattr(pafs, "GcsFileSystem", ())


class _SharedFiles:
    """This process's open GCS files, one per object (path, size, version), at most `limit`;
    least recently used dropped first. A file dropped is not closed here (a reader may be in
    a request on it): it closes when its last reader lets go of it. A forked child starts
    empty (the parent's connections are not its own)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._files: "collections.OrderedDict[Tuple[str, int, Any], Any]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _here(self) -> threading.Lock:
        if self._pid != os.getpid():
            self._files, self._lock, self._pid = collections.OrderedDict(), threading.Lock(), os.getpid()
        return self._lock

    def get(self, key: Tuple[str, int, Any], opener: Callable[[], Any]) -> Any:
        with self._here():
            found = self._files.get(key)
            if found is not None:
                self._files.move_to_end(key)
                return found
        opened = opener()  # outside the lock: a request
        with self._here():
            found = self._files.get(key)
            if found is None:
                self._files[key] = found = opened
                while len(self._files) > self.limit:
                    self._files.popitem(last=False)
                return found
        _close(opened)  # another thread opened it meanwhile: no one else holds this one
        return found

    def drop(self, key: Tuple[str, int, Any], handle: Any) -> None:
        """Forget `handle` (after a failed request on it), if it is still the object's file."""
        with self._here():
            if self._files.get(key) is handle:
                del self._files[key]

    def __len__(self) -> int:
        with self._here():
            return len(self._files)


_GCS_FILES = _SharedFiles(GCS_OPEN_FILES)


def _failure(path: str, offset: int, length: int, cause: BaseException, attempts: int, started: float):
    """The error naming the object and the range that could not be read."""
    cause_text = " ".join(str(cause).split())[:300] or type(cause).__name__
    return RemoteReadError(
        fs.split_query(path)[0],
        offset,
        None,
        f"reading bytes {offset}-{offset + length - 1} ({length} bytes) failed after {attempts} "
        f"attempt(s) in {time.monotonic() - started:.1f} s: {type(cause).__name__}: {cause_text}",
    )


def _seek_read(handle, offset: int, length: int) -> bytes:
    handle.seek(offset)
    return handle.read(length)


def _close(handle) -> None:
    try:
        handle.close()
    except Exception:  # noqa: BLE001
        pass
