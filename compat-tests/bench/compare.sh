#!/usr/bin/env bash
# Side-by-side benchmark: the same `stablemq perf` against StableMQ and RabbitMQ.
#
#   compat-tests/bench/compare.sh [--quick] [--scenarios S1,S2,...] [--duration N]
#                                 [--runs N] [--backlog N] [--keep DIR] [--markdown]
#
# For each scenario, a fresh StableMQ (target/release/stablemq, fresh data dir) and
# a fresh private RabbitMQ node (Debian's rabbitmq-server, installed with apt-get
# if missing; run through the package's own server script, no system service, no
# plugins, its own node name, ports, epmd, mnesia and log dirs and cookie) start on
# free 127.0.0.1 ports. Each run of the scenario goes to both brokers (which one
# goes first alternates), then both stop. While perf runs, the broker's CPU time
# (utime+stime of its process tree, /proc/<pid>/stat) and RSS (VmRSS, sampled
# every 0.2 s) are recorded. The table gives the medians over the runs and the
# ratio StableMQ / RabbitMQ.
#
# Scenarios (issue 4):
#   S1  transient, no confirms, auto-ack, 16 B, 1 producer 1 consumer
#   S2  persistent, confirm window 1000, prefetch 1000, multi-ack 100, 1 KB, 1x1
#       (RabbitMQ: a classic durable queue)
#   S6  fill a backlog of --backlog persistent 1 KB messages, then drain it
#       (peak RSS, fill and drain rates); only when asked for
#   S7  1000 queues at 1 msg/s each (idle cost): broker CPU % and RSS, measured
#       over the second half of a run 3x --duration long
#   S3, S4, S5 are pending the cluster: they need a 3-node StableMQ and a 3-node
#       RabbitMQ (quorum queues), which this script does not start yet.
#
# Options:
#   --quick          one short run per scenario (3 s; S7 9 s): a smoke run
#   --scenarios L    comma-separated list (default S1,S2,S7)
#   --duration N     seconds per run (default 10; --quick 3)
#   --runs N         runs per scenario and broker (default 3; --quick 1)
#   --backlog N      S6 messages (default 1000000; the issue's 5000000 = 5 GB)
#   --keep DIR       keep the per-run JSON results (and broker logs) in DIR
#   --markdown       print the table as Markdown
#
# Exits non-zero if either broker failed to start or a run failed or moved no
# message (this is what the smoke run in the test command checks). Slow numbers
# never fail it. Environment: STABLEMQ_BIN (default target/release/stablemq; built
# with cargo if missing).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
HERE="$ROOT/compat-tests/bench"
PY=$(command -v python3) || { echo "error: python3 is needed" >&2; exit 2; }
BENCH="$HERE/bench.py"
START=$SECONDS

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

QUICK=0 SCENARIOS="S1,S2,S7" DURATION="" RUNS="" BACKLOG=1000000 KEEP="" MARKDOWN=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --scenarios) SCENARIOS=${2:?--scenarios needs a list}; shift ;;
        --scenarios=*) SCENARIOS=${1#*=} ;;
        --duration) DURATION=${2:?--duration needs seconds}; shift ;;
        --duration=*) DURATION=${1#*=} ;;
        --runs) RUNS=${2:?--runs needs a number}; shift ;;
        --runs=*) RUNS=${1#*=} ;;
        --backlog) BACKLOG=${2:?--backlog needs a number}; shift ;;
        --backlog=*) BACKLOG=${1#*=} ;;
        --keep) KEEP=${2:?--keep needs a directory}; shift ;;
        --keep=*) KEEP=${1#*=} ;;
        --markdown) MARKDOWN=--markdown ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done
if [[ $QUICK -eq 1 ]]; then
    DURATION=${DURATION:-3} RUNS=${RUNS:-1}
    [[ $BACKLOG -ne 1000000 ]] || BACKLOG=20000
else
    DURATION=${DURATION:-10} RUNS=${RUNS:-3}
fi
[[ $DURATION =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--duration must be a number of seconds"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer"
[[ $BACKLOG =~ ^[1-9][0-9]*$ ]] || die "--backlog must be a positive integer"
IFS=',' read -r -a SCEN <<<"$SCENARIOS"
for s in "${SCEN[@]}"; do
    case "$s" in
        S1|S2|S6|S7) ;;
        S3|S4|S5) die "$s is pending the cluster (a 3-node StableMQ and RabbitMQ); see --help" ;;
        *) die "unknown scenario '$s' (S1, S2, S6, S7)" ;;
    esac
done

# --- cleanup: every process started here is stopped by its pid ---------------------
WORK=$(mktemp -d -t stablemq-bench.XXXXXX)
OUT=${KEEP:-$WORK/results}
mkdir -p "$OUT"
SMQ_PID="" RMQ_PID="" RMQ_BEAM_PIDFILE="" EPMD_PID=""

