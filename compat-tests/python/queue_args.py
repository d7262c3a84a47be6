"""A queue's x-arguments with pika, case by case, against what RabbitMQ 3.10.8
answers: which arguments each queue type takes, the words for a bad value, and
the order of the checks (argument values, then arguments of another type, then
auto-delete, exclusive and non-durable). Recorded from a node started with
`scripts/rabbitmq-node.sh start --stream`; run this script against one to
check it again: `python queue_args.py PORT --rabbitmq`.

Where StableMQ answers otherwise on purpose, the case says what each gives
(RabbitMQ 3.10 accepts any x-delivery-limit on a quorum queue, even -1 or a
string; StableMQ refuses one it could not act on).

Each case prints one line, `ok NAME` or `FAIL NAME: got ..., want ...`; the
script exits 1 if any case failed. Used by compat-tests/tests/queue/declare.rs.

Usage: python queue_args.py PORT [--rabbitmq]
"""

import datetime
import sys

import pika

PORT = int(sys.argv[1])
RABBITMQ = "--rabbitmq" in sys.argv[2:]
failed = []


def outcome(name, queue_type, args, durable=True, exclusive=False, auto_delete=False):
    """What declaring gave: ("ok",) or ("error", code, text)."""
    conn = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", PORT, socket_timeout=10, blocked_connection_timeout=10)
    )
    ch = conn.channel()
    arguments = dict(args)
    arguments["x-queue-type"] = queue_type
    try:
        ch.queue_declare(name, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                         arguments=arguments)
        ch.queue_delete(name)
        return ("ok",)
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


