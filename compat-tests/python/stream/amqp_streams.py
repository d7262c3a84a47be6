"""Stream queues over AMQP 0-9-1 with pika, case by case, against what
RabbitMQ 3.10.8 answers (recorded from a node started with
`scripts/rabbitmq-node.sh start --stream`; run this script against one to
check it again: `python amqp_streams.py PORT --rabbitmq`).

Each case prints one line, `ok NAME` or `FAIL NAME: got ..., want ...`; the
script exits 1 if any case failed. Used by compat-tests/tests/streams.rs.

Usage: python amqp_streams.py PORT [--rabbitmq]
"""

import sys
import time
from datetime import datetime, timedelta, timezone

import pika

PORT = int(sys.argv[1])
RABBITMQ = "--rabbitmq" in sys.argv[2:]
STREAM = {"x-queue-type": "stream"}
failed = []


def connection():
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", PORT, socket_timeout=10, blocked_connection_timeout=10)
    )


def outcome(f):
    """What f(channel) gave: ("ok", value) or ("error", code, text)."""
    conn = connection()
    ch = conn.channel()
    try:
        return ("ok", f(ch))
    except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker) as e:
        return ("error", e.reply_code, e.reply_text)
    finally:
        try:
            conn.close()
        except Exception:
            pass


def check(name, got, want):
    if got == want:
        print(f"ok {name}", flush=True)
    else:
        print(f"FAIL {name}: got {got!r}, want {want!r}", flush=True)
        failed.append(name)


def declare(name, durable=True, exclusive=False, auto_delete=False, **extra):
    args = dict(STREAM, **extra)
    return lambda ch: ch.queue_declare(
        name, durable=durable, exclusive=exclusive, auto_delete=auto_delete, arguments=args
    ).method.message_count


def refused(code, text):
    return ("error", code, text)


check("non-durable", outcome(declare("s_nd", durable=False)),
      refused(406, "PRECONDITION_FAILED - invalid property 'non-durable' for queue 's_nd' in vhost '/'"))
check("exclusive", outcome(declare("s_ex", exclusive=True)),
      refused(406, "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 's_ex' in vhost '/'"))
check("auto-delete", outcome(declare("s_ad", auto_delete=True)),
      refused(406, "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 's_ad' in vhost '/'"))
for arg, value in [("x-max-length", 10), ("x-message-ttl", 10), ("x-dead-letter-exchange", "x")]:
    check(arg, outcome(declare("s_arg", **{arg: value})),
          refused(406, f"PRECONDITION_FAILED - invalid arg '{arg}' for queue 's_arg' in vhost '/' "
                       "of queue type rabbit_stream_queue"))
check("bad x-max-age", outcome(declare("s_age", **{"x-max-age": "10X"})),
      refused(406, "PRECONDITION_FAILED - invalid arg 'x-max-age' for queue 's_age' in vhost '/': invalid_max_age"))
check("retention arguments", outcome(declare("s_ret", **{
    "x-max-age": "10s", "x-max-length-bytes": 1000000, "x-stream-max-segment-size-bytes": 100000})), ("ok", 0))
check("segment size over 3 GB", outcome(declare("s_big", **{"x-stream-max-segment-size-bytes": 3_000_000_001})),
      refused(406, "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes"))
check("segment size 0", outcome(declare("s_zero", **{"x-stream-max-segment-size-bytes": 0})), ("ok", 0))
check("negative segment size", outcome(declare("s_neg", **{"x-stream-max-segment-size-bytes": -5}))[:2],
      ("error", 406))
# x-stream-filter-size-bytes: RabbitMQ 3.13 (stream filtering) checks it,
# 3.10 ignores it.
for value, why in [(300, "value"), (8, "value"), ("x", "type")]:
    check(f"filter size {value!r}", outcome(declare("s_fs", **{"x-stream-filter-size-bytes": value})),
          ("ok", 0) if RABBITMQ else
          refused(406, f"PRECONDITION_FAILED - Invalid {why} for x-stream-filter-size-bytes"))
check("filter size 32", outcome(declare("s_fs32", **{"x-stream-filter-size-bytes": 32})), ("ok", 0))
check("declare", outcome(declare("s1")), ("ok", 0))


