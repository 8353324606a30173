"""The bounded-memory tests' shared inputs (`tests/helpers/scale.Inputs`): made once for all
the processes of a session, never seen half made, removed by the last user to close."""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

from helpers.scale import Inputs


class TinyInputs(Inputs):
    """Inputs whose making is a 3-file stand-in, slow enough for two users to race, and noted
    in `made` (one line per make, any user)."""

    def __init__(self, root: Path, user: str, made: Path) -> None:
        super().__init__(root, user)
        self.made = made

    def _make(self, key: str, directory: Path) -> int:
        with open(self.made, "a") as note:
            note.write(f"{key} {self.user}\n")
        time.sleep(0.2)  # another user asks meanwhile
        for k in range(3):
            (directory / f"in-{k}.tfrecord").write_bytes(bytes([k]) * 10)
        return 30


def test_two_users_racing_make_an_input_once_and_see_it_whole(tmp_path):
    made = tmp_path / "made.txt"
    root = tmp_path / "inputs"
    users = [TinyInputs(root, name, made) for name in ("a", "b")]
    seen = {}
    start = threading.Barrier(2)

    def ask(user):
        start.wait()
        seen[user.user] = ([p.read_bytes() for p in user.tfrecords("small")], user.tfrecord_count("small"))

    threads = [threading.Thread(target=ask, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made.read_text().splitlines()) == 1  # one make for both
    want = ([bytes([k]) * 10 for k in range(3)], 30)
    assert seen == {"a": want, "b": want}
    directory = root / "tfrecords-small"
    assert not stat.S_IMODE(directory.stat().st_mode) & 0o222  # read-only once in place
    assert all(not stat.S_IMODE(p.stat().st_mode) & 0o222 for p in directory.iterdir())
    assert not list(root.glob("*.tmp"))
    users[0].close()
    assert directory.exists()  # b still uses it
    users[1].close()
    assert not root.exists()  # the last user removes the inputs


def test_a_makers_leftover_is_removed_and_the_input_made(tmp_path):
    made = tmp_path / "made.txt"
    root = tmp_path / "inputs"
    root.mkdir()
    stale = root / "tfrecords-small.dead.tmp"  # a maker that died mid-way
    stale.mkdir()
    (stale / "in-0.tfrecord").write_bytes(b"half")
    user = TinyInputs(root, "c", made)
    try:
        assert len(user.tfrecords("small")) == 3 and user.tfrecord_count("small") == 30
        assert not stale.exists()
        assert made.read_text() == "tfrecords-small c\n"
        assert user.tfrecords("small") and made.read_text() == "tfrecords-small c\n"  # kept, not made again
    finally:
        user.close()
    later = TinyInputs(root, "d", made)  # one that comes after the last close makes it again
    try:
        assert len(later.tfrecords("small")) == 3
        assert made.read_text().splitlines()[-1] == "tfrecords-small d"
    finally:
        later.close()
