#!/usr/bin/env bash
# runners/s3.sh build|start|stop|flags|status|binary
#
# An S3-protocol server on loopback for the share-nothing runner tests (issue 21, item 5):
# versitygw (Apache-2.0) with its posix backend, built from source through the Go module
# proxy into ${TFRB_CACHE:-$HOME/.cache/tfrecord_beam}, its data under .runners/s3/.
# `start` returns once the server answers and writes .runners/state/s3.env with
# S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION, S3_DATA, PYTHON and FLAGS (Beam's s3
# flags). Pid, start time and log as every service of runners/ (lib.sh).
# Environment: TFRB_CACHE, TFRB_VERSITYGW_VERSION (v1.8.0), TFRB_S3_PORT (9300),
# TFRB_S3_ACCESS_KEY, TFRB_S3_SECRET_KEY, TFRB_S3_DATA (.runners/s3).
source "$(dirname "$0")/lib.sh"

VERSION=${TFRB_VERSITYGW_VERSION:-v1.8.0}
BIN_DIR=$TFRB_CACHE/versitygw-$VERSION
BIN=$BIN_DIR/versitygw
HOST=127.0.0.1
PORT=${TFRB_S3_PORT:-9300}
ACCESS_KEY=${TFRB_S3_ACCESS_KEY:-tfrbaccess}
SECRET_KEY=${TFRB_S3_SECRET_KEY:-tfrbsecretkey0123456789}
REGION=us-east-1
DATA_DIR=${TFRB_S3_DATA:-$TFRB_ROOT/.runners/s3}
LOG=$TFRB_LOGS/s3.log

build() {
    go_install_cached s3 "$BIN" "github.com/versity/versitygw/cmd/versitygw@$VERSION"
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

write_s3_state() {
    write_state s3 S3_ENDPOINT="http://$HOST:$PORT" S3_ACCESS_KEY="$ACCESS_KEY" S3_SECRET_KEY="$SECRET_KEY" \
        S3_REGION="$REGION" S3_DATA="$DATA_DIR" PYTHON="$(tfrb_python)" FLAGS="$(flags_line)"
}

start() {
    TFRB_QUIET_CACHED=1 build # `make runners` ran build just before: said once
    mkdir -p "$DATA_DIR/buckets" "$DATA_DIR/meta"
    local pid
    if pid=$(running_pid s3); then
        say "s3: already running (pid $pid) on $HOST:$PORT"
        write_s3_state
        return 0
    fi
    if answers; then
        # Another checkout's server (same port and keys, on a shared machine) serves as well:
        # use it, and leave it running on `stop` (it is not ours).
        accepts_keys || die "s3: port $PORT is taken by another process; set TFRB_S3_PORT"
        say "s3: a server of another checkout answers on $HOST:$PORT with these keys: using it"
        write_s3_state
        return 0
    fi
    # something that takes connections but answers no HTTP (in 2 s) holds the port: say so now,
    # not after versitygw failed to bind and the wait for its answer ran out (minutes)
    port_free_or_die s3 "$HOST" "$PORT"
    # --sidecar keeps object metadata in files, so the data dir needs no xattr support.
    start_bg s3 "$LOG" env ROOT_ACCESS_KEY="$ACCESS_KEY" ROOT_SECRET_KEY="$SECRET_KEY" \
        "$BIN" --port "$HOST:$PORT" --region "$REGION" posix --sidecar "$DATA_DIR/meta" "$DATA_DIR/buckets"
    wait_for_port s3 "$HOST" "$PORT" 30 "$LOG" || {
        stop_pid s3
        die "s3: versitygw did not serve on $HOST:$PORT"
    }
    local tries=0
    until answers; do
        ((++tries < 100)) || { stop_pid s3; die "s3: $HOST:$PORT accepts connections but answers no HTTP"; }
        sleep 0.1
    done
    write_s3_state
    say "s3: serving on http://$HOST:$PORT (pid $(running_pid s3), data $DATA_DIR)"
}

stop() {
    stop_pid s3 5
    rm -f "$TFRB_STATE/s3.env"
}

service_main s3 "$@"
