"""The checkers on fabricated records: each planted fault must fail, and
the healthy record beside it must pass (python -m soak selftest, run by
scripts/soak.sh --self-test). Broker-independent; a second, end-to-end
proof is SOAK_PLANT=loss|leak on a real run (plant.py)."""

import random

from . import trend
from .ledger import Ledger


def flat(minutes, level, noise, seed):
    rnd = random.Random(seed)
    return [(m, level * (1 + rnd.uniform(-noise, noise))) for m in range(minutes + 1)]


def leaking(minutes, level, per_minute, noise, seed):
    return [(m, v + per_minute * m) for m, v in flat(minutes, level, noise, seed)]


def restarts(points, every, drop):
    """A node killed every `every` minutes comes back lower: what failovers do."""
    return [(m, v * (1 - drop) if m % every < 2 else v) for m, v in points]


def trend_cases():
    rel, abs_, _ = trend.TOLERANCES["rss_mb"]
    fds = trend.TOLERANCES["fds"]
    return [
        ("flat RSS, 10% noise", trend.judge(flat(60, 120, 0.10, 1), 5, rel, abs_), True),
        ("flat RSS with restarts", trend.judge(restarts(flat(60, 120, 0.1, 2), 9, 0.4), 5, rel, abs_), True),
        ("a slow start that ends", trend.judge([(m, min(m, 10) * 12) for m in range(61)], 5, rel, abs_), True),
        ("RSS leaking 3 MiB/min", trend.judge(leaking(60, 120, 3.0, 0.1, 3), 5, rel, abs_), False),
        ("RSS leaking 3 MiB/min, restarts", trend.judge(
            restarts(leaking(60, 120, 3.0, 0.1, 4), 9, 0.3), 5, rel, abs_), False),
        ("fds leaking 2/min", trend.judge(leaking(60, 60, 2, 0.05, 5), 5, *fds[:2]), False),
        ("too few samples", trend.judge(leaking(6, 120, 50, 0, 6), 5, rel, abs_), None),
    ]


def record(published, confirmed, deliveries):
    """A Ledger filled as the workers would: published {id: queue},
    confirmed ids, deliveries [(id, queue, x_death)]."""
    led = Ledger()
    for mid, q in published.items():
        led.published(mid, q)
    for mid in confirmed:
        led.confirm(mid)
    for mid, q, x_death in deliveries:
        led.delivered(mid, q, x_death)
    return led.check()


def loss_cases():
    pub = {"a": "q", "b": "q", "c": "dlq", "d": "q"}
    ok = record(pub, "abc", [("a", "q", 0), ("b", "q", 0), ("b", "q", 0),
                             ("c", "dlq", 1), ("d", "q", 0)])
    return [
        ("duplicates, a dead-lettered id, an unconfirmed-but-consumed id", ok, True),
        ("a confirmed id never consumed", record(pub, "abc", [("a", "q", 0), ("c", "dlq", 1)]), False),
        ("a TTL'd id that never reached the DLQ", record(pub, "ac", [("a", "q", 0)]), False),
        ("a TTL'd id consumed from a work queue",
         record(pub, "ac", [("a", "q", 0), ("c", "q", 0)]), False),
        ("an id nobody published", record(pub, "a", [("a", "q", 0), ("zz", "q", 0)]), False),
    ]


def main():
    bad = 0
    for name, verdict, want in trend_cases() + loss_cases():
        got = verdict["ok"]
        status = "as expected" if got == want else "WRONG"
        bad += got != want
        shown = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in verdict.items()
                 if k in ("second_median", "last_median", "bound", "lost", "misrouted",
                          "unexpected", "duplicated", "recovered")}
        print(f"{status:12} {name}: ok={got} (want {want}) {shown}")
    print(f"selftest: {len(trend_cases()) + len(loss_cases()) - bad} passed, {bad} failed")
    return 1 if bad else 0
