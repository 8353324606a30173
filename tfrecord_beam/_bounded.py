"""Bounded waits for remote calls: every call to an object store made outside the range reads
of `_ranges` (open, stat, list, and the reads of `fs.open_input`'s files) is given up after
`remote_timeout()` seconds, with an error naming the object and what was asked (the byte range
of a read), instead of waiting for the client's own timeouts (a server that stalls mid-body
held `tfrecord-beam count` for ~5 minutes on S3 and longer on GCS).

The timeout is per call and covers the client's own retries inside it, so one call never waits
longer; `_ranges` gives each range request the same bound (its `timeout`) and a bounded number
of attempts. The default is `DEFAULT_TIMEOUT_S`; the environment variable `TIMEOUT_ENV`
(seconds) changes it for a process and its children, and the CLI's `--timeout` sets it
(`set_remote_timeout`).

A call that is given up keeps running on its (daemon) thread until its socket ends; the file it
was made on is not used again (`BoundedFile`). Such a call may keep the process from ending: a
server trickling its body a byte at a time never trips the client's own low-speed timeouts, and
pyarrow's S3 finalization at interpreter exit waits for requests still in flight. So the
threads given up are remembered (`abandoned_calls`), and the `tfrecord-beam` command ends its
process with `os._exit` after its error when one is still running (`cli.main`); a library
caller gets the error at the bound and decides.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, List, Optional, TypeVar

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "TIMEOUT_ENV",
    "abandoned_calls",
    "RemoteTimeoutError",
    "BoundedFile",
    "bounded",
    "remote_timeout",
    "retrying",
    "set_remote_timeout",
    "with_timeout",
]

DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_ENV = "TFRECORD_BEAM_TIMEOUT"
_override: Optional[float] = None
T = TypeVar("T")
_abandoned: List[threading.Thread] = []  # calls given up (`with_timeout`), maybe still running


class RemoteTimeoutError(TimeoutError):
    """A remote call had no answer within the timeout (names the object and what was asked)."""


def parse_timeout(text: str, where: str) -> float:
    """Seconds > 0 from `text` (ValueError naming `where` otherwise)."""
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{where}={text!r}: not a number of seconds") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{where}={text!r}: the timeout must be a number of seconds > 0")
    return seconds


def set_remote_timeout(seconds: Optional[float]) -> None:
    """Set this process's bound on one remote call (None: back to the environment's or the default)."""
    global _override
    _override = None if seconds is None else parse_timeout(str(seconds), "timeout")


def remote_timeout() -> float:
    """Seconds one remote call may take: `set_remote_timeout`'s, else `$TFRECORD_BEAM_TIMEOUT`,
    else `DEFAULT_TIMEOUT_S`."""
    if _override is not None:
        return _override
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    return parse_timeout(text, TIMEOUT_ENV) if text else DEFAULT_TIMEOUT_S


def with_timeout(call: Callable[[], T], timeout: float) -> T:
    """`call()` in a daemon thread, given up (TimeoutError) after `timeout` seconds: a stalled
    connection cannot hold the caller; the abandoned thread ends when its socket does."""
    box: List[Any] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box.append((False, exc))

    thread = threading.Thread(target=run, name="tfrb-remote-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()] + [thread]
        raise TimeoutError
    ok, value = box[0]
    if not ok:
        raise value
    return value


def abandoned_calls() -> int:
    """How many calls this process gave up (`with_timeout`) are still running in their client."""
    _abandoned[:] = [t for t in _abandoned if t.is_alive()]
    return len(_abandoned)


def bounded(path: Any, what: str, call: Callable[[], T], timeout: Optional[float] = None) -> T:
    """`call()` (a remote call about `path`: `what` says which, e.g. "stat" or "bytes 0-99"),
    RemoteTimeoutError naming both when it has no answer within `timeout` (default
    `remote_timeout()`)."""
    seconds = remote_timeout() if timeout is None else timeout
    try:
        return with_timeout(call, seconds)
    except TimeoutError as exc:
        if isinstance(exc, RemoteTimeoutError) or str(exc):
            raise
        raise _stalled(path, what, seconds) from None


def _stalled(path: Any, what: str, seconds: float) -> RemoteTimeoutError:
    from ._uri import split_query

    name = split_query(os.fspath(path))[0]
    return RemoteTimeoutError(
        f"{name}: {what}: no answer within {seconds:g} s (the server stalled; "
        f"set the bound with --timeout or ${TIMEOUT_ENV})"
    )


def retrying(path: Any, what: str, call: Callable[[], T], timeout: Optional[float] = None) -> T:
    """`bounded`, for a `call` its client makes once (no retries of its own: `fs.open_input`'s
    S3 files): a failure worth a retry (`_retry.is_permanent` says which are not: a missing
    object, a refused access) is tried again after a backoff while the bound lasts. When the
    bound ends after failed attempts, the error says what the store answered last (its status
    and code), not that it stalled: a client retrying by itself inside the bound hid every
    answer (a 503 on every GET read "no answer within 2 s (the server stalled)")."""
    import random
    import time

    from . import _retry
    from ._uri import split_query

    seconds = remote_timeout() if timeout is None else timeout
    deadline = time.monotonic() + seconds
    wait, attempts = 0.1, 0
    last: Optional[BaseException] = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        attempts += 1
        try:
            return bounded(path, what, call, left)
        except RemoteTimeoutError:
            if last is None:
                raise _stalled(path, what, seconds) from None  # no answer at all
            break  # the bound ended inside a later attempt: the failures before say more
        except Exception as exc:  # noqa: BLE001 - a transport error of the client
            if _retry.is_permanent(exc, os.fspath(path)):
                raise
            if deadline - time.monotonic() < min(0.1, seconds / 10):
                # it failed at the bound: the client's own timeout (its request timeout is the
                # bound, `fs`), a stall, unless an earlier attempt had an answer to tell
                if last is None:
                    raise _stalled(path, what, seconds) from exc
                break
            last = exc
        time.sleep(min(wait * (0.5 + random.random()), max(0.0, deadline - time.monotonic())))
        wait = min(wait * 2, 2.0)
    if last is None:  # pragma: no cover - a bound of ~0 s
        raise RemoteTimeoutError(f"{split_query(os.fspath(path))[0]}: {what}: no answer within {seconds:g} s")
    cause = " ".join(str(last).split())[:300] or type(last).__name__
    status = _retry.http_status(last, os.fspath(path))
    if status is not None and f"HTTP status {status}" not in cause:
        cause = f"HTTP status {status}: {cause}"
    raise RemoteTimeoutError(
        f"{split_query(os.fspath(path))[0]}: {what}: failed for {seconds:g} s, {attempts} attempt(s); "
        f"the last answer: {type(last).__name__}: {cause} (set the bound with --timeout or ${TIMEOUT_ENV})"
    ) from last


class BoundedFile:
    """A remote file whose every call is `bounded`, naming the object and the byte range; after a
    call was given up the file is not used again (its client may still be inside that call).
    `retry`: its client makes one attempt per call, and the calls are `retrying`."""

    def __init__(self, inner: Any, name: str, retry: bool = False) -> None:
        self._inner = inner
        self.name = name
        self._stalled = False
        self._retry = retry

    def _call(self, what: str, call: Callable[[], T]) -> T:
        if self._stalled:
            raise RemoteTimeoutError(f"{self.name}: {what}: an earlier call on this file stalled; open it again")
        try:
            return (retrying if self._retry else bounded)(self.name, what, call)
        except TimeoutError:
            self._stalled = True
            raise

    def _span(self, start: int, nbytes: Optional[int]) -> str:
        if nbytes is None or nbytes < 0:
            return f"bytes {start}- (to the end)"
        return f"bytes {start}-{start + max(nbytes, 1) - 1}"

    def read(self, nbytes: Optional[int] = None) -> bytes:
        start = self._inner.tell()
        return self._call(
            self._span(start, nbytes),
            lambda: self._inner.read() if nbytes is None or nbytes < 0 else self._inner.read(nbytes),
        )

    def readinto(self, buffer: Any) -> int:
        start = self._inner.tell()
        return self._call(self._span(start, len(buffer)), lambda: self._inner.readinto(buffer))

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return self._call(self._span(offset, nbytes), lambda: self._inner.read_at(nbytes, offset))

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._call(f"seek to {offset}", lambda: self._inner.seek(offset, whence))

    def size(self) -> int:
        return self._call("size", self._inner.size)

    def tell(self) -> int:
        return self._inner.tell()

    def close(self) -> None:
        if self._stalled:  # its client is inside a call: close it when that ends
            threading.Thread(target=self._inner.close, name="tfrb-remote-close", daemon=True).start()
            return
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> "BoundedFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
