"""Stream filtering (RabbitMQ 3.13+) over both protocols, with rstream 1.1.1
(publish v2 with a filter value per message; subscribe with `filter.N` and
`match-unfiltered`) and pika (the `x-stream-filter-value` header on publish;
the `x-stream-filter` and `x-stream-match-unfiltered` consumer arguments).

RabbitMQ 3.10, the project's reference, has no filtering, so the checks are
RabbitMQ's documented rules (its streams guide, "Filtering", and the 3.13
source: rabbit_stream_utils:filter_spec, rabbit_stream_queue:filter_spec),
with StableMQ's exact sets where RabbitMQ has bloom filters:
- a stream-protocol subscription gets a stored chunk (what one publish frame
  stored) only if one of its records has a value of its filter, or, with
  match-unfiltered, has none; a chunk that holds only other values never
  comes, and a mixed chunk comes whole (the client filters the records);
- an AMQP 0-9-1 consumer gets only the matching entries (each entry is
  decided alone); a filter that is not a string or an array of strings is no
  filter, as in RabbitMQ 3.13; the header stays on what it reads;
- a value published over one protocol is filtered by the other.

Phases (argv[3]): `write` creates two streams, publishes and runs every
case; `check`, after the node is killed and restarted, runs the filtered
reads again (the filter values are stored with the entries). Each case
prints `ok NAME` or `FAIL NAME: got ..., want ...`; the script exits 1 if
any failed. Waits are bounded (10 s).

Usage: python filtering.py STREAM_PORT AMQP_PORT write|check
"""

import asyncio
import logging
import os
import sys

