"""The lifecycle of a job's output: staging, owner record, overwrite policy, commit journal,
manifest last, recovery of crashed runs, dead letters. Everything goes through Beam's
FileSystems (`_fs`), so it works the same on local disks, gs:// and s3://.

    output = commit.Output("out/train", job="reshard", arguments=vars(args), overwrite=False)
    ... the pipeline writes into output.temp_dir ...
    output.commit([ShardEntry(...), ...])          # or output.abort() on failure

1. **Before any work** (`Output(...)`): the name part of the prefix must not be empty; staging
   directories `.tfrecord_beam-tmp-*` of this output left by dead runs are finished (when
   their commit had begun) or removed, and each is reported on stderr; a live run's staging
   is never touched (its owner is alive on this host, or lives on another host): that is an
   error. Existing output (a manifest, or shards named `NAME-SSSSS-of-NNNNN*`) is an error
   unless `overwrite`. Then the staging directory is created with `_OWNER.json` (host, pid,
   start time, output): writing it is the check that the location is writable.
2. **Commit**: the manifest is written into staging, then `_JOURNAL.json` (which files move
   where, which old files go) -- from here on the commit is decided and any later run finishes
   it. Then: the old manifest is deleted (the output reads as incomplete from now on), each
   staged file is moved to its final name, old files not replaced are deleted, the manifest is
   moved into place, and the staging directory is deleted. Every step can be redone, so a
   crash at any point leaves either the old output, or a journal the next run completes.
   SIGINT is held back while the commit runs (it then exits 130 with the output complete).
3. **One owner**: a commit, and the completion of an interrupted one (step 1), run under the
   output's commit lock (`_lock.CommitLock`: create-if-absent claims, works on object
   stores), so two runs never apply a journal at once; under it a journal found is finished
   whoever wrote it (its writer would hold the lock if it were still committing).

`TFRECORD_BEAM_COMMIT_STOP_AFTER=N` (tests only) kills the process after N commit steps
(`TFRECORD_BEAM_COMMIT_STOP_SIGNAL=INT` interrupts it instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import apache_beam as beam

from .. import fs as core_fs
from .. import manifest as _manifest
from ..manifest import Manifest, ShardEntry
from . import _fs
from ._lock import CommitLock, LockError

TEMP_PREFIX = _manifest.STAGING_PREFIX
OWNER = "_OWNER.json"
JOURNAL = _manifest.JOURNAL_NAME  # readers check for it (`manifest.check_no_commit_pending`)
STAGED_MANIFEST = "_MANIFEST.json"
DEAD_LETTER_DIR = "_corrupt"
_STOP_ENV = "TFRECORD_BEAM_COMMIT_STOP_AFTER"


class OutputError(Exception):
    """The output location cannot be used as asked (one line for the user)."""


def _say(message: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def _process_start() -> Optional[str]:
    """This process's start time as the kernel counts it (tells a reused pid apart), if known."""
    return _proc_start(os.getpid())


