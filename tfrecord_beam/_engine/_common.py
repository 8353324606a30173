"""What the compiled core and its pure twins share: the frame layout and every numeric code.

These are the engine's ABI (the C side has the same numbers in `_native/tfr_*.h`), kept in one
module so that no caller has to import them from one of the two engines:

- frame layout: a record is a 12-byte header (uint64 length + masked CRC32C of the length),
  the payload, and a 4-byte footer (masked CRC32C of the payload);
- `scan_frames` status codes and verify levels, `walk_headers` status codes;
- feature kinds as numbers (`KIND_*`) and as the names the Python API uses ("byte", "float",
  "int"), and the conversions between them;
- per-record column status (`MISSING`, `NO_KIND`, `PRESENT`), re-exported by `columnar`;
- the record-data error codes the columnar functions return instead of raising.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "HEADER_SIZE",
    "FOOTER_SIZE",
    "FRAME_OVERHEAD",
    "MASK_DELTA",
    "STATUS_OK",
    "STATUS_INCOMPLETE",
    "STATUS_BAD_LENGTH_CRC",
    "STATUS_BAD_DATA_CRC",
    "VERIFY_NONE",
    "VERIFY_ALL",
    "VERIFY_LENGTHS",
    "WALK_DONE",
    "WALK_SHORT_HEADER",
    "WALK_BAD_LENGTH_CRC",
    "WALK_PAST_END",
    "KIND_NONE",
    "KIND_BYTES",
    "KIND_FLOAT",
    "KIND_INT64",
    "BYTES",
    "FLOAT",
    "INT",
    "KIND_NONE_NAME",
    "KIND_CODE",
    "KIND_NAME",
    "KIND_DTYPE",
    "KIND_FIELD",
    "MISSING",
    "NO_KIND",
    "PRESENT",
    "ERR_MALFORMED",
    "ERR_KIND",
]

HEADER_SIZE = 12  # uint64 length + masked CRC32C of the length
FOOTER_SIZE = 4  # masked CRC32C of the payload
FRAME_OVERHEAD = HEADER_SIZE + FOOTER_SIZE
MASK_DELTA = 0xA282EAD8  # TFRecord's CRC mask: rotate right by 15, add this

# scan_frames status codes.
STATUS_OK = 0
STATUS_INCOMPLETE = 1
STATUS_BAD_LENGTH_CRC = 2
STATUS_BAD_DATA_CRC = 3

# scan_frames verify levels: VERIFY_ALL == True, VERIFY_NONE == False.
VERIFY_NONE = 0
VERIFY_ALL = 1
VERIFY_LENGTHS = 2  # length CRCs only: framing trusted, payloads not checked (index building)

# walk_headers status codes.
WALK_DONE, WALK_SHORT_HEADER, WALK_BAD_LENGTH_CRC, WALK_PAST_END = 0, 1, 2, 3

# Feature kinds: the numbers the engines take and return, and the Python API's names.
KIND_NONE, KIND_BYTES, KIND_FLOAT, KIND_INT64 = 0, 1, 2, 3
BYTES, FLOAT, INT = "byte", "float", "int"
KIND_NONE_NAME = "none"  # how statistics and schema metadata name "no kind set" (KIND_NONE)
KIND_CODE = {BYTES: KIND_BYTES, FLOAT: KIND_FLOAT, INT: KIND_INT64}
KIND_NAME = {code: name for name, code in KIND_CODE.items()}
KIND_DTYPE = {KIND_BYTES: np.uint8, KIND_FLOAT: np.float32, KIND_INT64: np.int64}  # of `values`
KIND_FIELD = {BYTES: "bytes_list", FLOAT: "float_list", INT: "int64_list"}  # Feature's oneof fields

# Per-record status of a column: no such key / key there with no kind set / values there.
MISSING, NO_KIND, PRESENT = 0, 1, 2

# Record-data errors, returned as (code, record, feature, found_kind).
ERR_MALFORMED, ERR_KIND = 1, 2
