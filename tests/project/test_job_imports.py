"""The jobs use the library through its public faces only (issue 25, item 2): no module of
`pipelines/` imports a private (underscore) module or name of `tfrecord_beam`, at module level
or inside a function. What a job needs from the internals is re-exported, under `__all__`, by
`tfrecord_beam.jobtools` (Beam-free command line), `tfrecord_beam.jobs` (Beam-free engine) and
the public modules of `tfrecord_beam.beam` (`jobio`, `stages`, `planned`, ...)."""

from __future__ import annotations

import ast
import importlib
from typing import List

import pytest
from helpers.fixtures import REPO

FACES = ("tfrecord_beam.jobtools", "tfrecord_beam.jobs", "tfrecord_beam.beam.jobio")


def private_imports(source: str, where: str) -> List[str]:
    """`where:line: what` for each import of a private module or name of tfrecord_beam."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue  # relative imports are pipelines' own modules
        for name in names:
            parts = name.split(".")
            if parts[0] == "tfrecord_beam" and any(p.startswith("_") for p in parts[1:]):
                found.append(f"{where}:{node.lineno}: {name}")
    return found


def test_no_job_imports_a_private_module_of_the_library():
    found = []
    for path in sorted((REPO / "pipelines").glob("*.py")):
        found += private_imports(path.read_text(encoding="utf-8"), f"pipelines/{path.name}")
    assert not found, "pipelines/ must import tfrecord_beam's public faces only:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from tfrecord_beam.beam import _fs",
        "from tfrecord_beam._usage import plural",
        "def f():\n    import tfrecord_beam.beam._progress",
        "from tfrecord_beam.jobs import _walk",
    ],
)
def test_the_check_sees_private_imports_anywhere(source):
    assert private_imports(source, "x.py")


def test_the_check_leaves_public_and_relative_imports_alone():
    source = "from tfrecord_beam import jobtools\nfrom tfrecord_beam.beam import jobio\nfrom . import _common\n"
    assert private_imports(source, "x.py") == []


@pytest.mark.parametrize("face", FACES)
def test_each_face_declares_names_that_exist(face):
    module = importlib.import_module(face)
    assert module.__all__, face
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{face}.__all__ names what it does not have: {missing}"


def test_the_command_line_face_loads_neither_numpy_nor_beam():
    """Jobs build their parsers from it before anything slow loads (`--help` answers at once)."""
    import subprocess
    import sys

    code = "import sys, tfrecord_beam.jobtools; print(sorted(m for m in ('numpy', 'apache_beam', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_every_job_module_is_in_the_list_the_tests_take():
    """A job is a public module of pipelines/; the tests every job must pass read `pipelines.JOBS`
    (`COMMANDS`: the jobs and the demo), so a job left out of it would be left out of them."""
    import pipelines

    modules = {p.stem for p in (REPO / "pipelines").glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(pipelines.COMMANDS)
    assert len(pipelines.COMMANDS) == len(set(pipelines.COMMANDS))