def _pid_space() -> Optional[str]:
    """Which pids this process can see: the kernel's boot id and its pid namespace (Linux).

    Host names repeat (containers, VMs from one image); a pid is only worth checking when
    the owner saw the same pids as we do.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        return f"{boot}:{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def _proc_start(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def split_prefix(output_prefix: str) -> Tuple[str, str]:
    """(directory, name part) of an output prefix; OutputError when the name part is empty."""
    prefix = _fs.plain(output_prefix)
    if prefix.endswith("/") or prefix in ("", ".") or prefix.rsplit("/", 1)[-1] in ("", ".", ".."):
        raise OutputError(
            f"--output_prefix {output_prefix!r} has no file name part: "
            "give a prefix such as out/train (shards become out/train-00000-of-00004.tfrecord)"
        )
    if "://" in prefix and "%" in prefix:
        raise OutputError(
            f"--output_prefix {output_prefix!r}: a remote output named with a percent-encoded character is not "
            "supported (its shards are written by Beam's sinks, which take names literally); choose a name without '%'"
        )
    if "/" not in prefix:
        return ".", prefix
    directory, name = prefix.rsplit("/", 1)
    if directory.endswith(":/"):  # s3://bucket
        directory += "/"
    return directory or "/", name


class Owner:
    """Who a staging directory belongs to, and whether that run can still be alive."""

    def __init__(self, record: Dict[str, Any]) -> None:
        self.record = record

    @classmethod
    def mine(cls, output: str, job: str) -> "Owner":
        return cls(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "proc_start": _process_start(),
                "pid_space": _pid_space(),
                "started": time.time(),
                "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "output": output,
                "job": job,
            }
        )

    def describe(self) -> str:
        r = self.record
        return (
            f"{r.get('job', '?')} run pid {r.get('pid')} on host {r.get('host')}, started {r.get('started_utc', '?')}"
        )

    def state(self) -> str:
        """ "alive", "dead" or "unknown" (another host: its processes cannot be seen from here)."""
        r = self.record
        if r.get("host") != socket.gethostname() or r.get("pid_space") != _pid_space():
            return "unknown"
        pid = r.get("pid")
        if not isinstance(pid, int):
            return "unknown"
        if not core_fs.pid_alive(pid):
            return "dead"
        started = r.get("proc_start")
        if started is not None and _proc_start(pid) not in (None, started):
            return "dead"  # the pid was reused by another process
        return "alive"


class Output:
    """One job's output under `output_prefix` (see the module docstring)."""

    def __init__(
        self,
        output_prefix: str,
        job: str,
        arguments: Optional[Dict[str, Any]] = None,
        overwrite: bool = False,
        say: Callable[[str], None] = _say,
    ) -> None:
        self.directory, self.name = split_prefix(output_prefix)
        if "://" not in self.directory:  # one spelling per output, however the prefix was given
            self.directory = os.path.abspath(self.directory)
        self.prefix = _fs.join(self.directory, self.name)
        self.job, self.arguments, self.overwrite, self._say = job, dict(arguments or {}), overwrite, say
        self.owner = Owner.mine(self.prefix, job)
        self.temp_dir = ""
        self.committed = False
        try:
            _fs.mkdirs(self.directory)
            self.recover()
            self._check_existing()
            self.temp_dir = _fs.join(self.directory, TEMP_PREFIX + uuid.uuid4().hex[:12])
            _fs.mkdirs(self.temp_dir)
            _fs.write_bytes(self.temp_path(OWNER), json.dumps(self.owner.record, indent=1).encode("utf-8"))
        except OutputError:
            raise
        except Exception as exc:  # noqa: BLE001 - any filesystem error means "cannot write there"
            self._remove_staging()
            raise OutputError(f"cannot write to output location {self.directory!r}: {exc}") from None

    # -- names -------------------------------------------------------------------------------
    def temp_path(self, name: str) -> str:
        return _fs.join(self.temp_dir, name)

    def final_path(self, name: str) -> str:
        return _fs.join(self.directory, name)

    @property
    def manifest_name(self) -> str:
        return _manifest.manifest_name(self.name)

    # -- before the work ---------------------------------------------------------------------
    def _stagings(self) -> List[Tuple[str, Optional[Owner]]]:
        """Staging directories in the output directory that belong to this output."""
        out: List[Tuple[str, Optional[Owner]]] = []
        for directory in _staging_dirs(self.directory):
            try:
                record = json.loads(_fs.read_bytes(_fs.join(directory, OWNER)).decode("utf-8"))
            except Exception:  # noqa: BLE001 - no or broken owner record
                out.append((directory, None))
                continue
            if record.get("output") == self.prefix:
                out.append((directory, Owner(record)))
        return out

    def lock(self) -> CommitLock:
        """The output's commit lock (`_lock`): held while a commit, or its recovery, runs."""
        return CommitLock(
            self.directory,
            self.name,
            self.owner.record,
            state=lambda record: Owner(record).state(),
            describe=lambda record: Owner(record).describe(),
            say=self._say,
        )

    def recover(self) -> None:
        """Finish or remove what dead runs of this output left; refuse when a live run writes it.

        Under the commit lock: a commit (journal) found then has no live committer (a
        committer holds the lock until it is done), so it is finished whoever its owner was,
        by this run alone, after any other run that finished it first (the staging is then gone).
        """
        try:
            with self.lock() as lock:
                self._recover(lock)
        except LockError as exc:
            raise OutputError(str(exc)) from None

    def _recover(self, lock: CommitLock) -> None:
        for directory, owner in self._stagings():
            journal = _read_journal(directory)
            if journal is not None:
                who = "a dead " + owner.describe() if owner is not None else "a run without owner record"
                self._say(f"completing the interrupted commit of {who} ({directory})")
                _apply_journal(self.directory, directory, journal, lock.check)
                continue
            if owner is None:
                self._say(f"note: {directory} has no owner record; left alone (remove it by hand if no run uses it)")
                continue
            state = owner.state()
            if state != "dead":
                how = (
                    "is writing this output now"
                    if state == "alive"
                    else "may be writing this output (another host or container: cannot tell whether it is alive)"
                )
                raise OutputError(
                    f"{owner.describe()} {how}; its staging is {directory} "
                    "(if that run is dead, remove the directory by hand and run again)"
                )
            self._say(f"removing staging of a dead {owner.describe()} ({directory})")
            lock.check()
            _fs.delete_dir(directory)

    def existing(self) -> List[str]:
        """Names in the output directory that belong to an output under this prefix."""
        name = _fs.escape(self.name)
        names = _fs.list_names(self.directory, name + "*") + _fs.list_names(self.directory, "_*." + name + ".*")
        owned = set(_manifest.owned_by_prefix(self.name, names))
        if self.manifest_name in names:
            try:
                old = Manifest.from_json(_fs.read_bytes(self.final_path(self.manifest_name)).decode("utf-8"))
                owned |= {n for n in old.files() if n in set(names)}
            except Exception:  # noqa: BLE001 - an unreadable manifest still marks the output as there
                pass
        return sorted(owned)

    def _check_existing(self) -> None:
        found = self.existing()
        if found and not self.overwrite:
            what = "a complete output" if self.manifest_name in found else "files of an incomplete output"
            raise OutputError(
                f"{self.prefix}: {what} of another run is there ({len(found)} files, e.g. {found[0]}); "
                "pass --overwrite to replace it"
            )

    # -- dead letters ------------------------------------------------------------------------
    def dead_letters(self) -> "DeadLetters":
        """The Beam-side writer of this output's dead-letter records (see `DeadLetters`)."""
        return DeadLetters(self.temp_path(DEAD_LETTER_DIR))

    def collect_dead_letters(self) -> Tuple[int, Optional[str]]:
        """Join the committed dead-letter parts into `_CORRUPT.NAME.jsonl` in staging.

        Returns (count, staged file name or None when nothing was skipped). Streams line by
        line, so memory does not grow with the number of bad records.
        """
        parts = DeadLetters(self.temp_path(DEAD_LETTER_DIR)).committed_parts()
        if not parts:
            return 0, None
        count = 0
        name = _manifest.dead_letter_name(self.name)
        with _fs.atomic_output(self.temp_path(name)) as (handle, done):
            for part in parts:
                data = _fs.read_bytes(part)
                count += data.count(b"\n")
                handle.write(data)
            done()
        if not count:
            _fs.delete([self.temp_path(name)])
            return 0, None
        return count, name

    # -- commit ------------------------------------------------------------------------------
    def commit(
        self,
        shards: List[ShardEntry],
        extra_files: Iterable[str] = (),
        *,
        corrupt_records: int = 0,
        dead_letters: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> List[str]:
        """Move the staged shards (and `extra_files`, names in staging) into place as one
        commit with the manifest last; returns the final paths of the data files."""
        try:
            with self.lock() as lock, _hold_sigint():  # Ctrl-C still works while waiting for the lock
                return self._commit(lock, shards, extra_files, corrupt_records, dead_letters, details)
        except LockError as exc:
            raise OutputError(f"{exc}; this run's output was not committed") from None

    def _commit(
        self,
        lock: CommitLock,
        shards: List[ShardEntry],
        extra_files: Iterable[str],
        corrupt_records: int,
        dead_letters: Optional[str],
        details: Optional[Dict[str, Any]],
    ) -> List[str]:
        self._check_rivals()
        if not self.overwrite:
            self._check_existing()  # another run may have committed while this one worked
        self._check_staged(shards)
        old = set(self.existing())
        run = dict(self.owner.record, committed_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        manifest = Manifest(
            job=self.job,
            output_prefix=self.name,
            shards=list(shards),
            arguments=self.arguments,
            corrupt_records=int(corrupt_records),
            dead_letters=dead_letters,
            run=run,
            details=dict(details or {}),
        )
        new = manifest.files() + [n for n in extra_files if n not in manifest.files()]
        _fs.write_bytes(self.temp_path(STAGED_MANIFEST), manifest.to_json().encode("utf-8"))
        journal = {
            "moves": new,
            "remove": sorted(old - set(new) - {self.manifest_name}),
            "manifest": self.manifest_name,
        }
        lock.check()  # a holder whose lock was taken over must not write a journal (the commit point)
        _fs.write_bytes(self.temp_path(JOURNAL), json.dumps(journal, indent=1).encode("utf-8"))
        _step()  # the commit point: from here on a later run finishes it
        _apply_journal(self.directory, self.temp_dir, journal, lock.check)
        self.committed = True
        return [self.final_path(s.name) for s in shards]

    def _check_staged(self, shards: List[ShardEntry]) -> None:
        """Refuse to commit a shard whose staged file is not the size its writer wrote (the
        manifest's `file_bytes`): cut off, replaced or missing since it was written.

        Why sizes and not record counts: the records are proven before this point. Each entry's
        records, payload bytes and checksum are its writer's digest of the frames it handed to
        the file, already checked equal to what the shard was given, and the file's size equal
        to the bytes it wrote, when it closed (`jobs.check_written`); the job checked the sum
        against its input's. What can happen to a staged file after that is that it is cut,
        grown, removed or replaced: the size catches all of these except a replacement by a file
        of the same size, and the one writer of a staged name is that shard's (a retried one
        writes the same records from the same plan). A count would need the file read again (a
        header walk reads every page of small records; a compressed shard must be inflated):
        one more full read of every shard, for damage that keeps the size and changes only the
        framing; damage inside payloads it would miss anyway (that is `tfrecord-beam verify`'s
        full CRC read). Comparing the writer's digest carried in the manifest would compare the
        entry with itself: the entry is made from that digest."""
        for entry in shards:
            path = self.temp_path(entry.name)
            try:
                size = _fs.file_size(path)
            except FileNotFoundError:
                size = None
            if size != entry.file_bytes:
                found = "missing" if size is None else f"{size} bytes"
                raise OutputError(
                    f"{entry.name}: {found} in staging, its writer wrote {entry.file_bytes} bytes "
                    f"({entry.records} records); this run's output was not committed"
                )

    def _check_rivals(self) -> None:
        """Refuse to commit when another run of this output, started at the same time (both
        passed the check at the start), is committing or started first: the earlier run wins."""
        mine = self.owner.record.get("started", 0)
        for directory, owner in self._stagings():
            if owner is None or directory.rstrip("/") == self.temp_dir.rstrip("/") or owner.state() == "dead":
                continue
            if _read_journal(directory) is not None or owner.record.get("started", 0) <= mine:
                raise OutputError(
                    f"{owner.describe()} is writing this output too ({directory}); this run's output was not committed"
                )

    def abort(self) -> None:
        """Remove the staging directory, unless a commit has begun (the next run finishes it)."""
        if self.committed or not self.temp_dir:
            return
        if _read_journal(self.temp_dir) is not None:
            try:
                with self.lock() as lock:
                    journal = _read_journal(self.temp_dir)  # again, under the lock: another run may have finished it
                    if journal is not None:
                        _apply_journal(self.directory, self.temp_dir, journal, lock.check)
            except Exception:  # noqa: BLE001
                self._say(f"the commit in {self.temp_dir} was interrupted; the next run of this output completes it")
            return
        self._remove_staging()

    def _remove_staging(self) -> None:
        if self.temp_dir:
            try:
                _fs.delete_dir(self.temp_dir)
            except Exception:  # noqa: BLE001
                self._say(f"could not remove {self.temp_dir}; remove it by hand")


def check_writable(directory: str) -> None:
    """OutputError unless a file can be created (and removed) in `directory` (made if missing)."""
    probe = _fs.join(directory, f".tfrecord_beam-probe-{uuid.uuid4().hex[:12]}")
    try:
        _fs.mkdirs(directory)
        _fs.create(probe).close()
        _fs.delete([probe])
    except Exception as exc:  # noqa: BLE001 - any filesystem error means "cannot write there"
        raise OutputError(f"cannot write to output location {directory!r}: {exc}") from None


def _staging_dirs(directory: str) -> List[str]:
    """Staging directories (`.tfrecord_beam-tmp-*`) directly inside `directory`."""

    if "://" in _fs.plain(directory):  # object stores have no directories: find their owner records
        found = _fs.match(_fs.join(_fs.escape(directory), TEMP_PREFIX + "*/" + OWNER))  # decoded once, as every path
        return sorted({m.path.rsplit("/", 1)[0] for m in found})
    path = _fs.plain(directory)
    if not os.path.isdir(path):
        return []
    return sorted(
        os.path.join(path, n)
        for n in os.listdir(path)
        if n.startswith(TEMP_PREFIX) and os.path.isdir(os.path.join(path, n))
    )


def _read_journal(staging: str) -> Optional[Dict[str, Any]]:
    path = _fs.join(staging, JOURNAL)
    if not _fs.exists(path):
        return None
    return json.loads(_fs.read_bytes(path).decode("utf-8"))


def _apply_journal(
    directory: str, staging: str, journal: Dict[str, Any], check: Callable[[], None] = lambda: None
) -> None:
    """Carry out (or finish) a commit; every step can be repeated after a crash, and none
    undoes what another process applying the same journal did (each file only ever moves
    from staging to its final name, replacing what is there in one step; the old manifest is
    deleted only while it is not the new one). `check` runs before every step (the lock's)."""
    final_manifest = _fs.join(directory, journal["manifest"])
    staged_manifest = _fs.join(staging, STAGED_MANIFEST)
    if _fs.exists(staged_manifest) and _fs.exists(final_manifest) and not _same_bytes(staged_manifest, final_manifest):
        check()
        _delete_if_there(final_manifest)  # the output reads as incomplete from here on
        _step()
    for name in journal["moves"]:
        staged, final = _fs.join(staging, name), _fs.join(directory, name)
        if _fs.exists(staged):
            check()
            _move_in(staged, final)
            _step()
    for name in journal["remove"]:
        final = _fs.join(directory, name)
        if _fs.exists(final):
            check()
            _delete_if_there(final)
            _step()
    if _fs.exists(staged_manifest):
        check()
        _move_in(staged_manifest, final_manifest)
        _step()
    check()
    _fs.delete_dir(staging)


def _move_in(staged: str, final: str) -> None:
    """Move a staged file to its final name, replacing what is there in one step (never a
    delete first: another process that already moved it must not lose it to this one). A
    staged file already gone was moved by another process applying the same journal."""
    try:
        if _remote(final):
            _fs.rename(staged, final)  # an object store's copy replaces the object
        else:
            os.replace(_fs.plain(staged), _fs.plain(final))
    except Exception:
        if _fs.exists(staged) or not _fs.exists(final):
            raise


def _delete_if_there(path: str) -> None:
    try:
        _fs.delete([path])
    except Exception:
        if _fs.exists(path):
            raise


def _same_bytes(a: str, b: str) -> bool:
    try:
        return _fs.read_bytes(a) == _fs.read_bytes(b)
    except Exception:  # noqa: BLE001 - one is gone: not the same
        return False


def _remote(path: str) -> bool:
    return "://" in _fs.plain(path)


_steps = [0]


def _step() -> None:
    """Count a commit step; the test hook stops the process after the N-th."""
    limit = os.environ.get(_STOP_ENV)
    if not limit:
        return
    _steps[0] += 1
    if _steps[0] >= int(limit):
        sig = signal.SIGINT if os.environ.get("TFRECORD_BEAM_COMMIT_STOP_SIGNAL") == "INT" else signal.SIGKILL
        os.kill(os.getpid(), sig)
        time.sleep(0.5)  # let a held-back SIGINT be noted


@contextlib.contextmanager
def _hold_sigint() -> Iterator[None]:
    """Hold SIGINT back while a commit runs; re-raise it (KeyboardInterrupt) once it is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt("interrupted during the commit (the output was committed)")


# ---------------------------------------------------------------------------------------------
# Dead letters: corrupt records a job skipped, written beside its output


class DeadLetters:
    """Writes a PCollection of `CorruptRecord(file, offset, reason)` under a staging directory.

    Each bundle writes one JSON-lines part file and emits its name; a final step lists the
    parts of committed bundles in `_parts.json`, so a retried bundle's part is never counted
    twice. `Output.collect_dead_letters` joins them.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def write(self, corrupt, label: str = "DeadLetters"):
        """Attach the writer to `corrupt` (a PCollection); returns nothing useful."""
        directory = self.directory
        parts = corrupt | f"{label}Write" >> beam.ParDo(_WritePart(directory))
        listed = parts | f"{label}List" >> beam.combiners.ToList()
        return listed | f"{label}Index" >> beam.Map(
            lambda names: _fs.write_bytes(_fs.join(directory, "_parts.json"), json.dumps(sorted(names)).encode())
        )

    def committed_parts(self) -> List[str]:
        index = _fs.join(self.directory, "_parts.json")
        if not _fs.exists(index):
            return []
        return [_fs.join(self.directory, n) for n in json.loads(_fs.read_bytes(index).decode("utf-8"))]


def corrupt_line(record) -> bytes:
    """One dead-letter line: {"file", "offset", "reason"} as JSON."""
    file, offset, reason = record
    return (json.dumps({"file": file, "offset": offset, "reason": reason}, sort_keys=True) + "\n").encode("utf-8")


class _WritePart(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def start_bundle(self) -> None:
        self._lines: List[bytes] = []

    def process(self, record):
        self._lines.append(corrupt_line(record))
        if len(self._lines) >= 10000:
            yield self._flush()

    def _flush(self) -> str:
        name = f"part-{uuid.uuid4().hex}.jsonl"
        _fs.mkdirs(self.directory)
        _fs.write_bytes(_fs.join(self.directory, name), b"".join(self._lines))
        self._lines = []
        return name

    def finish_bundle(self):
        if self._lines:
            from apache_beam.transforms import window

            yield window.GlobalWindows.windowed_value(self._flush())
