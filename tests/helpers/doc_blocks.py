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
block's directory, right after it. Other shell fences (```bash, ```text) are shown, not run.
docs/incoming/ holds notes not yet folded into a page: not pages, not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

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
