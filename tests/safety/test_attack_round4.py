"""An independent attacker's round over the fixes of issue 34 items 10-15 (CLI names and /proc
files, signed zeros, runner scripts, failed writers, index targets, mix and reshard arguments).
Each test here is an attack that broke a claim of those fixes when it was written (or, where
marked HOLDS, an important case that held and was not covered yet)."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfrecord_beam.errors import OverwriteRefusedError
from tfrecord_beam.example import encode_example
from tfrecord_beam.index import create_index
from tfrecord_beam.records import write_records

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.update(extra)
    return env


def _payloads(n: int, pad: int = 0):
    return [encode_example({"f": ([float(i)], "float"), "p": (b"x" * pad, "byte")}) for i in range(n)]


# --- item 14: index targets judged by content ---------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "ds-train.tfrecord-00001-of-00002",  # TFDS's shard names: `.tfrecord` is not at the end
        "part.tfrecord.gz-00001-of-00002",
    ],
)
def test_an_empty_data_shard_named_the_tfds_way_is_never_overwritten_by_an_index(tmp_path, name):
    """Before the fix a name holding `.tfrecord` was never an index target; now only names that
    END in `.tfrecord[s][.codec]` count as data when empty, so an empty TFDS shard
    (`x.tfrecord-00001-of-00002`) is replaced by the index of its sibling."""
    data = tmp_path / name.replace("00001", "00000")
    write_records(str(data), _payloads(5))
    empty = tmp_path / name
    empty.write_bytes(b"")
    with pytest.raises(OverwriteRefusedError):
        create_index(str(data), str(empty))
    assert empty.read_bytes() == b""


def test_tfrecord2idx_unquoted_glob_over_tfds_shards_leaves_the_empty_shard_alone(tmp_path):
    """`tfrecord2idx ds-train.tfrecord-0000*` (an unquoted glob: two paths mean DATA INDEX)
    exits 0 and writes the first shard's index over the second, empty, data shard."""
    first = tmp_path / "ds-train.tfrecord-00000-of-00002"
    second = tmp_path / "ds-train.tfrecord-00001-of-00002"
    write_records(str(first), _payloads(5))
    second.write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-m", "tfrecord_beam.tools.tfrecord2idx", str(first), str(second)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.read_bytes() == b"", "the empty data shard was overwritten by an index"
    assert done.returncode == 2, done.stderr


def test_holds_a_data_file_of_any_codec_or_link_is_never_an_index_target(tmp_path):
    """HOLDS: data (plain, gzip, zlib, zstd; one record; a symlink or hard link to data) named
    `.idx` or `.tfindex` is refused; a DALI index named `x.tfrecord.idx` is rebuilt twice."""
    data = tmp_path / "x.tfrecord"
    write_records(str(data), _payloads(3))
    create_index(str(data), str(tmp_path / "x.tfrecord.idx"))
    create_index(str(data), str(tmp_path / "x.tfrecord.idx"))
    for codec, suffix in [
        (None, ".tfrecord"),
        ("gzip", ".tfrecord.gz"),
        ("zlib", ".tfrecord.zlib"),
        ("zstd", ".tfrecord.zst"),
    ]:
        src = tmp_path / f"d{suffix}"
        write_records(str(src), _payloads(1), compression=codec)
        for target in ("copy.idx", "copy.tfindex"):
            shutil.copy(src, tmp_path / target)
            with pytest.raises(OverwriteRefusedError):
                create_index(str(data), str(tmp_path / target))
            assert (tmp_path / target).read_bytes() == src.read_bytes()
    os.symlink(data, tmp_path / "link.tfindex")
    os.link(data, tmp_path / "hard.tfindex")
    before = data.read_bytes()
    for target in ("link.tfindex", "hard.tfindex"):
        with pytest.raises(OverwriteRefusedError):
            create_index(str(data), str(tmp_path / target))
    assert data.read_bytes() == before


# --- item 15: reshard far more shards than records, the bound unknown --------------------------


def _reshard_says_before_writing(args, cwd: Path, limit: float = 90.0):
    """Run reshard until it exits or starts writing its shards; (exit code or None, stderr so
    far). The job is killed (it is ours) once it reports writing."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.reshard", *args],
        cwd=str(ROOT),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    seen = []
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                line = proc.stderr.readline()
                if not line:
                    break
                seen.append(line)
                if "writing 100,000 shards" in line:
                    return None, "".join(seen)
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), "".join(seen)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("kind", ["gzip_no_index", "large_records_no_index"])
def test_reshard_100000_shards_of_750_records_is_refused_or_warned_before_it_writes(tmp_path, kind):
    """The issue's case (100,000 shards of 750 records, many minutes writing empty files) still
    runs with no word up front when the inputs have no index and are compressed (no bound) or
    hold records of more than 16 bytes each (the size bound, 1 record / 16 bytes, is above
    100,000): the job even surveys the inputs first (750 records) and then writes 100,000
    shards for 13-36 minutes. The claim: refuse before the pipeline, or warn up front."""
    if kind == "gzip_no_index":
        src = tmp_path / "z.tfrecord.gz"
        write_records(str(src), _payloads(750), compression="gzip")
    else:
        src = tmp_path / "big.tfrecord"
        write_records(str(src), [os.urandom(3000) for _ in range(750)])
    code, err = _reshard_says_before_writing(
        ["--input", str(src), "--num_shards", "100000", "--output_prefix", str(tmp_path / "out" / "o")], tmp_path
    )
    before_writing = err.split("writing 100,000 shards")[0]
    assert code == 2 or "warning" in before_writing, err


# --- item 12: runner scripts ------------------------------------------------------------------


VERSITYGW = (
    Path(os.environ.get("TFRB_CACHE", Path.home() / ".cache" / "tfrecord_beam")) / "versitygw-v1.8.0" / "versitygw"
)


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of runners/ (its .runners/state is the test's own)."""
    shutil.copytree(ROOT / "runners", tmp_path / "runners")
    return tmp_path


