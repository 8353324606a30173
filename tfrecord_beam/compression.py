"""One home for compression: the codec table, and the one rule from a user's spelling to a codec.

A TFRecord file is framed the same inside any compressed stream, so a codec is only: its
names, the file suffixes that imply it, Beam's `CompressionTypes` value, a stream reader
and a compressor, and whether it can be entered mid-file by its members (block-gzip).
Each codec is one `Codec` entry in `CODECS`; adding one is adding an entry (and, when it
is not a zlib-family stream, its reader module).

Every edge (the public readers and writers, the CLI, the jobs' argparse) resolves the
user's spelling once with `normalize` / `resolve`. What travels down is the codec's *name*:
None (uncompressed), "gzip", "zlib" or "zstd", plain strings that pickle into Beam tasks
and manifests; inner code asks `get(name)` for the codec's behaviour instead of comparing
or re-normalising names. Argparse flags take `choices=` and their help text from here
(`add_argument`), and the tests take their codec lists from `NAMES`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Dict, Optional, Tuple

__all__ = [
    "Codec",
    "CODECS",
    "NAMES",
    "CHOICES",
    "normalize",
    "resolve",
    "get",
    "open_reader",
    "read_at",
    "compressor",
    "suffix",
    "seeks_by_members",
    "add_argument",
    "described",
]


@dataclass(frozen=True)
class Codec:
    """One compression a TFRecord stream can be wrapped in.

    Attributes:
        name: the canonical name that travels through the code ("gzip").
        aliases: other spellings accepted at the edges, lower case ("gz").
        suffixes: file name endings read as this codec under "auto", lower case; the first
            is the one the jobs give the files they write.
        beam_type: Beam's `CompressionTypes` value for it ("gzip", "deflate", "zstd").
        beam_suffix: the ending Beam's own AUTO rule reads as `beam_type`.
        seeks_by_members: a file of independent members whose table (in the index) lets a
            reader start mid-file (block-gzip); otherwise a compressed file is read from its start.
        magic: the first bytes of such a stream (to say what a mislabelled file is).
        module: the Python module it needs beyond the standard library, if any.
        extra: the `pip install tfrecord_beam[EXTRA]` that provides `module`.
        reader: `(raw, name, path) -> stream` with the `_streams.DecodingReader` interface.
        compressor: `(level) -> object with compress(data) and flush()`; level -1: the default.
    """

    name: str
    aliases: Tuple[str, ...]
    suffixes: Tuple[str, ...]
    beam_type: str
    beam_suffix: str
    seeks_by_members: bool
    magic: bytes
    reader: Callable[[BinaryIO, str, Optional[str]], Any]
    compressor: Callable[[int], Any]
    module: Optional[str] = None
    extra: Optional[str] = None


def _inflating_reader(raw: BinaryIO, name: str, path: Optional[str]) -> Any:
    from ._streams import InflatingReader

    return InflatingReader(raw, name, path)


def _deflater(wbits: int) -> Callable[[int], Any]:
    def make(level: int) -> Any:
        import zlib

        return zlib.compressobj(level, zlib.DEFLATED, wbits)

    return make


def _zstd_reader(raw: BinaryIO, name: str, path: Optional[str]) -> Any:
    from ._zstd import ZstdReader

    return ZstdReader(raw, path)


def _zstd_compressor(level: int) -> Any:
    from ._zstd import compressor

    return compressor(level)


_GZIP_WBITS = 16 + 15  # zlib.MAX_WBITS with the gzip wrapper
_ZLIB_WBITS = 15

CODECS: Dict[str, Codec] = {
    codec.name: codec
    for codec in (
        Codec(
            name="gzip",
            aliases=("gz",),
            suffixes=(".gz", ".gzip"),
            beam_type="gzip",
            beam_suffix=".gz",
            seeks_by_members=True,
            magic=b"\x1f\x8b",
            reader=_inflating_reader,
            compressor=_deflater(_GZIP_WBITS),
        ),
        Codec(
            name="zlib",
            aliases=("deflate",),
            suffixes=(".zlib", ".zz", ".deflate"),
            beam_type="deflate",
            beam_suffix=".deflate",
            seeks_by_members=False,
            magic=b"\x78",
            reader=_inflating_reader,
            compressor=_deflater(_ZLIB_WBITS),
        ),
        Codec(
            name="zstd",
            aliases=("zst", "zstandard"),
            suffixes=(".zst", ".zstd"),
            beam_type="zstd",
            beam_suffix=".zst",
            seeks_by_members=False,
            magic=b"\x28\xb5\x2f\xfd",
            reader=_zstd_reader,
            compressor=_zstd_compressor,
            module="zstandard",
            extra="zstd",
        ),
    )
}

NAMES: Tuple[Optional[str], ...] = (None, *CODECS)  # every resolved value: None is uncompressed
CHOICES: Tuple[str, ...] = ("none", *CODECS)  # the spellings flags offer for an output
_UNCOMPRESSED = ("", "none", "uncompressed")
_ALIASES: Dict[Optional[str], Optional[str]] = {None: None, "auto": "auto"}
_ALIASES.update({spelling: None for spelling in _UNCOMPRESSED})
for _codec in CODECS.values():
    _ALIASES.update({spelling: _codec.name for spelling in (_codec.name, *_codec.aliases)})
_SUFFIXES = {end: codec.name for codec in CODECS.values() for end in codec.suffixes}


def described(auto: bool = False) -> str:
    """The accepted names for messages and help texts: "None, 'gzip', 'zlib', 'zstd' or 'auto'"."""
    names = ["None"] + [repr(name) for name in CODECS] + (["'auto'"] if auto else [])
    return ", ".join(names[:-1]) + " or " + names[-1]


def normalize(compression: Optional[str]) -> Optional[str]:
    """A codec name, None (uncompressed) or "auto" for any accepted spelling ("GZIP", "deflate",
    "none", "zst", ...). Raises ValueError naming the accepted ones."""
    key = compression.strip().lower() if isinstance(compression, str) else compression
    if key not in _ALIASES:
        raise ValueError(f"unknown compression {compression!r}: use {described(auto=True)}")
    return _ALIASES[key]


def resolve(path: Optional[str], compression: Optional[str] = "auto") -> Optional[str]:
    """The codec name (or None) of one file: "auto" looks at the file name's suffix, as Beam
    does (a remote URI's query string, `x.tfrecord.gz?endpoint_override=...`, is not part of it)."""
    kind = normalize(compression)
    if kind != "auto":
        return kind
    if path is None or hasattr(path, "read"):
        return None
    from . import fs

    name = fs.split_query(os.fspath(path))[0]
    return _SUFFIXES.get(os.path.splitext(name)[1].lower())


def get(name: Optional[str]) -> Optional[Codec]:
    """The codec of a resolved name (None: uncompressed)."""
    if name is None:
        return None
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a resolved codec name: use one of {NAMES}") from None


def open_reader(raw: BinaryIO, name: Optional[str], path: Optional[str] = None) -> Any:
    """The uncompressed stream over a raw binary file (the file itself when uncompressed)."""
    codec = get(name)
    if codec is None:
        return raw
    _check_module(codec, path)
    return codec.reader(raw, codec.name, path)


def read_at(raw: BinaryIO, name: Optional[str], offset: int, size: int) -> bytes:
    """`size` bytes of the uncompressed stream at `offset` (a compressed file is decoded from
    its start: it cannot be entered mid-way without a member table)."""
    if name is None:
        raw.seek(offset)
        return raw.read(size)
    stream = open_reader(raw, name)
    stream.skip(offset)
    return stream.read(size)


def compressor(name: str, level: int = -1, path: Optional[str] = None) -> Any:
    """A fresh compressor (`compress(data)`, `flush()`) for one stream of codec `name`."""
    codec = get(name)
    assert codec is not None, "an uncompressed stream has no compressor"
    _check_module(codec, path)
    return codec.compressor(level)


def suffix(name: Optional[str]) -> str:
    """The file name ending the jobs write for a codec ("" uncompressed)."""
    codec = get(name)
    return codec.suffixes[0] if codec is not None else ""


def seeks_by_members(name: Optional[str]) -> bool:
    """Whether files of this codec can carry a member table that lets a reader start mid-file."""
    codec = get(name)
    return codec is not None and codec.seeks_by_members


def _check_module(codec: Codec, path: Optional[str]) -> None:
    if codec.module is None:
        return
    import importlib.util

    if importlib.util.find_spec(codec.module) is None:
        where = f"{path}: " if path else ""
        raise ImportError(
            f"{where}{codec.name} needs the {codec.module!r} package: pip install 'tfrecord_beam[{codec.extra}]'"
        )


def _flag_value(text: str) -> str:
    """argparse `type=`: any accepted spelling as its canonical flag value ("GZ" -> "gzip",
    "uncompressed" -> "none"); an unknown one passes through for `choices` to refuse. An empty
    (or blank) value is unknown here: `compression=""` means uncompressed to the Python API, but
    on a command line it is an unset variable (`--compression "$C"`), never a choice; a value
    with blanks around it (`" gzip"`) is refused too (exit 2) rather than trimmed, as the
    Python API's `normalize` trims it: on a command line it is a quoting slip."""
    if not text.strip() or text != text.strip():  # " gzip": a garbled variable, refused like ""
        return text
    try:
        kind = normalize(text)
    except ValueError:
        return text
    return "none" if kind is None else kind


def add_argument(
    parser: argparse.ArgumentParser, flag: str, *aliases: str, default: str, auto: bool, what: str = ""
) -> argparse.Action:
    """Add a compression flag whose choices and help come from the table.

    `auto` offers "auto" (from each file's name: inputs); `what` starts the help text. The
    value parsed is a canonical spelling ("none", "gzip", ..., "auto") for `resolve`.
    """
    choices = (*CHOICES, "auto") if auto else CHOICES
    suffixes = ", ".join(f"{codec.name}: {'/'.join(codec.suffixes)}" for codec in CODECS.values())
    text = (what + ": " if what else "") + ", ".join(choices)
    if auto:
        text += f" (auto: from each file's name, {suffixes}; else uncompressed)"
    return parser.add_argument(
        flag, *aliases, default=default, type=_flag_value, choices=choices, help=text + f" (default: {default})"
    )
