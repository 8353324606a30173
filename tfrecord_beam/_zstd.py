"""Zstandard streams (the `zstandard` package, `pip install 'tfrecord_beam[zstd]'`).

Files are one or more zstd frames back to back (what `zstd`, Beam's ZSTD sink and our
writer produce; `cat a.zst b.zst` too). Frames are written with their content checksum, so
damage is caught at the latest at its frame's end, as GZIP's CRC would be; the records' own
CRCs catch it record by record before that.

Memory stays bounded whatever the data decodes to: the decoder is fed `_FEED` compressed bytes
per call (a zstd block of 128 KiB needs at least 4 bytes, so one call yields at most
`_FEED * 32768` bytes), and `max_remaining()` bounds what the rest of a file of known size
can still decode to, which lets the record reader refuse an impossible length field.
"""

from __future__ import annotations

from typing import BinaryIO, Optional

from ._streams import CompressedInput, _tell_and_size
from .errors import CorruptStreamError

_FEED = 1 << 11  # compressed bytes handed to the decoder per call
MAX_RATIO = 1 << 15  # 128 KiB block from a 3-byte header and 1 RLE byte
_SLACK = 1 << 20
DEFAULT_LEVEL = 3  # zstd's own default


def _module():
    import zstandard

    return zstandard


def compressor(level: int = -1):
    """A compressor for one stream of frames (`compress(data)`, `flush()`), with checksums.

    `level` -1 is zstd's default (3); zlib's 1-9 scale lands on zstd's fast-to-strong range."""
    zstd = _module()
    return zstd.ZstdCompressor(level=DEFAULT_LEVEL if level < 0 else level, write_checksum=True).compressobj()


class ZstdReader(CompressedInput):
    """A `read(n)` view of a zstd stream of one or more frames (see `DecodingReader`)."""

    def __init__(self, raw: BinaryIO, path: Optional[str] = None) -> None:
        self._zstd = _module()
        self._raw = raw
        self._path = path
        here, size = _tell_and_size(raw)
        self._start = here or 0
        self.compressed_size = size
        self._dctx = self._zstd.ZstdDecompressor()
        self._decoder = self._dctx.decompressobj()
        self._block = memoryview(b"")
        self._at = 0
        self._block_offset = self._start  # compressed offset of _block[0]
        self._pending = memoryview(b"")  # decoded bytes not handed out yet
        self._produced = 0  # uncompressed offset after everything decoded
        self._in_frame = False  # input fed to the current frame
        self._raw_eof = False
        self.position = 0
        self.complete = True
        self.damage: Optional[CorruptStreamError] = None
        self._ended = False

    def max_remaining(self) -> Optional[int]:
        if self.compressed_size is None:
            return None
        left = max(self.compressed_size - self._offset(), 0)
        return left * MAX_RATIO + _SLACK + len(self._pending)

    def _inflate_some(self, want: int) -> bytes:
        while not self._pending:
            if not self._more_input():
                self._ended = True
                self.complete = not self._in_frame
                return b""
            feed = self._block[self._at : self._at + _FEED]
            offset = self._offset()
            try:
                out = self._decoder.decompress(feed)
            except self._zstd.ZstdError as exc:
                self.damage = CorruptStreamError(
                    self._path,
                    self._produced,
                    None,
                    f"invalid zstd data from uncompressed offset {self._produced} "
                    f"(compressed offset {offset} or before): {exc}",
                )
                self._ended = True
                return b""
            self._in_frame = True
            used = len(feed)
            if self._decoder.eof:  # a frame ended: what follows starts the next one
                used -= len(self._decoder.unused_data)
                self._decoder = self._dctx.decompressobj()
                self._in_frame = False
            self._at += used
            self._produced += len(out)
            self._pending = memoryview(out)
        piece = self._pending[:want]
        self._pending = self._pending[len(piece) :]
        return piece.tobytes()
