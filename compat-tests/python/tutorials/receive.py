#!/usr/bin/env python
# RabbitMQ tutorial 1, "Hello World!" (https://www.rabbitmq.com/tutorials), Python/pika.
# Changed for the tests: the broker port comes from AMQP_PORT, and the consumer
# stops after TUTORIAL_TIMEOUT_S seconds so the script always exits.
import os
import sys

import pika


def main():
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(host="localhost", port=int(os.environ.get("AMQP_PORT", 5672))),
    )
    channel = connection.channel()

    channel.queue_declare(queue="hello", durable=True, arguments={"x-queue-type": "quorum"})

    def callback(ch, method, properties, body):
        print(f" [x] Received {body.decode()}")

    channel.basic_consume(
        queue="hello",
        on_message_callback=callback,
        auto_ack=True,
    )

    print(" [*] Waiting for messages. To exit press CTRL+C")
    connection.call_later(float(os.environ.get("TUTORIAL_TIMEOUT_S", 120)), channel.stop_consuming)
    channel.start_consuming()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("Interrupted")
        try:
            sys.exit(0)
        except SystemExit:
            os._exit(0)
