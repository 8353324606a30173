"""Uncompressed byte streams over a (possibly compressed) binary file object: the interface
every codec's reader offers (`DecodingReader`) and the GZIP / ZLIB one (`InflatingReader`).
Which reader a codec uses is in the codec table (`compression`).

Inflating uses ISA-L (`isal`, ~2.3x zlib's speed here) when it is installed, else zlib; both
produce the same bytes. `TFRECORD_BEAM_INFLATE=zlib` forces zlib.

Damage in the compressed data does not throw away what inflated before it: `read` hands out
every byte that inflates before the damage, and the next `read` raises a `CorruptStreamError`
naming the uncompressed offset where the damage begins and its compressed offset. Python's
inflaters drop a whole call's output when that call hits bad data, so with zlib the reader
keeps a copy of the inflater's state before each call (a few microseconds) and, after a
failure, goes back to it and inflates only up to the last input byte that still inflates.
ISA-L's state cannot be copied: at its first failure zlib re-inflates that gzip member from
its start up to the same output and takes over. A stream that cannot be re-read is inflated
with zlib from the start (unless an inflater is named: then ISA-L loses the bytes of the failed
step, and the error says so).

Memory stays bounded whatever the data inflates to: each inflater call takes at most 256 KiB
and gives at most what the caller asked for (4 MiB at most), and `max_remaining()` bounds what
the rest of a file of known size can still inflate to (deflate's 1032:1), which lets the
record reader refuse an impossible length field before reading it.
"""

from __future__ import annotations

import io
import os
import zlib
from typing import Any, BinaryIO, Dict, List, Optional, Tuple

from .errors import CorruptStreamError

_READ_SIZE = 1 << 20  # compressed bytes read from the file at a time
_FEED = 1 << 18  # compressed bytes handed to the inflater per call
_MAX_OUT = 1 << 22  # uncompressed bytes one inflater call may produce (memory stays bounded)

# No deflate stream inflates to more than 1032 bytes per compressed byte (a 258-byte match
# coded in 2 bits; zlib's FAQ). With the compressed size known, this bounds what can follow.
DEFLATE_MAX_RATIO = 1032
_INFLATER_SLACK = 1 << 20  # bytes an inflater may hold decoded but not yet handed out

INFLATERS: Dict[str, Any] = {"zlib": zlib}  # zlib-compatible modules
try:  # optional accelerator, same API as zlib
    from isal import isal_zlib

    INFLATERS["isal"] = isal_zlib
except ImportError:  # pragma: no cover - depends on the environment
    pass
DEFAULT_INFLATER = os.environ.get("TFRECORD_BEAM_INFLATE") or ("isal" if "isal" in INFLATERS else "zlib")

# zlib window bits for each compression: 16+ = gzip wrapper, plain = zlib wrapper.
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}


def _tell_and_size(raw: BinaryIO) -> Tuple[Optional[int], Optional[int]]:
    """(current offset, size) of a seekable file; (None, None) when it cannot tell and seek."""
    try:
        here = raw.tell()
        size = raw.seek(0, io.SEEK_END)
        raw.seek(here)
        return int(here), int(size)
    except (OSError, AttributeError, ValueError, TypeError, io.UnsupportedOperation):
        return None, None


def _consumed(inflater, fed: int) -> int:
    """How many of the `fed` input bytes of the inflater's last call it used.

    Before a member's end the unused rest is `unconsumed_tail`; at the end it is `unused_data`
    (what follows the member). Only one of them may be subtracted: CPython's zlib (3.11 at
    least) leaves the same leftover in `unconsumed_tail` too when the call that reaches the end
    also hit its output limit, and subtracting both put the reader before its own input.
    """
    if inflater.eof:
        return fed - len(inflater.unused_data)
    return fed - len(inflater.unconsumed_tail)


