"""The runner matrix's inputs (tests/runners/): TFRecord files, a Parquet table and a damaged
file, written once per place (a local directory, an s3:// or gs:// prefix) and only read."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pyarrow as pa
import pyarrow.parquet as pq

from tfrecord_beam import fs
from tfrecord_beam.index import build_index
from tfrecord_beam.records import write_records

from . import runner_matrix as rm
from .jobs import payloads

GARBAGE = b"\x07not a record\x01\x02"


class Data:
    """The shared, read-only inputs under one place."""

    def __init__(self, place: rm.Place) -> None:
        self.place = place
        self.tf = [
            place.path("tf", "a-0.tfrecord"),
            place.path("tf", "a-1.tfrecord"),
            place.path("tf", "a-2.tfrecord.gz"),
        ]
        self.tf_payloads: List[bytes] = []
        for k, (path, n) in enumerate(zip(self.tf, (300, 200, 100))):
            _make_parent(path)
            data = payloads(n, tag=1, start=1000 * k)
            write_records(path, data)
            self.tf_payloads += data
        self.b = place.path("b", "b-0.tfrecord")
        _make_parent(self.b)
        write_records(self.b, payloads(40, tag=2))
        self.rows = {
            "id": list(range(500)),
            "text": [f"row {i}" for i in range(500)],
            "score": [i / 8 for i in range(500)],
        }
        self.parquet = place.path("pq", "t.parquet")
        _make_parent(self.parquet)
        with fs.atomic_output(self.parquet) as (handle, commit):
            pq.write_table(pa.table(self.rows), handle, row_group_size=128)
            commit()
        self.bad_dir = place.path("bad")
        self.bad_kept = self._damaged(place.path("bad", "d.tfrecord"))

    def _damaged(self, path: str) -> List[bytes]:
        """A file with a flipped payload byte (record 50), a flipped length byte (150) and
        garbage before record 251: the intact records a skipping read keeps."""
        data = payloads(300, tag=3)
        local = Path(self.place.base) / "damaged.tmp" if not fs.is_remote(path) else None
        staging = str(local) if local else path
        _make_parent(staging)
        write_records(staging, data)
        offsets = build_index(staging)[:, 0].tolist()
        raw = bytearray(Path(staging).read_bytes()) if local else bytearray(fs.open_input(staging).read())
        raw[offsets[50] + 14] ^= 0xFF
        raw[offsets[150] + 2] ^= 0xFF
        raw[offsets[251] : offsets[251]] = GARBAGE
        _make_parent(path)
        with fs.atomic_output(path) as (handle, commit):
            handle.write(bytes(raw))
            commit()
        if local:
            local.unlink()
        return [p for i, p in enumerate(data) if i not in (50, 150)]


def _make_parent(path: str) -> None:
    if not fs.is_remote(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
