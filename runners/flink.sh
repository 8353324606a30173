#!/usr/bin/env bash
# A standalone Flink cluster on loopback and Beam's Flink job server in front of it.
#
#   runners/flink.sh build   the apache-flink wheel (its bundled bin/ and lib/) in its own venv,
#                            the job server's jars (runners/flink-job-server.pom.xml through
#                            Maven) and the venv pinned to the job server's Beam, into $TFRB_CACHE
#   runners/flink.sh start   JobManager (REST 127.0.0.1:8281), two TaskManagers, the job server
#                            (8297 job, 8298 artifacts, 8299 expansion); each TaskManager starts
#                            its Python SDK workers itself (PROCESS environment,
#                            runners/sdk_worker.sh: private mount/pid namespaces). Each part only
#                            when it is not already running (a TaskManager killed by a test comes
#                            back).
#                            Needs the S3 server (runners/s3.sh start): job data lives there.
#   runners/flink.sh stop
#   runners/flink.sh flags   the job flags
#   runners/flink.sh kill-taskmanager N / start   (tests: kill one TaskManager, bring it back)
#
# runners: flink
# Environment: TFRB_CACHE, TFRB_FLINK_VERSION (1.19.3), TFRB_BEAM_JOB_VERSION (2.70.0),
# FLINK_REST_PORT (8281), FLINK_RPC_PORT (6223), FLINK_BLOB_PORT (6224), FLINK_TM_PORT0 (6230:
# TaskManager N uses PORT0+2N-2 for RPC and the next for data), FLINK_JOB_PORT (8297, then
# +1 artifacts, +2 expansion), FLINK_S3_BUCKET (tfrb-flink),
# FLINK_TM_MEMORY (1216m: 384m of it metaspace, which every Beam job adds classes to), FLINK_JM_MEMORY (800m), FLINK_JOB_SERVER_HEAP (384m),
# FLINK_SLOT_TIMEOUT_MS (60000: a job waiting for a slot fails after that).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/portable.sh"

FLINK_VERSION=${TFRB_FLINK_VERSION:-1.19.3}
FLINK_VENV=$TFRB_CACHE/venvs/flink-$FLINK_VERSION
REST_PORT=${FLINK_REST_PORT:-8281}
RPC_PORT=${FLINK_RPC_PORT:-6223}
BLOB_PORT=${FLINK_BLOB_PORT:-6224}
TM_PORT0=${FLINK_TM_PORT0:-6230}
JOB_PORT=${FLINK_JOB_PORT:-8297}
BUCKET=${FLINK_S3_BUCKET:-tfrb-flink}
TASKMANAGERS=2
WORK=$TFRB_ROOT/.runners/flink
CONF=$WORK/conf
POM=$TFRB_ROOT/runners/flink-job-server.pom.xml

flink_home() {
    echo "$FLINK_VENV/lib/python3.11/site-packages/pyflink"
}

build_flink() {
    # --no-deps: only the distribution bundled in the wheels (bin/, lib/, conf/) is used;
    # apache-flink's own Python dependencies (an old apache-beam) are not needed to run a cluster.
    cached_venv "$FLINK_VENV" --no-deps "apache-flink==$FLINK_VERSION" "apache-flink-libraries==$FLINK_VERSION"
    [[ -x $(flink_home)/bin/jobmanager.sh ]] || die "no bin/jobmanager.sh in $(flink_home)"
}

build() {
    build_flink
    build_beam_venv
    JARS=$(build_job_server flink-job-server "$POM")
}

# The cluster's configuration: loopback only, our ports, small memory (2 cores, shared).
write_conf() {
    local home
    home=$(flink_home)
    mkdir -p "$CONF" "$WORK/tmp" "$WORK/artifacts"
    cp "$home"/conf/log4j*.properties "$CONF"/
    {
        grep -E '^ *all: ' "$home/conf/config.yaml" | sed 's/^ *all: /env.java.opts.all: /'
        cat <<EOF
jobmanager.rpc.address: 127.0.0.1
jobmanager.rpc.port: $RPC_PORT
jobmanager.bind-host: 127.0.0.1
jobmanager.memory.process.size: ${FLINK_JM_MEMORY:-800m}
jobmanager.execution.failover-strategy: region
blob.server.port: $BLOB_PORT
rest.address: 127.0.0.1
rest.bind-address: 127.0.0.1
rest.port: $REST_PORT
taskmanager.host: 127.0.0.1
taskmanager.bind-host: 127.0.0.1
taskmanager.numberOfTaskSlots: 1
taskmanager.memory.process.size: ${FLINK_TM_MEMORY:-1216m}
taskmanager.memory.managed.size: 64m
taskmanager.memory.jvm-metaspace.size: 384m
taskmanager.memory.framework.heap.size: 64m
taskmanager.memory.framework.off-heap.batch-shuffle.size: 32m
parallelism.default: $TASKMANAGERS
io.tmp.dirs: $WORK/tmp
web.tmpdir: $WORK/tmp
heartbeat.interval: 2000
heartbeat.timeout: 10000
restart-strategy.type: none
# a job waiting for a slot (a TaskManager killed, not yet back) fails after a minute, not five
slot.request.timeout: ${FLINK_SLOT_TIMEOUT_MS:-60000}
EOF
    } >"$CONF/config.yaml"
}

FLINK_ENV=(env FLINK_CONF_DIR="$CONF" FLINK_LOG_DIR="$TFRB_LOGS" FLINK_PID_DIR="$WORK")

tm_count() {
    curl -s -m 2 "http://127.0.0.1:$REST_PORT/taskmanagers" |
        "$BEAM_PY" -c 'import json, sys; print(len(json.load(sys.stdin)["taskmanagers"]))' 2>/dev/null || echo 0
}

