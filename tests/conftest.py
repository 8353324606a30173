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
FIXTURES = REPO.parent / "shared" / "fixtures"


def _manifest():
    path = FIXTURES / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


MANIFEST = _manifest()
needs_fixtures = pytest.mark.skipif(MANIFEST is None, reason=f"golden fixtures not found at {FIXTURES}")


def fixture_files(predicate=lambda name, meta: True):
    """Names of manifest files matching `predicate` (empty when the fixtures are absent)."""
    if MANIFEST is None:
        return []
    return sorted(name for name, meta in MANIFEST["files"].items() if predicate(name, meta))


@pytest.fixture
def fixtures_copy(tmp_path):
    """A writable copy of the fixtures folder (never write into the shared one)."""
    if MANIFEST is None:
        pytest.skip(f"golden fixtures not found at {FIXTURES}")
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
