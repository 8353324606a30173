"""Command-line Beam jobs over tfrecord_beam, each `python -m pipelines.NAME --help`:

build_index, reshard, mix, parquet_to_tfrecord, tfrecord_to_parquet, and `demo` (the README's
main job). Shared plumbing: `_common` (arguments, Beam options, staged output, summary) and
`_stages` (range reading, shard routing and writing, checksums).
"""

import logging as _logging


class _QuietBeamImport(_logging.Filter):
    """Drop the warning Beam logs on the root logger at import when only part of its GCP
    client libraries is installed ("apitools not found ..."): a job prints one line per failure."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return "apitools not found" not in str(record.msg)


_logging.getLogger().addFilter(_QuietBeamImport())
