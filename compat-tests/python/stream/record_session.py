"""Record real RabbitMQ stream-protocol sessions as fixtures.

Runs a recording TCP proxy on 127.0.0.1:LISTEN in front of a broker's stream
port (127.0.0.1:UPSTREAM), drives sessions through it with the rstream client
(PyPI), and writes each proxied connection's two byte streams, exactly as they
crossed the wire, to OUT/NAME-N.client.bin (client to broker) and
OUT/NAME-N.server.bin (broker to client). The broker must advertise
127.0.0.1:LISTEN in its metadata (scripts/rabbitmq-node.sh
--stream-advertised-port), so that connections rstream opens to the stream's
leader also go through the proxy.

scripts/record-stream-fixtures.sh runs it against a RabbitMQ 3.10 node; the
protocol crate's tests (protocol/tests/stream_fixtures.rs) decode the result.

    python record_session.py --upstream PORT --listen PORT --out DIR
"""

import argparse
import asyncio
import os
import sys

from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    schema,
)
from rstream.client import Client
from rstream.constants import OffsetType as RawOffsetType

STEP_TIMEOUT = 10.0


class Recorder:
    """A TCP proxy that keeps both directions of every connection it relays."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.label = "session"
        self.connections: list[tuple[str, bytearray, bytearray]] = []
        self.pumps: list[asyncio.Task] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        to_server, to_client = bytearray(), bytearray()
        self.connections.append((self.label, to_server, to_client))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, log: bytearray) -> None:
            try:
                while data := await src.read(65536):
                    log += data
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        self.pumps.append(asyncio.ensure_future(pump(reader, up_writer, to_server)))
        self.pumps.append(asyncio.ensure_future(pump(up_reader, writer, to_client)))

    def write(self, out: str) -> None:
        os.makedirs(out, exist_ok=True)
        counts: dict[str, int] = {}
        for label, to_server, to_client in self.connections:
            counts[label] = counts.get(label, 0) + 1
            base = os.path.join(out, f"{label}-{counts[label]}")
            with open(base + ".client.bin", "wb") as f:
                f.write(to_server)
            with open(base + ".server.bin", "wb") as f:
                f.write(to_client)
            print(f"{base}: {len(to_server)} bytes from the client, {len(to_client)} from the server")


async def step(coro):
    return await asyncio.wait_for(coro, STEP_TIMEOUT)


async def raw_session(port: int) -> None:
    """Every command the low-level rstream Client has, on one connection."""
    client = Client("127.0.0.1", port, frame_max=1048576, heartbeat=60, connection_name="fixture-raw")
    await step(client.start())
    await step(client.authenticate(vhost="/", username="guest", password="guest"))
    stream = "fixture-stream"
    await step(client.create_stream(stream, {"max-length-bytes": "10000000", "x-queue-leader-locator": "client-local"}))
    # A second create answers "stream already exists" (5).
    try:
        await step(client.create_stream(stream))
    except Exception as e:  # rstream raises StreamAlreadyExists
        print("second create:", type(e).__name__)
    await step(client.query_leader_and_replicas(stream))
    await step(client.sync_request(
        schema.Metadata(client._corr_id_seq.next(), streams=[stream, "no-such-stream"]),
        resp_schema=schema.MetadataResponse, raise_exception=False))
    # A publisher on a missing stream: "stream does not exist" (2).
    try:
        await step(client.declare_publisher("no-such-stream", "ref", 7))
    except Exception as e:
        print("publisher on missing stream:", type(e).__name__)
    await step(client.declare_publisher(stream, "fixture-producer", 1))

    confirmed: list[int] = []
    errored: list[tuple[int, int]] = []
    got_confirms = asyncio.Event()
    got_error = asyncio.Event()

    def on_confirm(frame: schema.PublishConfirm) -> None:
        confirmed.extend(frame.publishing_ids)
        if len(confirmed) >= 5:
            got_confirms.set()

    def on_error(frame: schema.PublishError) -> None:
        errored.extend((e.publishing_id, e.response_code) for e in frame.errors)
        got_error.set()

    client.add_handler(schema.PublishConfirm, on_confirm, name="confirm")
    client.add_handler(schema.PublishError, on_error, name="error")
    await client.publish([schema.Message(publishing_id=i, filter_value=None, data=f"hello {i}".encode())
                          for i in range(1, 4)], publisher_id=1)
    await client.publish([schema.Message(publishing_id=i, filter_value=None, data=b"x" * (10 * i))
                          for i in range(4, 6)], publisher_id=1)
    await step(got_confirms.wait())
    # Publishing with an undeclared publisher id: publish error "publisher does not exist" (18).
    await client.publish([schema.Message(publishing_id=99, filter_value=None, data=b"lost")], publisher_id=42)
    await step(got_error.wait())
    print("confirmed", confirmed, "errored", errored)

    seq = await step(client.query_publisher_sequence(stream, "fixture-producer"))
    print("publisher sequence", seq)

    delivered = asyncio.Event()
    chunks: list[schema.Deliver] = []

    def on_deliver(frame: schema.Deliver) -> None:
        chunks.append(frame)
        if sum(c.num_entries for c in chunks) >= 5:
            delivered.set()

    client.add_handler(schema.Deliver, on_deliver, name="0")
    await client.run_queue_listener_task(subscriber_id=0, handler=on_deliver)
    await step(client.subscribe(stream, 0, schema.OffsetSpec.from_params(RawOffsetType.FIRST, None), initial_credit=10,
                                properties={"name": "fixture-consumer"}))
    await step(delivered.wait())
    await client.credit(0, 1)
    # Credit to an unknown subscription: a credit response "subscription id does not exist" (4).
    await client.credit(9, 1)
    # Other offset specifications, each subscribed and unsubscribed.
    for sub_id, spec in ((1, schema.OffsetSpec.from_params(RawOffsetType.LAST, None)),
                         (2, schema.OffsetSpec.from_params(RawOffsetType.NEXT, None)),
                         (3, schema.OffsetSpec.from_params(RawOffsetType.OFFSET, 2)),
                         (4, schema.OffsetSpec.from_params(RawOffsetType.TIMESTAMP, 1_600_000_000_000))):
        await step(client.subscribe(stream, sub_id, spec, initial_credit=1))
        await step(client.unsubscribe(sub_id))
    try:
        await step(client.query_offset(stream, "fixture-consumer"))
    except Exception as e:  # no offset stored yet: "no offset" (19)
        print("query offset before store:", type(e).__name__)
    await client.store_offset(stream, "fixture-consumer", 3)
    await asyncio.sleep(0.5)
    print("stored offset", await step(client.query_offset(stream, "fixture-consumer")))
    await client.send_frame(schema.Heartbeat())
    await step(client.unsubscribe(0))
    # A subscription that is still open when its stream is deleted gets a
    # metadata update (stream not available, 6).
    await step(client.subscribe(stream, 5, schema.OffsetSpec.from_params(RawOffsetType.NEXT, None), initial_credit=1))
    await step(client.delete_publisher(1))
    await step(client.delete_stream(stream))
    await asyncio.sleep(0.5)
    try:
        await step(client.delete_stream(stream))
    except Exception as e:
        print("second delete:", type(e).__name__)
    # rstream's Client.close() stops its heartbeat task before it checks that the
    # client is started, so it never sends close: send it here.
    await step(client.sync_request(schema.Close(client._corr_id_seq.next(), code=1, reason="OK"),
                                   resp_schema=schema.CloseResponse))
    await step(client.close())


async def super_stream_session(port: int) -> None:
    """Route and partitions, last: RabbitMQ 3.10 answers them with the request's
    key (no response bit), which rstream cannot read (its reader stops)."""
    client = Client("127.0.0.1", port, frame_max=1048576, heartbeat=60, connection_name="fixture-super")
    await step(client.start())
    await step(client.authenticate(vhost="/", username="guest", password="guest"))
    for name, call in (("route", client.route("rk", "no-such-super-stream")),
                       ("partitions", client.partitions("no-such-super-stream"))):
        try:
            print(name, await asyncio.wait_for(call, 2))
        except Exception as e:
            print(name, "answer not understood by rstream:", type(e).__name__, e)
    await client.stop_task("listener")
    await client.stop_task("heartbeat_sender")
    if client._conn is not None:
        await client._conn.close()


async def bad_input_session(port: int, frame: bytes) -> None:
    """After a good handshake, one frame RabbitMQ must refuse; keep its answer."""
    client = Client("127.0.0.1", port, frame_max=1048576, heartbeat=60, connection_name="fixture-bad")
    await step(client.start())
    await step(client.authenticate(vhost="/", username="guest", password="guest"))
    assert client._conn is not None
    try:
        await client._conn._write_frame_raw(frame)
    except ConnectionError:
        pass
    await asyncio.sleep(1.5)
    await client.stop_task("listener")
    await client.stop_task("heartbeat_sender")
    try:
        await client._conn.close()
    except ConnectionError:
        pass


async def producer_consumer_session(port: int) -> None:
    """rstream's high-level Producer and Consumer: confirms, a sub-entry batch, from first."""
    stream = "fixture-pc"
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as producer:
        await step(producer.create_stream(stream, exists_ok=True))
        confirms: list[int] = []

        async def on_confirm(status) -> None:
            if status.is_confirmed:
                confirms.append(status.message_id)

        for i in range(3):
            await step(producer.send_wait(stream, AMQPMessage(body=f"amqp {i}".encode())))
        await step(producer.send_sub_entry(stream, [AMQPMessage(body=f"sub {i}".encode()) for i in range(4)],
                                           on_publish_confirm=on_confirm))
        for _ in range(100):
            if confirms:
                break
            await asyncio.sleep(0.05)

    received: list[bytes] = []
    done = asyncio.Event()
    consumer = Consumer("127.0.0.1", port=port, username="guest", password="guest")

    async def on_message(msg, ctx: MessageContext) -> None:
        received.append(bytes(msg))
        if len(received) >= 7:
            done.set()

    await step(consumer.start())
    await step(consumer.subscribe(stream, on_message,
                                  offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None)))
    await step(done.wait())
    await step(consumer.delete_stream(stream))
    await step(consumer.close())
    print("received", len(received), "messages")


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", type=int, required=True)
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rec = Recorder(args.upstream)
    server = await asyncio.start_server(rec.handle, "127.0.0.1", args.listen)
    async with server:
        try:
            rec.label = "raw"
            await raw_session(args.listen)
            rec.label = "producer-consumer"
            await producer_consumer_session(args.listen)
            # An unknown command key (0x0063), then a frame over the negotiated
            # frame_max (only its size is sent: RabbitMQ judges by the size).
            rec.label = "unknown-command"
            await bad_input_session(args.listen, bytes.fromhex("00000008" "0063" "0001" "00000001"))
            rec.label = "frame-too-large"
            await bad_input_session(args.listen, (2 * 1048576).to_bytes(4, "big") + bytes.fromhex("000d0001"))
            rec.label = "super-stream"
            await super_stream_session(args.listen)
            await asyncio.sleep(0.5)
        finally:
            for task in rec.pumps:
                task.cancel()
            rec.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
