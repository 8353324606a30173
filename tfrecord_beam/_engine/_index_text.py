"""Pure-Python twin of the compiled `.tfindex` text parser (`_native/tfr_index.c`).

`index_starts(buf) -> (starts, end, error, fault)` is the engines' function (its docstring);
its grammar is that of `parse_index(buf) -> (pairs, error)`:

* lines end at `\\n` (the last one may lack it); space, tab, `\\r`, `\\v` and `\\f` are blanks;
* a line of blanks only, or whose first non-blank byte is `#` (a block-gzip member table,
  `blockgzip`), is skipped;
* every other line is blanks, digits, blanks, digits, blanks: "offset length", as the
  `tfrecord` package and DALI write it; both numbers must be below 2**63.

`pairs` is a flat int64 array (offset, length, offset, length, ...) of the lines before the
first malformed one; `error` is None, or `(code, line, line_start)`: ERROR_NOT_PAIR (the line
is not two numbers) or ERROR_TOO_BIG (it is, but one does not fit in int64), its 1-based
line number and the byte offset where it starts. `_tfindex.load_index` turns errors and
chain faults into IndexMismatchError.

The common case (every line exactly "digits space digits", numbers of at most 18 digits) is
checked and converted with numpy in a few passes; anything else is parsed line by line.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

__all__ = [
    "index_starts",
    "parse_index",
    "entry_line",
    "ERROR_NOT_PAIR",
    "ERROR_TOO_BIG",
    "CHAIN_OVERFLOW",
    "CHAIN_NOT_AT_ZERO",
    "CHAIN_GAP",
]

ERROR_NOT_PAIR = 1
ERROR_TOO_BIG = 2
CHAIN_OVERFLOW = 3  # an entry's offset + length passes 2**63 - 1
CHAIN_NOT_AT_ZERO = 4  # the first entry does not start at offset 0
CHAIN_GAP = 5  # an entry does not start where the one before ends

_BLANKS = b" \t\r\v\f"
_DIGITS = frozenset(b"0123456789")
_INT64_MAX = (1 << 63) - 1
_FAST_DIGITS = 18  # below 10**18 < 2**63: no overflow check needed
_SPACE, _NEWLINE = ord(" "), ord("\n")

ParseError = Tuple[int, int, int]
ChainFault = Tuple[int, int, int, int, int]


def index_starts(buf, start: int = 0) -> Tuple[np.ndarray, int, Optional[ParseError], Optional[ChainFault]]:
    """`.tfindex` text as `(starts, end, error, fault)`, the same in both engines: each entry's
    offset (int64; the lengths follow from the chain), where the last entry ends (0 for none),
    `parse_index`'s first malformed line (the entries before it are returned) and the first
    fault of the chain of those entries: `(code, entry, offset, length, previous end)` of the
    first CHAIN_OVERFLOW anywhere, else CHAIN_NOT_AT_ZERO (the first entry is not at `start`:
    0 for a whole index, where a stretch of one begins), else the first CHAIN_GAP, or None.
    Sums wrap as int64 (so the C twin needs no wider type)."""
    pairs, error = parse_index(buf)
    index = pairs.reshape(-1, 2)
    starts = np.ascontiguousarray(index[:, 0])
    if not len(index):
        return starts, 0, error, None
    with np.errstate(over="ignore"):
        ends = index[:, 0] + index[:, 1]  # wraps below zero where the sum passes 2**63 - 1
    return starts, int(ends[-1]), error, _chain_fault(index, ends, start)


def _chain_fault(index: np.ndarray, ends: np.ndarray, start: int) -> Optional[ChainFault]:
    """The fault of `index_starts` (its docstring) of parsed entries and their ends."""
    overflow = np.flatnonzero(ends < 0)
    if len(overflow):
        bad = int(overflow[0])
        return CHAIN_OVERFLOW, bad, int(index[bad, 0]), int(index[bad, 1]), 0
    if index[0, 0] != start:
        return CHAIN_NOT_AT_ZERO, 0, int(index[0, 0]), int(index[0, 1]), 0
    gaps = np.flatnonzero(index[1:, 0] != ends[:-1])
    if len(gaps):
        bad = int(gaps[0]) + 1
        return CHAIN_GAP, bad, int(index[bad, 0]), int(index[bad, 1]), int(ends[bad - 1])
    return None


def parse_index(buf) -> Tuple[np.ndarray, Optional[ParseError]]:
    """The (offset, length) pairs of `.tfindex` text, flat, and the first error (module docstring)."""
    data = bytes(buf)
    pairs = _canonical(data)
    if pairs is not None:
        return pairs, None
    return _by_line(data)


def _canonical(data: bytes) -> Optional[np.ndarray]:
    """The pairs when every line is "digits space digits" (numbers of 1-18 digits), else None."""
    if not data:
        return np.zeros(0, dtype=np.int64)
    body = data[:-1] if data.endswith(b"\n") else data
    arr = np.frombuffer(body, dtype=np.uint8)
    seps = np.flatnonzero((arr - np.uint8(ord("0"))) > 9)  # every byte that is not a digit
    if len(seps) % 2 == 0:  # n lines: n spaces and n - 1 newlines
        return None
    kinds = arr[seps]
    if np.any(kinds[0::2] != _SPACE) or np.any(kinds[1::2] != _NEWLINE):
        return None
    widths = np.diff(seps, prepend=-1, append=len(arr)) - 1  # digits in each number
    if widths.min() < 1 or widths.max() > _FAST_DIGITS:
        return None
    return np.fromstring(body, dtype=np.int64, sep=" ")  # text mode: one C pass


def entry_text(line: bytes) -> Optional[bytes]:
    """A line's text without its blanks when it is an entry line, None for a blank or `#` line
    (which the grammar skips)."""
    stripped = line.strip(_BLANKS)
    return stripped if stripped and not stripped.startswith(b"#") else None


def line_pair(stripped: bytes) -> Optional[Tuple[int, int]]:
    """The (offset, length) of an entry line's text (`entry_text`), or None when it is not one."""
    values: List[int] = []
    return None if _pair(stripped, values) else (values[0], values[1])


