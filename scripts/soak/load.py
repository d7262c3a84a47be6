"""The load workers: each a loop in its own thread until the stop flag is set.

Publishers confirm every message (persistent, unique id as body); consumers
come and go (manual ack); other workers open and close connections, declare
and delete short-lived queues, and poll the management API. Every loop is
bounded by the stop flag and every network wait by a timeout (clients.py).
"""

import random
import time

import pika
import pika.exceptions

from . import topology
from .clients import AMQP_ERRORS, close_quietly

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def body_of(mid):
    # Sizes spread over 64 B - 4 KiB so the stores see mixed record sizes.
    return mid.encode() + b" " + b"x" * random.randint(64, 4096)


def publisher(ctx, name, queues, rate):
    """Publish with confirms at `rate` msg/s. A connection is kept 30-90 s,
    then closed and the next node used, so publishers also move around."""
    nodes, seq = ctx.connector.nodes(), 0
    while not ctx.stop:
        conn = ctx.connector.connect(nodes, ctx.stop, ctx.stats)
        if conn is None:
            return
        ctx.stats.add("connections_opened")
        until = time.monotonic() + random.uniform(30, 90)
        try:
            ch = conn.channel()
            topology.declare(ch)
            ch.confirm_delivery()
            next_at = time.monotonic()
            while not ctx.stop and time.monotonic() < until:
                mid, seq = f"{name}-{seq}", seq + 1
                q = random.choice(queues)
                ctx.ledger.published(mid, topology.destination(q))
                try:
                    ch.basic_publish("", q, body_of(mid), PERSISTENT, mandatory=True)
                    ctx.ledger.confirm(mid)
                except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
                    ctx.stats.add("publish_nacked_or_returned")
                ctx.beat.beat(name)
                next_at = max(next_at + 1.0 / rate, time.monotonic() - 1.0)
                ctx.stop.sleep(max(0.0, next_at - time.monotonic()))
        except AMQP_ERRORS:
            ctx.stats.add("publisher_reconnects")
        finally:
            close_quietly(conn)


def consumer(ctx, name):
    """Consume every work queue and the DLQ for 10-40 s, then leave (what is
    unacked goes back to the queues) and come back 0-2 s later."""
    nodes = ctx.connector.nodes()
    while not ctx.stop:
        conn = ctx.connector.connect(nodes, ctx.stop, ctx.stats)
        if conn is None:
            return
        ctx.stats.add("connections_opened")
        ctx.stats.add("consumer_sessions")
        try:
            ch = conn.channel()
            topology.declare(ch)
            ch.basic_qos(prefetch_count=50)
            for q in topology.consumed_queues():
                ch.basic_consume(q, on_message_recorder(ctx, q))
            until = time.monotonic() + random.uniform(10, 40)
            while not ctx.stop and time.monotonic() < until:
                conn.process_data_events(time_limit=1)
                ctx.beat.beat(name)
        except AMQP_ERRORS:
            ctx.stats.add("consumer_reconnects")
        finally:
            close_quietly(conn)
        ctx.stop.sleep(random.uniform(0, 2))


def on_message_recorder(ctx, queue):
    def on_message(ch, method, props, body):
        mid = body.split(b" ", 1)[0].decode()
        headers = props.headers or {}
        ctx.ledger.delivered(mid, queue, x_death="x-death" in headers)
        ch.basic_ack(method.delivery_tag)
    return on_message


def connection_churn(ctx, name):
    """Open a connection, a channel, read a queue's depth, close: 1-2 a
    second per worker, to any node."""
    nodes = ctx.connector.nodes()
    while not ctx.stop:
        conn = ctx.connector.connect(nodes, ctx.stop, ctx.stats)
        if conn is None:
            return
        ctx.stats.add("connections_opened")
        try:
            ch = conn.channel()
            ch.queue_declare(random.choice(topology.WORK), passive=True)
            ctx.beat.beat(name)
        except AMQP_ERRORS:
            ctx.stats.add("churn_errors")
        finally:
            close_quietly(conn)
        ctx.stop.sleep(random.uniform(0.3, 1.0))


def queue_churn(ctx, name):
    """Declare a short-lived queue, bind it, route 5 messages through it,
    get them, delete it; every 5th is a server-named exclusive queue that
    goes away with its connection, which is closed every 20 rounds."""
    nodes, n = ctx.connector.nodes(), 0
    while not ctx.stop:
        conn = ctx.connector.connect(nodes, ctx.stop, ctx.stats)
        if conn is None:
            return
        ctx.stats.add("connections_opened")
        try:
            ch = conn.channel()
            topology.declare(ch)
            for _ in range(20):
                if ctx.stop:
                    break
                n += 1
                _one_temp_queue(ch, f"soak.tmp.{name}.{n}", exclusive=n % 5 == 0)
                ctx.stats.add("temp_queues")
                ctx.beat.beat(name)
                ctx.stop.sleep(random.uniform(0.5, 1.5))
        except AMQP_ERRORS:
            ctx.stats.add("queue_churn_errors")
        finally:
            close_quietly(conn)


def _one_temp_queue(ch, name, exclusive):
    # x-expires: a queue whose delete was cut off by a failover goes away by
    # itself, as a careful RabbitMQ client would arrange.
    args = {"x-expires": 30000}
    if exclusive:
        name = ch.queue_declare("", exclusive=True, arguments=args).method.queue
    else:
        ch.queue_declare(name, arguments=args)
    ch.queue_bind(name, topology.CHURN_EXCHANGE, routing_key=name)
    for i in range(5):
        ch.basic_publish(topology.CHURN_EXCHANGE, name, b"tmp %d" % i)
    got = 0
    for _ in range(20):
        method, _, _ = ch.basic_get(name, auto_ack=True)
        got += method is not None
        if got == 5:
            break
    if not exclusive:
        ch.queue_delete(name)
