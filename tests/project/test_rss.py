"""The memory meter the budget tests rely on (`tests/helpers/rss.py`) sees memory held in a
descendant process, both as the tree's sum and as its largest process."""

from __future__ import annotations

import sys

import pytest
from helpers.rss import MiB, PeakRSS, peak_rss_tree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

HOLD = 96 * MiB
# a child that starts a grandchild which touches HOLD bytes and keeps them a moment
GRANDCHILD = (
    "import subprocess, sys; subprocess.run([sys.executable, '-c', "
    f"'import time; b = bytearray({HOLD}); b[::4096] = bytes(len(b[::4096])); time.sleep(0.5)'], check=True)"
)
IDLE = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.5)'], check=True)"


def test_tree_meter_sees_a_grandchild_hold_memory():
    held = peak_rss_tree([sys.executable, "-c", GRANDCHILD])
    idle = peak_rss_tree([sys.executable, "-c", IDLE])
    assert held.returncode == idle.returncode == 0
    assert held.largest_rss - idle.largest_rss > HOLD * 0.9
    assert held.peak_rss - idle.peak_rss > HOLD * 0.9
    assert held.peak_rss >= held.largest_rss


def test_in_process_meter_sees_a_child_hold_memory():
    """Compared by what each meter's tree rose over its start: the test worker's other
    children (object-store servers a session fixture started) are in both trees, and a server's
    RSS may fall by a GB between the two meters as its runtime hands pages back."""
    import subprocess

    with PeakRSS() as idle:
        subprocess.run([sys.executable, "-c", IDLE], check=True)
    with PeakRSS() as held:
        subprocess.run([sys.executable, "-c", GRANDCHILD], check=True)
    assert held.largest > HOLD  # the grandchild, not this (smaller) process
    assert (held.peak - held.start) - (idle.peak - idle.start) > HOLD * 0.9
    assert held.samples > 10


def test_in_process_meter_leaves_out_the_zygote_and_its_children():
    """The test worker's zygote and what it forks (doc blocks, SDK workers of in-process jobs)
    are this process's descendants, each counting the zygote's pages as resident, but not the
    work a PeakRSS measures: a child the zygote keeps alive meanwhile is not in the sum."""
    import subprocess

    from helpers import zygote

    lingering = zygote.start([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with PeakRSS() as meter:
            subprocess.run([sys.executable, "-c", IDLE], check=True)
        assert lingering.poll() is None
        assert {zygote.zygote_pid(), lingering.pid}.isdisjoint(meter.per_process), meter.per_process
        assert len(meter.per_process) >= 3  # this process, the command and its child
    finally:
        lingering.kill()
        lingering.wait()


def test_job_peaks_measures_this_process_and_the_sdk_workers_apart(tmp_path):
    """`job_peaks` (the budget tests' meter): this process's transient peak counts even when
    freed before the end (its VmHWM, reset at the start), and memory a Beam SDK worker holds
    counts as the worker's, found through the `/bin/sh -c` the runner starts it with."""
    import os
    import subprocess

    from helpers.rss import SDK_WORKER, job_peaks

    package = tmp_path.joinpath(*SDK_WORKER.split(".")[:-1])
    package.mkdir(parents=True)
    for folder in [package, *package.parents][: len(SDK_WORKER.split(".")) - 1]:
        (folder / "__init__.py").write_text("")
    (package / "sdk_worker_main.py").write_text(
        f"import time; b = bytearray({HOLD}); b[::4096] = bytes(len(b[::4096])); time.sleep(0.6)"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def worker():
        subprocess.run(f"{sys.executable} -m {SDK_WORKER}", shell=True, env=env, check=True)

    def hold_here():
        b = bytearray(HOLD)
        b[::4096] = bytes(len(b[::4096]))
        del b

    held = job_peaks(worker)
    assert held.workers == 1 and held.worker > HOLD
    assert held.main < HOLD / 4  # the worker's memory is not this process's
    here = job_peaks(hold_here)
    assert here.workers == 0 and here.main > HOLD * 0.9
