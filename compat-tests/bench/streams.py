"""Stream protocol throughput with rstream, one broker at a time.

Usage: python streams.py STREAM_PORT BROKER_PID N SIZE CONSUMERS

Publishes N messages of SIZE bytes with confirms from one producer (rstream's
batching send with a confirm callback), then starts CONSUMERS consumers at
`first`, each reading all N. Prints one JSON line: publish and fan-out rates
(msg/s; fan-out counts every consumer's messages) and the broker's CPU
seconds over each phase (utime+stime from /proc/PID/stat; children such as
RabbitMQ's helpers are not counted). Every wait is bounded.
"""

import asyncio
import json
import os
import sys
import time

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

PORT, PID, N, SIZE, CONSUMERS = (int(a) for a in sys.argv[1:6])
LOGIN = dict(username="guest", password="guest")
TICK = os.sysconf("SC_CLK_TCK")


def cpu():
    with open(f"/proc/{PID}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def publish(stream):
    confirmed = 0
    done = asyncio.Event()

    def on_confirm(_):
        nonlocal confirmed
        confirmed += 1
        if confirmed == N:
            done.set()

    body = b"x" * SIZE
    async with Producer("127.0.0.1", port=PORT, **LOGIN) as p:
        await p.create_stream(stream)
        c0, t0 = cpu(), time.monotonic()
        for _ in range(N):
            await p.send(stream, body, on_publish_confirm=on_confirm)
        await asyncio.wait_for(done.wait(), 300)
        return N / (time.monotonic() - t0), cpu() - c0


async def fan_out(stream):
    got = 0
    done = asyncio.Event()

    async def on_message(_msg, _ctx):
        nonlocal got
        got += 1
        if got == N * CONSUMERS:
            done.set()

    consumers = [Consumer("127.0.0.1", port=PORT, **LOGIN) for _ in range(CONSUMERS)]
    for c in consumers:
        await c.start()
    c0, t0 = cpu(), time.monotonic()
    for c in consumers:
        await c.subscribe(stream, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    await asyncio.wait_for(done.wait(), 300)
    rate, spent = got / (time.monotonic() - t0), cpu() - c0
    for c in consumers:
        await c.close()
    return rate, spent


async def main():
    stream = f"bench-{os.getpid()}-{time.time_ns()}"
    pub_rate, pub_cpu = await publish(stream)
    read_rate, read_cpu = await fan_out(stream)
    async with Producer("127.0.0.1", port=PORT, **LOGIN) as p:
        await p.delete_stream(stream)
    print(json.dumps({
        "n": N, "size": SIZE, "consumers": CONSUMERS,
        "publish_msg_s": round(pub_rate), "publish_cpu_us_per_msg": round(pub_cpu / N * 1e6, 2),
        "fanout_msg_s": round(read_rate), "fanout_cpu_us_per_msg": round(read_cpu / (N * CONSUMERS) * 1e6, 2),
    }))


asyncio.run(asyncio.wait_for(main(), 900))
