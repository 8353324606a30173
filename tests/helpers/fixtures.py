"""Where the test inputs are: the one place that names the repository, tests/ and the golden folder.

FIXTURES holds the TensorFlow-written golden files (made by make_golden.py there) and MANIFEST
their manifest; DATA holds other committed inputs (data/block_gzip/...). Tests never write into
either (`fixtures_copy` in conftest.py gives a writable copy).
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "golden"
DATA = TESTS / "data"
FUZZ_CORPUS = TESTS / "fuzz_corpus"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())


def fixture_files(predicate=lambda name, meta: True):
    """Names of manifest files matching `predicate`."""
    return sorted(name for name, meta in MANIFEST["files"].items() if predicate(name, meta))


def manifest_value(kind: str, value):
    """A manifest-encoded value (base64 / float bits / decimal string) as Python."""
    if kind == "bytes_list":
        return base64.b64decode(value) if isinstance(value, str) else value
    if kind == "float_list":
        return struct.unpack("<f", struct.pack("<I", int(value, 16)))[0]
    return int(value)
