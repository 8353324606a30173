"""Every Python block of the documentation site's pages (docs/**/*.md but docs/incoming/) runs on
its own as a reader would paste it, and a ```sh block continues the block before it
(helpers/doc_blocks.py, the same runner as the README's in test_readme.py)."""

from __future__ import annotations

import pytest
from helpers.doc_blocks import page_blocks, run_block, site_pages
from helpers.fixtures import REPO

BLOCKS = [block for page in site_pages() for block in page_blocks(page)]


def test_the_pages_have_python_examples():
    assert len(BLOCKS) >= 10


def test_incoming_notes_are_not_pages():
    assert site_pages() and not [p for p in site_pages() if "incoming" in p.relative_to(REPO / "docs").parts]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_page_python_block_runs_alone(block, tmp_path):
    run_block(block, tmp_path)


def test_a_sh_blocks_python_is_forked_from_the_zygote_and_acts_as_python(tmp_path):
    """A ```sh block's `python -c`/`python -m` runs in a child of the zygote (its preloaded Beam
    is already in sys.modules), with the block's arguments, directory, environment and piped
    stdin, its output and exit status; other uses of `python` are the interpreter itself."""

    from helpers.doc_blocks import _block_env, run_shell

    script = "\n".join(
        [
            "export ANSWER=42",
            """python -c 'import os, sys; print(sys.argv[1:], os.getcwd(), os.environ["ANSWER"])' a 'b c'""",
            "python -c 'import sys; print(\"apache_beam\" in sys.modules)'",
            "echo piped | python -c 'import sys; print(sys.stdin.read().strip())'",
            "python -c 'import sys; sys.stderr.write(\"to stderr\\n\"); raise SystemExit(3)' || echo status $?",
            "python -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)' || echo status $?",
            'echo \'import sys; print("script", "apache_beam" in sys.modules)\' > s.py && python s.py',
            "python -m json.tool <<< '[1]'",
        ]
    )
    done = run_shell(script, tmp_path, _block_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"['a', 'b c'] {tmp_path} 42",
        "True",
        "piped",
        "status 3",
        "status 143",
        "script False",
        "[",
        "    1",
        "]",
    ]
    assert done.stderr.splitlines()[0] == "to stderr" and "Terminated" in done.stderr  # bash's, for the signal
