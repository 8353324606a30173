"""Peak resident memory of a whole process tree, sampled from /proc (memory-budget tests).

    with PeakRSS() as small:
        run_the_job(small_input)
    with PeakRSS() as large:
        run_the_job(large_input)
    assert large.peak - small.peak < budget

`PeakRSS` samples, every few milliseconds in a thread, the RSS of this process and each of
its descendants (Beam's multi_processing workers included) and keeps two peaks: `peak`, the
largest sum over the tree, and `largest`, the largest single process. Comparing with a run on
a small input removes what the runner itself costs, so what is left is the memory that grows
with the data. Budget tests compare `largest`: a job that holds its data holds it in some
process (at least half of it in one of two workers), while the tree's sum also moves by a
whole worker (~165 MiB) when a short baseline run ends before its second worker has finished
starting, which made the sum flaky on CI. `peak_rss_tree(cmd)` does the same for a command run to completion
in a child process. Linux only (it reads /proc).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import tempfile
import threading
import time
from typing import Callable, Dict, Iterable, NamedTuple, Optional, Sequence, Set

from .fixtures import REPO

_PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1 << 20


def _parents() -> dict:
    """{pid: parent pid} of every process (from /proc/PID/stat)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        # the command name (field 2) is in parentheses and may hold spaces: parse after it
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1:
            out[int(name)] = int(fields[1])
    return out


def process_tree(root: int) -> Set[int]:
    """`root` and every process descended from it."""
    children: dict = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    seen = {root}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def rss_of(pid: int) -> int:
    """Resident set size of one process (0 when it vanished)."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def rss_bytes(pids: Iterable[int]) -> int:
    """Summed resident set size of the processes (those that vanished count 0)."""
    return sum(rss_of(pid) for pid in pids)


class TreePeaks:
    """The peaks of a process tree over repeated samples: summed (`peak`) and per process."""

    def __init__(self) -> None:
        self.peak = 0
        self.per_process: Dict[int, int] = {}

    def sample(self, root: int) -> int:
        sizes = {pid: rss_of(pid) for pid in process_tree(root)}
        for pid, size in sizes.items():
            self.per_process[pid] = max(self.per_process.get(pid, 0), size)
        now = sum(sizes.values())
        self.peak = max(self.peak, now)
        return now

    @property
    def largest(self) -> int:
        """The highest RSS any one process of the tree reached."""
        return max(self.per_process.values(), default=0)


class PeakRSS(TreePeaks):
    """Context manager: `.peak` is the highest summed RSS of the process tree seen while
    inside, `.largest` that of its largest process."""

    def __init__(self, root: Optional[int] = None, interval: float = 0.01) -> None:
        super().__init__()
        self.root = root or os.getpid()
        self.interval = interval
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        self.samples += 1
        return self.sample(self.root)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRSS":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def release_free_memory() -> None:
    """Collect garbage and hand the C heap's free pages back to the OS (glibc `malloc_trim`),
    so this process's RSS is what it holds, not what earlier work left free in its heap."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS may include freed heap, as before
        pass


def largest_while(run: Callable[[], object]) -> int:
    """The highest RSS any one process of this process tree reaches while `run` runs (bytes),
    measured from a trimmed heap (`release_free_memory`)."""
    release_free_memory()
    with PeakRSS() as peaks:
        run()
    return peaks.largest


def peak_growth(run_small: Callable[[], object], run_big: Callable[[], object]) -> int:
    """How much higher the largest process of this process tree peaks while `run_big` runs
    than while `run_small` runs (bytes): the memory that grows with the data."""
    small = largest_while(run_small)
    return largest_while(run_big) - small


class Measured(NamedTuple):
    returncode: int
    peak_rss: int  # bytes: the largest summed RSS over the process tree seen
    largest_rss: int  # bytes: the largest RSS of any one process of the tree
    stdout: str
    stderr: str


def peak_rss_tree(
    cmd: Sequence[str],
    env: Optional[dict] = None,
    cwd: Optional[str] = None,
    interval: float = 0.02,
    timeout: float = 300.0,
) -> Measured:
    """Run `cmd` to completion: its exit code, the peak RSS of its process tree and its output."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err)
        peaks = TreePeaks()
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            peaks.sample(proc.pid)
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{list(cmd)[:4]}... ran over {timeout} s")
            time.sleep(interval)
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, peaks.peak, peaks.largest, out.read(), err.read())


def job_env() -> dict:
    """The environment a job subprocess needs to import this tree's package."""
    env = dict(os.environ)
    root = str(REPO)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env
