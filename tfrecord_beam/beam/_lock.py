"""One owner for an output's commit and its recovery, on every filesystem (object stores too).

Committing an output, or finishing the interrupted commit of a dead run, moves and deletes
files by a journal; two processes doing it at once lose files (the second deletes what the
first just moved). So both hold `CommitLock` around it: a claim that only one live process
can win, with no flock (object stores have none) and no trust in clocks across machines.

The lock of output `DIR/NAME` is a series of claim files `DIR/.tfrecord_beam-lock.NAME.G.json`
(G, the generation, zero-padded), each made by **create-if-absent**: a hard link of a written
temporary file locally (atomic, and the content is whole when the name appears), a PutObject
with `If-None-Match: *` on S3 (a server that ignores it is found by a probe and refused), `ifGenerationMatch=0` on GCS. The holder is the process that
made the highest generation. To take the lock:

* no claim file: create generation 1;
* the top claim's holder is dead (same host and pid namespace, pid gone or reused), or it
  has not renewed its claim for `lease` seconds as measured on the waiter's own clock (its
  heartbeat counter did not change): create the next generation (a takeover; one after a
  lease ran out is reported, since that holder may only be slow);
* else wait (polling), up to `wait` seconds, then `OutputError` naming the holder.

Of several waiters creating the same generation exactly one succeeds. After creating one, the
winner lists again: a higher generation means the claim came too late (a released generation
re-created) and is void. While held, a thread renews the claim every `lease / 4` seconds and
stops when a higher generation appears: the lock was taken over (its holder looked dead);
`check()` then raises, and callers check before every step they take under the lock.
Releasing deletes the holder's claim (and older ones). Environment (tests):
`TFRECORD_BEAM_LOCK_LEASE` (seconds, default 60), `TFRECORD_BEAM_LOCK_WAIT` (default 600).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from . import _fs

LOCK_PREFIX = ".tfrecord_beam-lock."
_GEN_DIGITS = 10


class LockError(Exception):
    """The output's lock cannot be taken or was lost (one line for the user)."""


