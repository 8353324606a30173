#!/usr/bin/env bash
# Install what `make dist` built as a user would, and run the demo from it:
#   - the wheel (compiled core inside), without a C compiler: the demo must report the native engine;
#   - the sdist without a C compiler: the build cannot compile the core, falls back, says so, and
#     the demo reports the pure engine;
#   - the sdist where a C compiler is on PATH (a Dataflow worker given the sdist, Beam's container
#     has one): the build compiles the core and the demo reports the native engine.
# Each in a fresh venv. To stay quick, the dependencies (numpy, Beam,
# torch...) are not installed again: a .pth makes the main venv's packages visible after the
# new venv's own (pip installs the package itself with --no-deps), and pip's cache is reused.
# usage: PYTHON=.venv/bin/python .ci/check_dist.sh DIST_DIR
set -euo pipefail
dist=$(cd "${1:?usage: check_dist.sh DIST_DIR}" && pwd)
python=${PYTHON:-python3}
deps=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
work=$(mktemp -d "${TMPDIR:-/tmp}/tfrb-dist-XXXXXX")
trap 'rm -rf "$work"' EXIT
base=$("$python" -c 'import sys; print(sys.base_prefix)')/bin/python3

wheel=$(ls "$dist"/tfrecord_beam-*.whl)
sdist=$(ls "$dist"/tfrecord_beam-*.tar.gz)

check() { # NAME ARTIFACT ENGINE [cc: a C compiler on PATH]
    local name=$1 artifact=$2 engine=$3 compiler=${4:-} venv="$work/$1"
    "$base" -m venv --without-pip "$venv" # pip, setuptools and numpy: the main venv's, through the .pth
    echo "$deps" > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/zz_deps.pth"
    # no compiler: PATH holds only the venv's own bin (python, pip); CC/CXX unset. With one: the
    # directory of the system's cc after it
    local path="$venv/bin"
    if [ -n "$compiler" ]; then
        path="$path:$(dirname "$(command -v cc)")"
    fi
    local env=(env -i HOME="$HOME" PATH="$path" TMPDIR="$work" PIP_DISABLE_PIP_VERSION_CHECK=1)
    if [ -z "$compiler" ] && "${env[@]}" /bin/sh -c 'command -v cc || command -v gcc || command -v clang' > /dev/null 2>&1; then
        echo "check_dist: a C compiler is still on PATH" >&2
        exit 1
    fi
    # --no-build-isolation: the sdist's build uses setuptools and numpy as the .pth provides them
    "${env[@]}" "$venv/bin/python" -m pip install -v --no-deps --no-build-isolation "$artifact" > "$work/$name-pip.log" 2>&1 || {
        tail -30 "$work/$name-pip.log" >&2
        exit 1
    }
    if [ "$engine" = pure ] && ! grep -q "compiled core was not built" "$work/$name-pip.log"; then
        echo "check_dist: the $name install did not say that the compiled core was not built" >&2
        exit 1
    fi
    (cd "$work" && "${env[@]}" "$venv/bin/python" -m pipelines.demo --rows 2000 --workdir "$work/$name-demo") > "$work/$name-demo.log" 2>&1 || {
        tail -30 "$work/$name-demo.log" >&2
        exit 1
    }
    local where
    where=$(cd "$work" && "${env[@]}" "$venv/bin/python" -c 'import tfrecord_beam; print(tfrecord_beam.__file__)')
    case "$where" in
    "$venv"/*) ;;
    *)
        echo "check_dist: $name imported tfrecord_beam from $where, not from its venv" >&2
        exit 1
        ;;
    esac
    if ! grep -q "engine $engine" "$work/$name-demo.log"; then
        echo "check_dist: the demo from the $name does not report the $engine engine:" >&2
        head -5 "$work/$name-demo.log" >&2
        exit 1
    fi
    echo "check_dist: $name ($(basename "$artifact")): installed $([ -n "$compiler" ] && echo "with" || echo "without") a compiler, demo ok, $(grep -m1 '^demo: tfrecord_beam' "$work/$name-demo.log")"
}

check wheel "$wheel" native
check sdist "$sdist" pure
check sdist-cc "$sdist" native cc
