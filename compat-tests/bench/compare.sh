#!/usr/bin/env bash
# Side-by-side benchmark: the same `stablemq perf` against StableMQ and RabbitMQ.
#
#   compat-tests/bench/compare.sh [--quick] [--scenarios S1,S2,...] [--duration N]
#                                 [--runs N] [--backlog N] [--keep DIR] [--markdown]
#                                 [--no-proxy] [--real-clients] [--clients go,java,perf]
#                                 [--streams] [--messages N]
#
# For each scenario, a fresh StableMQ (a copy of target/release/stablemq, fresh data
# dir) and a fresh private RabbitMQ node (Debian's rabbitmq-server, installed with
# apt-get if missing; run through the package's own server script, no system
# service, no plugins, its own node name, ports, epmd, mnesia and log dirs and
# cookie) start on free 127.0.0.1 ports. Each run of the scenario goes to both
# brokers (which one goes first alternates), then both stop. While perf runs, the
# broker's CPU time (utime+stime of its process tree, /proc/<pid>/stat) and RSS
# (VmRSS, sampled every 0.2 s) are recorded. The table gives the medians over the
# runs and the ratio StableMQ / RabbitMQ.
#
# S3, S4 and S5 start two 3-node clusters instead, fresh for each scenario:
# StableMQ from examples/cluster/node{1,2,3}.toml (ports and data dirs rewritten
# to free ports and a temp dir; metrics off), and three private RabbitMQ nodes
# (one epmd, one cookie) joined with rabbitmqctl join_cluster. perf connects to
# StableMQ's master (from `stablemq ctl cluster-status --json`) and to the first
# RabbitMQ node, which declares the quorum queues and so leads them. CPU and RSS
# are summed over all three nodes' process trees. A StableMQ run fails if the
# master changed (a failover). After S3's runs, one more run of S3 ("S3p") goes
# through a StableMQ slave (which proxies to the master) and through a RabbitMQ
# node that is not the queue's leader (unless --no-proxy).
#
# Scenarios (issue 4):
#   S1  transient, no confirms, auto-ack, 16 B, 1 producer 1 consumer
#   S2  persistent, confirm window 1000, prefetch 1000, multi-ack 100, 1 KB, 1x1
#       (RabbitMQ: a classic durable queue)
#   S6  fill a backlog of --backlog persistent 1 KB messages, then drain it
#       (peak RSS, fill and drain rates); only when asked for
#   S7  1000 queues at 1 msg/s each (idle cost): broker CPU % and RSS, measured
#       over the second half of a run 3x --duration long
#   S3  S2 on 3-node clusters: StableMQ (3 stores, quorum 2) vs a RabbitMQ quorum
#       queue (x-queue-type=quorum, 3 members); both get --queue-args x-queue-type=quorum
#   S4  S3 with 4 producers and 4 consumers on 4 queues
#   S5  S3's setup at fixed rates of 1k, 10k and 50k msg/s (one run of --duration
#       per rate): confirm and end-to-end latency p50/p99
#
# Real-client scenarios (issue 23; --real-clients runs R1 to R4): instead of
# `stablemq perf`, which packs about 64 KiB of publishes into each write, the
# load programs of compat-tests/bench/clients/, on RabbitMQ's own client
# libraries, which write each publish on its own: clients/go/perftest.go
# (amqp091-go) and clients/java/PerfTest.java (the RabbitMQ Java client), both
# from Debian's packages (golang-go, golang-github-rabbitmq-amqp091-go-dev,
# librabbitmq-client-java, default-jdk-headless, libslf4j-java, installed with
# apt-get if missing) and built into the temp dir. Each phase of a scenario is one
# run of --duration with one client; each row reports the rate, its latency p50
# and p99 and the broker's CPU per message.
#   R1  S1 (16 B transient, auto-ack, no confirms), Go and Java
#   R2  S2 (1 KB persistent, prefetch 1000, multi-ack 100) at confirm windows 1,
#       10, 100 and 1000, Go and Java; and `stablemq perf --frames-per-write 1`
#       with S2's flags (perf-fpw1)
#   R3  R2's client phases on the 3-node clusters of S3 (a RabbitMQ quorum queue)
#   R4  100 producers (100 connections) at 100 msg/s each, 1 KB persistent,
#       confirm window 10, and 1 consumer, Go and Java
#
# Stream scenarios (issue 22; --streams runs ST1 and ST2): a fresh single
# StableMQ with its stream protocol port on a free loopback port, and a fresh
# RabbitMQ node with the rabbitmq_stream plugin (scripts/rabbitmq-node.sh start
# --stream --no-management). Per message size (16 B, then 1 KB), one row
# publishes --messages N messages with confirms from 1 producer to a new
# stream, then two rows read all N from `first`, with 1 and then 10 consumers
# (each consumer reads all N; the rate counts every consumer's messages). Every
# row is bounded by the count and a time limit; each row reports its rate and
# the broker's CPU per message.
#   ST1 over the stream protocol (port 5552's protocol): compat-tests/bench/streams.py
#       on rstream, run by the Python of .venv (STREAM_PYTHON overrides it);
#       it reads the broker's CPU (/proc, the same counters) around its own
#       publishes or subscriptions, so Python's start is left out
#   ST2 over AMQP 0-9-1 stream queues (x-queue-type stream): `stablemq perf -x 1
#       -y 0 -c 1000 -C N --no-purge --queue-args x-queue-type=stream` publishes,
#       and the Go program (clients/go, amqp091-go) reads with basic.qos 1000,
#       basic.consume x-stream-offset=first, multi-ack 100 (--offset first --count N)
#
# Options:
#   --quick          one short run per scenario (3 s; S7 9 s): a smoke run
#   --scenarios L    comma-separated list (default S1,S2,S3,S4,S5,S7)
#   --duration N     seconds per run (default 10; --quick 3)
#   --runs N         runs per scenario and broker (default 3; --quick 1)
#   --backlog N      S6 messages (default 1000000; the issue's 5000000 = 5 GB)
#   --keep DIR       keep the per-run JSON results (and broker logs) in DIR
#   --markdown       print the table as Markdown
#   --no-proxy       skip the extra S3 run through a non-master node (S3p)
#   --real-clients   run the real-client scenarios R1,R2,R3,R4 (unless --scenarios
#                    names what to run; it may name S* and R* alike)
#   --clients L      in the R scenarios, only the phases of these clients
#                    (comma-separated: go, java, perf; default all). A phase
#                    left out is named in the output and has no row in the table.
#   --streams        run the stream scenarios ST1,ST2 (unless --scenarios names
#                    what to run; with --real-clients too: R1-R4 and ST1,ST2)
#   --messages N     messages per stream row (default 200000; --quick 20000)
#
# Exits non-zero if either broker failed to start or a run failed or moved no
# message (this is what the smoke run in the test command checks). Slow numbers
# never fail it. Environment: STABLEMQ_BIN (default target/release/stablemq; if it
# is missing, waited for for a minute (someone may be rebuilding it), then built
# with cargo). The binary is copied at the start, so a rebuild during the run
# does not change what is measured. RMQ_EXTRA_ERL_ARGS adds Erlang VM flags to
# every RabbitMQ node (e.g. "+S 1:1", one scheduler, to compare with StableMQ's
# worker_threads = 1; docs/benchmarks.md). Every broker process (all six in a cluster
# scenario, with their children, and epmd) is stopped by pid when a scenario
# ends, and on error or Ctrl-C.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
HERE="$ROOT/compat-tests/bench"
PY=$(command -v python3) || { echo "error: python3 is needed" >&2; exit 2; }
BENCH="$HERE/bench.py"
START=$SECONDS

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

