"""Peak resident memory, read from /proc (memory-budget tests). Linux only.

    small = job_peaks(lambda: run_the_job(small_input))
    big = job_peaks(lambda: run_the_job(big_input))
    assert big.main - small.main < budget          # this process (the runner's)
    assert big.worker - small.worker < budget      # Beam's multi_processing workers

`job_peaks(run)` measures work done in this process two ways, apart:

- `main`: how far this process's peak RSS rose over where it started. The heap is trimmed
  first (`release_free_memory`: gc, glibc's `malloc_trim`, Arrow's pool), so free memory an
  earlier test left does not hide growth, and the kernel's high-water mark (VmHWM) is reset
  (`/proc/self/clear_refs`), so the peak is exact, not sampled.
- `worker`: the highest peak of any Beam SDK worker (`python -m ...sdk_worker_main`, which the
  multi_processing runner starts through `/bin/sh -c`, or one forked from the zygote in its
  place: helpers/sdk_workers.py): the VmHWM of each, read every 20 ms while it lives (a new
  process: its HWM is its peak; a forked one's starts at the zygote's resident size, the same
  for every forked worker, so compare forked with forked: `forked`). Those workers hold what a
  job on that runner processes; the largest process of the tree would be the runner's (pytest,
  ~200 MiB and more than a worker holding half the shards), blind to a worker that buffers.

The workers are found by a walk of /proc every 0.25 s (a walk costs ~3 ms of CPU, so walking
every few ms, as `PeakRSS` does, costs a quarter of a core while a job runs), the forked ones
(children of the zygote, not of this process) from `sdk_workers.forked()` at every read.

`PeakRSS` (in a thread) and `peak_rss_tree(cmd)` (a command run to completion in a child
process) sample the RSS of a whole process tree every few ms and keep `peak`, the largest sum
over the tree, `largest`, the largest single process, and the SDK workers' peak (`worker`,
`worker_rss`).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, Iterable, NamedTuple, Optional, Sequence, Set

from . import sdk_workers, zygote
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


def hwm_of(pid: int) -> int:
    """Peak resident set size of one process (VmHWM: since it started, or since `reset_hwm`;
    0 when it vanished)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def reset_hwm(pid: int) -> bool:
    """Set the process's VmHWM to its current RSS (`/proc/PID/clear_refs`); False where the
    kernel does not allow it (then only sampled RSS tells its peak)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


SDK_WORKER = sdk_workers.MODULE


def is_sdk_worker(pid: int) -> bool:
    """Whether the process is a Beam SDK worker (`python -m ...sdk_worker_main`), not the
    `/bin/sh -c` that the multi_processing runner starts it through."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return len(argv) > 2 and argv[1] == b"-m" and argv[2] == SDK_WORKER.encode()


def rss_bytes(pids: Iterable[int]) -> int:
    """Summed resident set size of the processes (those that vanished count 0)."""
    return sum(rss_of(pid) for pid in pids)


class TreePeaks:
    """The peaks of a process tree over repeated samples: summed (`peak`), per process, and
    the Beam SDK workers' (`worker`: their VmHWM, so a peak between two samples counts too)."""

    def __init__(self) -> None:
        self.peak = 0
        self.per_process: Dict[int, int] = {}
        self.workers: Set[int] = set()
        self._kinds: Dict[int, bool] = {}

    def sample(self, root: int, exclude: Optional[int] = None) -> int:
        """Sample `root`'s tree, less the subtree of `exclude` (a descendant that is not part of
        what is measured: the test worker's zygote and its children)."""
        tree = process_tree(root)
        if exclude is not None and exclude in tree:
            tree -= process_tree(exclude)
        sizes = {pid: rss_of(pid) for pid in tree}
        for pid, size in sizes.items():
            if pid not in self._kinds:
                self._kinds[pid] = pid != root and is_sdk_worker(pid)
                if self._kinds[pid]:
                    self.workers.add(pid)
            peak = max(size, hwm_of(pid)) if self._kinds[pid] else size
            self.per_process[pid] = max(self.per_process.get(pid, 0), peak)
        now = sum(sizes.values())
        self.peak = max(self.peak, now)
        return now

    @property
    def largest(self) -> int:
        """The highest RSS any one process of the tree reached."""
        return max(self.per_process.values(), default=0)

    @property
    def worker(self) -> int:
        """The highest peak RSS of any Beam SDK worker of the tree (0: none ran)."""
        return max((self.per_process[pid] for pid in self.workers), default=0)


