#!/usr/bin/env python
# RabbitMQ tutorial 4, "Routing" (https://www.rabbitmq.com/tutorials), Python/pika.
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

    channel.exchange_declare(exchange="direct_logs", exchange_type="direct")

    result = channel.queue_declare(queue="", exclusive=True)
    queue_name = result.method.queue

    severities = sys.argv[1:]
    if not severities:
        sys.stderr.write("Usage: %s [info] [warning] [error]\n" % sys.argv[0])
        sys.exit(1)

    for severity in severities:
        channel.queue_bind(
            exchange="direct_logs",
            queue=queue_name,
            routing_key=severity,
        )

    print(" [*] Waiting for logs. To exit press CTRL+C")

    def callback(ch, method, properties, body):
        print(f" [x] {method.routing_key}:{body.decode()}")

    channel.basic_consume(
        queue=queue_name,
        on_message_callback=callback,
        auto_ack=True,
    )

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
