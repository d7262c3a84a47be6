"""The stream protocol over TLS (`[tls] stream_port`, RabbitMQ's
`stream.listeners.ssl.default`), with rstream and an ssl.SSLContext.

  python tls.py TLS_PORT PLAIN_PORT CA_FILE MANAGEMENT_URL [LEADER_PORT REPLICA_PORTS]

(LEADER_PORT and REPLICA_PORTS, comma-separated, are the TLS ports metadata
must name, for a cluster; by default TLS_PORT alone, a single node.)

Against RabbitMQ 3.10.8 (`RABBITMQ_EXTRA_PLUGINS=rabbitmq_stream_management
scripts/rabbitmq-node.sh start --dir D --stream --stream-tls-port N --tls-dir
CERTS`, CERTS holding server.pem, server.key and ca.pem):
`python tls.py N $RABBITMQ_STREAM_PORT CERTS/ca.pem $RABBITMQ_MANAGEMENT_URL`.

Checks: a producer over TLS creates a stream and publishes with confirms; a
consumer over TLS reads it from `first` (rstream dials the leader that
metadata names, with the same context, so metadata must name the TLS
listener, as RabbitMQ's advertised_tls_port does); metadata over TLS names
that port; a consumer on the plain port reads the same entries at the same
offsets (one stream, two listeners); the management API lists a TLS
stream connection with its TLS session (`/api/stream/connections`: ssl,
ssl_protocol) and a plain one as the client made it (through a slave too); a plain client on the TLS port and a TLS client on the plain
port both fail to connect.

Prints one line per check, `ok ...` or `FAIL ...`; exits 1 on a failure.
"""

import asyncio
import base64
import json
import ssl
import sys
import time
import urllib.request

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer
from rstream.client import Client

TLS_PORT, PLAIN_PORT, CA, API = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
LEADER = int(sys.argv[5]) if len(sys.argv) > 5 else TLS_PORT
REPLICAS = sorted(int(p) for p in sys.argv[6].split(",")) if len(sys.argv) > 6 else []
STREAM = f"tls-stream-{time.time_ns()}"
LOGIN = dict(username="guest", password="guest")
N = 100
failures = []


def check(what, ok, detail=""):
    print(("ok " if ok else "FAIL ") + what + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def tls_context():
    ctx = ssl.create_default_context(cafile=CA)
    ctx.check_hostname = True
    return ctx


async def read(port, ctx, expected):
    got = []
    consumer = Consumer("127.0.0.1", port=port, ssl_context=ctx, **LOGIN)
    await consumer.start()

    async def on_message(body, mctx):
        got.append((mctx.offset, bytes(body)))

    await consumer.subscribe(
        STREAM, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)
    )
    deadline = time.monotonic() + 20
    while len(got) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await consumer.close()
    return got


def api_get(path):
    req = urllib.request.Request(API + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


async def listed_on(port, ctx):
    """The stream connections the API lists on `port` while a client with
    `ctx` (None: plain) is connected there."""
    client = Client("127.0.0.1", port, ssl_context=ctx, frame_max=1048576, heartbeat=60)
    await client.start()
    await client.authenticate(vhost="/", **LOGIN)
    # RabbitMQ's management lists a connection once its stats are emitted
    # (every 5 s by default); StableMQ at once.
    deadline = time.monotonic() + 12
    while True:
        listed = [c for c in api_get("/api/stream/connections") if c.get("port") == port]
        if listed or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    await client.close()
    return [{k: c.get(k) for k in ("port", "peer_host", "ssl", "ssl_protocol")} for c in listed]


async def refused(port, ctx):
    """Whether a client with `ctx` (None: plain) fails to connect and log in on `port`."""
    client = Client("127.0.0.1", port, ssl_context=ctx, frame_max=1048576, heartbeat=60)
    try:
        await asyncio.wait_for(client.start(), 5)
        await asyncio.wait_for(client.authenticate(vhost="/", **LOGIN), 5)
    except Exception as e:  # noqa: BLE001 (any failure to connect is the point)
        return True, type(e).__name__
    try:
        await client.close()
    except Exception:  # noqa: BLE001
        pass
    return False, "connected"


async def main():
    ctx = tls_context()
    producer = Producer("127.0.0.1", port=TLS_PORT, ssl_context=ctx, **LOGIN)
    await producer.start()
    await producer.create_stream(STREAM, exists_ok=True)
    confirmed = []

    async def on_confirm(c):
        if c.is_confirmed:
            confirmed.append(c.message_id)

    bodies = [f"tls-{i}".encode() for i in range(N)]
    await producer.send_batch(STREAM, bodies, on_publish_confirm=on_confirm)
    deadline = time.monotonic() + 20
    while len(confirmed) < N and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    check(f"{N} publishes over TLS confirmed", len(confirmed) == N, f"{len(confirmed)} confirmed")
    await producer.close()

    # Clients that stay on the port they dialed (rstream's producer moves to
    # the leader): the API (the master's, in a cluster) lists a TLS one with
    # its session, and a plain one as the client made it (through a slave,
    # the master knows the client's addresses).
    tls_one = await listed_on(TLS_PORT, ctx)
    check(
        "the management API lists the TLS stream connection with its session",
        len(tls_one) == 1 and tls_one[0].get("ssl") is True and tls_one[0].get("ssl_protocol") == "tlsv1.3",
        json.dumps(tls_one),
    )
    plain_one = await listed_on(PLAIN_PORT, None)
    check(
        "the management API lists a plain stream connection as the client made it",
        len(plain_one) == 1 and plain_one[0].get("ssl") is False and plain_one[0].get("peer_host") == "127.0.0.1",
        json.dumps(plain_one),
    )

    meta = Client("127.0.0.1", TLS_PORT, ssl_context=ctx, frame_max=1048576, heartbeat=60)
    await meta.start()
    await meta.authenticate(vhost="/", **LOGIN)
    leader, replicas = await meta.query_leader_and_replicas(STREAM)
    await meta.close()
    check(
        "metadata over TLS names the TLS listeners (leader and replicas)",
        leader.port == LEADER and sorted(r.port for r in replicas) == REPLICAS,
        f"leader {leader.host}:{leader.port}, replicas {replicas}",
    )

    over_tls = await read(TLS_PORT, ctx, N)
    check(
        "a consumer over TLS reads every entry from first, in order",
        over_tls == [(i, b) for i, b in enumerate(bodies)],
        f"{len(over_tls)} read, first {over_tls[:2]}",
    )
    over_plain = await read(PLAIN_PORT, None, N)
    check(
        "a consumer on the plain port reads the same entries at the same offsets",
        over_plain == over_tls,
        f"{len(over_plain)} read",
    )

    r, why = await refused(TLS_PORT, None)
    check("a plain client on the TLS port is refused", r, why)
    r, why = await refused(PLAIN_PORT, ctx)
    check("a TLS client on the plain port is refused", r, why)


asyncio.run(main())
sys.exit(1 if failures else 0)