QUICK=0 SCENARIOS="" DURATION="" RUNS="" BACKLOG=1000000 KEEP="" MARKDOWN="" PROXY=1 REAL=0 CLIENTS="go,java,perf"
STREAMS=0 MESSAGES=""
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
        --no-proxy) PROXY=0 ;;
        --real-clients) REAL=1 ;;
        --clients) CLIENTS=${2:?--clients needs a list}; shift ;;
        --clients=*) CLIENTS=${1#*=} ;;
        --streams) STREAMS=1 ;;
        --messages) MESSAGES=${2:?--messages needs a number}; shift ;;
        --messages=*) MESSAGES=${1#*=} ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
    shift
done
if [[ $QUICK -eq 1 ]]; then
    DURATION=${DURATION:-3} RUNS=${RUNS:-1} MESSAGES=${MESSAGES:-20000}
    [[ $BACKLOG -ne 1000000 ]] || BACKLOG=20000
else
    DURATION=${DURATION:-10} RUNS=${RUNS:-3} MESSAGES=${MESSAGES:-200000}
fi
[[ $DURATION =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--duration must be a number of seconds"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer"
[[ $BACKLOG =~ ^[1-9][0-9]*$ ]] || die "--backlog must be a positive integer"
[[ $MESSAGES =~ ^[1-9][0-9]*$ ]] || die "--messages must be a positive integer"
if [[ -z $SCENARIOS ]]; then
    if [[ $REAL -eq 1 && $STREAMS -eq 1 ]]; then SCENARIOS="R1,R2,R3,R4,ST1,ST2"
    elif [[ $REAL -eq 1 ]]; then SCENARIOS="R1,R2,R3,R4"
    elif [[ $STREAMS -eq 1 ]]; then SCENARIOS="ST1,ST2"
    else SCENARIOS="S1,S2,S3,S4,S5,S7"; fi
fi
IFS=',' read -r -a SCEN <<<"$SCENARIOS"
NEED_CLIENTS=0 NEED_GO=0 NEED_RSTREAM=0
for s in "${SCEN[@]}"; do
    case "$s" in
        S1|S2|S3|S4|S5|S6|S7) ;;
        R1|R2|R3|R4) NEED_CLIENTS=1 ;;
        ST1) NEED_RSTREAM=1 ;;
        ST2) NEED_GO=1 ;;
        *) die "unknown scenario '$s' (S1 to S7, R1 to R4, ST1, ST2)" ;;
    esac
