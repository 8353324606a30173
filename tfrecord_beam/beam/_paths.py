"""Paths and compression names as Beam wants them.

Compression names: the user's spelling <-> Beam's `CompressionTypes` <-> the core's names.

Beam decides which files are splittable (and the sink which codec to write) from its own
`CompressionTypes`, so AUTO means Beam's suffix rule (`.gz` -> GZIP, `.deflate` -> DEFLATE,
`.zst` -> ZSTD, anything else uncompressed). TFRecord's "ZLIB" is Beam's DEFLATE
(zlib-wrapped deflate). The mapping is the codec table's (`compression.Codec.beam_type`).
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Union

from apache_beam.io.filesystem import CompressionTypes

from .. import compression as _compression
from ..compression import normalize as normalize_compression
from ..compression import resolve as resolve_compression

Compression = Union[None, str]

_TO_CORE: Dict[str, Optional[str]] = {CompressionTypes.UNCOMPRESSED: None}
_TO_CORE.update({codec.beam_type: codec.name for codec in _compression.CODECS.values()})
_FROM_CORE = {kind: beam for beam, kind in _TO_CORE.items()}
_BEAM_NAMES = "/".join(str(beam).upper() for beam in _TO_CORE)
_KIND_NAMES = ["uncompressed"] + [f"{c.name.upper()} ({c.beam_suffix})" for c in _compression.CODECS.values()]
_KINDS = ", ".join(_KIND_NAMES[:-1]) + " or " + _KIND_NAMES[-1]  # for messages


def to_beam(compression: Compression) -> str:
    """Beam's CompressionTypes value for None / "auto" / a codec name / a CompressionTypes.

    Spellings are the core's (`compression.normalize`); Beam's own type values
    ("uncompressed", "auto", "gzip", "deflate", "zstd") are among them.
    """
    try:
        kind = normalize_compression(compression)
    except ValueError:
        raise ValueError(
            f"unsupported TFRecord compression {compression!r}: use {_compression.described(auto=True)} "
            f"(or apache_beam.io.filesystem.CompressionTypes.{_BEAM_NAMES}/AUTO)"
        ) from None
    return CompressionTypes.AUTO if kind == "auto" else _FROM_CORE[kind]


def check_auto(path: str) -> None:
    """Refuse a name whose compression Beam's AUTO rule and the core's read differently.

    The core takes `.zlib`, `.zz` and `.gzip` as compressed; Beam's AUTO rule does not, so Beam
    would split such a file by byte range (or write it uncompressed). Ask for an explicit type.
    """
    beam_kind = _TO_CORE.get(CompressionTypes.detect_compression_type(path))
    core_kind = resolve_compression(path, "auto")
    if beam_kind != core_kind:
        said = core_kind or beam_kind
        assert said is not None  # they differ, so one names a compression
        raise ValueError(
            f"{path}: the name says {core_kind or 'uncompressed'} to tfrecord_beam but "
            f"{beam_kind or 'uncompressed'} to Beam's AUTO rule; pass compression_type={said!r} "
            f"if the data is {said}, or rename the file to end in {_BEAM_EXTENSION[said]}"
        )


_BEAM_EXTENSION = {codec.name: codec.beam_suffix for codec in _compression.CODECS.values()}


def written_compression(file_path_prefix: str, file_name_suffix: str, compression: str) -> Optional[str]:
    """The core's name of the codec a FileBasedSink writes with, for a Beam compression type.

    Under AUTO Beam's `FileSystems.create` picks it from the temporary file's name, which ends
    in `basename(file_path_prefix) + file_name_suffix` (not from the final shard name).
    """
    if compression == CompressionTypes.AUTO:
        temp_name = "." + os.path.basename(file_path_prefix) + file_name_suffix
        compression = CompressionTypes.detect_compression_type(temp_name)
    if compression not in _TO_CORE:
        raise ValueError(f"{file_path_prefix}...{file_name_suffix}: TFRecord files can be {_KINDS}, not {compression}")
    return _TO_CORE[compression]


def check_written_name(shard_name: str, written: Optional[str]) -> None:
    """Refuse shard names that read back (by Beam's AUTO rule or the core's) as another
    compression than the sink writes with AUTO (`written`).

    E.g. `file_name_suffix=".tfrecord.zlib"`: Beam writes it uncompressed, the core would
    read it as ZLIB; or a prefix "out.gz" with the default template: Beam writes GZIP into
    "out.gz-00000-of-00001", which reads back as uncompressed.
    """
    beam_kind = _TO_CORE.get(CompressionTypes.detect_compression_type(shard_name))
    core_kind = resolve_compression(shard_name, "auto")
    if beam_kind == written and core_kind == written:
        return
    named = core_kind if core_kind != written else beam_kind
    if written is None:
        assert named is not None  # one of them differs from `written`
        advice = (
            f"pass compression_type={named!r} to write {named} (and the same to read it back), or "
            f"end file_name_suffix in {_BEAM_EXTENSION[named]}"
        )
    else:
        advice = (
            f"put the extension at the end of file_name_suffix (file_name_suffix="
            f"{_BEAM_EXTENSION[written]!r}), or pass compression_type explicitly"
        )
    raise ValueError(
        f"{shard_name}: with compression_type AUTO the shards are written "
        f"{written or 'uncompressed'} (Beam picks the codec from the end of prefix + suffix), but the "
        f"name reads back as {named or 'uncompressed'}; {advice}"
    )


def for_file(path: str, compression: str) -> Optional[str]:
    """The core's compression name (None or a codec name) for one file under a Beam type."""
    if compression == CompressionTypes.AUTO:
        check_auto(path)
    kind = CompressionTypes.detect_compression_type(path) if compression == CompressionTypes.AUTO else compression
    if kind not in _TO_CORE:
        raise ValueError(f"{path}: TFRecord files can be {_KINDS}, not {kind}")
    return _TO_CORE[kind]


def local_absolute(path):
    """An absolute path for a relative local path or glob (Beam's local glob matching misses
    "data*.tfrecord" without a directory part); URIs and ValueProviders pass unchanged."""
    if isinstance(path, str) and "://" not in path:
        return os.path.abspath(path)
    return path
