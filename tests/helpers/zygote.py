"""`python -c` and `python -m` without an interpreter's start: `run` stands in for
`subprocess.run([sys.executable, "-c", code, *args] | [sys.executable, "-m", module, *args], ...)`
for a test that needs its code in a clean process of its own, not a fresh interpreter's start.

A fresh interpreter that imports torch costs ~5.6 s of CPU on the test machine, apache_beam
~3.4 s; a test worker starts one "zygote" (helpers/zygote_server.py) that has imported numpy,
pyarrow, torch and apache_beam, never this package nor the tests, and forks a child per call.
The child is what the interpreter would have been, for what a test can see:

- argv: `-c`: sys.argv == ["-c", *args], sys.path[0] == ""; `-m`: run as `python -m` runs it
  (runpy's `_run_module_as_main`: the module is `__main__`, sys.argv[0] its file, sys.path[0]
  the directory); the code's names live in a new `__main__`;
- env replaces os.environ wholesale (None: this process's), and sys.path is rebuilt from its
  PYTHONPATH; cwd; stdin from `input` (bytes, or text when text=True) or /dev/null;
- stdout and stderr go to files, returned as the CompletedProcess's (or written to this
  process's own when not captured);
- its exit is an interpreter's: threads joined, atexit run, streams flushed; the code is
  SystemExit's (None 0, an int itself, anything else printed to stderr and 1), 1 after an
  uncaught exception's traceback, minus the signal when one killed it (SIGINT after an uncaught
  KeyboardInterrupt);
- signal dispositions are a fresh interpreter's; random and numpy's legacy generator reseeded;
- a submodule one preloaded library loaded for another (pyarrow.parquet, for Beam) is hidden
  from its package until the code imports it.

What start-up alone decides cannot be redone after a fork: an `env` that differs from the
zygote's in a variable read at start-up or by the preloaded libraries' imports (PYTHON* but
PYTHONPATH and PYTHONDONTWRITEBYTECODE, HOME, locale, thread-pool and allocator settings:
`startup_differs`) gets a real interpreter instead, as do interpreter options other than -c/-m.
The preloaded modules stay in sys.modules: a test of what an import loads, of how the
interpreter starts, or of a start-up time, needs a real interpreter (subprocess).

`start` is the Popen-like half (pid, poll, wait, send_signal, kill): the pid is the child's own,
so a signal sent to it reaches the code. `cpu_seconds` is the CPU the zygote and its children
have spent that this process's RUSAGE_CHILDREN does not show (bench/pytest_cpu.py adds it).
"""

from __future__ import annotations

import atexit
import itertools
import locale
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

_SERVER = Path(__file__).with_name("zygote_server.py")

