"""What the stream clients' own test suites (scripts/stream-suites.sh) found
StableMQ doing otherwise than RabbitMQ 3.10.8, one case each, checked
against both (run with `--rabbitmq` against a node of
`scripts/rabbitmq-node.sh start --stream`; every expectation is 3.10.8's):

- deduplication within one publish frame, and publishing id 0 from a
  reference that has stored nothing (rabbitmq-stream-js-client numbers
  from 0);
- a gzip sub-entry batch (rstream's and the js client's compression);
- offset spec `last`: the newest chunk, which is a whole (small) publish
  frame;
- a stream deleted under a publisher that sends nothing: a metadata update;
- a connection closed by the management API: dropped, no close frame;
- create stream with an empty name: precondition failed (0x11).

Each case prints `ok NAME` or `FAIL NAME: got ..., want ...`; exits 1 if
any failed. Waits are bounded (10 s); names carry a random suffix.

Usage: python suite_findings.py STREAM_PORT AMQP_PORT MANAGEMENT_URL [--rabbitmq]
"""

import asyncio
import base64
import json
import logging
import os
import struct
import sys
import time
import urllib.parse
import urllib.request

import pika
from rstream import ConsumerOffsetSpecification, OffsetType, Producer
from rstream.compression import CompressionType

# stream_protocol reads STREAM_PORT AMQP_PORT [--rabbitmq] from argv.
MANAGEMENT = sys.argv.pop(3)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_protocol as sp  # noqa: E402  (its plain-socket helpers)

HOST = "127.0.0.1"
LOGIN = dict(username="guest", password="guest")
SUFFIX = os.urandom(4).hex()
check, failed = sp.check, sp.failed

logging.getLogger("rstream").setLevel(logging.CRITICAL + 1)


def declare_publisher(sock, publisher_id, stream, reference=""):
    body = struct.pack(">IB", 1, publisher_id) + sp.s16(reference) + sp.s16(stream)
    sock.sendall(sp.frame(0x0001, body))
    return sp.response(sp.recv_frame(sock))[3]


def publish(sock, publisher_id, messages):
    """One publish frame of (publishing id, body); the confirmed ids."""
    body = struct.pack(">Bi", publisher_id, len(messages))
    for pid, data in messages:
        body += struct.pack(">Qi", pid, len(data)) + data
    sock.sendall(sp.frame(0x0002, body))
    confirmed = []
    deadline = time.monotonic() + sp.WAIT
    while len(confirmed) < len(messages) and time.monotonic() < deadline:
        f = sp.recv_frame(sock, deadline - time.monotonic())
        if not isinstance(f, bytes):
            break
        if struct.unpack(">H", f[:2])[0] == 0x0003:
            (count,) = struct.unpack(">i", f[5:9])
            confirmed += list(struct.unpack(f">{count}Q", f[9 : 9 + 8 * count]))
    return sorted(confirmed)


async def case_dedup_in_one_frame(producer):
    stream = sp.name("frame-dedup")
    await sp.step(producer.create_stream(stream))
    sock = sp.handshake()
    try:
        check("declare a publisher with a reference", declare_publisher(sock, 1, stream, "ref-" + SUFFIX), 1)
        frame = [(0, b"a"), (1, b"b"), (0, b"a"), (1, b"b"), (2, b"c")]
        check("one frame of ids 0, 1, 0, 1, 2: all confirmed", publish(sock, 1, frame), [0, 0, 1, 1, 2])
    finally:
        sock.close()
    got = await sp.consume(stream, ConsumerOffsetSpecification(OffsetType.FIRST), 3, settle=1.0)
    check("the stream holds 0, 1, 2 once each (0 is new)", sp.bodies(got), [(0, b"a"), (1, b"b"), (2, b"c")])


