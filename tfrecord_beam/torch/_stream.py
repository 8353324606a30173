"""Records in blocks, handed out one by one or n at a time with an always-exact position.

Records flow from the readers in blocks (one list per file chunk) so the per-record cost of
the pipeline stays small; a `Cursor` hands them out and records, after every hand-out, how
many records of the current pass have left. That position is what `state_dict()` saves.
"""

from __future__ import annotations

import itertools
from itertools import repeat
from typing import Any, Iterator, List, Optional, Tuple, Union

import numpy as np

# One record cut out: (payload, path, offset, record number or None when unknown).
Item = Tuple[bytes, str, int, Optional[int]]

BLOCK = 512  # records per block when a stream is re-blocked after the shuffle buffer


class Block:
    """Records lying in one reader buffer; payloads are cut out of it only when needed, and a
    batch inside one block is decoded straight from the buffer."""

    __slots__ = ("buffer", "payload_offsets", "payload_lengths", "record_offsets", "numbers", "path")

    def __init__(
        self,
        buffer: bytes,
        payload_offsets: np.ndarray,
        payload_lengths: np.ndarray,
        record_offsets: np.ndarray,
        numbers: Optional[np.ndarray],
        path: str,
    ) -> None:
        self.buffer = buffer
        self.payload_offsets = payload_offsets
        self.payload_lengths = payload_lengths
        self.record_offsets = record_offsets
        self.numbers = numbers  # record numbers in the file, or None when unknown
        self.path = path

    def __len__(self) -> int:
        return len(self.payload_offsets)

    def part(self, which: Union[slice, np.ndarray]) -> "Block":
        """The records selected by a slice or a boolean mask."""
        return Block(
            self.buffer,
            self.payload_offsets[which],
            self.payload_lengths[which],
            self.record_offsets[which],
            None if self.numbers is None else self.numbers[which],
            self.path,
        )

    def payloads(self) -> List[bytes]:
        buf = self.buffer
        cut = zip(self.payload_offsets.tolist(), self.payload_lengths.tolist())
        if isinstance(buf, bytes):
            return [buf[o : o + n] for o, n in cut]
        view = memoryview(buf)  # a view of a remote read-ahead block: each payload its own bytes
        return [view[o : o + n].tobytes() for o, n in cut]

    def views(self) -> List[memoryview]:
        """Each payload as a view into the buffer (no copy; for a decoder reading them at once)."""
        view = memoryview(self.buffer)
        return [view[o : o + n] for o, n in zip(self.payload_offsets.tolist(), self.payload_lengths.tolist())]

    def items(self) -> List[Item]:
        numbers = repeat(None) if self.numbers is None else self.numbers.tolist()
        return list(zip(self.payloads(), repeat(self.path), self.record_offsets.tolist(), numbers))

    def item(self, i: int) -> Item:
        o, n = int(self.payload_offsets[i]), int(self.payload_lengths[i])
        payload = self.buffer[o : o + n]
        return (
            payload if isinstance(payload, bytes) else bytes(payload),
            self.path,
            int(self.record_offsets[i]),
            None if self.numbers is None else int(self.numbers[i]),
        )

    def where(self, i: int) -> Tuple[str, int, Optional[int]]:
        """(path, offset, record number) of record i, for error messages."""
        return self.path, int(self.record_offsets[i]), None if self.numbers is None else int(self.numbers[i])


class ItemBlock:
    """Records already cut into `Item`s (after the shuffle buffer or the mixer), as a Block."""

    __slots__ = ("records",)

    def __init__(self, records: List[Item]) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def part(self, which: slice) -> "ItemBlock":
        return ItemBlock(self.records[which])

    def payloads(self) -> List[bytes]:
        return [r[0] for r in self.records]

    def items(self) -> List[Item]:
        return self.records

    def views(self) -> List[Any]:
        return self.payloads()

    def item(self, i: int) -> Item:
        return self.records[i]

    def where(self, i: int) -> Tuple[str, int, Optional[int]]:
        return self.records[i][1:]


AnyBlock = Union[Block, ItemBlock]
# (pass number, index within the pass of the block's first record, records)
PassBlock = Tuple[int, int, AnyBlock]


def reblock(items: Iterator[Item], size: int = BLOCK) -> Iterator[ItemBlock]:
    """ItemBlocks of up to `size` consecutive items."""
    while True:
        records = list(itertools.islice(items, size))
        if not records:
            return
        yield ItemBlock(records)


def drop_first(block: Any, skip: int) -> Tuple[Any, int]:
    """`block` less its first `skip` records (None when nothing is left of it), and how many
    records are still to skip after it: the one skipping step of `skip_blocks` and of
    `FileSet.stream`."""
    if skip >= len(block):
        return None, skip - len(block)
    return (block.part(slice(skip, None)) if skip else block), 0


def skip_blocks(blocks: Iterator[Any], skip: int) -> Iterator[Any]:
    """The same records less the first `skip`."""
    for block in blocks:
        block, skip = drop_first(block, skip)
        if block is not None:
            yield block


class Cursor:
    """Hands out the records of a `PassBlock` stream and keeps `position` = [pass, records handed out]."""

    def __init__(self, blocks: Iterator[PassBlock], position: List[int]) -> None:
        self.blocks = blocks
        self.position = position
        self.block: AnyBlock = ItemBlock([])
        self.at = 0
        self.pass_number, self.first = position[0], position[1]

    def _advance(self) -> bool:
        for pass_number, first, block in self.blocks:
            self.pass_number, self.first, self.block, self.at = pass_number, first, block, 0
            if len(block):
                return True
        return False

    def take(self, n: int) -> List[AnyBlock]:
        """Up to `n` records (fewer only at the end) as parts of blocks."""
        out: List[AnyBlock] = []
        wanted = n
        while wanted:
            if self.at >= len(self.block) and not self._advance():
                break
            stop = min(self.at + wanted, len(self.block))
            out.append(
                self.block if self.at == 0 and stop == len(self.block) else self.block.part(slice(self.at, stop))
            )
            wanted -= stop - self.at
            self.at = stop
            self.position[0], self.position[1] = self.pass_number, self.first + self.at
        return out

    def __iter__(self) -> "Cursor":
        return self

    def __next__(self) -> Item:
        if self.at >= len(self.block) and not self._advance():
            raise StopIteration
        item = self.block.item(self.at)
        self.at += 1
        self.position[0], self.position[1] = self.pass_number, self.first + self.at
        return item
