"""The arithmetic under every digest (`digest`): SplitMix64's mix, the sum of two digests, and
the digest of `.tfindex` entries. A leaf module, so that the index format (`_tfindex`) keeps
the digest of what it writes without importing `digest`, whose `file_digest` reads files
through `_reader`, which imports the index format. `digest` re-exports these names.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

_MASK64 = (1 << 64) - 1


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over a uint64 array: a bijection whose outputs look i.i.d. uniform."""
    z = np.asarray(x, dtype=np.uint64).copy()
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def index_digest(offsets: np.ndarray, frame_sizes: np.ndarray) -> Tuple[int, int, int]:
    """(entries, frame bytes indexed, checksum) of `.tfindex` entries (offset, frame size): what
    build_index proves its indexes with. An entry's key mixes its offset with its size, so the
    sum, though it does not depend on the order the entries are added in, changes when an
    entry is lost, doubled, altered or moved to another offset."""
    sizes = np.asarray(frame_sizes, dtype=np.int64)
    if not len(sizes):
        return 0, 0, 0
    # offset times an odd constant (the golden ratio's), plus the size: one mix per entry
    keys = np.asarray(offsets, dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    keys += sizes.astype(np.uint64)
    return len(sizes), sizes.sum().item(), mix64(keys).sum(dtype=np.uint64).item()


def add_digests(a: Tuple[int, int, int], b: Tuple[int, int, int]) -> Tuple[int, int, int]:
    """The digest of two disjoint sets of records together."""
    return a[0] + b[0], a[1] + b[1], (a[2] + b[2]) & _MASK64
