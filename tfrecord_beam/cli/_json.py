"""The commands' `--json` output: always valid UTF-8 JSON, whatever the file names.

A file name that is not UTF-8 reaches Python as a str holding surrogate escapes (PEP 383:
byte 0xff is U+DCFF); printed as is, it goes out as the raw byte 0xff, which no JSON parser
takes, and `\\udcff` (what `ensure_ascii` would write) is a lone surrogate that strict
parsers refuse too. So every string of the output (paths, error messages, keys) carries
each byte that is not UTF-8 as the four characters `\\xHH` (Python's `backslashreplace`):
`b"x\\xff.tfrecord"` is written `"x\\\\xff.tfrecord"` (the text `x\\xff.tfrecord`), as the
commands' error lines show it. Text that is UTF-8 is written as it is.
"""

from __future__ import annotations

import json
from typing import Any


def text(value: str) -> str:
    """`value` with its surrogate escapes (bytes that were not UTF-8) as `\\xHH` text."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte stands for: its code point as text
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """`value` as indented JSON text that encodes to valid UTF-8 (see the module doc)."""
    return json.dumps(_clean(value), indent=2, ensure_ascii=False, default=lambda v: text(str(v)))
