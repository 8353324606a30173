"""Write fuzz seeds: every payload of the golden fixtures (and each whole small fixture file),
prefixed with the harness's mode byte, into the folder given as argument."""

import hashlib
import struct
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "golden"


def main(out: str) -> None:
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    if not FIXTURES.is_dir():
        print(f"no fixtures at {FIXTURES}; seeding from the regression corpus only")
        return
    count = 0
    for path in sorted(FIXTURES.glob("*.tfrecord")):
        data = path.read_bytes()
        pieces = [data] if len(data) <= 4096 else []
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            if pos + 16 + length > len(data):
                break
            if length <= 4096:
                pieces.append(data[pos + 12 : pos + 12 + length])
            pos += 16 + length
        for piece in pieces:
            for mode in (0x00, 0x31, 0x72, 0xB3):
                blob = bytes([mode]) + piece
                (dest / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
                count += 1
    print(f"{count} seeds in {dest}")


if __name__ == "__main__":
    main(sys.argv[1])
