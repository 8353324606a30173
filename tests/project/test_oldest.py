"""The supported version ranges (setup.py) hold for what is installed, in the main venv (the
newest) and in `make test-oldest`'s venv, where the floors themselves must be installed."""

from __future__ import annotations

import ast
import os
from importlib import metadata

from helpers.fixtures import REPO
from packaging.requirements import Requirement
from packaging.version import Version

RANGES = ("TORCH", "BEAM", "NUMPY", "PROTOBUF", "PYARROW")


def _setup_constants() -> dict:
    """The requirement strings assigned at the top level of setup.py (read, not run)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def test_installed_versions_are_in_the_supported_ranges():
    constants = _setup_constants()
    for name in RANGES:
        requirement = Requirement(constants[name])
        installed = metadata.version(requirement.name)
        assert requirement.specifier.contains(installed, prereleases=True), (name, str(requirement), installed)


def test_no_exact_pins_of_shared_dependencies():
    """A library states ranges: a pin would make pip replace a user's torch or Beam."""
    constants = _setup_constants()
    for name in RANGES:
        assert "==" not in constants[name] and ">=" in constants[name], constants[name]


def test_the_oldest_venv_holds_the_floors():
    """In `make test-oldest` (TFRB_OLDEST_PINS set), each pinned floor is what is imported, and
    each pin is the floor setup.py states (so the floors are what CI runs)."""
    pins = os.environ.get("TFRB_OLDEST_PINS")
    constants = _setup_constants()
    floors = {}
    for name in RANGES:
        requirement = Requirement(constants[name])
        (floor,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        floors[requirement.name] = floor
    if pins is None:  # the main venv: the floors are stated and parse, at least
        assert set(floors) == {"torch", "apache-beam", "numpy", "protobuf", "pyarrow"}
        return
    for pin in pins.split():
        requirement = Requirement(pin)
        (spec,) = requirement.specifier
        assert metadata.version(requirement.name) == spec.version, pin
        floor = floors[requirement.name]
        pinned = Version(spec.version)
        assert pinned.release[: len(floor.release)] == floor.release and pinned >= floor, (
            f"{pin} is not the floor {floor} that setup.py states"
        )
    import apache_beam
    import numpy
    import pyarrow

    versions = {"apache-beam": apache_beam.__version__, "numpy": numpy.__version__, "pyarrow": pyarrow.__version__}
    for pin in pins.split():
        requirement = Requirement(pin)
        if requirement.name in versions:
            assert versions[requirement.name] == next(iter(requirement.specifier)).version, pin
