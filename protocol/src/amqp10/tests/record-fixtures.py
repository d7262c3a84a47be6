"""Records rabbitmq-3.10.txt: ground truth for the AMQP 1.0 <-> 0-9-1 mapping of
RabbitMQ 3.10 streams (protocol/src/amqp10).

Direction a: pika publishes to a stream, rstream reads the raw record.
Direction b: rstream publishes a record (an rstream AMQPMessage or hand-made
bytes), pika consumes it; the raw content header frame is kept.

    eval "$(scripts/rabbitmq-node.sh start --dir /tmp/rmq-amqp10 --stream)"
    RABBITMQ_AMQP_PORT=$RABBITMQ_AMQP_PORT RABBITMQ_STREAM_PORT=$RABBITMQ_STREAM_PORT \
        .venv/bin/python protocol/src/amqp10/tests/record-fixtures.py \
        protocol/src/amqp10/tests/rabbitmq-3.10.txt
    scripts/rabbitmq-node.sh stop --dir /tmp/rmq-amqp10

Each run names its streams after the time (RUN), so a node can be reused; the
Rust tests read the run id from the file. fixtures.rs must mirror A_CASES."""
import asyncio, datetime, decimal, json, os, struct, sys, uuid, time
import pika
from pika import frame as pframe
from rstream import Consumer, Producer, ConsumerOffsetSpecification, OffsetType, AMQPMessage
from rstream._pyamqp.message import Properties, Header
from rstream._pyamqp.types import TYPE, VALUE
from rstream._pyamqp.types import AMQPTypes

AMQP_PORT = int(os.environ["RABBITMQ_AMQP_PORT"]); STREAM_PORT = int(os.environ["RABBITMQ_STREAM_PORT"])
RUN = os.environ.get("RUN", str(int(time.time())))
out = {"a": {}, "b": {}}

# ---- raw frame capture in pika
captured = []
_orig = pframe.decode_frame
def _capture(data_in):
    n, f = _orig(data_in)
    if f is not None and n:
        captured.append(bytes(data_in[:n]))
    return n, f
import pika.connection
pika.connection.frame.decode_frame = _capture

def conn():
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", AMQP_PORT))

def declare(ch, name):
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})

# ---- AMQP 1.0 hand encoding
def desc(code, v): return b"\x00\x53" + bytes([code]) + v
def str8(s): s = s.encode() if isinstance(s, str) else s; return (b"\xa1" + bytes([len(s)]) + s) if len(s) < 256 else (b"\xb1" + struct.pack(">I", len(s)) + s)
def sym8(s): s = s.encode(); return b"\xa3" + bytes([len(s)]) + s
def bin8(b): return (b"\xa0" + bytes([len(b)]) + b) if len(b) < 256 else (b"\xb0" + struct.pack(">I", len(b)) + b)
def list32(items): body = b"".join(items); return b"\xd0" + struct.pack(">II", len(body) + 4, len(items)) + body
def map32(pairs): body = b"".join(k + v for k, v in pairs); return b"\xd1" + struct.pack(">II", len(body) + 4, 2 * len(pairs)) + body
NULL = b"\x40"
def ubyte(v): return b"\x50" + bytes([v])
def byte(v): return b"\x51" + struct.pack(">b", v)
def ushort(v): return b"\x60" + struct.pack(">H", v)
def short(v): return b"\x61" + struct.pack(">h", v)
def uint(v): return b"\x70" + struct.pack(">I", v)
def int_(v): return b"\x71" + struct.pack(">i", v)
def ulong(v): return b"\x80" + struct.pack(">Q", v)
def long_(v): return b"\x81" + struct.pack(">q", v)
def float_(v): return b"\x72" + struct.pack(">f", v)
def double(v): return b"\x82" + struct.pack(">d", v)
def ts(v): return b"\x83" + struct.pack(">q", v)
def uuid_(u): return b"\x98" + u.bytes
def char(c): return b"\x73" + struct.pack(">I", ord(c))
TRUE, FALSE = b"\x41", b"\x42"
def props(*fields): return desc(0x73, list32(list(fields)))
def appprops(pairs): return desc(0x74, map32([(str8(k), v) for k, v in pairs]))
def msgann(pairs): return desc(0x72, map32([(sym8(k), v) for k, v in pairs]))
def data(b): return desc(0x75, bin8(b))

