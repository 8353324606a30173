"""The README: each Python block runs on its own as a reader would paste it (and a ```sh block
continues the block before it: helpers/doc_blocks.py), its links into the repository resolve,
and every flag of every command is named on its docs page. The pages of docs/ run in
test_docs_pages.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.doc_blocks import page_blocks, run_block
from helpers.fixtures import REPO

import pipelines

BLOCKS = page_blocks(REPO / "README.md")


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_python_block_runs_alone(block, tmp_path):
    run_block(block, tmp_path)


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
    **{f"pipelines.{job}": "jobs.md" for job in pipelines.JOBS},
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
