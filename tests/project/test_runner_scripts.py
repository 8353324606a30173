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


# -- runners/s3.sh: a port held by a silent process, and two starts at once (issue 34 item 12) --

FAKE_VERSITYGW = """#!{python}
# A stand-in for versitygw: serves 403 to any request on --port HOST:PORT (SO_REUSEPORT, so
# that a second one binds too, as two racing starts would make two servers); its pid in $FAKE_PIDS.
import http.server, os, socket, sys
host, port = sys.argv[sys.argv.index("--port") + 1].rsplit(":", 1)
open(os.path.join(os.environ["FAKE_PIDS"], str(os.getpid())), "w").close()

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(403)
        self.end_headers()
    def log_message(self, *args):
        pass

class Server(http.server.HTTPServer):
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

Server((host, int(port)), Handler).serve_forever()
"""

SLOW_CURL = """#!/bin/sh
# curl, after a pause: widens the window between a start's checks and its launch
sleep 0.4
exec {curl} "$@"
"""


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def s3_checkout(checkout, tmp_path):
    """The checkout with a "built" versitygw that answers HTTP, a slow curl first on PATH, a
    free port; (checkout, env, pids dir). Whatever the fakes left running is killed after."""
    fake = checkout / "cache" / "versitygw-v1.8.0" / "versitygw"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_VERSITYGW.format(python=sys.executable))
    fake.chmod(0o755)
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "curl").write_text(SLOW_CURL.format(curl=shutil.which("curl")))
    (shims / "curl").chmod(0o755)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = _env(
        checkout,
        TFRB_S3_PORT=str(_free_port()),
        TFRB_S3_DATA=str(tmp_path / "s3data"),
        FAKE_PIDS=str(pids),
        PATH=f"{shims}{os.pathsep}{os.environ['PATH']}",
    )
    yield checkout, env, pids
    for name in os.listdir(pids):
        try:
            os.kill(int(name), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _s3(checkout: Path, env: dict, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(checkout / "runners" / "s3.sh"), command], env=env, capture_output=True, text=True, timeout=timeout
    )


def _answers(port: int) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


@pytest.mark.skipif(shutil.which("curl") is None, reason="s3.sh needs curl")
def test_s3_start_refuses_at_once_a_port_held_by_a_silent_process(s3_checkout):
    """A process that accepts TCP and never answers holds the port: `start` says so within
    seconds (as gcs.sh does, through lib.sh's port_free_or_die), starts nothing, writes no
    state; it used to start versitygw anyway and fail after ~4 minutes of waiting for HTTP."""
    checkout, env, pids = s3_checkout
    port = int(env["TFRB_S3_PORT"])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(16)\n"
            "print('ready', flush=True); time.sleep(300)",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        started = time.monotonic()
        run = _s3(checkout, env, "start", timeout=40)
        assert run.returncode != 0
        assert time.monotonic() - started < 30
        assert f"127.0.0.1:{port} is already in use" in run.stderr, run.stderr
        assert os.listdir(pids) == []  # no server was started
        assert not (checkout / ".runners" / "state" / "s3.env").exists()
        assert not (checkout / ".runners" / "state" / "s3.pid").exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("flock") is None, reason="needs curl and flock")
def test_two_s3_starts_at_once_make_one_server_that_stop_stops(s3_checkout):
    """Two `start`s at the same moment: one starts the server, the other waits for it (lib.sh's
    service_lock) and finds it running; both exit 0, one server runs, its pid is the pid file's,
    and one `stop` leaves nothing answering. Without the lock both started one and the pid file
    named only one: after two stops a server still answered."""
    checkout, env, pids = s3_checkout
    port = int(env["TFRB_S3_PORT"])
    procs = [
        subprocess.Popen(
            [str(checkout / "runners" / "s3.sh"), "start"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    for proc in procs:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert [code for code, _ in outcomes] == [0, 0], outcomes
    assert any("already running" in err for _, err in outcomes), outcomes
    started = sorted(int(name) for name in os.listdir(pids))
    assert len(started) == 1, f"two servers were started: {started}"
    assert int((checkout / ".runners" / "state" / "s3.pid").read_text()) == started[0]
    assert _answers(port)
    stopped = _s3(checkout, env, "stop")
    assert stopped.returncode == 0, stopped.stderr
    time.sleep(0.3)
    assert not _alive(started[0])
    assert not _answers(port), "a server still answers after stop"


def test_port_check_is_bounded_for_a_holder_that_never_accepts(checkout):
    """A listener whose accept queue is full drops SYNs: bash's /dev/tcp alone waits minutes.
    port_open answers 2 (no answer) within seconds and port_free_or_die refuses, naming the port."""
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(0)
    port = holder.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        started = time.monotonic()
        done = _bash(
            checkout, f"rc=0; port_open 127.0.0.1 {port} || rc=$?; echo $rc; port_free_or_die svc 127.0.0.1 {port}"
        )
        assert time.monotonic() - started < 15
    finally:
        filler.close()
        holder.close()
    assert done.stdout.split()[0] == "2" and done.returncode == 1
    assert f"127.0.0.1:{port} does not answer" in done.stderr


def test_a_pid_file_without_its_start_time_is_stale_and_said_so(checkout, stranger):
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    (state / "svc.pid").write_text(f"{stranger.pid}\n")
    done = _bash(checkout, "stop_pid svc")
    assert _alive(stranger.pid) and "has no start time" in done.stderr, done.stderr
    started = _bash(
        checkout,
        'start_bg svc "$TFRB_LOGS/svc.log" sleep 120; cat "$TFRB_STATE/svc.pid" "$TFRB_STATE/svc.starttime"; running_pid svc; stop_pid svc',
    )
    assert started.returncode == 0, started.stderr
    pid, starttime, running = started.stdout.split()[:3]
    assert pid == running and starttime.isdigit()
    assert not list(state.glob("svc.*.*")), "a temporary file was left behind"
