"""The codecs the tests run over, from the one table (`tfrecord_beam.compression`), so a new
codec is tested wherever the others are without editing each test."""

from __future__ import annotations

from typing import Optional, Tuple

from tfrecord_beam import compression

ALL: Tuple[Optional[str], ...] = compression.NAMES  # None (uncompressed) and every codec
COMPRESSED: Tuple[str, ...] = tuple(compression.CODECS)  # every codec
STREAMS: Tuple[str, ...] = tuple(n for n, c in compression.CODECS.items() if not c.seeks_by_members)
SUFFIXES = [(end, codec.name) for codec in compression.CODECS.values() for end in codec.suffixes]


def compress(name: str, data: bytes) -> bytes:
    """`data` as one whole stream of codec `name` (the way another tool would write it)."""
    packer = compression.compressor(name)
    return packer.compress(data) + packer.flush()


def decompress(name: str, blob: bytes) -> bytes:
    """The bytes a whole stream of codec `name` holds."""
    import io

    reader = compression.open_reader(io.BytesIO(blob), name)
    return b"".join(iter(lambda: reader.read(1 << 20), b""))
