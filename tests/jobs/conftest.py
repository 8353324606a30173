"""Fixtures of the job tests."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers.scale import Inputs, Scale


@pytest.fixture(scope="session")
def scale(tmp_path_factory):
    """The bounded-memory tests' inputs and baselines (`helpers.scale`), shared by the modules
    that use them. The inputs (~450 MB) are made once per test session, shared by its xdist
    workers (under their common base directory) and removed by the last of them to finish;
    the baselines are this process's."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's base is in the session's
        base = base.parent
    inputs = Inputs(base / "scale-inputs")
    root = tmp_path_factory.mktemp("scale")
    try:
        yield Scale(root, inputs)
    finally:
        inputs.close()
        shutil.rmtree(root, ignore_errors=True)
