"""rabbitmq_stream_management's endpoints, with rstream.

    stream_api.py STREAM_PORT MANAGEMENT_URL [--rabbitmq]

A publisher with a reference publishes 5 messages with confirms, a consumer
with an `identifier` property reads them from the first offset; then the
/api/stream/... endpoints must list both with RabbitMQ 3.10.8's fields and
counts (recorded with its rabbitmq_stream_management plugin and this
script's cases). Prints "ok NAME" per check, "FAIL NAME ..." otherwise, and
exits 1 on any failure. Only 127.0.0.1, every wait bounded.

The stream connection's object in /api/connections differs: RabbitMQ 3.10
gives it no `channels` and no traffic counters; StableMQ counts its bytes
and socket reads and writes as for an AMQP connection, and says 0 channels
(with --rabbitmq the fields must be absent).
"""

import asyncio
import base64
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

PORT, MGMT = int(sys.argv[1]), sys.argv[2]
RABBITMQ = "--rabbitmq" in sys.argv[3:]
S = "stream-api"
failed = []


def get(path):
    req = urllib.request.Request(
        MGMT + path, headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def check(name, got, want):
    if got == want:
        print("ok", name, flush=True)
    else:
        print("FAIL", name, "got", repr(got), "want", repr(want), flush=True)
        failed.append(name)


def fields(obj, keys):
    return {k: obj.get(k) for k in keys} if isinstance(obj, dict) else obj


async def main():
    async with Producer("127.0.0.1", port=PORT, username="guest", password="guest") as p:
        await p.create_stream(S, exists_ok=True)
        for i in range(5):
            await p.send_wait(S, b"m%d" % i, publisher_name="pref")
        c = Consumer("127.0.0.1", port=PORT, username="guest", password="guest")
        await c.start()
        got = []

        async def cb(msg, ctx):
            got.append(ctx.offset)

        await c.subscribe(
            S, cb, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            properties={"identifier": "idf"},
        )
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        check("the consumer read 5", len(got), 5)

        # RabbitMQ's management statistics lag by up to its collection
        # interval (5 s): poll, as a user would, until every check holds.
        def api_checks():
            out = []

            def check(name, got, want):
                out.append((name, got, want))

            status, pubs = get("/api/stream/publishers/%2F/" + S)
            check("publishers of the stream: 200", status, 200)
            check("one publisher", len(pubs or []), 1)
            pub = (pubs or [{}])[0]
            check(
                "publisher fields",
                fields(pub, ["reference", "published", "confirmed", "errored", "publisher_id"]),
                {"reference": "pref", "published": 5, "confirmed": 5, "errored": 0, "publisher_id": 0},
            )
            check("publisher queue", pub.get("queue"), {"name": S, "vhost": "/"})
            check(
                "publisher connection details",
                sorted((pub.get("connection_details") or {}).keys()),
                ["name", "node", "peer_host", "peer_port", "user"],
            )
            status, cons = get("/api/stream/consumers/%2F")
            check("consumers of the vhost: 200", status, 200)
            mine = [x for x in cons or [] if x.get("queue", {}).get("name") == S]
            check("one consumer", len(mine), 1)
            con = (mine or [{}])[0]
            check(
                "consumer fields",
                fields(con, ["subscription_id", "consumed", "offset", "offset_lag", "properties"]),
                {"subscription_id": 0, "consumed": 5, "offset": 4, "offset_lag": 0, "properties": {"identifier": "idf"}},
            )
            check("consumer has credits", isinstance(con.get("credits"), int) and con["credits"] > 0, True)

            status, conns = get("/api/stream/connections")
            check("stream connections: 200", status, 200)
            check("all of protocol stream", {x.get("protocol") for x in conns or []}, {"stream"})
            name = (pub.get("connection_details") or {}).get("name", "")
            q = urllib.parse.quote(name, safe="")
            status, one = get("/api/stream/connections/%2F/" + q)
            check("the publisher's connection", (status, (one or {}).get("name")), (200, name))
            status, its = get("/api/stream/connections/%2F/" + q + "/publishers")
            check("its publishers", (status, [x.get("reference") for x in its or []]), (200, ["pref"]))
            status, its = get("/api/stream/connections/%2F/" + q + "/consumers")
            check("its consumers", (status, its), (200, []))
            status, all_conns = get("/api/connections")
            gen = [x for x in all_conns or [] if x.get("name") == name]
            gen = (gen or [{}])[0]
            traffic = [gen.get(k) for k in ("channels", "recv_oct", "recv_cnt", "send_oct", "send_cnt")]
            if RABBITMQ:
                check("its /api/connections object: no channels, no traffic", traffic, [None] * 5)
            else:
                # 5 publishes of 2 bytes and their frames in, 5 confirms out.
                check(
                    "its /api/connections object: 0 channels, bytes and reads/writes counted",
                    [traffic[0]] + [isinstance(v, int) and v > 0 for v in traffic[1:]]
                    + [traffic[1] > 5 * 2 if traffic[1] else False],
                    [0, True, True, True, True, True],
                )
            check("no such vhost: 404", get("/api/stream/publishers/nope")[0], 404)
            check("no such connection: 404", get("/api/stream/connections/%2F/nope/consumers")[0], 404)
            return out

        deadline = time.monotonic() + 15
        while True:
            results = api_checks()
            if all(g == w for _, g, w in results) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        for name, got, want in results:
            check(name, got, want)
        await c.close()
    # Gone with their connections.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if get("/api/stream/publishers")[1] == [] and get("/api/stream/consumers")[1] == []:
            break
        await asyncio.sleep(0.1)
    check("none left after close", (get("/api/stream/publishers")[1], get("/api/stream/consumers")[1]), ([], []))


asyncio.run(asyncio.wait_for(main(), 60))
sys.exit(1 if failed else 0)
