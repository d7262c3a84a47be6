"""The end of the run: with every node up again and the load stopped, wait
for the TTL queue to dead-letter everything, then consume every work queue
and the DLQ until they are empty, recording what arrives in the ledger."""

import time

from . import topology
from .clients import AMQP_ERRORS, close_quietly
from .load import on_message_recorder


def depths(ch):
    out = {}
    for q in topology.consumed_queues() + [topology.TTL_QUEUE]:
        out[q] = ch.queue_declare(q, passive=True).method.message_count
    return out


def drain(ctx, timeout=300, quiet=3.0):
    """Consume until every queue reports 0 messages and nothing arrived for
    `quiet` seconds. Returns (ok, last depths, seconds taken); bounded by
    `timeout`, reconnecting (to the next node) if a connection fails."""
    started = time.monotonic()
    deadline = started + timeout
    nodes, last = ctx.connector.nodes(), None
    while time.monotonic() < deadline:
        conn = ctx.connector.connect(nodes, _Never(deadline), ctx.stats)
        if conn is None:
            break
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=200)
            for q in topology.consumed_queues():
                ch.basic_consume(q, on_message_recorder(ctx, q))
            quiet_since = time.monotonic()
            while time.monotonic() < deadline:
                before = ctx.ledger.deliveries
                conn.process_data_events(time_limit=0.5)
                if ctx.ledger.deliveries != before:
                    quiet_since = time.monotonic()
                    continue
                last = depths(ch)
                if not any(last.values()) and time.monotonic() - quiet_since >= quiet:
                    return True, last, time.monotonic() - started
        except AMQP_ERRORS:
            ctx.stats.add("drain_reconnects")
        finally:
            close_quietly(conn)
    return False, last, time.monotonic() - started


class _Never:
    """A stop flag for connect() that only the deadline sets."""

    def __init__(self, deadline):
        self.deadline = deadline

    def __bool__(self):
        return time.monotonic() > self.deadline

    def sleep(self, seconds):
        time.sleep(seconds)
        return bool(self)
