"""Each Python block of the README runs on its own, as a reader would paste it: in a fresh
interpreter, in an empty directory, with nothing from the blocks before it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from helpers.fixtures import REPO


def _python_blocks():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"^( *)```python\n(.*?)^ *```", text, flags=re.S | re.M)
    return [textwrap.dedent(body) if indent else body for indent, body in blocks]


BLOCKS = _python_blocks()


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_readme_python_block_runs_alone(number, tmp_path):
    block = BLOCKS[number]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"README python block {number} failed on its own:\n{block}\n{done.stderr[-3000:]}"
    if "'missing'" in block:
        assert "'missing': array([], dtype=float32)" in done.stdout
