# Shared helpers of the runner scripts (runners/NAME.sh build|start|stop|flags). Source it.
#
# Cache (binaries, jars, wheels, venvs), shared by every checkout on the machine:
#   ${TFRB_CACHE:-$HOME/.cache/tfrecord_beam}
# Per-checkout state and logs (git-ignored), at the repository root:
#   .runners/state/NAME.env   KEY=VALUE lines: FLAGS="..." (job flags), PYTHON=... (the interpreter
#                             that launches jobs for that runner), optional S3_* for the job's data
#   .runners/state/NAME.pid*  pids of what the script started (NAME.starttime: when, to tell a
#                             stale pid file from a live one; written first, each file by temp +
#                             mv, so a pid file never stands without its start time; a pid file
#                             without one, or with another, is stale and never signalled)
#   .runners/logs/NAME*.log   their output
#
# Plugging a runner into the matrix (tests/runners, `make test-runners`): its script declares
# the columns it provides on a line `# runners: NAME...` in its first 40 lines, and `start`
# writes .runners/state/NAME.env for each (write_state NAME FLAGS="..." PYTHON=...). With
# S3_PREFIX=s3://bucket/prefix in that file, the tests keep the job's inputs and outputs there
# instead of a local tmp dir (AWS_* / S3_* variables of the file reach the launcher's env).
# `make runners` runs build, start, then flags of each script (s3, prism, flink, spark).
set -euo pipefail

TFRB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TFRB_CACHE=${TFRB_CACHE:-$HOME/.cache/tfrecord_beam}
TFRB_STATE=$TFRB_ROOT/.runners/state
TFRB_LOGS=$TFRB_ROOT/.runners/logs
mkdir -p "$TFRB_CACHE" "$TFRB_STATE" "$TFRB_LOGS"

# The interpreter that runs jobs: $TFRB_PYTHON, else the checkout's .venv, else python3.
tfrb_python() {
    if [[ -n ${TFRB_PYTHON:-} ]]; then
        echo "$TFRB_PYTHON"
    elif [[ -x $TFRB_ROOT/.venv/bin/python ]]; then
        echo "$TFRB_ROOT/.venv/bin/python"
    else
        command -v python3
    fi
}

# The apache-beam version of an interpreter (default: tfrb_python).
beam_version() {
    "${1:-$(tfrb_python)}" -c 'import importlib.metadata as m, sys; sys.stdout.write(m.version("apache-beam"))' 2>/dev/null
}

# cached_venv DIR PIP-ARGS...: a venv at DIR, made from the base interpreter of tfrb_python,
# with `pip install PIP-ARGS`, once: DIR/.tfrb-ready marks a complete one (a build that failed
# or was interrupted is redone from scratch). Its pip output goes to .runners/logs/NAME-venv.log.
cached_venv() {
    local dir=$1 name
    shift
    name=$(basename "$dir")
    if [[ -f $dir/.tfrb-ready ]]; then
        say "$name: venv cached at $dir"
        return
    fi
    local log=$TFRB_LOGS/$name-venv.log base
    say "$name: pip install $* into $dir (minutes when cold)"
    base=$("$(tfrb_python)" -c 'import sys; print(sys.base_prefix)')/bin/python3
    rm -rf "$dir"
    "$base" -m venv "$dir"
    "$dir/bin/pip" install -q "$@" >"$log" 2>&1 ||
        { log_tail "$log"; die "pip install into $dir failed (log $log)"; }
    touch "$dir/.tfrb-ready"
}

say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { say "error: $*"; exit 1; }

# log_tail FILE [N]: the last N lines of a log, indented, on stderr (after a failure).
log_tail() {
    local file=$1 lines=${2:-40}
    if [[ -s $file ]]; then
        echo "---- last $lines lines of $file ----" >&2
        tail -n "$lines" "$file" | sed 's/^/  /' >&2
        echo "----" >&2
    else
        echo "($file is empty or missing)" >&2
    fi
}

# port_open HOST PORT: whether something accepts TCP connections there, within 2 s. Status 0:
# it accepts; 1: nothing there (refused); 2: no answer in 2 s (a holder that never accepts, its
# accept queue full: bash's /dev/tcp alone waits for the kernel's SYN retries, minutes).
port_open() {
    local rc=0
    timeout -k 1 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null || rc=$?
    case $rc in
        0) return 0 ;;
        124 | 137) return 2 ;;
        *) return 1 ;;
    esac
}

# pid_alive PID
pid_alive() {
    [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null
}

# proc_starttime PID: when PID started (clock ticks after boot, field 22 of /proc/PID/stat);
# fails when there is no such process.
proc_starttime() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    local -a fields
    read -r -a fields <<<"${stat##*) }" # the fields after "(comm)", which may hold spaces
    echo "${fields[19]}"
}