done
IFS=',' read -r -a CLIENT_LIST <<<"$CLIENTS"
for c in "${CLIENT_LIST[@]}"; do
    case "$c" in
        go|java|perf) ;;
        *) die "unknown client '$c' (go, java, perf)" ;;
    esac
done
has_client() { [[ ",$CLIENTS," == *",$1,"* ]]; }
# ST1's Python: one with rstream (the pinned .venv that scripts/test.sh makes).
STREAM_PY=${STREAM_PYTHON:-$ROOT/.venv/bin/python}
if [[ $NEED_RSTREAM -eq 1 ]]; then
    if [[ ! -x $STREAM_PY ]] || ! "$STREAM_PY" "$BENCH" has-rstream; then
        die "ST1 needs a Python with rstream: $STREAM_PY has none (scripts/test.sh makes .venv; or set STREAM_PYTHON)"
    fi
fi

# --- cleanup: every process started here is stopped by its pid ---------------------
WORK=$(mktemp -d -t stablemq-bench.XXXXXX)
OUT=${KEEP:-$WORK/results}
mkdir -p "$OUT"
# Broker processes of the current scenario: StableMQ node pids, RabbitMQ start-script
# pids (and the beam.smp pid files), and the RabbitMQ epmd. RMQ_NODE_DIRS: the dirs
# of nodes started with scripts/rabbitmq-node.sh (the stream scenarios), whose pid
# files that script's stop reads too (in case we were stopped during its start).
SMQ_PIDS=() RMQ_PIDS=() RMQ_BEAM_PIDFILES=() EPMD_PID="" RMQ_NODE_DIRS=()
CHILD="" # the helper (bench.py, and the perf it runs) that the script waits for

live_pids() { # pid... -> those that exist and are not zombies
    [[ $# -gt 0 ]] || return 0
    ps -o pid=,stat= -p "$(IFS=,; echo "$*")" 2>/dev/null | awk '$2 !~ /^Z/ {print $1}'
}

tree_pids() { # root pid... -> the roots and all their descendants
    ps -e -o pid=,ppid= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do { more = 0
                 for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; more = 1 }
            } while (more)
            for (p in keep) print p
        }'
}