def _by_line(data: bytes) -> Tuple[np.ndarray, Optional[ParseError]]:
    """The exact grammar, a line at a time (comments, blanks, errors)."""
    values: List[int] = []
    start = 0
    for number, line in enumerate(data.split(b"\n"), 1):
        stripped = entry_text(line)
        if stripped is not None:
            error = _pair(stripped, values)
            if error:
                return np.array(values, dtype=np.int64), (error, number, start)
        start += len(line) + 1
    return np.array(values, dtype=np.int64), None


def _pair(stripped: bytes, values: List[int]) -> int:
    """Append the line's two numbers to `values`; 0, or the error code of the line."""
    head = stripped.rstrip(b"0123456789")  # offset and blanks
    length = stripped[len(head) :]
    offset = head.rstrip(_BLANKS)
    if not length or len(offset) == len(head) or not offset or not set(offset) <= _DIGITS:
        return ERROR_NOT_PAIR
    offset, length = offset.lstrip(b"0") or b"0", length.lstrip(b"0") or b"0"
    if len(offset) > 19 or len(length) > 19:  # (and int() refuses strings of 4,300 digits)
        return ERROR_TOO_BIG
    a, b = int(offset), int(length)
    if a > _INT64_MAX or b > _INT64_MAX:
        return ERROR_TOO_BIG
    values += (a, b)
    return 0


def entry_line(buf, entry: int) -> int:
    """The 1-based line number of pair number `entry` (0-based) in index text that parses
    (for error messages about what the numbers mean: blank and `#` lines count as lines)."""
    seen = 0
    for number, line in enumerate(bytes(buf).split(b"\n"), 1):
        if entry_text(line) is not None:
            if seen == entry:
                return number
            seen += 1
    raise ValueError(f"the text has {seen} pairs, not {entry + 1}")
