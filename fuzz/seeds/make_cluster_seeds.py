"""Writes the seed corpora of the cluster targets (wire, segment_log): one
frame of each message kind in the node-to-node format
(cluster/src/wire/mod.rs), and segment files in the event log's format
(cluster/src/store/segment_record.rs), written here from those documents
byte for byte. Run once (plain python3); the output is committed under
fuzz/corpus/. Not run by the test command.
"""

import os
import struct
import sys
import zlib

OUT = sys.argv[1]
WIRE_VERSION = 6


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(tag, fields, to_service=0):
    # from: node 1, broker; to: node 2, store (or both: 2).
    body = struct.pack(">BQBQBB", WIRE_VERSION, 1, 1, 2, to_service, tag) + fields
    return struct.pack(">I", len(body)) + body


def pos(epoch, index):
    return struct.pack(">QQ", epoch, index)


def entries(*payloads, epoch=3, first=7):
    out = struct.pack(">I", len(payloads))
    for i, p in enumerate(payloads):
        out += pos(epoch, first + i) + struct.pack(">I", len(p)) + p
    return out


def blob(b):
    return struct.pack(">I", len(b)) + b


u64 = lambda v: struct.pack(">Q", v)
msgs = {
    "append": frame(1, u64(3) + pos(3, 6) + u64(5) + u64(1) + entries(b"event-a", b"", b"event-c")),
    "append-both": frame(1, u64(3) + pos(3, 6) + u64(5) + u64(1) + entries(b"x"), to_service=2),
    "append-ack": frame(2, u64(3) + u64(99) + pos(3, 9)),
    "reject-fenced": frame(3, u64(3) + b"\x00"),
    "reject-mismatch": frame(3, u64(3) + b"\x01" + pos(2, 4) + u64(4) + u64(99)),
    "fence": frame(4, u64(4) + u64(12345)),
    "promise": frame(5, u64(4) + pos(3, 9) + u64(8)),
    "fence-refused": frame(6, u64(5)),
    "fetch": frame(7, u64(4) + u64(1) + u64(9)),
    "entries": frame(8, u64(4) + entries(b"e1", b"e2")),
    "catch-up": frame(9, u64(4) + u64(1) + u64(9)),
    "stable-entries": frame(10, u64(4) + entries(b"s1")),
    "snapshot-chunk": frame(11, pos(3, 9) + b"\x01" + blob(b"k0") + b"\x00" + struct.pack(">I", 2) + blob(b"k1") + blob(b"v1") + blob(b"k2") + blob(b"")),
    "snapshot-request": frame(12, pos(3, 9) + b"\x00"),
    "pre-vote": frame(13, u64(5)),
    "pre-vote-reply": frame(14, u64(5) + b"\x01" + u64(4)),
    "join-probe": frame(15, u64(77)),
    "join-info": frame(16, u64(4) + pos(3, 9) + u64(8)),
}
# wire: 1 octet (split point, frame cap), then frames.
for name, f in msgs.items():
    write("wire", name, b"\x06" + f)
write("wire", "stream", b"\x10" + b"".join(msgs.values()))

# segment_log: flags (bit 0: fix CRCs, bit 1: two segments, bits 2-7: start
# index), split/16, then the records after each segment's header.
def record(nonce, kind, count, index, body=b""):
    rest = struct.pack("<B3xIQQ", kind, count, index, nonce) + body
    crc = zlib.crc32(struct.pack("<Q", nonce) + rest)
    return struct.pack("<II", len(body), crc) + rest


def run(epoch, *payloads):
    return b"".join(struct.pack("<QI", epoch, len(p)) + p for p in payloads)


N1, N2 = 0x5EED0001, 0x5EED0002
one = (record(N1, 1, 3, 1, run(1, b"a", b"bb", b"")) + record(N1, 2, 0, 2)
       + record(N1, 1, 1, 4, run(2, b"dddd")) + record(N1, 3, 0, 3)
       + record(N1, 1, 2, 4, run(3, b"e", b"f")))
write("segment_log", "one-segment", bytes([0, 0]) + one)
write("segment_log", "torn-tail", bytes([0, 0]) + one + record(N1, 1, 1, 6, run(3, b"torn"))[:-2])
write("segment_log", "zero-tail", bytes([0, 0]) + one + b"\x00" * 64)
write("segment_log", "repaired", bytes([1, 0]) + one)
start = 4  # start index 4: flags bits 2-7
seg1 = record(N1, 1, 2, 5, run(1, b"x", b"y"))
seg1 += b"\x00" * (-len(seg1) % 16)  # zeros end a segment's records
seg2 = record(N2, 1, 1, 7, run(1, b"z")) + record(N2, 2, 0, 7)
write("segment_log", "two-segments", bytes([(start << 2) | 2, len(seg1) // 16]) + seg1 + seg2)
