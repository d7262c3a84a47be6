#!/usr/bin/env bash
# Stream protocol, side by side: StableMQ (target/release/stablemq) and
# RabbitMQ 3.10 with its rabbitmq_stream plugin (scripts/rabbitmq-node.sh),
# each measured with rstream (compat-tests/bench/streams.py) in turn, row by
# row: publish with confirms (1 producer; 16 B and 1 KB), then fan-out reads
# from `first` with 1 and 10 consumers. Prints a markdown table with the
# ratios and each broker's CPU per message.
#
# Usage: compat-tests/bench/streams.sh [N]   (N messages per row, default 200000)
# Needs: the release build, .venv (scripts/test.sh makes both), and what
# scripts/rabbitmq-node.sh installs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
N="${1:-200000}"
PY="$ROOT/.venv/bin/python"
BIN="$ROOT/target/release/stablemq"
WORK="$(mktemp -d -t stablemq-streams.XXXXXX)"
SMQ_PID=""
cleanup() {
    [[ -n $SMQ_PID ]] && kill "$SMQ_PID" 2>/dev/null && wait "$SMQ_PID" 2>/dev/null || true
    "$ROOT/scripts/rabbitmq-node.sh" stop --dir "$WORK/rabbitmq" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { # port
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $1" >&2
    return 1
}

SMQ_STREAM="$(free_port)"
"$BIN" serve --bind 127.0.0.1 --amqp-port "$(free_port)" --stream-port "$SMQ_STREAM" \
    --prometheus-port 0 --management-port 0 --data-dir "$WORK/stablemq" >"$WORK/stablemq.log" 2>&1 &
SMQ_PID=$!
wait_port "$SMQ_STREAM"
eval "$("$ROOT/scripts/rabbitmq-node.sh" start --dir "$WORK/rabbitmq" --stream)"
RMQ_PID="$(cat "$WORK/rabbitmq/rabbitmq.pid")"

field() { "$PY" -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
ratio() { "$PY" -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}x' if b else '-')" "$1" "$2"; }

echo "| row | StableMQ msg/s | RabbitMQ msg/s | ratio | StableMQ CPU µs/msg | RabbitMQ CPU µs/msg |"
echo "|---|---|---|---|---|---|"
for row in "16 1" "1024 1" "16 10"; do
    read -r size consumers <<<"$row"
    s="$("$PY" "$ROOT/compat-tests/bench/streams.py" "$SMQ_STREAM" "$SMQ_PID" "$N" "$size" "$consumers")"
    r="$("$PY" "$ROOT/compat-tests/bench/streams.py" "$RABBITMQ_STREAM_PORT" "$RMQ_PID" "$N" "$size" "$consumers")"
    for phase in publish fanout; do
        [[ $phase == publish && $consumers != 1 ]] && continue
        label="$phase, ${size} B"
        [[ $phase == fanout ]] && label="fan-out to $consumers from first, ${size} B"
        a="$(field "$s" "${phase}_msg_s")" b="$(field "$r" "${phase}_msg_s")"
        echo "| $label | $a | $b | $(ratio "$a" "$b") | $(field "$s" "${phase}_cpu_us_per_msg") | $(field "$r" "${phase}_cpu_us_per_msg") |"
    done
done
