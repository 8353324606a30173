"""Issue 22 item 2: one owner for an output's commit and its recovery (`beam._lock`), and a
journal whose application never undoes another's: a run killed at its commit point, then two
recoverers started together (a barrier), lose no shard, every time."""

import json
import multiprocessing
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from helpers.jobs import entries, payloads, stage_shards

from tfrecord_beam import manifest as mf
from tfrecord_beam.beam import _fs, _lock, commit


def _shards(tag: str, count: int, n: int = 3):
    return [(f"x-{i:05d}-of-{count:05d}", payloads(n, i + (100 if tag == "new" else 0))) for i in range(count)]


def _fork(body) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            code = body()
        finally:
            os._exit(code)
    return pid


def _crash_at_the_commit_point(prefix: str, shards) -> None:
    """A run that writes its journal and is killed right there (its lock claim stays behind)."""

    def body():
        os.environ[commit._STOP_ENV] = "1"  # the first step: just after _JOURNAL.json
        commit._steps[0] = 0
        output = commit.Output(prefix, "test", {"run": "new"}, overwrite=True, say=lambda m: None)
        output.commit(stage_shards(output, shards))
        return 0

    _, status = os.waitpid(_fork(body), 0)
    assert os.WIFSIGNALED(status)


def _slow_filesystem():
    """Widen every window between a check and an action (as a slow object store does)."""
    exists = _fs.exists

    def slow_exists(path):
        time.sleep(0.002)
        return exists(path)

    _fs.exists = slow_exists


def _recover_together(prefix: str, runs: int = 2):
    """`runs` re-runs started at once (a barrier); each one's exit code (0: recovered or found
    nothing to do) and what it said."""
    barrier = multiprocessing.get_context("fork").Barrier(runs)
    said = [f"{prefix}.notes-{i}.json" for i in range(runs)]

    def body(i):
        _slow_filesystem()
        notes = []
        barrier.wait()
        try:
            commit.Output(prefix, "test", {"run": "rerun"}, overwrite=True, say=notes.append).abort()
            code = 0
        except commit.OutputError as exc:
            notes.append(str(exc))
            code = 1
        Path(said[i]).write_text(json.dumps(notes))
        return code

    pids = [_fork(lambda i=i: body(i)) for i in range(runs)]
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    notes = []
    for path in said:
        notes.append(json.loads(Path(path).read_text()) if os.path.exists(path) else ["(said nothing)"])
        if os.path.exists(path):
            os.remove(path)
    return codes, notes


def _check_complete(directory: Path, prefix: str, records: int):
    found = mf.find_manifest(prefix)
    assert found is not None, entries(directory)
    manifest = mf.read_manifest(found)
    missing = [e.name for e in manifest.shards if not (directory / e.name).exists()]
    assert missing == []
    for entry in manifest.shards:
        assert mf.check_shard(entry, str(directory / entry.name), full=True) == []
    assert manifest.records == records and manifest.arguments["run"] == "new"
    left = [n for n in entries(directory) if n.startswith((commit.TEMP_PREFIX, _lock.LOCK_PREFIX))]
    assert left == []


def test_a_commit_killed_at_its_journal_then_two_reruns_at_once_lose_no_shard(tmp_path):
    for attempt in range(8):
        directory = tmp_path / f"try{attempt}"
        prefix = str(directory / "x")
        first = commit.Output(prefix, "test", {"run": "old"}, say=lambda m: None)
        first.commit(stage_shards(first, _shards("old", 3)))
        _crash_at_the_commit_point(prefix, _shards("new", 24))
        assert mf.find_manifest(prefix) is None or mf.read_manifest(mf.find_manifest(prefix)).arguments["run"] == "old"
        codes, notes = _recover_together(prefix)
        completing = [n for run in notes for n in run if "completing the interrupted commit" in n]
        assert len(completing) == 1, notes  # exactly one owner finished it
        for code, said in zip(codes, notes):  # the other waited, then found nothing to finish, or
            assert code == 0 or "is writing this output now" in said[-1], notes  # met the first's new run
        _check_complete(directory, prefix, 24 * 3)


