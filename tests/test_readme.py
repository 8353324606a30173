"""The README's Python examples run as written (in order, in one fresh directory)."""

from __future__ import annotations

import re

from conftest import REPO


def _python_blocks():
    text = (REPO / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_examples_run(tmp_path, monkeypatch, capsys):
    blocks = _python_blocks()
    assert blocks, "the README has Python examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for number, block in enumerate(blocks):
        try:
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the message names the block
            raise AssertionError(f"README python block {number} failed: {exc!r}\n{block}") from exc
    out = capsys.readouterr().out
    assert "'missing': array([], dtype=float32)" in out
