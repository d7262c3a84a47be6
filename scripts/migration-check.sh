#!/usr/bin/env bash
# Acceptance test of docs/migrating-from-rabbitmq.md: follow the guide, command
# by command, from a RabbitMQ holding 10,000 messages to a fresh StableMQ, and
# check that all 10,000 arrived.
#
#   scripts/migration-check.sh [--messages N] [--keep DIR]
#
# 1. Starts a private RabbitMQ 3.10 node (scripts/rabbitmq-node.sh: Debian's
#    package, management plugin, free 127.0.0.1 ports, own dirs and cookie) and
#    gives it what a production broker has: an administrator `admin` and an
#    application user `app` (created with `stablemq ctl`, which speaks RabbitMQ's
#    HTTP API), a topic exchange bound to a durable queue `orders`, and N
#    (default 10,000) persistent messages published by `app` with publisher
#    confirms, each numbered in its body, headers and message_id.
# 2. Starts a fresh StableMQ (target/release/stablemq serve, or STABLEMQ_BIN) on
#    free ports with a fresh data dir.
# 3. Runs the guide's steps with its variables pointing at the two: export the
#    definitions with curl, import them with `stablemq ctl import_definitions`,
#    list them, connect a client as `app` with its RabbitMQ password, drain with
#    the guide's `stablemq shovel` loop, list the queues on both sides.
# 4. Checks: the RabbitMQ queue is empty (an exact AMQP count, not the API's
#    5-second statistics); StableMQ's `orders` holds N messages, each number
#    exactly once, with its headers, message_id, content type and persistence
#    unchanged; and the shovel reported N moved.
#
# Every process it starts is stopped by pid at the end, also on failure or
# Ctrl-C. On failure it names the step that failed and shows the brokers' logs.
# Needs python3 with pika (STABLEMQ_PYTHON, default .venv/bin/python as
# scripts/test.sh creates it), curl, and root or an installed rabbitmq-server.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
START=$SECONDS
MESSAGES=10000
KEEP=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --messages) MESSAGES=${2:?}; shift 2 ;;
        --keep) KEEP=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

log() { printf '==> [%3d s] %s\n' "$((SECONDS - START))" "$*"; }
STEP="setup"
step() { STEP=$1; log "$1"; }

BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
PY=${STABLEMQ_PYTHON:-$ROOT/.venv/bin/python}
[[ -x $BIN ]] || { echo "error: $BIN is missing (cargo build --release)" >&2; exit 2; }
"$PY" -c 'import pika' 2>/dev/null ||
    { echo "error: $PY cannot import pika (run scripts/test.sh once, or set STABLEMQ_PYTHON)" >&2; exit 2; }
command -v curl >/dev/null || { echo "error: curl is missing" >&2; exit 2; }

WORK=$(mktemp -d -t stablemq-migration.XXXXXX)
SMQ_PID=""
cleanup() {
    local rc=$? i
    if [[ -n $SMQ_PID ]] && kill -0 "$SMQ_PID" 2>/dev/null; then
        kill -TERM "$SMQ_PID" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do kill -0 "$SMQ_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SMQ_PID" 2>/dev/null || true
        wait "$SMQ_PID" 2>/dev/null || true
    fi
    "$ROOT/scripts/rabbitmq-node.sh" stop --dir "$WORK/rabbitmq" >/dev/null 2>&1 || true
    if [[ $rc -ne 0 ]]; then
        echo "FAILED at step: $STEP (exit $rc, after $((SECONDS - START)) s)" >&2
        for f in "$WORK/stablemq.log" "$WORK/rabbitmq/server.log"; do
            [[ -s $f ]] && { echo "--- tail of $f" >&2; tail -n 15 "$f" >&2; }
        done
    fi
    if [[ -n $KEEP ]]; then
        mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/ 2>/dev/null || true
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The client side of the test: the old broker's application, and the checks.
cat >"$WORK/app.py" <<'EOF'
import sys, pika

def connect(uri):
    return pika.BlockingConnection(pika.URLParameters(uri))

def setup_and_publish(uri, n):
    """What the application did on the old broker: topology, then n persistent
    messages with publisher confirms, up to 1000 unconfirmed at a time (pika's
    asynchronous connection: a blocking publish per confirm would take a
    minute for 10,000)."""
    c = connect(uri)
    ch = c.channel()
    ch.exchange_declare("orders.events", "topic", durable=True)
    ch.queue_declare("orders", durable=True)
    ch.queue_bind("orders", "orders.events", "order.#")
    c.close()
    state = {"next": 0, "acked": set(), "sent": 0, "error": None}
    window = 1000

    def props(i):
        return pika.BasicProperties(delivery_mode=2, content_type="text/plain",
                                    message_id="order-%06d" % i, headers={"n": i, "shard": i % 7})

    def fill(channel):
        while state["next"] < n and state["next"] - len(state["acked"]) < window:
            i = state["next"]
            channel.basic_publish("orders.events", "order.created.%d" % (i % 10),
                                  b"order-%06d" % i, props(i), mandatory=True)
            state["next"] += 1

    def on_confirm(frame, channel):
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            state["error"] = "RabbitMQ nacked delivery tag %d" % m.delivery_tag
            channel.connection.close()
            return
        tags = range(1, m.delivery_tag + 1) if m.multiple else [m.delivery_tag]
        state["acked"].update(t for t in tags if t not in state["acked"])
        if len(state["acked"]) == n:
            channel.connection.close()
        else:
            fill(channel)

    def on_return(channel, method, properties, body):
        state["error"] = "RabbitMQ returned %r unroutable" % body
        channel.connection.close()

    def on_open_channel(channel):
        channel.add_on_return_callback(on_return)
        channel.confirm_delivery(lambda frame: on_confirm(frame, channel),
                                 callback=lambda _ok: fill(channel))

    conn = pika.SelectConnection(pika.URLParameters(uri),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_open_channel),
                                 on_open_error_callback=lambda c, e: (state.update(error="connect: %s" % e), c.ioloop.stop()),
                                 on_close_callback=lambda c, r: c.ioloop.stop())
    conn.ioloop.start()
    if state["error"]:
        sys.exit(state["error"])
    if len(state["acked"]) != n:
        sys.exit("only %d of %d publishes were confirmed" % (len(state["acked"]), n))
    left = ready(uri, "orders")
    if left != n:
        sys.exit("RabbitMQ's orders queue holds %d messages after publishing %d" % (left, n))
    print("published %d messages, all confirmed; RabbitMQ's orders queue holds %d" % (n, left))

