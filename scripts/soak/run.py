"""The soak run: start the cluster, run the load for MINUTES with a sample
every interval and a failover every few minutes, then drain and judge."""

import os
import random
import signal
import sys
import threading
import time

from . import load, monitor, plant, report, sampler, topology
from .clients import AMQP_ERRORS, Connector, Heartbeat, Stats, Stop, close_quietly
from .cluster import Cluster
from .drain import drain
from .failover import failover
from .ledger import Ledger


class Ctx:
    """What the workers share."""

    def __init__(self, cluster, sample_seconds):
        self.stop, self.stats, self.beat = Stop(), Stats(), Heartbeat()
        self.ledger, self.monitor = Ledger(), monitor.Monitor()
        self.connector = Connector(cluster.amqp_ports())
        self.mgmt_ports = [n.mgmt_port for n in cluster.nodes]
        self.sample_seconds = sample_seconds


def schedule(minutes):
    """(sample interval, failover period, warm-up), in seconds/minutes. A
    run under 10 minutes samples every 15 s so the trend rule has points."""
    sample = 60 if minutes >= 10 else 15
    period = min(180, max(40, minutes * 60 / 4))
    # SOAK_FAILOVER_SECONDS overrides; 0 turns failovers off, so every
    # process lives the whole run and a slow leak in one cannot hide behind
    # its restarts.
    period = float(os.environ.get("SOAK_FAILOVER_SECONDS", period)) or float("inf")
    warmup_min = min(5.0, minutes / 4)
    return sample, period, warmup_min


def workers(ctx, plant_what):
    rate = float(os.environ.get("SOAK_RATE", 40))  # per publisher, msg/s
    w = [(load.publisher, f"pub{i}", topology.WORK, rate) for i in range(3)]
    w.append((load.publisher, "ttlpub", [topology.TTL_QUEUE], 10))
    w += [(load.consumer, f"cons{i}") for i in range(4)]
    w += [(load.connection_churn, f"churn{i}") for i in range(2)]
    w += [(load.queue_churn, f"qchurn{i}") for i in range(2)]
    w.append((monitor.poller, "api"))
    if plant_what == "loss":
        w.append((plant.thief, "thief"))
    elif plant_what == "leak":
        w.append((plant.leaker, "leaker"))
    threads = []
    for fn, name, *args in w:
        t = threading.Thread(target=_guard, args=(ctx, fn, name, *args), name=name, daemon=True)
        t.start()
        threads.append(t)
    return threads


def _guard(ctx, fn, name, *args):
    """A worker that dies of a bug of its own is reported, not silent."""
    try:
        fn(ctx, name, *args)
    except Exception as e:  # noqa: BLE001 - reported in the summary
        ctx.stats.add(f"worker_crashed:{name}:{type(e).__name__}: {e}")


