"""--skip_corrupt through the planned jobs (issue 12 item 5): unshuffled reshard and mix plan
from a survey that steps over corrupt records, and copy only the intact ones; reshard
--shuffle reads its ranges the same way. Each is checked against a streaming reader with
skipping: exactly the intact records come out, exactly once (in input order where the job
keeps it), and every skipped record is a dead letter naming its file and offset, counted in
the summary and the manifest."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import List, Tuple

import pytest
from helpers.jobs import FAST, MULTI, payloads, run_job, summary_json

from pipelines import mix, reshard
from tfrecord_beam import manifest as mf
from tfrecord_beam.errors import CorruptRecordError
from tfrecord_beam.index import build_index
from tfrecord_beam.jobs import _plan
from tfrecord_beam.records import ReadSpan, read_records, write_records
from tfrecord_beam.skipping import SkippingReader

GARBAGE = b"\x07not a record, between two records\x01\x02"


class Inputs:
    """Damaged inputs: what a streaming reader with skipping reads of them, and where the
    damage is (worked out from the undamaged records, not from that reader)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True)
        self.dir = root
        self.plain = root / "a.tfrecord"
        data = payloads(400)
        write_records(str(self.plain), data)
        offsets = build_index(str(self.plain))[:, 0].tolist()
        raw = bytearray(self.plain.read_bytes())
        raw[offsets[50] + 14] ^= 0xFF  # a payload byte: its CRC fails, its length is sound
        raw[offsets[150] + 2] ^= 0xFF  # a length byte: its CRC fails, reading resyncs
        raw[offsets[251] : offsets[251]] = GARBAGE  # garbage between records 250 and 251
        cut = len(data[-1]) // 2 + 4
        del raw[len(raw) - cut :]  # the last record cut short
        self.plain.write_bytes(bytes(raw))
        shift = len(GARBAGE)
        self.plain_bad = [offsets[50], offsets[150], offsets[251], offsets[399] + shift]
        self.plain_kept = [p for i, p in enumerate(data) if i not in (50, 150, 399)]

        self.gz = root / "b.tfrecord.gz"
        self.zlib = root / "c.tfrecord.zlib"
        for tag, path in ((1, self.gz), (2, self.zlib)):
            write_records(str(path), payloads(300, tag=tag))
            packed = bytearray(path.read_bytes())
            for i in range(len(packed) // 2, len(packed) // 2 + 8):  # damage inside the deflate stream
                packed[i] ^= 0x5A
            path.write_bytes(bytes(packed))

        self.plain_stream, self.plain_letters = _skipping_read(self.plain, None)
        self.gz_stream, self.gz_letters = _skipping_read(self.gz, "gzip")
        self.zlib_stream, self.zlib_letters = _skipping_read(self.zlib, "zlib")
        self.stream = self.plain_stream + self.gz_stream + self.zlib_stream  # in input order
        self.letters = sorted(self.plain_letters + self.gz_letters + self.zlib_letters)


def _skipping_read(path: Path, compression) -> Tuple[List[bytes], List[Tuple[str, int]]]:
    letters: List[Tuple[str, int]] = []
    reader = SkippingReader(
        str(path),
        ReadSpan(compression),
        open_file=lambda: open(path, "rb"),
        skip_corrupt=True,
        on_corrupt=lambda f, o, r: letters.append((f, o)),
    )
    return [p for chunk in reader.chunks() for p in chunk.payloads()], letters


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Inputs:
    """Made once for the module: the jobs only read it (their outputs go under each test's tmp_path)."""
    inputs = Inputs(tmp_path_factory.mktemp("damaged") / "in")
    # the streaming reader agrees with what the damage should cost
    assert inputs.plain_stream == inputs.plain_kept
    assert [o for _, o in inputs.plain_letters] == inputs.plain_bad
    for letters, stream in ((inputs.gz_letters, inputs.gz_stream), (inputs.zlib_letters, inputs.zlib_stream)):
        # the records before the damage; a garbled record whose length still reads is stepped
        # over, then the broken stream ends the file in one entry
        assert 1 <= len(letters) <= 3 and 0 < len(stream) < 300
    return inputs


def _letters(path: Path) -> List[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_dead_letters(out: Path, name: str, stdout: str, inputs: Inputs) -> None:
    letters = _letters(out / f"_CORRUPT.{name}.jsonl")
    assert sorted((e["file"], e["offset"]) for e in letters) == [(str(f), o) for f, o in inputs.letters]
    assert all(e["reason"] for e in letters)
    for path, kind in ((inputs.gz, "gzip"), (inputs.zlib, "zlib")):
        *stepped, last = sorted((e for e in letters if e["file"] == str(path)), key=lambda e: e["offset"])
        assert f"the rest of this {kind} file" in last["reason"]  # the stream's damage ends the file
        assert all("the rest of" not in e["reason"] for e in stepped)
    summary = summary_json(stdout)
    assert summary["corrupt_records"] == len(inputs.letters)
    manifest = mf.read_manifest(str(out / f"_MANIFEST.{name}.json"))
    assert manifest.corrupt_records == len(inputs.letters) and manifest.dead_letters == f"_CORRUPT.{name}.jsonl"


def _shards(out: Path, name: str) -> List[bytes]:
    manifest = mf.read_manifest(str(out / f"_MANIFEST.{name}.json"))
    return [p for entry in manifest.shards for p in read_records(str(out / entry.name))]


@pytest.mark.parametrize("balance", ["records", "bytes"])
def test_reshard_skip_corrupt_copies_exactly_the_intact_records_in_order(
    damaged, tmp_path, capsys, monkeypatch, balance
):
    # checkpoints every 16 records: copies start between the damage and step over it themselves
    monkeypatch.setattr(_plan, "CHECKPOINT_RECORDS", 16)
    out = tmp_path / "o"
    args = [
        "--input",
        str(damaged.dir / "*"),
        "--output_prefix",
        str(out / "x"),
        "--num_shards",
        "7",
        "--balance",
        balance,
    ]
    if balance == "records":  # without the flag the survey fails on the damage, before any balancing
        code, _, err = run_job(reshard.main, args + FAST, capsys)
        assert code == 1 and str(damaged.plain) in err and f"byte offset {damaged.plain_bad[1]}" in err  # as before
    code, stdout, err = run_job(reshard.main, args + ["--skip_corrupt"] + FAST, capsys)
    assert code == 0, err
    assert _shards(out, "x") == damaged.stream  # exactly once, in input order
    assert summary_json(stdout)["records"] == len(damaged.stream)
    assert "yes:" in summary_json(stdout)["verified"]
    _check_dead_letters(out, "x", stdout, damaged)


def test_reshard_skip_corrupt_on_multi_processing(damaged, tmp_path, capsys):
    out = tmp_path / "o"
    code, stdout, err = run_job(
        reshard.main,
        ["--input", str(damaged.dir / "*"), "--output_prefix", str(out / "x"), "--num_shards", "3", "--skip_corrupt"]
        + MULTI,
        capsys,
    )
    assert code == 0, err
    assert _shards(out, "x") == damaged.stream
    _check_dead_letters(out, "x", stdout, damaged)


def test_reshard_shuffle_skip_corrupt(damaged, tmp_path, capsys):
    out = tmp_path / "o"
    args = [
        "--input",
        str(damaged.dir / "*"),
        "--output_prefix",
        str(out / "x"),
        "--num_shards",
        "3",
        "--shuffle",
        "--split_bytes",
        "5000",
    ]  # byte ranges: damage inside ranges and across their ends
    code, _, err = run_job(reshard.main, args + FAST, capsys)
    assert code == 1 and str(damaged.plain) in err  # without the flag the shuffle fails on damage
    code, stdout, err = run_job(reshard.main, args + ["--skip_corrupt"] + FAST, capsys)
    assert code == 0, err
    assert Counter(_shards(out, "x")) == Counter(damaged.stream)
    _check_dead_letters(out, "x", stdout, damaged)


def test_mix_skip_corrupt_selects_among_the_intact_records(damaged, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_plan, "CHECKPOINT_RECORDS", 16)  # selection blocks after the damage too
    out = tmp_path / "m"
    n = len(damaged.stream)
    args = [
        "--source",
        f"{damaged.dir}/*=1",
        "--total_records",
        str(n),
        "--output_prefix",
        str(out / "x"),
        "--num_shards",
        "3",
        "--seed",
        "5",
    ]
    code, _, err = run_job(mix.main, args + FAST, capsys)
    assert code == 1 and str(damaged.plain) in err and "byte offset" in err
    code, stdout, err = run_job(mix.main, args + ["--skip_corrupt"] + FAST, capsys)
    assert code == 0, err
    # every intact record, sampled without replacement: each exactly once
    assert Counter(_shards(out, "x")) == Counter(damaged.stream)
    manifest = json.loads((out / "x.manifest.json").read_text())
    assert manifest["sources"][0]["available_records"] == n
    _check_dead_letters(out, "x", stdout, damaged)

    # two sources, one repeated: still only intact records, in the planned counts
    out2 = tmp_path / "m2"
    code, stdout, err = run_job(
        mix.main,
        [
            "--source",
            f"{damaged.plain}=1",
            "--source",
            f"{damaged.dir}/*.tfrecord.*=1",
            "--total_records",
            "800",
            "--output_prefix",
            str(out2 / "y"),
            "--skip_corrupt",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    got = Counter(_shards(out2, "y"))
    assert sum(got.values()) == 800 and set(got) <= set(damaged.stream)
    assert sum(c for p, c in got.items() if p in set(damaged.plain_stream)) == 400  # repeated: more than it has
    _check_dead_letters(out2, "y", stdout, damaged)


@pytest.mark.parametrize("skip", [False, True])
def test_a_copy_fails_when_its_file_lost_records_after_the_survey(tmp_path, skip):
    from tfrecord_beam.jobs._copy import piece_chunks

    path = tmp_path / "a.tfrecord"
    write_records(str(path), payloads(50))
    offsets = build_index(str(path))[:, 0]
    piece = _plan.Piece(str(path), None, 0, "records", 10, 50, 0, 0, skip_corrupt=skip)
    assert sum(len(sizes) for _, sizes, _ in piece_chunks(piece, lambda p: open(p, "rb"))) == 40
    path.write_bytes(path.read_bytes()[: int(offsets[45])])  # shortened at a record boundary: no damage to see
    with pytest.raises(CorruptRecordError, match="before the 50 records its survey found") as err:
        list(piece_chunks(piece, lambda p: open(p, "rb")))
    assert str(path) in str(err.value) and "record 45" in str(err.value)
    assert err.value.offset == int(offsets[45])  # where the file now ends