def login(uri):
    """A client pointed at the new broker logs in with its old credentials."""
    c = connect(uri)
    c.channel().queue_declare("orders", passive=True)
    c.close()
    print("logged in and found queue orders")

def ready(uri, queue):
    c = connect(uri)
    n = c.channel().queue_declare(queue, passive=True).method.message_count
    c.close()
    return n

def check_empty(uri):
    n = ready(uri, "orders")
    if n != 0:
        sys.exit("the old broker's orders queue still holds %d messages" % n)
    print("the old broker's orders queue is empty")

def check_all(uri, n):
    """Consume everything from StableMQ's orders and check each number once."""
    have = ready(uri, "orders")
    if have != n:
        sys.exit("StableMQ's orders queue holds %d messages, expected %d" % (have, n))
    c = connect(uri)
    ch = c.channel()
    ch.basic_qos(prefetch_count=1000)
    seen, bad = set(), []
    for method, props, body in ch.consume("orders", inactivity_timeout=5):
        if method is None:
            break
        i = int(body.decode().split("-")[1])
        want = pika.BasicProperties(delivery_mode=2, content_type="text/plain",
                                    message_id="order-%06d" % i, headers={"n": i, "shard": i % 7})
        if (props.delivery_mode, props.content_type, props.message_id, props.headers) != \
                (want.delivery_mode, want.content_type, want.message_id, want.headers):
            bad.append((i, props))
        if i in seen:
            bad.append((i, "duplicate"))
        seen.add(i)
        ch.basic_ack(method.delivery_tag)
        if len(seen) == n:
            break
    ch.cancel()
    c.close()
    missing = sorted(set(range(n)) - seen)
    if missing or bad:
        sys.exit("missing %d (first %s); wrong or duplicate %d (first %s)"
                 % (len(missing), missing[:5], len(bad), bad[:3]))
    print("all %d messages are in StableMQ, each once, properties and headers unchanged" % n)

cmd = sys.argv[1]
if cmd == "publish":
    setup_and_publish(sys.argv[2], int(sys.argv[3]))
elif cmd == "login":
    login(sys.argv[2])
elif cmd == "check-empty":
    check_empty(sys.argv[2])
elif cmd == "check-all":
    check_all(sys.argv[2], int(sys.argv[3]))
else:
    sys.exit("unknown command " + cmd)
EOF

# --- the old broker, as production has it ---------------------------------------
step "start a private RabbitMQ 3.10 with the management plugin"
timeout 240 "$ROOT/scripts/rabbitmq-node.sh" start --dir "$WORK/rabbitmq" >"$WORK/rabbitmq.env"
# shellcheck disable=SC1091
. "$WORK/rabbitmq.env"
log "RabbitMQ $RABBITMQ_NODENAME: AMQP $RABBITMQ_AMQP_PORT, API $RABBITMQ_MANAGEMENT_PORT (pids $RABBITMQ_PIDS)"

step "give RabbitMQ users admin and app (stablemq ctl against RabbitMQ's API)"
OLD="$BIN ctl --url $RABBITMQ_MANAGEMENT_URL"
timeout 30 $OLD add_user admin 'admin-pw' --tags administrator
timeout 30 $OLD set_permissions admin '.*' '.*' '.*'
timeout 30 $OLD add_user app 'app-pw'
timeout 30 $OLD set_permissions app '.*' '.*' '.*'

