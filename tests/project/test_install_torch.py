"""scripts/install_torch.sh (issue 37 item 1): which torch build `make demo` / `make install`
install, said before the download: PyPI's default (CUDA) build only where there is a GPU, or where
it is the only one to be had (then `make install` says so first, and `make demo` installs nothing
and runs without torch); the CPU build where the CPU index answers; TORCH_INDEX forces an index,
TORCH=pypi / TORCH=0 choose. pip is never run here (TFRB_TORCH_DRY_RUN prints its command), and
never with a bare `torch`. Also: the Makefile installs torch before any extra that names it, and
every shell script of the repository parses."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.fixtures import REPO

SCRIPT = REPO / "scripts" / "install_torch.sh"
PIN = "torch==0.0.1"  # never the installed one: the script goes on to choose


@pytest.fixture
def cpu_index():
    """A local stand-in for PyTorch's CPU index: 200 on /torch/."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200 if self.path.rstrip("/").endswith("/whl/cpu/torch") else 404)
            self.end_headers()
            self.wfile.write(b"<html></html>")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


def _closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"  # nothing listens: refused at once


def _run(tmp_path: Path, purpose: str, index: str, gpu: str = "none", **env: str):
    """The script for `purpose` with the CPU index at `index`; gpu: 'none', 'proc' (the
    /proc/driver/nvidia file) or 'smi' (an nvidia-smi on PATH that lists a GPU)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    proc = tmp_path / "nvidia-version"
    if gpu == "proc":
        proc.write_text("NVRM version: test\n")
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + ("echo 'GPU 0: Test (UUID: GPU-0)'\n" if gpu == "smi" else "exit 9\n"))
    smi.chmod(0o755)
    full = {
        **{k: v for k, v in os.environ.items() if k not in ("TORCH", "TORCH_INDEX")},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "TFRB_TORCH_DRY_RUN": "1",
        "TFRB_NVIDIA_PROC": str(proc),
        "TORCH_CPU_INDEX": index,
        "TORCH_PROBE_TIMEOUT": "3",
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), sys.executable, PIN, purpose], env=full, capture_output=True, text=True, timeout=60
    )


def _pip_args(done) -> list:
    return [line.split(" install -q ", 1)[1] for line in done.stdout.splitlines() if line.startswith("DRY RUN:")]


@pytest.mark.parametrize("gpu", ["proc", "smi"])
def test_a_gpu_gets_pypis_default_build_said_first(tmp_path, cpu_index, gpu):
    done = _run(tmp_path, "demo", cpu_index, gpu=gpu)
    assert done.returncode == 0, done.stderr
    assert _pip_args(done) == [PIN]
    assert "a GPU is here" in done.stderr and "5 GB" in done.stderr


@pytest.mark.parametrize("purpose", ["demo", "install"])
def test_no_gpu_and_a_reachable_cpu_index_gets_the_cpu_build(tmp_path, cpu_index, purpose):
    done = _run(tmp_path, purpose, cpu_index)
    assert done.returncode == 0, done.stderr
    assert _pip_args(done) == [f"{PIN} --index-url {cpu_index}"]
    assert "no GPU here" in done.stderr and "the CPU build" in done.stderr


def test_only_pypi_the_demo_says_so_and_installs_nothing(tmp_path):
    done = _run(tmp_path, "demo", _closed_port_url())
    assert done.returncode == 0, done.stderr
    assert _pip_args(done) == []
    for words in ("only torch to be had is PyPI's default build", "5 GB", "make demo TORCH=pypi", "TORCH_INDEX=URL"):
        assert words in done.stderr, done.stderr


def test_only_pypi_make_install_says_so_before_the_download(tmp_path):
    done = _run(tmp_path, "install", _closed_port_url())
    assert done.returncode == 0, done.stderr
    assert _pip_args(done) == [PIN]
    assert "5 GB" in done.stderr and "The tests need torch" in done.stderr


def test_torch_index_and_torch_settings_choose(tmp_path):
    forced = _run(tmp_path, "demo", _closed_port_url(), gpu="proc", TORCH_INDEX="http://mirror.invalid/cpu")
    assert forced.returncode == 0 and _pip_args(forced) == [f"{PIN} --index-url http://mirror.invalid/cpu"]
    assert "probing" not in forced.stderr
    pypi = _run(tmp_path, "demo", _closed_port_url(), TORCH="pypi")
    assert pypi.returncode == 0 and _pip_args(pypi) == [PIN]
    none = _run(tmp_path, "demo", _closed_port_url(), TORCH="0")
    assert none.returncode == 0 and _pip_args(none) == [] and "skips its PyTorch step" in none.stderr
    refused = _run(tmp_path, "install", _closed_port_url(), TORCH="0")
    assert refused.returncode == 2 and _pip_args(refused) == [] and "the tests need torch" in refused.stderr
    bad = _run(tmp_path, "demo", _closed_port_url(), TORCH="cuda")
    assert bad.returncode == 2 and "unknown TORCH=cuda" in bad.stderr


def test_an_installed_torch_of_the_pin_is_kept(tmp_path):
    torch_version = pytest.importorskip("torch").__version__.split("+")[0]
    done = subprocess.run(
        ["bash", str(SCRIPT), sys.executable, f"torch=={torch_version}", "install"],
        env=dict(os.environ, TFRB_TORCH_DRY_RUN="1", TORCH_CPU_INDEX=_closed_port_url()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "is installed: kept" in done.stderr and "DRY RUN" not in done.stdout


def test_the_makefile_installs_torch_by_the_script_before_the_extras():
    """No recipe line pip-installs torch itself, and `install` runs the script before the
    extras that name torch (pip then keeps the torch it finds)."""
    makefile = (REPO / "Makefile").read_text()
    for line in makefile.splitlines():
        if line.startswith("\t") and "pip install" in line.replace("$(PIP)", "pip install"):
            assert "torch" not in line.lower() or "TORCHVISION_PIN" in line, line
    recipe = makefile.split("$(VENV)/.installed: $(VENV)/.demo-installed\n", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("$(INSTALL_TORCH) install") < recipe.index('$(EDITABLE) ".[all')
    demo = makefile.split("\ndemo: ", 1)[1].split("\n\n", 1)[0]
    assert "$(INSTALL_TORCH) demo" in demo
    assert re.search(r'\$\(EDITABLE\) "\.\[beam\]"', makefile), (
        "the demo's venv: the core and Beam, torch by the script"
    )


def test_every_shell_script_parses():
    """`bash -n` on each: .ci/run once carried two comment lines without their '#' (a syntax
    error before anything ran)."""
    scripts = [REPO / ".ci" / "run", *sorted((REPO / ".ci").glob("*.sh"))]
    scripts += sorted((REPO / "runners").glob("*.sh")) + sorted((REPO / "scripts").glob("*.sh"))
    for script in scripts:
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{script.relative_to(REPO)}: {done.stderr}"
