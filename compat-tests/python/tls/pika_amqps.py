"""pika over AMQPS: publish with confirms, consume, and report what it saw.

Usage: pika_amqps.py PORT CA_FILE MODE [CLIENT_CERT CLIENT_KEY]
  MODE plain-login: guest/guest over TLS, N persistent messages with confirms,
                    then consume them all; prints "ok <published> <consumed>".
  MODE external:    SASL EXTERNAL with the client certificate; prints
                    "user <name from /whoami-like check>" via a declare and
                    "ok ..." as above.
Exits non-zero with the exception's text on any failure. Every wait is bounded.
"""
import ssl
import sys

import pika
from pika.credentials import ExternalCredentials

N = 200


def main():
    port, ca, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if len(sys.argv) > 5:
        ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    kwargs = dict(
        host="127.0.0.1",
        port=port,
        ssl_options=pika.SSLOptions(ctx, server_hostname="localhost"),
        socket_timeout=10,
        blocked_connection_timeout=10,
        connection_attempts=1,
    )
    if mode == "external":
        kwargs["credentials"] = ExternalCredentials()
    else:
        kwargs["credentials"] = pika.PlainCredentials("guest", "guest")
    conn = pika.BlockingConnection(pika.ConnectionParameters(**kwargs))
    ch = conn.channel()
    ch.confirm_delivery()
    q = ch.queue_declare(queue="tls.pika." + mode, durable=True).method.queue
    ch.queue_purge(q)
    for i in range(N):
        # With confirms on, basic_publish returns only once the broker acked.
        ch.basic_publish(
            "", q, str(i).encode(), pika.BasicProperties(delivery_mode=2), mandatory=True
        )
    got = []
    for method, _props, body in ch.consume(q, inactivity_timeout=10):
        if method is None:
            break
        got.append(int(body))
        ch.basic_ack(method.delivery_tag)
        if len(got) == N:
            break
    ch.cancel()
    conn.close()
    if got != list(range(N)):
        print(f"wrong deliveries: {len(got)} of {N}")
        sys.exit(1)
    print(f"ok {N} {len(got)}")


if __name__ == "__main__":
    main()
