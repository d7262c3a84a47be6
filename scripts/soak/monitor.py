"""Management API polling every second (part of the load, as a dashboard
would do it), which also tracks each node's store lag between two samples."""

import threading
import time

from .cluster import http_json


class Monitor:
    def __init__(self):
        self.lock = threading.Lock()
        self.lag_max = {}      # node id -> highest store_lag since the last take
        self.lag_last = {}
        self.totals = {}       # /api/overview object_totals, last seen
        self.queue_names = []  # /api/queues, last seen
        self.polls = self.errors = 0
        self.slowest = 0.0

    def observe_nodes(self, nodes):
        with self.lock:
            for n in nodes:
                lag = n.get("store_lag")
                if lag is None:
                    continue
                self.lag_last[n["id"]] = lag
                self.lag_max[n["id"]] = max(lag, self.lag_max.get(n["id"], 0))

    def take(self):
        """Per-interval figures; the lag maxima start again."""
        with self.lock:
            out = {"lag_max": dict(self.lag_max), "lag_last": dict(self.lag_last),
                   "totals": dict(self.totals), "queues": len(self.queue_names),
                   "polls": self.polls, "errors": self.errors,
                   "slowest_s": round(self.slowest, 2)}
            self.lag_max, self.slowest = {}, 0.0
            return out


def poller(ctx, name):
    """GET /api/overview, /api/queues and /api/nodes once a second, from
    the nodes in turn. Failures during a failover are counted, not fatal."""
    mon, i = ctx.monitor, 0
    while not ctx.stop:
        port = ctx.mgmt_ports[i % len(ctx.mgmt_ports)]
        i += 1
        started = time.monotonic()
        overview = http_json(port, "/api/overview", timeout=3)
        queues = http_json(port, "/api/queues", timeout=3)
        nodes = http_json(port, "/api/nodes", timeout=3)
        took = time.monotonic() - started
        # Reads stay local on a slave, which reports no connections (only
        # the master holds them): the totals recorded are the master's own.
        on_master = isinstance(nodes, list) and isinstance(overview, dict) and any(
            n.get("role") == "master" and n.get("name") == overview.get("node") for n in nodes)
        with mon.lock:
            mon.polls += 1
            mon.slowest = max(mon.slowest, took)
            mon.errors += sum(x is None for x in (overview, queues, nodes))
            if on_master:
                mon.totals = overview.get("object_totals", {})
                if isinstance(queues, list):
                    mon.queue_names = [q.get("name") for q in queues]
        if isinstance(nodes, list):
            mon.observe_nodes(nodes)
        ctx.beat.beat(name)
        ctx.stop.sleep(max(0.0, 1.0 - took))
