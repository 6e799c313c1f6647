#!/usr/bin/env bash
# servers.sh — a real PostgreSQL and a real Redis from Debian's packages, on their own ports and
# data dirs under .cache/ (git-ignored), for the idempotent-consumer tests and benchmark. Like
# scripts/kafka-local.sh: no Docker, nothing downloaded but Debian packages.
#
# Run from anywhere (paths are relative to the repo root = this script's dir/..):
#
#   scripts/servers.sh install          # apt-get install postgresql redis-server prometheus, if missing
#   scripts/servers.sh up [postgres|redis]    # start (both by default), wait until they answer
#   scripts/servers.sh status [postgres|redis]
#   scripts/servers.sh down [postgres|redis]  # stop by pid (SIGTERM, SIGKILL after 30 s)
#   scripts/servers.sh wipe [postgres|redis]  # down + delete the data dir
#   scripts/servers.sh dsn | redis-url        # print the connection strings
#   scripts/servers.sh redis-bin              # print the redis-server binary (tests start
#                                             # throw-away servers of their own with it)
#
# What you should see from `up`:
#   servers: postgres ready on 127.0.0.1:15432 (pid 1234, data .../.cache/pg-run/15432) in 2s
#   servers: redis ready on 127.0.0.1:16379 (pid 1240, data .../.cache/redis-run/16379) in 0s
# The first `up` on a fresh machine also runs `install` (apt-get update + install: about a
# minute) and initdb (about 3 s). A second `up` prints "already running".
#
# PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` user the
# Debian package creates (initdb and the server run through runuser). The data dir must then be
# reachable by that user; when the repo sits under a directory it cannot enter (a clone under
# /root), the data dir moves to /var/tmp/idem-servers/<port> and `up` says so.
#
# Environment:
#   PG_PORT      PostgreSQL port, default 15432     PG_DATA_DIR     default .cache/pg-run/$PG_PORT
#   REDIS_PORT   Redis port, default 16379          REDIS_DATA_DIR  default .cache/redis-run/$REDIS_PORT
#   REDIS_APPENDONLY  yes|no (default yes: appendfsync everysec, see docs/idempotent-consumer.md)
#   SERVERS_START_TIMEOUT  seconds `up` waits, default 60
# The test server is for tests: it trusts every local TCP connection (no password), listens on
# 127.0.0.1 only and has no Unix socket.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
PG_PORT=${PG_PORT:-15432}
REDIS_PORT=${REDIS_PORT:-16379}
REDIS_APPENDONLY=${REDIS_APPENDONLY:-yes}
SERVERS_START_TIMEOUT=${SERVERS_START_TIMEOUT:-60}
PG_DATA_DIR=${PG_DATA_DIR:-$ROOT/.cache/pg-run/$PG_PORT}
REDIS_DATA_DIR=${REDIS_DATA_DIR:-$ROOT/.cache/redis-run/$REDIS_PORT}

say() { echo "servers: $*" >&2; }
die() { echo "servers: ERROR: $*" >&2; exit 1; }

# --------------------------------------------------------------------------------------------
# binaries

pg_bindir() { # the newest /usr/lib/postgresql/<ver>/bin with a postgres binary
  local d best=""
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x $d/postgres && -x $d/initdb && -x $d/pg_ctl ]] && best=$d
  done
  [[ -n $best ]] || return 1
  # versions sort as strings: 15 < 16 < 17 holds for the releases Debian ships
  printf '%s\n' "$best"
}

redis_bin() { command -v redis-server 2>/dev/null || { [[ -x /usr/bin/redis-server ]] && echo /usr/bin/redis-server; }; }

