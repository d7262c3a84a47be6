"""The verdict of a run: the trend rule over nodes.csv, the loss check,
crashes and hangs; written as summary.md and summary.json, printed, and
turned into an exit code (0 pass, 1 fail)."""

import csv
import json
import os

from . import plot, sampler, trend

METRICS = list(trend.TOLERANCES)


def node_series(out):
    path = os.path.join(out, "nodes.csv")
    return {m: sampler.read_series(path, m) for m in METRICS}


def at(points, minute):
    """The first value at or after `minute`, and the last value."""
    later = [v for t, v in points if t >= minute]
    return (later[0] if later else None), (points[-1][1] if points else None)


def trend_table(series, verdicts, warmup_min):
    rows = ["| metric | node | after warm-up | end | median 2nd third | median last third "
            "| bound | slope /h | verdict |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (metric, node), v in sorted(verdicts.items(), key=lambda kv: (METRICS.index(kv[0][0]), kv[0][1])):
        first, last = at(series[metric][node], warmup_min)
        verdict = {True: "ok", False: "**UPWARD TREND**", None: f"not judged ({v.get('why')})"}[v["ok"]]
        rows.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            metric, node, _f(first), _f(last), _f(v.get("second_median")),
            _f(v.get("last_median")), _f(v.get("bound")), _f(v.get("slope_per_hour")), verdict))
    return rows


def process_table(out, skip=2, min_points=6):
    """RSS over each process's life (not judged): a failover restarts the
    master every few minutes, so a slow per-process leak never lifts a
    node's medians; its slope per life shows it."""
    lives = {}
    with open(os.path.join(out, "nodes.csv")) as f:
        for row in csv.DictReader(f):
            if row["pid"] and row["rss_mb"]:
                lives.setdefault((int(row["node"]), row["pid"]), []).append(row)
    rows = ["| node | pid | minutes | as slave / master | RSS MiB | heap (RssAnon) MiB | RSS slope MiB/h |",
            "|---:|---:|---|---|---|---|---:|"]
    for (node, pid), life in sorted(lives.items(), key=lambda kv: float(kv[1][0]["minute"])):
        life = life[skip:]  # its start-up and catch-up
        if len(life) < min_points:
            continue
        pts = [(float(r["minute"]), float(r["rss_mb"])) for r in life]
        roles = [r["role"] for r in life]
        anon = [r.get("rss_anon_mb", "") for r in life]
        rows.append("| {} | {} | {:.0f}-{:.0f} | {} / {} | {:.1f} → {:.1f} | {} → {} | {} |".format(
            node, pid, pts[0][0], pts[-1][0], roles.count("slave"), roles.count("master"),
            pts[0][1], pts[-1][1], anon[0] or "-", anon[-1] or "-", _f(trend.slope_per_hour(pts))))
    return rows


def _f(x):
    return "-" if x is None else f"{x:.1f}" if isinstance(x, float) and x % 1 else f"{x:.0f}"


def write(out, minutes, warmup_min, loss, events, stats, log):
    series = node_series(out)
    verdicts = trend.judge_nodes(series, warmup_min)
    failures = [f"{m} of node {n} trends upward" for (m, n), v in verdicts.items() if v["ok"] is False]
    if not loss["ok"]:
        failures.append(f"{loss['lost']} lost, {loss['unexpected']} unexpected, "
                        f"{loss['misrouted']} misrouted")
    if not events["drained"]:
        failures.append("the queues could not be drained")
    failures += [f"node {c['node']} exited by itself ({c['exit']}) at minute {c['minute']}"
                 for c in events["crashes"]]
    failures += [f"no new master within 60 s of the kill at minute {f['minute']}"
                 for f in events["failovers"] if f["new_master"] is None]
    failures += [f"worker {w} stalled at minute {m}" for w, m in events["stalls"].items()]
    failures += [f"worker crashed: {k}" for k in stats if k.startswith("worker_crashed")]
    lines = [f"# soak: {minutes:g} minutes, warm-up {warmup_min:g} min", ""]
    lines += trend_table(series, verdicts, warmup_min) + [""]
    lines += ["Each process's life (after its first 2 samples; not judged):", ""]
    lines += process_table(out) + [""]
    lines += [_loss_line(loss), _failover_line(events), "", "counters: " + json.dumps(stats), ""]
    lines.append("RESULT: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"minutes": minutes, "loss": loss, "events": events, "stats": stats,
                   "trend": {f"{m}/{n}": v for (m, n), v in verdicts.items()},
                   "failures": failures}, f, indent=1, default=str)
    try:
        plot.plot(out, warmup_min, [f["minute"] for f in events["failovers"]])
    except Exception as e:  # noqa: BLE001 - a missing plot must not hide the verdict
        failures.append(f"plot failed: {e}")
    print(text, flush=True)
    return 0 if not failures else 1


def _loss_line(loss):
    return ("messages: {published} published, {confirmed} confirmed, {deliveries} deliveries "
            "of {consumed_ids} ids; lost {lost}, duplicated {duplicated}, recovered {recovered}, "
            "unexpected {unexpected}, misrouted {misrouted}; dead-lettered (x-death) "
            "{dead_lettered}; examples {examples}").format(**loss)


def _failover_line(events):
    fo = events["failovers"]
    took = [f["new_master_after_s"] for f in fo if f["new_master_after_s"] is not None]
    return (f"failovers: {len(fo)} (new master after {min(took, default=0):.2f}-"
            f"{max(took, default=0):.2f} s); crashes {len(events['crashes'])}; "
            f"stalled workers {events['stalls'] or 'none'}; stuck at stop "
            f"{events['stuck_threads'] or 'none'}; drain {events['drain_s']} s")
