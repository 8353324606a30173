"""Picks the engine for every hot path in one place: the compiled module, or its pure twins.

`TFRECORD_BEAM_PURE=1` forces the pure-Python twins. When the compiled module is missing the
package still works, slower, and says so once.

The package holds one pure twin per compiled function, with the compiled module's signatures
(`_native/_core.pyi`), and what both share:

- `_common`: frame layout, status codes, verify levels, kind/status/error codes;
- `_framing`: scan_frames, frame_records, masked_crc32c, find_length_crc(s), append_frame,
  walk_headers (struct + google-crc32c; candidate headers vectorised with numpy);
- `_decode`: decode_examples, decode_sequence_examples (upb);
- `_encode`: encode_examples and example_lengths (vectorised numpy), and
  encode_sequence_examples, which has no compiled counterpart and serves both engines;
- `_rows`: example_rows, decode_example_rows, sequence_rows (columns -> per-record dicts).

`example_stats` (per-feature statistics of Example batches for `tfrecord-beam inspect` and
`schema`, from `start` up to the first record not in the form writers produce, which the
caller parses itself) is compiled only and None on the pure engine, where inspection takes the
same statistics from `decode_examples`' columns instead (`cli/_stats.py`), its twin.

The per-record encoders (`encode_example`, `encode_sequence_example`, `append_example`,
`append_sequence_example`) are compiled only and return None (or False) for values they leave
to the Python path in `tfrecord_beam.example`, which is also their pure twin: here they are
None on the pure engine.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType
from typing import Optional

from . import _decode, _encode, _framing, _index_text, _rows

__all__ = [
    "PURE_REQUESTED",
    "NATIVE",
    "ENGINE",
    "scan_frames",
    "frame_records",
    "masked_crc32c",
    "find_length_crc",
    "find_length_crcs",
    "append_frame",
    "walk_headers",
    "slice_payloads",
    "index_starts",
    "decode_examples",
    "decode_sequence_examples",
    "encode_examples",
    "example_lengths",
    "encode_sequence_examples",
    "example_stats",
    "example_rows",
    "decode_example_rows",
    "sequence_rows",
    "encode_example",
    "encode_sequence_example",
    "append_example",
    "append_sequence_example",
]

PURE_REQUESTED = os.environ.get("TFRECORD_BEAM_PURE", "") not in ("", "0")

_native: Optional[ModuleType] = None
if not PURE_REQUESTED:
    try:
        from .._native import _core as _native
    except ImportError as exc:  # pragma: no cover - depends on the build
        warnings.warn(
            f"tfrecord_beam: compiled fast path unavailable ({exc}); using the pure-Python engine",
            RuntimeWarning,
            stacklevel=2,
        )

NATIVE = _native is not None
ENGINE = "native" if NATIVE else "pure"

if _native is not None:
    scan_frames = _native.scan_frames
    frame_records = _native.frame_records
    masked_crc32c = _native.masked_crc32c
    find_length_crc = _native.find_length_crc
    find_length_crcs = _native.find_length_crcs
    append_frame = _native.append_frame
    walk_headers = _native.walk_headers
    slice_payloads = _native.slice_payloads
    index_starts = _native.index_starts
    decode_examples = _native.decode_examples
    decode_sequence_examples = _native.decode_sequence_examples
    encode_examples = _native.encode_examples
    example_lengths = _native.example_lengths
    example_rows = _native.example_rows
    decode_example_rows = _native.decode_example_rows
    sequence_rows = _native.sequence_rows
    example_stats = _native.example_stats
    # Per-record encoders (compiled only; see the module docstring).
    encode_example = _native.encode_example
    encode_sequence_example = _native.encode_sequence_example
    append_example = _native.append_example
    append_sequence_example = _native.append_sequence_example
else:
    scan_frames = _framing.scan_frames
    frame_records = _framing.frame_records
    masked_crc32c = _framing.masked_crc32c
    find_length_crc = _framing.find_length_crc
    find_length_crcs = _framing.find_length_crcs
    append_frame = _framing.append_frame
    walk_headers = _framing.walk_headers
    slice_payloads = _framing.slice_payloads
    index_starts = _index_text.index_starts  # `.tfindex` text
    decode_examples = _decode.decode_examples
    decode_sequence_examples = _decode.decode_sequence_examples
    encode_examples = _encode.encode_examples
    example_lengths = _encode.example_lengths
    example_rows = _rows.example_rows
    decode_example_rows = _rows.decode_example_rows
    sequence_rows = _rows.sequence_rows
    example_stats = None
    encode_example = encode_sequence_example = append_example = append_sequence_example = None

encode_sequence_examples = _encode.encode_sequence_examples  # no compiled counterpart: both engines
