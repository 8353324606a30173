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


def test_every_shell_block_is_run_or_marked_not_run():
    """Each ```bash/```sh block of the pages and the README either runs in a test or says why not
    (issue 37 item 2): a ```sh block after a ```python block runs with it (above); a block marked
    `<!-- run by: TESTFILE (NAME) -->` is run by that test, which names it (NAME); a block marked
    `<!-- not run: REASON -->` gives its reason. Any other is a failure."""
    from helpers.doc_blocks import shell_blocks

    python_run = {(b.page, b.shell) for page in [*site_pages(), REPO / "README.md"] for b in page_blocks(page)}
    unmarked, checked = [], 0
    for page in [*site_pages(), REPO / "README.md"]:
        for block in shell_blocks(page):
            checked += 1
            if block.marker == "run by":
                path, _, name = block.note.partition(" (")
                test_file = REPO / path
                assert test_file.exists(), f"{block.id}: run by {path}, which does not exist"
                assert name.endswith(")") and f'"{name[:-1]}"' in test_file.read_text(), (
                    f"{block.id}: {path} does not run a block named {name[:-1]!r}"
                )
            elif block.marker == "not run":
                assert len(block.note) > 20, f"{block.id}: say why it is not run"
            elif block.language == "sh" and (block.page, block.code) in python_run:
                pass
            else:
                unmarked.append(block.id)
    assert checked >= 8
    assert not unmarked, f"shell blocks neither run nor marked `<!-- not run: why -->`: {unmarked}"


def test_no_page_suggests_flags_no_test_runs():
    """--runner=FlinkRunner --flink_master=localhost:8081 was suggested by the docs and every
    job's --help; against `make runners`' cluster it fails (issue 37 item 3)."""
    import subprocess
    import sys

    for page in [*site_pages(), REPO / "README.md"]:
        for block in page_blocks(page):
            assert "--runner=FlinkRunner" not in block.code + (block.shell or ""), block.id
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.reshard", "--help"],
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "FlinkRunner" not in done.stdout and "--runner=PortableRunner --job_endpoint" in done.stdout
