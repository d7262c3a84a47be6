"""Resolve offset spec (0x1f; RabbitMQ 4.3+) by raw frames: the offset a
subscription with that specification would start from, for first, last,
next, an offset, a timestamp and a timestamp past the end, and the codes
RabbitMQ's rabbit_stream_reader answers (0x02 no such stream, 0x10 no read
permission, the offset 0 with either). The answer's offset type is always
4 (offset).

RabbitMQ 3.10 (the local reference) has no such command: the expected
answers are read from rabbitmq-server's rabbit_stream_reader.erl
(handle_frame_post_auth for resolve_offset_spec), not recorded.

Each case prints `ok NAME` or `FAIL NAME: got ..., want ...`; the script
exits 1 if any case failed. Waits are bounded (10 s); names carry a random
suffix.

Usage: python resolve_offset_spec.py STREAM_PORT AMQP_PORT MANAGEMENT_URL
"""

import os
import socket
import struct
import sys
import time
import urllib.parse

import pika

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mgmt  # noqa: E402
import stream_protocol as sp  # noqa: E402  (its frame helpers; same arguments)

MGMT = sys.argv[3]
FIRST, LAST, NEXT, OFFSET, TIMESTAMP = 1, 2, 3, 4, 5


def api(method, path, body=None):
    """The status of a management API request as guest."""
    return mgmt.api(MGMT, method, path, body, sp.WAIT)[0]


def handshake(user, password):
    """A socket after peer properties, SASL PLAIN, tune and open on "/"."""
    sock = socket.create_connection((sp.HOST, sp.STREAM_PORT), timeout=sp.WAIT)
    sock.sendall(sp.frame(0x0011, struct.pack(">Ii", 1, 0)))
    assert sp.response(sp.recv_frame(sock))[3] == 1
    sock.sendall(sp.frame(0x0012, struct.pack(">I", 2)))
    assert sp.response(sp.recv_frame(sock))[3] == 1
    sasl = f"\0{user}\0{password}".encode()
    sock.sendall(sp.frame(0x0013, struct.pack(">I", 3) + sp.s16("PLAIN")
                          + struct.pack(">i", len(sasl)) + sasl))
    assert sp.response(sp.recv_frame(sock))[3] == 1
    tune = sp.recv_frame(sock)
    sock.sendall(sp.frame(0x0014, tune[4:12]))
    sock.sendall(sp.frame(0x0015, struct.pack(">I", 4) + sp.s16("/")))
    assert sp.response(sp.recv_frame(sock))[3] == 1
    return sock


def resolve(sock, cid, stream, kind, value=None):
    """(key, correlation id, code, offset type, offset) of the answer."""
    body = struct.pack(">I", cid) + sp.s16(stream) + struct.pack(">H", kind)
    if kind == OFFSET:
        body += struct.pack(">Q", value)
    elif kind == TIMESTAMP:
        body += struct.pack(">q", value)
    body += struct.pack(">i", 0)  # no properties
    sock.sendall(sp.frame(0x001f, body))
    payload = sp.recv_frame(sock)
    if not isinstance(payload, bytes):
        return payload
    key, _version, corr, code = sp.response(payload)
    kind_back, offset = struct.unpack(">HQ", payload[10:20])
    return key, corr, code, kind_back, offset


def publish(stream, count):
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        sp.HOST, sp.AMQP_PORT, credentials=pika.PlainCredentials("guest", "guest")))
    ch = conn.channel()
    ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(count):
        ch.basic_publish("", stream, f"m{i}".encode())
    conn.close()


def main():
    stream = f"rs-{sp.SUFFIX}"
    publish(stream, 3)
    time.sleep(0.3)
    between = int(time.time() * 1000)
    time.sleep(0.3)
    publish(stream, 2)  # offsets 3 and 4, each its own chunk
    sock = handshake("guest", "guest")
    cases = [
        ("first: 0", FIRST, None, 0),
        ("last: the last chunk's first offset, 4", LAST, None, 4),
        ("next: 5", NEXT, None, 5),
        ("offset 2: 2", OFFSET, 2, 2),
        ("a timestamp between the publishes: the first entry after it, 3",
         TIMESTAMP, between, 3),
        ("a timestamp past the end: next, 5", TIMESTAMP, between + 3_600_000, 5),
    ]
    for cid, (what, kind, value, want) in enumerate(cases, start=10):
        sp.check(what, resolve(sock, cid, stream, kind, value), (0x801f, cid, 1, OFFSET, want))
    sp.check("a stream that does not exist: 0x02, offset 0",
             resolve(sock, 30, f"nope-{sp.SUFFIX}", FIRST), (0x801f, 30, 2, OFFSET, 0))
    sp.check("the connection still answers after it",
             resolve(sock, 31, stream, NEXT), (0x801f, 31, 1, OFFSET, 5))
    sock.close()

    user, password = f"rsu-{sp.SUFFIX}", "secret"
    api("PUT", f"/api/users/{urllib.parse.quote(user, safe='')}",
        {"password": password, "tags": ""})
    api("PUT", f"/api/permissions/%2F/{urllib.parse.quote(user, safe='')}",
        {"configure": ".*", "write": ".*", "read": "^nothing$"})
    try:
        sock = handshake(user, password)
        sp.check("a user who may not read the stream: 0x10, offset 0",
                 resolve(sock, 40, stream, FIRST), (0x801f, 40, 0x10, OFFSET, 0))
        sp.check("... nor any other: 0x10 before 0x02, as RabbitMQ checks",
                 resolve(sock, 41, f"nope-{sp.SUFFIX}", FIRST), (0x801f, 41, 0x10, OFFSET, 0))
        sock.close()
    finally:
        api("DELETE", f"/api/users/{urllib.parse.quote(user, safe='')}")
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            sp.HOST, sp.AMQP_PORT, credentials=pika.PlainCredentials("guest", "guest")))
        conn.channel().queue_delete(stream)
        conn.close()
    sys.exit(1 if sp.failed else 0)


if __name__ == "__main__":
    main()
