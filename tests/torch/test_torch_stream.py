"""`tfrecord_beam.torch._stream` directly: blocks of records cut from a reader buffer, their
parts, re-blocking and skipping, and the `Cursor` whose position (pass, records handed out)
is what a dataset's `state_dict()` saves: it must be exact after every hand-out."""

from __future__ import annotations

import numpy as np
import pytest

from tfrecord_beam.torch._stream import Block, Cursor, ItemBlock, reblock, skip_blocks


def _block(path: str = "f.tfrecord", n: int = 6, numbered: bool = True, first: int = 0) -> Block:
    """n payloads b"r0", b"r1", ... laid in one buffer with filler between them, as a chunk."""
    buffer, offsets, lengths = b"", [], []
    for i in range(n):
        payload = f"r{first + i}".encode()
        buffer += b"#" * 3
        offsets.append(len(buffer))
        lengths.append(len(payload))
        buffer += payload
    record_offsets = np.arange(n, dtype=np.int64) * 100 + 1000
    numbers = np.arange(first, first + n, dtype=np.int64) if numbered else None
    return Block(buffer, np.array(offsets, np.int64), np.array(lengths, np.int64), record_offsets, numbers, path)


def test_block_cuts_payloads_and_knows_where_each_came_from():
    block = _block()
    assert len(block) == 6 and block.payloads() == [b"r0", b"r1", b"r2", b"r3", b"r4", b"r5"]
    assert block.items()[2] == block.item(2) == (b"r2", "f.tfrecord", 1200, 2)
    assert block.where(5) == ("f.tfrecord", 1500, 5)
    unnumbered = _block(numbered=False)
    assert unnumbered.item(1) == (b"r1", "f.tfrecord", 1100, None) and unnumbered.where(1)[2] is None


def test_block_parts_by_slice_and_mask():
    block = _block()
    assert block.part(slice(2, 5)).items() == block.items()[2:5]
    mask = np.array([True, False, True, False, False, True])
    assert block.part(mask).items() == [block.item(i) for i in (0, 2, 5)]
    assert _block(numbered=False).part(mask).where(1) == ("f.tfrecord", 1200, None)


def test_item_blocks_behave_as_blocks():
    items = _block().items()
    block = ItemBlock(items)
    assert len(block) == 6 and block.payloads() == [i[0] for i in items] and block.item(3) == items[3]
    assert block.part(slice(1, 3)).items() == items[1:3] and block.where(4) == items[4][1:]


def test_reblock_and_skip_blocks():
    items = _block(n=10).items()
    blocks = list(reblock(iter(items), size=4))
    assert [len(b) for b in blocks] == [4, 4, 2] and [i for b in blocks for i in b.items()] == items
    for skip in range(12):
        assert [i for b in skip_blocks(iter(blocks), skip) for i in b.items()] == items[skip:]


def _passes():
    """Two passes over two blocks of a file each: (pass, index of the block's first record in its pass, block)."""
    return [
        (0, 0, _block(n=3)),
        (0, 3, _block(n=0)),
        (0, 3, _block(n=4, first=3)),
        (1, 0, _block(n=3)),
        (1, 3, _block(n=4, first=3)),
    ]


def test_cursor_iterates_with_an_exact_position():
    position = [0, 0]
    cursor = Cursor(iter(_passes()), position)
    seen = []
    for item in cursor:
        seen.append((item[0], tuple(position)))
    payloads = [f"r{i}".encode() for i in range(7)]
    assert [s[0] for s in seen] == payloads * 2
    assert [s[1] for s in seen] == [(0, i) for i in range(1, 8)] + [(1, i) for i in range(1, 8)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 20])
def test_cursor_take_hands_out_n_records_at_a_time(n):
    position = [0, 0]
    cursor = Cursor(iter(_passes()), position)
    handed, positions = [], []
    while True:
        parts = cursor.take(n)
        got = [i for part in parts for i in part.items()]
        if not got:
            break
        assert len(got) == n or len(handed) + len(got) == 14  # fewer only at the end
        handed += got
        positions.append(tuple(position))
    assert [i[0] for i in handed] == [f"r{i}".encode() for i in range(7)] * 2
    # after each take the position says how far into its pass the last record handed out was
    done = np.cumsum([n] * len(positions))
    done[-1] = 14
    assert positions == [(0, int(d)) if d <= 7 else (1, int(d) - 7) for d in done]


def test_cursor_mixes_take_and_next():
    position = [0, 0]
    cursor = Cursor(iter(_passes()), position)
    assert next(cursor)[0] == b"r0"
    assert [i[0] for p in cursor.take(4) for i in p.items()] == [b"r1", b"r2", b"r3", b"r4"]
    assert position == [0, 5]
    assert next(cursor)[0] == b"r5" and position == [0, 6]
