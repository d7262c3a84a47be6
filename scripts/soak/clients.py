"""What every load worker shares: connecting with failover, and the stop flag.

Clients know every node's AMQP port and nothing about roles: any node serves
them (a slave proxies to the master and closes its clients with 320 when the
master changes). A worker whose connection fails moves on to the next node.
"""

import itertools
import random
import threading
import time

import pika
import pika.exceptions

# Everything pika raises when a connection or channel goes away (a kill -9, a
# 320 from a slave whose master changed, a refused connect during an election).
AMQP_ERRORS = (pika.exceptions.AMQPError, OSError, AttributeError, AssertionError)


class Stop:
    """The run's stop flag, with a sleep that wakes up when it is set."""

    def __init__(self):
        self.event = threading.Event()

    def set(self):
        self.event.set()

    def __bool__(self):
        return self.event.is_set()

    def sleep(self, seconds):
        return self.event.wait(seconds)


class Connector:
    """Round-robin over the nodes, starting at a random one per worker."""

    def __init__(self, ports, heartbeat=10):
        self.ports = list(ports)
        self.heartbeat = heartbeat

    def nodes(self):
        start = random.randrange(len(self.ports))
        return itertools.cycle(self.ports[start:] + self.ports[:start])

    def params(self, port, heartbeat=None):
        return pika.ConnectionParameters(
            host="127.0.0.1", port=port,
            credentials=pika.PlainCredentials("guest", "guest"),
            heartbeat=self.heartbeat if heartbeat is None else heartbeat,
            # Bounded: a node that accepts and then says nothing must not
            # hold a worker (every wait of the harness is bounded).
            socket_timeout=5, stack_timeout=10, blocked_connection_timeout=30,
            connection_attempts=1, client_properties={"connection_name": "soak"})

    def connect(self, nodes, stop, stats=None, heartbeat=None):
        """A BlockingConnection to the next node that takes it, or None once
        the run stops. Retries are paced so a cluster mid-election is not
        hammered."""
        while not stop:
            port = next(nodes)
            try:
                return pika.BlockingConnection(self.params(port, heartbeat))
            except AMQP_ERRORS:
                if stats is not None:
                    stats.add("connect_failures")
                stop.sleep(0.3 + random.random() * 0.4)
        return None


def close_quietly(conn):
    try:
        if conn is not None and conn.is_open:
            conn.close()
    except AMQP_ERRORS:
        pass


class Stats:
    """Counters the workers bump (connections opened, reconnects...)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def put(self, key, value):
        with self.lock:
            self.counts[key] = value

    def snapshot(self):
        with self.lock:
            return dict(self.counts)


class Heartbeat:
    """Each worker's last sign of progress, so a hang (a publish whose confirm
    never comes, a consumer that gets nothing from a non-empty queue) is
    reported rather than waited on: pika's blocking calls cannot be cut."""

    def __init__(self):
        self.lock = threading.Lock()
        self.last = {}

    def beat(self, name):
        with self.lock:
            self.last[name] = time.monotonic()

    def stalled(self, seconds):
        now = time.monotonic()
        with self.lock:
            return {k: round(now - t) for k, t in self.last.items() if now - t > seconds}