class PeakRSS(TreePeaks):
    """Context manager: `.peak` is the highest summed RSS of the process tree seen while
    inside, `.start` the sum on entry (what was already there: servers a session fixture
    started are children too, and their RSS drifts between two meters), `.largest` the RSS of
    its largest process. The test worker's zygote (helpers/zygote.py)
    is this process's child but not part of the work measured: its tree is left out (its
    children, forked SDK workers among them, each count the zygote's ~450 MB as resident)."""

    def __init__(self, root: Optional[int] = None, interval: float = 0.01) -> None:
        super().__init__()
        self.root = root or os.getpid()
        self.interval = interval
        self.samples = 0
        self.start = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        self.samples += 1
        return self.sample(self.root, zygote.zygote_pid())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRSS":
        self.start = self._sample()
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
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:  # Arrow's own allocator (mimalloc or jemalloc) keeps freed pages too
        arrow.default_memory_pool().release_unused()


class JobPeaks(NamedTuple):
    main: int  # bytes: how far this process's peak RSS rose over its RSS at the start
    worker: int  # bytes: the highest peak RSS of any Beam SDK worker process (0: none ran)
    workers: int  # how many SDK worker processes ran
    forked: int = 0  # how many of them were forked from the zygote (helpers/sdk_workers.py)


class _WorkerWatch:
    """A thread that finds this tree's Beam SDK workers (a walk of /proc every `walk` s: a
    full walk costs ~3 ms of CPU, too much every few ms) and reads each one's VmHWM every
    `poll` s (cheap: one file), so its peak counts even when it falls between two reads; with
    `main_rss`, this process's RSS too (where its HWM cannot be reset). The workers forked
    from the zygote for this process (`sdk_workers.forked()`) count from their start, found at
    every read."""

    def __init__(self, root: int, main_rss: bool, poll: float = 0.02, walk: float = 0.25) -> None:
        self.root, self.main_rss, self.poll, self.walk = root, main_rss, poll, walk
        self.peaks: Dict[int, int] = {}  # worker pid: its highest VmHWM read
        self.main = 0
        self._seen: Set[int] = set()
        self._forked_before = sdk_workers.forked()
        self.forked: Set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _find(self) -> None:
        for pid in process_tree(self.root) - self._seen:
            self._seen.add(pid)
            if pid != self.root and is_sdk_worker(pid):
                self.peaks[pid] = 0

    def _read(self) -> None:
        for pid in sdk_workers.forked() - self._forked_before - self.forked:
            self.forked.add(pid)
            self.peaks[pid] = 0
        for pid in self.peaks:
            self.peaks[pid] = max(self.peaks[pid], hwm_of(pid))
        if self.main_rss:
            self.main = max(self.main, rss_of(self.root))

    def _run(self) -> None:
        next_walk = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_walk:
                self._find()
                next_walk = time.monotonic() + self.walk
            self._read()
            self._stop.wait(self.poll)

    def __enter__(self) -> "_WorkerWatch":
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._read()


def job_peaks(run: Callable[[], object]) -> JobPeaks:
    """Run `run` (a job in this process) and measure, apart, this process's growth and its Beam
    SDK workers' peak (multi_processing: they hold the data they process, not this process).
    This process's part starts from a trimmed heap (`release_free_memory`) with its HWM reset,
    so it is exact, not sampled, where the kernel allows the reset."""
    release_free_memory()
    me = os.getpid()
    exact = reset_hwm(me)
    start = rss_of(me)
    with _WorkerWatch(me, main_rss=not exact) as watch:
        run()
    top = hwm_of(me) if exact else watch.main
    return JobPeaks(top - start, max(watch.peaks.values(), default=0), len(watch.peaks), len(watch.forked))


def peak_growth(run_small: Callable[[], object], run_big: Callable[[], object]) -> int:
    """How much more this process's peak RSS rises over where it started while `run_big` runs
    than while `run_small` runs (bytes; `job_peaks`): the memory that grows with the data, for
    work done in this process."""
    small = job_peaks(run_small).main
    return job_peaks(run_big).main - small


class Measured(NamedTuple):
    returncode: int
    peak_rss: int  # bytes: the largest summed RSS over the process tree seen
    largest_rss: int  # bytes: the largest RSS of any one process of the tree
    stdout: str
    stderr: str
    main_rss: int = 0  # bytes: the peak RSS of the command's own process (its VmHWM, sampled)
    worker_rss: int = 0  # bytes: the highest peak RSS of any Beam SDK worker of its tree
    workers: int = 0  # how many SDK worker processes ran


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
        main = 0
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            peaks.sample(proc.pid)
            main = max(main, hwm_of(proc.pid))  # a fresh process: its HWM is its peak so far
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{list(cmd)[:4]}... ran over {timeout} s")
            time.sleep(interval)
        out.seek(0)
        err.seek(0)
        main = max(main, peaks.per_process.get(proc.pid, 0))
        return Measured(
            proc.returncode, peaks.peak, peaks.largest, out.read(), err.read(), main, peaks.worker, len(peaks.workers)
        )


def job_env() -> dict:
    """The environment a job subprocess needs to import this tree's package."""
    env = dict(os.environ)
    root = str(REPO)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env
