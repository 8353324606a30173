"""Uncompressed byte streams over a (possibly GZIP or ZLIB compressed) binary file object.

Inflating uses ISA-L (`isal`, ~2.3x zlib's speed here) when it is installed, else zlib; both
produce the same bytes. `TFRECORD_BEAM_INFLATE=zlib` forces zlib.
"""

from __future__ import annotations

import os
import zlib
from typing import BinaryIO, Dict, Optional

from .errors import CorruptRecordError

_READ_SIZE = 1 << 20

INFLATERS: Dict[str, object] = {"zlib": zlib}
try:  # optional accelerator, same API as zlib
    from isal import isal_zlib

    INFLATERS["isal"] = isal_zlib
except ImportError:  # pragma: no cover - depends on the environment
    pass
DEFAULT_INFLATER = os.environ.get("TFRECORD_BEAM_INFLATE") or ("isal" if "isal" in INFLATERS else "zlib")

# zlib window bits for each compression: 16+ = gzip wrapper, plain = zlib wrapper.
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}


class InflatingReader:
    """A `read(n)` view of the decompressed stream; concatenated gzip members are followed.

    `complete` tells, once `read` returns b"", whether the compressed stream ended properly;
    a cut stream yields every byte it can and then reports `complete == False`.
    """

    def __init__(self, raw: BinaryIO, compression: str, path: Optional[str] = None,
                 inflater: Optional[str] = None) -> None:
        self._raw = raw
        self._path = path
        self._compression = compression
        self._zlib = INFLATERS[inflater or DEFAULT_INFLATER]
        self._wbits = WBITS[compression]
        self._inflater = self._zlib.decompressobj(self._wbits)
        self._pending = b""
        self._raw_eof = False
        self.complete = True
        self._seen_input = False
        self.position = 0  # bytes of the decompressed stream handed out so far
        self._after_member: Optional[bytearray] = None  # input since the last member ended, while it inflates to nothing

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
            return self._decompress(inflater.unconsumed_tail, want)
        if inflater.eof:
            rest = inflater.unused_data
            if not rest:
                rest = self._raw.read(_READ_SIZE)
            if not rest:
                self._raw_eof = True
                return b""
            if not rest.strip(b"\0"):  # zero padding after the last member (tape, block devices)
                if not self._raw.read(_READ_SIZE).strip(b"\0"):
                    self._raw_eof = True
                    return b""
            # A new gzip member (TensorFlow and `cat a.gz b.gz` both produce these).
            self._inflater = inflater = self._zlib.decompressobj(self._wbits)
            self._after_member = bytearray(rest[:64])
            return self._decompress(rest, want)
        compressed = self._raw.read(_READ_SIZE)
        if not compressed:
            self._raw_eof = True
            tail = inflater.flush()
            # A zero-byte file holds no records; anything else must end its stream properly.
            self.complete = inflater.eof or not self._seen_input
            return tail
        self._seen_input = True
        if self._after_member is not None and len(self._after_member) < 64:
            self._after_member += compressed[: 64 - len(self._after_member)]
        return self._decompress(compressed, want)

    @property
    def trailing(self) -> Optional[bytes]:
        """When the stream ended incomplete after at least one whole member, and what followed
        that member inflated to nothing: its first bytes (up to 64); else None."""
        if self.complete or self._after_member is None:
            return None
        return bytes(self._after_member)

    def _decompress(self, data: bytes, want: int) -> bytes:
        try:
            out = self._inflater.decompress(data, max(want, _READ_SIZE))
            if out:
                self._after_member = None
            return out
        except self._zlib.error as exc:
            raise CorruptRecordError(
                self._path, self.position, None,
                f"invalid {self._compression} data near uncompressed offset {self.position}: {exc}",
            ) from None

    def skip(self, count: int) -> None:
        """Discard `count` decompressed bytes (seeking in a compressed stream)."""
        while count > 0:
            got = self.read(min(count, _READ_SIZE))
            if not got:
                return
            count -= len(got)

    def close(self) -> None:
        self._raw.close()


def open_stream(raw: BinaryIO, compression: Optional[str], path: Optional[str] = None):
    """Wrap a raw binary file in a decompressing reader when `compression` asks for it."""
    if compression is None:
        return raw
    return InflatingReader(raw, compression, path)
