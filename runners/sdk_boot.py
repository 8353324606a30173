"""The container executable of the EXTERNAL worker pool (runners/portable.sh): what Beam's Go
`boot` does in the SDK container, for a worker started by `worker_pool_main`.

Without it, `worker_pool_main` runs a bare `SdkHarness` that never receives the pipeline
options: Beam's FileSystems then have no `--s3_endpoint_url` or keys in the worker ("Must
provide one of client or options" on the first s3:// access). This asks the runner's
provision service for the options and endpoints, as the container's boot does, and starts
`sdk_worker_main` with them. Artifacts are not fetched: the worker imports this checkout
through PYTHONPATH, from the venv pinned to the job server's Beam.

Usage (by worker_pool_main --container_executable): sdk_boot.py --id=ID --provision_endpoint=HOST:PORT
    --control_endpoint=... --logging_endpoint=... --artifact_endpoint=...
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc, endpoints_pb2
from google.protobuf import json_format, text_format


def _descriptor(url: str) -> str:
    return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("id", "provision_endpoint", "control_endpoint", "logging_endpoint", "artifact_endpoint"):
        parser.add_argument(f"--{name}", default="")
    args = parser.parse_args(argv)
    with grpc.insecure_channel(args.provision_endpoint) as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        info = stub.GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=[("worker_id", args.id)]
        ).info
    control = info.control_endpoint.url or args.control_endpoint
    logging = info.logging_endpoint.url or args.logging_endpoint
    semi_persistent = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"beam-worker-{args.id}")
    os.makedirs(semi_persistent, exist_ok=True)
    env = dict(os.environ)
    env.update(
        WORKER_ID=args.id,
        PIPELINE_OPTIONS=json_format.MessageToJson(info.pipeline_options),
        CONTROL_API_SERVICE_DESCRIPTOR=_descriptor(control),
        LOGGING_API_SERVICE_DESCRIPTOR=_descriptor(logging),
        SEMI_PERSISTENT_DIRECTORY=semi_persistent,
        RUNNER_CAPABILITIES=" ".join(info.runner_capabilities),
    )
    if info.status_endpoint.url:
        env["STATUS_API_SERVICE_DESCRIPTOR"] = _descriptor(info.status_endpoint.url)
    os.execve(sys.executable, [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"], env)


if __name__ == "__main__":
    main()
