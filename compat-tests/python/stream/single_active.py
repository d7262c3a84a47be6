"""Single active consumer (RabbitMQ 3.11+) over the stream protocol, with
rstream: subscriptions with `single-active-consumer=true` and the same
`name` on one stream (each from a connection of its own), and on a super
stream's partitions (`super-stream` set).

RabbitMQ 3.10, the project's reference, has no single active consumer:
every subscription of a group reads there, so this script checks
RabbitMQ's documented behaviour (its streams guide, "Single Active
Consumer", and its stream coordinator's rules), not a recording:
- one member of a group reads; the first to join is active and is told so
  with a consumer update, which it answers with where to start; when it
  unsubscribes or its connection goes, the next one (in arrival order) is
  told and starts where it answers (here: the stored offset + 1);
- on a super stream, partition i's active member is the member at
  i % members; a member that must give way is told `active=false` first,
  and the next is told `active=true` once it answered.

Each case prints `ok NAME` or `FAIL NAME: got ..., want ...`; the script
exits 1 if any case failed. Waits are bounded (10 s); names carry a random
suffix; everything is deleted at the end.

Usage: python single_active.py STREAM_PORT AMQP_PORT
"""

import asyncio
import logging
import os
import sys

from rstream import (
    Consumer,
    ConsumerOffsetSpecification,
    OffsetSpecification,
    OffsetType,
    Producer,
    SuperStreamConsumer,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_protocol as sp  # noqa: E402  (check, step, the port)
import super_stream as ssp  # noqa: E402  (a super stream by AMQP declares)

HOST = "127.0.0.1"
LOGIN = dict(username="guest", password="guest")
SUFFIX = os.urandom(4).hex()
check, failed = sp.check, sp.failed

logging.getLogger("rstream").setLevel(logging.CRITICAL + 1)


async def until(cond, timeout=sp.WAIT):
    """Wait (bounded) for `cond()`; whether it came true."""
    for _ in range(int(timeout * 10)):
        if cond():
            return True
        await asyncio.sleep(0.1)
    return cond()


class Member:
    """A Consumer of its own (its own connection) with one SAC subscription;
    it keeps what it got and the consumer updates it was told."""

    def __init__(self, stream, group, super_stream=None):
        self.stream, self.group, self.super_stream = stream, group, super_stream
        self.got, self.updates = [], []
        self.consumer = Consumer(HOST, port=sp.STREAM_PORT, **LOGIN)

    def properties(self):
        p = {"single-active-consumer": "true", "name": self.group}
        if self.super_stream:
            p["super-stream"] = self.super_stream
        return p

    async def on_message(self, msg, ctx):
        self.got.append(bytes(msg).decode())

    async def on_update(self, active, ctx):
        """Answer with the stored offset + 1, or first without one."""
        self.updates.append(active)
        try:
            stored = await self.consumer.query_offset(ctx.stream, self.group)
            return OffsetSpecification(OffsetType.OFFSET, stored + 1)
        except Exception:  # no offset stored yet
            return OffsetSpecification(OffsetType.FIRST, 0)

    async def start(self):
        await sp.step(self.consumer.start())
        self.sub = await sp.step(self.consumer.subscribe(
            self.stream, self.on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
            properties=self.properties(), subscriber_name=self.group,
            consumer_update_listener=self.on_update))
        return self


async def publish(stream, bodies):
    producer = Producer(HOST, port=sp.STREAM_PORT, **LOGIN)
    await sp.step(producer.start())
    try:
        for b in bodies:
            await sp.step(producer.send_wait(stream, b.encode()))
    finally:
        await sp.step(producer.close())


async def case_plain():
    stream, group = f"sac-{SUFFIX}", f"app-{SUFFIX}"
    producer = Producer(HOST, port=sp.STREAM_PORT, **LOGIN)
    await sp.step(producer.start())
    await sp.step(producer.create_stream(stream))
    await sp.step(producer.close())
    first = [f"m{i}" for i in range(10)]
    await publish(stream, first)
    a = await Member(stream, group).start()
    b = await Member(stream, group).start()
    c = await Member(stream, group).start()
    await until(lambda: len(a.got) >= 10)
    await asyncio.sleep(0.5)
    check("plain: the first member reads everything", a.got, first)
    check("plain: it was told it is active, once", a.updates, [True])
    check("plain: the others read nothing and are told nothing",
          (b.got, b.updates, c.got, c.updates), ([], [], [], []))
    # It stores offset 4 and unsubscribes: the second member is told, and
    # starts at the stored offset + 1.
    await sp.step(a.consumer.store_offset(stream, group, 4))
    await asyncio.sleep(0.3)
    await sp.step(a.consumer.unsubscribe(a.sub))
    await until(lambda: len(b.got) >= 5)
    await asyncio.sleep(0.5)
    check("plain: after an unsubscribe the next member takes over at stored + 1",
          (b.updates, b.got), ([True], first[5:]))
    check("plain: the third still waits", (c.updates, c.got), ([], []))
    # The active member's connection goes: the third takes over.
    await sp.step(b.consumer.store_offset(stream, group, 7))
    await asyncio.sleep(0.3)
    await sp.step(b.consumer.close())
    await until(lambda: len(c.got) >= 2)
    await asyncio.sleep(0.5)
    check("plain: after a connection closes the next member takes over",
          (c.updates, c.got), ([True], first[8:]))
    more = ["n0", "n1"]
    await publish(stream, more)
    await until(lambda: len(c.got) >= 4)
    await asyncio.sleep(0.3)
    check("plain: new messages go to the active member only",
          (a.got[10:], b.got[5:], c.got[2:]), ([], [], more))
    for m in (a, c):
        await sp.step(m.consumer.close())
    producer = Producer(HOST, port=sp.STREAM_PORT, **LOGIN)
    await sp.step(producer.start())
    await sp.step(producer.delete_stream(stream))
    await sp.step(producer.close())


class SuperMember:
    """A SuperStreamConsumer subscribed to every partition as one member of
    the group; what it got and was told, by partition."""

    def __init__(self, ss, group):
        self.ss, self.group = ss, group
        self.got, self.updates = {}, {}
        self.consumer = SuperStreamConsumer(HOST, port=sp.STREAM_PORT, super_stream=ss, **LOGIN)

    async def on_message(self, msg, ctx):
        self.got.setdefault(ctx.stream, []).append(bytes(msg).decode())

    async def on_update(self, active, ctx):
        self.updates.setdefault(ctx.stream, []).append(active)
        return OffsetSpecification(OffsetType.NEXT, 0)

    async def start(self):
        await sp.step(self.consumer.start())
        props = {"single-active-consumer": "true", "name": self.group, "super-stream": self.ss}
        await sp.step(self.consumer.subscribe(
            self.on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT),
            properties=props, subscriber_name=self.group, consumer_update_listener=self.on_update))
        return self


