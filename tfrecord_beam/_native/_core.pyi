"""Type stub of the compiled core (tfrecord_beam._native._core); the pure twins are
tfrecord_beam._framing_py, tfrecord_beam._columnar_py and tfrecord_beam._index_text_py, with the same signatures."""

"""Type stub of the compiled core (tfrecord_beam._native._core); its pure twins, with the same
signatures, are in tfrecord_beam._engine (_framing, _decode, _encode, _rows), which also picks
one of the two. The numeric codes are in tfrecord_beam._engine._common."""

from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

Buffer = Union[bytes, bytearray, memoryview, np.ndarray]
# (code, record, feature, found_kind): code 1 = malformed protobuf, 2 = kind mismatch
ErrorTuple = Tuple[int, int, int, int]
# (values, row_splits, value_offsets or None, status)
ColumnTuple = Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]
# (values, row_splits, step_splits, value_offsets or None, status)
ListColumnTuple = Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]
# (name, kind 1|2|3, values, row_splits, value_offsets or None, status or None)
EncodeColumn = Tuple[bytes, int, Any, Any, Any, Any]

def masked_crc32c(data: Buffer) -> int: ...
def find_length_crc(buf: Buffer, start: int = 0) -> int: ...
def find_length_crcs(buf: Buffer, start: int = 0) -> np.ndarray: ...
def crc32c(data: Buffer, table_only: bool = False) -> int: ...
def crc32c_hw() -> bool: ...
def scan_frames(buf: Buffer, verify: bool = True, max_records: int = -1) -> Tuple[np.ndarray, np.ndarray, int, int]: ...
def index_starts(
    buf: Buffer, start: int = 0
) -> Tuple[np.ndarray, int, Optional[Tuple[int, int, int]], Optional[Tuple[int, int, int, int, int]]]: ...
def slice_payloads(buffer: Buffer, offsets: Any, lengths: Any) -> List[bytes]: ...
def frame_records(payloads: Sequence[Buffer]) -> bytes: ...
def decode_examples(
    records: Any, names: Sequence[bytes], kinds: Sequence[int], offsets: Any = None, lengths: Any = None
) -> Tuple[Optional[List[ColumnTuple]], Optional[ErrorTuple]]: ...
def decode_sequence_examples(
    records: Any,
    context_names: Sequence[bytes],
    context_kinds: Sequence[int],
    names: Sequence[bytes],
    kinds: Sequence[int],
    offsets: Any = None,
    lengths: Any = None,
) -> Tuple[Optional[List[ColumnTuple]], Optional[List[ListColumnTuple]], Optional[ErrorTuple]]: ...
def encode_examples(
    columns: Sequence[EncodeColumn], n: int, framed: bool = False
) -> Union[Tuple[np.ndarray, np.ndarray], bytes]: ...
def example_stats(
    buffer: Any, offsets: np.ndarray, lengths: np.ndarray, start: int = 0
) -> Tuple[int, List[Tuple[Any, ...]]]: ...
def example_lengths(columns: Sequence[EncodeColumn], n: int) -> np.ndarray: ...
