#!/usr/bin/env bash
# Start or stop a private RabbitMQ 3.10 node for tests: Debian's rabbitmq-server
# (installed with apt-get if missing), run through the package's own server
# script, never the system service.
#
#   scripts/rabbitmq-node.sh start --dir DIR [--amqp-port N] [--management-port N]
#                                  [--dist-port N] [--epmd-port N] [--name NODE]
#                                  [--no-management] [--timeout SECONDS]
#                                  [--stream] [--stream-port N]
#                                  [--stream-advertised-port N] [--prometheus]
#                                  [--stream-tls-port N --tls-dir D]
#   scripts/rabbitmq-node.sh stop --dir DIR
#   scripts/rabbitmq-node.sh ctl --dir DIR ARGS...      (rabbitmqctl against the node)
#
# start: DIR (created if missing; should be empty or a stopped node's) gets the
# node's mnesia and log dirs, its config, its enabled_plugins file (the
# management plugin, enabled offline, plus any in RABBITMQ_EXTRA_PLUGINS) and its
# own Erlang cookie. --stream (or --stream-port) also enables the rabbitmq_stream
# plugin, listening on 127.0.0.1 at the given or a free port and advertising
# 127.0.0.1 and that port (or --stream-advertised-port, for a proxy in front) in
# its metadata answers. --stream-tls-port N with --tls-dir D adds the stream
# protocol over TLS on N (advertised as N to TLS clients), with D's server.pem,
# server.key and ca.pem (verify_peer, a certificate optional). The node listens
# on 127.0.0.1 only: AMQP, management HTTP and distribution ports as given, or
# free ones (20000-31999, as the Rust test harness picks them), with its own epmd
# on a free loopback port. The processes run detached from this script (own
# session), so the caller's shell does not wait for them; their pids are written
# to DIR/pids. start waits (default 180 s) until the AMQP port answers the
# protocol header and GET /api/overview answers 200 for guest/guest, then prints
# shell assignments for `eval`:
#
#   RABBITMQ_PIDS="1234 1240 1300"   start script, Erlang VM (beam.smp), epmd
#   RABBITMQ_AMQP_PORT=... RABBITMQ_MANAGEMENT_PORT=... RABBITMQ_DIST_PORT=...
#   RABBITMQ_EPMD_PORT=... RABBITMQ_NODENAME=...
#   RABBITMQ_URI=amqp://guest:guest@127.0.0.1:PORT/%2f
#   RABBITMQ_MANAGEMENT_URL=http://127.0.0.1:PORT
#   RABBITMQ_STREAM_PORT=...          (empty without --stream)
#   RABBITMQ_PROMETHEUS_PORT=...      (empty without --prometheus: the
#                                      rabbitmq_prometheus plugin on 127.0.0.1)
#
# The same lines are kept in DIR/env. If the node does not come up in time, start
# prints the tail of its logs, stops what it started, and exits 1.
#
# stop: SIGTERM to every pid in DIR/pids and their child processes, SIGKILL to
# whatever is left after 20 s. Only those pids: never a process found by name.
# Exits 0 when nothing is left running.
#
# Use as:
#   eval "$(scripts/rabbitmq-node.sh start --dir "$tmp/rmq")"
#   trap 'scripts/rabbitmq-node.sh stop --dir "$tmp/rmq"' EXIT
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

