"""What a dead-letter output carries: one bad record's file, offset and reason."""

from __future__ import annotations

from typing import NamedTuple, Optional

#: Tag of the dead-letter output of ReadFromTFRecord / DecodeExamples with skip_corrupt=True.
CORRUPT_TAG = "corrupt"


class CorruptRecord(NamedTuple):
    """A record that could not be read or decoded.

    `file` and `offset` (the record's header offset in the uncompressed stream) are None when
    unknown, e.g. for a payload handed to DecodeExamples without its origin.
    """

    file: Optional[str]
    offset: Optional[int]
    reason: str
