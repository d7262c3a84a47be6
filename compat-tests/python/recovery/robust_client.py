"""aio-pika's connect_robust program for the client-recovery test
(compat-tests/tests/client_recovery.rs).

It publishes persistent messages with confirms and consumes them until the
file DIR/stop appears, while the test kills the master; aio-pika's robust
connection must reconnect and restore the channels, exchange, queues, bindings
and consumers by itself.

aio-pika takes one URL; for a cluster its issue #141 (and the round-robin class
proposed in its PR #680) suggests a RobustConnection subclass that moves on to
the next node's URL. `RoundRobinConnection` below is
that subclass, given to connect_robust as its `connection_class`: everything
else (reconnecting, restoring topology and consumers) is aio-pika's own.

Topology, files and protocol are those of compat-tests/clients/java/RecoveryClient.java:
a durable direct exchange, a durable queue (manual acks) and a tap queue
(exclusive, no name given: aio-pika names it itself and declares it again on
reconnect); DIR/confirmed, DIR/consumed, DIR/tap, DIR/events.

Usage: python robust_client.py DIR QUEUE URI [URI...]
"""

import asyncio
import os
import sys

import aio_pika
from aio_pika.robust_connection import RobustConnection
from pamqp.commands import Basic
from yarl import URL

EXCHANGE = "recovery.aio-pika"
BATCH = 100


class RoundRobinConnection(RobustConnection):
    """A robust connection that tries the next URL of `URLS` at every
    connection attempt after the first.

    aio-pika clears `transport` at the start of each attempt
    (`RobustConnection.__connect_transport`), so that is where the URL moves
    on: a failed attempt (a dead node) moves on too, not only a lost
    connection.
    """

    URLS: list = []

    @property
    def transport(self):
        return self.__dict__.get("_rr_transport")

    @transport.setter
    def transport(self, value):
        if value is None and self.URLS:
            # -1 at __init__, 0 for the first attempt, then one more each time.
            self._rr = self.__dict__.get("_rr", -2) + 1
            self.url = self.URLS[max(self._rr, 0) % len(self.URLS)]
        self.__dict__["_rr_transport"] = value


class Lines:
    """An append-only file of lines, flushed after every write."""

    def __init__(self, path):
        self.f = open(path, "w", encoding="utf-8")

    def line(self, s):
        self.f.write(f"{s}\n")
        self.f.flush()


async def main(directory, queue_name, uris):
    confirmed_log = Lines(os.path.join(directory, "confirmed"))
    consumed_log = Lines(os.path.join(directory, "consumed"))
    tap_log = Lines(os.path.join(directory, "tap"))
    events = Lines(os.path.join(directory, "events"))
    RoundRobinConnection.URLS = [URL(u) for u in uris]
    conn = await aio_pika.connect_robust(
        uris[0],
        connection_class=RoundRobinConnection,
        reconnect_interval=0.25,
        timeout=5,
    )
    events.line(f"connected {conn.url.port}")
    # Bumped on every loss and every reconnect: a batch that saw one is
    # published again rather than counted as confirmed.
    generation = [0]

    def on_close(_conn, exc):
        generation[0] += 1
        events.line(f"shutdown {exc!r}")

    def on_reconnect(c):
        generation[0] += 1
        events.line(f"recovered {c.url.port}")

    conn.close_callbacks.add(on_close)
    conn.reconnect_callbacks.add(on_reconnect)

    consumed = set()
    cch = await conn.channel()
    await cch.set_qos(prefetch_count=200)
    exchange = await cch.declare_exchange(
        EXCHANGE, aio_pika.ExchangeType.DIRECT, durable=True
    )
    queue = await cch.declare_queue(queue_name, durable=True)
    await queue.bind(exchange, routing_key=queue_name)
    tap = await cch.declare_queue(exclusive=True)
    await tap.bind(exchange, routing_key=queue_name)

    async def on_message(message):
        ident = int.from_bytes(message.body, "big")
        consumed_log.line(ident)
        consumed.add(ident)
        try:
            await message.ack()
        except Exception as e:  # the channel went away: redelivered later
            events.line(f"ack failed: {e!r}")

    async def on_tap(message):
        tap_log.line(int.from_bytes(message.body, "big"))

    await queue.consume(on_message)
    await tap.consume(on_tap, no_ack=True)

    pch = await conn.channel(publisher_confirms=True)
    pex = await pch.get_exchange(EXCHANGE)
    stop = os.path.join(directory, "stop")
    confirmed = set()
    nxt, nacks, failures = 0, 0, 0
    while not os.path.exists(stop):
        gen = generation[0]
        ids = range(nxt, nxt + BATCH)
        try:
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        pex.publish(
                            aio_pika.Message(
                                i.to_bytes(8, "big"),
                                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                            ),
                            routing_key=queue_name,
                        )
                        for i in ids
                    )
                ),
                timeout=30,
            )
        except Exception as e:
            failures += 1
            events.line(f"publish failed: {e!r}")
            await asyncio.sleep(0.1)
            continue
        if not all(isinstance(r, Basic.Ack) for r in results):
            nacks += 1
            continue
        if generation[0] != gen:
            continue
        for i in ids:
            confirmed.add(i)
            confirmed_log.line(i)
        nxt += BATCH

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not confirmed <= consumed and loop.time() < deadline:
        await asyncio.sleep(0.05)
    missing = len(confirmed - consumed)
    events.line(
        f"summary confirmed={len(confirmed)} consumed={len(consumed)} "
        f"missing={missing} nacks={nacks} failures={failures}"
    )
    await conn.close()
    events.line("done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
