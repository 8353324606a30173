"""pytest fixtures shared by the test files. Plain helpers live in the `helpers` package
(tests/helpers/); tests import those, never this module."""

from __future__ import annotations

import shutil

import pytest

from helpers.fixtures import FIXTURES


@pytest.fixture
def fixtures_copy(tmp_path):
    """A writable copy of the golden folder (tests never write into it)."""
    dest = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dest)
    for p in dest.iterdir():
        p.chmod(0o644)
    return dest