def test_journal_application_never_deletes_what_another_process_moved(tmp_path, monkeypatch):
    """Without the lock too (a holder that lost it and has not noticed yet): a staged file
    another process moved between this one's look and its move stays in place."""
    prefix = str(tmp_path / "x")
    output = commit.Output(prefix, "test", {"run": "new"}, say=lambda m: None)
    shards = stage_shards(output, _shards("new", 2))
    manifest = mf.Manifest(job="test", output_prefix="x", shards=shards, arguments={"run": "new"})
    _fs.write_bytes(output.temp_path(commit.STAGED_MANIFEST), manifest.to_json().encode())
    journal = {"moves": manifest.files(), "remove": [], "manifest": output.manifest_name}
    moved_by_the_other = shards[0].name
    os.replace(output.temp_path(moved_by_the_other), output.final_path(moved_by_the_other))
    exists, looked = _fs.exists, []

    def stale_look(path):  # this process looked once, before the other moved it
        if path == output.temp_path(moved_by_the_other) and not looked:
            looked.append(path)
            return True
        return exists(path)

    monkeypatch.setattr(_fs, "exists", stale_look)
    commit._apply_journal(output.directory, output.temp_dir, journal)
    monkeypatch.undo()
    _check_complete(tmp_path, prefix, 6)


def _fake_claim(directory: Path, name: str, generation: int, **record):
    claim = directory / f"{_lock.LOCK_PREFIX}{name}.{generation:010d}.json"
    base = {"host": "another-machine", "pid": 4242, "job": "reshard", "started_utc": "T", "beat": 0}
    claim.write_text(json.dumps(dict(base, **record)))
    return claim


def test_a_claim_from_another_machine_that_is_not_renewed_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_BEAM_LOCK_LEASE", "0.5")
    stale = _fake_claim(tmp_path, "x", 7)
    notes = []
    started = time.monotonic()
    commit.Output(str(tmp_path / "x"), "test", say=notes.append).abort()
    assert time.monotonic() - started >= 0.5  # it waited for the lease on its own clock
    assert any("its claim was not renewed" in n and "another-machine" in n for n in notes), notes
    assert not stale.exists() and not [n for n in entries(tmp_path) if n.startswith(_lock.LOCK_PREFIX)]


def test_a_claim_that_is_renewed_is_waited_for_then_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_BEAM_LOCK_LEASE", "0.5")
    monkeypatch.setenv("TFRECORD_BEAM_LOCK_WAIT", "1.5")
    live = _fake_claim(tmp_path, "x", 3)
    stop = threading.Event()

    def renew():
        beat = 0
        while not stop.wait(0.1):
            beat += 1
            _fake_claim(tmp_path, "x", 3, beat=beat)

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        with pytest.raises(commit.OutputError, match="holds the commit lock of this output"):
            commit.Output(str(tmp_path / "x"), "test", say=lambda m: None)
    finally:
        stop.set()
        renewer.join()
    assert live.exists()


