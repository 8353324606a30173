"""helpers/zygote.py stands in for `subprocess.run([sys.executable, "-c"/"-m", ...])` in the
tests that need a clean process, not an interpreter's start: each case here runs the same code
both ways and the answers must agree (environment, directory, stdin, exit codes, output at exit,
atexit, threads, `-m`), or checks what a fresh interpreter would have that a fork could lose."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers import zygote
from helpers.fixtures import REPO

pytest.importorskip("apache_beam")
pytest.importorskip("torch")


def _both(argv, **kwargs):
    """(real interpreter, zygote) for the same call."""
    real = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, **kwargs)
    forked = zygote.run(argv, text=True, timeout=120, **kwargs)
    return real, forked


def _same(argv, **kwargs):
    real, forked = _both(argv, **kwargs)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    return forked


CASES = {
    "exit-0": "print('out')",
    "exit-3": "import sys; print('x'); sys.exit(3)",
    "exit-none": "import sys; sys.exit()",
    "exit-message": "import sys; sys.exit('a message')",
    "exit-large": "import sys; sys.exit(256 + 7)",
    "killed": "import os, signal, sys; print('before', flush=True); os.kill(os.getpid(), signal.SIGKILL)",
    "interrupted": "raise KeyboardInterrupt",
    "unflushed-at-exit": "import sys\nfor i in range(3): print(i); print(-i, file=sys.stderr)\nsys.stdout.write('x')",
    "atexit": "import atexit\natexit.register(print, 'second')\natexit.register(print, 'first')\nprint('main')",
    "threads-joined": (
        "import threading, time\n"
        "def late():\n    time.sleep(0.5); print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\nprint('main done')"
    ),
    "daemon-not-joined": (
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\nprint('main done')"
    ),
    "del-at-exit": "class D:\n    def __del__(self): print('finalized')\nd = D()\nprint('main')",
    "main-names": "import sys, pickle\nclass C: pass\nprint(C.__module__, type(pickle.loads(pickle.dumps(C()))).__name__)",
    "argv-path0": "import sys; print(sys.argv, repr(sys.path[0]), __name__)",
    "stdin-devnull": "import sys; print(repr(sys.stdin.read()))",
    "signals": "import signal; print([str(signal.getsignal(s)) for s in (2, 13, 15, 17, 25)])",
    # http.client (preloaded) imported email.parser as it ran: importing it reveals that
    "submodule-through-preloaded": "import http.client, email\nprint(email.parser.Parser.__name__)",
    "submodule-not-imported": "import email\nprint(email.parser)",
    "this-package-not-loaded": "import sys; print([m for m in sys.modules if m.split('.')[0] in ('tfrecord_beam', 'pipelines', 'helpers')])",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_c_answers_as_a_fresh_interpreter(name, tmp_path):
    argv = ["-c", CASES[name], "an", "argument"]
    done = _same(argv, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)))
    if name == "exit-message":
        assert done.returncode == 1 and done.stderr == "a message\n"
    if name == "killed":
        assert done.returncode == -signal.SIGKILL and done.stdout == "before\n"
    if name == "this-package-not-loaded":
        assert done.stdout == "[]\n"


def test_the_traceback_of_an_uncaught_exception(tmp_path):
    real, forked = _both(["-c", "def f():\n    raise ValueError('boom')\nf()"], cwd=tmp_path)
    assert real.returncode == forked.returncode == 1
    assert forked.stderr == real.stderr and forked.stderr.endswith("ValueError: boom\n")


def test_the_environment_is_replaced_not_added_to(tmp_path, monkeypatch):
    monkeypatch.setenv("ZYGOTE_PARENT_ONLY", "parent")
    zygote.run(["-c", "pass"])  # the zygote is up: PATH is in its environment
    env = {k: v for k, v in os.environ.items() if k not in ("ZYGOTE_PARENT_ONLY", "PATH")}
    env["ZYGOTE_CHILD_ONLY"] = "child"
    code = (
        "import os; print(os.environ.get('ZYGOTE_PARENT_ONLY'), os.environ.get('ZYGOTE_CHILD_ONLY'), "
        "os.environ.get('PATH'), os.getcwd())"
    )
    done = _same(["-c", code], env=env, cwd=tmp_path)
    assert done.stdout == f"None child None {tmp_path}\n"
    # env=None: this process's environment as it is now
    assert zygote.run(["-c", code], text=True).stdout.split()[0] == "parent"


def test_pythonpath_rebuilds_sys_path(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "only_here.py").write_text("WHERE = 'lib'\n")
    code = "import sys, only_here; print(only_here.WHERE, sys.path[:3])"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "lib"), "", "rel", ""]))
    done = _same(["-c", code], env=env, cwd=tmp_path)
    assert done.stdout.startswith("lib ")
    missing = _same(["-c", code], env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path)
    assert missing.returncode == 1 and "ModuleNotFoundError" in missing.stderr


@pytest.mark.parametrize("text", [True, False])
def test_stdin_from_input(tmp_path, text):
    data = "line one\nline two é\n"
    code = "import sys; d = sys.stdin.buffer.read(); print(len(d), d.decode().split())"
    real = subprocess.run(
        [sys.executable, "-c", code], input=data if text else data.encode(), capture_output=True, text=text
    )
    forked = zygote.run(["-c", code], input=data if text else data.encode(), text=text)
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout)
    assert forked.stdout.split()[0] in (str(len(data.encode())), str(len(data.encode())).encode())


def test_stdin_is_an_anonymous_pipe(tmp_path):
    """As subprocess's: a pipe, that /dev/stdin reopens after the writer has closed it (a named
    FIFO would block that open)."""
    code = (
        "import os, stat, time; time.sleep(0.5); print(stat.S_ISFIFO(os.fstat(0).st_mode), open('/dev/stdin').read())"
    )
    done = _same(["-c", code], input="piped", cwd=tmp_path)
    assert done.stdout == "True piped\n"


def test_dash_m_runs_the_module_as_main_with_its_argv(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tool.py").write_text(
        textwrap.dedent(
            """
            import pickle, sys
            class Task:
                pass
            if __name__ == "__main__":
                print(sys.argv[1:], sys.argv[0].endswith("tool.py"), sys.path[0], __spec__.name)
                print(type(pickle.loads(pickle.dumps(Task()))).__module__)
                sys.exit(int(sys.argv[1]))
            """
        )
    )
    done = _same(["-m", "pkg.tool", "4", "--flag"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=""))
    assert done.returncode == 4 and done.stdout.splitlines()[0] == f"['4', '--flag'] True {tmp_path} pkg.tool"
    gone = _same(["-m", "pkg.absent"], cwd=tmp_path)
    assert gone.returncode == 1


def test_a_timeout_kills_the_child_and_raises(tmp_path):
    start = time.monotonic()
    code = "import time, pathlib; print('started', flush=True); time.sleep(60); pathlib.Path('late').touch()"
    with pytest.raises(subprocess.TimeoutExpired) as info:
        zygote.run(["-c", code], cwd=tmp_path, text=True, timeout=2)
    assert time.monotonic() - start < 30
    assert info.value.stdout == "started\n"
    time.sleep(0.5)
    assert not (tmp_path / "late").exists()
    assert zygote.run(["-c", "print(2)"], text=True).stdout == "2\n"  # the zygote goes on


def test_the_child_pid_takes_signals(tmp_path):
    code = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: exit(143))\nprint('ready', flush=True)\ntime.sleep(60)"
    child = zygote.start(["-c", code], cwd=tmp_path)
    deadline = time.monotonic() + 60
    while child.output(True)[0] != "ready\n" and time.monotonic() < deadline:  # its handler is set
        time.sleep(0.05)
    assert child.poll() is None
    child.send_signal(signal.SIGTERM)
    assert child.wait(30) == 143
    other = zygote.start(["-c", "import time; time.sleep(60)"])
    other.send_signal(signal.SIGKILL)
    assert other.wait(30) == -signal.SIGKILL


def test_children_run_side_by_side(tmp_path):
    code = "import sys, time; time.sleep(1.5); print(sys.argv[1])"
    start = time.monotonic()
    children = [zygote.start(["-c", code, str(n)], cwd=tmp_path) for n in range(4)]
    assert [c.wait(60) for c in reversed(children)] == [0, 0, 0, 0]
    assert time.monotonic() - start < 5.5  # not one after another
    assert [c.output(True)[0] for c in children] == ["0\n", "1\n", "2\n", "3\n"]


def test_a_startup_variable_gets_a_real_interpreter(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), PYTHONHASHSEED="0")
    assert zygote.startup_differs(env) == ["HOME", "PYTHONHASHSEED"]
    done = zygote.run(["-c", "import sys; print(sys.flags.hash_randomization)"], env=env, text=True)
    assert done.stdout == "0\n"  # only start-up sets it: a real interpreter ran
    assert zygote.startup_differs(dict(os.environ, TFRECORD_BEAM_PURE="1", PYTHONPATH="/x")) == []
    with pytest.raises(ValueError, match="HOME"):
        zygote.start(["-c", "pass"], env=env)


def test_the_engine_variable_is_read_by_the_child(tmp_path):
    """The zygote never imports this package: TFRECORD_BEAM_PURE in env decides its engine."""
    code = "from tfrecord_beam import _engine; print(_engine.ENGINE)"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    pure = _same(["-c", code], env=dict(env, TFRECORD_BEAM_PURE="1"), cwd=tmp_path)
    assert pure.stdout == "pure\n"
    _same(["-c", code], env={k: v for k, v in env.items() if k != "TFRECORD_BEAM_PURE"}, cwd=tmp_path)


def test_no_thread_runs_in_the_zygote_at_a_fork():
    """A fork copies only the forking thread. Python threads: the zygote asserts none before each
    fork (this would fail on its answer). OS threads: those the libraries' imports start are named
    here; each library stops or re-creates them around a fork (pthread_atfork)."""
    zygote.run(["-c", "pass"])
    pid = zygote.zygote_pid()
    assert pid is not None
    names = sorted(open(f"/proc/{pid}/task/{t}/comm").read().strip() for t in os.listdir(f"/proc/{pid}/task"))
    # the interpreter's thread, OpenBLAS's worker (numpy) and jemalloc's background thread (pyarrow)
    assert len(names) <= 3 and set(names) <= {"python", "jemalloc_bg_thd"}, names
    code = "import os, threading; print(threading.active_count(), len(os.listdir('/proc/self/task')))"
    assert zygote.run(["-c", code], text=True).stdout == "1 1\n"


def test_a_child_does_not_see_the_zygotes_stdin_or_answers():
    code = "import sys, os; print(repr(sys.stdin.read()), os.get_inheritable(0))"
    assert zygote.run(["-c", code], text=True).stdout == _same(["-c", code]).stdout


def test_cpu_is_counted(tmp_path):
    before = zygote.cpu_seconds()
    zygote.run(["-c", "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"])
    assert zygote.cpu_seconds() - before >= 0.5


def test_only_python_c_and_m():
    with pytest.raises(ValueError):
        zygote.run([sys.executable, "-W", "error", "-c", "pass"])


def test_a_parent_thread_does_not_matter():
    """Threads of the test process (not the zygote) are no concern: the zygote forks, not pytest."""
    t = threading.Thread(target=time.sleep, args=(2,))
    t.start()
    assert zygote.run(["-c", "print(1)"], text=True).stdout == "1\n"
    t.join()
