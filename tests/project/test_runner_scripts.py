"""runners/lib.sh and runners/prism.sh on their own (issue 21 item 7), without Prism: the scripts
are copied into a tmp "checkout" so their state (.runners/state) and cache are the test's, and
what they start is a `sleep`. A pid file that outlived its process (a reboot, a crash) must not
make `stop` kill whatever process now has that pid, nor make `start` refuse to start."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A directory with a copy of runners/ (TFRB_ROOT is the scripts' parent)."""
    shutil.copytree(ROOT / "runners", tmp_path / "runners")
    return tmp_path


def _env(checkout: Path, **extra: str) -> dict:
    env = dict(os.environ, TFRB_CACHE=str(checkout / "cache"), TFRB_PYTHON=sys.executable)
    env.update(extra)
    return env


def _bash(checkout: Path, script: str, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess:
    """Run bash SCRIPT with the copied lib.sh sourced."""
    code = f'source "{checkout}/runners/lib.sh"\n{script}'
    return subprocess.run(
        ["bash", "-c", code], env=_env(checkout, **extra), capture_output=True, text=True, timeout=timeout
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def stranger():
    """A process of someone else's, leading its own session (as a service started with setsid)."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_stop_leaves_alone_a_process_that_reuses_a_stale_pid(checkout, stranger):
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    started = _bash(checkout, 'start_bg prism "$TFRB_LOGS/prism.log" sleep 120; cat "$TFRB_STATE/prism.pid"')
    assert started.returncode == 0, started.stderr
    ours = int(started.stdout)
    os.kill(ours, signal.SIGKILL)  # it dies; its pid file stays; the pid goes to someone else
    (state / "prism.pid").write_text(f"{stranger.pid}\n")
    stopped = subprocess.run(
        [str(checkout / "runners" / "prism.sh"), "stop"], env=_env(checkout), capture_output=True, text=True, timeout=60
    )
    assert stopped.returncode == 0, stopped.stderr
    time.sleep(0.3)
    assert _alive(stranger.pid), "stop killed a process it did not start"
    assert not (state / "prism.pid").exists()
    assert "not the one started" in stopped.stderr


def test_start_is_not_blocked_by_a_stale_pid_now_used_by_another_process(checkout, stranger):
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    first = _bash(checkout, 'start_bg svc "$TFRB_LOGS/svc.log" sleep 120; cat "$TFRB_STATE/svc.pid"')
    os.kill(int(first.stdout), signal.SIGKILL)
    (state / "svc.pid").write_text(f"{stranger.pid}\n")
    again = _bash(checkout, 'start_bg svc "$TFRB_LOGS/svc.log" sleep 120; cat "$TFRB_STATE/svc.pid"; stop_pid svc')
    assert again.returncode == 0, again.stderr
    assert int(again.stdout) != stranger.pid
    assert _alive(stranger.pid)


def test_stop_stops_what_start_bg_started_and_its_group(checkout):
    run = _bash(
        checkout,
        'start_bg svc "$TFRB_LOGS/svc.log" bash -c "sleep 120 & wait"; sleep 0.5; pid=$(cat "$TFRB_STATE/svc.pid");'
        ' child=$(pgrep -P "$pid"); stop_pid svc; echo "$pid $child"; [[ ! -e $TFRB_STATE/svc.pid ]]',
    )
    assert run.returncode == 0, run.stderr
    pids = [int(p) for p in run.stdout.split()]
    assert len(pids) == 2
    time.sleep(0.3)
    assert not any(_alive(p) for p in pids)


def test_prism_stop_needs_no_beam(checkout):
    """`make runners-stop` must stop Prism even where the job interpreter is gone (a removed or
    half-installed venv): stop needs no apache_beam version."""
    started = _bash(checkout, 'start_bg prism "$TFRB_LOGS/prism.log" sleep 120; cat "$TFRB_STATE/prism.pid"')
    pid = int(started.stdout)
    try:
        stopped = subprocess.run(
            [str(checkout / "runners" / "prism.sh"), "stop"],
            env=_env(checkout, TFRB_PYTHON=str(checkout / "no-such-python")),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert stopped.returncode == 0, stopped.stderr
        time.sleep(0.3)
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_prism_start_refuses_a_port_taken_by_someone_else(checkout):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        fake = checkout / "cache" / "prism" / "v0" / "prism"  # a "built" Prism that answers --help
        fake.parent.mkdir(parents=True)
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
        version = subprocess.run(
            [sys.executable, "-c", "import importlib.metadata as m; print(m.version('apache-beam'))"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        fake.parent.rename(checkout / "cache" / "prism" / f"v{version}")
        run = subprocess.run(
            [str(checkout / "runners" / "prism.sh"), "start"],
            env=_env(checkout, PRISM_JOB_PORT=str(port), PRISM_WEB_PORT=str(port + 1)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode != 0
    assert f"127.0.0.1:{port} is already in use" in run.stderr
    assert not (checkout / ".runners" / "state" / "prism.env").exists()


@pytest.mark.parametrize("script", ["s3.sh", "flink.sh", "spark.sh"])
def test_every_service_stop_leaves_alone_a_stale_pid(checkout, stranger, script):
    """s3, flink and spark keep their pids as lib.sh does (pid + start time): a pid file naming
    someone else's process is left alone by `stop` (it used to be signalled when merely alive)."""
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    names = {"s3.sh": ["s3"], "flink.sh": ["flink-jobmanager", "flink-taskmanager1"], "spark.sh": ["spark-master"]}
    for name in names[script]:
        (state / f"{name}.pid").write_text(f"{stranger.pid}\n")
        (state / f"{name}.starttime").write_text("1\n")  # ours started at another time
    stopped = subprocess.run(
        [str(checkout / "runners" / script), "stop"], env=_env(checkout), capture_output=True, text=True, timeout=60
    )
    assert stopped.returncode == 0, stopped.stderr
    time.sleep(0.3)
    assert _alive(stranger.pid), f"{script} stop killed a process it did not start"
    assert "not the one started" in stopped.stderr


def test_flink_kill_taskmanager_refuses_a_stale_pid(checkout, stranger):
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    (state / "flink-taskmanager1.pid").write_text(f"{stranger.pid}\n")
    (state / "flink-taskmanager1.starttime").write_text("1\n")
    run = subprocess.run(
        [str(checkout / "runners" / "flink.sh"), "kill-taskmanager", "1"],
        env=_env(checkout),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0 and "not running" in run.stderr
    assert _alive(stranger.pid)


def test_cached_venv_is_made_once_and_a_failed_build_is_not_taken_for_one(checkout, tmp_path):
    ready = tmp_path / "venvs" / "ready"
    ready.mkdir(parents=True)
    (ready / ".tfrb-ready").touch()
    cached = _bash(checkout, f'cached_venv "{ready}" no-such-package-anywhere')
    assert cached.returncode == 0 and "venv cached" in cached.stderr, cached.stderr
    broken = tmp_path / "venvs" / "broken"
    failed = _bash(
        checkout,
        f'cached_venv "{broken}" --no-index --find-links "{tmp_path}" no-such-package-anywhere',
        600,
        PIP_NO_INPUT="1",
    )
    assert failed.returncode != 0 and "pip install into" in failed.stderr, failed.stderr
    assert not (broken / ".tfrb-ready").exists()
    assert (checkout / ".runners" / "logs" / "broken-venv.log").read_text()  # pip's answer kept
