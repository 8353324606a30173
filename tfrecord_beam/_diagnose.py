"""Error reasons that say what the bytes are: a file that is no TFRecord, trailing bytes, a
gzip stream followed by junk. One place for these words, so every reader says the same.
"""

from __future__ import annotations

from typing import Optional

from . import compression as _compression
from ._engine._common import HEADER_SIZE

# Leading bytes of formats that end up where a TFRecord was expected, and what to say: first
# the codecs a TFRecord file may be wrapped in (zlib's one-byte magic has its own check below).
_CODEC_MAGIC = tuple(
    (codec.magic, f"{codec.name} data: name the file *{codec.suffixes[0]} or pass compression={codec.name!r}")
    for codec in _compression.CODECS.values()
    if len(codec.magic) > 1
)
_MAGIC = _CODEC_MAGIC + (
    (b"PAR1", "a Parquet file (PAR1 magic)"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"\x04\x22\x4d\x18", "LZ4 data"),
    (b"ARROW1", "an Arrow IPC file"),
    (b"ORC", "an ORC file"),
    (b"Obj\x01", "an Avro container file"),
    (b"\x93NUMPY", "a NumPy .npy file"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an ELF executable"),
)


def hex_bytes(data: bytes, limit: int = 16) -> str:
    """`data` as spaced hex, cut at `limit` bytes."""
    text = data[:limit].hex(" ")
    return text + (" ..." if len(data) > limit else "")


def looks_like(head: bytes) -> Optional[str]:
    """What the first bytes of a file look like, when they are a known format or text."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    if len(head) >= 2 and head[0] == 0x78 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib data: pass compression='zlib'"
    if head and all(32 <= b < 127 or b in b"\t\r\n" for b in head):
        return "text"
    return None


def not_a_tfrecord(head: bytes) -> str:
    """The reason for a file whose first 12 bytes are no valid record header."""
    what = looks_like(head)
    shown = hex_bytes(head)
    if what is None:
        return f"the file does not start with a valid TFRecord header (its first bytes: {shown}): not a TFRecord file, or damaged at its start"
    return f"the file does not start with a valid TFRecord header: its first bytes ({shown}) look like {what}"


def bad_length_crc(offset: int, head: bytes) -> str:
    """The reason for a header whose length CRC fails at `offset` (`head`: bytes from there)."""
    if offset == 0:
        return not_a_tfrecord(head)
    return "length CRC mismatch (corrupted record)"


def short_tail(rest: bytes, at_start: bool = False) -> str:
    """The reason for 1..11 bytes after the last whole record (too few for a header);
    `at_start`: they are the whole file."""
    n = len(rest)
    if at_start:
        what = looks_like(rest)
        return (
            f"the file holds {n} byte{'s' if n != 1 else ''} ({hex_bytes(rest)}{'' if what is None else ', ' + what}), "
            f"fewer than one {HEADER_SIZE}-byte TFRecord header: not a TFRecord file"
        )
    kind = "all zero (padding?)" if not rest.strip(b"\0") else "a record header cut short, or trailing bytes"
    return (
        f"the file ends with {n} byte{'s' if n != 1 else ''} after the last record ({hex_bytes(rest)}), "
        f"too few for a {HEADER_SIZE}-byte record header: {kind}"
    )


def gzip_trailing(compression: str, trailing: bytes) -> str:
    """The reason for bytes after the last complete compressed member that inflate to nothing."""
    if compression == "gzip" and trailing.startswith(b"\x1f\x8b"):
        return (
            f"the file ends {len(trailing)} bytes into a new gzip member ({hex_bytes(trailing)}), "
            "before its header is complete (truncated file; every record before it was read)"
        )
    return (
        f"{len(trailing)} byte{'s' if len(trailing) != 1 else ''} after the end of the last {compression} "
        f"member ({hex_bytes(trailing)}) are not {compression} data: trailing bytes appended to the "
        "file (every record before them was read)"
    )
