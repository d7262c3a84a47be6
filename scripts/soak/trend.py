"""The leak rule: no upward trend after the warm-up.

After the warm-up, a series' samples are cut into three consecutive thirds
(by count). The rule compares the median of the last third with the median of
the second: a leak must lift the level for good, over about a third of the
run, to fail it. Medians ignore spikes (a failover's restart, a compaction,
a scheduling stall on a loaded machine), and comparing the second third, not
the first, leaves out slow starts that end (page cache, allocator arenas,
the stores' first segment files). It fails when

    median(last third) > median(second third) * (1 + rel) + abs

with rel and abs per metric (TOLERANCES). A falling series always passes.
Fewer than MIN_POINTS samples after the warm-up are not judged (a smoke run).
The least-squares slope over the same samples is reported, not judged.
"""

from statistics import median

# metric: (rel, abs, unit). Why these: RSS and fds of a node that is killed
# and restarted every few failovers swing with its role (the master holds the
# queues and every proxied connection), so a level lift under 10% plus a few
# connections' worth is noise; disk grows in 32 MiB segment files, abs is
# three of them.
TOLERANCES = {
    "rss_mb": (0.10, 16.0, "MiB"),
    "fds": (0.10, 16.0, ""),
    "threads": (0.10, 4.0, ""),
    "disk_mb": (0.10, 96.0, "MiB"),
}
MIN_POINTS = 6


def slope_per_hour(points):
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return 60 * sum((x - mx) * (y - my) for x, y in points) / sxx


def judge(points, warmup_min, rel, abs_):
    """points: [(minute, value)]. Returns a dict with ok (True, False, or
    None when not judged) and the figures behind it."""
    after = sorted(p for p in points if p[0] >= warmup_min)
    out = {"n": len(after), "slope_per_hour": slope_per_hour(after)}
    if len(after) < MIN_POINTS:
        return {**out, "ok": None, "why": f"{len(after)} samples after warm-up"}
    k = len(after) // 3
    second = [v for _, v in after[k:2 * k]]
    last = [v for _, v in after[len(after) - k:]]
    m2, m3 = median(second), median(last)
    bound = m2 * (1 + rel) + abs_
    return {**out, "ok": m3 <= bound, "second_median": m2, "last_median": m3,
            "bound": bound}


def judge_nodes(series, warmup_min):
    """series: {metric: {node: [(minute, value)]}} -> {(metric, node): verdict}."""
    verdicts = {}
    for metric, per_node in series.items():
        rel, abs_, _ = TOLERANCES[metric]
        for node, points in sorted(per_node.items()):
            verdicts[(metric, node)] = judge(points, warmup_min, rel, abs_)
    return verdicts
