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