cmd_install() {
  local want=()
  pg_bindir >/dev/null || want+=(postgresql)
  redis_bin >/dev/null || want+=(redis-server)
  command -v promtool >/dev/null || want+=(prometheus) # alert rules' tests (tests/observe)
  if ((${#want[@]} == 0)); then
    say "postgresql, redis-server and prometheus already installed"
    return 0
  fi
  [[ $(id -u) == 0 ]] || die "need ${want[*]}: run 'sudo apt-get install -y ${want[*]}' (or this script as root)"
  command -v apt-get >/dev/null || die "need ${want[*]} and apt-get is not here (not Debian?)"
  say "installing ${want[*]} from Debian's packages ..."
  # The packages' post-install scripts would start system-wide servers on 5432 / 6379: tell
  # invoke-rc.d not to start anything (policy-rc.d exit 101), and put the file back afterwards.
  local policy=/usr/sbin/policy-rc.d had_policy=""
  [[ -e $policy ]] && had_policy=1
  if [[ -z $had_policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
  fi
  local rc=0
  {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}"
  } >&2 || rc=$?
  [[ -n $had_policy ]] || rm -f "$policy"
  ((rc == 0)) || die "apt-get install ${want[*]} failed (exit $rc)"
  pg_bindir >/dev/null || die "postgresql installed but no /usr/lib/postgresql/*/bin/postgres"
  redis_bin >/dev/null || die "redis-server installed but not on PATH"
  command -v promtool >/dev/null || die "prometheus installed but promtool not on PATH"
  say "installed ${want[*]}"
}

# --------------------------------------------------------------------------------------------
# helpers

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

proc_state() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  echo "${stat%% *}"
}

alive() { [[ $1 =~ ^[0-9]+$ ]] && local s && s=$(proc_state "$1") && [[ -n $s && $s != Z ]]; }

# pid from a pid file if that process is alive and its command line contains $2
pid_from() {
  local file=$1 needle=$2 pid cmdline
  [[ -f $file ]] || return 0
  pid=$(head -1 "$file" | tr -dc '0-9')
  [[ -n $pid ]] && alive "$pid" || return 0
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
  [[ $cmdline == *"$needle"* ]] && echo "$pid"
  return 0
}

stop_pid() { # SIGTERM, wait 30 s, SIGKILL
  local pid=$1 name=$2 i
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    alive "$pid" || return 0
    sleep 0.1
  done
  say "$name pid $pid did not stop within 30s after SIGTERM; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || return 0
    sleep 0.1
  done
  die "$name pid $pid survived SIGKILL"
}

as_pg_user() { # run a command as the cluster's owner (postgres when we are root)
  if [[ $(id -u) == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# --------------------------------------------------------------------------------------------
# PostgreSQL

# As root the cluster belongs to `postgres`, which must be able to enter the data dir; when it
# cannot (the repo under /root), the data dir is /var/tmp/idem-servers/pg-$PG_PORT instead.
pg_pick_data_dir() {
  [[ $(id -u) == 0 ]] || return 0
  local probe=$PG_DATA_DIR
  while [[ ! -d $probe ]]; do probe=$(dirname "$probe"); done
  if ! runuser -u postgres -- test -x "$probe" 2>/dev/null; then
    PG_DATA_DIR=/var/tmp/idem-servers/pg-$PG_PORT
    PG_FALLBACK=1
  fi
}
PG_FALLBACK=""

pg_prepare_data_dir() {
  mkdir -p "$PG_DATA_DIR"
  [[ -z $PG_FALLBACK ]] || say "user postgres cannot enter the repo's .cache/; data dir $PG_DATA_DIR"
  if [[ $(id -u) == 0 ]]; then
    getent passwd postgres >/dev/null || die "no 'postgres' user (the postgresql package creates it)"
    chown postgres: "$PG_DATA_DIR"
  fi
  chmod 700 "$PG_DATA_DIR"
}

pg_pid() { pid_from "$PG_DATA_DIR/postmaster.pid" postgres; }

pg_ready() {
  local bindir=$1
  "$bindir/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 2 2>/dev/null
}

pg_up() {
  local t0=$SECONDS bindir pid
  bindir=$(pg_bindir) || { cmd_install; bindir=$(pg_bindir); }
  pg_pick_data_dir
  pg_prepare_data_dir
  pid=$(pg_pid)
  if [[ -n $pid ]]; then
    if pg_ready "$bindir"; then
      say "postgres already running on 127.0.0.1:$PG_PORT (pid $pid, data $PG_DATA_DIR)"
      return 0
    fi
  elif port_in_use "$PG_PORT"; then
    die "port 127.0.0.1:$PG_PORT is taken by another program; pick another with PG_PORT"
  fi
  if [[ ! -f $PG_DATA_DIR/PG_VERSION ]]; then
    say "initdb $PG_DATA_DIR ($("$bindir/postgres" --version))"
    as_pg_user "$bindir/initdb" -D "$PG_DATA_DIR" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
      >"$PG_DATA_DIR.initdb.log" 2>&1 || { cat "$PG_DATA_DIR.initdb.log" >&2; die "initdb failed"; }
  fi
  if [[ -z $pid ]]; then
    rm -f "$PG_DATA_DIR/postmaster.pid"
    # No Unix socket (its path would depend on where the repo is), 127.0.0.1 only.
    as_pg_user "$bindir/pg_ctl" -D "$PG_DATA_DIR" -l "$PG_DATA_DIR/server.log" -s -w \
      -t "$SERVERS_START_TIMEOUT" start -o "-p $PG_PORT -c listen_addresses=127.0.0.1 \
      -c unix_socket_directories='' -c max_connections=200 -c fsync=on \
      -c log_min_messages=warning -c log_checkpoints=off" >/dev/null ||
      { tail -n 30 "$PG_DATA_DIR/server.log" >&2; die "postgres did not start"; }
  fi
  while ! pg_ready "$bindir"; do
    ((SECONDS - t0 < SERVERS_START_TIMEOUT)) || die "postgres on $PG_PORT not ready in ${SERVERS_START_TIMEOUT}s"
    sleep 0.2
  done
  say "postgres ready on 127.0.0.1:$PG_PORT (pid $(pg_pid), data $PG_DATA_DIR) in $((SECONDS - t0))s"
}

pg_down() {
  local pid
  pg_pick_data_dir
  pid=$(pg_pid)
  [[ -n $pid ]] || { say "postgres not running"; return 0; }
  say "stopping postgres pid $pid (127.0.0.1:$PG_PORT)"
  # SIGINT is PostgreSQL's "fast" shutdown: running transactions are rolled back.
  kill -INT "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || { say "postgres stopped"; return 0; }
    sleep 0.1
  done
  stop_pid "$pid" postgres
  say "postgres stopped"
}

pg_status() {
  local pid
  pg_pick_data_dir
  pid=$(pg_pid)
  if [[ -n $pid ]]; then echo "postgres running pid=$pid port=$PG_PORT data=$PG_DATA_DIR"; return 0; fi
  echo "postgres not running port=$PG_PORT data=$PG_DATA_DIR"
  return 3
}

# --------------------------------------------------------------------------------------------
# Redis

redis_pid() { pid_from "$REDIS_DATA_DIR/redis.pid" redis-server; }

redis_ping() { # PING over /dev/tcp, no redis-cli needed
  local reply
  reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REDIS_PORT && printf 'PING\r\n' >&3 && head -c 7 <&3" 2>/dev/null) || return 1
  [[ $reply == +PONG* ]]
}

redis_up() {
  local t0=$SECONDS bin pid
  bin=$(redis_bin) || { cmd_install; bin=$(redis_bin); }
  mkdir -p "$REDIS_DATA_DIR"
  pid=$(redis_pid)
  if [[ -n $pid ]] && redis_ping; then
    say "redis already running on 127.0.0.1:$REDIS_PORT (pid $pid, data $REDIS_DATA_DIR)"
    return 0
  fi
  if [[ -z $pid ]] && port_in_use "$REDIS_PORT"; then
    die "port 127.0.0.1:$REDIS_PORT is taken by another program; pick another with REDIS_PORT"
  fi
  if [[ -z $pid ]]; then
    {
      echo "# Written by scripts/servers.sh on every start."
      echo "port $REDIS_PORT"
      echo "bind 127.0.0.1"
      echo "dir $REDIS_DATA_DIR"
      echo "pidfile $REDIS_DATA_DIR/redis.pid"
      echo "logfile $REDIS_DATA_DIR/redis.log"
      echo "daemonize no"
      echo "save \"\""
      echo "appendonly $REDIS_APPENDONLY"
      echo "appendfsync everysec"
      echo "# idempotency records must not be evicted: a full Redis refuses writes instead"
      echo "maxmemory-policy noeviction"
    } >"$REDIS_DATA_DIR/redis.conf"
    setsid nohup "$bin" "$REDIS_DATA_DIR/redis.conf" >/dev/null 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$REDIS_DATA_DIR/redis.pid"
  fi
  while ! redis_ping; do
    alive "$pid" || { tail -n 20 "$REDIS_DATA_DIR/redis.log" >&2 || true; die "redis-server exited"; }
    ((SECONDS - t0 < SERVERS_START_TIMEOUT)) || die "redis on $REDIS_PORT not ready in ${SERVERS_START_TIMEOUT}s"
    sleep 0.1
  done
  say "redis ready on 127.0.0.1:$REDIS_PORT (pid $pid, data $REDIS_DATA_DIR) in $((SECONDS - t0))s"
}

redis_down() {
  local pid
  pid=$(redis_pid)
  [[ -n $pid ]] || { say "redis not running"; return 0; }
  say "stopping redis pid $pid (127.0.0.1:$REDIS_PORT)"
  stop_pid "$pid" redis
  rm -f "$REDIS_DATA_DIR/redis.pid"
  say "redis stopped"
}

redis_status() {
  local pid
  pid=$(redis_pid)
  if [[ -n $pid ]]; then echo "redis running pid=$pid port=$REDIS_PORT data=$REDIS_DATA_DIR"; return 0; fi
  echo "redis not running port=$REDIS_PORT data=$REDIS_DATA_DIR"
  return 3
}

# --------------------------------------------------------------------------------------------

wipe_dir() {
  case "$1" in
    / | "$ROOT" | "$ROOT/.cache" | "${HOME:-/}") die "refusing to delete $1" ;;
  esac
  rm -rf -- "$1" "$1.initdb.log"
  say "deleted $1"
}

main() {
  local cmd=${1:-} which=${2:-all} rc=0
  case "$which" in all | postgres | redis) ;; *) die "unknown server '$which' (postgres or redis)" ;; esac
  case "$cmd" in
    install) cmd_install ;;
    up | start)
      [[ $which == redis ]] || pg_up
      [[ $which == postgres ]] || redis_up
      ;;
    down | stop)
      [[ $which == redis ]] || pg_down
      [[ $which == postgres ]] || redis_down
      ;;
    status)
      [[ $which == redis ]] || pg_status || rc=$?
      [[ $which == postgres ]] || redis_status || rc=$?
      return "$rc"
      ;;
    wipe)
      if [[ $which != redis ]]; then pg_down; pg_pick_data_dir; wipe_dir "$PG_DATA_DIR"; fi
      if [[ $which != postgres ]]; then redis_down; wipe_dir "$REDIS_DATA_DIR"; fi
      ;;
    dsn) echo "postgresql://postgres@127.0.0.1:$PG_PORT/postgres" ;;
    redis-url) echo "redis://127.0.0.1:$REDIS_PORT/0" ;;
    redis-bin) redis_bin || die "redis-server is not installed (run: $0 install)" ;;
    *)
      sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
      [[ -z $cmd ]] || die "unknown command '$cmd'"
      return 2
      ;;
  esac
}

main "$@"
