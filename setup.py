"""Build and install tfrecord_beam; the compiled core is optional and never blocks installation."""

import glob
import os
import re
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
    """The version from tfrecord_beam/_version.py (one place; the package is not imported)."""
    with open(os.path.join(HERE, "tfrecord_beam", "_version.py"), encoding="utf-8") as handle:
        return re.search(r'__version__ = "([^"]+)"', handle.read()).group(1)


NATIVE_SOURCES = sorted(
    os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "tfrecord_beam", "_native", "*.c"))
)
# the headers: a change to one alone (tfr_wire.h's inline varint reader) must rebuild the core
NATIVE_HEADERS = sorted(
    os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "tfrecord_beam", "_native", "*.h"))
)


class OptionalBuildExt(build_ext):
    """Build the C extension when a compiler is there; otherwise warn and install the pure twins."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure falls back to pure Python
            self._skip(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc)

    @staticmethod
    def _skip(exc):
        sys.stderr.write(
            f"WARNING: tfrecord_beam's compiled core was not built ({exc}); the pure-Python engine will be used.\n"
        )


def _extensions():
    if not NATIVE_SOURCES or os.environ.get("TFRECORD_BEAM_NO_EXT"):
        return []
    import numpy  # build requirement (pyproject.toml)

    return [
        Extension(
            "tfrecord_beam._native._core",
            sources=NATIVE_SOURCES,
            depends=NATIVE_HEADERS,
            include_dirs=[numpy.get_include(), os.path.join("tfrecord_beam", "_native")],
            extra_compile_args=["-O3", "-std=c11", "-fno-strict-aliasing"],
        )
    ]


# Supported ranges (docs/index.md "Supported versions" says why each floor; `make test-oldest` runs a
# reduced suite on the floors of Beam, pyarrow, numpy and protobuf, `make test` on the newest).
# torch: a range, never a pin; the Makefile installs the CPU/CUDA build this machine should
# use first, so pip keeps it (a bare `torch` would pull a multi-GB CUDA build).
TORCH = "torch>=2.0,<3"
# 2.70: the newest Beam whose Flink and Spark runners Maven Central serves (runners/*.pom.xml);
# jobs on those job servers run from a venv pinned to it, so the code is kept working on both.
BEAM = "apache-beam>=2.70,<2.78"
# Object stores: the core reads them through pyarrow.fs (gs://, s3://, hdfs://) and fsspec for
# other schemes; Beam code through Beam's FileSystems, whose gs:// / s3:// support comes with
# Beam's own extras (s3:// needs boto3).
BEAM_AWS = "apache-beam[aws]>=2.70,<2.78"
BEAM_GCP = "apache-beam[gcp]>=2.70,<2.78"
NUMPY = "numpy>=1.23.2,<3"
PROTOBUF = "protobuf>=4.25,<7"
PYARROW = "pyarrow>=14"
ZSTANDARD = "zstandard>=0.18"  # Beam's own floor

setup(
    name="tfrecord_beam",
    version=_version(),
    description="Write, read, index, reshard, mix and convert TFRecord data without TensorFlow.",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    if os.path.exists(os.path.join(HERE, "README.md"))
    else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["tfrecord_beam", "tfrecord_beam.*", "pipelines", "pipelines.*"]),
    package_data={"tfrecord_beam": ["py.typed", "_native/*.pyi", "_native/*.h", "_native/*.c"]},
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
    install_requires=[
        NUMPY,
        PROTOBUF,
        "google-crc32c>=1.5",
        PYARROW,
    ],
    extras_require={
        "beam": [BEAM],
        "aws": [BEAM_AWS],
        "gcp": [BEAM_GCP],
        "fsspec": ["fsspec>=2023.1"],
        "torch": [TORCH],
        "fast": ["isal>=1.6"],
        # ZSTD-compressed TFRecord files (`compression="zstd"`, `.zst`); Beam brings it too
        "zstd": [ZSTANDARD],
        "all": [BEAM, TORCH, "isal>=1.6", ZSTANDARD],
        # bench/remote.py's peer, mosaicml-streaming, needs these to import; it and torchvision
        # themselves go in with --no-deps (`make bench-remote`): their pins would move numpy/torch
        "bench-remote": [
            "transformers==4.57.6",
            "tqdm",
            "xxhash>=3,<4",
            "zstd",
            "python-snappy",
            "brotli",
            "catalogue",
        ],
        # moto's standalone S3 server (on loopback, started by a test fixture) + Beam's s3://
        # support: the object-store tests run end to end without a network.
        # `make lint` (run by .ci/run before the tests): ruff's linter and formatter, mypy
        "lint": ["ruff==0.17.6", "mypy==2.4.1"],
        # `make docs` (run by .ci/run): the site in docs/, built by mkdocs --strict, with an API
        # reference from the docstrings
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.26,<2"],
        "test": [
            "pytest>=7",
            "pytest-xdist>=3",
            "build>=1",
            "hypothesis>=6",
            "isal>=1.6",
            "torchdata==0.11.0",
            "tfrecord==1.14.6",
            "moto[s3]>=5",
            "flask>=2",
            "flask-cors>=3",
            BEAM_AWS,
            # gs:// end to end (tests/remote/test_gcs.py, against fake-gcs-server): Beam's GCS filesystem
            BEAM_GCP,
            "fsspec>=2023.1",
        ],
    },
    entry_points={
        "console_scripts": [
            "tfrecord2idx=tfrecord_beam.tools.tfrecord2idx:console_main",
            "tfrecord-beam=tfrecord_beam.cli:main",
        ]
    },
)
