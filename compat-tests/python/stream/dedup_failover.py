"""A deduplicating publisher across a master kill, with rstream.

    dedup_failover.py STREAM PORT...

Publishes ids 1, 2, ... as publisher "dp" (batches of 50, without waiting for
confirms) through the first port for up to PUBLISH_SECONDS, or until its
connection fails: the test kills the master meanwhile. Then, through
whichever port answers, it resends every id it sent, 1 to N, as "dp" again,
and waits until each is confirmed: the broker must store the ids it lost and
skip (confirm without storing) those it kept. Last it reads the stream from
the first offset and prints what it holds:

    sent N stored S distinct D missing M duplicated U out-of-order O

The test wants every id exactly once, in order: S = D = N, M = U = O = 0.
Only 127.0.0.1, every wait bounded.
"""

import asyncio
import sys
import time

from rstream import (
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    OffsetType,
    Producer,
    RawMessage,
)

PUBLISH_SECONDS = 6.0
BATCH = 50
REF = "dp"


def producer(port):
    return Producer("127.0.0.1", port=port, username="guest", password="guest")


async def publish_until_cut(stream, port):
    """Ids sent before the connection failed (or time ran out)."""
    sent = 0
    p = producer(port)
    try:
        await asyncio.wait_for(p.start(), 10)
        await asyncio.wait_for(p.create_stream(stream, exists_ok=True), 10)
        end = time.monotonic() + PUBLISH_SECONDS
        while time.monotonic() < end:
            batch = [RawMessage(b"d%d" % i, publishing_id=i) for i in range(sent + 1, sent + BATCH + 1)]
            await asyncio.wait_for(p.send_batch(stream, batch, publisher_name=REF), 2)
            sent += BATCH
            await asyncio.sleep(0.002)
    except Exception as e:  # the kill: any error ends the phase
        print("cut after", sent, type(e).__name__, flush=True)
    try:
        await asyncio.wait_for(p.close(), 3)
    except Exception:
        pass
    return sent


async def resend_all(stream, ports, n):
    """Resend 1..n as REF until every id is confirmed; the port that served."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for port in ports:
            confirmed = set()
            done = asyncio.Event()

            async def on_confirm(status: ConfirmationStatus):
                if status.is_confirmed:
                    confirmed.add(status.message_id)
                    if len(confirmed) == n:
                        done.set()

            p = producer(port)
            try:
                await asyncio.wait_for(p.start(), 5)
                for first in range(1, n + 1, BATCH):
                    batch = [RawMessage(b"d%d" % i, publishing_id=i) for i in range(first, min(first + BATCH, n + 1))]
                    await asyncio.wait_for(
                        p.send_batch(stream, batch, publisher_name=REF, on_publish_confirm=on_confirm), 5
                    )
                await asyncio.wait_for(done.wait(), 20)
                await asyncio.wait_for(p.close(), 5)
                return port
            except Exception as e:
                print("resend via", port, "failed:", type(e).__name__, e, flush=True)
                try:
                    await asyncio.wait_for(p.close(), 3)
                except Exception:
                    pass
        await asyncio.sleep(0.5)
    raise SystemExit("no node confirmed the resend within 60 s")


async def read_all(stream, port, n):
    got = []
    grew = asyncio.Event()

    async def cb(msg, ctx):
        got.append(bytes(msg))
        grew.set()

    c = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    await asyncio.wait_for(c.start(), 10)
    await c.subscribe(stream, cb, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
    # Until n entries came, or 3 s without a new one (more would be duplicates).
    while True:
        grew.clear()
        try:
            await asyncio.wait_for(grew.wait(), 3)
        except asyncio.TimeoutError:
            break
    await asyncio.wait_for(c.close(), 5)
    return got


async def main():
    stream, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
    n = await publish_until_cut(stream, ports[0])
    if n == 0:
        raise SystemExit("nothing was sent before the cut")
    port = await resend_all(stream, ports[1:] + ports[:1], n)
    got = await read_all(stream, port, n)
    ids = [int(b[1:]) for b in got]
    distinct = set(ids)
    missing = sum(1 for i in range(1, n + 1) if i not in distinct)
    out_of_order = sum(1 for a, b in zip(ids, ids[1:]) if b <= a)
    print(
        "sent", n, "stored", len(ids), "distinct", len(distinct), "missing", missing,
        "duplicated", len(ids) - len(distinct), "out-of-order", out_of_order, flush=True,
    )


asyncio.run(asyncio.wait_for(main(), 150))
