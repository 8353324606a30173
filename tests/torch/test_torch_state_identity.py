"""One identity for a saved torch state (`torch/_identity.py`): the files check and the elastic
order check are one check, built in one place, the clearer cause named first."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tfrecord_beam.torch._identity import StateIdentity, order_id  # noqa: E402

FILES = ["2 files, 30 bytes, 0123456789abcdef"]


def _state(identity: StateIdentity):
    state = {"files": identity.files}
    if identity.order is not None:
        state["elastic"] = {"order": identity.order}
    return json.loads(json.dumps(state))  # as saved to disk


def test_the_same_identity_loads_and_a_state_of_other_files_names_them():
    order = order_id([10], [[4, 6]], 0, 1024, None, False)
    mine = StateIdentity(FILES, order)
    mine.check(_state(mine))
    other = StateIdentity(["3 files, 45 bytes, fedcba9876543210"], order_id([15], [[4, 6, 5]], 0, 1024, None, False))
    with pytest.raises(ValueError, match=r"other files .*3 files, 45 bytes.*2 files, 30 bytes"):
        mine.check(_state(other))  # the files' message first, not the order's


@pytest.mark.parametrize(
    "changed",
    [
        dict(queue=8),  # shuffled
        dict(weights=[0.5]),
        dict(infinite=True),
        dict(counts=[[5, 5]]),  # an index rewritten with other record counts
    ],
)
def test_another_order_over_the_same_files_says_the_files_match(changed):
    base = dict(records=[10], counts=[[4, 6]], queue=0, block=1024, weights=None, infinite=False)
    args = dict(base, **changed)

    def ident(a):
        return StateIdentity(
            FILES, order_id(a["records"], a["counts"], a["queue"], a["block"], a["weights"], a["infinite"])
        )

    with pytest.raises(ValueError, match="another elastic order.*names and sizes match"):
        ident(base).check(_state(ident(args)))


def test_the_shuffle_block_counts_only_when_shuffling():
    assert order_id([10], [[10]], 0, 16, None, False) == order_id([10], [[10]], 0, 1024, None, False)
    assert order_id([10], [[10]], 4, 16, None, False) != order_id([10], [[10]], 4, 1024, None, False)


def test_a_state_saved_before_files_were_recorded_gets_the_general_order_message():
    mine = StateIdentity(FILES, order_id([10], [[10]], 0, 1024, None, False))
    old = {"elastic": {"order": order_id([10], [[10]], 4, 1024, None, False)}}
    with pytest.raises(ValueError, match="its files, their record counts"):
        mine.check(old)
    mine.check({"elastic": {"order": mine.order}})
