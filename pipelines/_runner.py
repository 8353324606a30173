"""Which Beam runner a job runs on: the default, a bound on Prism's download, and what actually ran.

The default is the in-process FnApiRunner, named explicitly. Beam's own default, DirectRunner,
is not one runner: Beam 2.77 first tries Prism (downloading a binary from GitHub when none is
cached) and falls back to the FnApiRunner when that fails, so the same command would run on
Prism online and on the FnApiRunner offline, or stall where a firewall drops packets.
`--runner=DirectRunner` keeps Beam's meaning; Beam's download of Prism (which sets no timeout)
gives up after DOWNLOAD_TIMEOUT_S without a byte, so a blackholed address costs that long,
then Beam falls back.
The summary says which runner ran (`runner:`) and, when it differs, what was asked for.
A proxy set in the environment (http_proxy, ...) is for downloads: gRPC honours it too, and a
job talking to a local job service (Prism, a Flink job server on loopback) through a proxy that
refuses it waits forever, so loopback names are added to `no_grpc_proxy`.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Optional

DEFAULT_RUNNER = "FnApiRunner"
#: seconds each socket operation of Beam's Prism download may wait (env TFRECORD_BEAM_DOWNLOAD_TIMEOUT)
DOWNLOAD_TIMEOUT_S = 30.0
#: runners whose launch may download Prism (DirectRunner tries it first)
_PRISM_LAUNCHERS = ("DirectRunner", "SwitchingDirectRunner", "PrismRunner")


def runner_name(options) -> str:
    """The short class name of the runner the options ask for (e.g. 'DirectRunner')."""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner or DEFAULT_RUNNER
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1]


def set_default(options) -> None:
    """--runner=FnApiRunner unless a runner was given."""
    from apache_beam.options.pipeline_options import StandardOptions

    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_RUNNER


def _may_download_prism(options) -> bool:
    from apache_beam.options.pipeline_options import PortableOptions, PrismRunnerOptions

    if runner_name(options) not in _PRISM_LAUNCHERS:
        return False
    if options.view_as(PortableOptions).job_endpoint:  # an existing job service: nothing to fetch
        return False
    location = options.view_as(PrismRunnerOptions).prism_location
    return not (location and os.path.exists(location))


_PROXY_VARS = ("grpc_proxy", "https_proxy", "http_proxy", "all_proxy")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def spare_loopback_from_proxies(environ=os.environ) -> None:
    """When a proxy variable is set, make gRPC connect to loopback addresses directly: add them
    to `no_grpc_proxy` (gRPC reads it before `no_proxy`; it starts from `no_proxy`'s value)."""
    if not any(environ.get(v) or environ.get(v.upper()) for v in _PROXY_VARS):
        return
    current = environ.get("no_grpc_proxy") or environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    names = [n.strip() for n in current.split(",") if n.strip()]
    environ["no_grpc_proxy"] = ",".join(names + [n for n in _LOOPBACK if n not in names])


def download_timeout() -> float:
    """DOWNLOAD_TIMEOUT_S, or TFRECORD_BEAM_DOWNLOAD_TIMEOUT seconds when set."""
    value = os.environ.get("TFRECORD_BEAM_DOWNLOAD_TIMEOUT")
    try:
        return float(value) if value else DOWNLOAD_TIMEOUT_S
    except ValueError:
        raise ValueError(f"TFRECORD_BEAM_DOWNLOAD_TIMEOUT={value!r} is not a number of seconds") from None


@contextlib.contextmanager
def bounded_downloads(options) -> Iterator[None]:
    """While a pipeline is launched (`p.run()`) on a runner that may download Prism, Beam's
    download of Prism (`urlopen` in Beam's prism_runner module, which passes no timeout) gives
    up after `download_timeout()` seconds without a byte; otherwise a no-op. Only that download
    is bounded: when DirectRunner falls back, `run()` is the whole in-process run, and a
    process-wide default socket timeout would also cut the job's own sockets (a DoFn's, a
    thread's) that legitimately wait longer."""
    if not _may_download_prism(options):
        yield
        return
    from apache_beam.runners.portability import prism_runner

    unbounded = prism_runner.urlopen
    timeout = download_timeout()

    def urlopen(url, *args, **kwargs):
        if len(args) < 2:  # urlopen(url, data=None, timeout=...): no timeout given
            kwargs.setdefault("timeout", timeout)
        return unbounded(url, *args, **kwargs)

    prism_runner.urlopen = urlopen
    try:
        yield
    finally:
        prism_runner.urlopen = unbounded


def ran_on(options, result: Any) -> str:
    """The runner that actually ran the pipeline, from the type of its result: DirectRunner's
    choice (PrismRunner, or FnApiRunner / BundleBasedDirectRunner after falling back) is told
    apart, and so is the runner behind a PortableRunner's job service (Flink, Spark, Prism:
    `behind_job_service`); other runners are named as asked."""
    asked = runner_name(options)
    module = type(result).__module__
    kind = type(result).__name__
    if module.endswith("fn_api_runner.fn_runner") and kind == "RunnerResult":
        return "FnApiRunner"
    if kind == "DirectPipelineResult":
        return "BundleBasedDirectRunner"
    if module.endswith("portability.portable_runner") and asked in _PRISM_LAUNCHERS:
        return "PrismRunner"
    if module.endswith("portability.portable_runner") and asked == "PortableRunner":
        return behind_job_service(result) or asked
    return asked


#: a job service's runner, by the option names it describes (Beam's Java job servers list their
#: runner's PipelineOptions: FlinkPipelineOptions' flink_master, SparkPipelineOptions' spark_master)
_SERVICE_OPTION_PREFIXES = (("flink_", "FlinkRunner"), ("spark_", "SparkRunner"), ("prism_", "PrismRunner"))


def behind_job_service(result: Any, timeout: float = 10.0) -> Optional[str]:
    """The runner behind a PortableRunner job's job service (FlinkRunner, SparkRunner, PrismRunner),
    from the pipeline options it describes (DescribePipelineOptions, which Beam's PortableRunner
    also asks before it submits); None when the service does not say or cannot be asked."""
    service = getattr(result, "_job_service", None)
    if service is None:
        return None
    try:
        from apache_beam.portability.api import beam_job_api_pb2

        reply = service.DescribePipelineOptions(beam_job_api_pb2.DescribePipelineOptionsRequest(), timeout=timeout)
        names = [option.name for option in reply.options]
    except Exception:  # noqa: BLE001 - the summary then names the runner asked for
        return None
    for prefix, runner in _SERVICE_OPTION_PREFIXES:
        if any(name.startswith(prefix) for name in names):
            return runner
    return None


def describe(options, result: Optional[Any]) -> dict:
    """Summary fields: `runner` (what ran) and, when Beam chose another, `runner_requested`."""
    asked = runner_name(options)
    actual = ran_on(options, result) if result is not None else asked
    out = {"runner": actual}
    if actual != asked:
        out["runner_requested"] = asked
    return out


def rpc_error_line(exc: BaseException) -> Optional[str]:
    """One line for a gRPC error in `exc`'s chain (a job service that died or cannot be reached
    mid-job: Prism, a Flink job server), whose own text is a multi-line dump ending in '>'."""
    import grpc

    seen: Optional[BaseException] = exc
    while seen is not None:
        if isinstance(seen, grpc.RpcError) and callable(getattr(seen, "code", None)):
            code = seen.code()
            details = seen.details() if callable(getattr(seen, "details", None)) else ""
            name = getattr(code, "name", str(code))
            return f"the job service stopped answering (gRPC {name}: {details}); is it still running?"
        seen = seen.__cause__ or seen.__context__
    return None


#: how long a job waits for its --job_endpoint to accept a connection (env TFRECORD_BEAM_ENDPOINT_WAIT)
ENDPOINT_WAIT_S = 20.0


def unreachable_job_endpoint(options, wait_s: Optional[float] = None) -> Optional[str]:
    """A one-line reason when the options name a job service (--job_endpoint HOST:PORT) that
    accepts no TCP connection within `wait_s` seconds, else None. Beam itself waits
    --job_server_timeout (300 s by default) for a service that is not there, then fails with
    a gRPC timeout that names no endpoint."""
    import socket
    import time

    from apache_beam.options.pipeline_options import PortableOptions

    endpoint = options.view_as(PortableOptions).job_endpoint
    if not endpoint or endpoint == "embed":
        return None
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        return f"--job_endpoint={endpoint}: expected HOST:PORT"
    host = host.strip("[]") or "localhost"
    if wait_s is None:
        wait_s = float(os.environ.get("TFRECORD_BEAM_ENDPOINT_WAIT", ENDPOINT_WAIT_S))
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, max(wait_s, 0.1))):
                return None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
        if time.monotonic() >= deadline:
            return (
                f"no job service at --job_endpoint={endpoint} ({reason}, waited {wait_s:.0f} s): "
                "start the runner (make runners) or fix the flag"
            )
        time.sleep(0.5)
