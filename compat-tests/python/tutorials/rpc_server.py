#!/usr/bin/env python
# RabbitMQ tutorial 6, "RPC" (https://www.rabbitmq.com/tutorials), Python/pika.
# Changed for the tests: the broker port comes from AMQP_PORT, and the consumer
# stops after TUTORIAL_TIMEOUT_S seconds so the script always exits.
import os

import pika

connection = pika.BlockingConnection(
    pika.ConnectionParameters(host="localhost", port=int(os.environ.get("AMQP_PORT", 5672))),
)
channel = connection.channel()

channel.queue_declare(queue="rpc_queue", durable=True, arguments={"x-queue-type": "quorum"})


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def on_request(ch, method, props, body):
    n = int(body)

    print(f" [.] fib({n})")
    response = fib(n)

    ch.basic_publish(
        exchange="",
        routing_key=props.reply_to,
        properties=pika.BasicProperties(correlation_id=props.correlation_id),
        body=str(response),
    )
    ch.basic_ack(delivery_tag=method.delivery_tag)


channel.basic_qos(prefetch_count=1)
channel.basic_consume(queue="rpc_queue", on_message_callback=on_request)

print(" [x] Awaiting RPC requests")
connection.call_later(float(os.environ.get("TUTORIAL_TIMEOUT_S", 120)), channel.stop_consuming)
channel.start_consuming()
