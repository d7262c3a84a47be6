"""SASL EXTERNAL on the stream protocol's TLS port, with rstream.

  python tls_external.py TLS_PORT CA_FILE CERT_FILE KEY_FILE MANAGEMENT_URL

The broker verifies client certificates and lists EXTERNAL in
`auth_mechanisms`; CERT_FILE's CN names an existing user. Checks, as RabbitMQ
offers EXTERNAL to a stream client (rabbit_auth_mechanism_ssl's
should_offer: a TLS connection with a verified peer certificate): with the
certificate, EXTERNAL is offered and logs in as the CN, which publishes with
a confirm, and the management API lists the connection with that user, its
mechanism and the certificate's subject; without a certificate, EXTERNAL is
not offered (rstream asserts it is before it authenticates).

Prints one line per check, `ok ...` or `FAIL ...`; exits 1 on a failure.
"""

import asyncio
import base64
import json
import ssl
import sys
import time
import urllib.request

from rstream import Producer
from rstream.client import Client
from rstream.constants import SlasMechanism

PORT, CA, CERT, KEY, API = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
STREAM = f"tls-external-{time.time_ns()}"
failures = []


def check(what, ok, detail=""):
    print(("ok " if ok else "FAIL ") + what + (f": {detail}" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def api_get(path):
    req = urllib.request.Request(API + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def context(with_cert):
    ctx = ssl.create_default_context(cafile=CA)
    if with_cert:
        ctx.load_cert_chain(CERT, KEY)
    return ctx


def producer(ctx):
    return Producer("127.0.0.1", port=PORT, ssl_context=ctx, username="", password="",
                    sasl_configuration_mechanism=SlasMechanism.MechanismExternal)


async def main():
    p = producer(context(True))
    await asyncio.wait_for(p.start(), 10)
    await p.create_stream(STREAM, exists_ok=True)
    await asyncio.wait_for(p.send_wait(STREAM, b"by certificate"), 10)
    check("EXTERNAL with a verified certificate logs in and publishes with a confirm", True)
    await p.close()
    # A client that stays on PORT (rstream's producer moves to the leader).
    client = Client("127.0.0.1", PORT, ssl_context=context(True), frame_max=1048576, heartbeat=60,
                    sasl_configuration_mechanism=SlasMechanism.MechanismExternal)
    await client.start()
    await client.authenticate(vhost="/", username="", password="")
    listed = [c for c in api_get("/api/stream/connections") if c.get("port") == PORT]
    seen = [{k: c.get(k) for k in ("user", "auth_mechanism", "peer_cert_subject")} for c in listed]
    check(
        "the connection is listed as the certificate's CN, with EXTERNAL",
        len(listed) == 1 and listed[0].get("auth_mechanism") == "EXTERNAL"
        and "CN=" in (listed[0].get("peer_cert_subject") or "") and listed[0].get("user"),
        json.dumps(seen),
    )
    await client.close()
    try:
        await asyncio.wait_for(producer(context(False)).start(), 10)
        check("without a certificate EXTERNAL is not offered", False, "logged in")
    except AssertionError:
        check("without a certificate EXTERNAL is not offered", True)


asyncio.run(main())
sys.exit(1 if failures else 0)
