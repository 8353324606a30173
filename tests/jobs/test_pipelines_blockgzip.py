"""The pipelines write block-gzip shards when they write GZIP with indexes (RecordWriter's default)."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("apache_beam")

from helpers.jobs import FAST, read_shards, run_job, write_files  # noqa: E402

from pipelines import reshard  # noqa: E402
from tfrecord_beam import blockgzip  # noqa: E402
from tfrecord_beam.index import verify_index  # noqa: E402


def test_reshard_output_compression_gzip_writes_block_gzip(tmp_path, capsys):
    data = write_files(tmp_path / "in", "a", [300, 200])
    out = tmp_path / "out"
    code, _, err = run_job(
        reshard.main,
        [
            "--input",
            str(tmp_path / "in" / "*"),
            "--output_prefix",
            str(out / "p"),
            "--num_shards",
            "2",
            "--output_compression",
            "gzip",
        ]
        + FAST,
        capsys,
    )
    assert code == 0, err
    shards = sorted(str(p) for p in out.glob("p-*.tfrecord.gz"))
    assert len(shards) == 2 and Counter(p for s in read_shards(out, "p-*.tfrecord.gz") for p in s) == Counter(data)
    for shard in shards:
        assert blockgzip.layout(shard)[0] == "indexed"
        verify_index(shard + ".tfindex", shard)
