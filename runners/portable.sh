# Shared parts of the portable cluster runners (runners/flink.sh, runners/spark.sh). Source it
# after lib.sh.
#
# - The job interpreter: a cached venv pinned to the Beam version of the job server
#   (Maven Central serves the runner libraries of Beam 2.70.0, not 2.77's), so the launcher and
#   the SDK workers speak the job server's Beam.
# - The job server: assembled from the runner library by a committed pom (runners/*.pom.xml;
#   Maven Central serves no beam-runners-*-job-server jar here) into the cache, run with java -cp.
# - The SDK workers: runners/sdk_worker.sh, each in mount and pid namespaces of its own with a
#   private tmpfs on /tmp and /dev/shm and the checkout's .runners/ (state, logs) and the S3
#   server's data hidden, so that a worker sees nothing of the launcher's or another worker's
#   files, pids or shared memory: every byte it reads or writes goes through the S3 server.
#   Flink's TaskManagers start them themselves (PROCESS environment: two TaskManagers sharing
#   one EXTERNAL pool stop each other's workers, as both name their first worker "1-1");
#   Spark's executors ask a worker pool (EXTERNAL).
# - The job data: a bucket of the S3 server of runners/s3.sh (.runners/state/s3.env).

# The Beam version of the job servers: the newest whose Flink runner Maven Central serves with
# its dependencies (beam-runners-java-job-service only at 2.65.0; see runners/*.pom.xml).
BEAM_JOB_VERSION=${TFRB_BEAM_JOB_VERSION:-2.70.0}
BEAM_VENV=$TFRB_CACHE/venvs/beam-$BEAM_JOB_VERSION
BEAM_PY=$BEAM_VENV/bin/python

# build_beam_venv: the pinned job/worker interpreter with this project's core dependencies
# (the code itself comes from the checkout through PYTHONPATH).
build_beam_venv() {
    cached_venv "$BEAM_VENV" "apache-beam[aws]==$BEAM_JOB_VERSION" "numpy>=1.22" "protobuf>=4.21,<7" \
        "google-crc32c>=1.5" "pyarrow>=12" "isal>=1.6"
}

# build_job_server NAME POM: copy POM's dependencies into $TFRB_CACHE/jars/NAME-beam-VERSION
# (echoes that folder).
build_job_server() {
    local name=$1 pom=$2 dir=$TFRB_CACHE/jars/$1-beam-$BEAM_JOB_VERSION
    if [[ -f $dir/.tfrb-ready ]]; then
        say "$name: jars cached in $dir"
        echo "$dir"
        return
    fi
    command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch the $name jars"
    say "$name: mvn dependency:copy-dependencies of $pom (minutes when cold)"
    rm -rf "$dir" "$dir.tmp"
    mvn -B -q -f "$pom" -Dbeam.version="$BEAM_JOB_VERSION" dependency:copy-dependencies \
        -DoutputDirectory="$dir.tmp" >"$TFRB_LOGS/$name-mvn.log" 2>&1 ||
        { log_tail "$TFRB_LOGS/$name-mvn.log"; die "fetching the $name jars failed (log $TFRB_LOGS/$name-mvn.log)"; }
    mv "$dir.tmp" "$dir"
    touch "$dir/.tfrb-ready"
    echo "$dir"
}

# load_s3: S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION (and S3_DATA) from the S3
# server's state; the runners' data lives there.
load_s3() {
    local file=$TFRB_STATE/s3.env
    [[ -f $file ]] || die "no $file: start the S3 server first (runners/s3.sh start, or make runners)"
    # shellcheck disable=SC1090
    source <(grep -E '^S3_[A-Z_]+=' "$file")
    [[ -n ${S3_ENDPOINT:-} && -n ${S3_ACCESS_KEY:-} && -n ${S3_SECRET_KEY:-} ]] ||
        die "$file lacks S3_ENDPOINT / S3_ACCESS_KEY / S3_SECRET_KEY"
    S3_REGION=${S3_REGION:-us-east-1}
}

# s3_flags: Beam's aws options for the S3 server.
s3_flags() {
    echo "--s3_endpoint_url=$S3_ENDPOINT --s3_access_key_id=$S3_ACCESS_KEY" \
        "--s3_secret_access_key=$S3_SECRET_KEY --s3_region_name=$S3_REGION"
}

# ensure_bucket BUCKET: create it on the S3 server when missing.
ensure_bucket() {
    AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY "$BEAM_PY" - "$S3_ENDPOINT" "$1" "$S3_REGION" <<'EOF' ||
import sys, boto3, botocore
endpoint, bucket, region = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region)
try:
    s3.head_bucket(Bucket=bucket)