def log_to(path):
    f = open(path, "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        f.write(line + "\n")
        f.flush()
    return log


def main():
    # scripts/soak.sh's trap (or timeout) sends TERM: unwind, so the nodes
    # are stopped and their logs kept.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    minutes = float(os.environ["SOAK_MINUTES"])
    out, work = os.environ["SOAK_OUT"], os.environ["SOAK_WORK"]
    ports = [int(p) for p in os.environ["SOAK_PORTS"].split()]
    plant_what = os.environ.get("SOAK_PLANT", "")
    log = log_to(os.path.join(out, "run.log"))
    sample_s, period_s, warmup_min = schedule(minutes)
    cluster = Cluster(os.environ["SOAK_ROOT"], os.environ["SOAK_BIN"], work, ports,
                      os.path.join(work, "node.pids"))
    try:
        return _run(cluster, minutes, out, sample_s, period_s, warmup_min, plant_what, log)
    finally:
        cluster.stop_all()
        for n in cluster.nodes:  # keep the node logs with the results
            os.system(f"cp '{n.log}' '{out}/' 2>/dev/null")


def _run(cluster, minutes, out, sample_s, period_s, warmup_min, plant_what, log):
    log(f"soak: {minutes:g} min, sample every {sample_s} s, failover every "
        f"{period_s:.0f} s, {os.environ.get('SOAK_RATE', 40)} msg/s per publisher, warm-up {warmup_min:g} min, plant={plant_what or 'none'}")
    if cluster.start_all(timeout=90) is None:
        log("no master within 90 s of start")
        return 2
    ctx = Ctx(cluster, sample_s)
    _declare(ctx)
    threads = workers(ctx, plant_what)
    events = _load_phase(ctx, cluster, minutes, sample_s, period_s, out, log)
    ctx.stop.set()
    joined_by = time.monotonic() + 30
    for t in threads:
        t.join(timeout=max(0.1, joined_by - time.monotonic()))
    events["stuck_threads"] = [t.name for t in threads if t.is_alive()]
    for n in cluster.nodes:  # the drain needs every store and broker back
        if n.pid is None:
            cluster.start(n)
    cluster.wait_master(timeout=60)
    ok, depths, took = drain(ctx)
    log(f"drain: {'done' if ok else 'NOT done'} in {took:.1f} s, depths {depths}")
    events.update(drained=ok, drain_depths=depths, drain_s=round(took, 1))
    verdict = ctx.ledger.check()
    return report.write(out, minutes, warmup_min, verdict, events, ctx.stats.snapshot(), log)


def _declare(ctx):
    """The topology, before any worker starts (retried: a young cluster may
    still be settling)."""
    nodes = ctx.connector.nodes()
    for _ in range(20):
        conn = ctx.connector.connect(nodes, ctx.stop)
        try:
            topology.declare(conn.channel())
            return
        except AMQP_ERRORS:
            time.sleep(1)
        finally:
            close_quietly(conn)
    raise SystemExit("could not declare the topology in 20 tries")


def _load_phase(ctx, cluster, minutes, sample_s, period_s, out, log):
    nodes_csv = sampler.CsvLog(os.path.join(out, "nodes.csv"), sampler.NODE_FIELDS)
    cluster_csv = sampler.CsvLog(os.path.join(out, "cluster.csv"), sampler.CLUSTER_FIELDS)
    start = time.monotonic()
    end = start + minutes * 60
    next_sample, next_failover = start + sample_s, start + period_s
    ev = {"failovers": [], "crashes": [], "stalls": {}}
    while time.monotonic() < end:
        now = time.monotonic()
        if now >= next_sample:
            _sample(ctx, cluster, (now - start) / 60, len(ev["failovers"]), nodes_csv, cluster_csv)
            next_sample += sample_s
        elif now >= next_failover and end - now > 20:
            rec = failover(cluster, down_seconds=5 + random.random() * 5, log=log)
            if rec:
                rec["minute"] = round((now - start) / 60, 2)
                ev["failovers"].append(rec)
            next_failover += period_s
        _watch(ctx, cluster, ev, (now - start) / 60, log)
        time.sleep(0.5)
    nodes_csv.close()
    cluster_csv.close()
    return ev


def _watch(ctx, cluster, ev, minute, log):
    """A node that exits on its own, or a worker with no progress for 90 s,
    is a finding: recorded with the minute it happened, the node restarted."""
    for n in cluster.exited():
        rc = n.proc.poll()
        ev["crashes"].append({"node": n.id, "minute": round(minute, 2), "exit": rc})
        log(f"node {n.id} EXITED by itself with {rc} at minute {minute:.1f}; restarting it")
        cluster.start(n)
    for name, ago in ctx.beat.stalled(90).items():
        if name not in ev["stalls"]:
            ev["stalls"][name] = round(minute, 2)
            log(f"worker {name} made no progress for {ago} s (minute {minute:.1f})")


def _sample(ctx, cluster, minute, failovers, nodes_csv, cluster_csv):
    mon = ctx.monitor.take()
    for n in cluster.nodes:
        st = cluster.status(n)
        nodes_csv.row(sampler.sample_node(n, minute, st and st.get("role"),
                                          mon["lag_max"].get(n.id), mon["lag_last"].get(n.id)))
    published, confirmed, deliveries = ctx.ledger.counts()
    t = mon["totals"]
    cluster_csv.row({
        "minute": round(minute, 2), "published": published, "confirmed": confirmed,
        "deliveries": deliveries, "queues": mon["queues"],
        "connections": t.get("connections", ""), "channels": t.get("channels", ""),
        "consumers": t.get("consumers", ""), "api_polls": mon["polls"],
        "api_errors": mon["errors"], "api_slowest_s": mon["slowest_s"],
        "failovers": failovers, "loadavg1": round(os.getloadavg()[0], 2),
    })


if __name__ == "__main__":
    sys.exit(main())
