#!/usr/bin/env bash
# kafka-local.sh — a real single-node Apache Kafka cluster (KRaft, transactions on) for local
# runs and tests, from Maven Central jars: no Docker, no tarball. One KRaft controller and one
# broker, each in its own JVM, as Kafka advises for production (see "Why two JVMs" below).
#
# Run from anywhere (paths are relative to the repo root = this script's dir/..):
#
#   scripts/kafka-local.sh fetch     # once: jars -> .cache/kafka/<version>/libs (needs mvn, Java 17)
#   scripts/kafka-local.sh up        # start broker on 127.0.0.1:${KAFKA_PORT:-9092}, wait until ready
#   scripts/kafka-local.sh status    # "running pid=... port=..." (exit 0) or "not running" (exit 3)
#   scripts/kafka-local.sh pid       # the broker JVM's pid (for SIGKILL/SIGSTOP fault tests)
#   scripts/kafka-local.sh controller-pid   # the controller JVM's pid
#   scripts/kafka-local.sh console-consumer --bootstrap-server 127.0.0.1:9092 --topic t \
#       --from-beginning --isolation-level read_committed --timeout-ms 5000
#   scripts/kafka-local.sh transactions --bootstrap-server 127.0.0.1:9092 list
#   scripts/kafka-local.sh topics --bootstrap-server 127.0.0.1:9092 --list
#   scripts/kafka-local.sh configs --bootstrap-server 127.0.0.1:9092 --alter --entity-type topics \
#       --entity-name t --add-config delete.retention.ms=3600000
#   (also: consumer-groups, get-offsets; `bootstrap` prints 127.0.0.1:$KAFKA_PORT)
#
# Secured (KAFKA_SECURITY=sasl_ssl, see scripts/kafka/secure.sh and docs/security.md):
#   KAFKA_SECURITY=sasl_ssl KAFKA_PORT=9192 scripts/kafka-local.sh up   # TLS + SCRAM + ACLs
#   ... client-env dedupe-worker   # the settings of a client of user dedupe-worker (KEY=VALUE)
#   ... client-config              # path of the super user's configs (tools' --command-config)
#   ... acls --list                # kafka-acls, as the super user (make kafka-acls adds them)
#   ... add-acls <file>            # many ACLs in one call (scripts/kafka/AddAcls.java)
#   scripts/kafka-local.sh down      # SIGTERM (SIGKILL after 30 s) the broker, then the controller
#   scripts/kafka-local.sh wipe      # down + delete the data dir
#
# What you should see from `up`: a few "kafka-local: ..." progress lines ending in
#   kafka-local: broker ready on 127.0.0.1:9092 (pid 12345, data .../.cache/kafka-run/9092) in 4s
# (about 4 s on 2 cores; about 7 s after a kill -9, while the old registration expires; the
# first run also fetches the jars). A second `up` prints "already running" and exits 0. On
# failure it prints the reason (port taken, JVM died, timeout) and the last 40 lines of
# <data dir>/broker.log, and exits non-zero.
#
# Environment:
#   KAFKA_VERSION          Kafka 4.x release to use (default below)
#   KAFKA_PORT             broker port, default 9092 (PLAINTEXT, or SASL_SSL when secured)
#   KAFKA_SECURITY         plaintext (default) or sasl_ssl; fixed for a data dir when formatted
#   KAFKA_CONTROLLER_PORT  KRaft controller port, default KAFKA_PORT+1
#   KAFKA_DATA_DIR         default .cache/kafka-run/$KAFKA_PORT; holds logs/ (the broker's log
#                          dir), controller/ (the controller's metadata log), server.properties,
#                          controller.properties, log4j config, broker.log, controller.log, *.pid
#   KAFKA_CACHE_DIR        jar cache root, default .cache/kafka
#   KAFKA_START_TIMEOUT    seconds `up` waits for readiness, default 90
#   KAFKA_HEAP_OPTS        broker heap, default "-Xms512m -Xmx512m"
#   KAFKA_CONTROLLER_HEAP_OPTS  controller heap, default "-Xms192m -Xmx192m"
#   KAFKA_EXTRA_LISTENERS  extra PLAINTEXT listeners "NAME:listen_port:advertised_port,..."
#                          (the network fault tests put a proxy on each advertised port)
#   KAFKA_FORMAT_ARGS      arguments for the first `kafka-storage format` of a data dir; default
#                          none: Kafka's defaults, as every new 4.x cluster (transactions v2,
#                          eligible leader replicas); e.g. "--feature transaction.version=1"
#                          for a broker on the old transaction protocol (the fault tier's v1
#                          rows)
#   PYTHON                 python with aiokafka for the readiness probe and the InitProducerId
#                          warm-up, default .venv/bin/python (`make install` creates it)
#   JAVA                   java binary, default $JAVA_HOME/bin/java or java
#
# Notes: `up` warms transactions up with one InitProducerId for transactional.id
# "kafka-local-warmup" (this creates __transaction_state), so that id shows up in
# `transactions list`, and with one offset fetch for group "kafka-local-warmup" (creates
# __consumer_offsets; the group commits nothing). The broker runs in its own session (setsid),
# so Ctrl-C in the caller's terminal does not reach it; only `down` (or a signal to `pid`)
# stops it. One data dir belongs to one Kafka version: switching versions needs `wipe`.
#
# Why two JVMs: in KRaft's combined mode (one JVM as broker and controller) a kill -9 takes the
# controller down with the broker, so nothing fences the dead broker. On restart the node
# replays a metadata log in which it still leads every partition; it takes the transaction
# coordinator role from that stale state, rolls back transactions that timed out while it was
# down, and a moment later fences its old registration (every partition leaderless until it
# is unfenced). Markers queued in that moment are dropped as "likely deleted" (Kafka's
# TransactionMarkerChannelManager), leaving hanging transactions: read_committed readers stop
# at them for good (seen in fault test F7 on Kafka 4.3.1; docs/reliability.md). With its own
# controller the broker is fenced while it is down and becomes coordinator only when unfenced.
set -euo pipefail

