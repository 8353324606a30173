#!/usr/bin/env bash
# The container executable of the EXTERNAL worker pools (runners/portable.sh): worker_pool_main
# runs it once per SDK worker with --id, --provision_endpoint, --control_endpoint, ... It starts
# the worker in mount and pid namespaces of its own, with a private tmpfs on /tmp and /dev/shm:
# no worker sees another's files, shared memory or processes (the other TaskManager's worker, the
# next job's), as on a cluster of separate machines. runners/sdk_boot.py then fetches the
# pipeline options and starts Beam's sdk_worker_main. `python` is the pool's (the pinned venv).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec unshare --mount --pid --fork --mount-proc --kill-child bash -c '
    set -e
    mount -t tmpfs -o size=2g,mode=1777 tmpfs /tmp
    mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
    cd /tmp
    exec python "$0" "$@"
' "$here/sdk_boot.py" "$@"
