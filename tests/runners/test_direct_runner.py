"""`--runner=DirectRunner` with no other flag, where Beam finds Prism in its own cache: what a
user online gets after Beam's first download (issue 21 item 2). Beam looks for
~/.apache_beam/cache/prism/bin/apache_beam-v<VERSION>-prism-<os>-<arch>.zip before it
downloads; the test puts the binary that `runners/prism.sh build` made there, zipped as Beam's
release is, under a HOME in tmp, with every download refused (a proxy on a closed local port):
the job must run on Prism, not fall back."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import zipfile
from collections import Counter

from helpers import runner_matrix as rm
from helpers.jobs import read_shards, write_files


def _beam_release_name() -> str:
    import apache_beam

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine().lower(), platform.machine().lower())
    return f"apache_beam-v{apache_beam.__version__}-prism-{platform.system().lower()}-{arch}"


def test_direct_runner_runs_on_prism_found_in_beams_cache(tmp_path):
    state = rm.STATE / "direct-prism.env"
    assert state.exists(), f"no {state}: run `make runners` first"
    binary = rm.read_state(state)["PRISM_BIN"]
    home = tmp_path / "home"
    cache = home / ".apache_beam" / "cache" / "prism" / "bin"
    cache.mkdir(parents=True)
    name = _beam_release_name()
    with zipfile.ZipFile(cache / f"{name}.zip", "w") as archive:  # the layout of Beam's release zip
        archive.write(binary, name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    # no no_proxy: the job itself keeps gRPC to the local Prism off the proxy
    env.update(HOME=str(home), https_proxy=closed, http_proxy=closed)
    env.update(PYTHONPATH=str(rm.ROOT))
    data = write_files(tmp_path / "in", "a", [120, 80])
    cmd = [sys.executable, "-m", "pipelines.reshard", "--input", str(tmp_path / "in"), "--num_shards", "2"]
    cmd += ["--output_prefix", str(tmp_path / "out" / "p"), "--runner=DirectRunner", "--verbose"]
    proc = subprocess.run(cmd, cwd=rm.ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run = rm.JobRun(proc.returncode, proc.stdout, proc.stderr, 0.0)
    assert (run.summary()["runner"], run.summary()["runner_requested"]) == ("PrismRunner", "DirectRunner")
    assert "Downloading prism" not in proc.stderr and "Falling back" not in proc.stderr
    assert Counter(p for s in read_shards(tmp_path / "out", "p-*.tfrecord") for p in s) == Counter(data)