# read when an interpreter starts or when the preloaded libraries are imported
_STARTUP_PREFIXES = (
    "PYTHON",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO",
    "KMP_",
    "TORCH_",
    "PYTORCH_",
    "CUDA",
    "NVIDIA_",
    "GRPC_",
    "ARROW_",
    "JE_",
    "LD_",
    "MALLOC_",
    "LC_",
    "NUMPY_",
    "NPY_",
)
_STARTUP_NAMES = {"HOME", "LANG", "LANGUAGE", "TZ", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"}
_REBUILT = {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE"}  # the child redoes what these decide


def _startup(name: str) -> bool:
    return name not in _REBUILT and (name in _STARTUP_NAMES or name.startswith(_STARTUP_PREFIXES))


class _Zygote:
    """The zygote process and its answers. Thread-safe: Beam's worker threads start and wait for
    their SDK workers side by side (helpers/sdk_workers.py); one thread at a time reads the
    answers and files each (`started`, `exits`) for the thread that waits for it."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env = dict(env)
        self.fds, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # passed fds go over it
        env["ZYGOTE_FDS"] = str(theirs.fileno())
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import runpy; runpy.run_path({str(_SERVER)!r}, run_name='zygote')"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.buffer = b""
        self.started: Dict[str, int] = {}
        self.exits: Dict[str, int] = {}
        self.children_cpu = 0.0
        self.own_cpu = 0.0
        self.sending = threading.Lock()  # a request's passed fds and its line go together
        self.answers = threading.Condition()  # guards started, exits, the counters and `reading`
        self.reading = False  # a thread is reading answers (only it touches `buffer`)
        assert self._line(None) == "ready", "the zygote did not start"

    def _line(self, deadline: Optional[float]) -> Optional[str]:
        """The next answer line, or None at the deadline."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return None
            data = os.read(fd, 65536)
            if not data:
                raise RuntimeError(f"the zygote died (exit {self.proc.wait()})")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def _file(self, line: str) -> None:
        kind, ident, *rest = line.split()
        if kind == "started":
            self.started[ident] = int(rest[0])
        elif kind == "exit":
            self.exits[ident] = int(rest[0])
            self.children_cpu += float(rest[1])
            self.own_cpu = float(rest[2])

    def _until(self, answered: Dict[str, int], ident: str, deadline: Optional[float]) -> Optional[int]:
        """The answer filed under `ident` in `answered` (taken out), or None at the deadline:
        this thread reads answers while no other does, else waits for the reader to file one."""
        with self.answers:
            while ident not in answered:
                left = None if deadline is None else deadline - time.monotonic()
                if self.reading:
                    if left is not None and left <= 0:
                        return None
                    self.answers.wait(left)
                    continue
                self.reading = True
                try:
                    self.answers.release()
                    try:
                        line = self._line(deadline)
                    finally:
                        self.answers.acquire()
                    if line is None:
                        break
                    self._file(line)
                finally:
                    self.reading = False
                    self.answers.notify_all()
            return answered.pop(ident, None)

    def request(self, request: Dict[str, Any], passed: Sequence[int] = ()) -> int:
        """Send a request (each of `passed`, an fd, goes first over the socket); the child's pid."""
        assert self.proc.stdin is not None
        import json

        with self.sending:
            for fd in passed:
                socket.send_fds(self.fds, [b"p"], [fd])
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        pid = self._until(self.started, request["id"], None)
        assert pid is not None
        return pid

    def wait(self, ident: str, timeout: Optional[float]) -> Optional[int]:
        return self._until(self.exits, ident, None if timeout is None else time.monotonic() + timeout)


_zygote: Optional[_Zygote] = None
_ids = itertools.count()
_spent_by_stopped = 0.0  # what stopped zygotes reported
_reaped = 0.0  # what stopped zygotes added to this process's RUSAGE_CHILDREN when reaped


_starting = threading.Lock()


def _get() -> _Zygote:
    global _zygote
    with _starting:
        if _zygote is None or _zygote.proc.poll() is not None:
            if _zygote is not None:
                stop()
            _zygote = _Zygote()
            atexit.register(stop)
        return _zygote


def stop() -> None:
    """End the zygote (its children run on) and reap it."""
    global _zygote, _reaped, _spent_by_stopped
    if _zygote is not None:
        _spent_by_stopped += _zygote.children_cpu + _zygote.own_cpu
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        _zygote.proc.kill()
        _zygote.proc.wait()
        for f in (_zygote.proc.stdin, _zygote.proc.stdout):
            if f is not None:
                f.close()
        _zygote.fds.close()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        _reaped += (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        _zygote = None


def zygote_pid() -> Optional[int]:
    return None if _zygote is None else _zygote.proc.pid


def cpu_seconds() -> float:
    """CPU spent by zygotes and their children that RUSAGE_CHILDREN does not (yet) show."""
    live = 0.0 if _zygote is None else _zygote.children_cpu + _zygote.own_cpu
    return _spent_by_stopped + live - _reaped


def startup_differs(env: Mapping[str, str]) -> List[str]:
    """The start-up variables in which `env` differs from the zygote's (a real interpreter then)."""
    base = _get().env
    names = {k for k in set(env) | set(base) if _startup(k)}
    return sorted(k for k in names if env.get(k) != base.get(k))


Input = Union[bytes, str, None]


class Child:
    """A started child: subprocess.Popen's pid, poll, wait, send_signal, kill, returncode."""

    def __init__(self, argv: Sequence[str], ident: str, pid: int, logs: tempfile.TemporaryDirectory) -> None:
        # logs: the folder of its output files (what went to an fd given to `start` is not there)
        self.args, self.ident, self.pid, self.logs = list(argv), ident, pid, logs
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if self.returncode is None:
            assert _zygote is not None, "the zygote was stopped under a running child"
            self.returncode = _zygote.wait(self.ident, timeout)
            if self.returncode is None and timeout is not None and timeout > 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def feed(self, fd: int, data: bytes) -> None:
        """Write `data` into the child's stdin pipe and close it (the child may read none of it)."""
        try:
            while data:
                if select.select([], [fd], [], 0.05)[1]:
                    data = data[os.write(fd, data[:65536]) :]
                elif self.poll() is not None:
                    return
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL to the child and to the process group it leads (what it started)."""
        if self.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def output(self, text: bool) -> tuple:
        out, err = (_read(Path(self.logs.name, name)) for name in ("out", "err"))
        return (_decode(out), _decode(err)) if text else (out, err)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:  # not yet opened by the child
        return b""


def _decode(data: bytes) -> str:
    # what subprocess's text mode gives: the locale's encoding, universal newlines
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def _split(argv: Sequence[str]) -> List[str]:
    argv = list(argv)
    if argv and argv[0] == sys.executable:
        argv = argv[1:]
    if len(argv) < 2 or argv[0] not in ("-c", "-m"):
        raise ValueError(f"only `python -c CODE ...` and `python -m MODULE ...` run in the zygote: {argv!r}")
    return argv


def start(
    argv: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    cwd: Union[str, os.PathLike, None] = None,
    input: Input = None,
    stdout: Optional[int] = None,
    stderr: Optional[int] = None,
) -> Child:
    """Start `python -c`/`python -m` (argv with or without sys.executable first) in a forked child.
    `stdout`/`stderr`: an fd of this process that becomes the child's fd 1/2 (the same open
    file, as a Popen child inherits it: `sys.stdout.fileno()` for where this process's output
    goes), else a file that `Child.output` reads."""
    argv = _split(argv)
    env = dict(os.environ if env is None else env)
    differs = startup_differs(env)
    if differs:
        raise ValueError(f"{differs} differ from the zygote's: start-up reads them, run a real interpreter")
    zygote = _get()
    logs = tempfile.TemporaryDirectory(prefix="zygote-")
    write_end = read_end = -1
    if input is not None:  # an anonymous pipe, as subprocess gives (a command may refuse to read a pipe)
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
    passed = [fd for fd in (read_end, stdout, stderr) if fd is not None and fd >= 0]  # in this order
    ident = str(next(_ids))
    request = {
        "id": ident,
        "argv": argv,
        "env": env,
        "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
        "stdin": "pipe" if write_end >= 0 else None,
        "out": os.path.join(logs.name, "out") if stdout is None else None,  # None: the fd passed
        "err": os.path.join(logs.name, "err") if stderr is None else None,
    }
    try:
        pid = zygote.request(request, passed)
    finally:
        if read_end >= 0:
            os.close(read_end)
    child = Child([sys.executable, *argv], ident, pid, logs)
    if write_end >= 0:
        assert input is not None
        child.feed(write_end, input.encode(locale.getpreferredencoding(False)) if isinstance(input, str) else input)
    return child


def run(
    argv: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    cwd: Union[str, os.PathLike, None] = None,
    input: Input = None,
    capture_output: bool = True,
    text: bool = False,
    timeout: Optional[float] = None,
    check: bool = False,
) -> subprocess.CompletedProcess:
    """subprocess.run for `python -c`/`python -m`, in a child forked from the zygote (a real
    interpreter when `env` changes what start-up decides: `startup_differs`)."""
    split = _split(argv)
    full = [sys.executable, *split]
    if startup_differs(dict(os.environ if env is None else env)):
        return subprocess.run(
            full, env=env, cwd=cwd, input=input, capture_output=capture_output, text=text, timeout=timeout, check=check
        )
    child = start(split, env=env, cwd=cwd, input=input)
    try:
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            out, err = child.output(text)
            raise subprocess.TimeoutExpired(full, timeout or 0, output=out, stderr=err) from None
        out, err = child.output(text)
    finally:
        child.logs.cleanup()
    assert code is not None
    if not capture_output:
        for data, stream in ((out, sys.stdout), (err, sys.stderr)):
            stream.write(data if text else data.decode(errors="replace"))
        out = err = None
    done = subprocess.CompletedProcess(full, code, out, err)
    if check:
        done.check_returncode()
    return done
