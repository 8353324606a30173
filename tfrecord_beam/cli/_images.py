"""What image format a bytes value starts with, from its magic bytes and header (no decoding).

Used by `inspection` (the per-feature image counts) and by the formatter (`<PNG 7x9, 1.2 KiB>`
in place of a bytes value); it lives apart so neither has to import the other for it.
"""

from __future__ import annotations

import struct
from typing import Optional, Tuple

__all__ = ["image_info"]

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
# JPEG start-of-frame markers carry the image size (C4, C8 and CC are not SOF markers).
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def image_info(value: bytes) -> Optional[Tuple[str, Optional[int], Optional[int]]]:
    """(format, width, height) when `value` starts like a PNG / JPEG / GIF / WebP file, else None.

    Width and height are None when the header is cut short; only headers are read.
    """
    if value.startswith(_PNG_MAGIC):
        if len(value) >= 24 and value[12:16] == b"IHDR":
            width, height = struct.unpack_from(">II", value, 16)
            return "PNG", width, height
        return "PNG", None, None
    if value.startswith(_JPEG_MAGIC):
        return ("JPEG",) + _jpeg_size(value)
    if value[:6] in (b"GIF87a", b"GIF89a"):
        if len(value) >= 10:
            width, height = struct.unpack_from("<HH", value, 6)
            return "GIF", width, height
        return "GIF", None, None
    if value[:4] == b"RIFF" and value[8:12] == b"WEBP":
        return "WebP", None, None
    return None


def _jpeg_size(value: bytes) -> Tuple[Optional[int], Optional[int]]:
    """Walk the JPEG marker segments up to the first start-of-frame; (width, height)."""
    pos = 2
    n = len(value)
    while pos + 4 <= n:
        if value[pos] != 0xFF:
            return None, None
        marker = value[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", value, pos + 2)
        if marker in _JPEG_SOF:
            if pos + 9 <= n:
                height, width = struct.unpack_from(">HH", value, pos + 5)
                return width, height
            return None, None
        pos += 2 + length
    return None, None