def rstream_rich():
    return bytes(AMQPMessage(
        body=b"hello from rstream",
        properties=Properties(message_id="mid-1", user_id=b"guest", to="/queues/x", subject="subj",
                              reply_to="reply-q", correlation_id="corr-1", content_type="text/plain",
                              content_encoding="gzip", absolute_expiry_time=1700000000000,
                              creation_time=1600000000123, group_id="grp", group_sequence=7,
                              reply_to_group_id="rgrp"),
        application_properties={"str": "v", "int": 42, "neg": -5, "bool": True, "double": 1.5,
                                 "bin": b"\x00\x01", "nothing": None},
        message_annotations={"x-basic-priority": {TYPE: AMQPTypes.ubyte, VALUE: 4},
                             "x-basic-delivery-mode": {TYPE: AMQPTypes.ubyte, VALUE: 2},
                             "x-basic-expiration": "5000", "x-foo": "bar"}))

B_CASES = {
    "rstream_rich": rstream_rich(),
    "rstream_plain": bytes(AMQPMessage(body=b"plain")),
    "rstream_header": bytes(AMQPMessage(body=b"with header", header=Header(durable=True, priority=7, ttl=1000))),
    "rstream_value": bytes(AMQPMessage(value="a string value")),
    "rstream_sequence": bytes(AMQPMessage(sequence=[[1, "two"], [3]])),
    "types": appprops([("s", str8("str")), ("b", byte(-2)), ("ub", ubyte(200)), ("sh", short(-300)),
                       ("ush", ushort(60000)), ("i", int_(-70000)), ("ui", uint(4000000000)),
                       ("l", long_(-5000000000)), ("f", float_(2.5)), ("d", double(-0.25)),
                       ("t", TRUE), ("fa", FALSE), ("bt", b"\x56\x01"), ("ts", ts(1600000000999)),
                       ("bin", bin8(b"\xff\x00")), ("nul", NULL), ("x-basic-type", str8("my-type")),
                       ("x-basic-app-id", str8("my-app"))]) + data(b"types"),
    "ids_ulong_uuid": props(ulong(12345), NULL, NULL, NULL, NULL,
                            uuid_(uuid.UUID("12345678-9abc-def0-1234-56789abcdef0"))) + data(b"ids"),
    "ids_binary": props(bin8(b"\x01\x02\x03"), NULL, NULL, NULL, NULL, bin8(bytes(range(200)))) + data(b"ids"),
    "ids_long_utf8": props(str8("m" * 300), NULL, NULL, NULL, NULL, str8("c" * 256)) + data(b"ids"),
    "ids_300_utf8": props(str8("m" * 300)) + data(b"ids"),
    "ids_binary_190": props(bin8(bytes(190))) + data(b"ids"),
    "ids_255": props(str8("m" * 255)) + data(b"ids"),
    "two_data": data(b"first") + data(b"second"),
    "no_body": props(str8("only-props")),
    "empty": b"",
    "ann_exchange": msgann([("x-exchange", str8("my-exchange")), ("x-routing-key", str8("my-rk")),
                            ("x-basic-priority", uint(9)), ("x-other", long_(1))]) + data(b"ann"),
    "ann_symbol_exchange": msgann([("x-exchange", sym8("sym-exchange"))]) + data(b"ann"),
    "app_ulong": appprops([("ul", ulong(5))]) + data(b"ul"),
    "app_symbol": appprops([("sy", sym8("symval"))]) + data(b"sy"),
    "app_uuid": appprops([("uu", uuid_(uuid.UUID(int=1)))]) + data(b"uu"),
    "app_char": appprops([("ch", char("x"))]) + data(b"ch"),
    "delivery_ann": desc(0x71, map32([(sym8("x-d"), str8("v"))])) + data(b"da"),
    "footer": data(b"ft") + desc(0x78, map32([(sym8("x-f"), str8("v"))])),
    "props_short_list": desc(0x73, b"\xc0\x05\x01\xa1\x02id") + data(b"short list"),
    "props_list0": desc(0x73, b"\x45") + data(b"list0"),
    "user_id_other": props(NULL, bin8(b"someone")) + data(b"uid"),
    "content_sym": props(NULL, NULL, NULL, NULL, NULL, NULL, sym8("application/json"), sym8("utf-8"),
                         NULL, ts(-1500)) + data(b"neg ts"),
}

