#!/usr/bin/env python
# RabbitMQ tutorial 1, "Hello World!" (https://www.rabbitmq.com/tutorials), Python/pika.
# Changed for the tests: the broker port comes from AMQP_PORT.
import os

import pika

connection = pika.BlockingConnection(
    pika.ConnectionParameters(host="localhost", port=int(os.environ.get("AMQP_PORT", 5672))),
)
channel = connection.channel()

channel.queue_declare(queue="hello", durable=True, arguments={"x-queue-type": "quorum"})

channel.basic_publish(exchange="", routing_key="hello", body="Hello World!")
print(" [x] Sent 'Hello World!'")

connection.close()
