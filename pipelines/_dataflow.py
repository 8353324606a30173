"""Dataflow at launch: what is checked before a job is built, and what a dry run built.

A dry run (`--runner=DataflowRunner --dry_run=True`) makes Beam build the whole job (its
overrides, the portable pipeline, the job request) and submit nothing: the flags,
--project / --temp_location and the paths are checked offline, before a cloud job costs
anything. Beam's `run()` then returns at once a result that says DONE although nothing ran, so
a job must not go on to read its workers' results or commit (it would find no shard, warn that
every shard is empty and fail on a missing checksum proof): `run_pipeline` raises `DryRun`
instead, and `run_job` removes the output's staging and says that nothing was submitted and
nothing committed (exit 0).

Beam writes the job request to `--dataflow_job_file=PATH` only when it submits, and even then the
portable pipeline is staged apart from it. In a dry run the launcher writes PATH itself (local
or gs://), one JSON object (`record`): `job` (the job request as Beam built it; Beam fills its
environment while staging, which a dry run skips), `pipeline` (the portable pipeline proto, as
`google.protobuf.json_format` writes it), `options` (the pipeline options the workers get) and
`staged` (each file Beam would stage: the name the workers see, the local file).

Before any of that, on Dataflow (dry or not), `launch_problem` refuses what would only fail on
the workers: a local path in the job's path flags (workers see no file of this machine), and no
way for the workers to install this package (they start from Beam's container, which lacks it;
docs/runners.md "Dataflow" gives the wheel to stage).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Dict, Iterable, List, Optional

DATAFLOW = "DataflowRunner"
#: the jobs' flags that name files or output locations (mix's --source is PATTERN=WEIGHT)
PATH_FLAGS = ("input", "source", "output_prefix", "output_dir", "manifest")
#: a wheel of this package, as `make wheel` names it (PEP 427: name-version-python-abi-platform.whl)
_WHEEL = re.compile(r"^tfrecord_beam-[^-]+-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$")


class DryRun(Exception):
    """The job was built for a dry run and nothing ran; `facts` are the summary's fields."""

    def __init__(self, facts: Dict[str, Any]) -> None:
        super().__init__("dry run: the Dataflow job was built and not submitted")
        self.facts = facts


def _runner_name(options) -> str:
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner or ""
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1]


def _asks_dry_run(options) -> bool:
    from apache_beam.options.pipeline_options import TestOptions

    return bool(options.view_as(TestOptions).dry_run)


def is_dry_run(options) -> bool:
    """Whether the options ask DataflowRunner to build the job and submit nothing."""
    return _runner_name(options) == DATAFLOW and _asks_dry_run(options)


def launch_problem(args, options) -> Optional[str]:
    """One line saying why this launch would fail on Dataflow's workers, else None (and None on
    other runners, but for --dry_run, which only DataflowRunner honours: elsewhere the job would
    run and commit)."""
    if _runner_name(options) != DATAFLOW:
        if _asks_dry_run(options):
            return f"--dry_run=True is honoured only by DataflowRunner: on {_runner_name(options)} the job would run"
        return None
    local = [f"--{flag} {path}" for flag, path in _paths(args) if "://" not in path]
    if local:
        return (
            "Dataflow's workers cannot see this machine's files: "
            + ", ".join(local)
            + " (give gs:// paths; docs/runners.md, Dataflow)"
        )
    return package_problem(options)


def _paths(args) -> Iterable[tuple]:
    for flag in PATH_FLAGS:
        value = getattr(args, flag, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item:
                yield flag, item.rsplit("=", 1)[0] if flag == "source" else item


def package_problem(options) -> Optional[str]:
    """Why Dataflow's workers would not get this package with its compiled engine, else None.

    Accepted: a wheel of this package for this Python on Linux staged with --extra_package (what
    `make wheel` builds), its sdist there (each worker compiles it), or a route the launcher
    cannot look into (--setup_file, which also compiles on every worker; --requirements_file; a
    custom --sdk_container_image)."""
    from apache_beam.options.pipeline_options import SetupOptions, WorkerOptions

    setup = options.view_as(SetupOptions)
    if setup.setup_file or setup.requirements_file or options.view_as(WorkerOptions).sdk_container_image:
        return None
    ours = [p for p in setup.extra_packages or [] if os.path.basename(p).startswith("tfrecord_beam-")]
    if any(p.endswith(".tar.gz") for p in ours):
        return None
    wheels = ours
    wanted = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    for path in wheels:
        found = _WHEEL.match(os.path.basename(path))
        if found and found["python"] == wanted and "linux" in found["platform"]:
            return None
    how = "build one with `make wheel` and pass --extra_package=wheelhouse/tfrecord_beam-*.whl (docs/runners.md, Dataflow)"
    if wheels:
        return (
            f"--extra_package {', '.join(wheels)}: not a {wanted} Linux wheel of tfrecord_beam, which the "
            f"workers (Beam's container for this Python) need: {how}"
        )
    return f"Dataflow's workers would not have tfrecord_beam: {how}"


def staged(pipeline_proto) -> List[Dict[str, str]]:
    """The files Beam would stage for the workers (each environment's artifacts, once each):
    the name the workers see and the local file."""
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2 as api

    out: Dict[str, Dict[str, str]] = {}
    for _, env in sorted(pipeline_proto.components.environments.items()):
        for dep in env.dependencies:
            path = ""
            if dep.type_urn == common_urns.artifact_types.FILE.urn:
                path = api.ArtifactFilePayload.FromString(dep.type_payload).path
            name = os.path.basename(path)
            if dep.role_urn == common_urns.artifact_roles.STAGING_TO.urn:
                name = api.ArtifactStagingToRolePayload.FromString(dep.role_payload).staged_name
            out.setdefault(name, {"name": name, "path": path})
    return list(out.values())


def record(result, options) -> Dict[str, Any]:
    """What Beam built for the dry run (the module's docstring): job, pipeline, options, staged."""
    from google.protobuf import json_format

    job = result.job
    return {
        "dry_run": True,
        "job": json.loads(job.json()),
        "pipeline": json_format.MessageToDict(job.proto_pipeline),
        "options": {k: v for k, v in options.get_all_options(retain_unknown_options=True).items() if v is not None},
        "staged": staged(job.proto_pipeline),
    }


def finish(result, options, write_bytes) -> DryRun:
    """The `DryRun` for a dry run's result; writes `record` to --dataflow_job_file (through
    `write_bytes(path, data)`) when one is given."""
    from apache_beam.options.pipeline_options import DebugOptions, GoogleCloudOptions

    built = record(result, options)
    cloud = options.view_as(GoogleCloudOptions)
    facts: Dict[str, Any] = {
        "dataflow_job": built["job"].get("name"),
        "project": cloud.project,
        "region": cloud.region,
        "steps": len(built["pipeline"].get("components", {}).get("transforms", {})),
        "staged": ", ".join(s["name"] for s in built["staged"]) or "nothing",
    }
    path = options.view_as(DebugOptions).dataflow_job_file
    if path:
        write_bytes(path, json.dumps(built, indent=1, sort_keys=True, default=str).encode("utf-8"))
        facts["job_file"] = path
    return DryRun(facts)
