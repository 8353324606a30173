"""Clear errors for the optional wings: `tfrecord_beam.torch` needs torch, `.beam` needs
apache-beam. A missing extra names the pip command instead of a bare ModuleNotFoundError."""

from __future__ import annotations

import importlib
from types import ModuleType

_HINTS = {
    "torch": (
        "torch",
        "pip install 'tfrecord_beam[torch]' (it pins torch==2.13.0). On Linux x86_64 pip's default "
        "torch wheel is a CUDA build of several GB; for the CPU build install it first from PyTorch's "
        "CPU index: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
    ),
    "apache_beam": (
        "beam",
        "pip install 'tfrecord_beam[beam]' (apache-beam 2.70-2.77; add [gcp] or [aws] for object stores)",
    ),
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency of one wing of the package is not installed."""


def require(module: str, wing: str) -> ModuleType:
    """Import `module` for `wing` (e.g. "tfrecord_beam.torch") or raise MissingExtraError
    saying which extra to install and how."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0]:
            raise  # something else is missing inside the dependency: its own error is clearer
        extra, how = _HINTS[module]
        raise MissingExtraError(
            f"{wing} needs {module}, which is not installed (the [{extra}] extra): {how}", name=module
        ) from exc


# Beam logs these through the root logger while it is imported (and, the root logger having no
# handler yet, configures it on the user's behalf): noise for every command and notebook.
_BEAM_IMPORT_NOISE = ("apitools not found",)


def require_beam(wing: str = "tfrecord_beam.beam") -> ModuleType:
    """Import apache_beam without its import-time root-logger warnings (and without letting
    them configure the root logger); MissingExtraError when it is not installed."""
    import logging
    import sys

    if sys.modules.get("apache_beam") is not None:
        return sys.modules["apache_beam"]
    root = logging.getLogger()
    catch = logging.NullHandler()  # root has a handler: logging.warning() won't call basicConfig()

    def drop_noise(record: logging.LogRecord) -> bool:
        return not any(text in record.getMessage() for text in _BEAM_IMPORT_NOISE)

    root.addHandler(catch)
    root.addFilter(drop_noise)
    try:
        module = require("apache_beam", wing)
        importlib.import_module("apache_beam.io.filesystems")  # the rest of the noisy imports
        return module
    finally:
        root.removeFilter(drop_noise)
        root.removeHandler(catch)
