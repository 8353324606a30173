"""Command-line Beam jobs over tfrecord_beam, each `python -m pipelines.NAME --help`:

build_index, reshard, mix, parquet_to_tfrecord, tfrecord_to_parquet, and `demo` (the README's
main job). Shared plumbing: `_common` (arguments, Beam options, staged output, summary).
The Beam stages the jobs are made of live in the package, used through their public names
only: `tfrecord_beam.beam.stages` (range reading, shard routing and writing, checksums, task
result files), `.planned` (survey, plan, streamed copies), `.shuffle` (the external shuffle,
driven by `_reshard_shuffle`) and `.parquet`.
"""
