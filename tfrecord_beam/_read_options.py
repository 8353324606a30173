"""How records are read and decoded, as one frozen value built once at a public edge.

The torch datasets and the `tfrecord`-package loaders (`compat`) take the same reading
settings (descriptions, compression, CRC checks, corrupt-record skipping, strictness); each
edge builds one `ReadOptions` from its arguments and passes it down, so descriptions are
normalised once, compression is resolved by one rule, and bad settings fail at construction
(not in a DataLoader worker, not at the first record).

What `compression=None` means differs by edge, for backward compatibility, and is translated
in exactly one place, `dropin_compression`:

* the core (`RecordReader`, `RecordWriter`, `ReadOptions(compression=...)`): None means
  *uncompressed*; "auto" means "from the file name";
* the `tfrecord` drop-ins (`compat` loaders and `TFRecordWriter`, the torch datasets'
  `compression_type`): None means *from the file name* ("auto"), since the `tfrecord`
  package's users pass `compression_type=None` for plain files and detecting `.gz` / `.zlib`
  by name is our extension that keeps those calls working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

from .compression import normalize as normalize_compression
from .example import Description, has_all_kinds, normalize_description

__all__ = ["ReadOptions", "dropin_compression"]

NormalizedDescription = Optional[Dict[str, Optional[str]]]


def dropin_compression(compression_type: Optional[str]) -> Optional[str]:
    """A `tfrecord`-package style `compression_type` as the core's compression setting.

    The one translation between the two meanings of None: None -> "auto" (gzip / zlib from
    the file name, else uncompressed); any other spelling normalised (`compression.normalize`: "GZIP" -> "gzip",
    "none" -> None). Raises ValueError for an unknown name.
    """
    if compression_type is None:
        return "auto"
    return normalize_compression(compression_type)


def _flag(name: str, value: object) -> bool:
    """`value` as a bool; a string or None is refused (`strict="false"` would be truthy)."""
    if not isinstance(value, (bool, int, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return bool(value)


@dataclass(frozen=True)
class ReadOptions:
    """Reading settings, validated and normalised at construction.

    Attributes:
        description: the Example (or SequenceExample context) features, normalised to
            {name: kind or None}; None for every feature present. Accepts whatever
            `normalize_description` accepts (list of names, {name: kind}, None).
        sequence_description: the SequenceExample feature lists, normalised the same way.
        sequence: whether records are SequenceExamples. Defaults to "a sequence description
            was given" (`sequence_description is not None`, so `[]` means every list).
        compression: the core's setting: None (uncompressed), a codec name or "auto" (from
            the file name). Edges with the `tfrecord` package's meaning of None build it with
            `ReadOptions.dropin(...)`.
        verify: check both CRCs of every record.
        skip_corrupt: skip (count and log) corrupt records instead of raising.
        strict: a described feature that is missing is an error (loaders: KeyError per record;
            torch datasets: a described feature absent from the first records is a DecodeError).

    Descriptions are plain dicts (the decoders take them as they are): treat them as read-only.
    """

    description: NormalizedDescription = None
    sequence_description: NormalizedDescription = None
    sequence: Optional[bool] = field(default=None)
    compression: Optional[str] = None
    verify: bool = True
    skip_corrupt: bool = False
    strict: bool = False

    def __post_init__(self) -> None:
        given_sequence = self.sequence_description
        set_ = object.__setattr__  # frozen: the normalised values replace the given ones here only
        try:
            set_(self, "description", normalize_description(self.description))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"description: {exc}") from None
        try:
            set_(self, "sequence_description", normalize_description(given_sequence))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"sequence_description: {exc}") from None
        sequence = given_sequence is not None if self.sequence is None else _flag("sequence", self.sequence)
        if not sequence and self.sequence_description:
            raise ValueError("sequence=False with a sequence_description: SequenceExamples need sequence=True")
        set_(self, "sequence", sequence)
        set_(self, "compression", normalize_compression(self.compression))
        for name in ("verify", "skip_corrupt", "strict"):
            set_(self, name, _flag(name, getattr(self, name)))

    @classmethod
    def dropin(
        cls,
        description: Description = None,
        sequence_description: Description = None,
        compression_type: Optional[str] = None,
        *,
        verify: bool = True,
        skip_corrupt: bool = False,
        strict: bool = False,
        sequence: Optional[bool] = None,
    ) -> "ReadOptions":
        """The options of a `tfrecord`-package style call: `compression_type=None` means "from
        the file name" (`dropin_compression`); everything else as the constructor."""
        # the fields take any Description: __post_init__ normalises them in place
        return cls(
            description=description,  # type: ignore[arg-type]
            sequence_description=sequence_description,  # type: ignore[arg-type]
            compression=dropin_compression(compression_type),
            verify=verify,
            skip_corrupt=skip_corrupt,
            strict=strict,
            sequence=sequence,
        )

    @property
    def all_kinds(self) -> bool:
        """Every described feature (and feature list, for SequenceExamples) has a kind: the
        columnar decoders can take whole chunks."""
        return has_all_kinds(self.description) and (not self.sequence or has_all_kinds(self.sequence_description))
