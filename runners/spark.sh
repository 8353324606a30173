#!/usr/bin/env bash
# A Spark standalone master and worker on loopback and Beam's Spark job server in front of them.
#
#   runners/spark.sh build   the pyspark wheel (its bundled bin/ and jars/: Spark 3.5, what
#                            beam-runners-spark-3 is built for) in its own venv, the job server's
#                            jars (runners/spark-job-server.pom.xml through Maven) and the venv
#                            pinned to the job server's Beam, into $TFRB_CACHE
#   runners/spark.sh start   master (spark://127.0.0.1:7377, UI 8380), one worker (UI 8381), the
#                            job server (8397 job, 8398 artifacts, 8399 expansion; it is the
#                            Spark driver) and the Python SDK worker pool (50200, private
#                            mount/pid namespaces). Needs the S3 server: job data lives there.
#   runners/spark.sh stop
#   runners/spark.sh flags   the job flags
#
# runners: spark
# Environment: TFRB_CACHE, TFRB_SPARK_VERSION (3.5.7), TFRB_BEAM_JOB_VERSION (2.70.0),
# SPARK_MASTER_PORT (7377), SPARK_MASTER_UI_PORT (8380), SPARK_WORKER_UI_PORT (8381),
# SPARK_JOB_PORT (8397, then +1 artifacts, +2 expansion), SPARK_WORKER_POOL_PORT (50200),
# SPARK_S3_BUCKET (tfrb-spark), SPARK_WORKER_MEMORY (2g), SPARK_JOB_SERVER_HEAP (512m),
# SPARK_ENVIRONMENT_CACHE_MS (60000: how long an idle SDK worker is kept for the next stage).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/portable.sh"

SPARK_VERSION=${TFRB_SPARK_VERSION:-3.5.7}
SPARK_VENV=$TFRB_CACHE/venvs/spark-$SPARK_VERSION
MASTER_PORT=${SPARK_MASTER_PORT:-7377}
MASTER_UI_PORT=${SPARK_MASTER_UI_PORT:-8380}
WORKER_UI_PORT=${SPARK_WORKER_UI_PORT:-8381}
JOB_PORT=${SPARK_JOB_PORT:-8397}
WORKER_PORT=${SPARK_WORKER_POOL_PORT:-50200}
BUCKET=${SPARK_S3_BUCKET:-tfrb-spark}
WORK=$TFRB_ROOT/.runners/spark
POM=$TFRB_ROOT/runners/spark-job-server.pom.xml
MASTER_URL=spark://127.0.0.1:$MASTER_PORT
# Spark 3.5 on Java 17 needs these opened (spark-submit adds them itself; the job server is
# started with plain java)
OPENS=(--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
    --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
    --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
    --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
    --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens=java.base/sun.nio.cs=ALL-UNNAMED --add-opens=java.base/sun.security.action=ALL-UNNAMED
    --add-opens=java.base/sun.util.calendar=ALL-UNNAMED)

spark_home() {
    echo "$SPARK_VENV/lib/python3.11/site-packages/pyspark"
}

build_spark() {
    cached_venv "$SPARK_VENV" --no-deps "pyspark==$SPARK_VERSION"
    [[ -x $(spark_home)/bin/spark-class ]] || die "no bin/spark-class in $(spark_home)"
}

build() {
    build_spark
    build_beam_venv
    JARS=$(build_job_server spark-job-server "$POM")
}

SPARK_ENV=(env SPARK_HOME="$(spark_home)" SPARK_CONF_DIR="$WORK/conf" SPARK_LOG_DIR="$TFRB_LOGS"
    SPARK_PID_DIR="$WORK" SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_DIRS="$WORK/tmp"
    SPARK_DAEMON_MEMORY=256m SPARK_NO_DAEMONIZE=1)

start_daemon() {
    local name=$1 port=$2 pid
    shift 2
    if pid=$(running_pid "$name"); then
        say "$name: already running (pid $pid)"
        return
    fi
    port_free_or_die "$name" 127.0.0.1 "$port"
    start_bg "$name" "$TFRB_LOGS/$name.log" "${SPARK_ENV[@]}" "$(spark_home)/bin/spark-class" "$@"
    wait_for_port "$name" 127.0.0.1 "$port" 180 "$TFRB_LOGS/$name.log"
}

start() {
    local started=$SECONDS
    build
    load_s3
    ensure_bucket "$BUCKET"
    mkdir -p "$WORK/conf" "$WORK/tmp" "$WORK/work" "$WORK/artifacts"
    start_daemon spark-master "$MASTER_PORT" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
    start_daemon spark-worker "$WORKER_UI_PORT" org.apache.spark.deploy.worker.Worker \
        --host 127.0.0.1 --webui-port "$WORKER_UI_PORT" --cores 2 \
        --memory "${SPARK_WORKER_MEMORY:-2g}" --work-dir "$WORK/work" "$MASTER_URL"
    # Beam's jars first (its guava is newer than Spark's 14), then the cluster's Spark and Scala;
    # on the executors too (extraClassPath comes before Spark's jars): with Beam's jars only added
    # to the job, an executor's first task died on Spark's guava (NoSuchMethodError:
    # Preconditions.checkState(boolean, String, long) in GoogleCloudStorageReadOptions.<clinit>,
    # building the pipeline options) and Spark ran it again
    start_java spark-job-server "$JOB_PORT" "$TFRB_LOGS/spark-job-server.log" \
        "-Xmx${SPARK_JOB_SERVER_HEAP:-512m}" "${OPENS[@]}" -Dspark.driver.host=127.0.0.1 \
        -Dspark.driver.bindAddress=127.0.0.1 -Dspark.executor.memory=1g -Dspark.local.dir="$WORK/tmp" \
        -Dspark.executor.extraClassPath="$JARS/*" \
        -cp "$JARS/*:$(spark_home)/jars/*" org.apache.beam.runners.spark.SparkJobServerDriver \
        --spark-master-url="$MASTER_URL" --job-host=127.0.0.1 --job-port="$JOB_PORT" \
        --artifact-port=$((JOB_PORT + 1)) --expansion-port=$((JOB_PORT + 2)) --artifacts-dir="$WORK/artifacts"
    start_worker_pool spark-workers "$WORKER_PORT"
    # Spark's runner releases a stage's SDK worker when the stage ends (environment cache 0):
    # each of a job's ten or so stages then waited for a fresh worker (a Python start, Beam's
    # imports); kept a minute, one worker serves the stages that follow.
    local env_flags="--environment_type=EXTERNAL --environment_config=127.0.0.1:$WORKER_PORT"
    env_flags+=" --environment_cache_millis=${SPARK_ENVIRONMENT_CACHE_MS:-60000}"
    write_portable_state spark "$(portable_flags "$JOB_PORT" "$env_flags")" "$BUCKET" SPARK_MASTER="$MASTER_URL" \
        SPARK_UI="http://127.0.0.1:$MASTER_UI_PORT" SPARK_VERSION="$SPARK_VERSION"
    say "spark: ready in $((SECONDS - started))s (UI http://127.0.0.1:$MASTER_UI_PORT)"
}

stop() {
    stop_pid spark-workers
    stop_pid spark-job-server
    stop_pid spark-worker
    stop_pid spark-master
    rm -f "$TFRB_STATE/spark.env"
}

case ${1:-} in
build) build >/dev/null ;;
start) start ;;
stop) stop ;;
flags) echo "spark: $(state_flags spark || die "spark is not started: run runners/spark.sh start (or make runners)")" ;;
*)
    echo "usage: $0 build|start|stop|flags" >&2
    exit 2
    ;;
esac
