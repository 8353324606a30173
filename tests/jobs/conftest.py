"""Fixtures of the job tests."""

from __future__ import annotations

import shutil

import pytest
from helpers.scale import Scale


@pytest.fixture(scope="session")
def scale(tmp_path_factory):
    """The bounded-memory tests' inputs and baselines (`helpers.scale`), shared by the modules
    that use them and made once per session; deleted at its end (~450 MB)."""
    root = tmp_path_factory.mktemp("scale")
    yield Scale(root)
    shutil.rmtree(root, ignore_errors=True)