async def case_super_stream():
    ss, group = f"ss-{SUFFIX}", f"app-{SUFFIX}"
    parts = [f"{ss}-{i}" for i in range(3)]
    ssp.make_super_stream(ss, [(p, str(i), i) for i, p in enumerate(parts)])
    try:
        x = await SuperMember(ss, group).start()
        await until(lambda: len(x.updates) == 3)
        check("super stream: the first member is active on every partition",
              x.updates, {p: [True] for p in parts})
        y = await SuperMember(ss, group).start()
        # Two members: partition 1 (1 % 2) moves to the second, through
        # a step down of the first; 0 and 2 stay.
        await until(lambda: parts[1] in y.updates and len(x.updates[parts[1]]) == 2)
        await asyncio.sleep(0.5)
        check("super stream: the first member gives way on partition 1 only",
              x.updates, {parts[0]: [True], parts[1]: [True, False], parts[2]: [True]})
        check("super stream: the second member is told it is active on partition 1",
              y.updates, {parts[1]: [True]})
        for i, p in enumerate(parts):
            await publish(p, [f"{i}-a", f"{i}-b"])
        await until(lambda: sum(map(len, x.got.values())) + sum(map(len, y.got.values())) >= 6)
        await asyncio.sleep(0.5)
        check("super stream: each partition's messages go to its active member",
              (x.got, y.got),
              ({parts[0]: ["0-a", "0-b"], parts[2]: ["2-a", "2-b"]}, {parts[1]: ["1-a", "1-b"]}))
        # The second member goes: partition 1 is the first's again.
        await sp.step(y.consumer.close())
        await until(lambda: len(x.updates[parts[1]]) == 3)
        await asyncio.sleep(0.5)  # its answer, then its consume, before the publish
        check("super stream: when the second member goes, the first is active again",
              x.updates[parts[1]], [True, False, True])
        await publish(parts[1], ["1-c"])
        await until(lambda: len(x.got.get(parts[1], [])) >= 1)
        check("super stream: and reads partition 1", x.got.get(parts[1]), ["1-c"])
        await sp.step(x.consumer.close())
    finally:
        ssp.drop_super_stream(ss, parts)


async def main():
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    await case_plain()
    await case_super_stream()
    print(f"{len(failed)} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    asyncio.run(main())
