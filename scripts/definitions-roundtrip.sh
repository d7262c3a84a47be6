#!/usr/bin/env bash
# Definitions round trip against a real RabbitMQ 3.10:
#   1. start StableMQ (target/release/stablemq) on free loopback ports and
#      import compat-tests/fixtures/rabbitmq-3.10-definitions.json (exported
#      from RabbitMQ by scripts/export-rabbitmq-fixture.sh);
#   2. a user created in RabbitMQ logs in to StableMQ over AMQP (PLAIN and
#      AMQPLAIN) with its original password, and a wrong password is refused;
#      `stablemq serve --definitions FIXTURE` loads the same state at boot;
#   3. export StableMQ's definitions, import them into a fresh RabbitMQ 3.10
#      (scripts/rabbitmq-node.sh, with the federation and shovel plugins the
#      fixture's runtime parameters need), export again, and compare with the
#      fixture: users (hashes included), vhosts, permissions, topic
#      permissions, policies, queues, exchanges, bindings, runtime parameters
#      (vhost limits among them, the emptied one as `[]`) and global
#      parameters (cluster_name, internal_cluster_id: RabbitMQ's import takes
#      the file's) must be equal.
# Exits 0 when nothing was lost or changed. Takes about 30 s.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FIXTURE=${FIXTURE:-$ROOT/compat-tests/fixtures/rabbitmq-3.10-definitions.json}
BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
TMP=$(mktemp -d)
SMQ_PID=""
cleanup() {
    [[ -n $SMQ_PID ]] && kill "$SMQ_PID" 2>/dev/null && wait "$SMQ_PID" 2>/dev/null
    "$ROOT/scripts/rabbitmq-node.sh" stop --dir "$TMP/rmq" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "definitions-roundtrip: FAIL: $*" >&2; exit 1; }

# --- 1. StableMQ imports the fixture ----------------------------------------
read -r AMQP HTTP PROM < <(free_ports 3)
"$BIN" serve --bind 127.0.0.1 --stream-port 0 --amqp-port "$AMQP" --management-port "$HTTP" \
    --prometheus-port "$PROM" --data-dir "$TMP/smq" >"$TMP/smq.log" 2>&1 &
SMQ_PID=$!
for _ in $(seq 1 200); do
    curl -fsS -u guest:guest "http://127.0.0.1:$HTTP/api/overview" >/dev/null 2>&1 && break
    sleep 0.1
done
status=$(curl -sS -o "$TMP/import.json" -w '%{http_code}' -u guest:guest -X POST \
    -H 'content-type: application/json' --data-binary "@$FIXTURE" \
    "http://127.0.0.1:$HTTP/api/definitions")
case $status in
    204) ;;
    200) # Imported, with a list of what was not: only RabbitMQ's own cluster id may be missing.
        extra=$(jq -r '.not_imported[]' "$TMP/import.json")
        [[ -z $extra ]] || fail "StableMQ did not import: $extra" ;;
    *) fail "import into StableMQ: $status $(cat "$TMP/import.json")" ;;
esac

# The imported cluster name is the cluster's name, as in RabbitMQ.
name=$(curl -fsS -u guest:guest "http://127.0.0.1:$HTTP/api/cluster-name" | jq -r .name)
want=$(jq -r '.global_parameters[] | select(.name == "cluster_name") | .value' "$FIXTURE")
[[ $name == "$want" ]] || fail "cluster name after import: '$name', want '$want'"
# Empty limits are kept (RabbitMQ's `[]`), but the one-vhost list hides them.
[[ $(curl -fsS -u guest:guest "http://127.0.0.1:$HTTP/api/vhost-limits/fx-empty") == "[]" ]] \
    || fail "/api/vhost-limits/fx-empty should be []"

# --- 2. RabbitMQ's users log in to StableMQ with their passwords ------------
python3 - "$AMQP" <<'PY' || fail "AMQP login with RabbitMQ passwords"
import socket, struct, sys
port = int(sys.argv[1])
def frame(kind, ch, payload): return struct.pack(">BHI", kind, ch, len(payload)) + payload + b"\xce"
def sstr(s): b = s.encode(); return struct.pack(">B", len(b)) + b
def lstr(b): return struct.pack(">I", len(b)) + b
def read_frame(s):
    h = b""
    while len(h) < 7:
        c = s.recv(7 - len(h)); assert c, "closed"; h += c
    kind, ch, size = struct.unpack(">BHI", h)
    p = b""
    while len(p) < size + 1:
        c = s.recv(size + 1 - len(p)); assert c, "closed"; p += c
    return kind, p[:-1]