@pytest.mark.skipif(not VERSITYGW.exists(), reason="versitygw not in the cache")
def test_s3_start_refuses_at_once_a_port_whose_holder_never_accepts(checkout):
    """A process that listens and never accepts, its accept queue full: the port check
    (`port_open`, bash's /dev/tcp) has no time limit, so `s3.sh start` waits for the kernel's
    SYN retries (more than 2 minutes), then takes the port for free, starts versitygw, which
    fails to bind. Claimed: refused at once."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen(0)
    port = holder.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=5)  # fills the queue of 1
    env = dict(
        os.environ, TFRB_S3_PORT=str(port), TFRB_S3_DATA=str(checkout / "s3"), TFRB_CACHE=str(VERSITYGW.parents[1])
    )
    proc = subprocess.Popen(
        [str(checkout / "runners" / "s3.sh"), "start"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        subprocess.run([str(checkout / "runners" / "s3.sh"), "stop"], env=env, capture_output=True, timeout=60)
        pytest.fail(f"s3.sh start on port {port} held by a silent process: no answer in 30 s")
    finally:
        filler.close()
        holder.close()
    assert proc.returncode == 1 and str(port) in err, err


@pytest.fixture
def stranger():
    """Someone else's process, leading its own session."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_stop_never_kills_a_foreign_process_named_by_a_pid_file_without_its_start_time(checkout, stranger):
    """`start_bg` writes NAME.pid, then NAME.starttime (or removes it when the process is
    already gone); a script killed in between, or a pid file of an older checkout, leaves a pid
    file without its start time. `running_pid` then trusts the pid alone, and `s3.sh stop`
    SIGTERMs the process group of whatever process has that pid now ("s3 stopped")."""
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    (state / "s3.pid").write_text(f"{stranger.pid}\n")
    env = dict(os.environ, TFRB_S3_PORT="1", TFRB_S3_DATA=str(checkout / "s3"), TFRB_CACHE=str(checkout / "cache"))
    done = subprocess.run(
        [str(checkout / "runners" / "s3.sh"), "stop"], env=env, capture_output=True, text=True, timeout=60
    )
    time.sleep(0.3)
    assert _alive(stranger.pid), f"stop killed a process it did not start: {done.stderr}"


def test_start_is_not_fooled_by_a_foreign_process_named_by_a_pid_file_without_its_start_time(checkout, stranger):
    """Same stale pid file: `running_pid` says the service runs, so `s3.sh start` says
    "already running", writes s3.env and exits 0 with no server on the port."""
    state = checkout / ".runners" / "state"
    state.mkdir(parents=True)
    (state / "svc.pid").write_text(f"{stranger.pid}\n")
    code = f'source "{checkout}/runners/lib.sh"\nrunning_pid svc'
    done = subprocess.run(["bash", "-c", code], env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, f"running_pid took pid {done.stdout.strip()} (not ours) for the service"


# --- item 10: names and sizes in the CLI (HOLDS) ------------------------------------------------


def test_holds_json_and_stderr_are_utf8_for_odd_names_and_proc_files_are_bad_data(tmp_path):
    """HOLDS: names with 0xff, an encoded surrogate, newline, tab, backslash, quote, a control
    byte, in a folder; count/inspect/verify/schema --json parse, stderr decodes; /proc files
    exit 3 on count, inspect and verify."""
    folder = tmp_path / "d"
    folder.mkdir()
    names = [
        b"bad\xff.tfrecord",
        b"new\nline.tfrecord",
        b"back\\slash.tfrecord",
        b'q"uote.tfrecord',
        b"\xed\xa0\x80s.tfrecord",
        b"c\x01.tfrecord",
    ]
    for name in names:
        write_records(os.fsdecode(os.fsencode(str(folder)) + b"/" + name), _payloads(2))
    bad = os.fsencode(str(folder)) + b"/cut\xfe.tfrecord"
    write_records(os.fsdecode(bad), _payloads(3))
    with open(bad, "r+b") as handle:
        handle.truncate(os.path.getsize(bad) - 3)
    for command in ("count", "inspect", "verify", "schema"):
        done = subprocess.run(
            [sys.executable, "-m", "tfrecord_beam.cli", command, "--json", str(folder)],
            env=_env(),
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 3, done.stderr
        json.loads(done.stdout.decode("utf-8"))
        done.stderr.decode("utf-8")
    for command in ("count", "inspect", "verify"):
        done = subprocess.run(
            [sys.executable, "-m", "tfrecord_beam.cli", command, "-q", "/proc/self/status"],
            env=_env(),
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 3, (command, done.stderr)