log() { printf '==> rabbitmq-node: %s\n' "$*" >&2; }
die() { printf 'rabbitmq-node: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# --- arguments -----------------------------------------------------------------
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
ACTION=$1
shift
DIR="" AMQP_PORT="" MGMT_PORT="" DIST_PORT="" EPMD_PORT="" NODENAME="" TIMEOUT=180 MGMT=1
STREAM=0 STREAM_PORT="" STREAM_ADVERTISED_PORT="" PROMETHEUS=0 PROMETHEUS_PORT=""
STREAM_TLS_PORT="" TLS_DIR=""
CTL_ARGS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
        --amqp-port) AMQP_PORT=${2:?}; shift 2 ;;
        --management-port) MGMT_PORT=${2:?}; shift 2 ;;
        --dist-port) DIST_PORT=${2:?}; shift 2 ;;
        --epmd-port) EPMD_PORT=${2:?}; shift 2 ;;
        --name) NODENAME=${2:?}; shift 2 ;;
        --timeout) TIMEOUT=${2:?}; shift 2 ;;
        --no-management) MGMT=0; shift ;;
        --stream) STREAM=1; shift ;;
        --stream-port) STREAM=1; STREAM_PORT=${2:?}; shift 2 ;;
        --prometheus) PROMETHEUS=1; shift ;;
        --stream-advertised-port) STREAM_ADVERTISED_PORT=${2:?}; shift 2 ;;
        --stream-tls-port) STREAM=1; STREAM_TLS_PORT=${2:?}; shift 2 ;;
        --tls-dir) TLS_DIR=${2:?}; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; CTL_ARGS+=("$@"); break ;;
        *)
            [[ $ACTION == ctl ]] || die "unknown argument $1 (see --help)"
            CTL_ARGS+=("$1"); shift ;;
    esac
done
[[ -n $DIR ]] || die "--dir is required"
case $ACTION in start|stop|ctl) ;; -h|--help) usage; exit 0 ;; *) die "unknown action $ACTION (start, stop, ctl)" ;; esac
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# --- helpers -------------------------------------------------------------------
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

recorded_pids() { # every pid this node's start recorded
    local f
    for f in "$DIR/pids" "$DIR/rabbitmq.pid"; do
        [[ -s $f ]] && tr -s ' \n' '\n\n' <"$f" | grep -E '^[0-9]+$' || true
    done
}

