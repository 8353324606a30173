"""What the package runs on: which engine, which CRC32C, which inflater (for bug reports)."""

from __future__ import annotations

from typing import Dict, Union


def engine_info() -> Dict[str, Union[str, bool]]:
    """The engine in use: `engine` ("native" compiled core or "pure" Python twins), whether the
    native CRC32C uses the SSE4.2 instruction (`crc32c`), google-crc32c's implementation (used
    by the pure engine), the gzip/zlib inflater (`isal` or `zlib`) and the version."""
    import google_crc32c

    from . import _engine, _streams
    from ._version import __version__

    if _engine.NATIVE:
        from ._native import _core

        crc = "sse4.2 (hardware)" if _core.crc32c_hw() else "table (software)"
    else:
        crc = f"google-crc32c ({google_crc32c.implementation})"
    return {
        "version": __version__,
        "engine": _engine.ENGINE,
        "pure_requested": _engine.PURE_REQUESTED,
        "crc32c": crc,
        "inflater": _streams.DEFAULT_INFLATER,
    }


def describe() -> str:
    """One line for `--version`: version, engine, CRC32C and inflater."""
    info = engine_info()
    return (
        f"tfrecord_beam {info['version']} (engine {info['engine']}, crc32c {info['crc32c']}, "
        f"inflater {info['inflater']})"
    )