async def publish_b():
    async with Producer("127.0.0.1", port=STREAM_PORT, username="guest", password="guest") as p:
        for name, rec in B_CASES.items():
            s = f"gt-b-{RUN}-{name}"
            await p.create_stream(s)
            await p.send_wait(s, rec)

def consume_b():
    for name, rec in B_CASES.items():
        s = f"gt-b-{RUN}-{name}"
        res = {"record": rec.hex()}
        c = conn(); ch = c.channel(); ch.basic_qos(prefetch_count=10)
        captured.clear()
        got = []
        try:
            for m, p, body in ch.consume(s, arguments={"x-stream-offset": "first"}, inactivity_timeout=3):
                if m is None: break
                got.append((m, p, body)); ch.basic_ack(m.delivery_tag); break
        except Exception as e:
            res["error"] = repr(e)
        if got:
            m, p, body = got[0]
            res["exchange"] = m.exchange; res["routing_key"] = m.routing_key
            res["body"] = body.hex()
            res["props"] = {k: repr(v) for k, v in vars(p).items() if v is not None}
            hdr = [f for f in captured if f[0] == 2]
            res["header_frame"] = hdr[0].hex() if hdr else None
        else:
            res.setdefault("error", "no delivery")
        try: c.close()
        except Exception: pass
        out["b"][name] = res

class RawProps(pika.BasicProperties):
    """BasicProperties whose header table is given as raw bytes (RabbitMQ's type tags)."""
    def __init__(self, table, **kw):
        super().__init__(**kw); self.raw_table = table
    def encode(self):
        pieces = super().encode()
        flags = struct.unpack(">H", pieces[0])[0] | (1 << 13)
        pos = 1 + (2 if self.content_type is not None else 0) + (2 if self.content_encoding is not None else 0)
        return [struct.pack(">H", flags)] + pieces[1:pos] + [struct.pack(">I", len(self.raw_table)) + self.raw_table] + pieces[pos:]

def f091(k, tag, v): k = k.encode(); return bytes([len(k)]) + k + tag + v
TYPES091 = b"".join([
    f091("b", b"b", struct.pack(">b", -2)), f091("B", b"B", bytes([200])), f091("s", b"s", struct.pack(">h", -300)),
    f091("u", b"u", struct.pack(">H", 60000)), f091("I", b"I", struct.pack(">i", -70000)),
    f091("i", b"i", struct.pack(">I", 4000000000)), f091("l", b"l", struct.pack(">q", -5000000000)),
    f091("f", b"f", struct.pack(">f", 2.5)), f091("d", b"d", struct.pack(">d", -0.25)),
    f091("t", b"t", b"\x01"), f091("T", b"T", struct.pack(">Q", 1600000000)), f091("S", b"S", struct.pack(">I", 3) + b"str"),
    f091("x", b"x", struct.pack(">I", 2) + b"\xff\x00"), f091("V", b"V", b""),
    f091("A", b"A", struct.pack(">I", 2) + b"t\x01"),
    f091("F", b"F", struct.pack(">I", 0)),
    f091("x-amqp-1.0-properties", b"S", struct.pack(">I", 3) + b"abc"),
])

