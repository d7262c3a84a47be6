"""A resource alarm and the stream protocol, with rstream.

  python alarm.py STREAM_PORT MANAGEMENT_URL "ALARM_ON_COMMAND" "ALARM_OFF_COMMAND"

As RabbitMQ's stream reader does during a (disk) alarm: a connection with a
publisher is no longer read, so its publishes wait unconfirmed (RabbitMQ
still handles the one read that arrives after the alarm, so the first batch
may be confirmed; a later one is not); a new publisher is refused with
precondition failed (0x06); once the alarm clears, the waiting publishes are
stored and confirmed, and nothing is lost or duplicated. The alarm is taken
as raised once GET MANAGEMENT_URL/api/health/checks/alarms answers 503. The commands raise and clear the alarm (for StableMQ,
`stablemq ctl set_vm_memory_high_watermark`; for RabbitMQ 3.10, which blocks
stream publishers on disk alarms only, `rabbitmqctl set_disk_free_limit`).

Prints one line per check, `ok ...` or `FAIL ...`; exits 1 on a failure.
"""

import asyncio
import base64
import subprocess
import sys
import time
import urllib.error
import urllib.request

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer
from rstream.exceptions import PreconditionFailed, PublisherDoesNotExist

PORT, API, ALARM_ON, ALARM_OFF = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
STREAM = "alarmed-stream"
LOGIN = dict(username="guest", password="guest")
failures = []


def check(what, ok, detail=""):
    print(("ok " if ok else "FAIL ") + what + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


async def wait_for(pred, seconds):
    deadline = time.monotonic() + seconds
    while not pred() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return pred()


def alarm_status():
    req = urllib.request.Request(f"{API}/api/health/checks/alarms")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def read_all(expected):
    got = []
    consumer = Consumer("127.0.0.1", port=PORT, **LOGIN)
    await consumer.start()

    async def on_message(body, ctx):
        got.append(bytes(body))

    await consumer.subscribe(
        STREAM, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)
    )
    await wait_for(lambda: len(got) >= expected, 10)
    await asyncio.sleep(0.5)  # anything beyond what is expected would show now
    await consumer.close()
    return got


async def main():
    producer = Producer("127.0.0.1", port=PORT, **LOGIN)
    await producer.start()
    await producer.create_stream(STREAM)
    for i in range(5):
        await producer.send_wait(STREAM, f"before-{i}".encode())
    subprocess.run(ALARM_ON, shell=True, check=True)
    raised = await wait_for(lambda: alarm_status() == 503, 30)
    check("the alarm is raised", raised)

    first, second = [], []
    for i in range(5):
        await producer.send(
            STREAM, f"during-{i}".encode(), on_publish_confirm=lambda s: first.append(s)
        )
    await asyncio.sleep(2)
    for i in range(5, 10):
        await producer.send(
            STREAM, f"during-{i}".encode(), on_publish_confirm=lambda s: second.append(s)
        )
    await asyncio.sleep(3)
    check("a publishing connection is blocked while the alarm lasts",
          not second, f"{len(first)} + {len(second)} confirmed")

    newcomer = Producer("127.0.0.1", port=PORT, **LOGIN)
    await newcomer.start()
    try:
        await asyncio.wait_for(newcomer.send_wait(STREAM, b"newcomer"), 10)
        check("a new publisher is refused during the alarm", False, "it published")
    # rstream raises PreconditionFailed, or, when its clean-up after the
    # refused declare asks to delete the publisher, the server's answer to
    # that: publisher does not exist.
    except (PreconditionFailed, PublisherDoesNotExist) as e:
        check("a new publisher is refused during the alarm", True, type(e).__name__)
    except Exception as e:  # noqa: BLE001  (any other answer is the failure)
        check("a new publisher is refused during the alarm", False, f"{type(e).__name__}: {e}")
    await newcomer.close()

    subprocess.run(ALARM_OFF, shell=True, check=True)
    done = await wait_for(lambda: len(first) + len(second) == 10, 15)
    check("the blocked publishes are confirmed once it clears", done,
          f"{len(first) + len(second)} of 10")
    await producer.send_wait(STREAM, b"after")
    got = await read_all(16)
    want = [f"before-{i}".encode() for i in range(5)] + [
        f"during-{i}".encode() for i in range(10)] + [b"after"]
    check("every entry is stored once, in order", got == want, f"{got}")
    await producer.delete_stream(STREAM)
    await producer.close()


asyncio.run(asyncio.wait_for(main(), 120))
sys.exit(1 if failures else 0)
