"""The `tfrecord-beam` command on the TensorFlow-written fixtures: every subcommand via main([...]).

Expected values come from the fixtures' manifest (what TensorFlow wrote and read back), not from
our own output.
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.fixtures import FIXTURES, MANIFEST, REPO

from tfrecord_beam import cli
from tfrecord_beam.example import decode_example, decode_sequence_example, encode_example
from tfrecord_beam.index import create_index, default_index_path
from tfrecord_beam.records import RecordReader, write_records

KIND = {"bytes_list": "byte", "float_list": "float", "int64_list": "int"}


def meta(name):
    return MANIFEST["files"][name]


def fixture(name) -> str:
    return str(FIXTURES / name)


def files_where(predicate):
    return sorted(n for n, m in MANIFEST["files"].items() if predicate(n, m))


READABLE = files_where(lambda n, m: "record_count" in m and "corruption" not in m)
CORRUPT = files_where(lambda n, m: m.get("corruption", {}).get("type") == "bit_flip")
TRUNCATED_PLAIN = files_where(lambda n, m: m.get("corruption", {}).get("region", "").startswith("cut_"))


def run(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    return code, json.loads(out), err


def manifest_features(name, section="features"):
    """{feature: [(kind, values) per record that has it]} from the manifest."""
    found = {}
    for record in meta(name)["records"]:
        for fname, feature in record["content"].get(section, {}).items():
            found.setdefault(fname, []).append(feature)
    return found


def int_values(feature):
    return [int(v) for v in feature["value"]]


def copy_fixture(tmp_path, name) -> Path:
    dest = tmp_path / name
    shutil.copyfile(FIXTURES / name, dest)
    dest.chmod(0o644)
    return dest


# -- inspect -----------------------------------------------------------------------------------


def test_inspect_json_matches_manifest(capsys):
    code, stats, _ = run_json(capsys, "inspect", fixture("examples.tfrecord"))
    assert code == 0
    assert stats["record_type"] == "Example"
    assert stats["records"] == meta("examples.tfrecord")["record_count"]
    (info,) = stats["files"]
    assert info["size"] == meta("examples.tfrecord")["size"]
    assert info["index"]["state"] == "valid"
    expected = manifest_features("examples.tfrecord")
    got = {f["name"]: f for f in stats["features"]}
    assert set(got) == set(expected)
    for name, features in expected.items():
        counts = [len(f["value"]) for f in features]
        assert got[name]["records"] == len(features), name
        assert (got[name]["values_min"], got[name]["values_max"]) == (min(counts), max(counts)), name
        assert got[name]["values_mean"] == pytest.approx(sum(counts) / len(counts))
        kinds = {KIND[f["kind"]] for f in features if f["kind"]}
        assert got[name]["kind"] == (kinds.pop() if kinds else "none")
        ints = [v for f in features if f["kind"] == "int64_list" for v in int_values(f)]
        if ints:
            assert (got[name]["min"], got[name]["max"]) == (min(ints), max(ints))


def test_inspect_sequence_examples(capsys):
    name = "sequence_examples.tfrecord"
    code, stats, _ = run_json(capsys, "inspect", fixture(name))
    assert code == 0 and stats["record_type"] == "SequenceExample"
    assert {f["name"] for f in stats["context"]} == set(manifest_features(name, "context"))
    lists = {f["name"]: f for f in stats["feature_lists"]}
    expected = manifest_features(name, "feature_lists")
    assert set(lists) == set(expected)
    for fname, per_record in expected.items():
        steps = [len(steps) for steps in per_record]
        assert lists[fname]["records"] == len(per_record)
        assert (lists[fname]["steps_min"], lists[fname]["steps_max"]) == (min(steps), max(steps))


@pytest.mark.parametrize("compressed", ["examples.tfrecord.gz", "examples.tfrecord.zlib"])
def test_inspect_compressed_same_features(capsys, compressed):
    _, plain, _ = run_json(capsys, "inspect", fixture("examples.tfrecord"))
    code, packed, _ = run_json(capsys, "inspect", fixture(compressed))
    assert code == 0
    assert packed["features"] == plain["features"]
    assert packed["files"][0]["compression"] == meta(compressed)["compression"].lower()


def test_inspect_table_output(capsys):
    code, out, err = run(capsys, "inspect", fixture("examples.tfrecord"), fixture("sequence_examples.tfrecord"))
    assert code == 0
    for name in list(manifest_features("examples.tfrecord")) + list(
        manifest_features("sequence_examples.tfrecord", "feature_lists")
    ):
        assert name in out
    assert "valid" in out and "SequenceExample" in out
    assert "inspect: 2 files" in err  # the summary on stderr


@pytest.mark.parametrize("name", CORRUPT + TRUNCATED_PLAIN)
def test_inspect_corrupt_reports_and_fails(capsys, name):
    code, stats, err = run_json(capsys, "inspect", fixture(name))
    assert code == 3
    m = meta(name)
    assert stats["records"] == m["intact_records_before"]
    offset = meta("examples.tfrecord")["records"][m["corruption"]["record"]]["offset"]
    assert f"record {m['corruption']['record']}" in err and f"byte offset {offset}" in err


def test_inspect_limit_and_stale_index(capsys, tmp_path):
    data = copy_fixture(tmp_path, "examples.tfrecord")
    shutil.copyfile(FIXTURES / "hand_encoded.tfindex", default_index_path(str(data)))
    code, stats, _ = run_json(capsys, "inspect", data, "-n", "2")
    assert code == 0
    assert stats["records"] == 2 and stats["files"][0]["complete"] is False
    assert stats["files"][0]["index"]["state"] == "stale"


def test_inspect_uri_glob_and_directory(capsys, tmp_path):
    for name in ("examples.tfrecord", "examples.tfrecord.gz"):
        copy_fixture(tmp_path, name)
    create_index(str(tmp_path / "examples.tfrecord"))
    code, stats, _ = run_json(capsys, "inspect", f"file://{tmp_path}/examples.tfrecord*")
    assert code == 0
    assert [Path(f["path"]).name for f in stats["files"]] == ["examples.tfrecord", "examples.tfrecord.gz"]
    assert stats["records"] == 2 * meta("examples.tfrecord")["record_count"]
    assert stats["files"][0]["index"]["state"] == "valid"
    code, stats, _ = run_json(capsys, "inspect", tmp_path)  # a directory: its *.tfrecord* files, not the index
    assert code == 0 and len(stats["files"]) == 2


def test_inspect_unreadable_input(capsys, tmp_path):
    code, _, err = run(capsys, "inspect", tmp_path / "missing.tfrecord")
    assert code == 1 and "missing.tfrecord" in err
    code, _, err = run(capsys, "inspect", str(tmp_path / "nothing-*.tfrecord"))
    assert code == 2 and "no TFRecord files match" in err
    bad = tmp_path / "bad.tfrecord.gz"
    bad.write_bytes(b"this is not gzip data at all")
    code, _, err = run(capsys, "inspect", bad)
    assert code == 3 and "bad.tfrecord.gz" in err  # read, and found bad


def _png(width, height):
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height) + b"\x08\x02\0\0\0"
    )


def _jpeg(width, height):
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\1\1\0\0\1\0\1\0\0"
    sof0 = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, height, width) + b"\3" + b"\1\x22\0\2\x11\1\3\x11\1"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def test_images_noted_by_size(capsys, tmp_path):
    path = tmp_path / "images.tfrecord"
    write_records(
        str(path),
        [encode_example({"image": (_png(3, 2), "byte")}), encode_example({"image": (_jpeg(640, 480), "byte")})],
    )
    code, out, _ = run(capsys, "head", path)
    assert code == 0
    assert f"<PNG 3x2, {len(_png(3, 2))} B>" in out and f"<JPEG 640x480, {len(_jpeg(640, 480))} B>" in out
    _, stats, _ = run_json(capsys, "inspect", path)
    assert stats["features"][0]["images"] == {"PNG": 1, "JPEG": 1}


# -- head --------------------------------------------------------------------------------------


def test_head_prints_first_records(capsys):
    code, out, _ = run(capsys, "head", fixture("examples.tfrecord"), "-n", "2")
    assert code == 0
    records = meta("examples.tfrecord")["records"]
    assert f"record 1  offset {records[1]['offset']}  {records[1]['length']} bytes" in out
    assert "record 2 " not in out
    for record in records[:2]:
        for name in record["content"]["features"]:
            assert name in out
    assert repr(str(int(records[1]["content"]["features"]["optional_int"]["value"][0]))).strip("'") in out


def test_head_sequence_example(capsys):
    code, out, _ = run(capsys, "head", fixture("sequence_examples.tfrecord"), "-n", "1")
    assert code == 0
    first = meta("sequence_examples.tfrecord")["records"][0]["content"]
    assert "context:" in out and "feature_lists:" in out
    for name, steps in first["feature_lists"].items():
        assert f"{name}  {len(steps)} steps" in out


def test_head_shortens_long_bytes(capsys):
    code, out, _ = run(capsys, "head", fixture("large_record.tfrecord"), "-n", "2", "--bytes-limit", "10")
    assert code == 0
    blob = meta("large_record.tfrecord")["records"][1]["content"]["features"]["blob"]["value"][0]
    assert f"({blob['length']} bytes)" in out
    assert max(len(line) for line in out.splitlines()) < 200


def test_head_truncated_prints_intact_records_then_fails(capsys):
    code, out, err = run(capsys, "head", fixture("truncated_mid_payload.tfrecord"), "-n", "100")
    assert code == 3
    intact = meta("truncated_mid_payload.tfrecord")["intact_records_before"]
    assert out.count("\nrecord ") + out.startswith("record ") == intact
    assert "truncated" in err


# -- count -------------------------------------------------------------------------------------


def test_count_all_readable(capsys):
    code, result, _ = run_json(capsys, "count", *[fixture(n) for n in READABLE])
    assert code == 0
    got = {Path(row["path"]).name: row for row in result["files"]}
    for name in READABLE:
        assert got[name]["records"] == meta(name)["record_count"], name
        indexed = "index_file" in meta(name) and meta(name)["compression"] == "NONE"
        assert got[name]["source"] == ("index" if indexed else "scan"), name
    assert result["total"] == sum(meta(n)["record_count"] for n in READABLE)


def test_count_stale_index_is_not_trusted(capsys, tmp_path):
    data = copy_fixture(tmp_path, "examples.tfrecord")
    shutil.copyfile(FIXTURES / "large_record.tfindex", default_index_path(str(data)))
    code, result, _ = run_json(capsys, "count", data)
    assert code == 0
    assert result["files"][0] == {"path": str(data), "records": 7, "source": "scan", "error": None}
    code, result, _ = run_json(capsys, "count", "--no-index", fixture("examples.tfrecord"))
    assert result["files"][0]["source"] == "scan" and result["files"][0]["records"] == 7


@pytest.mark.parametrize("name", TRUNCATED_PLAIN + ["truncated.tfrecord.gz"])
def test_count_truncated_fails(capsys, name):
    code, out, err = run(capsys, "count", fixture(name))
    assert code == 3 and name in err and "truncated" in err


# -- verify ------------------------------------------------------------------------------------


def test_verify_clean_files(capsys):
    code, out, _ = run(capsys, "verify", *[fixture(n) for n in READABLE])
    assert code == 0
    assert out.count("OK ") == len(READABLE)


@pytest.mark.parametrize("name", CORRUPT)
def test_verify_corrupt_reports_offset_and_record_and_goes_on(capsys, name):
    code, result, _ = run_json(capsys, "verify", fixture(name))
    assert code == 3 and result["ok"] is False
    m = meta(name)
    bad = m["corruption"]["record"]
    (problem,) = result["files"][0]["problems"]
    assert problem["record"] == bad
    assert problem["offset"] == meta("examples.tfrecord")["records"][bad]["offset"]
    # every other record was still found and checked
    assert result["files"][0]["records"] == m["records_in_source"] - 1


@pytest.mark.parametrize("name", TRUNCATED_PLAIN + ["truncated.tfrecord.gz"])
def test_verify_truncated(capsys, name):
    code, result, _ = run_json(capsys, "verify", fixture(name))
    assert code == 3
    (problem,) = result["files"][0]["problems"]
    assert problem["kind"] == "truncated"
    intact = meta("examples.tfrecord")["records"][:4]
    assert result["files"][0]["records"] == len(intact)
    assert problem["offset"] == intact[-1]["offset"] + intact[-1]["length"] + 16


def _flip(data: bytearray, offset: int) -> None:
    data[offset] ^= 0x10


def _make_file(tmp_path, name="data.tfrecord", n=8):
    path = tmp_path / name
    payloads = [encode_example({"i": (i, "int"), "pad": (b"x" * (10 + i), "byte")}) for i in range(n)]
    write_records(str(path), payloads)
    offsets = [o for o, _ in RecordReader(str(path)).records_with_offsets()]
    return path, offsets


def test_verify_finds_several_payload_problems_with_exact_numbers(capsys, tmp_path):
    path, offsets = _make_file(tmp_path)
    data = bytearray(path.read_bytes())
    _flip(data, offsets[1] + 14)
    _flip(data, offsets[5] + 14)
    path.write_bytes(bytes(data))
    code, result, _ = run_json(capsys, "verify", path)
    assert code == 3
    problems = result["files"][0]["problems"]
    assert [(p["record"], p["offset"]) for p in problems] == [(1, offsets[1]), (5, offsets[5])]
    assert result["files"][0]["records"] == len(offsets) - 2


def test_verify_resyncs_after_lost_framing(capsys, tmp_path):
    path, offsets = _make_file(tmp_path)
    data = bytearray(path.read_bytes())
    _flip(data, offsets[2] + 1)  # the length field: framing lost
    _flip(data, offsets[6] + 14)  # a later payload
    path.write_bytes(bytes(data))
    code, result, _ = run_json(capsys, "verify", path)
    assert code == 3
    first, second = result["files"][0]["problems"]
    assert (first["record"], first["offset"]) == (2, offsets[2]) and "resynced" in first["message"]
    assert second["offset"] == offsets[6]
    assert second["record"] is None  # records between the resync point and here are not numbered
    assert result["files"][0]["records"] == len(offsets) - 2


def test_verify_compressed_payload_problem_goes_on(capsys, tmp_path):
    path = tmp_path / "bad.tfrecord.gz"
    path.write_bytes(gzip.compress((FIXTURES / "corrupt_data_crc.tfrecord").read_bytes()))
    code, result, _ = run_json(capsys, "verify", path)
    assert code == 3
    assert result["files"][0]["records"] == meta("corrupt_data_crc.tfrecord")["records_in_source"] - 1
    path.write_bytes(gzip.compress((FIXTURES / "corrupt_length_bitflip.tfrecord").read_bytes()))
    code, result, _ = run_json(capsys, "verify", path)
    assert code == 3 and "framing lost" in result["files"][0]["problems"][0]["message"]
    assert result["files"][0]["complete"] is False


def test_verify_stale_index_and_parse(capsys, tmp_path):
    path, offsets = _make_file(tmp_path, n=3)
    create_index(str(path))
    assert run(capsys, "verify", path)[0] == 0
    old_index = Path(default_index_path(str(path))).read_bytes()
    write_records(str(path), [encode_example({"i": (1, "int")})] * 2)  # rewritten (old index dropped) ...
    Path(default_index_path(str(path))).write_bytes(old_index)  # ... and put back: now stale
    code, result, _ = run_json(capsys, "verify", path)
    assert code == 3 and result["files"][0]["problems"][0]["kind"] == "index"
    junk = tmp_path / "junk.tfrecord"
    write_records(str(junk), [encode_example({"i": (1, "int")}), b"\xff\xff\xff"])
    assert run(capsys, "verify", junk)[0] == 0  # framing is fine
    code, result, _ = run_json(capsys, "verify", "--parse", junk)
    assert code == 3
    (problem,) = result["files"][0]["problems"]
    assert problem["kind"] == "decode" and problem["record"] == 1


# -- schema ------------------------------------------------------------------------------------


def test_schema_example_matches_manifest_and_is_pasteable(capsys):
    name = "examples.tfrecord"
    code, out, _ = run(capsys, "schema", fixture(name))
    assert code == 0
    scope = {"pa": pa}
    exec(out, scope)  # what it prints is Python
    description, schema = scope["description"], scope["schema"]
    expected = manifest_features(name)
    for fname, features in expected.items():
        kinds = {KIND[f["kind"]] for f in features if f["kind"]}
        if not kinds:
            assert fname not in description
            continue
        (kind,) = kinds
        assert description[fname] == kind
        item = {"int": pa.int64(), "float": pa.float32(), "byte": pa.binary()}[kind]
        scalar = all(len(f["value"]) == 1 for f in features)
        assert schema.field(fname).type == (item if scalar else pa.list_(item)), fname
    # the description decodes every record without complaint
    for offset, payload in RecordReader(fixture(name)).records_with_offsets():
        decode_example(payload, description, offset=offset)


def test_schema_sequence_examples(capsys):
    name = "sequence_examples.tfrecord"
    code, out, _ = run(capsys, "schema", fixture(name))
    assert code == 0
    scope = {"pa": pa}
    exec(out, scope)
    for fname in scope["sequence_description"]:
        assert pa.types.is_list(scope["schema"].field(fname).type.value_type)
    for payload in RecordReader(fixture(name)):
        decode_sequence_example(payload, scope["description"], scope["sequence_description"])


def test_schema_json_and_strings(capsys):
    code, result, _ = run_json(capsys, "schema", "--strings", fixture("examples.tfrecord"))
    assert code == 0
    types = {f["name"]: f["type"] for f in result["arrow_schema"]}
    assert types["bytes_utf8"] == "string"  # valid UTF-8 everywhere
    assert types["bytes_nul"] == "list<item: binary>"  # b"a\x00b\xff\xfe\x00" is not UTF-8
    _, plain, _ = run_json(capsys, "schema", fixture("examples.tfrecord"))
    assert {f["name"]: f["type"] for f in plain["arrow_schema"]}["bytes_utf8"] == "binary"


def test_schema_mixed_kinds_fails_clearly(capsys):
    code, out, err = run(capsys, "schema", fixture("hand_encoded.tfrecord"))
    assert code == 3
    assert "mixed kinds" in err and "'ints'" in err


# -- the installed-style entry -----------------------------------------------------------------


def test_module_entry_help():
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_beam.cli", "--help"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert proc.returncode == 0
    for command in ("inspect", "head", "count", "verify", "schema"):
        assert command in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_beam.cli", "count", fixture("examples.tfrecord")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.split()[0] == str(meta("examples.tfrecord")["record_count"])


def test_help_and_usage_errors_return_status(capsys):
    code, out, _ = run(capsys, "inspect", "--help")
    assert code == 0 and "examples:" in out
    code, _, err = run(capsys)  # no subcommand
    assert code == 2 and "required" in err
    code, _, err = run(capsys, "count", "--compression", "lzma", fixture("examples.tfrecord"))
    assert code == 2 and "lzma" in err
