#!/usr/bin/env bash
# rabbitmqadmin against StableMQ: Debian's rabbitmqadmin 3.10 (from the
# rabbitmq-server package, installed if missing) drives a fresh StableMQ
# (target/release/stablemq, or STABLEMQ_BIN) through the management API as an
# operator's script would: declare a vhost, permissions, an exchange, a queue
# with arguments, a binding, a policy and a runtime parameter; publish, get and
# purge; list them back (tables and raw_json); export and import definitions;
# then delete everything again, the binding by the properties_key that
# `list bindings` shows. Each step's output is checked, not only its exit
# status. Exits 0 when every step did what it says. Takes a few seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
ADMIN=/usr/bin/rabbitmqadmin
[[ -x $ADMIN ]] || ensure_rabbitmq
TMP=$(mktemp -d)
SMQ_PID=""
cleanup() {
    [[ -n $SMQ_PID ]] && stop_pids "$SMQ_PID"
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "rabbitmqadmin-check: FAIL: $*" >&2
    tail -20 "$TMP/smq.log" >&2 || true
    exit 1
}

read -r AMQP HTTP PROM < <(free_ports 3)
"$BIN" serve --bind 127.0.0.1 --stream-port 0 --amqp-port "$AMQP" --management-port "$HTTP" \
    --prometheus-port "$PROM" --data-dir "$TMP/smq" >"$TMP/smq.log" 2>&1 &
SMQ_PID=$!
for _ in $(seq 1 200); do
    curl -fsS -u guest:guest "http://127.0.0.1:$HTTP/api/overview" >/dev/null 2>&1 && break
    sleep 0.1
done

# One rabbitmqadmin call; its output in $OUT, the script fails on a non-zero exit.
adm() {
    OUT=$("$ADMIN" -H 127.0.0.1 -P "$HTTP" -u guest -p guest "$@" 2>&1) \
        || fail "rabbitmqadmin $*: $OUT"
}
# Like adm, and the output must contain $1.
expect() {
    local want=$1
    shift
    adm "$@"
    [[ $OUT == *"$want"* ]] || fail "rabbitmqadmin $*: no '$want' in: $OUT"
}
# jq expression $1 must hold on `rabbitmqadmin ... -f raw_json`.
json() {
    local check=$1
    shift
    adm "$@" -f raw_json
    jq -e "$check" >/dev/null <<<"$OUT" || fail "rabbitmqadmin $*: '$check' does not hold on: $OUT"
}

expect "vhost declared" declare vhost name=adm
expect "permission declared" declare permission vhost=adm user=guest 'configure=.*' 'write=.*' 'read=.*'
expect "exchange declared" -V adm declare exchange name=adm-x type=topic
expect "queue declared" -V adm declare queue name=adm-q durable=true 'arguments={"x-max-length":10}'
expect "binding declared" -V adm declare binding source=adm-x destination=adm-q 'routing_key=a.#'
expect "policy declared" -V adm declare policy name=adm-p 'pattern=^adm-q$' apply-to=queues \
    'definition={"message-ttl":600000}' priority=3
expect "parameter declared" -V adm declare parameter component=federation-upstream name=adm-up \
    'value={"uri":"amqp://127.0.0.1:1"}'

expect "Message published" -V adm publish exchange=adm-x routing_key=a.b payload=one
expect "Message published" -V adm publish exchange=adm-x routing_key=a.c payload=two
expect "NOT routed" -V adm publish exchange=adm-x routing_key=b payload=lost
json 'map(select(.name == "adm-q"))[0] | .messages == 2 and .arguments["x-max-length"] == 10 and .policy == "adm-p"' \
    -V adm list queues name messages arguments policy
json '.[0].payload == "one" and .[0].routing_key == "a.b" and .[0].message_count == 1' \
    -V adm get queue=adm-q ackmode=ack_requeue_true count=1
expect "queue purged" -V adm purge queue name=adm-q
json 'map(select(.name == "adm-q"))[0].messages == 0' -V adm list queues name messages

json 'any(.[]; .name == "adm-p" and .pattern == "^adm-q$" and .priority == 3 and .definition["message-ttl"] == 600000)' \
    -V adm list policies
json 'any(.[]; .name == "adm-up" and .component == "federation-upstream" and .value.uri == "amqp://127.0.0.1:1")' \
    -V adm list parameters
json 'any(.[]; .name == "adm")' list vhosts
json 'any(.[]; .name == "guest" and .hashing_algorithm == "rabbit_password_hashing_sha256")' list users
json 'any(.[]; .name == "adm-x" and .type == "topic")' -V adm list exchanges
json 'any(.[]; .name != null)' list nodes
expect "3.10" show overview

# Definitions out and back in.
expect "Exported definitions" export "$TMP/defs.json"
jq -e 'any(.queues[]; .name == "adm-q") and any(.policies[]; .name == "adm-p")' "$TMP/defs.json" >/dev/null \
    || fail "the export lacks adm-q or adm-p"
expect "Uploaded definitions" import "$TMP/defs.json"

# The binding, deleted by the properties_key that the listing shows.
adm -V adm list bindings -f raw_json
key=$(jq -r '.[] | select(.source == "adm-x" and .destination == "adm-q") | .properties_key' <<<"$OUT")
[[ -n $key ]] || fail "no adm-x -> adm-q binding listed: $OUT"
expect "binding deleted" -V adm delete binding source=adm-x destination=adm-q destination_type=queue \
    "properties_key=$key"
json 'all(.[]; .source != "adm-x")' -V adm list bindings
expect "parameter deleted" -V adm delete parameter component=federation-upstream name=adm-up
expect "policy deleted" -V adm delete policy name=adm-p
expect "queue deleted" -V adm delete queue name=adm-q
expect "exchange deleted" -V adm delete exchange name=adm-x
expect "permission deleted" delete permission vhost=adm user=guest
expect "vhost deleted" delete vhost name=adm
json 'all(.[]; .name != "adm")' list vhosts
echo "rabbitmqadmin-check: OK" >&2