def login(user, pw, mech, vhost):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"AMQP\x00\x00\x09\x01")
    read_frame(s)  # connection.start
    if mech == "PLAIN":
        resp = b"\x00" + user.encode() + b"\x00" + pw.encode()
    else:
        resp = sstr("LOGIN") + b"S" + lstr(user.encode()) + sstr("PASSWORD") + b"S" + lstr(pw.encode())
    start_ok = struct.pack(">HH", 10, 11) + lstr(b"") + sstr(mech) + lstr(resp) + sstr("en_US")
    s.sendall(frame(1, 0, start_ok))
    _, p = read_frame(s)
    if struct.unpack(">HH", p[:4]) != (10, 30):
        return False  # connection.close: refused
    s.sendall(frame(1, 0, struct.pack(">HHHIH", 10, 31, 0, 131072, 0)))
    s.sendall(frame(1, 0, struct.pack(">HH", 10, 40) + sstr(vhost) + sstr("") + b"\x00"))
    _, p = read_frame(s)
    s.close()
    return struct.unpack(">HH", p[:4]) == (10, 41)
for mech in ("PLAIN", "AMQPLAIN"):
    assert login("fx-app", "fx-app-pw", mech, "fx-vhost"), f"fx-app {mech}"
    assert login("fx-admin", "fx-admin-pw", mech, "/"), f"fx-admin {mech}"
    assert not login("fx-app", "wrong", mech, "fx-vhost"), "wrong password accepted"
    assert not login("fx-nopw", "", mech, "fx-vhost"), "user without password logged in"
# fx-policy has permissions on fx-vhost only.
assert not login("fx-admin", "fx-admin-pw", "PLAIN", "fx-empty"), "vhost without permissions"
PY

curl -fsS -u guest:guest "http://127.0.0.1:$HTTP/api/definitions" >"$TMP/stablemq.json" \
    || fail "export from StableMQ"

# --- 2b. serve --definitions loads the same file at boot --------------------
kill "$SMQ_PID"; wait "$SMQ_PID" 2>/dev/null || true
"$BIN" serve --bind 127.0.0.1 --stream-port 0 --amqp-port "$AMQP" --management-port "$HTTP" \
    --prometheus-port "$PROM" --data-dir "$TMP/smq-boot" --definitions "$FIXTURE" \
    >"$TMP/smq-boot.log" 2>&1 &
SMQ_PID=$!
for _ in $(seq 1 200); do
    curl -fsS -u fx-admin:fx-admin-pw "http://127.0.0.1:$HTTP/api/users/fx-app" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS -u guest:guest "http://127.0.0.1:$HTTP/api/definitions" >"$TMP/boot.json" \
    || fail "serve --definitions: export"
python3 -c 'import json,sys
a,b=(json.load(open(p)) for p in sys.argv[1:])
for k in ("users","permissions","topic_permissions","policies","queues","exchanges","bindings",
          "parameters","global_parameters"):
    assert sorted(map(json.dumps,a[k]))==sorted(map(json.dumps,b[k])), k' \
    "$TMP/stablemq.json" "$TMP/boot.json" || fail "serve --definitions loaded something else"

# --- 3. RabbitMQ imports StableMQ's export ------------------------------------
# The fixture's federation and shovel parameters need their plugins.
export RABBITMQ_EXTRA_PLUGINS=rabbitmq_shovel,rabbitmq_federation
eval "$("$ROOT/scripts/rabbitmq-node.sh" start --dir "$TMP/rmq")"
status=$(curl -sS -o "$TMP/rimport.json" -w '%{http_code}' -u guest:guest -X POST \
    -H 'content-type: application/json' --data-binary "@$TMP/stablemq.json" \
    "$RABBITMQ_MANAGEMENT_URL/api/definitions")
[[ $status == 2* ]] || fail "import into RabbitMQ: $status $(cat "$TMP/rimport.json")"
# The import replaced guest's hash: log in with the fixture's guest password.
curl -fsS -u guest:guest "$RABBITMQ_MANAGEMENT_URL/api/definitions" >"$TMP/rabbitmq.json" \
    || fail "export from RabbitMQ"

python3 - "$FIXTURE" "$TMP/stablemq.json" "$TMP/rabbitmq.json" <<'PY' || fail "definitions differ"
import json, sys
KEYS = ["users", "vhosts", "permissions", "topic_permissions", "policies",
        "queues", "exchanges", "bindings", "parameters", "global_parameters"]
def norm(doc):
    out = {}
    for k in KEYS:
        items = []
        for it in doc.get(k, []):
            if k == "vhosts":
                it = {"name": it["name"]}  # 3.10 exports names only
            items.append(json.dumps(it, sort_keys=True))
        out[k] = sorted(items)
    return out
want, smq, back = (norm(json.load(open(p))) for p in sys.argv[1:])
ok = True
for label, got in (("StableMQ export", smq), ("RabbitMQ after re-import", back)):
    for k in KEYS:
        missing = sorted(set(want[k]) - set(got[k]))
        extra = sorted(set(got[k]) - set(want[k]))
        if missing or extra:
            ok = False
            print(f"{label}: {k}:")
            for m in missing: print("   missing", m)
            for e in extra: print("   extra  ", e)
    counts = ", ".join(f"{len(got[k])} {k}" for k in KEYS)
    print(f"{label}: {counts}")
sys.exit(0 if ok else 1)
PY
echo "definitions-roundtrip: OK" >&2
