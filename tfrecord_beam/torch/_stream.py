"""Records in blocks, handed out one by one or n at a time with an always-exact position.

Records flow from the readers in blocks (one list per file chunk) so the per-record cost of
the pipeline stays small; a `Cursor` hands them out and records, after every hand-out, how
many records of the current pass have left. That position is what `state_dict()` saves.
"""

from __future__ import annotations

import itertools
from typing import Iterator, List, Tuple

from ._files import Item

BLOCK = 512  # records per block when a stream is re-blocked after the shuffle buffer

# (pass number, index within the pass of the block's first record, records)
Block = Tuple[int, int, List[Item]]


def reblock(items: Iterator[Item], size: int = BLOCK) -> Iterator[List[Item]]:
    """Lists of up to `size` consecutive items."""
    while True:
        block = list(itertools.islice(items, size))
        if not block:
            return
        yield block


def skip_blocks(blocks: Iterator[List[Item]], skip: int) -> Iterator[List[Item]]:
    """The same records less the first `skip`."""
    for block in blocks:
        if skip >= len(block):
            skip -= len(block)
            continue
        yield block[skip:] if skip else block
        skip = 0


class Cursor:
    """Hands out the records of a `Block` stream and keeps `position` = [pass, records handed out]."""

    def __init__(self, blocks: Iterator[Block], position: List[int]) -> None:
        self.blocks = blocks
        self.position = position
        self.block: List[Item] = []
        self.at = 0
        self.pass_number, self.first = position[0], position[1]

    def _advance(self) -> bool:
        for self.pass_number, self.first, self.block in self.blocks:
            self.at = 0
            if self.block:
                return True
        return False

    def take(self, n: int) -> List[Item]:
        """Up to `n` records (fewer only at the end)."""
        out: List[Item] = []
        while len(out) < n:
            if self.at >= len(self.block) and not self._advance():
                break
            stop = min(self.at + n - len(out), len(self.block))
            if not out and stop - self.at == n:
                out = self.block[self.at:stop]
            else:
                out.extend(self.block[self.at:stop])
            self.at = stop
            self.position[0], self.position[1] = self.pass_number, self.first + self.at
        return out

    def __iter__(self) -> "Cursor":
        return self

    def __next__(self) -> Item:
        if self.at >= len(self.block) and not self._advance():
            raise StopIteration
        item = self.block[self.at]
        self.at += 1
        self.position[0], self.position[1] = self.pass_number, self.first + self.at
        return item