def publish(ch):
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", "s1", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
    return ch.queue_declare("s1", durable=True, arguments=STREAM).method.message_count


check("publish, then declare-ok says 0", outcome(publish), ("ok", 0))
check("passive declare", outcome(lambda ch: ch.queue_declare("s1", passive=True).method.message_count), ("ok", 0))
check("basic.get", outcome(lambda ch: ch.basic_get("s1")),
      refused(540, "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 's1' in vhost '/'"))
check("queue.purge", outcome(lambda ch: ch.queue_purge("s1")),
      refused(540, "NOT_IMPLEMENTED - queue.purge not supported by stream queues queue 's1' in vhost '/'"))


def consume_without_qos(ch):
    ch.basic_consume("s1", lambda *a: None, auto_ack=False)
    ch.connection.process_data_events(1)


check("consume without qos", outcome(consume_without_qos),
      refused(406, "PRECONDITION_FAILED - consumer prefetch count is not set for 'queue 's1' in vhost '/''"))


def consume_auto_ack(ch):
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume("s1", lambda *a: None, auto_ack=True)
    ch.connection.process_data_events(1)


check("consume with auto-ack", outcome(consume_auto_ack),
      refused(540, "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues queue 's1' in vhost '/'"))


def read(offset, prefetch=2, ack=True, seconds=1.5):
    """Consume s1 from `offset` for a while: [(body, x-stream-offset, tag)]."""
    def f(ch):
        ch.basic_qos(prefetch_count=prefetch)
        got = []

        def on_message(ch_, method, props, body):
            got.append((body.decode(), (props.headers or {}).get("x-stream-offset"), method.delivery_tag))
            if ack:
                ch_.basic_ack(method.delivery_tag)

        args = {} if offset is None else {"x-stream-offset": offset}
        ch.basic_consume("s1", on_message, arguments=args)
        deadline = time.time() + seconds
        while time.time() < deadline:
            ch.connection.process_data_events(0.2)
        return got
    return outcome(f)


ALL = [("m%d" % i, i) for i in range(5)]


def entries(got):
    return ("ok", [(b, o) for b, o, _ in got[1]]) if got[0] == "ok" else got


check("no offset is next", entries(read(None)), ("ok", []))
check("first", entries(read("first")), ("ok", ALL))
check("last", entries(read("last")), ("ok", ALL[4:]))
check("next", entries(read("next")), ("ok", []))
check("offset 2", entries(read(2)), ("ok", ALL[2:]))
check("offset -1 is the first", entries(read(-1)), ("ok", ALL))
check("offset past the end waits", entries(read(100)), ("ok", []))
check("interval 1h", entries(read("1h")), ("ok", ALL))
check("timestamp an hour ago", entries(read(datetime.now(timezone.utc) - timedelta(hours=1))), ("ok", ALL))
check("timestamp now", entries(read(datetime.now(timezone.utc) + timedelta(seconds=2))), ("ok", []))
check("unacked: the prefetch is a window", entries(read("first", ack=False)), ("ok", ALL[:2]))
got = read("first", prefetch=10)
check("delivery tags count from 1", [t for _, _, t in got[1]] if got[0] == "ok" else got, [1, 2, 3, 4, 5])
bad = read("bad")
if RABBITMQ:
    # RabbitMQ 3.10 crashes the channel process on it.
    check("bad offset", bad, refused(541, "INTERNAL_ERROR"))
else:
    check("bad offset", bad[:2], ("error", 406))


def nack(ch):
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume("s1", lambda c, m, p, b: c.basic_nack(m.delivery_tag, requeue=True),
                     arguments={"x-stream-offset": "first"})
    deadline = time.time() + 1.5
    while time.time() < deadline:
        ch.connection.process_data_events(0.2)


check("basic.nack", outcome(nack),
      refused(540, "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues queue 's1' in vhost '/'"))
check("delete", outcome(lambda ch: ch.queue_delete("s1").method.message_count), ("ok", 0))
for q in ["s_ret"]:
    outcome(lambda ch: ch.queue_delete(q))

sys.exit(1 if failed else 0)
