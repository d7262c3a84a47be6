#!/usr/bin/env bash
# Record the stream-protocol fixtures the protocol crate's tests decode
# (protocol/tests/fixtures/stream/): start a private RabbitMQ 3.10 node with its
# stream plugin (scripts/rabbitmq-node.sh --stream), advertising a recording
# proxy's port, and drive the rstream client (compat-tests/python/requirements.txt)
# through that proxy (compat-tests/python/stream/record_session.py).
#
#   scripts/record-stream-fixtures.sh [OUT_DIR]     (default protocol/tests/fixtures/stream)
#
# Needs .venv with the pinned Python clients (scripts/test.sh creates it; or
# STABLEMQ_PYTHON). Everything listens on 127.0.0.1; the node is stopped by pid
# on exit.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
OUT=${1:-$ROOT/protocol/tests/fixtures/stream}
PY=${STABLEMQ_PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PY ]] || { echo "record-stream-fixtures: $PY is missing (run scripts/test.sh once, or set STABLEMQ_PYTHON)" >&2; exit 2; }
"$PY" -c 'import rstream' || { echo "record-stream-fixtures: rstream is not installed in $PY" >&2; exit 2; }

TMP=$(mktemp -d)
trap '"$ROOT/scripts/rabbitmq-node.sh" stop --dir "$TMP/rmq" || true; rm -rf "$TMP"' EXIT
read -r PROXY_PORT < <(free_ports 1)
eval "$("$ROOT/scripts/rabbitmq-node.sh" start --dir "$TMP/rmq" --no-management --stream --stream-advertised-port "$PROXY_PORT")"
mkdir -p "$OUT"
rm -f "$OUT"/*.bin
timeout 120 "$PY" "$ROOT/compat-tests/python/stream/record_session.py" \
    --upstream "$RABBITMQ_STREAM_PORT" --listen "$PROXY_PORT" --out "$OUT"
