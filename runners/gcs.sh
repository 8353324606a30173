#!/usr/bin/env bash
# runners/gcs.sh build|start|stop|flags|status|binary
#
# A GCS-protocol server on loopback for the gs:// tests: fake-gcs-server (BSD-2-Clause), built
# from source through the Go module proxy into ${TFRB_CACHE:-$HOME/.cache/tfrecord_beam}, with
# its filesystem backend under .runners/gcs/. `start` returns once the server answers and writes
# .runners/state/gcs.env with GCS_ENDPOINT, GCS_DATA, PYTHON and FLAGS (empty: Beam's GCS
# filesystem takes the endpoint from STORAGE_EMULATOR_HOST, which the state also holds).
# Pid, start time and log as every service of runners/ (lib.sh). Not a runner column: the
# tests start their own server from the cached binary (tests/helpers/gcsserver.py) unless this
# one runs.
# Its batch endpoint skips parts without a Content-ID header, which google-cloud-storage never
# sends: Beam's deletes and renames on gs:// (a job's commit) fail against it unless the batch
# requests are mended on the way (the tests' proxy does: tests/helpers/gcsserver.py).
# Environment: TFRB_CACHE, TFRB_FAKE_GCS_VERSION (v1.56.1), TFRB_GCS_PORT (9310),
# TFRB_GCS_DATA (.runners/gcs).
source "$(dirname "$0")/lib.sh"

VERSION=${TFRB_FAKE_GCS_VERSION:-v1.56.1}
BIN_DIR=$TFRB_CACHE/fake-gcs-server-$VERSION
BIN=$BIN_DIR/fake-gcs-server
HOST=127.0.0.1
PORT=${TFRB_GCS_PORT:-9310}
DATA_DIR=${TFRB_GCS_DATA:-$TFRB_ROOT/.runners/gcs}
LOG=$TFRB_LOGS/gcs.log

build() {
    # -mod=mod: the module's go.mod is taken as published (it is built from the proxy, not a checkout)
    GOFLAGS=-mod=mod go_install_cached gcs "$BIN" "github.com/fsouza/fake-gcs-server@$VERSION"
}

answers() {
    # fake-gcs-server lists its buckets without credentials: a 200 means our kind of server
    curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$HOST:$PORT/storage/v1/b" | grep -q '^200$'
}

flags_line() {
    # Beam's GCS filesystem has no endpoint flag: google-cloud-storage reads STORAGE_EMULATOR_HOST
    echo ""
}

write_gcs_state() {
    write_state gcs GCS_ENDPOINT="http://$HOST:$PORT" STORAGE_EMULATOR_HOST="http://$HOST:$PORT" \
        GCS_DATA="$DATA_DIR" PYTHON="$(tfrb_python)" FLAGS="$(flags_line)"
}

start() {
    TFRB_QUIET_CACHED=1 build # `make runners` ran build just before: said once
    mkdir -p "$DATA_DIR"
    local pid
    if pid=$(running_pid gcs); then
        say "gcs: already running (pid $pid) on $HOST:$PORT"
        write_gcs_state
        return 0
    fi
    if answers; then
        say "gcs: a fake-gcs-server of another checkout answers on $HOST:$PORT: using it"
        write_gcs_state
        return 0
    fi
    port_free_or_die gcs "$HOST" "$PORT"
    start_bg gcs "$LOG" "$BIN" -scheme http -host "$HOST" -port "$PORT" \
        -public-host "$HOST:$PORT" -external-url "http://$HOST:$PORT" \
        -backend filesystem -filesystem-root "$DATA_DIR" -log-level warn
    wait_for_port gcs "$HOST" "$PORT" 30 "$LOG" || {
        stop_pid gcs
        die "gcs: fake-gcs-server did not serve on $HOST:$PORT"
    }
    local tries=0
    until answers; do
        ((++tries < 100)) || { stop_pid gcs; die "gcs: $HOST:$PORT accepts connections but does not answer as GCS"; }
        sleep 0.1
    done
    write_gcs_state
    say "gcs: serving on http://$HOST:$PORT (pid $(running_pid gcs), data $DATA_DIR)"
}

stop() {
    stop_pid gcs 5
    rm -f "$TFRB_STATE/gcs.env"
}

service_main gcs "$@"
