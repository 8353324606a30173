"""Where the TensorFlow-written golden files live (tests/golden/, made by make_golden.py there),
and their manifest: the one fixtures path of the test suite."""

from __future__ import annotations

import json
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