start_jobmanager() {
    local pid
    if pid=$(running_pid flink-jobmanager) && port_open 127.0.0.1 "$REST_PORT"; then
        say "flink-jobmanager: already running (pid $pid)"
        return
    fi
    port_free_or_die flink-jobmanager 127.0.0.1 "$REST_PORT"
    port_free_or_die flink-jobmanager 127.0.0.1 "$RPC_PORT"
    start_bg flink-jobmanager "$TFRB_LOGS/flink-jobmanager.log" \
        "${FLINK_ENV[@]}" FLINK_IDENT_STRING=tfrb-jm "$(flink_home)/bin/jobmanager.sh" start-foreground
    wait_for_port flink-jobmanager 127.0.0.1 "$REST_PORT" 180 "$TFRB_LOGS/flink-jobmanager.log"
}

start_taskmanager() {
    local n=$1 pid rpc=$((TM_PORT0 + 2 * $1 - 2))
    if pid=$(running_pid "flink-taskmanager$n"); then
        say "flink-taskmanager$n: already running (pid $pid)"
        return
    fi
    port_free_or_die "flink-taskmanager$n" 127.0.0.1 "$rpc"
    # the SDK workers it starts (PROCESS environment) run the pinned venv, S3 data hidden
    start_bg "flink-taskmanager$n" "$TFRB_LOGS/flink-taskmanager$n.log" \
        "${FLINK_ENV[@]}" FLINK_IDENT_STRING="tfrb-tm$n" TFRB_WORKER_PYTHON="$BEAM_PY" \
        TFRB_HIDE="${S3_DATA:-}" "$(flink_home)/bin/taskmanager.sh" start-foreground \
        -D "taskmanager.rpc.port=$rpc" -D "taskmanager.data.port=$((rpc + 1))" \
        -D "taskmanager.resource-id=tfrb-tm$n"
}

# wait_taskmanagers N: until N TaskManagers are registered with the JobManager.
wait_taskmanagers() {
    local want=$1 deadline=$((SECONDS + 180)) n
    while (($(tm_count) < want)); do
        for n in $(seq 1 $TASKMANAGERS); do
            running_pid "flink-taskmanager$n" >/dev/null || {
                log_tail "$TFRB_LOGS/flink-taskmanager$n.log"
                die "flink-taskmanager$n exited"
            }
        done
        ((SECONDS < deadline)) || die "only $(tm_count) of $want TaskManagers registered after 180s"
        sleep 0.5
    done
}

start_job_server() {
    start_java flink-job-server "$JOB_PORT" "$TFRB_LOGS/flink-job-server.log" \
        "-Xmx${FLINK_JOB_SERVER_HEAP:-384m}" -XX:+UseSerialGC -cp "$JARS/*" \
        org.apache.beam.runners.flink.FlinkJobServerDriver \
        --flink-master="127.0.0.1:$REST_PORT" --flink-conf-dir="$CONF" \
        --job-host=127.0.0.1 --job-port="$JOB_PORT" --artifact-port=$((JOB_PORT + 1)) \
        --expansion-port=$((JOB_PORT + 2)) --artifacts-dir="$WORK/artifacts"
}

start() {
    local started=$SECONDS
    build
    load_s3
    ensure_bucket "$BUCKET"
    write_conf
    start_jobmanager
    local n
    for n in $(seq 1 $TASKMANAGERS); do start_taskmanager "$n"; done
    start_job_server
    wait_taskmanagers $TASKMANAGERS
    # No --environment_cache_millis (as Spark's flags have): Beam's Flink runner keeps an idle SDK
    # worker for the next stage only when its own classes come from the cluster's classpath, but
    # the job server ships them with every job (157 MB of jars into a per-job class loader), so a
    # stage's workers are closed when it ends whatever the flag says (measured: a reshard starts
    # its workers four times, with or without it).
    local env_flags="--environment_type=PROCESS --environment_options=process_command=$TFRB_ROOT/runners/sdk_worker.sh"
    write_portable_state flink "$(portable_flags "$JOB_PORT" "$env_flags")" "$BUCKET" FLINK_REST="http://127.0.0.1:$REST_PORT" \
        FLINK_VERSION="$FLINK_VERSION"
    say "flink: ready in $((SECONDS - started))s (UI http://127.0.0.1:$REST_PORT, $TASKMANAGERS TaskManagers)"
}

stop() {
    stop_pid flink-workers # started by earlier versions of this script
    stop_pid flink-job-server
    local n
    for n in $(seq 1 $TASKMANAGERS); do stop_pid "flink-taskmanager$n"; done
    stop_pid flink-jobmanager
    rm -f "$TFRB_STATE/flink.env"
    # what the cluster wrote for its jobs (blobs, shipped jars, staged artifacts: 314 MB after a
    # test run), never needed by the next start
    if running_pid flink-jobmanager >/dev/null || running_pid flink-job-server >/dev/null; then
        say "flink: a process still runs: $WORK/tmp and $WORK/artifacts kept"
    else
        rm -rf "$WORK/tmp" "$WORK/artifacts"
    fi
}

case ${1:-} in
build) build >/dev/null ;;
start) start ;;
stop) stop ;;
flags) echo "flink: $(state_flags flink || die "flink is not started: run runners/flink.sh start (or make runners)")" ;;
kill-taskmanager)
    pid=$(running_pid "flink-taskmanager${2:?N}") || die "flink-taskmanager$2 is not running"
    kill -KILL -- "-$pid"
    say "flink-taskmanager$2 killed (pid $pid)"
    ;;
*)
    echo "usage: $0 build|start|stop|flags|kill-taskmanager N" >&2
    exit 2
    ;;
esac
