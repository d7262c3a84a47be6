#!/usr/bin/env python
# RabbitMQ tutorial 2, "Work Queues" (https://www.rabbitmq.com/tutorials), Python/pika.
# Changed for the tests: the broker port comes from AMQP_PORT, and the consumer
# stops after TUTORIAL_TIMEOUT_S seconds so the script always exits.
import os
import time

import pika

connection = pika.BlockingConnection(
    pika.ConnectionParameters(host="localhost", port=int(os.environ.get("AMQP_PORT", 5672))),
)
channel = connection.channel()

channel.queue_declare(queue="task_queue", durable=True, arguments={"x-queue-type": "quorum"})
print(" [*] Waiting for messages. To exit press CTRL+C")


def callback(ch, method, properties, body):
    print(f" [x] Received {body.decode()}")
    time.sleep(body.count(b"."))
    print(" [x] Done")
    ch.basic_ack(delivery_tag=method.delivery_tag)


channel.basic_qos(prefetch_count=1)
channel.basic_consume(queue="task_queue", on_message_callback=callback)

connection.call_later(float(os.environ.get("TUTORIAL_TIMEOUT_S", 120)), channel.stop_consuming)
channel.start_consuming()
