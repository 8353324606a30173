#!/usr/bin/env bash
# runners/s3.sh build|start|stop|flags|status|binary
#
# An S3-protocol server on loopback for the share-nothing runner tests (issue 21, item 5):
# versitygw (Apache-2.0) with its posix backend, built from source through the Go module
# proxy into ${TFRB_CACHE:-$HOME/.cache/tfrecord_beam}, its data under .runners/s3/.
# `start` returns once the server answers and writes .runners/state/s3.env with
# S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION, PYTHON and FLAGS (Beam's s3 flags).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${TFRB_CACHE:-$HOME/.cache/tfrecord_beam}
VERSION=${TFRB_VERSITYGW_VERSION:-v1.8.0}
BIN_DIR=$CACHE/versitygw-$VERSION
BIN=$BIN_DIR/versitygw
HOST=127.0.0.1
PORT=${TFRB_S3_PORT:-9300}
ACCESS_KEY=${TFRB_S3_ACCESS_KEY:-tfrbaccess}
SECRET_KEY=${TFRB_S3_SECRET_KEY:-tfrbsecretkey0123456789}
REGION=us-east-1
STATE_DIR=$ROOT/.runners/state
LOG_DIR=$ROOT/.runners/logs
DATA_DIR=${TFRB_S3_DATA:-$ROOT/.runners/s3}
STATE=$STATE_DIR/s3.env
PID_FILE=$STATE_DIR/s3.pid
LOG=$LOG_DIR/s3.log
# The interpreter that launches jobs (as runners/lib.sh's tfrb_python): $TFRB_PYTHON, else the
# checkout's .venv, else python3. The S3 server needs none; jobs using it read PYTHON.
if [ -n "${TFRB_PYTHON:-}" ]; then
    PYTHON=$TFRB_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PYTHON=$ROOT/.venv/bin/python
else
    PYTHON=$(command -v python3)
fi

log() { echo "s3: $*" >&2; }

build() {
    if [ -x "$BIN" ]; then
        log "cached: $BIN"
        return 0
    fi
    command -v go >/dev/null || { log "go is not installed (needed to build versitygw)"; exit 1; }
    mkdir -p "$BIN_DIR"
    log "building versitygw $VERSION through the Go module proxy (minutes when cold)"
    local t0=$SECONDS
    GOBIN=$BIN_DIR CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@$VERSION"
    log "built $BIN in $((SECONDS - t0)) s"
}

running_pid() {
    [ -f "$PID_FILE" ] || return 1
    local pid
    pid=$(cat "$PID_FILE")
    kill -0 "$pid" 2>/dev/null || return 1
    # A recycled pid is not our server: check the command line names the binary.
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q versitygw || return 1
    echo "$pid"
}

answers() {
    # Any HTTP answer (versitygw says 403 to an unsigned request) means it is serving.
    curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$HOST:$PORT/" | grep -qv '^000$'
}

accepts_keys() {
    # A SigV4-signed ListBuckets with our keys (curl >= 7.75): 200 means our kind of server.
    local empty_sha=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    curl -s -o /dev/null -m 5 -w '%{http_code}' --aws-sigv4 "aws:amz:$REGION:s3" \
        --user "$ACCESS_KEY:$SECRET_KEY" -H "x-amz-content-sha256: $empty_sha" \
        "http://$HOST:$PORT/" | grep -q '^200$'
}

flags_line() {
    echo "--s3_endpoint_url=http://$HOST:$PORT --s3_access_key_id=$ACCESS_KEY" \
        "--s3_secret_access_key=$SECRET_KEY --s3_region_name=$REGION"
}

write_state() {
    mkdir -p "$STATE_DIR"
    local tmp=$STATE.tmp.$$
    {
        echo "S3_ENDPOINT=http://$HOST:$PORT"
        echo "S3_ACCESS_KEY=$ACCESS_KEY"
        echo "S3_SECRET_KEY=$SECRET_KEY"
        echo "S3_REGION=$REGION"
        echo "S3_DATA=$DATA_DIR"
        echo "PYTHON=$PYTHON"
        echo "FLAGS=\"$(flags_line)\""
    } >"$tmp"
    mv "$tmp" "$STATE"
}

start() {
    build
    mkdir -p "$STATE_DIR" "$LOG_DIR" "$DATA_DIR/buckets" "$DATA_DIR/meta"
    if pid=$(running_pid); then
        log "already running (pid $pid) on $HOST:$PORT"
        write_state
        return 0
    fi
    if answers; then
        # Another checkout's server (same port and keys, on a shared machine) serves as well:
        # use it, and leave it running on `stop` (it is not ours).
        if accepts_keys; then
            log "a server of another checkout answers on $HOST:$PORT with these keys: using it"
            write_state
            return 0
        fi
        log "port $PORT is taken by another process; set TFRB_S3_PORT"
        exit 1
    fi
    # --sidecar keeps object metadata in files, so the data dir needs no xattr support.
    ROOT_ACCESS_KEY=$ACCESS_KEY ROOT_SECRET_KEY=$SECRET_KEY \
        setsid "$BIN" --port "$HOST:$PORT" --region "$REGION" \
        posix --sidecar "$DATA_DIR/meta" "$DATA_DIR/buckets" \
        >"$LOG" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    for _ in $(seq 1 100); do
        if answers; then
            write_state
            log "serving on http://$HOST:$PORT (pid $(cat "$PID_FILE"), data $DATA_DIR)"
            return 0
        fi
        if ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
            log "versitygw exited; last lines of $LOG:"
            tail -20 "$LOG" >&2
            rm -f "$PID_FILE"
            exit 1
        fi
        sleep 0.1
    done
    log "versitygw did not answer on $HOST:$PORT within 10 s; see $LOG"
    stop
    exit 1
}

stop() {
    if pid=$(running_pid); then
        kill "$pid"
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        log "stopped (pid $pid)"
    fi
    rm -f "$PID_FILE" "$STATE"
}

case "${1:-}" in
    build) build ;;
    start) start ;;
    stop) stop ;;
    flags) flags_line ;;
    binary) echo "$BIN" ;;
    status)
        if pid=$(running_pid) && answers; then
            echo "s3: running (pid $pid) on http://$HOST:$PORT"
        else
            echo "s3: not running"
            exit 1
        fi
        ;;
    *)
        echo "usage: $0 build|start|stop|flags|status|binary" >&2
        exit 2
        ;;
esac
