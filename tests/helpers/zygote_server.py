"""The zygote's own side (helpers/zygote.py starts it, and says what it is for): an interpreter
that imports the heavy third-party libraries once, then forks one child per request; each child
makes itself what `python -c CODE ARGS` or `python -m MODULE ARGS` would have been, in the
request's directory and environment, with its stdin and output files, and runs it.

Run as `python -c "import runpy; runpy.run_path(THIS, run_name='zygote')"` from `/`, without
PYTHONPATH: its sys.path is then the interpreter's own (stdlib, site-packages), which a child
rebuilds from its own PYTHONPATH. No thread is started here, and none may be running at a fork.

Protocol: one JSON request a line on stdin, {id, argv, env, cwd, stdin, out, err}
(argv: ["-c", code, *args] or ["-m", module, *args]; stdin: "pipe" for the read end of a pipe
sent just before the line over the Unix socket whose fd ZYGOTE_FDS names, or null for /dev/null;
out, err: the path of a file, or null for an fd sent over that socket after stdin's, out's first). On stdout it answers `started ID PID` at once and `exit ID CODE CPU OWN` when the child
is reaped (CODE as subprocess gives it, negative for a signal; CPU: the child's user+system
seconds, its reaped children included; OWN: the zygote's own so far).
"""

from __future__ import annotations

import atexit
import builtins
import gc
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import resource
import runpy
import select
import signal
import socket
import sys
import threading
import types
from collections import defaultdict
from typing import Any, Dict, List, Set

PRELOAD = ("numpy", "pyarrow", "torch", "apache_beam")

# what a fresh interpreter has before any library runs: its signal dispositions, its path
_SIGNALS = {s: signal.getsignal(s) for s in signal.valid_signals()}
_SYSTEM_PATH = [p for p in sys.path if p]  # started from / with -c and no PYTHONPATH: path[0] is ''

# each module's imports as it ran (already loaded or not): what its import in a fresh interpreter
# would load, as a graph (http.client imports email.parser, which some earlier module loaded)
_DEPS: Dict[str, Set[str]] = defaultdict(set)
_builtin_import, _import_module = builtins.__import__, importlib.import_module


def _note(name: str, fromlist: Any) -> None:
    """Record `name` as imported by the module whose top-level code is running: an import in a
    function that code called counts (its import would run it again), one in a function called
    later does not (email.message_from_string's, once some module called it)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back  # type: ignore[assignment]
    importer = None if frame is None else frame.f_globals.get("__name__")
    if isinstance(importer, str):
        _DEPS[importer].add(name)
        _DEPS[importer].update(f"{name}.{item}" for item in fromlist or () if f"{name}.{item}" in sys.modules)


def _recording_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    module = _builtin_import(name, globals, locals, fromlist, level)
    try:
        full = importlib.util.resolve_name("." * level + name, globals.get("__package__")) if level else name
        _note(full, fromlist)
    except Exception:  # noqa: BLE001 - a name it cannot resolve is not recorded
        pass
    return module


def _recording_import_module(name: str, package: Any = None) -> Any:
    module = _import_module(name, package)
    _note(module.__name__, ())
    return module


# each library's own import, and what it loaded besides its package (Beam loads pyarrow.parquet)
_LOADED: Dict[str, set] = {}
builtins.__import__, importlib.import_module = _recording_import, _recording_import_module
try:
    for _top in PRELOAD:
        _seen = set(sys.modules)
        importlib.import_module(_top)
        _LOADED[_top] = set(sys.modules) - _seen
finally:
    builtins.__import__, importlib.import_module = _builtin_import, _import_module
gc.freeze()  # what the libraries made is left out of a child's collections (no copy-on-write of it)


def _hide() -> None:
    """A submodule one library loaded for another (pyarrow.parquet, loaded by Beam) is an attribute
    of its package only once the code imports it, or the library that loads it, as it would be in a
    fresh interpreter: `import pyarrow as pa; pa.parquet` fails there and must fail here."""
    hidden: Dict[str, str] = {}
    for top, names in _LOADED.items():
        for name in names:
            parent, _, child = name.rpartition(".")
            module = sys.modules.get(name)
            if parent and name.split(".")[0] != top and getattr(sys.modules.get(parent), child, None) is module:
                hidden[name] = top
                delattr(sys.modules[parent], child)
    original = builtins.__import__

    done: Set[str] = set()

    def reveal(name: str) -> None:
        # the module itself with its submodules, and what its import would load: every module its
        # code imported as it ran in the zygote, and theirs (once per name)
        if name in done and name not in hidden:
            return
        mine = name in hidden
        todo, reached = [name], set()
        while todo:
            n = todo.pop()
            if n not in reached:
                reached.add(n)
                done.add(n)
                todo += _DEPS.get(n, ())
                todo += [n.rpartition(".")[0]] if "." in n else []
        others = [n for n in hidden if n in reached or (mine and n.startswith(name + ".")) or hidden[n] == name]
        for other in others:
            module, (parent, _, child) = sys.modules[other], other.rpartition(".")
            del hidden[other]
            setattr(sys.modules[parent], child, module)
        if not hidden:  # all revealed: the interpreter's own import again
            builtins.__import__ = original
            importlib.import_module = real_import_module

    def hooked(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        module = original(name, globals, locals, fromlist, level)
        if hidden:
            if level:
                name = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__"))
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                reveal(".".join(parts[:i]))
            for item in fromlist or ():
                reveal(name + "." + item)
        return module

    real_import_module = importlib.import_module
    if not hidden:
        return
    builtins.__import__ = hooked

    def import_module(name: str, package: Any = None) -> Any:
        module = real_import_module(name, package)
        hooked(module.__name__)
        return module

    importlib.import_module = import_module


def _without_my_frames(exc: BaseException) -> BaseException:
    """The traceback as the interpreter would print it: without this file's frames (the exec, the
    import hook), for the exception and those it was raised from or during."""
    seen = set()
    todo: List[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        frames = []
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename != __file__:
                frames.append(tb)
            tb = tb.tb_next
        new = None
        for tb in reversed(frames):
            new = types.TracebackType(new, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
        e.__traceback__ = new
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    return exc


def _uncaught() -> None:
    exc = sys.exc_info()[1]
    assert exc is not None
    sys.excepthook(type(exc), _without_my_frames(exc), exc.__traceback__)


def _python_path(value: str, cwd: str) -> List[str]:
    """PYTHONPATH as the interpreter reads it: relative entries (an empty one is the directory)
    made absolute, a trailing empty one dropped."""
    parts = value.split(os.pathsep) if value else []
    if parts and not parts[-1]:
        parts.pop()
    return [os.path.abspath(os.path.join(cwd, p)) for p in parts]


def _std_streams() -> None:
    """New sys.stdin/stdout/stderr on fds 0-2, configured as the interpreter configured its own
    (the zygote's objects may hold its buffered protocol input)."""
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)
        new = io.TextIOWrapper(
            io.open(fd, mode + "b", closefd=False),  # noqa: UP020 (buffered binary, as the interpreter's)
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=old.line_buffering,
            write_through=old.write_through,
        )
        new.mode = mode  # type: ignore[misc]
        setattr(sys, name, new)
        setattr(sys, "__" + name + "__", new)


def _child(request: Dict[str, Any], received: List[int], closing: List[int]) -> None:
    """In the forked child: become the requested `python -c`/`python -m`, run it, exit as it would."""
    status = 0
    interrupted = False
    try:
        os.setpgid(0, 0)  # its own group: a timeout kills it with whatever it started
        signal.set_wakeup_fd(-1)
        for sig, handler in _SIGNALS.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        for fd in closing:
            os.close(fd)
        cwd = request["cwd"]
        os.chdir(cwd)
        passed = list(received)
        stdin = passed.pop(0) if request["stdin"] == "pipe" else os.open(os.devnull, os.O_RDONLY)
        streams = {0: stdin}
        for fd, key in ((1, "out"), (2, "err")):
            path = request[key]
            streams[fd] = passed.pop(0) if path is None else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, f in streams.items():  # moved past 0-2 first: one received may already sit there
            streams[fd] = os.dup(f) if f <= 2 else f
        for fd, f in streams.items():
            os.dup2(f, fd)
            os.close(f)
        _std_streams()
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        option, target, *args = request["argv"]
        path0 = "" if option == "-c" else os.getcwd()
        sys.path[:] = [path0, *_python_path(env.get("PYTHONPATH", ""), cwd), *_SYSTEM_PATH]
        sys.path_importer_cache.clear()
        importlib.invalidate_caches()
        import tempfile

        tempfile.tempdir = None  # chosen afresh from this environment's TMPDIR
        if "numpy.random" in sys.modules:
            sys.modules["numpy.random"].seed()  # the legacy global generator, seeded from entropy as when fresh
        _hide()
        main = types.ModuleType("__main__")  # the code's names live in __main__, as with python -c
        main.__builtins__ = builtins  # type: ignore[attr-defined]
        main.__loader__ = importlib.machinery.BuiltinImporter
        sys.modules["__main__"] = main
        if option == "-c":
            sys.argv = ["-c", *args]
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            sys.argv = ["-m", *args]
            runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]  # what -m runs
    except SystemExit as stop:
        code = stop.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            try:
                print(code, file=sys.stderr)
            finally:
                status = 1
    except KeyboardInterrupt:
        _uncaught()
        interrupted, status = True, 1
    except BaseException:
        _uncaught()
        status = 1
    finally:  # what an interpreter does on its way out: join threads, run atexit, flush
        try:
            try:
                threading._shutdown()  # type: ignore[attr-defined]
            except BaseException:
                _uncaught()
            atexit._run_exitfuncs()
            running = sys.modules.get("__main__")
            if running is not None:  # finalizing the modules: __main__'s objects go first (their __del__ runs)
                running.__dict__.clear()
            gc.collect()
            for stream in (sys.stdout, sys.stderr):
                if stream is None or stream.closed:
                    continue
                try:
                    stream.flush()
                except Exception:
                    status = 120 if status == 0 else status
            if interrupted:  # an uncaught KeyboardInterrupt: the interpreter dies of SIGINT
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
        finally:
            os._exit(status & 0xFF)


def serve() -> None:
    proto = os.fdopen(os.dup(1), "w")  # stdout answers; what a library prints here goes nowhere
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running: Dict[int, str] = {}
    pending = b""
    fds = socket.socket(fileno=int(os.environ.pop("ZYGOTE_FDS")))
    closing = [proto.fileno(), wake_r, wake_w, fds.fileno()]
    proto.write("ready\n")
    proto.flush()
    while True:
        ready = select.select([0, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        while running:
            try:
                pid, wait, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            own = resource.getrusage(resource.RUSAGE_SELF)
            cpu, own_cpu = usage.ru_utime + usage.ru_stime, own.ru_utime + own.ru_stime
            proto.write(f"exit {running.pop(pid)} {os.waitstatus_to_exitcode(wait)} {cpu} {own_cpu}\n")
            proto.flush()
        if 0 in ready:
            data = os.read(0, 1 << 20)
            if not data:
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                # a fork copies only the forking thread: nothing else may be mid-way through anything
                assert threading.active_count() == 1, threading.enumerate()
                # an anonymous pipe's read end, as subprocess's stdin is; fds for stdout/stderr
                wanted = (request["stdin"] == "pipe") + (request["out"] is None) + (request["err"] is None)
                received = [socket.recv_fds(fds, 1, 1)[1][0] for _ in range(wanted)]
                pid = os.fork()
                if pid:
                    for fd in received:
                        os.close(fd)
                if pid == 0:
                    _child(request, received, closing)
                running[pid] = request["id"]
                proto.write(f"started {request['id']} {pid}\n")
                proto.flush()


if __name__ == "zygote":
    serve()
