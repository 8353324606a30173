#!/usr/bin/env bash
# One Python SDK worker, as a cluster machine would run it: started with Beam's container
# arguments (--id, --provision_endpoint, --control_endpoint, ...) by a Flink TaskManager (the
# PROCESS environment) or by a worker pool (worker_pool_main --container_executable). It runs in
# mount and pid namespaces of its own with a private tmpfs on /tmp and /dev/shm, this checkout's
# .runners/ (state, logs) and the folders in $TFRB_HIDE (colon-separated, e.g. the S3 server's
# data) hidden, and a clean environment: no worker sees the launcher's or another worker's
# files, shared memory, processes or variables. runners/sdk_boot.py then fetches the pipeline
# options and starts Beam's sdk_worker_main. The interpreter: $TFRB_WORKER_PYTHON, else `python`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
py=${TFRB_WORKER_PYTHON:-$(command -v python)}
hide=${TFRB_HIDE:+$TFRB_HIDE:}$root/.runners
# The checkout is bind-mounted at /run/tfrb-code before /tmp is covered, so workers still import
# this code when the checkout itself lies under /tmp (a CI clone may).
exec unshare --mount --pid --fork --mount-proc --kill-child \
    env -i PATH="$(dirname "$py"):/usr/bin:/bin" HOME=/tmp LANG=C.UTF-8 \
    bash -c '
        set -e
        code=/run/tfrb-code
        mkdir -p "$code"
        mount --bind "$2" "$code"
        mount -t tmpfs -o size=2g,mode=1777 tmpfs /tmp
        mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
        IFS=: read -ra dirs <<<"$1"
        for dir in "${dirs[@]}" "$code/.runners"; do
            [[ -d $dir ]] && mount -t tmpfs -o size=1m,mode=0755 tmpfs "$dir"
        done
        cd /tmp
        shift 2
        export PYTHONPATH=$code
        exec "$0" "$code/runners/sdk_boot.py" "$@"
    ' "$py" "$hide" "$root" "$@"
