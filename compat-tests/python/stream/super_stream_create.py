"""Create and delete super stream (0x1d, 0x1e; RabbitMQ 3.13+) with rstream's
Client.create_super_stream and delete_super_stream: what is made (checked
through the management API: a durable direct exchange with
`x-super-stream: true`, a stream per partition with the arguments, a binding
per partition with its key and `x-stream-partition-order`), route and
partitions of it, rstream's SuperStreamProducer and SuperStreamConsumer on
it, the error codes RabbitMQ's rabbit_stream_reader answers (0x05 taken,
0x11 invalid, 0x10 access refused, 0x02 no such super stream), and a delete
that removes the exchange and the partitions.

RabbitMQ 3.10 (the local reference) has neither command: the expected
answers are read from rabbitmq-server's rabbit_stream_reader.erl and
rabbit_stream_manager.erl, not recorded.

Each case prints `ok NAME` or `FAIL NAME: got ..., want ...`; the script
exits 1 if any case failed. Waits are bounded (10 s); names carry a random
suffix.

Usage: python super_stream_create.py STREAM_PORT MANAGEMENT_URL
"""

import asyncio
import logging
import os
import sys
import urllib.parse

import mmh3
from rstream import (
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    RouteType,
    ServerError,
    SuperStreamConsumer,
    SuperStreamProducer,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mgmt  # noqa: E402

PORT, MGMT = int(sys.argv[1]), sys.argv[2]
HOST = "127.0.0.1"
LOGIN = dict(username="guest", password="guest")
WAIT = 10.0
SUFFIX = os.urandom(4).hex()
failed = []

logging.getLogger("rstream").setLevel(logging.CRITICAL + 1)


def check(name, got, want):
    if got == want:
        print(f"ok {name}", flush=True)
    else:
        print(f"FAIL {name}: got {got!r}, want {want!r}", flush=True)
        failed.append(name)


def api(method, path, body=None):
    """(status, JSON or None) of a management API request as guest."""
    return mgmt.api(MGMT, method, path, body, WAIT)


def q(name):
    return urllib.parse.quote(name, safe="")


async def step(aw):
    return await asyncio.wait_for(aw, WAIT)


async def outcome(aw):
    """("ok", value), ("error", class name, code) or ("timeout",)."""
    try:
        return ("ok", await step(aw))
    except ServerError as e:
        return ("error", type(e).__name__, getattr(e, "code", None))
    except asyncio.TimeoutError:
        return ("timeout",)


def made(ss, parts):
    """What the management API shows of a super stream: the exchange
    (type, durable, arguments), each partition's arguments, the bindings."""
    _, x = api("GET", f"/api/exchanges/%2F/{q(ss)}")
    exchange = x and (x.get("type"), x.get("durable"), x.get("arguments"))
    queues = []
    for p in parts:
        _, qd = api("GET", f"/api/queues/%2F/{q(p)}")
        queues.append(qd and qd.get("arguments"))
    _, bs = api("GET", f"/api/exchanges/%2F/{q(ss)}/bindings/source")
    bindings = [(b["destination"], b["routing_key"], b["arguments"]) for b in bs or []]
    return exchange, queues, sorted(bindings)


def gone(ss, parts):
    """The HTTP status of the exchange and of each partition."""
    return [api("GET", f"/api/exchanges/%2F/{q(ss)}")[0]] + [
        api("GET", f"/api/queues/%2F/{q(p)}")[0] for p in parts
    ]


def partition_of(key, n):
    """rstream's hash routing (murmur3 of the key's UTF-16, seed 104729)."""
    digest = mmh3.hash_bytes(bytes(key, "UTF-16"), 104729)
    return int.from_bytes(digest, "little", signed=False) % n


async def produce(ss, routing, keys):
    """One message per key through a SuperStreamProducer; the confirms."""
    confirmed = []

    async def on_confirm(status):
        confirmed.append(status.is_confirmed)

    async def extractor(message):
        return message.decode().split(":")[0]

    producer = SuperStreamProducer(HOST, port=PORT, super_stream=ss, routing=routing,
                                   routing_extractor=extractor, **LOGIN)
    try:
        await step(producer.start())
        for key in keys:
            await step(producer.send(f"{key}:{SUFFIX}".encode(), on_publish_confirm=on_confirm))
        for _ in range(100):
            if len(confirmed) >= len(keys):
                break
            await asyncio.sleep(0.1)
    finally:
        try:
            await step(producer.close())
        except asyncio.TimeoutError:
            pass
    return confirmed


async def consume_all(ss, count):
    """Every message of the super stream from first, as {stream: [body]}."""
    got = {}
    enough = asyncio.Event()

    async def on_message(msg, ctx):
        got.setdefault(ctx.stream, []).append(bytes(msg).decode())
        if sum(map(len, got.values())) >= count:
            enough.set()

    consumer = SuperStreamConsumer(HOST, port=PORT, super_stream=ss, **LOGIN)
    try:
        await step(consumer.start())
        await step(consumer.subscribe(
            on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)))
        try:
            await step(enough.wait())
        except asyncio.TimeoutError:
            pass
        await asyncio.sleep(0.5)
    finally:
        await step(consumer.close())
    return {k: sorted(v) for k, v in got.items()}


