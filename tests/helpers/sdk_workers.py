"""Beam's multi_processing SDK workers, forked from the test worker's zygote (helpers/zygote.py)
instead of started as fresh interpreters, for jobs run in the test process (`helpers.jobs.MULTI`).

The DirectRunner's multi_processing mode starts each SDK worker in
`local_job_service.SubprocessSdkWorker.run`:

    p = subprocess.Popen(f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main", shell=True, env=env_dict)
    p.wait(); non-zero exit -> RuntimeError; finally: p.kill() if p.poll() is None

A fresh worker spends ~2.3-3.4 CPU s importing Beam before it does any work; the suite starts
~40 of them. `install` (tests/conftest.py, once per test process) replaces the `subprocess` that
local_job_service sees with a stand-in whose `Popen` of exactly that command (shell=True, env=)
is `zygote.start(["-m", MODULE], env=env_dict, stdout=1, stderr=2)`: a child of the zygote that
runs the module as `python -m` would, in Beam's environment, with this process's fds 1 and 2 as
its own (where an inherited worker's output goes, so capfd reads it); everything else is the
real subprocess. Beam's own `run` does the rest unchanged: its wait, its RuntimeError on a
non-zero exit, its kill on the way out (the forked child's process group).

What a forked worker differs in, and why the tests still prove what they did:

- Beam, numpy, pyarrow and torch are imported before it starts (the zygote's), and with them
  their import-time state. The worker's code (sdk_worker_main, this package's DoFns, unpickled
  from the job) runs in its own process as before; what it computes, writes and prints does not
  depend on when Beam was imported. A test of what an import loads or of how a worker starts
  needs a real interpreter: mark it `fresh_sdk_workers` (tests/beam/test_beam_runners.py's
  multi_processing test is one: it is about the runner as users run it).
- Its environment is Beam's env_dict (os.environ plus the worker's descriptors), as before, but
  what an interpreter reads only at start-up (PYTHON* but PYTHONPATH, HOME, locale, thread-pool
  settings: `zygote.startup_differs`) is the zygote's; where env_dict differs there, the worker
  is Beam's own Popen (so is every worker when the zygote cannot start or `TFRB_SDK_FORK=0`).
- Its memory starts at the zygote's resident size (pages shared with it, counted in its RSS):
  `helpers.rss.job_peaks` compares a worker's peak with a baseline worker's, and both are forked
  from the same zygote (`JobPeaks.forked` says how many were; scale.Scale.bounded checks the two
  agree), so the floor cancels and the growth with the data is what is compared.
- Its /proc cmdline is the zygote's, not `python -m ...sdk_worker_main`: `forked()` names the
  pids started here, which helpers.rss counts as SDK workers.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import subprocess
import sys
import threading
import types
from typing import Any, Optional, Set

from . import zygote

MODULE = "apache_beam.runners.worker.sdk_worker_main"
COMMAND = f"{sys.executable} -m {MODULE}"  # what the multi_processing runner runs (fn_runner.py)
LOCAL_JOB_SERVICE = "apache_beam.runners.portability.local_job_service"
MARKER = "fresh_sdk_workers"  # a test so marked gets Beam's own workers (fresh interpreters)

enabled = True  # the switch (tests/conftest.py turns it off for a test marked MARKER)
_forked: Set[int] = set()
_lock = threading.Lock()
fallbacks = 0  # workers started by Beam's Popen because the zygote could not serve (for a test)


def forked() -> Set[int]:
    """The pids of the SDK workers forked so far by this process (live or not)."""
    with _lock:
        return set(_forked)


def _fork(env: dict) -> Optional[zygote.Child]:
    """The worker forked from the zygote, or None where it cannot serve this environment."""
    global fallbacks
    try:
        if zygote.startup_differs(env):
            raise ValueError("start-up variables differ")
        child = zygote.start(["-m", MODULE], env=env, stdout=1, stderr=2)
    except Exception:  # noqa: BLE001 - no zygote (or not for this env): Beam's own worker
        with _lock:
            fallbacks += 1
        return None
    with _lock:
        _forked.add(child.pid)
    return child


class _Subprocess(types.ModuleType):
    """`subprocess` as local_job_service sees it: Popen of the SDK worker's command forks it."""

    def __init__(self) -> None:
        super().__init__("subprocess")

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args: Any, *rest: Any, **kwargs: Any) -> Any:  # noqa: N802 - subprocess's name
        if enabled and not rest and args == COMMAND and kwargs.get("shell") and set(kwargs) == {"shell", "env"}:
            child = _fork(dict(kwargs["env"]))
            if child is not None:
                return child
        return subprocess.Popen(args, *rest, **kwargs)


def _patch(module: types.ModuleType) -> None:
    if os.environ.get("TFRB_SDK_FORK", "1") != "0":
        module.subprocess = _Subprocess()  # type: ignore[attr-defined]


class _Finder(importlib.abc.MetaPathFinder):
    """Patches local_job_service as it is imported (a job imports it lazily, mid-test)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != LOCAL_JOB_SERVICE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Fork the SDK workers of this process's multi_processing jobs from now on (idempotent)."""
    module = sys.modules.get(LOCAL_JOB_SERVICE)
    if module is not None:
        if not isinstance(getattr(module, "subprocess", None), _Subprocess):
            _patch(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