DEFAULT_KAFKA_VERSION=4.3.1
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
POM="$SCRIPT_DIR/kafka/pom.xml"

KAFKA_VERSION=${KAFKA_VERSION:-$DEFAULT_KAFKA_VERSION}
KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
KAFKA_START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms512m -Xmx512m}
KAFKA_CONTROLLER_HEAP_OPTS=${KAFKA_CONTROLLER_HEAP_OPTS:--Xms192m -Xmx192m}
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

abspath() { # absolute path without requiring it to exist; relative paths are from $PWD
  case "$1" in
    /*) realpath -m -- "$1" ;;
    *) realpath -m -- "$PWD/$1" ;;
  esac
}

CACHE_ROOT=$(abspath "${KAFKA_CACHE_DIR:-$ROOT/.cache/kafka}")
CACHE_DIR="$CACHE_ROOT/$KAFKA_VERSION"
LIBS="$CACHE_DIR/libs"
FETCH_MARKER="$CACHE_DIR/.fetch-complete"
DATA_DIR=$(abspath "${KAFKA_DATA_DIR:-$ROOT/.cache/kafka-run/$KAFKA_PORT}")
LOG_DIR="$DATA_DIR/logs"
SERVER_PROPS="$DATA_DIR/server.properties"
BROKER_LOG="$DATA_DIR/broker.log"
PID_FILE="$DATA_DIR/broker.pid"
# The controller: its own node id, metadata log dir, config, log and pid file.
CONTROLLER_ID=1000
CONTROLLER_DIR="$DATA_DIR/controller"
CONTROLLER_PROPS="$DATA_DIR/controller.properties"
CONTROLLER_LOG="$DATA_DIR/controller.log"
CONTROLLER_PID_FILE="$DATA_DIR/controller.pid"
KAFKA_SECURITY=${KAFKA_SECURITY:-plaintext}
# shellcheck source=kafka/secure.sh
source "$SCRIPT_DIR/kafka/secure.sh"

if [[ -n ${JAVA:-} ]]; then
  :
elif [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
  JAVA="$JAVA_HOME/bin/java"
else
  JAVA=java
fi

PYTHON=${PYTHON:-$ROOT/.venv/bin/python}

[[ $KAFKA_VERSION == 4.* ]] || { echo "kafka-local: ERROR: KAFKA_VERSION=$KAFKA_VERSION: only Kafka 4.x is supported" >&2; exit 1; }
BROKER_LOG_CONFIG="$DATA_DIR/log4j2.properties"
TOOLS_LOG_CONFIG="$CACHE_DIR/tools-log4j2.properties"
# Short-lived tool JVMs: small heap, C1 only (faster start-up on 2 cores).
TOOL_OPTS=(-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=file:$TOOLS_LOG_CONFIG")

say() { echo "kafka-local: $*" >&2; }
die() { echo "kafka-local: ERROR: $*" >&2; exit 1; }

valid_port() { [[ $1 =~ ^[0-9]+$ ]] && (($1 > 0 && $1 < 65536)); }
[[ $KAFKA_SECURITY == plaintext || $KAFKA_SECURITY == sasl_ssl ]] ||
  die "KAFKA_SECURITY='$KAFKA_SECURITY': use plaintext or sasl_ssl"
valid_port "$KAFKA_PORT" || die "KAFKA_PORT='$KAFKA_PORT' is not a port number"
valid_port "$KAFKA_CONTROLLER_PORT" || die "KAFKA_CONTROLLER_PORT='$KAFKA_CONTROLLER_PORT' is not a port number"
[[ $KAFKA_PORT != "$KAFKA_CONTROLLER_PORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ"

# --------------------------------------------------------------------------------------------
# fetch

cmd_fetch() {
  if [[ -f $FETCH_MARKER ]]; then
    say "Kafka $KAFKA_VERSION jars already in $LIBS"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn (Maven) is needed to fetch the Kafka jars"
  local tmp="$CACHE_DIR/libs.tmp.$$"
  mkdir -p "$CACHE_DIR"
  rm -rf "$tmp"
  say "resolving Kafka $KAFKA_VERSION (kafka_2.13 + kafka-tools + logging) from Maven Central ..."
  if ! mvn -B -q -f "$POM" "$DEPENDENCY_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$tmp" \
    -Dkafka.version="$KAFKA_VERSION" 2>&1 |
    sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' >&2; then # drop Maven's colour codes
    rm -rf "$tmp"
    die "Maven could not resolve Kafka $KAFKA_VERSION (does that release exist on Maven Central?)"
  fi
  ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 || {
    rm -rf "$tmp"
    die "kafka_2.13-$KAFKA_VERSION.jar missing after resolution"
  }
  # An index of the Kafka classes, to find tool classes that moved between releases.
  local j lister=(unzip -Z1)
  command -v unzip >/dev/null || lister=(jar tf)
  for j in "$tmp"/kafka*.jar; do
    "${lister[@]}" "$j"
  done | grep -E '\.class$' | grep -vF '$' | sed -e 's/\.class$//' -e 's#/#.#g' | sort -u >"$tmp/.classes"
  [[ -s $tmp/.classes ]] || die "could not list the classes in the Kafka jars (need unzip or jar)"
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS"
  touch "$FETCH_MARKER"
  say "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars ($(du -sh "$LIBS" | cut -f1)) into $LIBS"
}

ensure_fetched() { [[ -f $FETCH_MARKER ]] || cmd_fetch; }

tool_class() { # short tool name -> main class (checked against the index of the fetched jars)
  local cls
  case "$1" in
    storage-tool) cls=kafka.tools.StorageTool ;;
    console-consumer) cls=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    transactions) cls=org.apache.kafka.tools.TransactionsCommand ;;
    acls) cls=org.apache.kafka.tools.AclCommand ;;
    topics) cls=org.apache.kafka.tools.TopicCommand ;;
    consumer-groups) cls=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    get-offsets) cls=org.apache.kafka.tools.GetOffsetShell ;;
    configs) cls=kafka.admin.ConfigCommand ;;
    *) die "unknown tool name '$1'" ;;
  esac
  ensure_fetched
  grep -qxF "$cls" "$LIBS/.classes" || die "$cls does not exist in Kafka $KAFKA_VERSION"
  echo "$cls"
}

# --------------------------------------------------------------------------------------------
# configs

write_configs() {
  mkdir -p "$LOG_DIR"
  {
    echo "# Written by scripts/kafka-local.sh (rewritten on every start)."
    echo "process.roles=broker"
    echo "node.id=1"
    echo "controller.quorum.voters=$CONTROLLER_ID@127.0.0.1:$KAFKA_CONTROLLER_PORT"
    if [[ $KAFKA_SECURITY == sasl_ssl ]]; then
      secure_server_props
    else
      # KAFKA_EXTRA_LISTENERS="NAME:listen_port:advertised_port,...": more PLAINTEXT listeners,
      # each advertising another port (a fault proxy's, which forwards to listen_port).
      local name lport aport xl="" xa="" xm=""
      while IFS=: read -r name lport aport; do
        xl+=",$name://127.0.0.1:$lport" xa+=",$name://127.0.0.1:$aport" xm+=",$name:PLAINTEXT"
      done < <(tr ',' '\n' <<<"${KAFKA_EXTRA_LISTENERS:-}" | grep .)
      echo "listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT$xl"
      echo "advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT$xa"
      echo "controller.listener.names=CONTROLLER"
      echo "inter.broker.listener.name=PLAINTEXT"
      echo "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT$xm"
    fi
    echo "log.dirs=$LOG_DIR"
    echo "auto.create.topics.enable=false"
    echo "num.partitions=8"
    echo "default.replication.factor=1"
    echo "# one node: internal topics must have RF 1 / min ISR 1"
    echo "offsets.topic.replication.factor=1"
    echo "transaction.state.log.replication.factor=1"
    echo "transaction.state.log.min.isr=1"
    echo "share.coordinator.state.topic.replication.factor=1"
    echo "share.coordinator.state.topic.min.isr=1"
    echo "share.coordinator.state.topic.num.partitions=3"
    echo "# speed-ups for a 2-core machine"
    echo "offsets.topic.num.partitions=3"
    echo "transaction.state.log.num.partitions=3"
    echo "group.initial.rebalance.delay.ms=0"
    echo "group.min.session.timeout.ms=1000"
    echo "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"
    echo "num.network.threads=2"
    echo "num.io.threads=2"
    echo "num.recovery.threads.per.data.dir=1"
    echo "log.cleaner.threads=1"
    echo "log.cleaner.dedupe.buffer.size=16777216"
    echo "broker.heartbeat.interval.ms=500"
  } >"$SERVER_PROPS"
  chmod 600 "$SERVER_PROPS" # secured: holds the keystore and the broker's SCRAM password

  mkdir -p "$CONTROLLER_DIR"
  {
    echo "# Written by scripts/kafka-local.sh (rewritten on every start)."
    echo "process.roles=controller"
    echo "node.id=$CONTROLLER_ID"
    echo "controller.quorum.voters=$CONTROLLER_ID@127.0.0.1:$KAFKA_CONTROLLER_PORT"
    echo "listeners=CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT"
    echo "controller.listener.names=CONTROLLER"
    echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT"
    echo "log.dirs=$CONTROLLER_DIR"
    echo "# topic defaults are applied by the controller"
    echo "num.partitions=8"
    echo "default.replication.factor=1"
    echo "# a broker that stops heartbeating (kill -9) is fenced after 4 s (default 9 s), and its"
    echo "# next incarnation may register then"
    echo "broker.session.timeout.ms=4000"
    if [[ $KAFKA_SECURITY == sasl_ssl ]]; then
      secure_controller_props
    fi
  } >"$CONTROLLER_PROPS"

  cat >"$BROKER_LOG_CONFIG" <<'EOF'
# Broker logging (log4j2); stdout goes to broker.log.
status = warn
name = kafka-local-broker
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

# Logging for the command-line tools: warnings to stderr. Lives in the jar cache (per version).
write_tools_log_config() {
  [[ -f $TOOLS_LOG_CONFIG ]] || cat >"$TOOLS_LOG_CONFIG" <<'EOF'
# Command-line tools logging (log4j2): warnings to stderr.
status = warn
name = kafka-local-tools
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
EOF
}

# --------------------------------------------------------------------------------------------
# process helpers

# Is $1 a live Kafka JVM started with config file $2 (default: the broker's) of *this* data
# dir? (guards against pid reuse by another program)
is_our_broker() {
  local pid=$1 props=${2:-$SERVER_PROPS} cmdline
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *kafka.Kafka* && $cmdline == *"$props"* ]]
}

proc_state() { # R/S/D/T/Z... of a pid, empty if gone
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  echo "${stat%% *}"
}

# Pid of the running broker of this data dir (from broker.pid), or nothing. With
# "$CONTROLLER_PID_FILE" "$CONTROLLER_PROPS": the controller's.
running_pid() {
  local pid_file=${1:-$PID_FILE} props=${2:-$SERVER_PROPS} pid
  [[ -f $pid_file ]] || return 0
  pid=$(tr -dc '0-9' <"$pid_file" 2>/dev/null || true)
  if [[ -n $pid ]] && is_our_broker "$pid" "$props" && [[ $(proc_state "$pid") != Z ]]; then
    echo "$pid"
  fi
}

controller_pid() { running_pid "$CONTROLLER_PID_FILE" "$CONTROLLER_PROPS"; }

# A Kafka JVM started with config $1 (default: the broker's) of this data dir but without (valid)
# pid file.
orphan_pid() {
  local props=${1:-$SERVER_PROPS} d pid cmdline
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [[ -r $d/cmdline ]] || continue
    cmdline=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
    if [[ $cmdline == *kafka.Kafka* && $cmdline == *"$props"* ]]; then
      echo "$pid"
      return 0
    fi
  done
}

port_in_use() { # is something listening on 127.0.0.1:$1 ?
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Die when something other than a JVM of this data dir listens on 127.0.0.1:$1.
refuse_taken_port() {
  port_in_use "$1" || return 0
  local owner
  owner=$(port_owner "$1" || true)
  die "port 127.0.0.1:$1 is already in use by another program${owner:+ ($owner)}; pick other ports with KAFKA_PORT / KAFKA_CONTROLLER_PORT"
}

port_owner() {
  if command -v ss >/dev/null; then
    ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:(\(.*\))/\1/p' | head -1
  fi
}

# The client settings (docs/settings.md) of the probe and warm-up: the super user when secured.
client_env() {
  if [[ $KAFKA_SECURITY == sasl_ssl ]]; then
    secure_client_env admin
  else
    echo "KAFKA_SECURITY_PROTOCOL=PLAINTEXT"
    echo "KAFKA_SASL_USERNAME="
    echo "KAFKA_SASL_PASSWORD_FILE="
    echo "KAFKA_SSL_CAFILE="
  fi
  echo "KAFKA_SASL_PASSWORD="
  echo "KAFKA_SSL_CERTFILE="
  echo "KAFKA_SSL_KEYFILE="
}

# `client_python <timeout s> args...`: $PYTHON with the probe's client settings.
client_python() {
  local -a vars
  mapfile -t vars < <(client_env)
  timeout "$1" env "${vars[@]}" "$PYTHON" "${@:2}"
}

have_python_aiokafka() {
  command -v "$PYTHON" >/dev/null 2>&1 && "$PYTHON" -c 'import aiokafka' >/dev/null 2>&1
}

run_tool() { # run a Kafka tool class in the foreground
  local cls=$1
  shift
  ensure_fetched
  write_tools_log_config
  exec "$JAVA" "${TOOL_OPTS[@]}" -cp "$LIBS/*" "$cls" "$@"
}

# One admin round trip (list topics). Quiet; exit status says whether the broker answers.
admin_probe() {
  client_python 20 - "$BOOTSTRAP" >/dev/null 2>&1 <<'EOF'
import asyncio, sys
from aiokafka.admin import AIOKafkaAdminClient
from envsettings.kafka_security import KafkaSecuritySettings

async def main(bootstrap):
    security = KafkaSecuritySettings.from_env().kafka_client_kwargs()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000, **security)
    await admin.start()
    try:
        await admin.list_topics()
    finally:
        await admin.close()

asyncio.run(main(sys.argv[1]))
EOF
}

# One InitProducerId (creates __transaction_state) and one OffsetFetch (creates
# __consumer_offsets), so the first real transaction / consumer group does not wait for them.
warm_up_transactions() {
  client_python 60 - "$BOOTSTRAP" <<'EOF'
import asyncio, logging, sys, time
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from envsettings.kafka_security import KafkaSecuritySettings

# aiokafka logs retried "coordinator not available" errors while the internal topics are created.
logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

async def main(bootstrap):
    t0 = time.monotonic()
    security = KafkaSecuritySettings.from_env().kafka_client_kwargs()
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="kafka-local-warmup",
                         request_timeout_ms=30000, **security)
    await p.start()  # waits for FindCoordinator + InitProducerId
    await p.stop()
    t1 = time.monotonic()
    # An OffsetFetch through the group coordinator creates __consumer_offsets (commits nothing).
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="kafka-local-warmup",
                         enable_auto_commit=False, request_timeout_ms=30000, **security)
    await c.start()
    try:
        await c.committed(TopicPartition("kafka-local-warmup", 0))
    finally:
        await c.stop()
    print(f"kafka-local: transactions warmed up (InitProducerId in {t1 - t0:.1f}s,"
          f" group coordinator in {time.monotonic() - t1:.1f}s)", file=sys.stderr)

asyncio.run(main(sys.argv[1]))
EOF
}

# Serialise up/down/wipe on one data dir (concurrent `up`s would race for the ports).
# fd 9 is closed for the broker JVM so that it does not hold the lock.
lock_data_dir() {
  mkdir -p "$DATA_DIR"
  exec 9>"$DATA_DIR/.kafka-local.lock"
  flock -w 180 9 || die "another kafka-local.sh has been busy with $DATA_DIR for 180s"
}

tail_log() {
  if [[ -f $BROKER_LOG ]]; then
    echo "----- last 40 lines of $BROKER_LOG -----" >&2
    tail -n 40 "$BROKER_LOG" >&2
    echo "-----" >&2
  fi
}

# Stop pid $1 (a JVM of config $2, default the broker's): SIGTERM (+SIGCONT in case it is
# SIGSTOPped), wait up to 30 s, then SIGKILL.
stop_pid() {
  local pid=$1 props=${2:-$SERVER_PROPS} i
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    is_our_broker "$pid" "$props" && [[ $(proc_state "$pid") != Z ]] || return 0
    sleep 0.1
  done
  say "pid $pid did not stop within 30s after SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    is_our_broker "$pid" "$props" && [[ $(proc_state "$pid") != Z ]] || return 0
    sleep 0.1
  done
  die "pid $pid survived SIGKILL"
}

# Start a Kafka JVM: `launch_jvm <heap opts> <config> <log>`; its pid in LAUNCHED_PID.
# setsid: own session, so terminal signals to the caller do not reach it. Without job control
# the background child is not a group leader, so setsid/nohup exec in place and $! is the JVM's
# pid (checked below).
launch_jvm() {
  local heap=$1 props=$2 log=$3 pid i
  # shellcheck disable=SC2086
  setsid nohup "$JAVA" $heap \
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
    -Dkafka.logs.dir="$DATA_DIR" "-Dlog4j2.configurationFile=file:$BROKER_LOG_CONFIG" \
    -cp "$LIBS/*" kafka.Kafka "$props" >"$log" 2>&1 </dev/null 9>&- &
  pid=$!
  # Between fork and exec the child still shows this script's command line: wait for the exec.
  for ((i = 0; i < 100; i++)); do
    is_our_broker "$pid" "$props" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  LAUNCHED_PID=$pid
}

# Start the controller unless it runs; wait until it serves its port.
start_controller() {
  local t_start=$SECONDS cpid state
  cpid=$(controller_pid)
  if [[ -z $cpid ]]; then
    cpid=$(orphan_pid "$CONTROLLER_PROPS" || true)
    if [[ -n $cpid ]]; then
      say "found controller pid $cpid for $DATA_DIR without a pid file; adopting it"
      echo "$cpid" >"$CONTROLLER_PID_FILE"
    fi
  fi
  if [[ -n $cpid ]]; then
    [[ $(proc_state "$cpid") != T ]] || die "controller pid $cpid is stopped (SIGSTOP); send it SIGCONT or run 'down' first"
    return 0
  fi
  rm -f "$CONTROLLER_PID_FILE"
  find "$CONTROLLER_DIR" -maxdepth 1 -name .lock -type f -delete 2>/dev/null || true
  refuse_taken_port "$KAFKA_CONTROLLER_PORT"
  [[ -f $CONTROLLER_LOG ]] && mv -f "$CONTROLLER_LOG" "$CONTROLLER_LOG.prev"
  say "starting the KRaft controller on 127.0.0.1:$KAFKA_CONTROLLER_PORT"
  launch_jvm "$KAFKA_CONTROLLER_HEAP_OPTS" "$CONTROLLER_PROPS" "$CONTROLLER_LOG"
  cpid=$LAUNCHED_PID
  echo "$cpid" >"$CONTROLLER_PID_FILE"
  while ((SECONDS - t_start < KAFKA_START_TIMEOUT)); do
    state=$(proc_state "$cpid")
    if [[ -z $state || $state == Z ]]; then
      rm -f "$CONTROLLER_PID_FILE"
      tail -n 40 "$CONTROLLER_LOG" >&2 || true
      die "controller JVM exited during start-up (see $CONTROLLER_LOG)"
    fi
    if grep -q "Kafka Server started" "$CONTROLLER_LOG" 2>/dev/null && port_in_use "$KAFKA_CONTROLLER_PORT"; then
      return 0
    fi
    sleep 0.3
  done
  tail -n 40 "$CONTROLLER_LOG" >&2 || true
  stop_pid "$cpid" "$CONTROLLER_PROPS"
  rm -f "$CONTROLLER_PID_FILE"
  die "controller did not start within ${KAFKA_START_TIMEOUT}s"
}

# --------------------------------------------------------------------------------------------
# up / down / status

cmd_up() {
  local t_start=$SECONDS pid
  ensure_fetched
  lock_data_dir
  write_tools_log_config
  command -v "$JAVA" >/dev/null || die "java not found (Kafka needs Java 17+)"
  have_python_aiokafka || die "$PYTHON with aiokafka not found (run 'make install' or set PYTHON)"

  pid=$(running_pid)
  if [[ -z $pid ]]; then
    pid=$(orphan_pid || true)
    if [[ -n $pid ]]; then
      say "found broker pid $pid for $DATA_DIR without a pid file; adopting it"
      echo "$pid" >"$PID_FILE"
    fi
  fi
  if [[ -n $pid ]]; then
    if [[ -f $DATA_DIR/kafka.version && $(<"$DATA_DIR/kafka.version") != "$KAFKA_VERSION" ]]; then
      die "the broker running in $DATA_DIR (pid $pid) is Kafka $(<"$DATA_DIR/kafka.version"), not $KAFKA_VERSION; run 'down' (and 'wipe') first"
    fi
    if [[ $(proc_state "$pid") == T ]]; then
      die "broker pid $pid is stopped (SIGSTOP); send it SIGCONT or run 'down' first"
    fi
    start_controller
    if admin_probe; then
      say "already running and answering on $BOOTSTRAP (pid $pid, data $DATA_DIR)"
      return 0
    fi
    say "broker pid $pid is running but not answering yet; waiting for it"
    wait_ready "$pid" "$t_start" || {
      tail_log
      die "broker pid $pid on $BOOTSTRAP did not become ready within ${KAFKA_START_TIMEOUT}s (try 'down' then 'up')"
    }
    warm_up_transactions
    say "broker ready on $BOOTSTRAP (pid $pid, data $DATA_DIR) in $((SECONDS - t_start))s"
    return 0
  fi

  # Not running: clean up stale state from a crash / kill -9.
  if [[ -f $PID_FILE ]]; then
    say "removing stale pid file (pid $(tr -dc '0-9' <"$PID_FILE" || true) is gone or is not a broker of this data dir)"
    rm -f "$PID_FILE"
  fi
  if [[ -d $LOG_DIR ]]; then
    find "$LOG_DIR" -maxdepth 1 -name .lock -type f -delete
  fi

  refuse_taken_port "$KAFKA_PORT"

  mkdir -p "$DATA_DIR"
  if [[ -f $LOG_DIR/meta.properties && ! -f $CONTROLLER_DIR/meta.properties ]]; then
    die "$DATA_DIR was formatted as one combined broker+controller JVM by an older kafka-local.sh (see \"Why two JVMs\" in this script): run 'wipe' once, or use another KAFKA_PORT / KAFKA_DATA_DIR"
  fi
  if [[ -f $LOG_DIR/meta.properties ]]; then
    local formatted_as
    formatted_as=$(cat "$DATA_DIR/security" 2>/dev/null || echo plaintext)
    [[ $formatted_as == "$KAFKA_SECURITY" ]] ||
      die "$DATA_DIR was formatted with KAFKA_SECURITY=$formatted_as: run 'wipe' first or use another KAFKA_PORT / KAFKA_DATA_DIR"
  fi
  [[ $KAFKA_SECURITY == sasl_ssl ]] && secure_init
  if [[ -f $LOG_DIR/meta.properties && -f $DATA_DIR/kafka.version ]]; then
    local formatted_by
    formatted_by=$(<"$DATA_DIR/kafka.version")
    [[ $formatted_by == "$KAFKA_VERSION" ]] ||
      die "$DATA_DIR was formatted by Kafka $formatted_by, not $KAFKA_VERSION: run 'wipe' first or use another KAFKA_DATA_DIR"
  fi
  write_configs

  if [[ ! -f $CONTROLLER_DIR/meta.properties ]]; then
    local cluster_id storage_tool
    cluster_id=$(new_cluster_id)
    storage_tool=$(tool_class storage-tool)
    # Kafka's defaults unless KAFKA_FORMAT_ARGS says otherwise: what every new 4.x cluster
    # finalizes (transaction.version=2, KIP-890; eligible leader replicas, KIP-966), so `make run`,
    # the tests and the benchmarks run the protocol production runs.
    local format_args=${KAFKA_FORMAT_ARGS-}
    local -a scram_args=()
    [[ $KAFKA_SECURITY == sasl_ssl ]] && mapfile -t scram_args < <(secure_format_args)
    say "formatting storage in $CONTROLLER_DIR and $LOG_DIR (cluster id $cluster_id) $format_args"
    # The controller's metadata log holds the features and the SCRAM users.
    if ! "$JAVA" "${TOOL_OPTS[@]}" -cp "$LIBS/*" "$storage_tool" format \
      -t "$cluster_id" -c "$CONTROLLER_PROPS" --ignore-formatted $format_args "${scram_args[@]}" \
      >"$DATA_DIR/format.log" 2>&1; then
      cat "$DATA_DIR/format.log" >&2
      die "formatting the controller's storage failed"
    fi
    echo "$KAFKA_VERSION" >"$DATA_DIR/kafka.version"
    echo "$KAFKA_SECURITY" >"$DATA_DIR/security"
  elif [[ -z ${KAFKA_FORMAT_ARGS-} ]] &&
    grep -q "transaction.version', featureLevel=1" "$DATA_DIR/format.log" 2>/dev/null; then
    say "NOTE: $DATA_DIR was formatted with transaction.version=1 (an older kafka-local.sh did" \
      "so); new clusters finalize 2: run 'wipe' once to reformat it with Kafka's defaults"
  fi
  if [[ ! -f $LOG_DIR/meta.properties ]]; then
    # The broker's log dir: only its identity in the controller's cluster.
    local broker_cluster_id
    broker_cluster_id=$(sed -n 's/^cluster\.id=//p' "$CONTROLLER_DIR/meta.properties")
    if ! "$JAVA" "${TOOL_OPTS[@]}" -cp "$LIBS/*" "$(tool_class storage-tool)" format \
      -t "$broker_cluster_id" -c "$SERVER_PROPS" --ignore-formatted \
      >"$DATA_DIR/format-broker.log" 2>&1; then
      cat "$DATA_DIR/format-broker.log" >&2
      die "formatting the broker's storage failed"
    fi
  fi

  start_controller
  [[ -f $BROKER_LOG ]] && mv -f "$BROKER_LOG" "$BROKER_LOG.prev"
  say "starting Kafka $KAFKA_VERSION on $BOOTSTRAP (controller :$KAFKA_CONTROLLER_PORT, data $DATA_DIR)"
  launch_jvm "$KAFKA_HEAP_OPTS" "$SERVER_PROPS" "$BROKER_LOG"
  pid=$LAUNCHED_PID
  echo "$pid" >"$PID_FILE"

  if ! wait_ready "$pid" "$t_start"; then
    tail_log
    local state
    state=$(proc_state "$pid")
    if [[ -n $state && $state != Z ]]; then
      say "stopping the broker that did not become ready"
      stop_pid "$pid"
      rm -f "$PID_FILE"
      die "broker did not become ready within ${KAFKA_START_TIMEOUT}s"
    fi
    rm -f "$PID_FILE"
    die "broker JVM exited during start-up (see $BROKER_LOG)"
  fi
  say "broker answering after $((SECONDS - t_start))s; warming up transactions"
  if ! warm_up_transactions; then
    tail_log
    die "transaction warm-up (InitProducerId) failed; the broker is still running (pid $pid)"
  fi
  say "broker ready on $BOOTSTRAP (pid $pid, data $DATA_DIR) in $((SECONDS - t_start))s"
}

new_cluster_id() { # 16 random bytes, unpadded base64url (22 chars), not starting with '-'
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ $id != -* ]] && break
  done
  echo "${id:0:22}"
}

# Wait for "Kafka Server started" in broker.log and a successful admin probe.
wait_ready() {
  local pid=$1 t_start=$2 started=""
  # Liveness by the pid (our own child, from $!), not by its command line: while setsid, nohup
  # and the Java launcher exec one another, /proc/<pid>/cmdline can read as empty for a moment,
  # and taking that for a dead JVM once made `up` kill a healthy broker after a kill -9 restart.
  while ((SECONDS - t_start < KAFKA_START_TIMEOUT)); do
    local state
    state=$(proc_state "$pid")
    if [[ -z $state || $state == Z ]]; then
      return 1
    fi
    if [[ -z $started ]] && grep -q "Kafka Server started" "$BROKER_LOG" 2>/dev/null; then
      started=1
    fi
    if [[ -n $started ]] && admin_probe; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

cmd_down() {
  local pid cpid
  if [[ ! -d $DATA_DIR ]]; then
    say "not running (no data dir $DATA_DIR)"
    return 0
  fi
  lock_data_dir
  pid=$(running_pid)
  cpid=$(controller_pid)
  if [[ -z $pid && -z $cpid ]]; then
    if [[ -f $PID_FILE || -f $CONTROLLER_PID_FILE ]]; then
      rm -f "$PID_FILE" "$CONTROLLER_PID_FILE"
      say "not running (removed stale pid files)"
    else
      say "not running"
    fi
    return 0
  fi
  # The broker first: its controlled shutdown needs the controller.
  if [[ -n $pid ]]; then
    say "stopping broker pid $pid ($BOOTSTRAP)"
    stop_pid "$pid"
  fi
  rm -f "$PID_FILE"
  if [[ -n $cpid ]]; then
    say "stopping controller pid $cpid (:$KAFKA_CONTROLLER_PORT)"
    stop_pid "$cpid" "$CONTROLLER_PROPS"
  fi
  rm -f "$CONTROLLER_PID_FILE"
  say "stopped"
}

cmd_status() {
  local pid cpid paused
  pid=$(running_pid)
  cpid=$(controller_pid)
  if [[ -n $pid ]]; then
    paused=""
    [[ $(proc_state "$pid") == T ]] && paused=" (stopped by SIGSTOP)"
    echo "running$paused pid=$pid controller_pid=${cpid:-none} port=$KAFKA_PORT controller_port=$KAFKA_CONTROLLER_PORT version=$KAFKA_VERSION data=$DATA_DIR"
    return 0
  fi
  echo "not running port=$KAFKA_PORT controller_pid=${cpid:-none} data=$DATA_DIR"
  return 3
}

cmd_pid() {
  local pid
  pid=$(running_pid)
  [[ -n $pid ]] || die "broker not running (data $DATA_DIR)"
  echo "$pid"
}

cmd_controller_pid() {
  local pid
  pid=$(controller_pid)
  [[ -n $pid ]] || die "controller not running (data $DATA_DIR)"
  echo "$pid"
}

cmd_wipe() {
  cmd_down
  case "$DATA_DIR" in
    / | "$ROOT" | "${HOME:-/}" | "$ROOT/.cache")
      die "refusing to delete $DATA_DIR" ;;
  esac
  if [[ -d $DATA_DIR ]]; then
    rm -rf -- "$DATA_DIR"
    say "removed $DATA_DIR"
  fi
}

usage() {
  sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

main() {
  local cmd=${1:-help}
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch) cmd_fetch ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    pid) cmd_pid ;;
    controller-pid) cmd_controller_pid ;;
    wipe) cmd_wipe ;;
    bootstrap) echo "$BOOTSTRAP" ;;
    client-env | client-config | acls | add-acls)
      [[ $KAFKA_SECURITY == sasl_ssl && -s $ADMIN_PROPS ]] ||
        die "'$cmd' needs a secured broker: KAFKA_SECURITY=sasl_ssl ... up"
      case "$cmd" in
        client-env) secure_client_env "${1:-}" ;;
        client-config) echo "$ADMIN_PROPS" ;;
        acls) run_tool "$(tool_class acls)" --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_PROPS" "$@" ;;
        add-acls)
          [[ -f ${1:-} ]] || die "usage: $0 add-acls <file of principal, OPERATION, RESOURCE_TYPE, name, PATTERN_TYPE lines>"
          run_tool "$SCRIPT_DIR/kafka/AddAcls.java" "$BOOTSTRAP" "$ADMIN_PROPS" "$1" ;;
      esac ;;
    console-consumer | transactions | topics | consumer-groups | get-offsets | configs)
      local cls
      cls=$(tool_class "$cmd")
      run_tool "$cls" "$@" ;;
    help | -h | --help) usage ;;
    *)
      usage >&2
      die "unknown command '$cmd'" ;;
  esac
}

main "$@"
