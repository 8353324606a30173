"""Uncompressed byte streams over a (possibly GZIP or ZLIB compressed) binary file object."""

from __future__ import annotations

import zlib
from typing import BinaryIO, Optional

_READ_SIZE = 1 << 20

# zlib window bits for each compression: 16+ = gzip wrapper, plain = zlib wrapper.
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}


class InflatingReader:
    """A `read(n)` view of the decompressed stream; concatenated gzip members are followed.

    `complete` tells, once `read` returns b"", whether the compressed stream ended properly;
    a cut stream yields every byte it can and then reports `complete == False`.
    """

    def __init__(self, raw: BinaryIO, compression: str) -> None:
        self._raw = raw
        self._wbits = WBITS[compression]
        self._inflater = zlib.decompressobj(self._wbits)
        self._pending = b""
        self._raw_eof = False
        self.complete = True
        self._seen_input = False
        self.position = 0  # bytes of the decompressed stream handed out so far

    def read(self, size: int) -> bytes:
        chunks = [self._pending] if self._pending else []
        have = len(self._pending)
        self._pending = b""
        while have < size and not self._raw_eof:
            data = self._inflate_some(size - have)
            if data:
                chunks.append(data)
                have += len(data)
        out = b"".join(chunks)
        if len(out) > size:
            self._pending = out[size:]
            out = out[:size]
        self.position += len(out)
        return out

    def _inflate_some(self, want: int) -> bytes:
        inflater = self._inflater
        if inflater.unconsumed_tail:
            return inflater.decompress(inflater.unconsumed_tail, max(want, _READ_SIZE))
        if inflater.eof:
            rest = inflater.unused_data
            if not rest:
                rest = self._raw.read(_READ_SIZE)
            if not rest:
                self._raw_eof = True
                return b""
            # A new gzip member (TensorFlow and `cat a.gz b.gz` both produce these).
            self._inflater = inflater = zlib.decompressobj(self._wbits)
            return inflater.decompress(rest, max(want, _READ_SIZE))
        compressed = self._raw.read(_READ_SIZE)
        if not compressed:
            self._raw_eof = True
            tail = inflater.flush()
            # A zero-byte file holds no records; anything else must end its stream properly.
            self.complete = inflater.eof or not self._seen_input
            return tail
        self._seen_input = True
        try:
            return inflater.decompress(compressed, max(want, _READ_SIZE))
        except zlib.error as exc:
            raise zlib.error(f"invalid compressed data: {exc}") from exc

    def skip(self, count: int) -> None:
        """Discard `count` decompressed bytes (seeking in a compressed stream)."""
        while count > 0:
            got = self.read(min(count, _READ_SIZE))
            if not got:
                return
            count -= len(got)

    def close(self) -> None:
        self._raw.close()


def open_stream(raw: BinaryIO, compression: Optional[str]):
    """Wrap a raw binary file in a decompressing reader when `compression` asks for it."""
    if compression is None:
        return raw
    return InflatingReader(raw, compression)