class CommitLock:
    """The lock of one output (see the module docstring); a context manager."""

    def __init__(
        self,
        directory: str,
        name: str,
        owner: Dict[str, Any],
        *,
        state: Callable[[Dict[str, Any]], str],
        describe: Callable[[Dict[str, Any]], str],
        say: Callable[[str], None],
        lease: Optional[float] = None,
        wait: Optional[float] = None,
    ) -> None:
        self.directory, self.name = directory, name
        self.record = dict(owner, token=uuid.uuid4().hex, beat=0)
        self._state, self._describe, self._say = state, describe, say
        self.lease = float(os.environ.get("TFRECORD_BEAM_LOCK_LEASE", 60)) if lease is None else lease
        self.wait = float(os.environ.get("TFRECORD_BEAM_LOCK_WAIT", 600)) if wait is None else wait
        self.generation: Optional[int] = None
        self.lost: Optional[str] = None
        self._stop = threading.Event()
        self._beat_thread: Optional[threading.Thread] = None
        self._renewed = 0.0  # time.monotonic() of the last renewal that found the claim ours
        self._renewing = threading.Lock()  # check() and the renewal thread renew one at a time

    # -- names ---------------------------------------------------------------------------------
    def _path(self, generation: int) -> str:
        return _fs.join(self.directory, f"{LOCK_PREFIX}{self.name}.{generation:0{_GEN_DIGITS}d}.json")

    def generations(self) -> List[int]:
        """The generations of this output's claim files, ascending."""
        pattern = re.compile(re.escape(f"{LOCK_PREFIX}{self.name}.") + rf"(\d{{{_GEN_DIGITS}}})\.json")
        found = []
        for name in _fs.list_names(self.directory, LOCK_PREFIX + "*"):
            match = pattern.fullmatch(name)
            if match:
                found.append(int(match[1]))
        return sorted(found)

    def _read(self, generation: int) -> Optional[Dict[str, Any]]:
        try:
            return json.loads(_fs.read_bytes(self._path(generation)).decode("utf-8"))
        except Exception:  # noqa: BLE001 - gone meanwhile (released), or being replaced
            return None

    # -- taking and giving back ----------------------------------------------------------------
    def acquire(self) -> "CommitLock":
        """Take the lock (waiting for a live holder); LockError after `wait` seconds."""
        deadline = time.monotonic() + self.wait
        seen: Optional[tuple] = None  # (generation, beat) of the top claim, and since when
        since = 0.0
        told = False
        while True:
            gens = self.generations()
            top = gens[-1] if gens else 0
            take = top + 1
            if top:
                holder = self._read(top)
                if holder is None:
                    if top not in self.generations():
                        time.sleep(0.01)  # released just now: look again
                        continue
                    holder = {}  # damaged: stale once its lease has passed
                state = self._state(holder)
                if state != "dead":
                    key = (top, holder.get("beat"))
                    if key != seen:
                        seen, since = key, time.monotonic()
                    stale = state == "unknown" and time.monotonic() - since > self.lease
                    if not stale:
                        if time.monotonic() > deadline:
                            raise LockError(
                                f"{self._describe(holder)} holds the commit lock of this output "
                                f"({self._path(top)}) and is alive or renewing it; waited {self.wait:.0f} s"
                            )
                        if not told:
                            self._say(
                                f"waiting for {self._describe(holder)}, which holds the commit lock of this output"
                            )
                            told = True
                        time.sleep(min(0.2, max(self.lease / 20, 0.01)))
                        continue
                    self._say(
                        f"taking over the commit lock of this output from {self._describe(holder)}: "
                        f"its claim was not renewed for {self.lease:.0f} s"
                    )
            if not self._create(take):
                continue  # another process made that generation first
            if any(g > take for g in self.generations()):
                self._remove([take])  # too late: a released generation made again; void
                continue
            self.generation = take
            self._renewed = time.monotonic()
            self._remove([g for g in gens if g < take])
            self._beat_thread = threading.Thread(target=self._beat, name="tfrecord_beam-lock", daemon=True)
            self._beat_thread.start()
            return self

    def release(self) -> None:
        """Give the lock back (delete this holder's claim)."""
        if self.generation is None:
            return
        self._stop.set()
        if self._beat_thread is not None:
            self._beat_thread.join()
        if self.lost is None:
            self._remove([self.generation])
        self.generation = None

    def check(self) -> None:
        """LockError when the lock was taken over (call before each step taken under it).

        When the last renewal is older than half the lease (this process was frozen, or its
        store slow), the claim is verified and renewed here first: a taker may have finished
        and released meanwhile, leaving no higher generation for the renewal thread to see."""
        if self.lost is None and self.generation is not None and time.monotonic() - self._renewed > self.lease / 2:
            self._renew()
        if self.lost is not None:
            raise LockError(self.lost)

    def __enter__(self) -> "CommitLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- internals -----------------------------------------------------------------------------
    def _beat(self) -> None:
        """Renew the claim every lease/4 seconds; stop once it is no longer this holder's."""
        while not self._stop.wait(self.lease / 4):
            if not self._renew():
                return

    def _renew(self) -> bool:
        """Renew the claim if it is still this holder's; else set `lost`. False once lost.

        Ours means: no higher generation, and our generation's file still there with our
        token (a taker deletes older claims, and may have released its own since)."""
        with self._renewing:
            if self.lost is not None or self.generation is None:
                return self.lost is None
            mine = self.generation
            try:
                gens = self.generations()
                higher = [g for g in gens if g > mine]
                if higher:
                    holder = self._read(higher[-1]) or {}
                    self.lost = (
                        f"the commit lock of this output was taken over by {self._describe(holder)} "
                        f"(this run did not renew its claim in time); stopped"
                    )
                    return False
                current = self._read(mine) if mine in gens else None
                if current is None and mine in gens:
                    return True  # unreadable just now (being rewritten): retried at the next beat
                if current is None or current.get("token") != self.record["token"]:
                    self.lost = (
                        "this run no longer holds the commit lock of this output (its claim was taken "
                        "over while it did not renew it, and released); stopped"
                    )
                    return False
                self.record["beat"] += 1
                _fs.write_bytes(self._path(mine), json.dumps(self.record).encode("utf-8"))
                self._renewed = time.monotonic()
            except Exception:  # noqa: BLE001 - a failed renewal is retried; a takeover is seen above
                pass
            return True

    def _create(self, generation: int) -> bool:
        """Create-if-absent of one claim file: True when this process made it."""
        data = json.dumps(self.record).encode("utf-8")
        return create_exclusive(self._path(generation), data)

    def _remove(self, generations: List[int]) -> None:
        for g in generations:
            try:
                _fs.delete([self._path(g)])
            except Exception:  # noqa: BLE001 - already gone
                pass


