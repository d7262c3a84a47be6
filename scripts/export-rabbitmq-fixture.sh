#!/usr/bin/env bash
# Generate compat-tests/fixtures/rabbitmq-3.10-definitions.json from a real
# RabbitMQ 3.10 (Debian's rabbitmq-server, started privately by
# scripts/rabbitmq-node.sh): users with passwords and tags, vhosts with
# metadata, permissions, topic permissions, policies, queues with arguments,
# exchanges of every type, bindings of every kind, runtime parameters
# (federation upstreams and an upstream set, a dynamic shovel: the node runs
# with the federation and shovel plugins), vhost limits (set, and emptied as
# RabbitMQ keeps them) and global parameters (cluster_name, a free-form one,
# and RabbitMQ's own internal_cluster_id) are made through its HTTP API, then
# its definitions export is written, pretty-printed with sorted keys. The
# fixture is generated, never edited by hand.
#
#   scripts/export-rabbitmq-fixture.sh [OUTPUT]
#
# The passwords below are the fixture's: the round trip
# (scripts/definitions-roundtrip.sh) logs in with them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/compat-tests/fixtures/rabbitmq-3.10-definitions.json}
TMP=$(mktemp -d)
cleanup() {
    "$ROOT/scripts/rabbitmq-node.sh" stop --dir "$TMP/rmq" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
# The components of the runtime parameters below exist only with these plugins.
export RABBITMQ_EXTRA_PLUGINS=rabbitmq_shovel,rabbitmq_federation
eval "$("$ROOT/scripts/rabbitmq-node.sh" start --dir "$TMP/rmq")"
API=$RABBITMQ_MANAGEMENT_URL

# One API call as guest; fails the script on any status but 2xx.
call() {
    local method=$1 path=$2 body=${3:-}
    local status
    status=$(curl -sS -o "$TMP/answer" -w '%{http_code}' -u guest:guest -X "$method" \
        -H 'content-type: application/json' ${body:+--data "$body"} "$API$path")
    if [[ $status != 2* ]]; then
        echo "export-rabbitmq-fixture: $method $path: $status $(cat "$TMP/answer")" >&2
        exit 1
    fi
}

# Users: a password each (tags as a string and as a list), one without a password.
call PUT /api/users/fx-admin '{"password":"fx-admin-pw","tags":"administrator"}'
call PUT /api/users/fx-app '{"password":"fx-app-pw","tags":["management","monitoring"]}'
call PUT /api/users/fx-policy '{"password":"fx-policy-pw","tags":"policymaker"}'
call PUT /api/users/fx-nopw '{"password_hash":"","tags":""}'

# Vhosts with metadata.
call PUT /api/vhosts/fx-vhost '{"description":"fixture vhost","tags":"fixture,stablemq"}'
call PUT /api/vhosts/fx-empty '{}'

# Permissions and topic permissions.
call PUT /api/permissions/fx-vhost/fx-admin '{"configure":".*","write":".*","read":".*"}'
call PUT /api/permissions/%2F/fx-admin '{"configure":".*","write":".*","read":".*"}'
call PUT /api/permissions/fx-vhost/fx-app '{"configure":"^fx-","write":"^fx-|^amq\\.topic$","read":"^fx-"}'
call PUT /api/permissions/fx-vhost/fx-policy '{"configure":"","write":"","read":""}'
call PUT /api/topic-permissions/fx-vhost/fx-app '{"exchange":"amq.topic","write":"^fx\\.","read":".*"}'
call PUT /api/topic-permissions/fx-vhost/fx-admin '{"exchange":"fx-topic","write":"^{username}\\.","read":""}'

# Policies.
call PUT /api/policies/fx-vhost/fx-ttl '{"pattern":"^fx-ttl-","apply-to":"queues","priority":1,"definition":{"message-ttl":60000,"max-length":100}}'
call PUT /api/policies/fx-vhost/fx-ae '{"pattern":"^fx-ae-src","apply-to":"exchanges","priority":0,"definition":{"alternate-exchange":"fx-ae"}}'

# Exchanges of every type, internal, auto-delete, with an alternate exchange.
x() { call PUT "/api/exchanges/fx-vhost/$1" "$2"; }
x fx-direct '{"type":"direct","durable":true}'
x fx-fanout '{"type":"fanout","durable":true}'
x fx-topic '{"type":"topic","durable":true}'
x fx-headers '{"type":"headers","durable":true}'
x fx-dlx '{"type":"direct","durable":true}'
x fx-ae '{"type":"fanout","durable":true}'
x fx-ae-src '{"type":"direct","durable":true}'
x fx-internal '{"type":"topic","durable":true,"internal":true}'
x fx-autodel '{"type":"direct","durable":true,"auto_delete":true}'
x fx-with-ae '{"type":"direct","durable":true,"arguments":{"alternate-exchange":"fx-ae"}}'

# Queues with arguments.
q() { call PUT "/api/queues/fx-vhost/$1" "$2"; }
q fx-classic '{"durable":true,"arguments":{"x-max-length":1000,"x-overflow":"reject-publish","x-message-ttl":30000,"x-dead-letter-exchange":"fx-dlx","x-dead-letter-routing-key":"dead"}}'
q fx-quorum '{"durable":true,"arguments":{"x-queue-type":"quorum","x-delivery-limit":5}}'
q fx-priority '{"durable":true,"arguments":{"x-max-priority":10}}'
q fx-lazy '{"durable":true,"arguments":{"x-queue-mode":"lazy","x-max-length-bytes":1048576}}'
q fx-expires '{"durable":true,"arguments":{"x-expires":3600000,"x-single-active-consumer":true}}'
q fx-ttl-q '{"durable":true}'
q fx-dead '{"durable":true}'
call PUT /api/queues/%2F/fx-root-q '{"durable":true}'

# Bindings: queue and exchange destinations, every exchange type, arguments.
b() { call POST "/api/bindings/fx-vhost/e/$1/$2/$3" "$4"; }
b fx-direct q fx-classic '{"routing_key":"rk"}'
b fx-fanout q fx-dead '{"routing_key":""}'
b fx-topic q fx-classic '{"routing_key":"a.*.#"}'
b fx-headers q fx-priority '{"routing_key":"","arguments":{"x-match":"any","h1":"v1","h2":2}}'
b fx-direct e fx-topic '{"routing_key":"e2e"}'
b fx-dlx q fx-dead '{"routing_key":"dead"}'
b fx-ae q fx-dead '{"routing_key":""}'
b fx-autodel q fx-classic '{"routing_key":"auto"}'
b fx-internal q fx-lazy '{"routing_key":"#"}'
call POST /api/bindings/%2F/e/amq.direct/q/fx-root-q '{"routing_key":"root"}'

# Runtime parameters of the federation and shovel plugins. The URIs point at
# a closed port: the shovel and upstreams stay idle, so they declare nothing.
call PUT /api/parameters/federation-upstream/fx-vhost/fx-up '{"value":{"uri":"amqp://127.0.0.1:1","expires":3600000,"max-hops":2,"ack-mode":"on-confirm"}}'
call PUT /api/parameters/federation-upstream/fx-vhost/fx-up2 '{"value":{"uri":["amqp://127.0.0.1:1","amqp://127.0.0.1:2"],"exchange":"fx-topic","trust-user-id":false}}'
call PUT /api/parameters/federation-upstream-set/fx-vhost/fx-set '{"value":[{"upstream":"fx-up"},{"upstream":"fx-up2","exchange":"fx-direct"}]}'
call PUT /api/parameters/shovel/fx-vhost/fx-shovel '{"value":{"src-protocol":"amqp091","src-uri":"amqp://127.0.0.1:1","src-queue":"fx-shovel-src","dest-protocol":"amqp091","dest-uri":"amqp://127.0.0.1:1","dest-queue":"fx-shovel-dst","ack-mode":"on-confirm","src-delete-after":"never","reconnect-delay":5}}'

# Vhost limits: both kinds on fx-vhost, one on /; on fx-empty a limit set and
# deleted again, which leaves RabbitMQ's empty limits parameter behind.
call PUT /api/vhost-limits/fx-vhost/max-connections '{"value":100}'
call PUT /api/vhost-limits/fx-vhost/max-queues '{"value":50}'
call PUT /api/vhost-limits/%2F/max-queues '{"value":-1}'
call PUT /api/vhost-limits/fx-empty/max-connections '{"value":1}'
call DELETE /api/vhost-limits/fx-empty/max-connections

# Global parameters: the cluster name (as `PUT /api/cluster-name` stores it)
# and a free-form one; internal_cluster_id is the node's own.
call PUT /api/cluster-name '{"name":"fx-cluster"}'
call PUT /api/global-parameters/fx-global '{"value":{"owner":"fixture","list":[1,"two",true]}}'

call GET /api/definitions
mkdir -p "$(dirname "$OUT")"
jq -S . "$TMP/answer" >"$OUT"
echo "export-rabbitmq-fixture: wrote $OUT (RabbitMQ $(jq -r .rabbit_version "$OUT"))" >&2
