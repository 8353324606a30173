"""The code blocks of the README and of the documentation pages, and running one as a reader would.

Every ```python block runs on its own, as a reader would paste it: in its own process, in an
empty directory, with nothing from the blocks before it. That process is forked from the test
worker's zygote (helpers/zygote.py: an interpreter that has imported only the heavy third-party
libraries, torch, Beam, pyarrow, numpy, ~9 s of CPU a fresh interpreter would pay for each block
on a 2-core machine, nothing of this package); the block still needs every import it uses
(a submodule one library loaded for another, pyarrow.parquet for Beam, is hidden from its package
until the block imports it or that library), and its names live in `__main__`. A ```sh block is a shell session that
continues the Python block just before it on the same page (the README's tour: Python writes
data, the shell runs a job and the CLI on it): it runs under `bash -euo pipefail` in that
block's directory, right after it; its `python -c`/`python -m` commands (the jobs' `python -m
pipelines.NAME`) are forked from the same zygote (a `python` first on the shell's PATH hands
them to this process: `_python_through_zygote`), any other `python` use runs the interpreter.
Other shell fences (```bash, ```text) are shown, not run.
docs/incoming/ holds notes not yet folded into a page: not pages, not run.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

from helpers import zygote
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


_SHELL_FENCE = re.compile(r"^( *)```(bash|sh|shell|console)\n(.*?)^ *```", flags=re.S | re.M)
_MARKER = re.compile(r"<!-- (run by|not run): (.+?) -->\s*$")


@dataclass(frozen=True)
class ShellBlock:
    """A ```bash/```sh fence of a page, with the marker on the line before it, if any:
    `<!-- run by: TESTFILE (NAME) -->` (that test runs it, finding it by NAME) or
    `<!-- not run: REASON -->`."""

    page: str
    line: int
    language: str
    code: str
    marker: Optional[str]  # "run by" or "not run"
    note: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def shell_blocks(page: Path) -> List[ShellBlock]:
    """Every shell fence of the page (```bash, ```sh, ```shell, ```console)."""
    text = page.read_text()
    name = str(page.relative_to(REPO))
    found = []
    for match in _SHELL_FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        body = textwrap.dedent(match.group(3)) if match.group(1) else match.group(3)
        found.append(
            ShellBlock(
                name, line, match.group(2), body, marker.group(1) if marker else None, marker.group(2) if marker else ""
            )
        )
    return found


def block_run_by(page: str, name: str) -> ShellBlock:
    """The shell block of `page` marked `<!-- run by: ... (NAME) -->`."""
    hits = [b for b in shell_blocks(REPO / page) if b.marker == "run by" and b.note.endswith(f"({name})")]
    assert len(hits) == 1, f"{page}: {len(hits)} shell blocks marked run by ... ({name})"
    return hits[0]


def _block_env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # `python`, `tfrecord-beam` and the other console scripts of this interpreter come first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_python(code: str, directory: Path, timeout: float = 300) -> "subprocess.CompletedProcess[str]":
    """Run `code` as a reader's `python -c` would, in `directory`, in a process forked from the zygote."""
    try:
        return zygote.run([sys.executable, "-c", code], env=_block_env(), cwd=directory, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the block ran over {timeout} s:\n{code}") from None


def run_shell(script: str, directory: Path, env: dict, timeout: float = 600) -> "subprocess.CompletedProcess[str]":
    """Run a ```sh block under `bash -euo pipefail` in `directory`, its `python -c`/`-m`
    commands forked from the zygote (`_python_through_zygote`); stdin is /dev/null."""
    with _python_through_zygote(env) as shell_env:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=directory,
            env=shell_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def run_block(block: Block, directory: Path) -> None:
    """Run the block (and its shell continuation) in `directory`; fail naming the page and block."""
    env = _block_env()
    done = run_python(block.code, directory)
    assert done.returncode == 0, f"{block.id} python block failed on its own:\n{block.code}\n{done.stderr[-3000:]}"
    if "'missing'" in block.code:
        assert "'missing': array([], dtype=float32)" in done.stdout
    if block.shell is not None:
        shell = run_shell(block.shell, directory, env)
        assert shell.returncode == 0, (
            f"{block.id}: the sh block after the python block failed:\n{block.shell}\n"
            f"{shell.stdout[-2000:]}\n{shell.stderr[-3000:]}"
        )


# The `python` a ```sh block finds first on its PATH: a client (an interpreter without site,
# ~10 ms) that sends its arguments, directory, environment and piped stdin to the test worker,
# which runs `python -c`/`python -m` in a child of the zygote (`zygote.run`), and passes back
# its output and exit status; any other use (a script, -V, no arguments) is the real interpreter.
_SHIM_CLIENT = """\
import base64, json, os, socket, stat, sys

argv = sys.argv[1:]
real = os.environ["TFRB_DOC_PYTHON"]
if len(argv) < 2 or argv[0] not in ("-c", "-m"):
    os.execv(real, [real, *argv])
mode = os.fstat(0).st_mode
piped = stat.S_ISFIFO(mode) or stat.S_ISREG(mode)
stdin = base64.b64encode(sys.stdin.buffer.read()).decode() if piped else None
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["TFRB_DOC_ZYGOTE"])
conn.sendall(json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "stdin": stdin}).encode())
conn.shutdown(socket.SHUT_WR)
reply = json.loads(b"".join(iter(lambda: conn.recv(1 << 16), b"")))
sys.stdout.buffer.write(base64.b64decode(reply["out"]))
sys.stdout.flush()
sys.stderr.buffer.write(base64.b64decode(reply["err"]))
sys.stderr.flush()
code = reply["code"]
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code if code >= 0 else 128 - code)
"""


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _serve(server: socket.socket, shim_dir: str, stop: threading.Event) -> None:
    while True:
        conn, _ = server.accept()
        with conn:
            if stop.is_set():
                return
            request = json.loads(_read_all(conn))
            env = {k: v for k, v in request["env"].items() if not k.startswith("TFRB_DOC_")}
            # the child's PATH is the block's: without the shim (a `python` it starts is real)
            env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d != shim_dir)
            stdin = request["stdin"]
            try:
                done = zygote.run(
                    request["argv"],
                    env=env,
                    cwd=request["cwd"],
                    input=base64.b64decode(stdin) if stdin is not None else None,
                    timeout=600,
                )
                reply = {"code": done.returncode, "out": done.stdout, "err": done.stderr}
            except Exception as exc:  # noqa: BLE001 - the block's command fails, saying why
                reply = {"code": 1, "out": b"", "err": f"doc-block python: {exc!r}\n".encode()}
            reply["out"], reply["err"] = (base64.b64encode(reply[k]).decode() for k in ("out", "err"))
            conn.sendall(json.dumps(reply).encode())


@contextlib.contextmanager
def _python_through_zygote(env: dict) -> Iterator[dict]:
    """`env` for a ```sh block whose `python -c`/`python -m` commands are forked from the zygote
    (served by a thread of this process while the block runs)."""
    short = "/tmp" if len(tempfile.gettempdir()) > 60 else None  # a socket's path is at most 107 bytes
    with tempfile.TemporaryDirectory(prefix="docsh-", dir=short) as tmp:
        shim_dir = os.path.join(tmp, "bin")
        os.mkdir(shim_dir)
        Path(tmp, "client.py").write_text(_SHIM_CLIENT)
        shim = Path(shim_dir, "python")
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S {tmp}/client.py "$@"\n')
        shim.chmod(0o755)
        address = os.path.join(tmp, "zygote.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        server.listen()
        stop = threading.Event()
        thread = threading.Thread(target=_serve, args=(server, shim_dir, stop), daemon=True)
        thread.start()
        try:
            yield dict(
                env,
                PATH=os.pathsep.join([shim_dir, env.get("PATH", "")]),
                TFRB_DOC_PYTHON=sys.executable,
                TFRB_DOC_ZYGOTE=address,
            )
        finally:
            stop.set()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.connect(address)
            thread.join(30)
            server.close()
