"""Picks the engine for every hot path in one place: the compiled module, or its pure twins.

`TFRECORD_BEAM_PURE=1` forces the pure-Python twins. When the compiled module is missing the
package still works, slower, and says so once.
"""

from __future__ import annotations

import os
import warnings

from . import _columnar_py, _framing_py, _index_text_py

PURE_REQUESTED = os.environ.get("TFRECORD_BEAM_PURE", "") not in ("", "0")

_native = None
if not PURE_REQUESTED:
    try:
        from ._native import _core as _native  # type: ignore[no-redef]
    except ImportError as exc:  # pragma: no cover - depends on the build
        warnings.warn(
            f"tfrecord_beam: compiled fast path unavailable ({exc}); using the pure-Python engine",
            RuntimeWarning,
            stacklevel=2,
        )

NATIVE = _native is not None
ENGINE = "native" if NATIVE else "pure"

_impl = _native if NATIVE else _framing_py
scan_frames = _impl.scan_frames
frame_records = _impl.frame_records
masked_crc32c = _impl.masked_crc32c
find_length_crc = _impl.find_length_crc
find_length_crcs = _impl.find_length_crcs
append_frame = _impl.append_frame
walk_headers = _impl.walk_headers
slice_payloads = _impl.slice_payloads
parse_index = _native.parse_index if NATIVE else _index_text_py.parse_index  # `.tfindex` text

# Per-record Example / SequenceExample encoders (compiled only): they return None for values
# they leave to the Python path in `example`, which is also their pure twin (same bytes).
encode_example = _native.encode_example if NATIVE else None
encode_sequence_example = _native.encode_sequence_example if NATIVE else None
append_example = _native.append_example if NATIVE else None
append_sequence_example = _native.append_sequence_example if NATIVE else None
# Decoded columns -> per-record dicts (compiled only; columnar.to_records is the pure twin).
example_rows = _native.example_rows if NATIVE else None
decode_example_rows = _native.decode_example_rows if NATIVE else None
sequence_rows = _native.sequence_rows if NATIVE else None

_columnar = _native if NATIVE else _columnar_py
decode_examples = _columnar.decode_examples
decode_sequence_examples = _columnar.decode_sequence_examples
encode_examples = _columnar.encode_examples