# running_pid NAME: the pid in .runners/state/NAME.pid when that process is alive AND is the one
# start_bg started (its start time is in NAME.starttime): a pid file that outlived its process
# (a crash, a reboot) names whatever process now has that pid, which is never ours to signal.
# Prints nothing and fails otherwise.
# A pid file without its start time (a script killed while writing them, an older checkout's)
# proves nothing: it is stale, never trusted.
running_pid() {
    local name=$1 pid recorded
    pid=$(cat "$TFRB_STATE/$name.pid" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    pid_alive "$pid" || return 1
    recorded=$(cat "$TFRB_STATE/$name.starttime" 2>/dev/null || true)
    [[ $recorded =~ ^[0-9]+$ ]] || return 1
    [[ $(proc_starttime "$pid" || true) == "$recorded" ]] || return 1
    echo "$pid"
}

# write_atomic FILE TEXT: FILE holds TEXT (and a newline) whole or not at all (temp + mv).
write_atomic() {
    local tmp
    tmp=$(mktemp "$1.XXXXXX")
    printf '%s\n' "$2" >"$tmp"
    mv -f "$tmp" "$1"
}

# start_bg NAME LOG CMD...: start CMD in its own session in the background, output to LOG,
# pid to .runners/state/NAME.pid (its start time to NAME.starttime). Fails if NAME is already
# running; a stale pid file is replaced.
start_bg() {
    local name=$1 log=$2
    shift 2
    local pidfile=$TFRB_STATE/$name.pid pid
    if pid=$(running_pid "$name"); then
        die "$name is already running (pid $pid); run its stop first"
    fi
    if [[ -e $pidfile ]]; then
        say "$name: $pidfile names no process of ours (dead, another's, or without its start time): replaced"
    fi
    rm -f "$pidfile" "$TFRB_STATE/$name.starttime"
    : >"$log"
    # fd 8 (service_lock's) is closed for the service: it must not hold its script's lock
    setsid "$@" >>"$log" 2>&1 </dev/null 8>&- &
    pid=$!
    # the start time first, then the pid: a pid file never stands without its start time. A
    # process gone already gets "gone", which matches no process (so it reads as exited).
    write_atomic "$TFRB_STATE/$name.starttime" "$(proc_starttime "$pid" || echo gone)"
    write_atomic "$pidfile" "$pid"
}

# wait_for_port NAME HOST PORT [TIMEOUT_S] [LOG]: until HOST:PORT accepts connections. Fails
# (with the log's tail) when NAME's process dies or after TIMEOUT_S seconds.
wait_for_port() {
    local name=$1 host=$2 port=$3 timeout=${4:-60} log=${5:-}
    local pid deadline=$((SECONDS + timeout))
    pid=$(cat "$TFRB_STATE/$name.pid" 2>/dev/null || true)
    until port_open "$host" "$port"; do
        if [[ -n $pid ]] && ! running_pid "$name" >/dev/null; then
            say "$name (pid $pid) exited before $host:$port accepted connections"
            [[ -n $log ]] && log_tail "$log"
            return 1
        fi
        if ((SECONDS >= deadline)); then
            say "$name: $host:$port not ready after ${timeout}s"
            [[ -n $log ]] && log_tail "$log"
            return 1
        fi
        sleep 0.2
    done
}

# stop_pid NAME [TIMEOUT_S]: SIGTERM the process group started by start_bg as NAME (then
# SIGKILL after TIMEOUT_S), remove its pid file. Quiet when it is not running; a process that
# merely reuses the pid of a stale pid file is left alone.
stop_pid() {
    local name=$1 timeout=${2:-15}
    local pidfile=$TFRB_STATE/$name.pid pid
    if pid=$(running_pid "$name"); then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + timeout))
        while pid_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
        if pid_alive "$pid"; then
            say "$name (pid $pid) ignored SIGTERM for ${timeout}s: SIGKILL"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
        say "$name stopped (pid $pid)"
    else
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid"; then
            if [[ -e $TFRB_STATE/$name.starttime ]]; then
                say "$name: pid $pid of $pidfile is not the one started (a stale pid file): left alone"
            else
                say "$name: pid $pid of $pidfile has no start time, so it cannot be proved ours (a stale pid file): left alone"
            fi
        fi
    fi
    rm -f "$pidfile" "$TFRB_STATE/$name.starttime"
}

# port_free_or_die NAME HOST PORT: starting NAME needs HOST:PORT free.
port_free_or_die() {
    local rc=0
    port_open "$2" "$3" || rc=$?
    case $rc in
        0) die "$1: $2:$3 is already in use (another service, or a $1 started elsewhere); stop it or set another port" ;;
        2) die "$1: $2:$3 does not answer a connection in 2 s (a process holds it and never accepts); stop it or set another port" ;;
    esac
}

