"""Described features that the data does not have: a typo (`{"scroe": "float"}`) would
otherwise decode to empty values in every batch, or to an all-null Parquet column, silently.

`absent_features(payloads, description, sequence_description)` looks at sample records and
returns each described name no record has, with the closest names the records do have;
`check_described` turns that into a warning, or an error with `strict=True`.
"""

from __future__ import annotations

import difflib
import warnings
from typing import Dict, Iterable, List, Mapping, Optional

from .errors import DecodeError


class FeatureNameWarning(UserWarning):
    """A described feature is in none of the sampled records (a typo?)."""


def absent_features(
    payloads: Iterable[bytes],
    description: Optional[Mapping[str, object]],
    sequence_description: Optional[Mapping[str, object]] = None,
) -> Dict[str, List[str]]:
    """{described name: closest names present} for every described name that no sampled record
    has (context features and feature lists searched alike). {} when nothing was sampled."""
    from ._proto import INVALID, parse_record

    present: set = set()
    sampled = 0
    for payload in payloads:
        kind, features, lists = parse_record(payload)
        if kind == INVALID:
            continue
        sampled += 1
        present.update(features or ())
        present.update(lists or ())
    if not sampled:
        return {}
    return absent_names(present, list(description or ()) + list(sequence_description or ()))


def absent_names(present: Iterable[str], wanted: Iterable[str]) -> Dict[str, List[str]]:
    """{wanted name: closest present names} for each wanted name not `present` (when the
    features present are known another way, e.g. from a statistics scan)."""
    present = sorted(set(present))
    return {name: difflib.get_close_matches(name, present, n=3, cutoff=0.5) for name in wanted if name not in present}


def message(where: str, absent: Dict[str, List[str]], records: str = "the first records") -> str:
    """One line naming each absent feature and the closest names that exist."""
    parts = []
    for name, close in absent.items():
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        parts.append(f"{name!r}{hint}")
    return f"{where}: described feature(s) {', '.join(parts)} not in any of {records}: they will decode as missing"


def check_described(
    where: str,
    payloads: Iterable[bytes],
    description,
    sequence_description=None,
    strict: bool = False,
    records: str = "the first records",
) -> Dict[str, List[str]]:
    """Warn (FeatureNameWarning), or with `strict` raise DecodeError, when described features
    are in none of `payloads`; returns what `absent_features` found."""
    absent = absent_features(payloads, description, sequence_description)
    if absent:
        text = message(where, absent, records)
        if strict:
            raise DecodeError(where, None, None, text.split(": ", 1)[1])
        warnings.warn(text, FeatureNameWarning, stacklevel=3)
    return absent