step "publish $MESSAGES persistent messages with confirms into RabbitMQ's durable queue orders"
timeout 180 "$PY" "$WORK/app.py" publish "amqp://app:app-pw@127.0.0.1:$RABBITMQ_AMQP_PORT/%2f" "$MESSAGES"

# --- the new broker ---------------------------------------------------------------
step "start a fresh StableMQ"
read -r SMQ_AMQP SMQ_MGMT < <(free_ports 2)
"$BIN" serve --bind 127.0.0.1 --stream-port 0 --amqp-port "$SMQ_AMQP" --management-port "$SMQ_MGMT" \
    --prometheus-port 0 --data-dir "$WORK/stablemq-data" >"$WORK/stablemq.log" 2>&1 &
SMQ_PID=$!
for ((i = 0; ; i++)); do
    curl -fsS -o /dev/null --max-time 2 -u guest:guest "http://127.0.0.1:$SMQ_MGMT/api/overview" 2>/dev/null && break
    kill -0 "$SMQ_PID" 2>/dev/null || { echo "StableMQ exited during start" >&2; exit 1; }
    [[ $i -lt 300 ]] || { echo "StableMQ's API did not answer within 30 s" >&2; exit 1; }
    sleep 0.1
done
log "StableMQ: AMQP $SMQ_AMQP, API $SMQ_MGMT (pid $SMQ_PID)"

# --- the guide, command by command -------------------------------------------------
cd "$WORK"
ADMIN=admin                      # an administrator on the old broker
ADMIN_PASSWORD=admin-pw
VHOST=/                          # repeat steps 4 and 5 for each vhost
OLD_API=$RABBITMQ_MANAGEMENT_URL
NEW_API=http://127.0.0.1:$SMQ_MGMT
OLD_URI="amqp://$ADMIN:$ADMIN_PASSWORD@127.0.0.1:$RABBITMQ_AMQP_PORT/%2f"
NEW_URI="amqp://$ADMIN:$ADMIN_PASSWORD@127.0.0.1:$SMQ_AMQP/%2f"
stablemq() { timeout 120 "$BIN" "$@"; }

step "guide 1: export the definitions from RabbitMQ"
curl -fsS -u "$ADMIN:$ADMIN_PASSWORD" "$OLD_API/api/definitions" -o definitions.json
log "definitions.json: $(wc -c <definitions.json) bytes"

step "guide 2: import the definitions into StableMQ (stablemq ctl import_definitions)"
stablemq ctl --url "$NEW_API" import_definitions definitions.json

step "guide 2: check that everything arrived (as the imported admin)"
stablemq ctl --url "$NEW_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" list_queues name durable arguments
stablemq ctl --url "$NEW_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" list_exchanges name type
stablemq ctl --url "$NEW_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" list_bindings
stablemq ctl --url "$NEW_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" list_users
# The listing must show what RabbitMQ had, not merely succeed.
stablemq ctl --url "$NEW_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" \
    list_bindings source_name destination_name routing_key --no-table-headers | grep -Eq '^orders\.events +orders +order\.#$' ||
    { echo "StableMQ lacks the binding orders.events -> orders (order.#)" >&2; exit 1; }

step "guide 3: point the clients at StableMQ (app logs in with its RabbitMQ password)"
timeout 30 "$PY" "$WORK/app.py" login "amqp://app:app-pw@127.0.0.1:$SMQ_AMQP/%2f"

step "guide 4: drain the old broker with stablemq shovel"
stablemq ctl --url "$OLD_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" \
    list_queues name --no-table-headers |
while read -r queue; do
    stablemq shovel --src-uri "$OLD_URI" --src-queue "$queue" --dest-uri "$NEW_URI" --exit-when-empty
done | tee shovel.out
grep -Eq "^moved $MESSAGES messages from queue \"orders\" .* 0 left ready in the source queue$" shovel.out ||
    { echo "the shovel did not report $MESSAGES messages moved from orders with 0 left" >&2; exit 1; }

step "guide 5: verify (list the queues on both brokers)"
stablemq ctl --url "$OLD_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" list_queues name messages consumers
stablemq ctl --url "$NEW_API" --user "$ADMIN" --password "$ADMIN_PASSWORD" -p "$VHOST" list_queues name messages consumers

# --- the checks ------------------------------------------------------------------
step "check: RabbitMQ's orders queue is empty"
timeout 30 "$PY" "$WORK/app.py" check-empty "$OLD_URI"
step "check: all $MESSAGES messages are in StableMQ, by content"
timeout 120 "$PY" "$WORK/app.py" check-all "amqp://app:app-pw@127.0.0.1:$SMQ_AMQP/%2f" "$MESSAGES"

STEP="done"
log "migration check passed: $MESSAGES messages moved from RabbitMQ to StableMQ by following docs/migrating-from-rabbitmq.md"
