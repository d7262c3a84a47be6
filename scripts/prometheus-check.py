#!/usr/bin/env python3
"""Evaluate every PromQL expression of StableMQ's Grafana dashboards and of the
official RabbitMQ-Overview dashboard (10991) against a real Prometheus that
scrapes StableMQ, and fail unless each one returns at least one series.

scripts/prometheus-check.sh starts the processes; this file only talks HTTP.
Grafana template variables are resolved the way Grafana resolves them: a
`label_values(selector, label)` variable takes the first value Prometheus
knows for that label (none: empty, which matches a missing label), a
multi-value variable with "All" takes its allValue, and the built-in
intervals get values that fit a one-second scrape interval.
"""

import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request

BUILTINS = {
    # Grafana: max(4 x scrape interval, $__interval + scrape interval).
    "__rate_interval": "10s",
    "__interval": "2s",
    "__range": "1m",
}


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def prom(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    body = json.loads(get(url))
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body}")
    return body["data"]


def substitute(expr, values):
    def one(m):
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def resolve_variables(base, variables):
    """variables: [(name, query, include_all, all_value)] in dashboard order."""
    values = dict(BUILTINS)
    for name, query, include_all, all_value in variables:
        if include_all:
            values[name] = all_value or ".*"
            continue
        m = re.fullmatch(r"\s*label_values\(\s*(.*?)\s*,\s*(\w+)\s*\)\s*", query, re.S)
        if not m:
            raise SystemExit(f"variable {name}: cannot emulate query {query!r}")
        selector, label = substitute(m.group(1), values), m.group(2)
        series = prom(base, "/api/v1/series", **{"match[]": selector})
        found = sorted({s[label] for s in series if s.get(label)})
        values[name] = found[0] if found else ""
    return values


def dashboard_checks(path):
    d = json.load(open(path))
    variables = []
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        variables.append((v["name"], q, v.get("includeAll", False), v.get("allValue")))
    exprs = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append((p.get("title", ""), t["expr"]))

    walk(d.get("panels", []))
    return d.get("title", path), variables, exprs


def overview_checks(path):
    """The committed list of 10991's expressions, by dashboard revision."""
    revisions = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        kind, rev, name, text = line.rstrip("\n").split("\t")
        r = revisions.setdefault(rev, ([], []))
        if kind == "var":
            r[0].append((name, text, False, None))
        elif kind == "expr":
            r[1].append((name, text))
        else:
            raise SystemExit(f"{path}: unknown line kind {kind!r}")
    return [(f"RabbitMQ-Overview 10991 ({rev})", v, e) for rev, (v, e) in revisions.items()]