def test_a_live_holder_on_this_host_is_waited_for(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_BEAM_LOCK_WAIT", "0.5")
    record = commit.Owner.mine(str(tmp_path / "x"), "reshard").record  # this very process: alive
    _fake_claim(tmp_path, "x", 1, **record)
    with pytest.raises(commit.OutputError, match="holds the commit lock"):
        commit.Output(str(tmp_path / "x"), "test", say=lambda m: None)


def test_a_holder_whose_claim_was_taken_over_stops(tmp_path):
    lock = _lock.CommitLock(
        str(tmp_path),
        "x",
        {"host": socket.gethostname()},
        state=lambda r: "unknown",
        describe=lambda r: str(r.get("host")),
        say=lambda m: None,
        lease=0.2,
    )
    with lock:
        lock.check()
        _fake_claim(tmp_path, "x", lock.generation + 1)  # another process took it over
        deadline = time.monotonic() + 5
        while lock.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(_lock.LockError, match="taken over by another-machine"):
            lock.check()


def test_create_exclusive_has_one_winner_among_racing_processes(tmp_path):
    path = str(tmp_path / "claim.json")
    barrier = multiprocessing.get_context("fork").Barrier(6)

    def body():
        barrier.wait()
        return 0 if _lock.create_exclusive(path, str(os.getpid()).encode()) else 1

    pids = [_fork(body) for _ in range(6)]
    codes = sorted(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids)
    assert codes == [0, 1, 1, 1, 1, 1]
    assert [n for n in os.listdir(tmp_path)] == ["claim.json"]  # no temporary left behind


class _IgnoresIfNoneMatch:
    """An S3 client whose server stores every PutObject, If-None-Match or not (older S3 servers)."""

    def __init__(self) -> None:
        self.objects: dict = {}

    def put_object(self, Bucket, Key, Body, **kwargs):  # noqa: N803 - boto3's names
        self.objects[(Bucket, Key)] = Body
        return {}

    def delete_object(self, Bucket, Key):  # noqa: N803
        self.objects.pop((Bucket, Key), None)
        return {}


class _HonoursIfNoneMatch(_IgnoresIfNoneMatch):
    def put_object(self, Bucket, Key, Body, **kwargs):  # noqa: N803
        from botocore.exceptions import ClientError

        if kwargs.get("IfNoneMatch") == "*" and (Bucket, Key) in self.objects:
            raise ClientError(
                {"Error": {"Code": "PreconditionFailed"}, "ResponseMetadata": {"HTTPStatusCode": 412}}, "PutObject"
            )
        return super().put_object(Bucket, Key, Body)


def test_an_s3_server_that_ignores_if_none_match_is_refused_loudly(monkeypatch):
    """A server that ignores If-None-Match answers 200 to every racer: two owners. The lock
    must find that out (a probe per bucket) and refuse, not grant the claim."""
    server = _IgnoresIfNoneMatch()
    monkeypatch.setattr(_lock, "_s3_client", lambda: server)
    monkeypatch.setattr(_lock, "_S3_PROBED", {})
    with pytest.raises(_lock.LockError, match="If-None-Match"):
        _lock.create_exclusive("s3://bkt/out/.tfrecord_beam-lock.x.0000000001.json", b"a")
    assert ("bkt", "out/.tfrecord_beam-lock.x.0000000001.json") not in server.objects
    assert not server.objects  # the probe cleaned up after itself

    good = _HonoursIfNoneMatch()
    monkeypatch.setattr(_lock, "_s3_client", lambda: good)
    monkeypatch.setattr(_lock, "_S3_PROBED", {})
    assert _lock.create_exclusive("s3://bkt/out/claim.json", b"a") is True
    assert _lock.create_exclusive("s3://bkt/out/claim.json", b"b") is False
    assert good.objects == {("bkt", "out/claim.json"): b"a"}


def test_a_holder_that_stalled_past_its_lease_stops_even_after_the_taker_released(tmp_path):
    """A holder frozen (SIGSTOP, a long pause) past its lease is taken over; the taker finishes
    and releases, deleting every claim. When the first one wakes, no higher generation is
    there to see, yet it no longer owns the output: check() must say so, and its renewal
    must not re-create its old claim (which would make waiters wait for a non-owner)."""

    def make(host: str) -> _lock.CommitLock:
        return _lock.CommitLock(
            str(tmp_path),
            "x",
            {"host": host},
            state=lambda r: "unknown",
            describe=lambda r: str(r.get("host")),
            say=lambda m: None,
            lease=0.4,
        )

    first = make("first").acquire()
    first._stop.set()  # frozen: its renewal thread stops beating
    first._beat_thread.join()
    first._stop.clear()
    taker = make("taker").acquire()  # after the lease on its own clock
    assert taker.generation == first.generation + 1
    taker.release()
    assert not [n for n in entries(tmp_path) if n.startswith(_lock.LOCK_PREFIX)]
    time.sleep(0.3)  # the frozen one wakes up past half its lease
    with pytest.raises(_lock.LockError, match="no longer holds|taken over"):
        first.check()
    first.release()
    assert not [n for n in entries(tmp_path) if n.startswith(_lock.LOCK_PREFIX)]


def test_a_holder_that_lost_its_lock_writes_no_journal(tmp_path, monkeypatch):
    """The journal is the commit point: a run whose lock was taken over while it staged must stop
    before writing it, so the taker's output is never finished by a stale journal."""
    prefix = str(tmp_path / "x")
    output = commit.Output(prefix, "test", {"run": "new"}, say=lambda m: None)
    shards = stage_shards(output, _shards("new", 2))

    def lost(self):
        raise _lock.LockError("taken over by another run")

    monkeypatch.setattr(_lock.CommitLock, "check", lost)
    with pytest.raises(Exception, match="taken over"):
        output.commit(shards)
    monkeypatch.undo()
    assert not list(tmp_path.glob("x*.tfrecord")), "nothing may be moved into place"
    assert not list(tmp_path.rglob(commit.JOURNAL)), "no journal may be written"