except botocore.exceptions.ClientError:
    s3.create_bucket(Bucket=bucket)
EOF
        die "cannot create bucket $1 on $S3_ENDPOINT"
}

# start_worker_pool NAME PORT: Beam's Python SDK worker pool on 127.0.0.1:PORT, run by the
# pinned venv with the checkout on PYTHONPATH, inside `unshare -m -p -f --mount-proc` with
# private tmpfs on /tmp and /dev/shm and over .runners/ and the S3 server's data folder.
start_worker_pool() {
    local name=$1 port=$2 log=$TFRB_LOGS/$1.log
    local pid
    if pid=$(running_pid "$name") && port_open 127.0.0.1 "$port"; then
        say "$name: already running (pid $pid) on 127.0.0.1:$port"
        return
    fi
    port_free_or_die "$name" 127.0.0.1 "$port"
    local hide=("$TFRB_ROOT/.runners")
    # the S3 server's data, unless it is already under .runners/ (a mount point inside a
    # tmpfs just mounted over .runners/ no longer exists)
    if [[ -n ${S3_DATA:-} && -d $S3_DATA && $S3_DATA/ != "$TFRB_ROOT/.runners/"* ]]; then
        hide+=("$S3_DATA")
    fi
    # Each worker starts through runners/sdk_worker.sh (namespaces of its own) and sdk_boot.py
    # (the pipeline options from the provision service, as the SDK container's boot does).
    # pid 1 of the pool's namespace is bash: it forwards SIGTERM to the pool (an init ignores
    # signals it has no handler for); --kill-child takes the namespace down with unshare.
    start_bg "$name" "$log" unshare --mount --pid --fork --mount-proc --kill-child \
        env -i PATH="$BEAM_VENV/bin:/usr/bin:/bin" HOME=/tmp LANG=C.UTF-8 PYTHONPATH="$TFRB_ROOT" \
        TFRB_WORKER_PYTHON="$BEAM_PY" TFRB_HIDE="${S3_DATA:-}" \
        bash -c '
            set -e
            mount -t tmpfs -o size=4g,mode=1777 tmpfs /tmp
            mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm
            py=$1 port=$2 boot=$3
            shift 3
            for dir in "$@"; do mount -t tmpfs -o size=1m,mode=0755 tmpfs "$dir"; done
            cd /tmp
            "$py" -m apache_beam.runners.worker.worker_pool_main --service_port="$port" \
                --container_executable="$boot" &
            child=$!
            trap "kill -TERM $child" TERM INT
            wait $child || wait $child
        ' worker-pool "$BEAM_PY" "$port" "$TFRB_ROOT/runners/sdk_worker.sh" "${hide[@]}"
    wait_for_port "$name" 127.0.0.1 "$port" 120 "$log"
    say "$name: worker pool on 127.0.0.1:$port (pid $(cat "$TFRB_STATE/$name.pid"), private /tmp, /dev/shm, pids)"
}

# portable_flags JOB_PORT ENVIRONMENT_FLAGS...: the job flags of a job server on JOB_PORT whose SDK
# workers come from the given environment, data in the S3 server.
portable_flags() {
    local port=$1
    shift
    echo "--runner=PortableRunner --job_endpoint=127.0.0.1:$port $* $(s3_flags)"
}

# write_portable_state NAME FLAGS BUCKET [KEY=VALUE...]: .runners/state/NAME.env (FLAGS, PYTHON:
# the pinned venv, S3_PREFIX: where the runner's job data must live, and the AWS_* variables a
# launcher or test reads that data with).
write_portable_state() {
    local name=$1 flags=$2 bucket=$3
    shift 3
    write_state "$name" FLAGS="$flags" PYTHON="$BEAM_PY" \
        S3_PREFIX="s3://$bucket/jobs" S3_ENDPOINT="$S3_ENDPOINT" AWS_ACCESS_KEY_ID="$S3_ACCESS_KEY" \
        AWS_SECRET_ACCESS_KEY="$S3_SECRET_KEY" AWS_DEFAULT_REGION="$S3_REGION" \
        AWS_ENDPOINT_URL="$S3_ENDPOINT" BEAM_VERSION="$BEAM_JOB_VERSION" "$@"
}

# start_java NAME PORT LOG JAVA-ARGS...: a job server JVM, ready when PORT accepts connections.
start_java() {
    local name=$1 port=$2 log=$3 pid
    shift 3
    if pid=$(running_pid "$name") && port_open 127.0.0.1 "$port"; then
        say "$name: already running (pid $pid)"
        return
    fi
    port_free_or_die "$name" 127.0.0.1 "$port"
    start_bg "$name" "$log" java "$@"
    wait_for_port "$name" 127.0.0.1 "$port" 180 "$log"
}
