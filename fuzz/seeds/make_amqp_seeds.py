"""Writes the seed corpora of the AMQP targets (frames, connection) from
frames that pika, a real client, encodes: a whole session (handshake,
channel, declares with argument tables, a publish with properties and a
body, consume, ack, qos, confirms, tx, close) and a few single frames.

Run once with a Python that has pika (compat-tests/python/requirements.txt);
its output is committed under fuzz/corpus/. Not run by the test command.
"""

import os
import sys

from pika import frame, spec

OUT = sys.argv[1]


def method(ch, m):
    return frame.Method(ch, m).marshal()


def header(ch, size, props):
    return frame.Header(ch, size, props).marshal()


def body(ch, data):
    return frame.Body(ch, data).marshal()


props = spec.BasicProperties(
    content_type="application/json",
    delivery_mode=2,
    priority=3,
    headers={"x-int": 1, "x-str": "v", "x-list": [1, "a"], "x-table": {"k": True}},
    message_id="id-1",
    timestamp=1700000000,
    expiration="60000",
)
handshake = [
    method(0, spec.Connection.StartOk(
        client_properties={"product": "fuzz", "capabilities": {"publisher_confirms": True, "connection.blocked": True}},
        mechanism="PLAIN", response="\0guest\0guest", locale="en_US")),
    method(0, spec.Connection.TuneOk(channel_max=16, frame_max=4096, heartbeat=1)),
    method(0, spec.Connection.Open(virtual_host="/")),
]
session = handshake + [
    method(1, spec.Channel.Open()),
    method(1, spec.Confirm.Select()),
    method(1, spec.Basic.Qos(prefetch_count=10)),
    method(1, spec.Exchange.Declare(exchange="x", type="topic", durable=True)),
    method(1, spec.Queue.Declare(queue="q", durable=True, arguments={"x-max-length": 10, "x-queue-type": "quorum", "x-message-ttl": 5000})),
    method(1, spec.Queue.Bind(queue="q", exchange="x", routing_key="a.#")),
    method(1, spec.Basic.Publish(exchange="x", routing_key="a.b", mandatory=True)),
    header(1, 11, props),
    body(1, b"hello"),
    body(1, b" world"),
    method(1, spec.Basic.Consume(queue="q", consumer_tag="c1")),
    method(1, spec.Basic.Ack(delivery_tag=1, multiple=True)),
    method(1, spec.Basic.Nack(delivery_tag=2, requeue=False)),
    method(1, spec.Basic.Get(queue="q")),
    method(1, spec.Basic.Cancel(consumer_tag="c1")),
    method(2, spec.Channel.Open()),
    method(2, spec.Tx.Select()),
    method(2, spec.Basic.Publish(exchange="", routing_key="q")),
    header(2, 0, spec.BasicProperties()),
    method(2, spec.Tx.Commit()),
    method(2, spec.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
    frame.Heartbeat().marshal(),
    method(1, spec.Queue.Purge(queue="q")),
    method(1, spec.Queue.Delete(queue="q", if_unused=True)),
    method(1, spec.Exchange.Delete(exchange="x")),
    method(1, spec.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
    method(0, spec.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
    method(0, spec.Connection.CloseOk()),
]


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


HEADER = b"AMQP\x00\x00\x09\x01"
# frames: 2 octets (frame_max choice, split point), then frames.
write("frames", "session", b"\x02\x40" + b"".join(session[3:]))
write("frames", "handshake", b"\x01\x10" + b"".join(handshake))
write("frames", "publish", b"\x00\x07" + b"".join(session[9:13]))
write("frames", "heartbeat", b"\x03\x00" + frame.Heartbeat().marshal())
write("frames", "bad-end", b"\x02\x03" + session[3][:-1] + b"\x00")
# connection: 1 octet (clock step), then the client's bytes.
write("connection", "session", b"\x00" + HEADER + b"".join(session))
write("connection", "handshake-ticking", b"\x05" + HEADER + b"".join(handshake))
write("connection", "publish-no-close", b"\x00" + HEADER + b"".join(session[:13]))
write("connection", "bad-header", b"\x00HTTP/1.1 GET /\r\n")
write("connection", "wrong-password", b"\x00" + HEADER + method(0, spec.Connection.StartOk(
    client_properties={}, mechanism="PLAIN", response="\0guest\0nope", locale="en_US")))