def skip_bytes(stream: Any, count: int) -> None:
    """Read and drop `count` bytes of any stream with `read(n)` (a decompressed stream, or a
    raw file that cannot seek): the one loop for skipping forward without seeking."""
    while count > 0:
        got = stream.read(min(count, _READ_SIZE))
        if not got:
            return
        count -= len(got)


class DecodingReader:
    """The interface of a decompressed stream that the record reader relies on.

    `read(n)` / `read_pieces(n)` return up to n uncompressed bytes (fewer only at the end or
    at damage); `position` is the uncompressed offset of the next byte; once `read` returns
    b"", `complete` tells whether the compressed stream ended properly and `damage` holds the
    error that stopped it (raised by the next `read`); `trailing` the bytes after the last
    whole member that decoded to nothing (or None); `max_remaining()` bounds what is still to
    come (None: unknown). Subclasses implement `_inflate_some(want)` and set `_ended`.
    """

    position: int = 0
    complete: bool = True
    damage: Optional[CorruptStreamError] = None
    compressed_size: Optional[int] = None
    _ended: bool = False
    _raw: BinaryIO

    def read(self, size: int) -> bytes:
        pieces = self.read_pieces(size)
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)

    def read_pieces(self, size: int) -> List[bytes]:
        """Up to `size` bytes (fewer only at the end or at damage) as a list of pieces, so a
        caller can join them once with what it already holds."""
        pieces: List[bytes] = []
        have = 0
        while have < size and not self._ended:
            data = self._inflate_some(size - have)
            if data:
                pieces.append(data)
                have += len(data)
        if not pieces and self.damage is not None:
            raise self.damage  # the bytes before the damage went out with earlier reads
        self.position += have
        return pieces

    def skip(self, count: int) -> None:
        """Discard `count` decompressed bytes (seeking in a compressed stream)."""
        skip_bytes(self, count)

    def max_remaining(self) -> Optional[int]:
        """An upper bound on the uncompressed bytes still to come (None: unknown)."""
        return None

    @property
    def trailing(self) -> Optional[bytes]:
        """Bytes after the last whole member that decoded to nothing, when the stream ended
        incomplete there; else None."""
        return None

    def close(self) -> None:
        self._raw.close()

    def _inflate_some(self, want: int) -> bytes:
        raise NotImplementedError


class CompressedInput(DecodingReader):
    """A decoding reader's compressed side: the raw file read `_READ_SIZE` bytes at a time into
    `_block`, `_at` of them consumed by the decoder, `_block_offset` the compressed offset of
    `_block[0]`. Subclasses set those (and `_raw_eof = False`) in their constructors."""

    _block: memoryview
    _at: int
    _block_offset: int
    _raw_eof: bool

    def _offset(self) -> int:
        """Compressed offset of the next byte the decoder has not consumed."""
        return self._block_offset + self._at

    def _more_input(self) -> bool:
        """Make unconsumed compressed bytes available; False at the end of the file."""
        if self._at < len(self._block):
            return True
        if self._raw_eof:
            return False
        data = self._raw.read(_READ_SIZE)
        self._block_offset += len(self._block)
        self._block, self._at = memoryview(data), 0
        if not data:
            self._raw_eof = True
            return False
        return True