A_CASES = {
    "types091": (RawProps(TYPES091, content_type="ct"), b"types"),
    "rich": (pika.BasicProperties(content_type="text/plain", content_encoding="gzip",
        headers={"str": "v", "int": 42, "big": 5000000000, "neg": -7, "bool": True,
                 "bytes": b"\x00\x01", "none": None, "ts": datetime.datetime(2020, 9, 13, 12, 26, 40),
                 "list": [1, "a"], "table": {"k": "v"},
                 "x-custom": "xc"},
        delivery_mode=2, priority=5, correlation_id="corr", reply_to="replyq", expiration="60000",
        message_id="msg-1", timestamp=1600000000, type="my-type", user_id="guest", app_id="my-app",
        cluster_id="cluster"), b"hello from pika"),
    "plain": (pika.BasicProperties(), b"x"),
    "rich_sorted": (pika.BasicProperties(content_type="application/json", content_encoding="utf-8",
        headers={"a-str": "v", "b-int": 42, "c-big": 5000000000, "d-neg": -7, "e-bool": False,
                 "f-bytes": b"\x00\x01", "g-none": None, "h-ts": datetime.datetime(2020, 9, 13, 12, 26, 40),
                 "x-custom": "xc"},
        delivery_mode=1, priority=0, correlation_id="c1", reply_to="rq", expiration="1",
        message_id="m1", timestamp=0, type="t", user_id="guest", app_id="a", cluster_id="c"),
        b"x" * 300),
    "decimal": (pika.BasicProperties(headers={"dec": decimal.Decimal("1.25")}), b"dec"),
    "shortstr_long_ids": (pika.BasicProperties(message_id="m" * 255, correlation_id="c" * 255), b"ids"),
    "empty_body": (pika.BasicProperties(delivery_mode=1), b""),
    "amqp10_type": (pika.BasicProperties(type="amqp-1.0"), b"\x00\x53\x77\xa1\x01z"),
}

def publish_a():
    for name, (p, body) in A_CASES.items():
        c = conn(); ch = c.channel(); ch.confirm_delivery()
        s = f"gt-a-{RUN}-{name}"
        declare(ch, s)
        try:
            ch.basic_publish("", s, body, p)
            c.close()
        except Exception as e:
            out["a"][name] = {"publish_error": repr(e)}

async def consume_a():
    c = Consumer("127.0.0.1", port=STREAM_PORT, username="guest", password="guest")
    await c.start()
    for name in A_CASES:
        if name in out["a"]: continue
        s = f"gt-a-{RUN}-{name}"
        got = asyncio.Event(); recs = []
        async def cb(msg, ctx, recs=recs, got=got):
            recs.append(bytes(msg)); got.set()
        sid = await c.subscribe(s, cb, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        await asyncio.wait_for(got.wait(), 10)
        await c.unsubscribe(sid)
        out["a"][name] = {"record": recs[0].hex()}
    await c.close()

publish_a()
asyncio.run(consume_a())
asyncio.run(publish_b())
consume_b()
HEADER = """# Recorded from RabbitMQ 3.10.8 (Debian 3.10.8-1.1+deb12u1) with pika and rstream 1.1.1
# by record-fixtures.py.
# Direction a: pika published a message (properties listed in fixtures.rs) to a stream
# `gt-a-<run>-<name>` through the default exchange; rstream read the record without a decoder.
#   a <name> record <hex> | error <text>
# Every stream is named gt-<direction>-<run>-<name>.
run {run}
# Direction b: rstream published the record to stream `gt-b-<run>-<name>`; pika consumed it
# (x-stream-offset first). `header` is the raw content header frame pika received
# (RabbitMQ adds the x-stream-offset header on delivery); `error` means RabbitMQ closed the
# consuming connection with that reply instead of delivering.
#   b <name> record <hex> | header <hex> | exchange <text> | routing_key <text> | body <hex> | error <text>
# `-` stands for an empty value."""


def write(path):
    v = lambda x: x if x else "-"
    lines = [HEADER.format(run=RUN)]
    for name, r in out["a"].items():
        if "record" in r:
            lines.append(f"a {name} record {r['record']}")
        else:
            lines.append(f"a {name} error {r['publish_error'].replace(' ', '_')}")
    for name, r in out["b"].items():
        lines.append(f"b {name} record {v(r['record'])}")
        if "error" in r:
            lines.append(f"b {name} error {r['error'].replace(' ', '_')}")
            continue
        lines.append(f"b {name} header {r['header_frame']}")
        lines.append(f"b {name} exchange {v(r['exchange'])}")
        lines.append(f"b {name} routing_key {v(r['routing_key'])}")
        lines.append(f"b {name} body {v(r['body'])}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


write(sys.argv[1])
print("done")