# write_state NAME KEY=VALUE...: .runners/state/NAME.env, one KEY=VALUE a line that a shell can
# source: the value in double quotes (KEY="a b"), or %q-quoted when it holds a character double
# quotes would not keep (" $ ` \ !). A recipe reads a value with `. FILE && echo "$KEY"`.
write_state() {
    local name=$1 kv value
    shift
    local file=$TFRB_STATE/$name.env tmp
    tmp=$(mktemp "$file.XXXXXX")
    for kv in "$@"; do
        value=${kv#*=}
        if [[ $value == *[\"\$\`\\\!]* || $value == *$'\n'* ]]; then
            printf '%s=%q\n' "${kv%%=*}" "$value" >>"$tmp"
        else
            printf '%s="%s"\n' "${kv%%=*}" "$value" >>"$tmp"
        fi
    done
    mv "$tmp" "$file"
}

# mask_secrets: stdin to stdout with the value of every --*secret* flag shown as "***" (what
# `make runners` prints; the state files keep the real flags).
mask_secrets() {
    sed -E 's/(--[a-z0-9_]*secret[a-z0-9_]*=)[^ ]+/\1***/g'
}

# state_flags NAME: the FLAGS of NAME's state file, secrets masked (fails when absent).
state_flags() {
    local file=$TFRB_STATE/$1.env
    [[ -f $file ]] || return 1
    (
        # shellcheck disable=SC1090
        source "$file"
        echo "${FLAGS:-}"
    ) | mask_secrets
}

# go_install_cached NAME BIN PACKAGE@VERSION: builds a Go server through the Go module proxy
# into BIN's folder unless BIN is there (the cache). One build at a time: test workers may ask
# together; the others wait on the lock and find it built. Extra go settings come from the
# caller's environment (e.g. GOFLAGS=-mod=mod).
go_install_cached() {
    local name=$1 bin=$2 package=$3 dir
    dir=$(dirname "$bin")
    if [[ -x $bin ]]; then
        [[ -n ${TFRB_QUIET_CACHED:-} ]] || say "$name: cached: $bin"
        return 0
    fi
    command -v go >/dev/null || die "$name: go is not installed (needed to build $package through the Go module proxy)"
    mkdir -p "$dir"
    exec 9>"$dir/.build.lock"
    flock 9
    if [[ -x $bin ]]; then
        exec 9>&-
        say "$name: cached: $bin (built meanwhile)"
        return 0
    fi
    say "$name: building $package through the Go module proxy (minutes when cold)"
    local t0=$SECONDS
    # go install prints nothing for minutes: a line every TFRB_PROGRESS_S (20) seconds says it runs
    GOBIN=$dir CGO_ENABLED=0 go install "$package" &
    local build=$! rc=0 next=$((SECONDS + ${TFRB_PROGRESS_S:-20}))
    while kill -0 "$build" 2>/dev/null; do
        if ((SECONDS >= next)); then
            say "$name: still building ($((SECONDS - t0)) s)"
            next=$((SECONDS + ${TFRB_PROGRESS_S:-20}))
        fi
        sleep 1
    done
    wait "$build" || rc=$?
    ((rc == 0)) || die "$name: go install $package failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
    exec 9>&- # released before a server started by this script could inherit it
    [[ -x $bin ]] || die "$name: go install finished but $bin is missing"
    say "$name: built $bin in $((SECONDS - t0)) s"
}

# service_lock NAME: hold .runners/state/NAME.lock (flock, fd 8) until the script exits, so that
# one start or stop of NAME runs at a time: two `start`s at once both found no server and both
# started one, the pid file naming only the last (its server never bound), and `stop` left the
# other serving. The second waits (up to TFRB_LOCK_WAIT_S, default 600 s) and then finds the
# first one's server running.
service_lock() {
    local name=$1 wait=${TFRB_LOCK_WAIT_S:-600}
    exec 8>"$TFRB_STATE/$name.lock"
    flock -w "$wait" 8 || die "$name: another start or stop of $name held $TFRB_STATE/$name.lock for ${wait}s"
}

# service_main NAME ARGS...: the subcommands of a single-server script (s3.sh, gcs.sh), which
# defines build, start, stop, flags_line and answers, and BIN, HOST and PORT.
service_main() {
    local name=$1 pid
    shift
    case "${1:-}" in
    build) build ;;
    start)
        service_lock "$name"
        start
        ;;
    stop)
        service_lock "$name"
        stop
        ;;
    flags) echo "$name: $(flags_line | mask_secrets)" ;;
    binary) echo "$BIN" ;;
    status)
        if pid=$(running_pid "$name") && answers; then
            echo "$name: running (pid $pid) on http://$HOST:$PORT"
        else
            echo "$name: not running"
            exit 1
        fi
        ;;
    *)
        echo "usage: $0 build|start|stop|flags|status|binary" >&2
        exit 2
        ;;
    esac
}