class InflatingReader(CompressedInput):
    """A `read(n)` view of the decompressed stream; concatenated gzip members are followed.

    `complete` tells, once `read` returns b"", whether the compressed stream ended properly;
    a cut stream yields every byte it can and then reports `complete == False`. Damaged data
    yields every byte before the damage, then `read` raises (`damage` holds the error).

    A reader opened in the middle of a stream (at a gzip member of a block-gzip file) is told
    where it starts: `uncompressed_offset` (default 0) and `compressed_offset` (default the
    raw file's `tell()`, else 0), so its `position` and the offsets in its errors are those of
    the whole stream. `compressed_size` is then the compressed offset where the input ends
    (None when the file cannot seek).
    """

    def __init__(
        self,
        raw: BinaryIO,
        compression: str,
        path: Optional[str] = None,
        inflater: Optional[str] = None,
        *,
        uncompressed_offset: int = 0,
        compressed_offset: Optional[int] = None,
    ) -> None:
        self._raw = raw
        self._path = path
        self._compression = compression
        here, size = _tell_and_size(raw)
        self._seekable = here is not None
        start = int(compressed_offset) if compressed_offset is not None else (here or 0)
        self._shift = start - here if here is not None else 0  # our compressed offsets - raw's
        self.compressed_size = None if size is None else size + self._shift
        if inflater is None and self.compressed_size is None:
            inflater = "zlib"  # a stream that cannot be re-read: only zlib recovers from damage exactly
        self._zlib = INFLATERS[inflater or DEFAULT_INFLATER]
        self._wbits = WBITS[compression]
        self._inflater = self._zlib.decompressobj(self._wbits)
        self._block = memoryview(b"")  # compressed bytes read from the file
        self._at = 0  # how many of them the inflater has consumed
        self._block_offset = start  # compressed offset of _block[0]
        self._member_start = start  # compressed offset where the current member begins
        self._member_out = 0  # uncompressed bytes of the current member produced so far
        start_out = int(uncompressed_offset)
        self._produced = start_out  # stream offset after the bytes produced (handed out, or about to be)
        self._raw_eof = False
        self._ended = False  # nothing more will come: the end, or damage
        self._horizon: Optional[int] = None  # compressed offset where inflating must stop (damage)
        self._cause: Tuple[Exception, int] = (Exception(), 0)  # the error there, and its offset
        self.damage: Optional[CorruptStreamError] = None
        self.complete = True
        self._seen_input = False
        self.position = start_out  # uncompressed stream offset of the next byte `read` hands out
        self._after_member: Optional[bytearray] = (
            None  # first bytes after the last member, while they inflate to nothing
        )

    # -- reading ----------------------------------------------------------------------------
    def max_remaining(self) -> Optional[int]:
        """An upper bound on the uncompressed bytes still to come (None when the compressed
        size is unknown): what is left of the file times deflate's maximum ratio."""
        if self.compressed_size is None:
            return None
        left = max(self.compressed_size - (self._block_offset + self._at), 0)
        return left * DEFLATE_MAX_RATIO + _INFLATER_SLACK

    # -- internals --------------------------------------------------------------------------
    def _inflate_some(self, want: int) -> bytes:
        inflater = self._inflater
        if inflater.eof and not self._next_member():
            self._ended = True
            return b""
        inflater = self._inflater
        limit = max(1, min(want, _MAX_OUT))
        at_horizon = self._horizon is not None and self._offset() >= self._horizon
        if at_horizon or not self._more_input():
            if self._seen_input:  # output the inflater still holds (a match cut by `limit`)
                try:
                    out = inflater.decompress(b"", limit)
                except self._zlib.error as exc:
                    return self._failed(exc, memoryview(b""), None)
                if out:
                    return self._produce(out)
            if at_horizon:  # all that inflates before the damage is out
                cause, where = self._cause
                self._damage_here(where, str(cause))
                return b""
            self._ended = True
            # A zero-byte file holds no records; anything else must end its stream properly.
            self.complete = inflater.eof or not self._seen_input
            return b""
        self._seen_input = True
        feed = self._block[self._at : self._at + _FEED]
        if self._horizon is not None:
            feed = feed[: self._horizon - self._offset()]
        checkpoint = inflater.copy() if self._zlib is zlib else None  # ~5 us; isal cannot copy
        try:
            out = inflater.decompress(feed, limit)
        except self._zlib.error as exc:
            return self._failed(exc, feed, checkpoint)
        self._at += _consumed(inflater, len(feed))
        return self._produce(out)

    @property
    def trailing(self) -> Optional[bytes]:
        """When the stream ended incomplete after at least one whole member, and what followed
        that member inflated to nothing: its first bytes (up to 64); else None."""
        if self.complete or self._after_member is None:
            return None
        return bytes(self._after_member)

    def _produce(self, out: bytes) -> bytes:
        if out:
            self._after_member = None
        self._member_out += len(out)
        self._produced += len(out)
        return out

    def _next_member(self) -> bool:
        """After a member's end: start the next one; False when only zero padding (tape, block
        devices) or nothing follows."""
        zeros_from = None
        while self._more_input():
            rest = self._block[self._at :]
            if rest[0] != 0 and zeros_from is None:
                break  # the common case: the next member's header (no scan of the block)
            if rest.tobytes().strip(b"\0"):
                if zeros_from is not None:
                    self._damage_here(zeros_from, "zero bytes and then more data after the end of the stream")
                    return False
                break
            if zeros_from is None:
                zeros_from = self._offset()
            self._at = len(self._block)
        else:
            return False
        # A new gzip member (TensorFlow and `cat a.gz b.gz` both produce these).
        self._inflater = self._zlib.decompressobj(self._wbits)
        self._after_member = bytearray(self._block[self._at : self._at + 64])
        self._member_start = self._offset()
        self._member_out = 0
        return True

    def _damage_here(self, compressed_offset: int, what: str, lost: str = "") -> None:
        offset = self._produced
        if not self._member_out:
            compressed_offset = self._member_start  # nothing of this member inflates
        self.damage = CorruptStreamError(
            self._path,
            offset,
            None,
            f"invalid {self._compression} data from uncompressed offset {offset} "
            f"(compressed offset {compressed_offset}): {what}{lost}",
        )
        self._ended = True

    def _failed(self, exc: Exception, feed: memoryview, checkpoint) -> bytes:
        """An inflater call failed on `feed` (at the current offset). With zlib, go back to the
        state before the call and let the stream end where `feed` stops inflating (so every
        byte before the damage still comes out, in calls of the usual size). With an inflater
        that cannot copy its state, let zlib re-inflate the member up to here and take over.
        """
        here = self._offset()
        if checkpoint is not None:
            good = _longest_good_prefix(checkpoint, feed)
            self._inflater = checkpoint
            self._horizon = here + good
            self._cause = (exc, here + good)
            return b""
        if self._take_over_with_zlib():
            return b""
        self._damage_here(
            here, str(exc), "; the stream cannot be re-read, so bytes inflated just before the damage may be lost"
        )
        return b""

    def _take_over_with_zlib(self) -> bool:
        """Re-inflate the current member with zlib from its start until it has produced what
        was handed out so far, and go on reading with it from there; False when the file
        cannot be re-read or zlib disagrees (then the damage is reported where we are)."""
        if self._zlib is zlib or not self._seekable:
            return False
        try:
            self._raw.seek(self._member_start - self._shift)
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            return False
        z = zlib.decompressobj(self._wbits)
        produced, pos, data = 0, self._member_start, b""
        while produced < self._member_out:
            if not data:
                data = self._raw.read(_READ_SIZE)
                if not data:
                    return False
            try:
                out = z.decompress(data, self._member_out - produced)
            except zlib.error:
                return False
            produced += len(out)
            used = _consumed(z, len(data))
            pos, data = pos + used, data[used:]
            if z.eof and produced < self._member_out:
                return False
        self._raw.seek(pos - self._shift)
        self._block, self._at, self._block_offset, self._raw_eof = memoryview(b""), 0, pos, False
        self._inflater, self._zlib = z, zlib
        return True


def _inflates(z, data) -> bool:
    """Whether `data` inflates without error from a copy of zlib state `z` (output dropped)."""
    z = z.copy()
    try:
        z.decompress(data, _MAX_OUT)
        while z.unconsumed_tail and not z.eof:
            z.decompress(z.unconsumed_tail, _MAX_OUT)
    except zlib.error:
        return False
    return True


def _longest_good_prefix(z, data) -> int:
    """The largest k such that data[:k] inflates without error from state `z` (left unchanged);
    data as a whole does not."""
    lo, hi = 0, len(data) - 1  # data[:lo] inflates; data[:hi + 1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _inflates(z, data[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo
