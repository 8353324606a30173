"""What a new user meets first: versions and engine, quiet imports, missing extras, the
`tfrecord` package's reader helpers (issue 15)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.fixtures import REPO

import tfrecord_beam
from tfrecord_beam import cli, encode_example, encode_sequence_example, example_pb2, reader
from tfrecord_beam.errors import FeatureKindError


def _python(*args: str, code: str = None, cwd=None) -> subprocess.CompletedProcess:
    command = [sys.executable, *(["-c", textwrap.dedent(code)] if code else []), *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(command, cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=180)


# --- versions ----------------------------------------------------------------------------------


def test_version_has_one_source():
    text = (REPO / "tfrecord_beam" / "_version.py").read_text()
    assert re.search(r'__version__ = "([^"]+)"', text).group(1) == tfrecord_beam.__version__
    setup = (REPO / "setup.py").read_text()
    assert "version=_version()" in setup and '"0.' not in setup.split("version=")[1].split("\n")[0]


def test_engine_info_reports_the_engine_in_use():
    from tfrecord_beam import _engine

    info = tfrecord_beam.engine_info()
    assert info["engine"] == _engine.ENGINE and info["version"] == tfrecord_beam.__version__
    assert info["inflater"] in ("isal", "zlib")
    assert (
        ("sse4.2" in info["crc32c"] or "table" in info["crc32c"])
        if _engine.NATIVE
        else "google-crc32c" in info["crc32c"]
    )


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"tfrecord_beam {tfrecord_beam.__version__}" in out and "engine" in out


def test_python_dash_m_entry_points_print_the_version():
    for args in (["-m", "tfrecord_beam", "--version"], ["-m", "pipelines.reshard", "--version"]):
        done = _python(*args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"tfrecord_beam {tfrecord_beam.__version__} (engine ")
    pure = subprocess.run(
        [sys.executable, "-m", "tfrecord_beam", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO), TFRECORD_BEAM_PURE="1"),
    )
    assert "engine pure" in pure.stdout


# --- quiet imports -----------------------------------------------------------------------------


def test_imports_print_nothing_and_leave_the_root_logger_alone():
    done = _python(
        code="""
        import logging
        import tfrecord_beam, tfrecord_beam.beam, pipelines.reshard
        assert logging.getLogger().handlers == [], logging.getLogger().handlers
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n" and done.stderr == ""


def test_job_help_has_no_beam_noise():
    done = _python("-m", "pipelines.mix", "--help")
    assert done.returncode == 0 and "apitools" not in done.stderr and done.stderr == ""


# --- missing extras ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, wing, extra",
    [("torch", "tfrecord_beam.torch", "[torch]"), ("apache_beam", "tfrecord_beam.beam", "[beam]")],
)
def test_missing_extra_names_the_pip_command(module, wing, extra):
    done = _python(
        code=f"""
        import sys
        sys.modules[{module!r}] = None  # as if it were not installed
        try:
            import {wing}
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingExtraError")
    assert f"tfrecord_beam{extra}" in done.stdout and "pip install" in done.stdout
    if module == "torch":
        assert "CUDA" in done.stdout and "cpu" in done.stdout


# --- the tfrecord package's reader helpers --------------------------------------------------------


MAPPING = {"byte": "bytes_list", "float": "float_list", "int": "int64_list"}


def test_extract_feature_dict_on_features():
    ex = example_pb2.Example.FromString(
        encode_example({"a": ([1, 2], "int"), "b": (b"x", "byte"), "c": ([0.5], "float")})
    )
    got = reader.extract_feature_dict(ex.features, None, MAPPING)
    assert sorted(got) == ["a", "b", "c"] and got["b"] == b"x"
    assert got["a"].dtype == np.int64 and got["a"].tolist() == [1, 2]
    assert got["c"].dtype == np.float32 and got["c"].tolist() == [0.5]
    assert list(reader.extract_feature_dict(ex.features, ["a"], MAPPING)) == ["a"]
    with pytest.raises(TypeError, match="Incompatible type 'float' for `a`"):
        reader.extract_feature_dict(ex.features, {"a": "float"}, MAPPING)
    with pytest.raises(KeyError, match="zz"):
        reader.extract_feature_dict(ex.features, {"zz": "int"}, MAPPING)
    with pytest.raises(TypeError, match="Features or example_pb2.FeatureLists"):
        reader.extract_feature_dict(ex, None, MAPPING)


def test_extract_feature_dict_on_feature_lists_and_process_feature():
    seq = example_pb2.SequenceExample.FromString(
        encode_sequence_example({"n": (2, "int")}, {"s": ([[1, 2], [3]], "int")})
    )
    got = reader.extract_feature_dict(seq.feature_lists, ["s"], MAPPING)
    assert [v.tolist() for v in got["s"]] == [[1, 2], [3]]
    feature = seq.context.feature["n"]
    assert reader.process_feature(feature, "int", MAPPING, "n").tolist() == [2]
    with pytest.raises(FeatureKindError):
        reader.process_feature(feature, "byte", MAPPING, "n")
    empty = example_pb2.Feature()
    assert reader.process_feature(empty, "float", MAPPING, "e").dtype == np.float32
    assert tfrecord_beam.reader.process_feature is reader.process_feature
