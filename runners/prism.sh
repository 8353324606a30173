#!/usr/bin/env bash
# Prism, Beam's portable runner in Go, built from source through the Go module proxy.
#
#   runners/prism.sh build   go install .../cmd/prism@v<apache-beam of the job interpreter> into
#                            $TFRB_CACHE/prism/v<version>/ (seconds when already there)
#   runners/prism.sh start   Prism's job service on 127.0.0.1:$PRISM_JOB_PORT (8073; web UI on
#                            $PRISM_WEB_PORT, 8074), state in .runners/state/{prism,direct-prism}.env
#   runners/prism.sh stop
#   runners/prism.sh flags   the job flags of each column, one line each
#
# runners: prism direct-prism
# Two columns of the runner matrix come from here (the line above declares them to tests/runners):
#   prism         --runner=PrismRunner --job_endpoint=localhost:8073 (the job service started here;
#                 SDK workers LOOPBACK, in the launching process)
#   direct-prism  --runner=DirectRunner --prism_location=BIN (what a user online gets from
#                 DirectRunner: Beam starts this Prism itself instead of downloading one)
# Environment: TFRB_PYTHON (job interpreter), TFRB_CACHE, PRISM_JOB_PORT, PRISM_WEB_PORT, GOTOOLCHAIN.
source "$(dirname "$0")/lib.sh"

PY=$(tfrb_python)
JOB_PORT=${PRISM_JOB_PORT:-8073}
WEB_PORT=${PRISM_WEB_PORT:-8074}
LOG=$TFRB_LOGS/prism.log
PKG=github.com/apache/beam/sdks/v2/go/cmd/prism

# The version to build (the job interpreter's apache-beam) and where its binary goes. Only build
# and start need it: stop must work where that interpreter is gone (make runners-stop).
resolve_bin() {
    VERSION=$(beam_version "$PY") || die "no apache_beam in $PY (set TFRB_PYTHON or run make install)"
    BIN_DIR=$TFRB_CACHE/prism/v$VERSION
    BIN=$BIN_DIR/prism
}

build() {
    resolve_bin
    if [[ -x $BIN ]] && "$BIN" --help >/dev/null 2>&1; then
        say "prism v$VERSION: cached at $BIN"
        return
    fi
    command -v go >/dev/null || die "Go is needed to build Prism (go install $PKG@v$VERSION)"
    say "prism v$VERSION: go install $PKG@v$VERSION (through the Go module proxy; minutes when cold)"
    mkdir -p "$BIN_DIR"
    local started=$SECONDS
    # -buildvcs=false: the build runs outside any repository; GOBIN: into the cache, not ~/go/bin
    if ! GOBIN=$BIN_DIR GOFLAGS="${GOFLAGS:--buildvcs=false}" go install "$PKG@v$VERSION" >"$TFRB_LOGS/prism-build.log" 2>&1; then
        log_tail "$TFRB_LOGS/prism-build.log"
        die "building Prism failed (log: $TFRB_LOGS/prism-build.log)"
    fi
    say "prism v$VERSION: built in $((SECONDS - started))s at $BIN"
}

write_states() {
    write_state prism FLAGS="--runner=PrismRunner --job_endpoint=localhost:$JOB_PORT" PYTHON="$PY" \
        PRISM_BIN="$BIN" PRISM_WEB="http://localhost:$WEB_PORT"
    write_state direct-prism FLAGS="--runner=DirectRunner --prism_location=$BIN" PYTHON="$PY" PRISM_BIN="$BIN"
}

start() {
    build
    local pid
    if pid=$(running_pid prism) && port_open 127.0.0.1 "$JOB_PORT"; then
        say "prism: already running (pid $pid) on 127.0.0.1:$JOB_PORT"
        write_states
        return
    fi
    port_free_or_die prism 127.0.0.1 "$JOB_PORT"
    port_free_or_die prism 127.0.0.1 "$WEB_PORT"
    start_bg prism "$LOG" "$BIN" --job_port="$JOB_PORT" --web_port="$WEB_PORT" --serve_http=true \
        --log_kind=text --log_level=info
    wait_for_port prism 127.0.0.1 "$JOB_PORT" 60 "$LOG" || { stop_pid prism; exit 1; }
    write_states
    say "prism: job service on 127.0.0.1:$JOB_PORT, web UI http://localhost:$WEB_PORT (log $LOG)"
}

stop() {
    stop_pid prism
    rm -f "$TFRB_STATE/prism.env" "$TFRB_STATE/direct-prism.env"
}

flags() {
    local name
    for name in prism direct-prism; do
        echo "$name: $(state_flags "$name" || die "$name is not started: run runners/prism.sh start (or make runners)")"
    done
}

case ${1:-} in
build | start | stop | flags) "$1" ;;
*) die "usage: $0 build|start|stop|flags" ;;
esac
