"""Command-line Beam jobs over tfrecord_beam, each `python -m pipelines.NAME --help`:

build_index, reshard, mix, parquet_to_tfrecord, tfrecord_to_parquet, and `demo` (the README's
main job). Shared plumbing: `_common` (arguments, Beam options, staged output, summary) and
`_stages` (range reading, shard routing and writing, checksums).
"""

import tfrecord_beam.beam  # noqa: E402,F401 - first, so Beam is imported without its log noise
