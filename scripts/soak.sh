#!/usr/bin/env bash
# A day of load, compressed (issue 24): a 3-node StableMQ cluster (the shipped
# examples/cluster/ configs, on free loopback ports, data under a mktemp dir)
# under mixed load for MINUTES: confirming publishers of persistent messages,
# consumers that come and go, connections opening and closing, short-lived
# queues, a TTL queue dead-lettering to a DLQ, the management API polled every
# second, and a kill -9 of the master every few minutes (restarted on its data).
# Every minute (every 15 s in runs under 10 minutes) it records each node's
# RSS, open fds, threads, disk used and store lag; at the end it drains every
# queue and checks that no confirmed message was lost.
#
# Usage: scripts/soak.sh MINUTES      the run; exit 0 pass, 1 fail, 2 harness error
#        scripts/soak.sh --self-test  the checkers on fabricated records
# Env:   STABLEMQ_BIN  broker binary (default target/release/stablemq, built if missing)
#        SOAK_OUT      results dir (default target/soak/DATE-TIME)
#        SOAK_PLANT    loss | leak: a planted fault that must fail the run
#        SOAK_RATE     msg/s of each of the 3 confirming publishers (default 40)
#        SOAK_FAILOVER_SECONDS  seconds between failovers (default MINUTES*15,
#                      within 40-180); 0: none
#
# Results: OUT/nodes.csv (per node per sample), OUT/cluster.csv, OUT/soak.png,
# OUT/summary.md (printed at the end), OUT/summary.json, run.log, node logs.
# Pass: no upward trend of RSS, fds, threads or disk on any node after the
# warm-up (scripts/soak/trend.py states the rule), 0 lost, 0 unexpected, no
# node exiting by itself, no worker stalled. The harness and every node are
# stopped by pid on exit, also on failure or Ctrl-C, and the temp dir removed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"

# The venv lives under target/ so it never touches the test command's .venv.
VENV=$ROOT/target/soak-venv
REQUIREMENTS=$ROOT/scripts/soak/requirements.txt
ensure_venv() {
    if [[ ! -x $VENV/bin/python ]]; then
        python3 -m venv "$VENV"
    fi
    local want
    want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
    if [[ ! -f $VENV/.stamp || $(cat "$VENV/.stamp") != "$want" ]]; then
        echo "==> installing $REQUIREMENTS into $VENV" >&2
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet -r "$REQUIREMENTS"
        echo "$want" >"$VENV/.stamp"
    fi
}

ensure_venv
export PYTHONPATH=$ROOT/scripts
if [[ ${1:-} == --self-test ]]; then
    exec "$VENV/bin/python" -m soak selftest
fi
MINUTES=${1:-}
if ! [[ $MINUTES =~ ^[0-9]+$ ]] || ((MINUTES < 1 || MINUTES > 1440)); then
    echo "usage: scripts/soak.sh MINUTES (1-1440) | --self-test" >&2
    exit 2
fi

SRC_BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
if [[ ! -x $SRC_BIN ]]; then
    cargo build --release --bin stablemq
fi
WORK=$(mktemp -d /tmp/soak.XXXXXX)
OUT=${SOAK_OUT:-$ROOT/target/soak/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" "$WORK/bin"
# A copy: a rebuild of target/release during the run must not swap the
# binary under a node that is restarted after a failover.
cp "$SRC_BIN" "$WORK/bin/stablemq"

HARNESS=""
cleanup() {
    if [[ -n $HARNESS ]] && kill -0 "$HARNESS" 2>/dev/null; then
        kill "$HARNESS" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$HARNESS" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$HARNESS" 2>/dev/null || true
    fi
    # Nodes the harness could not stop (it was killed): only pids whose
    # binary is this run's copy, so a recycled pid is never hit.
    if [[ -f $WORK/node.pids ]]; then
        local pid
        while read -r pid; do
            if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$WORK/bin/stablemq" ]]; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        done <"$WORK/node.pids"
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "==> soak: $MINUTES min, results in $OUT, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
    "binary $SRC_BIN (sha256 $(sha256sum "$WORK/bin/stablemq" | cut -c1-12))" | tee "$OUT/binary.txt"
# timeout bounds the whole run: the load, a drain of at most 5 minutes, and
# the start-up, with slack.
SOAK_MINUTES=$MINUTES SOAK_OUT=$OUT SOAK_WORK=$WORK SOAK_ROOT=$ROOT \
    SOAK_BIN=$WORK/bin/stablemq SOAK_PORTS=$(free_ports 15) \
    timeout --signal=TERM $((MINUTES * 60 + 900)) "$VENV/bin/python" -m soak &
HARNESS=$!
rc=0
wait "$HARNESS" || rc=$?
HARNESS=""
echo "==> results: $OUT (exit $rc)"
exit "$rc"
