"""Planted faults (SOAK_PLANT=loss or leak), to show the checks can fail
on a real run. Neither touches the broker: they are clients behaving badly.

loss: a consumer that takes messages from a work queue, acks them and
      records nothing, as a broker that dropped confirmed messages would look.
leak: a client that opens 25 more connections every sample interval and
      never closes them (reopening any that a failover closed), so the
      brokers' open fds and memory grow as with a connection leak.
"""

import random

from . import topology
from .clients import AMQP_ERRORS, close_quietly


def thief(ctx, name, count=20):
    ctx.stop.sleep(20)
    nodes = ctx.connector.nodes()
    taken = 0
    for _ in range(100):  # bounded tries
        if ctx.stop or taken >= count:
            break
        conn = ctx.connector.connect(nodes, ctx.stop, ctx.stats)
        if conn is None:
            return
        try:
            ch = conn.channel()
            while taken < count:
                method, _, _ = ch.basic_get(topology.WORK[0], auto_ack=True)
                if method is None:
                    ctx.stop.sleep(0.2)
                    continue
                taken += 1
        except AMQP_ERRORS:
            pass
        finally:
            close_quietly(conn)
    ctx.stats.add("planted_thefts", taken)


def leaker(ctx, name, step=25, cap=400):
    held, nodes, want = [], ctx.connector.nodes(), 0
    while not ctx.stop:
        want = min(cap, want + step)
        held = [c for c in held if _alive(c)]
        while len(held) < want and not ctx.stop:
            # heartbeat 0: an idle connection the client never services.
            conn = ctx.connector.connect(nodes, ctx.stop, ctx.stats, heartbeat=0)
            if conn is None:
                break
            held.append(conn)
        ctx.stats.put("planted_connections_held", len(held))
        ctx.beat.beat(name)
        ctx.stop.sleep(ctx.sample_seconds * random.uniform(0.9, 1.1))
    for c in held:
        close_quietly(c)


def _alive(conn):
    try:
        conn.process_data_events(time_limit=0)
        return conn.is_open
    except AMQP_ERRORS:
        return False
