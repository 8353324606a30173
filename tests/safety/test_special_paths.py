"""Pipes, FIFOs and names with glob characters (issue 22 items 4 and 10): every command reads
or refuses a stream in one line, never hangs on a FIFO (named, or inside a directory), never
writes an empty index, and takes a path that exists literally."""

import os
import sys
from pathlib import Path

import pytest
from helpers import zygote
from helpers.jobs import payloads, summary_json

from tfrecord_beam import write_records
from tfrecord_beam.cli import main as cli_main
from tfrecord_beam.tools import tfrecord2idx

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["count", "verify", "inspect", "schema", "head"]


def _run(argv, stdin=None, timeout=60):
    """A command in a process of its own, forked from the worker's zygote (a hang on a FIFO fails
    the test instead of hanging pytest; stdin, when given, is a pipe as subprocess's is)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return zygote.run([sys.executable, *argv], env=env, cwd=ROOT, text=True, timeout=timeout, input=stdin)


@pytest.fixture
def data_dir(tmp_path):
    """A directory with two data files, one named with glob characters, and a FIFO with no writer."""
    d = tmp_path / "d"
    d.mkdir()
    write_records(str(d / "a.tfrecord"), payloads(5))
    write_records(str(d / "b[1].tfrecord"), payloads(3))
    os.mkfifo(d / "fifo.tfrecord")
    return d


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_inside_a_directory_is_left_out_unopened(data_dir, command):
    done = _run(["-m", "tfrecord_beam.cli", command, str(data_dir)])
    assert done.returncode == 0, done.stderr
    assert "fifo.tfrecord" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_named_fifo_is_refused_in_one_line(data_dir, command):
    done = _run(["-m", "tfrecord_beam.cli", command, str(data_dir / "fifo.tfrecord")])
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "not a regular file" in done.stderr


def test_stdin_pipe_is_refused_not_read_as_empty(data_dir):
    data = (data_dir / "a.tfrecord").read_bytes().decode("latin-1")
    done = _run(["-m", "tfrecord_beam.cli", "count", "/dev/stdin"], stdin=data)
    assert done.returncode == 2 and "not a regular file" in done.stderr
    assert "0 records" not in done.stderr + done.stdout


def test_tfrecord2idx_refuses_a_pipe_and_writes_no_index(data_dir, tmp_path):
    index = tmp_path / "x.tfindex"
    done = _run(["-m", "tfrecord_beam.tools.tfrecord2idx", "/dev/stdin", str(index)], stdin="abc")
    assert done.returncode == 2 and "not a regular file" in done.stderr
    assert not index.exists()
    done = _run(["-m", "tfrecord_beam.tools.tfrecord2idx", str(data_dir / "fifo.tfrecord")])
    assert done.returncode == 2


def test_tfrecord2idx_on_a_directory_with_a_fifo(data_dir):
    done = _run(["-m", "tfrecord_beam.tools.tfrecord2idx", str(data_dir)])
    assert done.returncode == 0, done.stderr
    assert "2 of 2 files indexed, 8 records" in done.stderr


@pytest.mark.parametrize("command", ["count", "verify", "head", "inspect"])
def test_a_name_with_glob_characters_that_exists_is_taken_literally(data_dir, command, capsys):
    assert cli_main([command, str(data_dir / "b[1].tfrecord")]) == 0
    captured = capsys.readouterr()
    assert "1 file, 3 records" in captured.err


def test_tfrecord2idx_takes_a_literal_name(data_dir):
    assert tfrecord2idx.main([str(data_dir / "b[1].tfrecord")]) == 0
    assert (data_dir / "b[1].tfindex").exists()


def test_reshard_on_a_directory_with_a_fifo_and_a_bracketed_name(data_dir, tmp_path):
    out = tmp_path / "o" / "t"
    done = _run(
        ["-m", "pipelines.reshard", "--input", str(data_dir), "--output_prefix", str(out), "--num_shards", "1"],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = summary_json(done.stdout)
    assert summary["records"] == 8 and summary["input_files"] == 2


def test_a_job_refuses_stdin(tmp_path):
    done = _run(
        [
            "-m",
            "pipelines.reshard",
            "--input",
            "/dev/stdin",
            "--output_prefix",
            str(tmp_path / "o"),
            "--num_shards",
            "1",
        ],
        stdin="x",
        timeout=300,
    )
    assert done.returncode == 1 and "not a regular file" in done.stderr


def test_a_file_named_like_a_flag_gets_a_hint(tmp_path, monkeypatch, capsys):
    """`count -x.tfrecord`: argparse reads the name as a flag; the error names the file and
    the two ways to pass it, and `./-x.tfrecord` then counts it."""
    monkeypatch.chdir(tmp_path)
    write_records("-x.tfrecord", [b"a"])
    assert cli_main(["count", "-x.tfrecord"]) == 2
    assert "-x.tfrecord is read as a flag: name the file as ./-x.tfrecord or after --" in capsys.readouterr().err
    assert cli_main(["count", "./-x.tfrecord"]) == 0
    assert "1 file, 1 record," in capsys.readouterr().err  # singular: 1 record, not 1 records