def create_exclusive(path: str, data: bytes) -> bool:
    """Make `path` holding `data` if nothing is there (atomically); False if something is.

    Local files: a hard link of a written temporary file (the name appears whole, or not at
    all). s3://: PutObject with If-None-Match: *. gs://: an upload with ifGenerationMatch=0.
    Other schemes have no such operation here: LockError.
    """
    path = _fs.plain(path)
    if path.startswith("s3://"):
        return _create_s3(path, data)
    if path.startswith("gs://"):
        return _create_gcs(path, data)
    if "://" in path:
        raise LockError(f"{path}: no create-if-absent on this filesystem, so its outputs cannot be committed safely")
    temp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temp)


_S3_PROBED: Dict[str, bool] = {}  # bucket -> its server honours If-None-Match (probed once a process)


def _s3_client() -> Any:
    """A boto3 S3 client built from the pipeline's options (Beam's --s3_* flags)."""
    from apache_beam.io.aws.clients.s3 import boto3_client
    from apache_beam.io.filesystems import FileSystems

    return boto3_client.Client(FileSystems._pipeline_options or {}).client


def _put_if_absent(client: Any, bucket: str, key: str, data: bytes) -> bool:
    from botocore.exceptions import ClientError

    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        return True
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code")
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
            return False
        raise


def _probe_s3(client: Any, bucket: str) -> None:
    """LockError unless the bucket's server refuses a second If-None-Match: * PutObject.

    A server that ignores the header (S3-compatible stores before conditional writes) says
    200 to every racer, so each would think it owns the output: refuse instead."""
    if _S3_PROBED.get(bucket):
        return
    key = f"{LOCK_PREFIX}probe.{uuid.uuid4().hex}"
    try:
        first = _put_if_absent(client, bucket, key, b"probe")
        second = _put_if_absent(client, bucket, key, b"probe")
    finally:
        try:
            client.delete_object(Bucket=bucket, Key=key)
        except Exception:  # noqa: BLE001 - a probe left behind is harmless
            pass
    if not first or second:
        raise LockError(
            f"s3://{bucket}: this S3 server ignores If-None-Match on PutObject (a second create of one "
            "object succeeded), so two runs could both own an output's commit; use a server with "
            "conditional writes"
        )
    _S3_PROBED[bucket] = True


def _create_s3(path: str, data: bytes) -> bool:
    from apache_beam.io.aws import s3io

    bucket, key = s3io.parse_s3_path(path)
    client = _s3_client()
    _probe_s3(client, bucket)
    return _put_if_absent(client, bucket, key, data)


def _create_gcs(path: str, data: bytes) -> bool:
    from apache_beam.io.gcp import gcsio
    from google.api_core.exceptions import PreconditionFailed

    bucket, name = gcsio.parse_gcs_path(path)
    blob = gcsio.GcsIO().client.bucket(bucket).blob(name)
    try:
        blob.upload_from_string(data, if_generation_match=0)
        return True
    except PreconditionFailed:
        return False
