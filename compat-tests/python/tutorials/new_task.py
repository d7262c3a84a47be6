#!/usr/bin/env python
# RabbitMQ tutorial 2, "Work Queues" (https://www.rabbitmq.com/tutorials), Python/pika.
# Changed for the tests: the broker port comes from AMQP_PORT.
import os
import sys

import pika

connection = pika.BlockingConnection(
    pika.ConnectionParameters(host="localhost", port=int(os.environ.get("AMQP_PORT", 5672))),
)
channel = connection.channel()

channel.queue_declare(queue="task_queue", durable=True, arguments={"x-queue-type": "quorum"})

message = " ".join(sys.argv[1:]) or "Hello World!"
channel.basic_publish(
    exchange="",
    routing_key="task_queue",
    body=message,
    properties=pika.BasicProperties(
        delivery_mode=pika.DeliveryMode.Persistent,
    ),
)
print(f" [x] Sent {message}")

connection.close()
