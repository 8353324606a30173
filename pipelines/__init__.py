"""Command-line Beam jobs over tfrecord_beam, each `python -m pipelines.NAME --help`:

build_index, reshard, mix, parquet_to_tfrecord, tfrecord_to_parquet, and `demo` (the README's
main job). Shared plumbing: `_common` (arguments, Beam options, staged output, summary).
The Beam stages the jobs are made of live in the package, used through their public names
only: `tfrecord_beam.beam.stages` (range reading, shard routing and writing, checksums, task
result files), `.planned` (survey, plan, streamed copies), `.shuffle` (the external shuffle,
driven by `_reshard_shuffle`) and `.parquet`; the Beam-free engine under them (walking
frames, surveys and shard plans, copies, the shuffles' buckets) is `tfrecord_beam.jobs`,
whose `__all__` is what the jobs import.

Where a job's code lives (one rule): a job module holds its flags, its summary and the Beam
graph that only it has (mix's weighted selection and spill steps, say); a Beam step that is
not about one job (a shuffle into shards, a planned copy, a Parquet conversion) lives in
`tfrecord_beam.beam`, takes values (never a job's flags, and never names a job in its labels
or messages unless the job passes the words in) and can be used by any job; logic without
Beam lives in `tfrecord_beam.jobs`.
"""
