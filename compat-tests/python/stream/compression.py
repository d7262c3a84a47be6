"""Sub-entry batches with every compression code of the stream protocol:
none, gzip, snappy, lz4 and zstd, published with rstream's `send_sub_entry`
(rstream itself has none and gzip; the other three are registered here with
cramjam, in the framed formats the Java and Go stream clients write: the
Snappy framing format, the LZ4 frame format, a zstd frame), then read back
from `first` by an rstream consumer and by pika over AMQP 0-9-1.

RabbitMQ stores a batch as it came and its consumers uncompress it;
StableMQ uncompresses it at publish and stores each record. Either way a
consumer must get every record, in order, one offset each; run with
`--rabbitmq` against a node of `scripts/rabbitmq-node.sh start --stream`,
the stream protocol's cases pass against RabbitMQ 3.10.8 too. Two differ:
RabbitMQ 3.10's AMQP 0-9-1 consumer cannot read a compressed batch (it
closes the connection with 541 when it reaches one; StableMQ's reads the
records), and a batch whose body is not what its header says (zstd
labelled as lz4, or a wrong declared size) is a publish error from
StableMQ (0x0f), where RabbitMQ stores it unread (it cannot know).

Usage: python compression.py STREAM_PORT AMQP_PORT [--rabbitmq]
Prints `ok NAME` or `FAIL NAME: ...` per check; exits 1 if any failed.
"""

import asyncio
import os
import sys
from dataclasses import dataclass

import cramjam
import pika
from rstream import AMQPMessage, ConsumerOffsetSpecification, OffsetType, Producer, amqp_decoder
from rstream.compression import CompressionType, ICompressionCodec, StreamCompressionCodecs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_protocol as sp  # noqa: E402  (argv, check, consume, pika helpers)

check, failed = sp.check, sp.failed
FIRST = ConsumerOffsetSpecification(OffsetType.FIRST)


@dataclass
class CramjamCodec(ICompressionCodec):
    """A sub-entry codec: the records, each a 32-bit size and its bytes,
    compressed with `module` (a cramjam codec module)."""

    code: int = 0
    module: object = None
    uncompressed_data_size: int = 0
    compressed_data_size: int = 0
    message_count: int = 0
    buffer: bytes = b""

    def compress(self, messages):
        plain = b"".join(len(bytes(m)).to_bytes(4, "big") + bytes(m) for m in messages)
        self.message_count = len(messages)
        self.uncompressed_data_size = len(plain)
        self.buffer = bytes(self.module.compress(plain))
        self.compressed_data_size = len(self.buffer)

    def uncompress(self, compressed_data, uncompressed_data_size):
        out = bytes(self.module.decompress(compressed_data))
        if len(out) != uncompressed_data_size:
            raise ValueError("uncompressed size")
        return out

    def compressed_size(self):
        return self.compressed_data_size

    def uncompressed_size(self):
        return self.uncompressed_data_size

    def messages_count(self):
        return self.message_count

    def data(self):
        return self.buffer

    def compression_type(self):
        return self.code


CODECS = {
    CompressionType.Snappy: cramjam.snappy,
    CompressionType.Lz4: cramjam.lz4,
    CompressionType.Zstd: cramjam.zstd,
}
for kind, module in CODECS.items():
    StreamCompressionCodecs.register_codec(kind, CramjamCodec(code=kind.value, module=module))


async def send_batch(producer, stream, records, kind):
    """One sub-entry batch; the confirm statuses that came within WAIT."""
    statuses = []
    await sp.step(producer.send_sub_entry(
        stream, records, compression_type=kind,
        on_publish_confirm=lambda s: statuses.append((s.is_confirmed, s.response_code))))
    for _ in range(100):
        if statuses:
            break
        await asyncio.sleep(0.1)
    return statuses


