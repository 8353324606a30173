"""Planned jobs (unshuffled reshard, mix, build_index) over block-gzip inputs: the survey reads
the member table and walks member ranges (parts), each piece enters at the member holding its
first record and inflates only its own members, and the outputs are those of the same data
uncompressed (exactly once, in order)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import List

import numpy as np
import pytest

from tfrecord_beam import blockgzip
from tfrecord_beam import fs as core_fs
from tfrecord_beam.errors import CorruptRecordError
from tfrecord_beam.index import build_index as index_of
from tfrecord_beam.index import load_index, verify_index
from tfrecord_beam.jobs import _copy, _plan
from tfrecord_beam.records import RecordWriter, read_records

BLOCK = 4096  # small members: many per file


def _payloads(n: int, seed: int) -> List[bytes]:
    rng = np.random.default_rng(seed)
    return [bytes([k % 251]) * int(m) + rng.bytes(8) for k, m in enumerate(rng.integers(0, 400, n))]


def _write_pair(directory: Path, name: str, payloads: List[bytes]):
    """The same records as block-gzip (with its index and member table) and uncompressed."""
    directory.mkdir(parents=True, exist_ok=True)
    gz = directory / f"{name}.tfrecord.gz"
    with RecordWriter(str(gz), "gzip", block_bytes=BLOCK, index_path=str(gz) + ".tfindex") as w:
        w.write_many(payloads)
    plain = directory.parent / (directory.name + "-plain") / f"{name}.tfrecord"
    plain.parent.mkdir(parents=True, exist_ok=True)
    with RecordWriter(str(plain), index_path=str(plain).replace(".tfrecord", ".tfindex")) as w:
        w.write_many(payloads)
    return gz, plain


def _survey(path: Path, number: int = 0, part_bytes: int = 5000):
    """The survey a planned job makes of a block-gzip file: its member ranges walked apart, joined."""
    table = blockgzip.member_table_for(str(path))
    parts = []
    for first, stop in _plan.survey_parts(table, part_bytes):
        with open(path, "rb") as raw:
            parts.append(_plan.survey(raw, str(path), "gzip", number, members=table.window(first, stop)))
    return _plan.merge_parts(parts[::-1]), table, len(parts)


def test_survey_by_members_matches_a_whole_walk_and_the_index(tmp_path):
    payloads = _payloads(2500, 1)
    gz, _ = _write_pair(tmp_path / "in", "a", payloads)
    merged, table, parts = _survey(gz)
    with open(gz, "rb") as raw:
        whole = _plan.survey(raw, str(gz), "gzip", 0)
    assert parts > 10 and whole.members is None
    assert (merged.records, merged.stream_bytes, merged.digest) == (whole.records, whole.stream_bytes, whole.digest)
    index = load_index(str(gz) + ".tfindex")
    assert np.array_equal(merged.members[:, 1], table.uncompressed)
    assert np.array_equal(merged.members[:, 2], table.compressed)
    assert np.array_equal(merged.members[:-1, 0], np.searchsorted(index[:, 0], table.uncompressed[:-1]))
    assert merged.members[-1, 0] == len(payloads)
    with pytest.raises(ValueError, match="a whole-file survey cannot be merged"):
        _plan.merge_parts([merged, whole])


class _Counting:
    """An opener that counts the bytes read from the data file, and where reads began."""

    def __init__(self, data: Path) -> None:
        self.data, self.read, self.lowest = str(data), 0, None

    def __call__(self, path: str):
        raw = core_fs.open_input(path)
        if path != self.data:
            return raw
        counter, inner_read = self, raw.read

        def read(n=-1):
            at = raw.tell()
            out = inner_read(n)
            counter.read += len(out)
            counter.lowest = at if counter.lowest is None else min(counter.lowest, at)
            return out

        raw.read = read
        return raw


@pytest.mark.parametrize("balance", ["records", "bytes"])
def test_pieces_inflate_their_own_members_only(tmp_path, balance):
    payloads = _payloads(3000, 2)
    gz, _ = _write_pair(tmp_path / "in", "a", payloads)
    survey, table, _ = _survey(gz)
    plans = _plan.plan_contiguous([survey], 6, balance)
    # damage member 0 after the survey: only the first shard's copy may touch it
    raw = bytearray(gz.read_bytes())
    raw[int(table.compressed[1]) // 2] ^= 0xFF
    gz.write_bytes(bytes(raw))
    out: List[bytes] = []
    for plan in plans[1:]:
        [piece] = plan.pieces
        counting = _Counting(gz)
        dest = tmp_path / f"o-{plan.shard}.tfrecord"
        _copy.copy_pieces(plan.pieces, str(dest), str(dest) + ".idx", None, counting, core_fs.atomic_output)
        out += list(read_records(str(dest)))
        first = table.member_at(piece.from_offset)
        last = table.member_at(piece.to_offset - 1)
        assert table.uncompressed[first] == piece.from_offset and counting.lowest == table.compressed[first]
        assert counting.read <= table.compressed[last + 1] - table.compressed[first]  # its members, read once
    assert out == payloads[len(payloads) - len(out) :]  # the later shards: the input's tail, in order
    with pytest.raises(CorruptRecordError):
        _copy.copy_pieces(
            plans[0].pieces,
            str(tmp_path / "o-0.tfrecord"),
            str(tmp_path / "o-0.idx"),
            None,
            core_fs.open_input,
            core_fs.atomic_output,
        )


def test_a_stale_member_table_is_an_error_not_a_misread(tmp_path):
    payloads = _payloads(800, 3)
    gz, _ = _write_pair(tmp_path / "in", "a", payloads)
    table = blockgzip.member_table_for(str(gz))
    bad = blockgzip.MemberTable(table.compressed, table.uncompressed.copy())
    bad.uncompressed[2] += 1  # a member "starting" inside a record
    from tfrecord_beam.errors import IndexMismatchError

    with open(gz, "rb") as raw, pytest.raises(IndexMismatchError, match="not a record boundary"):
        _plan.survey(raw, str(gz), "gzip", 0, members=bad.window(0, len(bad)))


# -- the jobs -----------------------------------------------------------------------------------
beam = pytest.importorskip("apache_beam")
from helpers.jobs import FAST, MULTI, run_job, summary_json  # noqa: E402

from pipelines import build_index, mix, reshard  # noqa: E402
from tfrecord_beam.beam import _fs  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("bgz")
    data = [_payloads(n, 10 + k) for k, n in enumerate([1800, 5, 1300])]
    for k, payloads in enumerate(data):
        _write_pair(root / "gz", f"in-{k}", payloads)
    return root / "gz", root / "gz-plain", [p for d in data for p in d]


def _shards(directory: Path, glob: str) -> List[List[bytes]]:
    return [list(read_records(str(p))) for p in sorted(directory.glob(glob))]


@pytest.mark.parametrize("runner,balance", [(FAST, "records"), (MULTI, "bytes")], ids=["fnapi-records", "multi-bytes"])
def test_reshard_of_block_gzip_is_that_of_the_same_data_uncompressed(
    pair, tmp_path, capsys, runner, balance, monkeypatch
):
    gz, plain, payloads = pair
    monkeypatch.setattr(_plan, "SURVEY_PART_BYTES", 20000)  # several survey parts per file
    reads = {"bytes": 0}
    if runner is FAST:  # in-process: count what is read from the data files
        real = _fs.open_input

        def counting(path):
            handle = real(path)
            if path.endswith(".gz"):
                inner = handle.read

                def read(n=-1):
                    out = inner(n)
                    reads["bytes"] += len(out)
                    return out

                handle.read = read
            return handle

        monkeypatch.setattr(_fs, "open_input", counting)
    outputs = {}
    for name, src, glob, how in [("gz", gz, "*.tfrecord.gz", runner), ("plain", plain, "*.tfrecord", FAST)]:
        args = [
            "--input",
            str(src / glob),
            "--output_prefix",
            str(tmp_path / name / "r"),
            "--num_shards",
            "8",
            "--balance",
            balance,
        ] + how
        code, out, err = run_job(reshard.main, args, capsys)
        assert code == 0, err
        outputs[name] = _shards(tmp_path / name, "r-*.tfrecord")
    assert outputs["gz"] == outputs["plain"] and [p for s in outputs["gz"] for p in s] == payloads
    if runner is FAST:  # the survey inflates each member once, the copies once more (not from each file's start)
        size = sum(f.stat().st_size for f in gz.glob("*.tfrecord.gz"))
        assert 2 * size <= reads["bytes"] <= 2.2 * size


def test_reshard_block_gzip_to_block_gzip_keeps_members_and_order(pair, tmp_path, capsys, runner=FAST):
    gz, _, payloads = pair
    code, out, err = run_job(
        reshard.main,
        [
            "--input",
            str(gz / "*.tfrecord.gz"),
            "--output_prefix",
            str(tmp_path / "o" / "r"),
            "--num_shards",
            "3",
            "--output_compression",
            "gzip",
        ]
        + runner,
        capsys,
    )
    assert code == 0, err
    shards = sorted(str(p) for p in (tmp_path / "o").glob("r-*.tfrecord.gz"))
    assert len(shards) == 3
    assert [p for s in shards for p in read_records(s)] == payloads
    for shard in shards:
        assert blockgzip.layout(shard)[0] == "indexed"
        verify_index(shard + ".tfindex", shard)
        with gzip.open(shard) as g:  # still one gzip stream to every other reader
            assert len(g.read()) == blockgzip.member_table_for(shard).data_size


def test_mix_of_block_gzip_is_that_of_the_same_data_uncompressed(pair, tmp_path, capsys):
    """The block-gzip inputs mixed on the in-process runner and on multi_processing (2 workers):
    both the mix of the same data uncompressed (one reference run for the two)."""
    gz, plain, _ = pair
    outputs = {}
    for name, src, glob, how in [
        ("plain", plain, "*.tfrecord", FAST),
        ("gz", gz, "*.tfrecord.gz", FAST),
        ("gz-multi", gz, "*.tfrecord.gz", MULTI),
    ]:
        args = [
            "--source",
            f"{src}/in-0{glob[1:]}=1",
            "--source",
            f"{src}/in-[12]{glob[1:]}=2",
            "--total_records",
            "2500",
            "--output_prefix",
            str(tmp_path / name / "m"),
            "--num_shards",
            "3",
            "--seed",
            "5",
        ] + how
        code, out, err = run_job(mix.main, args, capsys)
        assert code == 0, err
        assert summary_json(out)["records"] == 2500
        outputs[name] = _shards(tmp_path / name, "m-*.tfrecord")
    assert outputs["gz"] == outputs["plain"] and outputs["gz-multi"] == outputs["plain"]


def test_build_index_of_block_gzip_is_that_of_the_same_data_uncompressed(pair, tmp_path, capsys):
    gz, plain, _ = pair
    for name, src, glob in [("gz", gz, "*.tfrecord.gz"), ("plain", plain, "*.tfrecord")]:
        code, _, err = run_job(
            build_index.main, ["--input", str(src / glob), "--output_dir", str(tmp_path / name)] + FAST, capsys
        )
        assert code == 0, err
    for f in sorted(gz.glob("*.tfrecord.gz")):
        built = tmp_path / "gz" / (f.name + ".tfindex")
        twin = tmp_path / "plain" / f.name.replace(".tfrecord.gz", ".tfindex")
        assert np.array_equal(load_index(str(built)), load_index(str(twin)))
        assert np.array_equal(load_index(str(built)), index_of(str(f)))
        table = blockgzip.load_member_table(str(built))
        assert table is not None and np.array_equal(table.compressed, blockgzip.member_table_for(str(f)).compressed)


def test_reshard_of_block_gzip_streams_in_bounded_memory(tmp_path, capsys):
    """Largest-process peak RSS of a reshard of 5x the budget exceeds that of 1x by less than
    the budget (tests/jobs/test_pipelines_bounded.py's rule), and the output is the input in order."""
    from helpers.rss import MiB, peak_growth

    budget = 32 * MiB

    def inputs(directory: Path, total: int, seed: int) -> List[Path]:
        directory.mkdir(parents=True)
        rng = np.random.default_rng(seed)
        paths = []
        for k in range(2):
            path = directory / f"in-{k}.tfrecord.gz"
            with RecordWriter(str(path), "gzip", index_path=str(path) + ".tfindex", compression_level=1) as w:
                for _ in range(total // 2 // (256 * 16384)):
                    sizes = rng.integers(1, 32768, 256)
                    blob = rng.bytes(int(sizes.sum()))
                    ends = np.cumsum(sizes)
                    w.write_many([blob[e - n : e] for n, e in zip(sizes.tolist(), ends.tolist())])
            paths.append(path)
        return paths

    big, small = inputs(tmp_path / "big", 5 * budget, 1), inputs(tmp_path / "small", budget, 2)

    def job(files, name):
        code, _, err = run_job(
            reshard.main,
            [
                "--input",
                str(files[0].parent / "*.tfrecord.gz"),
                "--output_prefix",
                str(tmp_path / name / "r"),
                "--num_shards",
                "4",
            ]
            + FAST,
            capsys,
        )
        assert code == 0, err

    growth = peak_growth(lambda: job(small, "s"), lambda: job(big, "b"))
    assert growth < budget, f"peak RSS grew by {growth / MiB:.0f} MiB on a {5 * budget / MiB:.0f} MiB input"
    shards = sorted((tmp_path / "b").glob("r-*-of-00004.tfrecord"))
    got = (p for s in shards for p in read_records(str(s)))
    want = (p for f in big for p in read_records(str(f)))
    assert all(a == b for a, b in zip(got, want)) and sum(1 for s in shards for _ in read_records(str(s))) == sum(
        len(load_index(str(f) + ".tfindex")) for f in big
    )