def families(text):
    return {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")}


def check_endpoints(metrics_base):
    """/metrics aggregates, /metrics/per-object does not; same families."""
    agg = get(f"{metrics_base}/metrics")
    per = get(f"{metrics_base}/metrics/per-object")
    problems = []
    if re.search(r'\bqueue="', agg):
        problems.append("/metrics carries per-queue labels")
    if not re.search(r'^rabbitmq_queue_messages_ready\{vhost="[^"]*",queue="', per, re.M):
        problems.append("/metrics/per-object has no per-queue rabbitmq_queue_messages_ready")
    if families(agg) != families(per):
        problems.append(f"families differ: {sorted(families(agg) ^ families(per))}")
    for text, name in ((agg, "/metrics"), (per, "/metrics/per-object")):
        for f in families(text):
            if f"# HELP {f} " not in text:
                problems.append(f"{name}: {f} has no HELP")
    return problems


def wait_for_scrapes(base, job, n, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            r = prom(base, "/api/v1/query", query=f'count_over_time(up{{job="{job}"}}[1m])')
            up = prom(base, "/api/v1/query", query=f'up{{job="{job}"}}')
            if r["result"] and float(r["result"][0]["value"][1]) >= n and up["result"] \
                    and up["result"][0]["value"][1] == "1":
                return True
        except Exception:
            pass
        time.sleep(0.5)
    return False


# Values that light load must move: a check that every expression returns a
# series says nothing if the counters never count.
LIVENESS = [
    ("messages received", 'sum(rate(rabbitmq_global_messages_received_total[10s])) > 0'),
    ("messages confirmed", 'sum(rate(rabbitmq_global_messages_confirmed_total[10s])) > 0'),
    ("messages routed", 'sum(rate(rabbitmq_global_messages_routed_total[10s])) > 0'),
    ("manual-ack deliveries", 'sum(rate(rabbitmq_global_messages_delivered_consume_manual_ack_total[10s])) > 0'),
    ("acks", 'sum(rate(rabbitmq_global_messages_acknowledged_total[10s])) > 0'),
    ("connections", 'sum(rabbitmq_connections) >= 2'),
    ("publishers", 'sum(rabbitmq_global_publishers) >= 1'),
    ("consumers", 'sum(rabbitmq_consumers) >= 1'),
    ("queues", 'sum(rabbitmq_queues) >= 1'),
    ("message sizes", 'sum(rabbitmq_message_size_bytes_count) > 0'),
    ("quorum acks timed", 'sum(stablemq_quorum_ack_seconds_count) > 0'),
    ("fsyncs", 'sum(stablemq_store_fsyncs_total) > 0'),
    ("stable index", 'max(stablemq_stable_index) > 0'),
    ("master role", 'stablemq_role{role="master"} == 1'),
    ("resident memory", 'rabbitmq_process_resident_memory_bytes > 0'),
    ("open fds", 'rabbitmq_process_open_fds > 0 and rabbitmq_process_open_fds < rabbitmq_process_max_fds'),
    ("free disk", 'rabbitmq_disk_space_available_bytes > 0'),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--metrics", required=True, help="StableMQ's metrics base URL")
    ap.add_argument("--job", default="stablemq")
    ap.add_argument("--overview", required=True, help="the 10991 expression list")
    ap.add_argument("dashboards", nargs="+")
    a = ap.parse_args()

    if not wait_for_scrapes(a.prometheus, a.job, 8, 40):
        print("FAIL: Prometheus did not scrape StableMQ successfully 8 times in 40 s")
        return 1

    failures = 0
    rows = []
    for problem in check_endpoints(a.metrics):
        rows.append(("FAIL", "endpoints", problem, "", ""))
        failures += 1

    sources = [dashboard_checks(p) for p in a.dashboards] + overview_checks(a.overview)
    total = 0
    for title, variables, exprs in sources:
        values = resolve_variables(a.prometheus, variables)
        if not exprs:
            rows.append(("FAIL", title, "(no expressions found)", "", ""))
            failures += 1
        for panel, expr in exprs:
            total += 1
            q = substitute(expr, values)
            try:
                result = prom(a.prometheus, "/api/v1/query", query=q)["result"]
                n = len(result)
                sample = result[0]["value"][1] if n else "-"
                ok = n >= 1
            except Exception as e:  # a query Prometheus rejects is a failure too
                n, sample, ok = 0, f"error: {e}", False
            rows.append(("pass" if ok else "FAIL", title, panel, str(n), sample))
            if not ok:
                failures += 1
                rows.append(("", "", f"  query: {q}", "", ""))

    for name, q in LIVENESS:
        result = prom(a.prometheus, "/api/v1/query", query=q)["result"]
        ok = len(result) >= 1
        rows.append(("pass" if ok else "FAIL", "liveness", name, str(len(result)),
                     result[0]["value"][1] if result else f"not true: {q}"))
        failures += 0 if ok else 1

    w1 = max(len(r[1]) for r in rows)
    w2 = min(60, max(len(r[2]) for r in rows))
    print(f"{'result':6}  {'source':{w1}}  {'panel':{w2}}  series  first value")
    for r in rows:
        print(f"{r[0]:6}  {r[1]:{w1}}  {r[2][:w2] if r[0] else r[2]:{w2}}  {r[3]:>6}  {r[4]}")
    print(f"\n{total} dashboard expressions, {len(LIVENESS)} liveness checks: "
          f"{'all pass' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
