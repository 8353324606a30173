"""Shared test helpers: the TensorFlow-written golden fixtures and their manifest."""

from __future__ import annotations

import base64
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
from _golden import GOLDEN as FIXTURES  # noqa: E402
from _golden import MANIFEST  # noqa: E402




def fixture_files(predicate=lambda name, meta: True):
    """Names of manifest files matching `predicate`."""
    return sorted(name for name, meta in MANIFEST["files"].items() if predicate(name, meta))


@pytest.fixture
def fixtures_copy(tmp_path):
    """A writable copy of the golden folder (tests never write into it)."""
    dest = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dest)
    for p in dest.iterdir():
        p.chmod(0o644)
    return dest


def manifest_value(kind: str, value):
    """A manifest-encoded value (base64 / float bits / decimal string) as Python."""
    if kind == "bytes_list":
        return base64.b64decode(value) if isinstance(value, str) else value
    if kind == "float_list":
        return struct.unpack("<f", struct.pack("<I", int(value, 16)))[0]
    return int(value)


def same_floats(a, b) -> bool:
    """Bit-exact float32 equality (NaN payloads and -0.0 included)."""
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))
