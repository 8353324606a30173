#!/usr/bin/env bash
# scripts/install_torch.sh PYTHON PIN [demo|install]: installs the torch build this machine needs
# into PYTHON's environment (`make demo`, `make install`), saying which and what it costs first.
#
# pip alone installs PyPI's default build of the PIN, which on Linux x86_64 is a CUDA build: ~5 GB installed
# (torch, nvidia-*, triton), minutes with no output, on a machine with no
# GPU. So, unless told otherwise:
#   - a GPU (nvidia-smi lists one, or /proc/driver/nvidia/version exists): PyPI's default build;
#   - no GPU, PyTorch's CPU index answers (one request, at most TORCH_PROBE_TIMEOUT s, default 5):
#     the CPU build from it (~200 MB);
#   - no GPU, no CPU index (only PyPI reachable): PyPI's CUDA build is the only one to be had.
#     `make install` (the tests need torch) says so and installs it; `make demo` says so and
#     installs nothing: the demo runs without torch (its PyTorch step is skipped, and says so).
# The choice, by make variables (exported by the Makefile):
#   TORCH_INDEX=URL   install PIN from that index, nothing probed (e.g. the CPU index)
#   TORCH=pypi        PyPI's default build, whatever the machine (the CUDA build on Linux x86_64)
#   TORCH=0           no torch (demo only: the tests need it)
#   TORCH=auto        the default, above
# Never a bare `torch`: always PIN (the Makefile's TORCH_PIN). Exit 0 when torch is installed
# or (demo) knowingly left out; 1 on a failed install; 2 on a bad setting.
# Testing: TFRB_TORCH_DRY_RUN=1 prints the pip command instead of running it; TFRB_NVIDIA_PROC
# replaces /proc/driver/nvidia/version.
set -euo pipefail

PY=${1:?usage: install_torch.sh PYTHON PIN [demo|install]}
PIN=${2:?usage: install_torch.sh PYTHON PIN [demo|install]}
PURPOSE=${3:-install}
CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
MODE=${TORCH:-auto}
NVIDIA_PROC=${TFRB_NVIDIA_PROC:-/proc/driver/nvidia/version}
PROBE_TIMEOUT=${TORCH_PROBE_TIMEOUT:-5}

say() { echo "torch: $*" >&2; }

pip_install() {
    local what=$1
    shift
    say "installing $what: pip install $*"
    if [[ -n ${TFRB_TORCH_DRY_RUN:-} ]]; then
        echo "DRY RUN: $PY -m pip install -q $*"
        return 0
    fi
    local t0=$SECONDS
    "$PY" -m pip install -q "$@" || { say "pip install $* failed"; exit 1; }
    say "installed $what in $((SECONDS - t0)) s"
}

has_gpu() {
    [[ -e $NVIDIA_PROC ]] && return 0
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && return 0
    return 1
}

# whether the CPU index answers for torch (HTTP 200 on its torch page) within PROBE_TIMEOUT s
cpu_index_reachable() {
    "$PY" - "$CPU_INDEX" "$PROBE_TIMEOUT" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
url, timeout = sys.argv[1].rstrip("/") + "/torch/", float(sys.argv[2])
with urllib.request.urlopen(url, timeout=timeout) as reply:
    sys.exit(0 if reply.status == 200 else 1)
EOF
}

installed() {
    "$PY" - "$PIN" <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
want = sys.argv[1].split("==", 1)[1] if "==" in sys.argv[1] else None
have = m.version("torch")
sys.exit(0 if want is None or have.split("+")[0] == want else 1)
EOF
}

case $PURPOSE in demo | install) ;; *) say "unknown purpose '$PURPOSE' (demo or install)"; exit 2 ;; esac

if installed; then
    say "$("$PY" -c 'import importlib.metadata as m; print("torch", m.version("torch"))') is installed: kept"
    exit 0
fi
if [[ -n ${TORCH_INDEX:-} ]]; then
    pip_install "$PIN from $TORCH_INDEX (TORCH_INDEX)" "$PIN" --index-url "$TORCH_INDEX"
    exit 0
fi
case $MODE in
0 | no | none)
    if [[ $PURPOSE == install ]]; then
        say "TORCH=$MODE: the tests need torch; install it (TORCH=auto, TORCH=pypi or TORCH_INDEX=URL)"
        exit 2
    fi
    say "TORCH=$MODE: no torch; the demo skips its PyTorch step"
    exit 0
    ;;
pypi)
    pip_install "PyPI's default build of $PIN (TORCH=pypi; on Linux x86_64 a CUDA build: ~5 GB installed, minutes)" "$PIN"
    exit 0
    ;;
auto) ;;
*)
    say "unknown TORCH=$MODE (auto, pypi, 0; or TORCH_INDEX=URL)"
    exit 2
    ;;
esac

if has_gpu; then
    pip_install "PyPI's default build of $PIN (a GPU is here; on Linux x86_64 a CUDA build: ~5 GB installed, minutes)" "$PIN"
    exit 0
fi
say "no GPU here (no nvidia-smi GPU, no $NVIDIA_PROC); probing PyTorch's CPU index $CPU_INDEX (${PROBE_TIMEOUT} s at most)"
if cpu_index_reachable; then
    pip_install "the CPU build of $PIN from $CPU_INDEX (~200 MB)" "$PIN" --index-url "$CPU_INDEX"
    exit 0
fi
say "PyTorch's CPU index does not answer here: the only torch to be had is PyPI's default build,"
say "  on Linux x86_64 a CUDA build of ~5 GB installed (nvidia-* 2.7 GB, triton 0.7 GB, torch), ~3 minutes to install with no output from pip."
if [[ $PURPOSE == demo ]]; then
    say "  The demo runs without it (its PyTorch step is skipped). To choose instead:"
    say "    make demo TORCH=pypi              install PyPI's CUDA build anyway"
    say "    make demo TORCH_INDEX=URL         install $PIN from an index you can reach (a mirror of $CPU_INDEX)"
    say "    make demo TORCH=0                 no torch, without this probe"
    exit 0
fi
say "  The tests need torch, so it is installed now (TORCH_INDEX=URL installs it from another index)."
pip_install "PyPI's default build of $PIN" "$PIN"
