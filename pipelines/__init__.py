"""Command-line Beam jobs over tfrecord_beam, each `python -m pipelines.NAME --help`:

build_index, reshard, mix, parquet_to_tfrecord, tfrecord_to_parquet, and `demo` (the main job,
docs/jobs.md's "The demo"). Shared plumbing: `_common` (arguments, Beam options, staged output,
summary).

What the jobs import from the library (one rule, tests/project/test_job_imports.py checks it): public
modules and names only, never a module or name whose dotted path has a part starting with `_`.
The internals a job needs are re-exported, under `__all__`, by three faces:
`tfrecord_beam.jobtools` (Beam-free, standard library only so `--help` answers at once: the
strict parser, exit statuses, argument types, default sizes, `require_beam`,
`describe_engine`, the absent-feature check), `tfrecord_beam.jobs` (the Beam-free engine) and
`tfrecord_beam.beam.jobio` (files through Beam's FileSystems, progress files and lines).
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

#: The jobs that write an output, each `python -m pipelines.NAME`. The tests every job must pass
#: (arguments, --help, outputs and manifest, its flags named in docs/jobs.md) take their list
#: from here: a new job is its module, its name here and its section of docs/jobs.md.
JOBS = ("build_index", "reshard", "mix", "parquet_to_tfrecord", "tfrecord_to_parquet")
#: Every command of the package: the jobs, and the demo that chains them.
COMMANDS = JOBS + ("demo",)
