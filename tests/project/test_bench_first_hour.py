"""bench/bench_first_hour.py (issue 23's table, one command): its commands, data, measuring and
table at tiny size. The commands' timings are measured by the bench itself (`python -m
bench.bench_first_hour`), never here: the steps are replaced by canned runs, except one small
real command that proves a run's CPU, memory and stderr are the whole process tree's."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from helpers.fixtures import REPO

sys.path.insert(0, str(REPO))  # bench/ is not installed: it runs from the checkout
from bench import bench_first_hour as fh  # noqa: E402
from bench import bench_planned  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

MiB = 1 << 20


def test_progress_lines_are_counted_as_the_cli_writes_them():
    from tfrecord_beam.cli._format import Progress

    stream = io.StringIO()
    for nbytes in (5 * MiB, None):  # with a size and without (count)
        Progress(stream=stream, delay=0)(1, 2, "data/a b.tfrecord", 1234, nbytes)
    stream.write("tfrecord-beam inspect: 2 files, 2,468 records, 10.0 MiB, 21.03 s\n")
    assert fh.progress_lines(stream.getvalue()) == 2
    assert [fh.progress_allowed(s) for s in (0.4, 10.0, 18.6, 30.5)] == [1, 1, 2, 4]


def test_help_commands_are_the_issues_eight_as_a_user_types_them():
    commands = fh.help_commands()
    labels = [label for label, _ in commands]
    assert labels[:5] == [f"`python -m pipelines.{j} --help`" for j in fh.JOBS]
    assert len(commands) == 8 and all(argv[-1] == "--help" for _, argv in commands)
    assert commands[0][1] == [sys.executable, "-m", "pipelines.build_index", "--help"]
    beam, label = fh.script("tfrecord-beam")
    assert commands[6][1] == beam + ["inspect", "--help"] and commands[5][0] == f"`{label} --help`"
    beside = Path(sys.executable).parent / "tfrecord2idx"
    assert fh.script("tfrecord2idx")[0] == (
        [str(beside)] if beside.exists() else [sys.executable, "-m", fh.SCRIPTS["tfrecord2idx"]]
    )


def test_small_records_are_about_200_bytes_made_once_without_an_index(tmp_path, monkeypatch):
    from tfrecord_beam.records import RecordReader

    monkeypatch.setattr(fh, "DATA_DIR", tmp_path)
    path = fh.small_records(1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no index, no partial file
    assert 190 < path.stat().st_size / 1000 < 215  # 5 M records: ~1 GB, the issue's size
    payloads = list(RecordReader(str(path)))
    assert len(payloads) == 1000 and len(set(payloads)) == 1000
    stamp = path.stat().st_mtime_ns
    assert fh.small_records(1000) == path and path.stat().st_mtime_ns == stamp  # cached


# a child starting a grandchild that holds 64 MiB, spends ~0.3 s of CPU and writes to stderr
TREE = (
    "import subprocess, sys; subprocess.run([sys.executable, '-c', "
    "'import sys, time; b = bytearray(64 << 20); b[::4096] = bytes(len(b[::4096])); t = time.process_time()\\n"
    'while time.process_time() - t < 0.3: pass\\nprint("[1/1] f: 3 records, 1 s", file=sys.stderr)\'], check=True)'
)


def test_a_run_is_the_whole_process_trees_and_a_failure_names_the_command(tmp_path):
    run = fh.measure([sys.executable, "-c", TREE], tmp_path)
    assert run.cpu >= 0.3 and run.wall >= 0.3
    assert run.rss > 64 * MiB
    assert fh.progress_lines(run.stderr) == 1
    with pytest.raises(RuntimeError, match=r"-c import sys; sys.exit\('no such file'\) failed with status 1:\nno such"):
        fh.measure([sys.executable, "-c", "import sys; sys.exit('no such file')"], tmp_path)


def _row_cells(table: str):
    lines = table.splitlines()
    header = lines.index("| " + " | ".join(fh.HEADER) + " |")
    assert lines[header + 1] == "|" + "---|" * len(fh.HEADER)
    rows = [line for line in lines[header + 2 :] if line.startswith("| ")]
    cells = [[c.strip() for c in line[2:-2].split(" | ")] for line in rows]
    assert all(len(c) == len(fh.HEADER) for c in cells)
    return {c[0]: dict(zip(fh.HEADER, c)) for c in cells}


def _canned(seconds):
    """A `measure` stand-in: each command's wall by what it runs, logged in `calls`."""
    calls = []

    def measure(cmd, cwd):
        calls.append([str(c) for c in cmd])
        key = next((k for k in seconds if k in calls[-1]), "--help")
        wall = seconds[key]
        progress = "[1/1] f: 3 records, 1 s\n" * (3 if key == "schema" else 1)
        return fh.Run(wall, wall * 0.8, 100 * MiB, progress if key in ("count", "inspect", "schema") else "")

    return measure, calls


