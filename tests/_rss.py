"""Peak resident memory of a command and all its descendants, sampled from /proc (Linux).

Beam's multi_processing runner and the FnApiRunner's workers are child processes, so the
process whose memory matters is a tree: `peak_rss_tree` runs a command and samples the sum
of VmRSS over the tree every few milliseconds until it exits.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Dict, List, NamedTuple, Optional, Sequence


class Measured(NamedTuple):
    returncode: int
    peak_rss: int  # bytes: the largest sum of VmRSS over the process tree seen
    stdout: str
    stderr: str


def _children() -> Dict[int, List[int]]:
    tree: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss(root: int) -> int:
    """The summed RSS (bytes) of `root` and every descendant now."""
    tree = _children()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss(pid)
        stack.extend(tree.get(pid, ()))
    return total


def peak_rss_tree(cmd: Sequence[str], env: Optional[dict] = None, cwd: Optional[str] = None,
                  interval: float = 0.02, timeout: float = 300.0) -> Measured:
    """Run `cmd` to completion; its exit code, peak tree RSS and output."""
    out_path = f"/tmp/_rss-{os.getpid()}-{time.monotonic_ns()}"
    with open(out_path + ".out", "w+") as out, open(out_path + ".err", "w+") as err:
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err)
        peak = 0
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise TimeoutError(f"{cmd[:4]}... ran over {timeout} s")
            time.sleep(interval)
        out.seek(0)
        err.seek(0)
        result = Measured(proc.returncode, peak, out.read(), err.read())
    for suffix in (".out", ".err"):
        os.unlink(out_path + suffix)
    return result


def job_env() -> dict:
    """The environment a job subprocess needs to import this tree's package."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env