stop_tree() { # seconds to wait after SIGTERM before SIGKILL, root pid...
    local wait=$1 i p all left roots=()
    shift
    for p in "$@"; do [[ -n $p ]] && roots+=("$p"); done
    [[ ${#roots[@]} -gt 0 ]] || return 0
    # Every process of the trees, listed before they start to go away; SIGKILL
    # reaches whatever of them is left after the grace period.
    mapfile -t all < <(tree_pids "${roots[@]}")
    kill -TERM "${roots[@]}" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do
        [[ -n $(live_pids "${all[@]}") ]] || break
        sleep 0.1
    done
    mapfile -t left < <(live_pids "${all[@]}")
    [[ ${#left[@]} -eq 0 ]] || kill -KILL "${left[@]}" 2>/dev/null || true
    for p in "${roots[@]}"; do wait "$p" 2>/dev/null || true; done
}

report_dead() { # say which StableMQ node died before we stopped it, and how
    local i pid rc
    for i in "${!SMQ_PIDS[@]}"; do
        pid=${SMQ_PIDS[i]}
        if [[ -z $(live_pids "$pid") ]]; then
            rc=0
            wait "$pid" 2>/dev/null || rc=$?
            echo "    note: StableMQ node $((i + 1)) (pid $pid) had exited (status $rc) before the scenario ended" >&2
        fi
    done
}

stop_brokers() {
    local f beams=()
    for f in "${RMQ_BEAM_PIDFILES[@]}"; do
        [[ -s $f ]] && beams+=("$(cat "$f")")
    done
    # StableMQ nodes, and the RabbitMQ start scripts (which forward SIGTERM to the
    # Erlang VM) together with their VMs, all at once.
    stop_tree 30 "${SMQ_PIDS[@]}" "${RMQ_PIDS[@]}" "${beams[@]}"
    stop_tree 5 "$EPMD_PID"
    for f in "${RMQ_NODE_DIRS[@]}"; do
        "$ROOT/scripts/rabbitmq-node.sh" stop --dir "$f" >/dev/null 2>&1 || true
        [[ -z $KEEP ]] || cp "$f/server.log" "$OUT/rabbitmq-$(basename "$f")-server.log" 2>/dev/null || true
    done
    SMQ_PIDS=() RMQ_PIDS=() RMQ_BEAM_PIDFILES=() EPMD_PID="" RMQ_NODE_DIRS=()
}
# Long helpers run in the background and are waited for, so that a signal to this
# script is handled at once (bash runs traps only between foreground commands).
run_child() { # command...
    local rc=0
    "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return $rc
}
# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
cleanup() {
    if [[ -n $CHILD ]]; then
        # bench.py and its perf: all of them, not only the root.
        mapfile -t kids < <(tree_pids "$CHILD")
        kill -TERM "${kids[@]}" 2>/dev/null || true
    fi
    stop_tree 5 "$CHILD"
    stop_brokers
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- brokers ---------------------------------------------------------------------------
SRC_BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
for ((i = 0; i < 12; i++)); do
    [[ -x $SRC_BIN ]] && break
    [[ $i -gt 0 ]] || log "waiting for $SRC_BIN (being rebuilt?)"
    sleep 5
done
if [[ ! -x $SRC_BIN ]]; then
    [[ -z ${STABLEMQ_BIN:-} ]] || die "STABLEMQ_BIN=$SRC_BIN is not executable"
    log "building target/release/stablemq"
    cargo build --release -p stablemq
fi
# Measure one binary throughout, even if someone rebuilds target/release meanwhile.
BIN="$WORK/stablemq"
for ((i = 0; i < 12; i++)); do
    if cp "$SRC_BIN" "$BIN" 2>/dev/null && "$BIN" --version >/dev/null 2>&1; then break; fi
    sleep 5
done
"$BIN" --version >/dev/null 2>&1 || die "could not copy a working $SRC_BIN"
BIN_DATE=$(date -u -r "$SRC_BIN" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || echo '?')

# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
start_stablemq() { # scenario
    local dir="$WORK/stablemq-$1" port stream=()
    mkdir -p "$dir"
    read -r port SMQ_STREAM_PORT < <("$PY" "$BENCH" free-ports 2)
    # The stream scenarios' stream protocol listener, on a free port.
    ! is_stream "$1" || stream=(--stream-port "$SMQ_STREAM_PORT")
    # In a session of its own (setsid), as scripts/rabbitmq-node.sh starts RabbitMQ
    # and as a service runs: with the kernel's autogroup scheduling, a broker in the
    # load generator's session is woken later and so handed bigger batches (2x the
    # rate at confirm window 100 in one test, docs/benchmarks.md), which a broker
    # serving clients on other hosts never sees. setsid execs in place here (the
    # job is not a process group leader), so $! is the broker's pid.
    setsid "$BIN" serve --bind 127.0.0.1 --amqp-port "$port" --prometheus-port 0 --management-port 0 \
        "${stream[@]}" --data-dir "$dir/data" >"$OUT/stablemq-$1.log" 2>&1 &
    SMQ_PIDS=("$!")
    SMQ_URI="amqp://guest:guest@127.0.0.1:$port/%2f"
    run_child "$PY" "$BENCH" wait-amqp "$port" 60 "${SMQ_PIDS[0]}" ||
        { tail -n 20 "$OUT/stablemq-$1.log" >&2; return 1; }
}

# The three nodes of examples/cluster/, as shipped, with their cluster, AMQP and
# management addresses moved to free loopback ports and their data dirs to $WORK, as
# compat-tests/src/cluster.rs does; unlike the tests, metrics are off.
# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
start_stablemq_cluster() { # scenario
    local dir="$WORK/stablemq-$1" i j cfg ports=() amqp=() sed_args=() urls=() id
    mkdir -p "$dir"
    read -r -a ports < <("$PY" "$BENCH" free-ports 12)
    for j in 0 1 2; do
        amqp+=("${ports[3 + j]}")
        # `t` ends a line's edits at its first substitution: a free port
        # equal to a later documented one is not rewritten again.
        sed_args+=(-e "s#\"127\\.0\\.0\\.1:$((25701 + j))\"#\"127.0.0.1:${ports[j]}\"#;t"
                   -e "s#\"127\\.0\\.0\\.1:$((5672 + j))\"#\"127.0.0.1:${ports[3 + j]}\"#;t"
                   -e "s#\"127\\.0\\.0\\.1:$((15672 + j))\"#\"127.0.0.1:${ports[6 + j]}\"#;t"
                   -e "s#\"127\\.0\\.0\\.1:$((5552 + j))\"#\"127.0.0.1:${ports[9 + j]}\"#;t")
        urls+=("http://127.0.0.1:${ports[6 + j]}")
    done
    for i in 1 2 3; do
        cfg="$dir/node$i.toml"
        sed "${sed_args[@]}" \
            -e "s#^data_dir = \"\\./data/node$i\"\$#data_dir = \"$dir/node$i\"#" \
            -e "s#^prometheus_port = $((15691 + i))\$#prometheus_port = 0#" \
            "$ROOT/examples/cluster/node$i.toml" >"$cfg"
        if ! grep -q "^data_dir = \"$dir/node$i\"\$" "$cfg" || ! grep -q '^prometheus_port = 0$' "$cfg" ||
            [[ $(grep -c "\"127\\.0\\.0\\.1:\\(${ports[0]}\\|${ports[3]}\\|${ports[6]}\\)\"" "$cfg") -ne 3 ]] ||
            grep -Eq '"127\.0\.0\.1:(2570[1-3]|567[2-4]|1567[2-4]|555[2-4])"' "$cfg"; then
            echo "examples/cluster/node$i.toml no longer has the documented ports and data_dir" >&2
            return 1
        fi
        # Each node in a session of its own, as start_stablemq says.
        setsid "$BIN" serve --config "$cfg" --bind 127.0.0.1 --prometheus-port 0 \
            >"$OUT/stablemq-$1-node$i.log" 2>&1 &
        SMQ_PIDS+=("$!")
    done
    for i in 0 1 2; do
        run_child "$PY" "$BENCH" wait-amqp "${amqp[i]}" 60 "${SMQ_PIDS[i]}" ||
            { tail -n 20 "$OUT/stablemq-$1-node$((i + 1)).log" >&2; return 1; }
    done
    id=$("$PY" "$BENCH" smq-master "${urls[0]}" 30 "$BIN") || return 1
    SMQ_MASTER=$id
    SMQ_URI="amqp://guest:guest@127.0.0.1:${amqp[id - 1]}/%2f"
    # The proxy run goes through the next node after the master.
    SMQ_SLAVE=$((id % 3 + 1))
    SMQ_SLAVE_URI="amqp://guest:guest@127.0.0.1:${amqp[SMQ_SLAVE - 1]}/%2f"
    SMQ_MGMT_URLS=$(IFS=+; echo "${urls[*]}")
    SMQ_MGMT0=${urls[0]}
}

# One private RabbitMQ node. Globals used: RMQ_DIR (shared home with the cookie,
# config files), RMQ_EPMD_PORT.
# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
start_rabbitmq_node() { # node name, AMQP port, dist port, node dir, log file
    local name=$1 port=$2 dist=$3 ndir=$4
    mkdir -p "$ndir"/{mnesia,log}
    RMQ_BEAM_PIDFILES+=("$ndir/rabbitmq.pid")
    env HOME="$RMQ_DIR/home" \
        ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$RMQ_EPMD_PORT" \
        RABBITMQ_NODENAME="$name" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$port" \
        RABBITMQ_DIST_PORT="$dist" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1} ${RMQ_EXTRA_ERL_ARGS:-}" \
        RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/rabbitmq-env.conf" \
        RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq.conf" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ_DIR/advanced.config" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins" \
        RABBITMQ_PLUGINS_EXPAND_DIR="$ndir/plugins-expand" \
        RABBITMQ_MNESIA_BASE="$ndir/mnesia" \
        RABBITMQ_LOG_BASE="$ndir/log" \
        RABBITMQ_PID_FILE="$ndir/rabbitmq.pid" \
        "$RABBITMQ_SERVER" >"$5" 2>&1 &
    RMQ_PIDS+=("$!")
}

# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
rmq_common() { # scenario: config files, cookie, and our own epmd on loopback
    RMQ_DIR="$WORK/rabbitmq-$1"
    mkdir -p "$RMQ_DIR/home"
    echo '[].' >"$RMQ_DIR/enabled_plugins"
    : >"$RMQ_DIR/rabbitmq-env.conf"
    printf 'loopback_users.guest = true\nlog.console = false\nlog.file.level = warning\n' >"$RMQ_DIR/rabbitmq.conf"
    od -An -N20 -tx1 /dev/urandom | tr -d ' \n' >"$RMQ_DIR/home/.erlang.cookie"
    chmod 400 "$RMQ_DIR/home/.erlang.cookie"
    read -r RMQ_EPMD_PORT < <("$PY" "$BENCH" free-ports 1)
    # Our own epmd on loopback, on a port of its own, stopped by pid afterwards.
    epmd -address 127.0.0.1 -port "$RMQ_EPMD_PORT" >"$RMQ_DIR/epmd.log" 2>&1 &
    EPMD_PID=$!
}

rmqctl() { # node, args...: rabbitmqctl against one of our nodes, bounded in time
    local node=$1
    shift
    env HOME="$RMQ_DIR/home" ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$RMQ_EPMD_PORT" \
        RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/rabbitmq-env.conf" \
        RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        timeout 120 "$RABBITMQCTL" -q -n "$node" "$@"
}

# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
start_rabbitmq() { # scenario
    local port dist
    rmq_common "$1"
    read -r port dist < <("$PY" "$BENCH" free-ports 2)
    start_rabbitmq_node "bench-$1-$$@localhost" "$port" "$dist" "$RMQ_DIR" "$OUT/rabbitmq-$1.log"
    RMQ_URI="amqp://guest:guest@127.0.0.1:$port/%2f"
    run_child "$PY" "$BENCH" wait-amqp "$port" 180 "${RMQ_PIDS[0]}" ||
        { tail -n 20 "$OUT/rabbitmq-$1.log" "$RMQ_DIR"/log/*.log >&2 || true; return 1; }
}

# The stream scenarios' node: scripts/rabbitmq-node.sh with the rabbitmq_stream plugin
# (stream protocol listener and advertised port on a free loopback port; no
# management plugin, as in the other single-node scenarios). Its start script's tree
# (the Erlang VM in it) is what is measured.
# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
start_rabbitmq_stream() { # scenario
    local dir="$WORK/rabbitmq-$1" pids=()
    RMQ_NODE_DIRS+=("$dir")
    run_child "$ROOT/scripts/rabbitmq-node.sh" start --dir "$dir" --stream --no-management \
        --name "bench-$1-$$@localhost" >"$dir.env" 2>"$OUT/rabbitmq-$1.log" ||
        { tail -n 20 "$OUT/rabbitmq-$1.log" >&2; return 1; }
    # shellcheck disable=SC1090
    . "$dir.env"
    read -r -a pids <<<"$RABBITMQ_PIDS" # start script, beam.smp, epmd
    RMQ_PIDS=("${pids[0]}") RMQ_BEAM_PIDFILES=("$dir/rabbitmq.pid") EPMD_PID=${pids[2]:-}
    if ! tree_pids "${pids[0]}" | grep -qx "${pids[1]:-none}"; then
        echo "RabbitMQ's beam.smp (${pids[1]:-?}) is not under its start script (${pids[0]})" >&2
        return 1
    fi
    RMQ_URI=$RABBITMQ_URI
    RMQ_STREAM_PORT=$RABBITMQ_STREAM_PORT
    [[ -n $RMQ_STREAM_PORT ]] || { echo "rabbitmq-node.sh gave no stream port" >&2; return 1; }
}

# Three nodes a, b, c started together; b and c then join a's cluster.
# shellcheck disable=SC2317 # called indirectly (the EXIT trap, or $start_smq / $start_rmq)
start_rabbitmq_cluster() { # scenario
    local ports=() names=() letters=(a b c) i n
    rmq_common "$1"
    read -r -a ports < <("$PY" "$BENCH" free-ports 6)
    for i in 0 1 2; do
        n=${letters[i]}
        names+=("bench-$1-$n-$$@localhost")
        start_rabbitmq_node "${names[i]}" "${ports[i]}" "${ports[3 + i]}" "$RMQ_DIR/$n" "$OUT/rabbitmq-$1-$n.log"
    done
    for i in 0 1 2; do
        n=${letters[i]}
        run_child "$PY" "$BENCH" wait-amqp "${ports[i]}" 180 "${RMQ_PIDS[i]}" ||
            { tail -n 20 "$OUT/rabbitmq-$1-$n.log" "$RMQ_DIR/$n"/log/*.log >&2 || true; return 1; }
    done
    for i in 1 2; do
        { run_child rmqctl "${names[i]}" stop_app && run_child rmqctl "${names[i]}" join_cluster "${names[0]}" &&
            run_child rmqctl "${names[i]}" start_app; } >>"$OUT/rabbitmq-$1-join.log" 2>&1 ||
            { echo "rabbitmqctl join_cluster failed for ${names[i]}:" >&2; tail -n 20 "$OUT/rabbitmq-$1-join.log" >&2; return 1; }
    done
    n=$(rmqctl "${names[0]}" cluster_status --formatter json | "$PY" "$BENCH" rmq-running-nodes) || n=0
    [[ $n -eq 3 ]] || { echo "the RabbitMQ cluster has $n running nodes, not 3" >&2; return 1; }
    RMQ_NODES=("${names[@]}")
    RMQ_URI="amqp://guest:guest@127.0.0.1:${ports[0]}/%2f"
    RMQ_OTHER_URI="amqp://guest:guest@127.0.0.1:${ports[1]}/%2f"
}

# --- real clients ---------------------------------------------------------------------------
# The load programs of clients/, built into $WORK from Debian's packages: Go in GOPATH
# mode against /usr/share/gocode (as scripts/amqp091-go-check.sh does), Java with javac
# against /usr/share/java. Globals set: GO_LOAD, JAVA_CP.
GO_LOAD="" JAVA_CP=""
build_clients() {
    local dir="$WORK/clients" gopath=/usr/share/gocode jars=/usr/share/java
    mkdir -p "$dir/java"
    if { [[ $NEED_CLIENTS -eq 1 ]] && has_client go; } || [[ $NEED_GO -eq 1 ]]; then
        if ! command -v go >/dev/null 2>&1 || [[ ! -d $gopath/src/github.com/rabbitmq/amqp091-go ]]; then
            log "installing Debian's golang-go and golang-github-rabbitmq-amqp091-go-dev"
            apt_install golang-go golang-github-rabbitmq-amqp091-go-dev || return 1
        fi
        mkdir -p "$ROOT/compat-tests/.cache/go-build"
        (cd "$HERE/clients/go" && GO111MODULE=off GOPATH=$gopath GOFLAGS='' \
            GOCACHE="$ROOT/compat-tests/.cache/go-build" go build -o "$dir/perftest-go" perftest.go) || return 1
        GO_LOAD="$dir/perftest-go"
        log "Go load program: amqp091-go $(dpkg-query -W -f '${Version}' golang-github-rabbitmq-amqp091-go-dev 2>/dev/null || echo '?'), $(go version | cut -d' ' -f3)"
    fi
    if [[ $NEED_CLIENTS -eq 1 ]] && has_client java; then
        if ! command -v javac >/dev/null 2>&1 || [[ ! -f $jars/amqp-client.jar || ! -f $jars/slf4j-nop.jar ]]; then
            log "installing Debian's librabbitmq-client-java, libslf4j-java and default-jdk-headless"
            apt_install librabbitmq-client-java libslf4j-java default-jdk-headless || return 1
        fi
        javac -nowarn -cp "$jars/amqp-client.jar" -d "$dir/java" "$HERE/clients/java/PerfTest.java" || return 1
        JAVA_CP="$dir/java:$jars/amqp-client.jar:$jars/slf4j-api.jar:$jars/slf4j-nop.jar"
        log "Java load program: RabbitMQ Java client $(dpkg-query -W -f '${Version}' librabbitmq-client-java 2>/dev/null || echo '?'), $(java -version 2>&1 | head -n 1)"
    fi
}

# --- run -----------------------------------------------------------------------------------
is_cluster() { [[ $1 == S3 || $1 == S4 || $1 == S5 || $1 == R3 ]]; }
is_stream() { [[ $1 == ST1 || $1 == ST2 ]]; }
plus_list() { local IFS=+; echo "$*"; }

ensure_rabbitmq || die "RabbitMQ is not installed and could not be installed"
command -v epmd >/dev/null || die "epmd (Erlang) is missing"
RMQ_VERSION=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')
ERL_VERSION=$(dpkg-query -W -f '${Version}' erlang-base 2>/dev/null || echo '?')
SMQ_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
log "StableMQ $SRC_BIN (built $BIN_DATE; git HEAD $SMQ_REV); RabbitMQ $RMQ_VERSION (Erlang $ERL_VERSION)"
log "scenarios ${SCEN[*]}; $RUNS run(s) of ${DURATION} s each per broker$([[ " ${SCEN[*]} " == *" S6 "* ]] && echo "; S6 backlog $BACKLOG")$([[ " ${SCEN[*]} " == *" ST"[12]" "* ]] && echo "; $MESSAGES messages per stream row")"
"$PY" "$BENCH" machine | sed 's/^/    /'
if [[ $NEED_CLIENTS -eq 1 || $NEED_GO -eq 1 ]]; then
    build_clients || die "could not install or build the real-client load programs"
fi
if [[ $NEED_RSTREAM -eq 1 ]]; then
    log "stream protocol client: rstream $("$STREAM_PY" -c 'import importlib.metadata as m; print(m.version("rstream"))' 2>/dev/null || echo '?') ($STREAM_PY)"
fi

status=0
for s in "${SCEN[@]}"; do
    if is_cluster "$s"; then
        start_smq=start_stablemq_cluster start_rmq=start_rabbitmq_cluster
        log "$s: starting a 3-node StableMQ cluster and a 3-node RabbitMQ cluster"
    elif is_stream "$s"; then
        start_smq=start_stablemq start_rmq=start_rabbitmq_stream
    else
        start_smq=start_stablemq start_rmq=start_rabbitmq
    fi
    if ! $start_smq "$s"; then
        echo "FAILED: StableMQ did not start for $s" >&2
        status=1
        stop_brokers
        continue
    fi
    if ! $start_rmq "$s"; then
        echo "FAILED: RabbitMQ did not start for $s" >&2
        status=1
        stop_brokers
        continue
    fi
    common=(--perf "$BIN" --out "$OUT" --runs "$RUNS" --duration "$DURATION" --backlog "$BACKLOG"
            --clients "$CLIENTS" --messages "$MESSAGES")
    ! is_stream "$s" || common+=(--stream "stablemq=$SMQ_STREAM_PORT" --stream "rabbitmq=$RMQ_STREAM_PORT"
                                 --stream-py "$STREAM_PY")
    [[ -z $GO_LOAD ]] || common+=(--go "$GO_LOAD")
    [[ -z $JAVA_CP ]] || common+=(--java-cp "$JAVA_CP")
    smq_pids=$(plus_list "${SMQ_PIDS[@]}") rmq_pids=$(plus_list "${RMQ_PIDS[@]}")
    master=()
    if is_cluster "$s"; then
        log "$s: StableMQ's master is node $SMQ_MASTER (pids $smq_pids); RabbitMQ nodes ${RMQ_NODES[*]} (pids $rmq_pids), load on the first"
        master=(--master "stablemq=$SMQ_MASTER,$SMQ_MGMT_URLS")
    fi
    run_child "$PY" "$BENCH" scenario "$s" "${common[@]}" "${master[@]}" \
        --broker "stablemq=$SMQ_URI,$smq_pids" --broker "rabbitmq=$RMQ_URI,$rmq_pids" || status=1
    if [[ $s == S3 && $PROXY -eq 1 ]]; then
        run_child "$PY" "$BENCH" scenario S3p "${common[@]}" --runs 1 "${master[@]}" \
            --broker "stablemq=$SMQ_SLAVE_URI,$smq_pids" --broker "rabbitmq=$RMQ_OTHER_URI,$rmq_pids" || status=1
    fi
    if is_cluster "$s"; then
        echo "    after $s, StableMQ:"
        timeout 20 "$BIN" ctl --url "$SMQ_MGMT0" cluster-status 2>&1 | sed 's/^/      /' || true
        echo "    after $s, RabbitMQ's queues:"
        rmqctl "${RMQ_NODES[0]}" list_queues name type leader members messages 2>&1 | sed 's/^/      /' || true
    fi
    report_dead
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
