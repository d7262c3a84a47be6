"""What was published, confirmed and consumed, and the loss check over it.

Every message body is its unique id. A publisher records the id and where it
must end up before publishing, and records it confirmed only when the broker
acked it. Consumers record every delivery with the queue it came from. Ids
published to the TTL queue expire unread and must arrive through the dead
letter queue; the checker knows that, so a dead-lettered message counts as
consumed (at the DLQ), not as lost.
"""

import threading
from collections import Counter


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.expect = {}        # id -> the queue it must be consumed from
        self.confirmed = set()
        self.consumed = Counter()  # id -> deliveries
        self.misrouted = set()  # ids delivered from a queue other than expected
        self.deliveries = 0
        self.dead_lettered = 0  # DLQ deliveries carrying an x-death header

    def published(self, mid, queue):
        with self.lock:
            self.expect[mid] = queue

    def confirm(self, mid):
        with self.lock:
            self.confirmed.add(mid)

    def delivered(self, mid, queue, x_death=False):
        with self.lock:
            self.consumed[mid] += 1
            self.deliveries += 1
            # Only mismatches are kept: a set per id would cost hundreds of
            # MB over an hour.
            if mid in self.expect and self.expect[mid] != queue:
                self.misrouted.add(mid)
            if x_death:
                self.dead_lettered += 1

    def counts(self):
        with self.lock:
            return len(self.expect), len(self.confirmed), self.deliveries

    def check(self):
        with self.lock:
            return check(self.expect, self.confirmed, self.consumed, self.misrouted,
                         self.dead_lettered)


def check(expect, confirmed, consumed, misrouted, dead_lettered=0):
    """The verdict over a record; pure, so it can be run on fabricated ones.

    lost: confirmed, never consumed (must be 0). unexpected: consumed, never
    published (must be 0). misrouted: consumed from a queue other than the one
    it was sent to, e.g. a TTL'd message that did not go through the dead
    letter exchange (must be 0). duplicated: deliveries beyond the first
    (allowed: at-least-once, a lost ack or confirm makes them). recovered:
    unconfirmed (its confirm was in flight at a kill) but consumed (allowed).
    """
    lost = sorted(m for m in confirmed if consumed.get(m, 0) == 0)
    unexpected = sorted(m for m in consumed if m not in expect)
    return {
        "published": len(expect),
        "confirmed": len(confirmed),
        "consumed_ids": sum(1 for n in consumed.values() if n > 0),
        "deliveries": sum(consumed.values()),
        "lost": len(lost),
        "duplicated": sum(n - 1 for n in consumed.values() if n > 1),
        "recovered": sum(1 for m in consumed if m in expect and m not in confirmed),
        "unexpected": len(unexpected),
        "misrouted": len(misrouted),
        "dead_lettered": dead_lettered,
        "examples": {"lost": lost[:10], "unexpected": unexpected[:10],
                     "misrouted": sorted(misrouted)[:10]},
        "ok": not lost and not unexpected and not misrouted,
    }
