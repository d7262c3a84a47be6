"""The queues and exchanges of the soak, declared on every (re)connection:
declares are idempotent, and a worker never depends on another having run."""

WORK = ["soak.work.0", "soak.work.1", "soak.work.q2", "soak.work.q3"]
TTL_QUEUE = "soak.ttl"
DLX = "soak.dlx"
DLQ = "soak.dlq"
CHURN_EXCHANGE = "soak.churn"
TTL_MS = 2000


def queue_args(name):
    if name.startswith("soak.work.q"):
        return {"x-queue-type": "quorum"}
    if name == TTL_QUEUE:
        # Nobody consumes it: every message expires after TTL_MS and is
        # dead-lettered to DLQ, where the consumers pick it up.
        return {"x-message-ttl": TTL_MS, "x-dead-letter-exchange": DLX}
    return None


def declare(ch):
    ch.exchange_declare(DLX, "fanout", durable=True)
    ch.queue_declare(DLQ, durable=True)
    ch.queue_bind(DLQ, DLX)
    ch.exchange_declare(CHURN_EXCHANGE, "topic", durable=True)
    for q in WORK + [TTL_QUEUE]:
        ch.queue_declare(q, durable=True, arguments=queue_args(q))


def destination(queue):
    """Where a message published to `queue` must be consumed from."""
    return DLQ if queue == TTL_QUEUE else queue


def consumed_queues():
    return WORK + [DLQ]