def value(q, arg, why):
    return ("error", 406, f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{q}' in vhost '/': {why}")


def other_type(q, arg, queue_type):
    return ("error", 406, f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{q}' in vhost '/' "
                          f"of queue type rabbit_{queue_type}_queue")


def prop(q, what):
    return ("error", 406, f"PRECONDITION_FAILED - invalid property '{what}' for queue '{q}' in vhost '/'")


OK = ("ok",)

# What each type takes: a valid value of every argument RabbitMQ 3.10 knows.
KNOWN = {
    "x-expires": 100000, "x-message-ttl": 1000, "x-dead-letter-exchange": "dlx",
    "x-max-length": 10, "x-max-length-bytes": 1000, "x-max-in-memory-length": 10,
    "x-max-in-memory-bytes": 1000, "x-max-priority": 5, "x-overflow": "drop-head",
    "x-queue-mode": "lazy", "x-single-active-consumer": True,
    "x-queue-master-locator": "min-masters", "x-initial-cluster-size": 3, "x-delivery-limit": 3,
    "x-dead-letter-strategy": "at-most-once", "x-max-age": "1h",
    "x-stream-max-segment-size-bytes": 1000, "x-quorum-initial-group-size": 3,
    "x-queue-leader-locator": "balanced", "x-queue-version": 2, "x-foo": 1,
}
REFUSED = {
    "classic": {"x-max-in-memory-length", "x-max-in-memory-bytes", "x-initial-cluster-size",
                "x-delivery-limit", "x-dead-letter-strategy", "x-max-age",
                "x-stream-max-segment-size-bytes", "x-quorum-initial-group-size",
                "x-queue-leader-locator"},
    "quorum": {"x-max-priority", "x-queue-mode", "x-queue-master-locator", "x-initial-cluster-size",
               "x-max-age", "x-stream-max-segment-size-bytes", "x-queue-version"},
    "stream": {"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-max-length",
               "x-max-in-memory-length", "x-max-in-memory-bytes", "x-max-priority", "x-overflow",
               "x-queue-mode", "x-single-active-consumer", "x-queue-master-locator",
               "x-delivery-limit", "x-dead-letter-strategy", "x-quorum-initial-group-size",
               "x-queue-version"},
}
for qt, refused in REFUSED.items():
    for arg, v in KNOWN.items():
        q = f"qa-{qt}-{arg}"
        want = other_type(q, arg, qt) if arg in refused else OK
        check(f"{qt} {arg}", outcome(q, qt, {arg: v}), want)

# Bad values, in RabbitMQ's words.
CASES = [
    ("classic", {"x-expires": 0}, "x-expires", "{value_zero,0}"),
    ("classic", {"x-expires": -5}, "x-expires", "{value_negative,-5}"),
    ("classic", {"x-message-ttl": "a"}, "x-message-ttl", '"expected integer, got longstr"'),
    ("classic", {"x-message-ttl": True}, "x-message-ttl", '"expected integer, got bool"'),
    ("classic", {"x-max-length": datetime.datetime(2020, 1, 1)}, "x-max-length",
     '"expected integer, got timestamp"'),
    ("classic", {"x-max-length": {"a": 1}}, "x-max-length", '"expected integer, got table"'),
    ("classic", {"x-max-length": [1]}, "x-max-length", '"expected integer, got array"'),
    ("classic", {"x-max-length": None}, "x-max-length", '"expected integer, got void"'),
    ("classic", {"x-max-length": b"\x01"}, "x-max-length", '"expected integer, got binary"'),
    ("classic", {"x-max-length-bytes": -1}, "x-max-length-bytes", "{value_negative,-1}"),
    ("classic", {"x-max-priority": 256}, "x-max-priority", "{max_value_exceeded,256}"),
    ("classic", {"x-max-priority": -1}, "x-max-priority", "{value_negative,-1}"),
    ("classic", {"x-overflow": "bad"}, "x-overflow", "invalid_overflow"),
    ("classic", {"x-overflow": 5}, "x-overflow", "{unacceptable_type,signedint}"),
    ("classic", {"x-queue-mode": "bad"}, "x-queue-mode", "\"unsupported queue mode 'bad'\""),
    ("classic", {"x-queue-mode": 5}, "x-queue-mode", "{unacceptable_type,signedint}"),
    ("classic", {"x-queue-version": 0}, "x-queue-version", "\"unsupported queue version '0'\""),
    ("classic", {"x-queue-version": "2"}, "x-queue-version", '"expected integer, got longstr"'),
    ("classic", {"x-single-active-consumer": "yes"}, "x-single-active-consumer",
     "{unacceptable_type,longstr}"),
    ("classic", {"x-dead-letter-routing-key": "k"}, "x-dead-letter-routing-key",
     "routing_key_but_no_dlx_defined"),
    ("classic", {"x-dead-letter-routing-key": 5, "x-dead-letter-exchange": "d"},
     "x-dead-letter-routing-key", "{unacceptable_type,signedint}"),
    ("quorum", {"x-quorum-initial-group-size": 0}, "x-quorum-initial-group-size", "{value_zero,0}"),
    ("quorum", {"x-quorum-initial-group-size": "a"}, "x-quorum-initial-group-size",
     '"expected integer, got longstr"'),
    ("quorum", {"x-max-in-memory-length": -1}, "x-max-in-memory-length", "{value_negative,-1}"),
    ("quorum", {"x-dead-letter-strategy": "bad"}, "x-dead-letter-strategy", "invalid_dlx_strategy"),
    ("quorum", {"x-dead-letter-strategy": 5}, "x-dead-letter-strategy", "{unacceptable_type,signedint}"),
    ("quorum", {"x-queue-leader-locator": "bad"}, "x-queue-leader-locator", "invalid_queue_locator_arg"),
    ("quorum", {"x-overflow": "bad"}, "x-overflow", "invalid_overflow"),
    ("quorum", {"x-message-ttl": -1}, "x-message-ttl", "{value_negative,-1}"),
    ("stream", {"x-max-length-bytes": "a"}, "x-max-length-bytes", '"expected integer, got longstr"'),
    ("stream", {"x-max-age": 5}, "x-max-age", "{unacceptable_type,signedint}"),
    ("stream", {"x-max-age": b"1h"}, "x-max-age", "{unacceptable_type,binary}"),
    ("stream", {"x-max-age": "0s"}, "x-max-age", "invalid_max_age"),
    ("stream", {"x-initial-cluster-size": 0}, "x-initial-cluster-size", "{value_zero,0}"),
    ("stream", {"x-initial-cluster-size": -1}, "x-initial-cluster-size", "{value_negative,-1}"),
    ("stream", {"x-stream-max-segment-size-bytes": -1}, "x-stream-max-segment-size-bytes",
     "{value_negative,-1}"),
]
for i, (qt, args, arg, why) in enumerate(CASES):
    q = f"qa-bad-{i}"
    check(f"{qt} {args!r}", outcome(q, qt, args), value(q, arg, why))

q = "qa-dlx-type"
check("x-dead-letter-exchange not a string", outcome(q, "classic", {"x-dead-letter-exchange": 5}),
      ("error", 406, f"PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' "
                     f"in queue '{q}' in vhost '/'"))

# The order of the checks.
q = "qa-order-1"
check("a value the type takes, before an argument it does not",
      outcome(q, "classic", {"x-max-age": "1h", "x-max-length": -1}), value(q, "x-max-length", "{value_negative,-1}"))
q = "qa-order-2"
check("an argument the type does not take, before auto-delete",
      outcome(q, "stream", {"x-max-priority": 5}, auto_delete=True), other_type(q, "x-max-priority", "stream"))
q = "qa-order-3"
check("a bad value, before non-durable",
      outcome(q, "quorum", {"x-max-length": -1}, durable=False), value(q, "x-max-length", "{value_negative,-1}"))
for qt in ["quorum", "stream"]:
    for (d, e, a), what in [((True, True, True), "auto-delete"), ((False, True, False), "exclusive-owner"),
                            ((False, False, True), "auto-delete"), ((False, False, False), "non-durable")]:
        q = f"qa-prop-{qt}-{int(d)}{int(e)}{int(a)}"
        check(f"{qt} durable={d} exclusive={e} auto_delete={a}",
              outcome(q, qt, {}, durable=d, exclusive=e, auto_delete=a), prop(q, what))
q = "qa-order-4"
check("auto-delete, before a stream's segment size",
      outcome(q, "stream", {"x-stream-max-segment-size-bytes": 4_000_000_000}, auto_delete=True),
      prop(q, "auto-delete"))

# Where StableMQ answers otherwise on purpose.
q = "qa-dl-negative"
check("quorum x-delivery-limit -1", outcome(q, "quorum", {"x-delivery-limit": -1}),
      OK if RABBITMQ else value(q, "x-delivery-limit", "{value_negative,-1}"))

sys.exit(1 if failed else 0)
