"""Every Python block of the README and of the documentation pages (docs/**/*.md, except the
not-yet-folded notes in docs/incoming/) runs on its own, as a reader would paste it: in a fresh
interpreter, in an empty directory, with nothing from the blocks before it.

A ```sh block is a shell session that continues the Python block just before it on the same
page (the README's tour: Python writes data, the shell runs a job and the CLI on it): it runs
under `bash -euo pipefail` in that block's directory, right after it. Other shell fences
(```bash, ```text) are shown, not run.
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

import pytest
from helpers.fixtures import REPO

_FENCE = re.compile(r"^( *)```(python|sh)\n(.*?)^ *```", flags=re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    number: int  # the block's place among the page's Python blocks
    code: str
    shell: Optional[str]  # the ```sh block that continues it, if any


def documentation_pages() -> List[Path]:
    """README.md and every page of the site (docs/incoming/ holds notes, not pages)."""
    pages = [REPO / "README.md"]
    pages += sorted(p for p in (REPO / "docs").rglob("*.md") if "incoming" not in p.relative_to(REPO / "docs").parts)
    return pages


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


BLOCKS = [block for page in documentation_pages() for block in page_blocks(page)]


def test_the_readme_has_python_examples():
    assert len([b for b in BLOCKS if b.page == "README.md"]) >= 3
    assert len(BLOCKS) >= 10


def test_incoming_notes_are_not_pages():
    assert not [p for p in documentation_pages() if "incoming" in p.parts]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.number}" for b in BLOCKS])
def test_documentation_python_block_runs_alone(block, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # `python`, `tfrecord-beam` and the other console scripts of this interpreter come first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", block.code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (
        f"{block.page} python block {block.number} failed on its own:\n{block.code}\n{done.stderr[-3000:]}"
    )
    if "'missing'" in block.code:
        assert "'missing': array([], dtype=float32)" in done.stdout
    if block.shell is not None:
        shell = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.shell],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert shell.returncode == 0, (
            f"{block.page}: the sh block after python block {block.number} failed:\n{block.shell}\n"
            f"{shell.stdout[-2000:]}\n{shell.stderr[-3000:]}"
        )


def _anchors(page: Path) -> set:
    """The heading anchors of a page, as mkdocs' toc names them (lowercase, punctuation dropped, dashes)."""
    headings = re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M), flags=re.M)
    return {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h.strip().lower())) for h in headings}


def test_readme_links_resolve():
    """The README is not built by mkdocs: its links into the repository and their anchors are checked here."""
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into docs/"
    for link in local:
        target, _, anchor = link.partition("#")
        path = REPO / target
        assert path.exists(), f"README links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(path), f"README links to {link}: no such heading in {target}"


# every command a user runs, by the page that documents it
COMMANDS = {
    **{
        f"pipelines.{job}": "jobs.md"
        for job in ["build_index", "reshard", "mix", "parquet_to_tfrecord", "tfrecord_to_parquet"]
    },
    **{f"tfrecord_beam.cli {sub}": "cli.md" for sub in ["inspect", "head", "count", "verify", "schema"]},
    "tfrecord_beam.tools.tfrecord2idx": "cli.md",
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_is_documented(command):
    """Each flag a command's --help lists before its examples (its own, not Beam's) is named on its page."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", *command.split(), "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    own = done.stdout.split("\nexamples:")[0].split("Any other --flag")[0]  # not the examples' Beam flags
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", own)) - {"--help"}
    assert flags, f"no flags found in {command} --help"
    page = COMMANDS[command]
    documented = set(re.findall(r"--[a-z][a-z0-9_-]*", (REPO / "docs" / page).read_text()))
    assert not flags - documented, f"{command} flags missing from docs/{page}: {sorted(flags - documented)}"
