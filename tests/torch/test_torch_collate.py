"""`tfrecord_beam.torch._collate` directly: records -> samples and batches. Every batch is
compared with the per-record decoder (`example.decode_example` / `decode_sequence_example`),
laid out as the module says (zero-padded rows plus `_lengths`, `[B, T, L]` feature lists with
`_steps` and `_lengths`, bytes as object arrays); errors name the file, offset and record."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tfrecord_beam.errors import DecodeError  # noqa: E402
from tfrecord_beam.example import decode_example, decode_sequence_example, encode_example, encode_sequence_example  # noqa: E402
from tfrecord_beam.torch._collate import (  # noqa: E402
    Batch,
    Sample,
    SequenceBatch,
    collate_batch,
    decode_record,
    decode_records,
    padded,
    padded_steps,
)
from tfrecord_beam.torch._stream import Block, ItemBlock  # noqa: E402

DESC = {"x": "float", "i": "int", "b": "byte"}


def _records(n: int = 7):
    out = []
    for r in range(n):
        features = {"x": ([r + 0.5 * k for k in range(r % 4)], "float"), "i": ([r, -r], "int")}
        if r % 3:
            features["b"] = ([b"v%d" % k for k in range(r % 3)], "byte")
        out.append(encode_example(features))
    return out


def _buffer_block(payloads, path="f.tfrecord", first=0) -> Block:
    """The payloads as a reader chunk would hold them: one buffer, offsets into it."""
    buffer, offsets = b"", []
    for p in payloads:
        buffer += b"\0" * 12
        offsets.append(len(buffer))
        buffer += p + b"\0" * 4
    n = len(payloads)
    return Block(
        buffer,
        np.array(offsets, np.int64),
        np.array([len(p) for p in payloads], np.int64),
        np.arange(n, dtype=np.int64) * 1000,
        np.arange(first, first + n, dtype=np.int64),
        path,
    )


def _item_block(payloads, path="g.tfrecord") -> ItemBlock:
    return ItemBlock([(p, path, 7 * i, i) for i, p in enumerate(payloads)])


def _same_sample(got, want) -> bool:
    if set(got) != set(want):
        return False
    for k in want:
        a, b = got[k], want[k]
        if isinstance(b, np.ndarray) and b.dtype != object:
            if not (isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)):
                return False
        elif (list(a) if isinstance(a, np.ndarray) else a) != (list(b) if isinstance(b, np.ndarray) else b):
            return False
    return True


def _padded_rows(rows, dtype):
    width = max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), width), dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.array([len(r) for r in rows], np.int64)


@pytest.mark.parametrize("make", [_buffer_block, _item_block], ids=["reader-buffer", "items"])
def test_example_batch_matches_the_per_record_decoder(make):
    payloads = _records()
    batch = collate_batch([make(payloads)], DESC, None, False)
    assert isinstance(batch, Batch)
    records = [decode_example(p, DESC) for p in payloads]
    for name, dtype in (("x", np.float32), ("i", np.int64)):
        dense, lengths = _padded_rows([r[name] if name in r else [] for r in records], dtype)
        assert batch[name].dtype == torch.from_numpy(dense).dtype and np.array_equal(batch[name].numpy(), dense)
        assert np.array_equal(batch[name + "_lengths"].numpy(), lengths)
    want_b = [r.get("b") for r in records]
    got_b = batch["b"]
    assert got_b.dtype == object and len(got_b) == len(payloads)
    for got, want in zip(got_b, want_b):
        want = [] if want is None else want
        assert (got if isinstance(got, bytes) else list(got)) == (want if isinstance(want, bytes) else list(want))


def test_batch_over_several_blocks_equals_one_block():
    payloads = _records(9)
    whole = collate_batch([_buffer_block(payloads)], DESC, None, False)
    split = collate_batch(
        [_buffer_block(payloads[:4]), _item_block(payloads[4:6]), _buffer_block(payloads[6:])], DESC, None, False
    )
    assert list(whole) == list(split)
    for k in whole:
        a, b = whole[k], split[k]
        assert np.array_equal(a.numpy(), b.numpy()) if isinstance(a, torch.Tensor) else list(a) == list(b)


def test_no_description_means_every_feature_seen():
    payloads = _records()
    batch = collate_batch([_buffer_block(payloads)], None, None, False)
    assert set(batch) == {"x", "x_lengths", "i", "i_lengths", "b"}


@pytest.mark.parametrize("description", [DESC, None, {"x": "float", "i": None}])
def test_decode_records_equals_decode_record_on_both_paths(description):
    payloads = _records()
    for block in (_buffer_block(payloads), _item_block(payloads)):
        got = list(decode_records([block], description, None, False))
        want = [decode_record(item, description, None, False) for item in block.items()]
        assert len(got) == len(want) and all(isinstance(g, Sample) and _same_sample(g, w) for g, w in zip(got, want))


def test_a_bad_record_is_named_and_the_records_before_it_come_out():
    payloads = _records(5)
    payloads[3] = b"\xff\xff\xff"
    block = _buffer_block(payloads, path="bad.tfrecord", first=40)
    out = decode_records([block], DESC, None, False)
    assert [_same_sample(next(out), decode_example(p, DESC)) for p in payloads[:3]] == [True] * 3
    with pytest.raises(DecodeError) as err:
        next(out)
    assert (err.value.path, err.value.offset, err.value.record_number) == ("bad.tfrecord", 3000, 43)
    with pytest.raises(DecodeError) as err:  # a batch names the file's record, not the batch position
        collate_batch([_item_block(payloads[:1]), block], DESC, None, False)
    assert (err.value.path, err.value.offset, err.value.record_number) == ("bad.tfrecord", 3000, 43)


def test_sequence_batch_layout():
    steps = [[[1, 2], [3]], [], [[4], [5, 6, 7], []]]
    payloads = [
        encode_sequence_example(
            {"id": ([k], "int")},
            {"s": ([np.array(t, np.int64) for t in rec], "int"), "w": ([[b"a" * (len(t) + 1)] for t in rec], "byte")},
        )
        for k, rec in enumerate(steps)
    ]
    lists = {"s": "int", "w": "byte"}
    batch = collate_batch([_buffer_block(payloads)], {"id": "int"}, lists, True)
    assert isinstance(batch, SequenceBatch)
    context, sequences = batch
    assert np.array_equal(context["id"].numpy(), [[0], [1], [2]])
    assert np.array_equal(sequences["s_steps"].numpy(), [2, 0, 3])
    assert np.array_equal(sequences["s_lengths"].numpy(), [[2, 1, 0], [0, 0, 0], [1, 3, 0]])
    want = np.zeros((3, 3, 3), np.int64)
    for i, rec in enumerate(steps):
        for t, values in enumerate(rec):
            want[i, t, : len(values)] = values
    assert np.array_equal(sequences["s"].numpy(), want)
    assert "w_steps" not in sequences and sequences["w"].dtype == object
    assert [list(rec) for rec in sequences["w"]] == [[b"aaa", b"aa"], [], [b"aa", b"aaaa", b"a"]]
    for rec, payload in zip(sequences["w"], payloads):  # the per-record decoder holds the same steps
        assert decode_sequence_example(payload, {"id": "int"}, lists)[1]["w"] == list(rec)


def test_padded_helpers():
    values = np.array([1, 2, 3, 4, 5, 6], np.int64)
    dense, lengths = padded(values, np.array([0, 2, 2, 6]))
    assert np.array_equal(dense, [[1, 2, 0, 0], [0, 0, 0, 0], [3, 4, 5, 6]]) and np.array_equal(lengths, [2, 0, 4])
    dense, lengths = padded(values, np.array([0, 3, 6]))  # equal rows: a reshape
    assert np.array_equal(dense, [[1, 2, 3], [4, 5, 6]]) and np.array_equal(lengths, [3, 3])
    dense, steps, lengths = padded_steps(values, np.array([0, 1, 3]), np.array([0, 2, 3, 6]))
    assert np.array_equal(steps, [1, 2]) and np.array_equal(lengths, [[2, 0], [1, 3]])
    assert np.array_equal(dense, [[[1, 2, 0], [0, 0, 0]], [[3, 0, 0], [4, 5, 6]]])
    assert padded(np.zeros(0, np.float32), np.array([0]))[0].shape == (0, 0)


def test_a_feature_named_like_another_ones_lengths_is_an_error():
    payloads = [encode_example({"x": ([1.0], "float"), "x_lengths": ([2], "int")})]
    with pytest.raises(ValueError, match="'x_lengths' clashes"):
        collate_batch([_buffer_block(payloads)], None, None, False)


def test_batches_and_samples_pickle_as_arrays_and_come_back_equal():
    batch = collate_batch([_buffer_block(_records())], DESC, None, False)
    back = pickle.loads(pickle.dumps(batch))
    assert type(back) is Batch and list(back) == list(batch)
    assert all(np.array_equal(back[k].numpy(), batch[k].numpy()) for k in batch if isinstance(batch[k], torch.Tensor))
    sample = next(decode_records([_buffer_block(_records())], DESC, None, False))
    again = pickle.loads(pickle.dumps(sample))
    assert type(again) is Sample and _same_sample(again, sample)


def test_default_collate_of_ragged_samples_names_the_feature():
    from torch.utils.data import default_collate

    samples = list(decode_records([_buffer_block(_records(4))], {"x": "float", "i": "int"}, None, False))
    stacked = default_collate([{"i": s["i"]} for s in samples])
    assert stacked["i"].shape == (4, 2)
    with pytest.raises(RuntimeError, match="feature 'x' has"):
        default_collate(samples)
