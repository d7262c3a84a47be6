"""Stream protocol load with rstream, for compare.sh's ST1 rows (one phase per run).

  python streams.py publish --port PORT --pids PID[+PID...] --stream S --count N --size B
                            [--batch K] [--window W] [--timeout T]
      create stream S (if missing) and publish N messages of B bytes from one
      producer with confirms: rstream's send_batch, K messages (default 100) per
      publish frame, at most W (default 10000) unconfirmed; these are
      RabbitMQ's stream-perf-test defaults. (rstream's send() is not used: it
      buffers messages and flushes them every 0.5 s, so a short run would
      measure its timer.)
  python streams.py read --port PORT --pids PID[+PID...] --stream S --count N --consumers C [--timeout T]
      C consumers, each on its own connection, subscribe to S at `first` and
      each reads N messages
  Either takes --tls CA_FILE: over TLS (--port the stream TLS port), trusting
  CA_FILE (rstream with an ssl.SSLContext).

Each prints one JSON line with the field names of `stablemq perf --json`
(settings, published, confirmed, consumed, their rates, errors, timed_out)
plus broker_cpu_s: the CPU time (utime+stime, /proc/PID/stat) of the broker's
process trees (every PID and its descendants, e.g. RabbitMQ's start script and
its beam.smp) from just before the first publish or subscribe to the last
confirm or delivery; connection set-up and Python's start are outside it, as
they are outside the rate. A read's rate counts every consumer's messages.
Exit status 1 if the phase did not complete within --timeout (default 300 s).
"""

import argparse
import asyncio
import json
import os
import sys
import time

from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import CLK_TCK, process_tree, _stat  # noqa: E402  (bench.py: standard library only)

LOGIN = dict(username="guest", password="guest")


def tls(a):
    """The TLS context of --tls CA_FILE, or None (plain TCP)."""
    if not a.tls:
        return None
    import ssl
    return ssl.create_default_context(cafile=a.tls)


def tree_cpu_s(roots):
    """CPU seconds of the roots' process trees so far."""
    ticks = 0
    for p in process_tree(roots):
        st = _stat(p)
        if st:
            ticks += st[1]
    return ticks / CLK_TCK


def report(a, producers, consumers, published, confirmed, consumed, elapsed, cpu_s, errors, timed_out, nacked=0,
           client_s=0.0):
    rate = lambda n: n / elapsed if elapsed > 0 else 0.0  # noqa: E731
    return {
        "settings": {"client": "rstream", "protocol": "stream", "producers": producers, "consumers": consumers,
                     "body_size": getattr(a, "size", None), "stream": a.stream, "count": a.count,
                     "confirm_window": getattr(a, "window", 0) if producers else 0,
                     "batch": getattr(a, "batch", None), "offset": "first" if consumers else None},
        "elapsed_s": elapsed, "timed_out": timed_out, "errors": errors,
        "published": published, "confirmed": confirmed, "nacked": nacked, "consumed": consumed,
        "publish_rate": rate(published), "confirm_rate": rate(confirmed), "consume_rate": rate(consumed),
        "confirm_latency_us": None, "e2e_latency_us": None, "broker_cpu_s": cpu_s,
        # This program's own CPU over the same span, in cores.
        "client_cores": client_s / elapsed if elapsed > 0 else None,
    }


async def publish(a, roots):
    confirmed = nacked = 0
    errors = []
    progress = asyncio.Event()

    def on_confirm(status):
        nonlocal confirmed, nacked
        if status.is_confirmed:
            confirmed += 1
        else:
            nacked += 1
            if len(errors) < 5:
                errors.append(f"publish not confirmed: {status}")
        progress.set()

    async def until(cond, deadline):
        """Wait for confirms until cond() holds; False if the deadline passed first."""
        while not cond():
            progress.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(progress.wait(), left)
            except asyncio.TimeoutError:
                return cond()
        return True

    body = b"x" * a.size
    timed_out = False
    async with Producer("127.0.0.1", port=a.port, ssl_context=tls(a), **LOGIN) as p:
        await p.create_stream(a.stream, exists_ok=True)
        c0, t0, own0 = tree_cpu_s(roots), time.monotonic(), time.process_time()
        deadline = t0 + a.timeout
        sent = 0
        while sent < a.count and not timed_out:
            k = min(a.batch, a.count - sent)
            # At most --window unconfirmed, this batch included.
            if not await until(lambda: sent + k - confirmed - nacked <= max(a.window, k), deadline):
                timed_out = True
                break
            await p.send_batch(a.stream, [body] * k, on_publish_confirm=on_confirm)
            sent += k
        if not timed_out and not await until(lambda: confirmed + nacked >= sent, deadline):
            timed_out = True
        if timed_out:
            errors.append(f"{confirmed} of {a.count} confirmed within {a.timeout:g} s")
        elapsed, cpu, own = time.monotonic() - t0, tree_cpu_s(roots) - c0, time.process_time() - own0
    return report(a, 1, 0, sent, confirmed, 0, elapsed, cpu, errors, timed_out, nacked, own)


async def read(a, roots):
    got = 0
    want = a.count * a.consumers
    done = asyncio.Event()

    async def on_message(_msg, _ctx):
        nonlocal got
        got += 1
        if got >= want:
            done.set()

    consumers = [Consumer("127.0.0.1", port=a.port, ssl_context=tls(a), **LOGIN) for _ in range(a.consumers)]
    for c in consumers:
        await c.start()
    errors, timed_out = [], False
    c0, t0, own0 = tree_cpu_s(roots), time.monotonic(), time.process_time()
    for c in consumers:
        await c.subscribe(a.stream, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    try:
        await asyncio.wait_for(done.wait(), a.timeout)
    except asyncio.TimeoutError:
        timed_out = True
        errors.append(f"{got} of {want} messages read within {a.timeout:g} s")
    elapsed, cpu, own = time.monotonic() - t0, tree_cpu_s(roots) - c0, time.process_time() - own0
    # All at once and bounded: rstream's close takes about 0.6 s per consumer.
    try:
        await asyncio.wait_for(asyncio.gather(*(c.close() for c in consumers), return_exceptions=True), 30)
    except asyncio.TimeoutError:
        pass
    return report(a, 0, a.consumers, 0, 0, got, elapsed, cpu, errors, timed_out, 0, own)


def main(argv):
    ap = argparse.ArgumentParser(prog="streams.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("publish", "read"):
        p = sub.add_parser(name)
        p.add_argument("--port", type=int, required=True, help="the broker's stream protocol port")
        p.add_argument("--pids", required=True, help="the broker's process tree roots, PID[+PID...]")
        p.add_argument("--stream", required=True)
        p.add_argument("--count", type=int, required=True, help="messages to publish, or to read per consumer")
        p.add_argument("--timeout", type=float, default=300)
        p.add_argument("--tls", metavar="CA_FILE", help="connect over TLS (--port is then the TLS port), trusting CA_FILE")
        if name == "publish":
            p.add_argument("--size", type=int, required=True)
            p.add_argument("--batch", type=int, default=100, help="messages per publish frame")
            p.add_argument("--window", type=int, default=10000, help="most unconfirmed messages")
        else:
            p.add_argument("--consumers", type=int, default=1)
    a = ap.parse_args(argv)
    roots = [int(x) for x in a.pids.split("+")]
    run = publish if a.cmd == "publish" else read
    # Bounded as a whole too: set-up, the phase and the close.
    rep = asyncio.run(asyncio.wait_for(run(a, roots), a.timeout + 60))
    print(json.dumps(rep))
    return 1 if rep["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
