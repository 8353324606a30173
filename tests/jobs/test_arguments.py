"""Arguments of every job and tool (issue 22 items 1 and 10, issue 23 item 3): nothing the user
typed is dropped, no abbreviation, no silently repeated flag, one exit-status scheme, and
--help answers without importing Beam or torch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.jobs import entries, read_shards, run_job, summary_json, write_files

import pipelines
from tfrecord_beam import _usage
from tfrecord_beam.cli import main as cli_main
from tfrecord_beam.tools import tfrecord2idx

ROOT = Path(__file__).resolve().parents[2]
JOB_NAMES = list(pipelines.COMMANDS)
HEAVY = ("apache_beam", "torch", "numpy")


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


LOADED = f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"


@pytest.mark.parametrize("name", JOB_NAMES)
def test_job_help_imports_neither_beam_nor_torch(name):
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['{name}', '--help']\n"
        "try:\n"
        f"    runpy.run_module('pipelines.{name}', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n" + LOADED
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]
    assert _usage.EXIT_HELP.split(",")[0] in done.stdout  # the exit-status scheme in the epilog


@pytest.mark.parametrize("argv", [["--help"], ["count", "--help"], ["verify", "--help"], ["head", "--help"]])
def test_cli_help_imports_neither_beam_nor_torch(argv):
    done = _python(f"import sys\nfrom tfrecord_beam.cli import main\nassert main({argv!r}) == 0\n" + LOADED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "exit status: 0 ok, 1 failure" in done.stdout or "Exit status: 0 ok, 1 a file" in done.stdout


def test_tfrecord2idx_help_imports_neither_beam_nor_torch():
    code = (
        "import sys\nfrom tfrecord_beam.tools.tfrecord2idx import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as exc:\n    assert exc.code == 0\n" + LOADED
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "3 bad data found and reported" in done.stdout


# -- jobs: every argument is consumed or refused ------------------------------------------------


def test_input_takes_several_values_so_a_shell_expanded_glob_is_read_whole(tmp_path, capsys):
    written = write_files(tmp_path / "in", "a", [3, 4, 5])
    files = sorted(str(p) for p in (tmp_path / "in").glob("*.tfrecord"))
    assert len(files) == 3
    argv = ["--input", *files, "--output_prefix", str(tmp_path / "o" / "t"), "--num_shards", "1"]
    code, out, err = run_job(__import__("pipelines.reshard").reshard.main, argv, capsys)
    assert code == 0, err
    summary = summary_json(out)
    assert summary["records"] == 12 and summary["input_files"] == 3
    assert sorted(read_shards(tmp_path / "o", "t-*.tfrecord")[0]) == sorted(written)


@pytest.mark.parametrize(
    "extra, named",
    [
        (["stray.tfrecord"], "stray.tfrecord"),  # the rest of an unquoted glob, after another flag
        (["--runner", "DirectRunner", "b.tfrecord"], "b.tfrecord"),
        (["--num_shard", "2"], "unknown flag --num_shard (did you mean --num_shards?)"),  # an abbreviation
        (["-v"], "-v"),  # not reported as --v
        (["--verif"], "--verif"),
        (["--runner", "DirectRunner", "--runner", "DirectRunner"], "--runner given more than once"),
        (["--seed", "1", "--seed", "2"], "--seed given more than once"),
    ],
)
def test_stray_unknown_abbreviated_or_repeated_arguments_are_usage_errors(tmp_path, capsys, extra, named):
    from pipelines import reshard

    write_files(tmp_path / "in", "a", [3])
    argv = ["--input", str(tmp_path / "in"), "--output_prefix", str(tmp_path / "o" / "t"), "--num_shards", "1"]
    try:
        code, _, err = run_job(reshard.main, argv + extra, capsys)
    except SystemExit as exc:  # argparse's own errors
        code, err = exc.code, capsys.readouterr().err
    assert code == _usage.EXIT_USAGE
    assert named in err and "--help" in err
    assert len(err.strip().splitlines()) == 1  # one line, not a usage dump
    assert "--v " not in err and "--v)" not in err
    assert entries(tmp_path / "o") == []


def test_an_abbreviation_of_a_required_flag_is_named(capsys):
    from pipelines import reshard

    with pytest.raises(SystemExit) as info:
        reshard.build_parser().parse_known_args(["--input", "x", "--output_prefix", "o", "--num_shard", "1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--num_shard is not --num_shards (no abbreviations)" in err


@pytest.mark.parametrize("module", ["build_index", "mix", "parquet_to_tfrecord", "tfrecord_to_parquet"])
def test_every_job_refuses_a_stray_argument(module, tmp_path, capsys):
    job = __import__(f"pipelines.{module}", fromlist=["main"])
    argv = {
        "build_index": ["--input", "x.tfrecord"],
        "mix": ["--source", "x=1", "--total_records", "1", "--output_prefix", str(tmp_path / "o")],
        "parquet_to_tfrecord": ["--input", "x.parquet", "--output_prefix", str(tmp_path / "o")],
        "tfrecord_to_parquet": ["--input", "x.tfrecord", "--output_prefix", str(tmp_path / "o")],
    }[module]
    code, _, err = run_job(job.main, argv + ["--runner=DirectRunner", "y.tfrecord"], capsys)
    assert code == 2 and "stray argument(s) y.tfrecord" in err and "quote it" in err


def test_columns_take_several_values():
    from pipelines import _args, parquet_to_tfrecord

    args = parquet_to_tfrecord.build_parser().parse_args(
        ["--input", "t.parquet", "--output_prefix", "o", "--columns", "id", "name", "--columns", "x,y"]
    )
    assert _args.split_list(args.columns) == ["id", "name", "x", "y"]


def test_demo_prints_its_commands_with_globs_quoted(capsys):
    from pipelines import demo

    class Job:
        __name__ = "pipelines.build_index"

        @staticmethod
        def main(argv):
            return 0

    demo._step("t", Job, ["--input", "/w/tfrecord/*.tfrecord", "--verify"])
    assert "--input '/w/tfrecord/*.tfrecord' --verify" in capsys.readouterr().out


# -- the CLI and tfrecord2idx ---------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["head", "-n", "-1", "x"], ["head", "-n", "0", "x"], ["count", "--no-ind", "x"]])
def test_cli_bad_arguments_are_one_line_usage_errors(argv, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--help" in err


def test_cli_repeated_single_valued_flag_is_an_error(capsys):
    assert cli_main(["head", "-n", "1", "-n", "2", "x"]) == 2
    assert "-n given more than once" in capsys.readouterr().err


def test_tfrecord2idx_takes_no_abbreviation(capsys):
    with pytest.raises(SystemExit) as info:
        tfrecord2idx.main(["--verif", "x.tfrecord"])
    assert info.value.code == 2 and "--verif" in capsys.readouterr().err


def test_tfrecord2idx_exit_status_for_bad_data_is_3(tmp_path, capsys):
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(b"\x05" + b"\x00" * 30)
    assert tfrecord2idx.main([str(bad)]) == 3
    assert not (tmp_path / "bad.tfindex").exists()
    assert tfrecord2idx.main([str(tmp_path / "missing.tfrecord")]) == 1