async def case_codec(producer, kind):
    stream = sp.name(f"codec-{kind.name.lower()}")
    await sp.step(producer.create_stream(stream))
    # Two batches and a plain message between them: offsets run on across.
    # AMQP 1.0 messages, as clients send them (RabbitMQ's AMQP 0-9-1 reader
    # takes every record for one).
    first = [b"%s-a%d" % (kind.name.encode(), i) for i in range(5)]
    second = [bytes([i]) * 2000 for i in range(3)]
    a = await send_batch(producer, stream, [AMQPMessage(body=b) for b in first], kind)
    await sp.step(producer.send_wait(stream, AMQPMessage(body=b"plain")))
    b = await send_batch(producer, stream, [AMQPMessage(body=b) for b in second], kind)
    check(f"{kind.name}: both batches confirmed", (a, b), ([(True, 0)], [(True, 0)]))
    want = first + [b"plain"] + second
    got = await sp.consume(stream, FIRST, len(want), decoder=amqp_decoder)
    check(f"{kind.name}: every record read back, one offset each",
          [(o, bytes(m.body)) for o, m in got], list(enumerate(want)))
    got = await sp.consume(stream, ConsumerOffsetSpecification(OffsetType.OFFSET, 6), 3, decoder=amqp_decoder)
    check(f"{kind.name}: from offset 6, the second batch",
          [(o, bytes(m.body)) for o, m in got], list(enumerate(second, 6)))
    try:
        read = [body for body, _ in sp.pika_read(stream, len(want))]
    except pika.exceptions.AMQPError as e:
        closed = e if isinstance(e, pika.exceptions.ConnectionClosedByBroker) else e.__context__
        read = ("closed", getattr(closed, "reply_code", repr(e)))
    if sp.RABBITMQ and kind != CompressionType.No:
        # RabbitMQ 3.10's AMQP 0-9-1 reader cannot read a compressed batch:
        # it closes the connection (541) when it reaches one.
        check(f"{kind.name}: over AMQP 0-9-1, RabbitMQ 3.10 closes the connection", read, ("closed", 541))
    else:
        check(f"{kind.name}: the same over AMQP 0-9-1", read, want)


async def case_mislabelled(producer):
    """Raw frames: a zstd body labelled lz4, and one that declares a size it
    does not have, beside a good batch in the same frame."""
    stream = sp.name("codec-bad")
    await sp.step(producer.create_stream(stream))
    plain = b"".join(len(r).to_bytes(4, "big") + r for r in (b"x", b"yy"))
    zstd = bytes(cramjam.zstd.compress(plain))

    def sub_entry(publishing_id, code, size, body):
        return (publishing_id.to_bytes(8, "big") + bytes([0x80 | code << 4]) + (2).to_bytes(2, "big")
                + size.to_bytes(4, "big") + len(body).to_bytes(4, "big") + body)

    sock = sp.handshake()
    try:
        body = (1).to_bytes(4, "big") + bytes([7]) + sp.s16("") + sp.s16(stream)
        sock.sendall(sp.frame(0x0001, body))
        check("bad batches: publisher declared", sp.response(sp.recv_frame(sock))[3], 1)
        entries = [sub_entry(1, 3, len(plain), zstd), sub_entry(2, 4, len(plain) + 5, zstd),
                   sub_entry(3, 4, len(plain), zstd)]
        sock.sendall(sp.frame(0x0002, bytes([7]) + len(entries).to_bytes(4, "big") + b"".join(entries)))
        confirmed, errors = [], []
        for payload in sp.frames_for(sock, 3):
            if not isinstance(payload, bytes):
                break
            key = int.from_bytes(payload[:2], "big")
            if key == 0x0003:  # publish confirm: publisher id, [publishing id]
                n = int.from_bytes(payload[5:9], "big")
                confirmed += [int.from_bytes(payload[9 + 8 * i:17 + 8 * i], "big") for i in range(n)]
            elif key == 0x0004:  # publish error: publisher id, [(publishing id, code)]
                n = int.from_bytes(payload[5:9], "big")
                errors += [(int.from_bytes(payload[9 + 10 * i:17 + 10 * i], "big"),
                            int.from_bytes(payload[17 + 10 * i:19 + 10 * i], "big")) for i in range(n)]
            if len(confirmed) + len(errors) >= 3:
                break
    finally:
        sock.close()
    if sp.RABBITMQ:
        check("bad batches: RabbitMQ stores all three unread", (sorted(confirmed), errors), ([1, 2, 3], []))
    else:
        check("bad batches: the two bad ones are publish errors 0x0f, the good one confirmed",
              (confirmed, sorted(errors)), ([3], [(1, 0x0F), (2, 0x0F)]))
        got = await sp.consume(stream, FIRST, 2)
        check("bad batches: only the good batch's records are stored", sp.bodies(got), [(0, b"x"), (1, b"yy")])


async def main():
    producer = Producer(sp.HOST, port=sp.STREAM_PORT, **sp.LOGIN)
    await sp.step(producer.start())
    try:
        for kind in (CompressionType.No, CompressionType.Gzip, *CODECS):
            await case_codec(producer, kind)
        await case_mislabelled(producer)
    finally:
        for stream in sp.created:
            try:
                await sp.step(producer.delete_stream(stream, missing_ok=True))
            except Exception as e:
                print(f"cleanup: deleting {stream}: {type(e).__name__} {e}", flush=True)
        await sp.step(producer.close())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