stop_node() {
    local roots=() all=() left=() i
    mapfile -t roots < <(recorded_pids | sort -u)
    [[ ${#roots[@]} -gt 0 ]] || return 0
    mapfile -t all < <(tree_pids "${roots[@]}")
    kill -TERM "${roots[@]}" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        [[ -n $(live_pids "${all[@]}") ]] || break
        sleep 0.1
    done
    mapfile -t left < <(live_pids "${all[@]}")
    if [[ ${#left[@]} -gt 0 ]]; then
        kill -KILL "${left[@]}" 2>/dev/null || true
        sleep 0.2
    fi
    mapfile -t left < <(live_pids "${all[@]}")
    [[ ${#left[@]} -eq 0 ]] || { log "still running after SIGKILL: ${left[*]}"; return 1; }
    rm -f "$DIR/pids" "$DIR/rabbitmq.pid"
}

port_free() { # port: nothing listens on it on loopback (else another broker would answer our checks)
    python3 - "$1" <<'EOF2'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
EOF2
}

port_listens() { # port: something accepts TCP connections on it on loopback
    python3 - "$1" <<'EOF3'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
except OSError:
    sys.exit(1)
EOF3
}

amqp_answers() { # port: the broker answers the AMQP 0-9-1 header with connection.start
    python3 - "$1" <<'EOF'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    head = s.recv(7)
    s.close()
    # A method frame (type 1) on channel 0.
    sys.exit(0 if len(head) == 7 and head[0] == 1 and head[1:3] == b"\x00\x00" else 1)
except OSError:
    sys.exit(1)
EOF
}

node_env() { # the environment rabbitmq-server and rabbitmqctl need for this node
    # shellcheck disable=SC1091
    . "$DIR/env"
    printf '%s\0' \
        HOME="$DIR/home" \
        ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$RABBITMQ_EPMD_PORT" \
        RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
}

rabbitmqctl() {
    local envs=()
    [[ -s $DIR/env ]] || die "$DIR/env is missing: no node was started there"
    mapfile -d '' -t envs < <(node_env)
    # shellcheck disable=SC1091
    . "$DIR/env"
    env "${envs[@]}" RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        timeout 120 "$RABBITMQCTL" -q -n "$RABBITMQ_NODENAME" "$@"
}

# --- actions ---------------------------------------------------------------------
if [[ $ACTION == stop ]]; then
    stop_node
    exit $?
fi
if [[ $ACTION == ctl ]]; then
    rabbitmqctl "${CTL_ARGS[@]}"
    exit $?
fi

# start
if [[ -n $(live_pids $(recorded_pids)) ]]; then
    die "a node started in $DIR is still running (stop it first)"
fi
ensure_rabbitmq || die "RabbitMQ is not installed and could not be installed"
command -v epmd >/dev/null || die "epmd (Erlang) is missing"
read -r -a picked < <(free_ports 6)
[[ ${#picked[@]} -eq 6 ]] || die "no free loopback ports"
AMQP_PORT=${AMQP_PORT:-${picked[0]}}
MGMT_PORT=${MGMT_PORT:-${picked[1]}}
DIST_PORT=${DIST_PORT:-${picked[2]}}
EPMD_PORT=${EPMD_PORT:-${picked[3]}}
if [[ $STREAM -eq 1 ]]; then
    STREAM_PORT=${STREAM_PORT:-${picked[4]}}
    STREAM_ADVERTISED_PORT=${STREAM_ADVERTISED_PORT:-$STREAM_PORT}
fi
[[ $PROMETHEUS -eq 1 ]] && PROMETHEUS_PORT=${picked[5]}
NODENAME=${NODENAME:-rmq-$AMQP_PORT@localhost}
for p in "$AMQP_PORT" "$DIST_PORT" "$EPMD_PORT" $([[ $MGMT -eq 1 ]] && echo "$MGMT_PORT") $([[ $STREAM -eq 1 ]] && echo "$STREAM_PORT"); do
    port_free "$p" || die "port $p is in use on 127.0.0.1"
done

rm -rf "$DIR/mnesia" "$DIR/log" "$DIR/home" "$DIR/plugins-expand"
mkdir -p "$DIR"/{mnesia,log,home}
# Dependencies (management_agent, web_dispatch; stream_common) are enabled with
# each plugin. RABBITMQ_EXTRA_PLUGINS (comma-separated, e.g.
# rabbitmq_shovel,rabbitmq_federation) adds plugins: compat-tests/tests/access/parameters.rs
# needs those two.
plugins=()
[[ $MGMT -eq 1 ]] && plugins+=(rabbitmq_management)
[[ $STREAM -eq 1 ]] && plugins+=(rabbitmq_stream)
[[ $PROMETHEUS -eq 1 ]] && plugins+=(rabbitmq_prometheus)
[[ -n ${RABBITMQ_EXTRA_PLUGINS:-} ]] && plugins+=("$RABBITMQ_EXTRA_PLUGINS")
echo "[$(IFS=,; echo "${plugins[*]}")]." >"$DIR/enabled_plugins"
: >"$DIR/rabbitmq-env.conf"
{
    echo 'loopback_users.guest = true'
    echo 'log.console = false'
    echo 'log.file.level = warning'
    if [[ $MGMT -eq 1 ]]; then
        echo 'management.tcp.ip = 127.0.0.1'
        echo "management.tcp.port = $MGMT_PORT"
    fi
    if [[ $STREAM -eq 1 ]]; then
        echo "stream.listeners.tcp.1 = 127.0.0.1:$STREAM_PORT"
        echo 'stream.advertised_host = 127.0.0.1'
        echo "stream.advertised_port = $STREAM_ADVERTISED_PORT"
    fi
    if [[ -n $STREAM_TLS_PORT ]]; then
        # The stream protocol over TLS, with TLS_DIR's server.pem, server.key
        # and ca.pem (client certificates verified when sent).
        [[ -n $TLS_DIR ]] || die "--stream-tls-port needs --tls-dir"
        echo "stream.listeners.ssl.1 = 127.0.0.1:$STREAM_TLS_PORT"
        echo "stream.advertised_tls_port = $STREAM_TLS_PORT"
        echo "ssl_options.cacertfile = $TLS_DIR/ca.pem"
        echo "ssl_options.certfile = $TLS_DIR/server.pem"
        echo "ssl_options.keyfile = $TLS_DIR/server.key"
        echo 'ssl_options.verify = verify_peer'
        echo 'ssl_options.fail_if_no_peer_cert = false'
    fi
    if [[ $PROMETHEUS -eq 1 ]]; then
        echo 'prometheus.tcp.ip = 127.0.0.1'
        echo "prometheus.tcp.port = $PROMETHEUS_PORT"
    fi
} >"$DIR/rabbitmq.conf"
od -An -N20 -tx1 /dev/urandom | tr -d ' \n' >"$DIR/home/.erlang.cookie"
chmod 400 "$DIR/home/.erlang.cookie"
cat >"$DIR/env" <<EOF
RABBITMQ_AMQP_PORT=$AMQP_PORT
RABBITMQ_MANAGEMENT_PORT=$([[ $MGMT -eq 1 ]] && echo "$MGMT_PORT")
RABBITMQ_DIST_PORT=$DIST_PORT
RABBITMQ_EPMD_PORT=$EPMD_PORT
RABBITMQ_NODENAME=$NODENAME
RABBITMQ_URI=amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f
RABBITMQ_MANAGEMENT_URL=$([[ $MGMT -eq 1 ]] && echo "http://127.0.0.1:$MGMT_PORT")
RABBITMQ_STREAM_PORT=$STREAM_PORT
RABBITMQ_PROMETHEUS_PORT=$PROMETHEUS_PORT
EOF

# Our own epmd on loopback, then the node; each in a session of its own so that
# neither holds the caller's terminal or pipes, and both are stopped by pid.
setsid epmd -address 127.0.0.1 -port "$EPMD_PORT" </dev/null >"$DIR/epmd.log" 2>&1 &
EPMD_PID=$!
echo "$EPMD_PID" >"$DIR/pids"
mapfile -d '' -t ENVS < <(node_env)
setsid env "${ENVS[@]}" \
    RABBITMQ_NODENAME="$NODENAME" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$AMQP_PORT" \
    RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CONFIG_FILE="$DIR/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$DIR/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins" \
    RABBITMQ_PLUGINS_EXPAND_DIR="$DIR/plugins-expand" \
    RABBITMQ_MNESIA_BASE="$DIR/mnesia" \
    RABBITMQ_LOG_BASE="$DIR/log" \
    RABBITMQ_PID_FILE="$DIR/rabbitmq.pid" \
    "$RABBITMQ_SERVER" </dev/null >"$DIR/server.log" 2>&1 &
SERVER_PID=$!
echo "$SERVER_PID" >>"$DIR/pids"

fail() {
    log "$1"
    tail -n 20 "$DIR/server.log" "$DIR"/log/*.log >&2 2>/dev/null || true
    stop_node || true
    exit 1
}

deadline=$((SECONDS + TIMEOUT))
until amqp_answers "$AMQP_PORT"; do
    [[ -n $(live_pids "$SERVER_PID") ]] || fail "RabbitMQ exited during start"
    [[ $SECONDS -lt $deadline ]] || fail "RabbitMQ's AMQP port $AMQP_PORT did not answer within $TIMEOUT s"
    sleep 0.5
done
if [[ $MGMT -eq 1 ]]; then
    until curl -fsS -o /dev/null --max-time 5 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" 2>/dev/null; do
        [[ -n $(live_pids "$SERVER_PID") ]] || fail "RabbitMQ exited during start"
        [[ $SECONDS -lt $deadline ]] || fail "RabbitMQ's management API on port $MGMT_PORT did not answer within $TIMEOUT s"
        sleep 0.5
    done
fi
if [[ $STREAM -eq 1 ]]; then
    until port_listens "$STREAM_PORT"; do
        [[ -n $(live_pids "$SERVER_PID") ]] || fail "RabbitMQ exited during start"
        [[ $SECONDS -lt $deadline ]] || fail "RabbitMQ's stream port $STREAM_PORT did not answer within $TIMEOUT s"
        sleep 0.5
    done
fi
BEAM_PID=$(cat "$DIR/rabbitmq.pid" 2>/dev/null || true)
PIDS="$SERVER_PID${BEAM_PID:+ $BEAM_PID} $EPMD_PID"
echo "RABBITMQ_PIDS=\"$PIDS\"" >>"$DIR/env"
cat "$DIR/env"
