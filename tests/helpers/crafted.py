"""Crafted TFRecord files for the resync and split-point tests (and bench_resync)."""

from __future__ import annotations

import struct

import google_crc32c

from tfrecord_beam._engine._framing import frame_header, frame_records, masked_crc32c
from tfrecord_beam.example import encode_example


def _crc(data: bytes) -> int:
    return google_crc32c.value(data)


def colliding_prefix(prefix: bytearray, tail: bytes, want: int, at: int) -> bytes:
    """`prefix` with the 4 bytes at `at` chosen so that CRC32C(prefix + tail) == want.

    CRC32C is affine over GF(2), so it is an affine function of the 32 chosen bits: 33
    evaluations and a Gaussian elimination find them.
    """

    def diff(bits: int) -> int:
        p = bytearray(prefix)
        p[at : at + 4] = bits.to_bytes(4, "little")
        return _crc(bytes(p) + tail) ^ want

    base = diff(0)
    columns = [diff(1 << k) ^ base for k in range(32)]  # the linear part, column by column
    # solve sum(v_k * columns[k]) == base over GF(2), with an XOR basis keyed by top bit
    basis = {}  # top bit -> (vector, combination of k's)
    for k, col in enumerate(columns):
        combo = 1 << k
        for bit in range(31, -1, -1):
            if not col >> bit & 1:
                continue
            if bit not in basis:
                basis[bit] = (col, combo)
                break
            col ^= basis[bit][0]
            combo ^= basis[bit][1]
    target, solution = base, 0
    for bit in range(31, -1, -1):
        if target >> bit & 1 and bit in basis:
            target ^= basis[bit][0]
            solution ^= basis[bit][1]
    if target:
        raise ValueError("no colliding bytes for this layout")
    out = bytearray(prefix)
    out[at : at + 4] = solution.to_bytes(4, "little")
    return bytes(out)


def phantom_payload(size: int = (1 << 20) + (64 << 10)) -> bytes:
    """An Example of about `size` bytes whose serialization ends in a 30-byte frame (12 + a
    14-byte Example + 4) sharing the outer record's footer: 4 bytes of the outer payload make
    both payload CRCs collide, so a search from inside the outer record more than 1 MiB before
    its end finds a valid record (the "phantom") whose footer is the outer one's."""
    inner = frame_header(len(PHANTOM_EXAMPLE)) + PHANTOM_EXAMPLE
    filler = bytes(size - len(inner))  # zeros: no byte of them starts a valid length CRC
    payload = encode_example({"blob": (filler + inner, "byte")})
    head = len(payload) - len(filler) - len(inner)
    return colliding_prefix(bytearray(payload[: -len(inner)]), inner, _crc(PHANTOM_EXAMPLE), head) + inner


#: The embedded record's payload: an Example of 14 bytes ({"k": [7]}).
PHANTOM_EXAMPLE = encode_example({"k": ([7], "int")})


def phantom_file(path, before: int = 3, after: int = 3) -> list:
    """Write `before` small Examples, the phantom payload and `after` small ones; return the
    payloads. Any byte-range split inside the outer record's first part is ambiguous."""
    small = [encode_example({"id": ([i], "int")}) for i in range(before + after)]
    payloads = small[:before] + [phantom_payload()] + small[before:]
    with open(path, "wb") as out:
        out.write(frame_records(payloads))
    return payloads


def phantom_over_a_boundary(path) -> list:
    """Write records whose boundary is exactly the file's middle, the record before it ending
    in a frame header whose (CRC-valid) frame runs over the middle into the record after it,
    Q, which holds the phantom's footer; return the payloads. The resync from the middle skips
    the real header there (a valid frame spans it) and lands after Q."""
    small = [encode_example({"id": ([i], "int")}) for i in range(20)]
    phantom = 64  # the phantom's payload: R's footer, Q's header and the start of Q's payload
    before_mid = b"R" * 8 + frame_header(phantom)
    r_frame = frame_records([before_mid])
    q_start = b"Q" * (phantom - 16)
    crc = masked_crc32c(r_frame[-4:] + frame_header(200) + q_start)
    after_mid = q_start + struct.pack("<I", crc) + b"Q" * (200 - len(q_start) - 4)
    tail = frame_records([after_mid] + small[10:])
    filler = b"F" * (len(tail) - len(frame_records(small[:10])) - len(r_frame) - 16)
    head = frame_records(small[:10] + [filler]) + r_frame
    assert len(head) == (len(head) + len(tail)) // 2  # the middle is R's end: Q's header
    path.write_bytes(head + tail)
    return small[:10] + [filler, before_mid, after_mid] + small[10:]


def crafted_damage(units: int) -> bytes:
    """`(12 junk bytes + a header + 8 bytes + 4 zero bytes) * units`: every header has a valid
    length CRC, every payload a wrong CRC (the resync's worst case of issue 10, item 6)."""
    return (b"J" * 12 + frame_header(8) + b"payload!" + bytes(4)) * units
