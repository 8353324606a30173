"""The code blocks of the README and of the documentation pages, and running one as a reader would.

Every ```python block runs on its own, as a reader would paste it: in its own process, in an
empty directory, with nothing from the blocks before it. That process is forked from a "zygote":
an interpreter started for the test worker that has imported only the heavy third-party
libraries (torch, Beam, pyarrow, numpy: ~9 s of CPU a fresh interpreter would pay for each block
on a 2-core machine), nothing of this package; the block still needs every import it uses
(a submodule one library loaded for another, pyarrow.parquet for Beam, is hidden from its package
until the block imports it or that library), and its names live in `__main__`. A ```sh block is a shell session that
continues the Python block just before it on the same page (the README's tour: Python writes
data, the shell runs a job and the CLI on it): it runs under `bash -euo pipefail` in that
block's directory, right after it. Other shell fences (```bash, ```text) are shown, not run.
docs/incoming/ holds notes not yet folded into a page: not pages, not run.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from helpers.fixtures import REPO

_FENCE = re.compile(r"^( *)```(python|sh)\n(.*?)^ *```", flags=re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    number: int  # the block's place among the page's Python blocks
    code: str
    shell: Optional[str]  # the ```sh block that continues it, if any

    @property
    def id(self) -> str:
        return f"{self.page}:{self.number}"


def site_pages() -> List[Path]:
    """Every page of the documentation site (docs/**/*.md but docs/incoming/)."""
    docs = REPO / "docs"
    return sorted(p for p in docs.rglob("*.md") if "incoming" not in p.relative_to(docs).parts)


def page_blocks(page: Path) -> List[Block]:
    """The page's Python blocks, each with the ```sh block that follows it (dedented when indented)."""
    blocks: List[Block] = []
    name = str(page.relative_to(REPO))
    for indent, language, body in _FENCE.findall(page.read_text()):
        body = textwrap.dedent(body) if indent else body
        if language == "python":
            blocks.append(Block(name, len(blocks), body, None))
        else:
            assert blocks and blocks[-1].shell is None, f"{name}: a ```sh block must follow a ```python block"
            blocks[-1] = Block(name, blocks[-1].number, blocks[-1].code, body)
    return blocks


# The zygote: reads one JSON request a line ({code, cwd, out, err}), forks, and the child runs the
# code as __main__ in `cwd` with stdout/stderr to the files `out`/`err`; the zygote answers the
# child's exit status. Only third-party modules are imported before the fork.
_ZYGOTE = """
import atexit, builtins, importlib, json, os, sys, threading, traceback, types
# each library's own import, and what it loaded besides its package (Beam loads pyarrow.parquet)
loaded = {}
for top in ("numpy", "pyarrow", "torch", "apache_beam"):
    seen = set(sys.modules)
    importlib.import_module(top)
    loaded[top] = set(sys.modules) - seen
def hide():
    # A submodule one library loaded for another (pyarrow.parquet, loaded by Beam) is an attribute
    # of its package only once the block imports it, or the library that loads it, as it would be
    # in a fresh interpreter: `import pyarrow as pa; pa.parquet` fails there and must fail here.
    hidden = {}
    for top, names in loaded.items():
        for name in names:
            parent, _, child = name.rpartition(".")
            if parent and name.split(".")[0] != top and getattr(sys.modules.get(parent), child, None) is sys.modules[name]:
                hidden[name] = top
                delattr(sys.modules[parent], child)
    original = builtins.__import__
    def reveal(name):
        # the module itself with its submodules, and what a library's own import loads
        mine = name in hidden
        for other in [n for n in hidden if (mine and (n == name or n.startswith(name + "."))) or hidden[n] == name]:
            module, (parent, _, child) = sys.modules[other], other.rpartition(".")
            del hidden[other]
            setattr(sys.modules[parent], child, module)
    def hooked(name, globals=None, locals=None, fromlist=(), level=0):
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
    builtins.__import__ = hooked
    real_import_module = importlib.import_module
    def import_module(name, package=None):
        module = real_import_module(name, package)
        hooked(module.__name__)
        return module
    importlib.import_module = import_module
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            os.chdir(request["cwd"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            for fd, name in ((1, "out"), (2, "err")):
                f = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            sys.argv = ["-c"]
            sys.path[0] = ""
            hide()
            main = types.ModuleType("__main__")  # the block's names live in __main__, as with python -c
            main.__builtins__ = builtins
            sys.modules["__main__"] = main
            exec(compile(request["code"], "<string>", "exec"), main.__dict__)
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:  # what an interpreter does on its way out: join threads, run atexit, flush
            try:
                threading._shutdown()
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    _, wait = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(wait), flush=True)
"""
_zygote: Optional[subprocess.Popen] = None


def stop_zygote() -> None:
    """End the zygote (and reap it, so its CPU time is counted where the caller's is)."""
    global _zygote
    if _zygote is not None:
        _zygote.kill()
        _zygote.wait()
        _zygote = None


def _block_env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # `python`, `tfrecord-beam` and the other console scripts of this interpreter come first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_python(code: str, directory: Path, timeout: float = 300) -> "subprocess.CompletedProcess[str]":
    """Run `code` as a reader's `python -c` would, in `directory`, in a process forked from the zygote."""
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_block_env(),
            text=True,
            start_new_session=True,  # its own group: a block that hangs is killed with it
        )
        atexit.register(stop_zygote)
    assert _zygote.stdin is not None and _zygote.stdout is not None
    with tempfile.TemporaryDirectory() as logs:
        out, err = os.path.join(logs, "out"), os.path.join(logs, "err")
        _zygote.stdin.write(json.dumps({"code": code, "cwd": str(directory), "out": out, "err": err}) + "\n")
        _zygote.stdin.flush()
        if not select.select([_zygote.stdout], [], [], timeout)[0]:
            os.killpg(_zygote.pid, signal.SIGKILL)
            raise AssertionError(f"the block ran over {timeout} s:\n{code}")
        answer = _zygote.stdout.readline()
        assert answer, "the doc-block zygote died"
        return subprocess.CompletedProcess(code, int(answer), Path(out).read_text(), Path(err).read_text())


def run_block(block: Block, directory: Path) -> None:
    """Run the block (and its shell continuation) in `directory`; fail naming the page and block."""
    env = _block_env()
    done = run_python(block.code, directory)
    assert done.returncode == 0, f"{block.id} python block failed on its own:\n{block.code}\n{done.stderr[-3000:]}"
    if "'missing'" in block.code:
        assert "'missing': array([], dtype=float32)" in done.stdout
    if block.shell is not None:
        shell = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.shell],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert shell.returncode == 0, (
            f"{block.id}: the sh block after the python block failed:\n{block.shell}\n"
            f"{shell.stdout[-2000:]}\n{shell.stderr[-3000:]}"
        )