stop_pid() { # pid, seconds to wait after SIGTERM before SIGKILL
    local pid=$1 wait=${2:-10} i
    [[ -n "$pid" ]] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        if ! ps -p "$pid" -o stat= 2>/dev/null | grep -qv Z; then break; fi
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

stop_brokers() {
    local beam=""
    stop_pid "$SMQ_PID" 10
    if [[ -n "$RMQ_BEAM_PIDFILE" && -s "$RMQ_BEAM_PIDFILE" ]]; then
        beam=$(cat "$RMQ_BEAM_PIDFILE")
    fi
    stop_pid "$RMQ_PID" 30
    # The start script forwards SIGTERM to the Erlang VM; make sure it is gone.
    if [[ -n "$beam" ]] && kill -0 "$beam" 2>/dev/null; then
        kill -KILL "$beam" 2>/dev/null || true
    fi
    stop_pid "$EPMD_PID" 5
    SMQ_PID="" RMQ_PID="" RMQ_BEAM_PIDFILE="" EPMD_PID=""
}
cleanup() {
    stop_brokers
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- brokers ---------------------------------------------------------------------------
BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
if [[ ! -x $BIN ]]; then
    [[ -z ${STABLEMQ_BIN:-} ]] || die "STABLEMQ_BIN=$BIN is not executable"
    log "building target/release/stablemq"
    cargo build --release -p stablemq
fi

RABBITMQ_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
ensure_rabbitmq() {
    [[ -x $RABBITMQ_SERVER ]] && return 0
    [[ $(id -u) -eq 0 ]] || die "RabbitMQ is not installed and installing it needs root (apt-get install rabbitmq-server)"
    log "installing Debian's rabbitmq-server"
    # Keep the package's own service from starting (it would listen on all interfaces).
    local policy=/usr/sbin/policy-rc.d added=""
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        added=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
    [[ -n $added ]] && rm -f "$policy"
    [[ -x $RABBITMQ_SERVER ]] || die "apt-get installed rabbitmq-server but $RABBITMQ_SERVER is missing"
}

start_stablemq() { # scenario
    local dir="$WORK/stablemq-$1" port
    mkdir -p "$dir"
    read -r port < <("$PY" "$BENCH" free-ports 1)
    "$BIN" serve --bind 127.0.0.1 --amqp-port "$port" --prometheus-port 0 --management-port 0 \
        --data-dir "$dir/data" >"$OUT/stablemq-$1.log" 2>&1 &
    SMQ_PID=$!
    SMQ_URI="amqp://guest:guest@127.0.0.1:$port/%2f"
    "$PY" "$BENCH" wait-amqp "$port" 60 "$SMQ_PID" ||
        { tail -n 20 "$OUT/stablemq-$1.log" >&2; return 1; }
}

start_rabbitmq() { # scenario
    local dir="$WORK/rabbitmq-$1" port dist epmd_port
    mkdir -p "$dir"/{home,mnesia,log}
    read -r port dist epmd_port < <("$PY" "$BENCH" free-ports 3)
    echo '[].' >"$dir/enabled_plugins"
    : >"$dir/rabbitmq-env.conf"
    printf 'loopback_users.guest = true\nlog.console = false\nlog.file.level = warning\n' >"$dir/rabbitmq.conf"
    od -An -N20 -tx1 /dev/urandom | tr -d ' \n' >"$dir/home/.erlang.cookie"
    chmod 400 "$dir/home/.erlang.cookie"
    # Our own epmd on loopback, on a port of its own, stopped by pid afterwards.
    epmd -address 127.0.0.1 -port "$epmd_port" >"$dir/epmd.log" 2>&1 &
    EPMD_PID=$!
    RMQ_BEAM_PIDFILE="$dir/rabbitmq.pid"
    env HOME="$dir/home" \
        ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$epmd_port" \
        RABBITMQ_NODENAME="bench-$1-$$@localhost" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" \
        RABBITMQ_DIST_PORT="$dist" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
        RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
        RABBITMQ_PLUGINS_EXPAND_DIR="$dir/plugins-expand" \
        RABBITMQ_MNESIA_BASE="$dir/mnesia" \
        RABBITMQ_LOG_BASE="$dir/log" \
        RABBITMQ_PID_FILE="$RMQ_BEAM_PIDFILE" \
        "$RABBITMQ_SERVER" >"$OUT/rabbitmq-$1.log" 2>&1 &
    RMQ_PID=$!
    RMQ_URI="amqp://guest:guest@127.0.0.1:$port/%2f"
    "$PY" "$BENCH" wait-amqp "$port" 180 "$RMQ_PID" ||
        { tail -n 20 "$OUT/rabbitmq-$1.log" "$dir"/log/*.log >&2 || true; return 1; }
}

# --- run -----------------------------------------------------------------------------------
ensure_rabbitmq
command -v epmd >/dev/null || die "epmd (Erlang) is missing"
RMQ_VERSION=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')
ERL_VERSION=$(dpkg-query -W -f '${Version}' erlang-base 2>/dev/null || echo '?')
SMQ_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
log "StableMQ $BIN (git $SMQ_REV); RabbitMQ $RMQ_VERSION (Erlang $ERL_VERSION)"
log "scenarios ${SCEN[*]}; $RUNS run(s) of ${DURATION} s each per broker$([[ " ${SCEN[*]} " == *" S6 "* ]] && echo "; S6 backlog $BACKLOG")"
"$PY" "$BENCH" machine | sed 's/^/    /'

status=0
for s in "${SCEN[@]}"; do
    if ! start_stablemq "$s"; then
        echo "FAILED: StableMQ did not start for $s" >&2
        status=1
        stop_brokers
        continue
    fi
    if ! start_rabbitmq "$s"; then
        echo "FAILED: RabbitMQ did not start for $s" >&2
        status=1
        stop_brokers
        continue
    fi
    "$PY" "$BENCH" scenario "$s" --perf "$BIN" --out "$OUT" --runs "$RUNS" \
        --duration "$DURATION" --backlog "$BACKLOG" \
        --broker "stablemq=$SMQ_URI,$SMQ_PID" --broker "rabbitmq=$RMQ_URI,$RMQ_PID" || status=1
    stop_brokers
done

echo
log "results ($((SECONDS - START)) s in all)"
"$PY" "$BENCH" table "$OUT" $MARKDOWN || status=1
printf '    after the run: '
"$PY" "$BENCH" machine | grep '^load'
[[ -z $KEEP ]] || log "per-run results and broker logs kept in $KEEP"
if [[ $status -ne 0 ]]; then
    echo "FAILED: a broker did not start, or a run failed or moved no message (see above)" >&2
fi
exit $status