def test_one_table_holds_every_row_of_the_issue_with_its_figure_and_target(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fh, "DATA_DIR", tmp_path)
    monkeypatch.setattr(bench_planned, "DATA_DIR", tmp_path)
    monkeypatch.setattr(fh, "engine", lambda: "tfrecord_beam (engine canned)")
    # matched in this order: --shuffle and mix's --source before --num_shards, which reshard has too
    seconds = {"--help": 0.2, "--shuffle": 10.0, "--source": 12.0, "--num_shards": 3.0}
    seconds.update({"count": 2.0, "inspect": 5.0, "schema": 7.0})
    measure, calls = _canned(seconds)
    monkeypatch.setattr(fh, "measure", measure)
    table = fh.run(scale=1e-4, help_runs=3, tiny_runs=2, tool_runs=1, job_runs=2)
    assert table in capsys.readouterr().out
    rows = _row_cells(table)
    assert len(rows) == 8 + 1 + 3 + 3 and not list(tmp_path.glob("first_hour_*"))  # work folder removed

    helps = [r for step, r in rows.items() if "--help" in step]
    assert len(helps) == 8
    assert all(r["runs"] == "3" and r["wall s"] == "0.20" and r["CPU s"] == "0.16" for r in helps)
    assert all(r["issue's figure"] == "2.1-2.7 s" and r["now / issue"] == "0.07-0.10x" for r in helps)
    assert all(r["target"] == "< 0.5 s: met" for r in helps)

    tiny = rows["`python -m pipelines.reshard` of 8 records (2 shards)"]
    assert (tiny["runs"], tiny["issue's figure"], tiny["peak RSS MiB"]) == ("2", "3.2-4.2 s", "100")

    tools = {step.split("`")[1].split()[-1]: r for step, r in rows.items() if "small records, no index" in step}
    assert "500 small records" in next(s for s in rows if "count`" in s)
    assert tools["count"]["target"] == "progress lines 1 (at most 1): met"
    assert tools["inspect"]["issue's figure"] == "208 s" and tools["inspect"]["now / issue"] == "- (scale 0.0001)"
    assert tools["inspect"]["target"] == (
        "<= 3x count's time: 2.50x (CPU 2.50x): met; progress lines 1 (at most 1): met"
    )
    assert tools["schema"]["target"] == (
        "<= 3x count's time: 3.50x (CPU 3.50x): **not met**; progress lines 3 (at most 1): **not met**"
    )

    jobs = {step.split(" (")[0]: r for step, r in rows.items() if "KiB records" in step}
    assert list(jobs) == ["reshard", "mix 3:1", "reshard --shuffle"]
    assert jobs["mix 3:1"]["target"] == "<= reshard --shuffle's time: 1.20x (CPU 1.20x): **not met**"
    assert [jobs[k]["issue's figure"] for k in jobs] == ["8.9 s", "37 s", "15.2 s"]
    assert all(r["runs"] == "2" for r in jobs.values())

    ran = [c for c in calls if "--output_prefix" in c]
    tiny_runs, job_runs = ran[:2], ran[2:]
    assert [c[c.index("--num_shards") + 1] for c in tiny_runs] == ["2", "2"]
    assert [c[2] for c in job_runs] == ["pipelines.reshard", "pipelines.mix", "pipelines.reshard"] * 2  # interleaved
    mix = job_runs[1]
    records = sum(p.stat().st_size for p in bench_planned.dataset(16384, 200_000)) // (16384 + 16)
    assert mix[mix.index("--total_records") + 1] == str(records)


def test_a_full_size_row_shows_now_against_the_issue():
    row = fh.Row("inspect", [fh.Run(20.8, 10.0, MiB, "")], 1.0, fh.ISSUE["inspect"], "")
    assert row.cells()[6:8] == ["208 s", "0.10x"]
