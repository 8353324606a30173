"""One identity for a saved torch state (`torch/_identity.py`): every parameter of the order is
a named entry, compared one by one, each that differs named with both values; the same entries
for the per-shard and the elastic path."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tfrecord_beam.torch._identity import (  # noqa: E402
    STATE_VERSION,
    StateIdentity,
    compression_entry,
    indexes_entry,
)
from tfrecord_beam.torch.sampling import FileInfo  # noqa: E402

INFOS = [[FileInfo(False, 100, 4), FileInfo(False, 200, 6)]]
BASE = dict(
    files=["2 files, 300 bytes, 0123456789abcdef"],
    infos=INFOS,
    compressions=[[None, None]],
    seed=0,
    shuffle_queue_size=None,
    shuffle_block=1024,
    weights=None,
    infinite=False,
    skip_corrupt=False,
    elastic=False,
)


def _state(identity: StateIdentity):
    return json.loads(json.dumps({"version": STATE_VERSION, "identity": identity.saved()}))  # as saved to disk


@pytest.mark.parametrize("elastic", [False, True])
@pytest.mark.parametrize(
    "name, changed, saved_text, now_text",
    [
        ("files", dict(files=["3 files, 45 bytes, fedcba9876543210"]), "2 files, 300 bytes", "3 files, 45 bytes"),
        ("indexes", dict(infos=[[FileInfo(False, 100, 5), FileInfo(False, 200, 5)]]), "10 records", "10 records"),
        ("indexes", dict(infos=[[FileInfo(False, 100, None), FileInfo(False, 200, 6)]]), "2 of 2", "1 of 2"),
        ("compression", dict(compressions=[["gzip", "gzip"]]), "'none'", "'gzip'"),
        ("seed", dict(seed=4), "0", "4"),
        ("shuffle_queue_size", dict(shuffle_queue_size=8), "None", "8"),
        ("weights", dict(weights=[("a", 1.0)]), "None", "[['a', 1.0]]"),
        ("infinite", dict(infinite=True), "False", "True"),
        ("skip_corrupt", dict(skip_corrupt=True), "False", "True"),
    ],
)
def test_each_entry_that_differs_is_named_with_both_values(elastic, name, changed, saved_text, now_text):
    mine = StateIdentity.build(**dict(BASE, elastic=elastic))
    mine.check(_state(mine))
    other = StateIdentity.build(**dict(BASE, elastic=elastic, **changed))
    with pytest.raises(ValueError) as refused:
        mine.check(_state(other))
    message = str(refused.value)
    also = elastic and name == "shuffle_queue_size"  # the elastic order's blocks come into use with the shuffle
    assert f"{name}=" in message and message.count(" when saved, ") == 1 + also, message
    saved_part, now_part = message.split(f"{name}=", 2)[1], message.split(f"{name}=", 2)[2]
    assert now_text in saved_part and saved_text in now_part  # the state's value first, then this dataset's


def test_every_difference_is_named_at_once():
    mine = StateIdentity.build(**BASE)
    other = StateIdentity.build(**dict(BASE, seed=3, shuffle_queue_size=64, infinite=True))
    with pytest.raises(ValueError) as refused:
        mine.check(_state(other))
    message = str(refused.value)
    for text in ("seed=3 when saved, seed=0 now", "shuffle_queue_size=64 when saved, shuffle_queue_size=None now"):
        assert text in message
    assert "infinite=True when saved, infinite=False now" in message


def test_no_shuffle_is_one_value_and_the_shuffle_block_counts_only_when_the_elastic_order_shuffles():
    none, zero = (StateIdentity.build(**dict(BASE, shuffle_queue_size=q)) for q in (None, 0))
    assert none == zero
    for elastic, queue, same in [(False, 8, True), (True, None, True), (True, 8, False)]:
        a, b = (
            StateIdentity.build(**dict(BASE, elastic=elastic, shuffle_queue_size=queue, shuffle_block=block))
            for block in (16, 1024)
        )
        assert (a.entries == b.entries) is same, (elastic, queue)


def test_weights_name_their_splits_in_order():
    ab = StateIdentity.build(**dict(BASE, weights=[("a", 0.5), ("b", 0.5)]))
    ba = StateIdentity.build(**dict(BASE, weights=[("b", 0.5), ("a", 0.5)]))
    with pytest.raises(ValueError, match=r"weights=\[\['b', 0.5\], \['a', 0.5\]\] when saved"):
        ab.check(_state(ba))


def test_entries_summarise_many_files_in_a_few_words():
    assert indexes_entry([FileInfo(False, 10, None)] * 3) == "no index (3 files)"
    assert indexes_entry([FileInfo(False, 10, 2), FileInfo(False, 10, None)]).startswith(
        "1 of 2 files indexed, 2 records, "
    )
    assert compression_entry([None] * 1000) == "none"
    mixed = compression_entry(["gzip", None])
    assert mixed.startswith("gzip, none (") and mixed != compression_entry([None, "gzip"])


def test_a_state_without_an_identity_is_not_one_of_this_dataset():
    with pytest.raises(ValueError, match="no identity"):
        StateIdentity.build(**BASE).check({"version": STATE_VERSION})
