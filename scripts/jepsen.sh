#!/usr/bin/env bash
# Jepsen-style partition run (issue 24): a real 3-node StableMQ cluster (the
# shipped examples/cluster/ configs), each node in its own network namespace
# on a private bridge, with confirming lapin publishers in the root namespace.
# Seeded random nemeses (isolate the master, bridge, one-way cut, pause, kill
# -9, heal during an election, random halves) run for MINUTES; then the faults
# are healed, the queue drained, and a total-queue checker prints the result
# table (lost, duplicated, unexpected, availability) and the invariants.
#
# Usage: scripts/jepsen.sh [MINUTES [SEED]]   (defaults: 30 minutes, seed 1)
#        scripts/jepsen.sh --short            (every nemesis once, ~60 s: the
#                                              test command's partitions check)
# Needs root (ip netns, veth, bridge, iptables); installs Debian's iproute2 and
# iptables with apt-get if missing. Every namespace, link and process it
# creates is removed at the end, also on failure or Ctrl-C; a run killed with
# SIGKILL is cleaned up by the next one. Only loopback and the namespaces'
# private 10.213.X.0/24 are used. Exits 1 if an invariant broke.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"

if [[ ${1:-} == --short ]]; then
    ARGS=(--short --seed "${2:-1}")
else
    ARGS=(--minutes "${1:-30}" --seed "${2:-1}")
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "scripts/jepsen.sh needs root (network namespaces and iptables)" >&2
    exit 1
fi
command -v ip >/dev/null 2>&1 || apt_install iproute2 || exit 1
command -v iptables >/dev/null 2>&1 || apt_install iptables || exit 1

export STABLEMQ_BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
if [[ ! -x $STABLEMQ_BIN ]]; then
    cargo build --release --bin stablemq
fi
JEPSEN=$ROOT/target/release/jepsen
# The test command's workspace build made it already; build it only when it is
# missing or older than its sources (cargo would also rebuild dependencies
# whose features differ from the workspace build's).
if [[ ! -x $JEPSEN ]] || [[ -n $(find compat-tests/src compat-tests/Cargo.toml Cargo.lock -newer "$JEPSEN" -print -quit) ]]; then
    cargo build --release --quiet -p compat-tests --bin jepsen
fi

# The harness tears down on exit and on panic; this covers a signal that
# kills it without unwinding (it removes only runs whose process is gone).
trap '"$JEPSEN" --clean || true' EXIT
"$JEPSEN" "${ARGS[@]}"