async def case_create(c, ss, keys, parts):
    got = await outcome(c.create_super_stream(ss, parts, keys, {"max-length-bytes": 1000000}))
    check("create super stream", got, ("ok", None))
    check("partitions: in binding key order", await outcome(c.partitions(ss)), ("ok", parts))
    routes = [await outcome(c.route(k, ss)) for k in keys]
    check("route: each key to its partition", routes, [("ok", [p]) for p in parts])
    stream_args = {
        "x-max-length-bytes": 1000000,
        "x-queue-leader-locator": "balanced",
        "x-queue-type": "stream",
    }
    check("made: the exchange, the streams with their arguments, the bindings",
          made(ss, parts),
          (("direct", True, {"x-super-stream": True}),
           [stream_args] * len(parts),
           sorted((p, k, {"x-stream-partition-order": i})
                  for i, (p, k) in enumerate(zip(parts, keys)))))


async def case_errors(c, ss, parts):
    other = f"other-{SUFFIX}"
    got = await outcome(c.create_super_stream(ss, [f"{ss}-new"], ["new"]))
    check("create it again: stream already exists (5)", got, ("error", "StreamAlreadyExists", 5))
    got = await outcome(c.create_super_stream(other, [f"{other}-0", parts[0]], ["0", "1"]))
    check("a partition that exists: stream already exists (5)", got,
          ("error", "StreamAlreadyExists", 5))
    got = await outcome(c.create_super_stream(other, [f"{other}-0", f"{other}-1"], ["0"]))
    check("fewer binding keys than partitions: precondition failed (17)", got,
          ("error", "PreconditionFailed", 17))
    got = await outcome(c.create_super_stream(other, [f"{other}-0", f"{other}-0"], ["0", "1"]))
    check("a partition twice: precondition failed (17)", got, ("error", "PreconditionFailed", 17))
    got = await outcome(c.create_super_stream(f"amq.{other}", [f"{other}-0"], ["0"]))
    check("a name in amq.: precondition failed (17)", got, ("error", "PreconditionFailed", 17))
    check("none of these made anything", gone(other, [f"{other}-0", f"{other}-1"]), [404] * 3)
    check("nor touched the super stream", await outcome(c.partitions(ss)), ("ok", parts))
    got = await outcome(c.delete_super_stream(f"missing-{SUFFIX}"))
    check("delete a missing super stream: stream does not exist (2)", got,
          ("error", "StreamDoesNotExist", 2))


async def case_access(ss):
    """A user who may configure only `ssu-*`: 0x10 for a super stream or a
    partition outside it, and nothing made."""
    user, password = f"ssu-{SUFFIX}", "secret"
    api("PUT", f"/api/users/{q(user)}", {"password": password, "tags": ""})
    api("PUT", f"/api/permissions/%2F/{q(user)}",
        {"configure": "^ssu-.*", "write": ".*", "read": ".*"})
    producer = Producer(HOST, port=PORT, username=user, password=password)
    try:
        await step(producer.start())
        c = await producer.default_client
        got = await outcome(c.create_super_stream(f"ssu-{SUFFIX}", [f"nope-{SUFFIX}"], ["0"]))
        check("create, a partition the user may not configure: access refused (16)", got,
              ("error", "AccessRefused", 16))
        check("nothing made", gone(f"ssu-{SUFFIX}", [f"nope-{SUFFIX}"]), [404, 404])
        got = await outcome(c.delete_super_stream(ss))
        check("delete a super stream the user may not configure: access refused (16)", got,
              ("error", "AccessRefused", 16))
    finally:
        await step(producer.close())
        api("DELETE", f"/api/users/{q(user)}")


async def case_clients(ss, keys, parts):
    hashed = [f"key-{i}" for i in range(12)]
    check("rstream: hash routing, every message confirmed",
          await outcome(produce(ss, RouteType.Hash, hashed)), ("ok", [True] * len(hashed)))
    for key in keys:
        check(f"rstream: key routing of {key} confirmed",
              await outcome(produce(ss, RouteType.Key, [key])), ("ok", [True]))
    want = {}
    for key in hashed:
        want.setdefault(parts[partition_of(key, len(parts))], []).append(f"{key}:{SUFFIX}")
    for key, p in zip(keys, parts):
        want.setdefault(p, []).append(f"{key}:{SUFFIX}")
    got = await consume_all(ss, len(hashed) + len(keys))
    check("rstream: SuperStreamConsumer reads each partition's messages",
          got, {k: sorted(v) for k, v in want.items()})


async def case_delete(c, ss, parts):
    check("delete super stream", await outcome(c.delete_super_stream(ss)), ("ok", None))
    check("the exchange and the partitions are gone", gone(ss, parts), [404] * (1 + len(parts)))
    exists = [await outcome(c.stream_exists(p)) for p in parts]
    check("metadata: no partition exists", exists, [("ok", False)] * len(parts))
    got = await outcome(c.delete_super_stream(ss))
    check("delete it again: stream does not exist (2)", got, ("error", "StreamDoesNotExist", 2))


async def main():
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    ss = f"css-{SUFFIX}"
    keys = ["a", "b", "c"]
    parts = [f"{ss}-{k}" for k in keys]
    producer = Producer(HOST, port=PORT, **LOGIN)
    await step(producer.start())
    try:
        c = await producer.default_client
        await case_create(c, ss, keys, parts)
        await case_errors(c, ss, parts)
        await case_access(ss)
        await case_clients(ss, keys, parts)
        await case_delete(c, ss, parts)
    finally:
        await step(producer.close())
    print(f"{len(failed)} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    asyncio.run(main())