async def case_gzip(producer):
    stream = sp.name("gzip")
    await sp.step(producer.create_stream(stream))
    records = [b"gz-%d" % i for i in range(5)]
    statuses = []
    await sp.step(producer.send_sub_entry(stream, records, compression_type=CompressionType.Gzip,
                                          on_publish_confirm=lambda s: statuses.append(s.is_confirmed)))
    for _ in range(100):
        if statuses:
            break
        await asyncio.sleep(0.1)
    check("a gzip sub-entry batch is confirmed", statuses, [True])
    got = await sp.consume(stream, ConsumerOffsetSpecification(OffsetType.FIRST), 5)
    check("its records are read back, one offset each", sp.bodies(got), list(enumerate(records)))


async def case_last_is_a_frame(producer):
    stream = sp.name("last")
    await sp.step(producer.create_stream(stream))
    sock = sp.handshake()
    try:
        declare_publisher(sock, 1, stream)
        publish(sock, 1, [(1, b"x1"), (2, b"x2"), (3, b"x3")])
        publish(sock, 1, [(4, b"y1"), (5, b"y2")])
    finally:
        sock.close()
    got = await sp.consume(stream, ConsumerOffsetSpecification(OffsetType.LAST), 2)
    check("last: the whole newest publish frame", sp.bodies(got), [(3, b"y1"), (4, b"y2")])


def case_idle_publisher_hears_of_deletion():
    stream = sp.name("deleted")
    with pika.BlockingConnection(pika.ConnectionParameters(HOST, sp.AMQP_PORT)) as conn:
        conn.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    sock = sp.handshake()
    try:
        declare_publisher(sock, 1, stream)
        with pika.BlockingConnection(pika.ConnectionParameters(HOST, sp.AMQP_PORT)) as conn:
            conn.channel().queue_delete(stream)
        frames = sp.frames_for(sock, 3)
        updates = [f for f in frames if isinstance(f, bytes) and f[:2] == b"\x00\x10"]
        # metadata update: key, version, code, stream
        check("an idle publisher's stream deleted: a metadata update, 0x06",
              [(struct.unpack(">H", f[4:6])[0], f[8:].decode()) for f in updates], [(6, stream)])
    finally:
        sock.close()


def management(method, path):
    auth = "Basic " + base64.b64encode(b"guest:guest").decode()
    req = urllib.request.Request(MANAGEMENT + path, method=method, headers={"Authorization": auth})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def case_forced_close():
    sock = sp.handshake()
    try:
        port = sock.getsockname()[1]
        names = []
        deadline = time.monotonic() + sp.WAIT
        # RabbitMQ lists a connection once its stats are emitted.
        while not names and time.monotonic() < deadline:
            names = [c["name"] for c in management("GET", "/api/connections")
                     if c.get("peer_port") == port]
            time.sleep(0.5)
        for n in names:
            management("DELETE", "/api/connections/" + urllib.parse.quote(n, safe=""))
        check("closed by the management API: dropped without a close frame",
              (len(names), sp.frames_for(sock, 5)), (1, ["EOF"]))
    finally:
        sock.close()


def case_empty_name():
    sock = sp.handshake()
    try:
        sock.sendall(sp.frame(0x000D, struct.pack(">I", 9) + sp.s16("") + struct.pack(">i", 0)))
        check("create stream '': precondition failed (0x11)", sp.response(sp.recv_frame(sock))[2:], (9, 0x11))
    finally:
        sock.close()


async def main():
    producer = Producer(HOST, port=sp.STREAM_PORT, **LOGIN)
    await sp.step(producer.start())
    try:
        await case_dedup_in_one_frame(producer)
        await case_gzip(producer)
        await case_last_is_a_frame(producer)
        case_idle_publisher_hears_of_deletion()
        case_forced_close()
        case_empty_name()
    finally:
        for s in sp.created:
            try:
                await sp.step(producer.delete_stream(s))
            except Exception:  # deleted by its case, or never made
                pass
        await sp.step(producer.close())
    print(f"{len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