import pika
from rstream import (
    AMQPMessage,
    ConsumerOffsetSpecification,
    FilterConfiguration,
    OffsetType,
    Producer,
    amqp_decoder,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_protocol as sp  # noqa: E402  (check, step, consume, the ports)

HOST = "127.0.0.1"
LOGIN = dict(username="guest", password="guest")
PHASE = sys.argv[3] if len(sys.argv) > 3 else "write"
# Fixed names: the check phase reads what the write phase stored.
S1, S2 = "filter-rstream", "filter-amqp"
FIRST = ConsumerOffsetSpecification(OffsetType.FIRST)
BATCH = 20
check = sp.check

logging.getLogger("rstream").setLevel(logging.CRITICAL + 1)


def batch(value, n):
    """A batch of BATCH AMQP 1.0 messages whose bodies name their value
    (`-` for none) and place: `A-0-3`."""
    return [AMQPMessage(body=f"{value or '-'}-{n}-{i}".encode()) for i in range(BATCH)]


async def value_of(msg):
    """The filter value of a message of `batch` (the producer's extractor);
    a mixed batch's bodies start with `A` or `B`."""
    return bytes(msg.body).decode()[0]


async def write_s1():
    """S1 over the stream protocol, one chunk per send_batch: A, B, none,
    A, B, none, then one chunk of A and B mixed."""
    filtered = Producer(HOST, port=sp.STREAM_PORT, filter_value_extractor=value_of, **LOGIN)
    plain = Producer(HOST, port=sp.STREAM_PORT, **LOGIN)
    await sp.step(filtered.start())
    await sp.step(plain.start())
    await sp.step(filtered.create_stream(S1))
    for n in range(2):
        await sp.step(filtered.send_batch(S1, batch("A", n)))
        await sp.step(filtered.send_batch(S1, batch("B", n)))
        await sp.step(plain.send_batch(S1, batch(None, n)))
    mixed = [AMQPMessage(body=f"{'AB'[i % 2]}-m-{i}".encode()) for i in range(BATCH)]
    await sp.step(filtered.send_batch(S1, mixed))
    await sp.step(filtered.close())
    await sp.step(plain.close())


def expected_s1(values, unfiltered=False):
    """The bodies of S1's chunks that match (a mixed chunk whole)."""
    out = []
    for n in range(2):
        for v in ("A", "B", None):
            if v in values or (v is None and unfiltered):
                out += [bytes(m.body) for m in batch(v, n)]
    if "A" in values or "B" in values:
        out += [f"{'AB'[i % 2]}-m-{i}".encode() for i in range(BATCH)]
    return sorted(out)


async def read_stream(stream, count, values=None, unfiltered=False):
    """The bodies a fresh rstream subscription from `first` gets, sorted
    (the two producers' chunks may be stored in either order; no client-side
    predicate: every record of every chunk delivered)."""
    kw = {}
    if values is not None:
        kw["filter_input"] = FilterConfiguration(values_to_filter=values, match_unfiltered=unfiltered)
    got = await sp.consume(stream, FIRST, count, decoder=amqp_decoder, **kw)
    return sorted(bytes(m.body) for _, m in got)


def amqp():
    return pika.BlockingConnection(pika.ConnectionParameters(
        HOST, sp.AMQP_PORT, socket_timeout=10, blocked_connection_timeout=10))


def write_s2():
    """S2 over AMQP 0-9-1: 10 rounds of A, B and one without a value."""
    conn = amqp()
    ch = conn.channel()
    ch.queue_declare(S2, durable=True, arguments={"x-queue-type": "stream"})
    ch.confirm_delivery()
    for i in range(10):
        for v in ("A", "B", None):
            headers = {"x-stream-filter-value": v} if v else {}
            ch.basic_publish("", S2, f"{v or '-'}-{i}".encode(),
                             pika.BasicProperties(headers=headers, delivery_mode=2))
    conn.close()


def expected_s2(values, unfiltered=False):
    return sorted(f"{v or '-'}-{i}".encode() for i in range(10) for v in ("A", "B", None)
                  if v in values or (v is None and unfiltered))


def read_amqp(stream, count, arguments, prefetch=7):
    """[(body, x-stream-filter-value header)] an AMQP 0-9-1 consumer from
    `first` with `arguments` gets within 10 s (and 0.5 s more), acking each.
    The prefetch is below what matches: skipped entries must cost none."""
    conn = amqp()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got = []

    def on_message(ch, method, props, body):
        got.append((body, (props.headers or {}).get("x-stream-filter-value")))
        ch.basic_ack(method.delivery_tag)

    ch.basic_consume(stream, on_message, arguments={"x-stream-offset": "first", **arguments})
    for _ in range(100):
        if len(got) >= count:
            break
        conn.process_data_events(time_limit=0.1)
    conn.process_data_events(time_limit=0.5)
    conn.close()
    return sorted(got, key=lambda g: g[0])


async def cases_stream_protocol():
    everything = expected_s1({"A", "B"}, unfiltered=True)
    want = expected_s1({"A"})
    check("rstream: no filter gets every chunk", await read_stream(S1, len(everything)), everything)
    check("rstream: filter A gets the A chunks and the mixed one whole, no B-only or unfiltered chunk",
          await read_stream(S1, len(want), ["A"]), want)
    want = expected_s1({"A"}, unfiltered=True)
    check("rstream: filter A with match-unfiltered adds the chunks without a value",
          await read_stream(S1, len(want), ["A"], unfiltered=True), want)
    want = expected_s1({"A", "B"})
    check("rstream: filter A and B", await read_stream(S1, len(want), ["A", "B"]), want)
    check("rstream: filter C gets nothing", await read_stream(S1, 1, ["C"]), [])


async def cases_cross_protocol():
    want = expected_s2({"A"})
    check("rstream reads AMQP 0-9-1 publishes filtered by their header",
          await read_stream(S2, len(want), ["A"]), want)
    want = expected_s2({"B"}, unfiltered=True)
    check("rstream: filter B with match-unfiltered on AMQP 0-9-1 publishes",
          await read_stream(S2, len(want), ["B"], unfiltered=True), want)
    # Per entry over AMQP 0-9-1: the A records of the mixed chunk only, and
    # the value is not shown on a stream-protocol record.
    want = [bytes(m.body) for n in range(2) for m in batch("A", n)]
    want = sorted(want + [f"A-m-{i}".encode() for i in range(0, BATCH, 2)])
    got = read_amqp(S1, len(want), {"x-stream-filter": "A"})
    check("pika reads stream-protocol publishes filtered by their value",
          [b for b, _ in got], want)
    check("pika: a stream-protocol record shows no x-stream-filter-value",
          {h for _, h in got}, {None})


def cases_amqp():
    want = expected_s2({"A"})
    got = read_amqp(S2, len(want), {"x-stream-filter": "A"})
    check("pika: x-stream-filter A gets the A entries only", [b for b, _ in got], want)
    check("pika: the delivered entries keep their x-stream-filter-value", {h for _, h in got}, {"A"})
    want = expected_s2({"A", "B"})
    got = read_amqp(S2, len(want), {"x-stream-filter": ["A", "B"]})
    check("pika: x-stream-filter as an array", [b for b, _ in got], want)
    want = expected_s2({"B"}, unfiltered=True)
    got = read_amqp(S2, len(want), {"x-stream-filter": "B", "x-stream-match-unfiltered": True})
    check("pika: x-stream-match-unfiltered adds the entries without a value", [b for b, _ in got], want)
    # RabbitMQ 3.13 reads a filter that is not a string (nor an array) as no
    # filter, and a match-unfiltered that is not a bool as false.
    want = expected_s2({"A", "B"}, unfiltered=True)
    got = read_amqp(S2, len(want), {"x-stream-filter": 42})
    check("pika: a non-string x-stream-filter is no filter", [b for b, _ in got], want)
    want = expected_s2({"A"})
    got = read_amqp(S2, len(want), {"x-stream-filter": "A", "x-stream-match-unfiltered": "yes"})
    check("pika: a non-bool x-stream-match-unfiltered is false", [b for b, _ in got], want)


async def after_restart():
    want = expected_s1({"A"})
    check("after restart: rstream filter A on S1", await read_stream(S1, len(want), ["A"]), want)
    want = expected_s2({"B"})
    check("after restart: rstream filter B on S2", await read_stream(S2, len(want), ["B"]), want)
    want = expected_s2({"A"})
    got = read_amqp(S2, len(want), {"x-stream-filter": "A"})
    check("after restart: pika filter A on S2", [b for b, _ in got], want)


async def main():
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    if PHASE == "write":
        await write_s1()
        write_s2()
        await cases_stream_protocol()
        await cases_cross_protocol()
        cases_amqp()
    else:
        await after_restart()
    print(f"{len(sp.failed)} failed", flush=True)
    sys.exit(1 if sp.failed else 0)


if __name__ == "__main__":
    asyncio.run(main())
