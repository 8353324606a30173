"""pytest fixtures shared by the test files. Plain helpers live in the `helpers` package
(tests/helpers/); tests import those, never this module."""

from __future__ import annotations

import shutil

import pytest
from helpers.fixtures import FIXTURES
from helpers.parity import NATIVE

from tfrecord_beam import _engine, _streams
from tfrecord_beam._engine import _decode, _framing


@pytest.fixture
def fixtures_copy(tmp_path):
    """A writable copy of the golden folder (tests never write into it)."""
    dest = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dest)
    for p in dest.iterdir():
        p.chmod(0o644)
    return dest


@pytest.fixture(params=["native", "pure"])
def engine(request, monkeypatch):
    """Run the test on one framing engine (the compiled core, or its pure twin), its batch
    decoder too. A test module may define its own `engine` (other functions patched)."""
    if request.param == "native":
        if NATIVE is None:
            pytest.skip("compiled core not built")
        impl = NATIVE
    else:
        impl = _framing
    for name in ("scan_frames", "masked_crc32c", "find_length_crc"):
        monkeypatch.setattr(_engine, name, getattr(impl, name))
    columnar = NATIVE if impl is NATIVE else _decode
    monkeypatch.setattr(_engine, "decode_examples", columnar.decode_examples)
    return request.param


@pytest.fixture(params=sorted(_streams.INFLATERS))
def inflater(request, monkeypatch):
    """Run the test with each of the stream inflaters (zlib, and isal where installed)."""
    monkeypatch.setattr(_streams, "DEFAULT_INFLATER", request.param)
    return request.param
