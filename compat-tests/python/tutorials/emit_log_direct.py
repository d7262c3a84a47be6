#!/usr/bin/env python
# RabbitMQ tutorial 4, "Routing" (https://www.rabbitmq.com/tutorials), Python/pika.
# Changed for the tests: the broker port comes from AMQP_PORT.
import os
import sys

import pika

connection = pika.BlockingConnection(
    pika.ConnectionParameters(host="localhost", port=int(os.environ.get("AMQP_PORT", 5672))),
)
channel = connection.channel()

channel.exchange_declare(exchange="direct_logs", exchange_type="direct")

severity = sys.argv[1] if len(sys.argv) > 2 else "info"
message = " ".join(sys.argv[2:]) or "Hello World!"
channel.basic_publish(
    exchange="direct_logs",
    routing_key=severity,
    body=message,
)
print(f" [x] Sent {severity}:{message}")

connection.close()
