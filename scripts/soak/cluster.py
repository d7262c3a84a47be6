"""A 3-node cluster of real broker+store processes from examples/cluster/.

The shipped configs are read as they are; only their loopback ports (given by
scripts/soak.sh, which picks them free with common.sh's free_ports), data
directories (under the run's mktemp directory) and cookie (random per run)
are swapped, as compat-tests/src/cluster.rs does, so the soak runs the layout
the docs tell operators to run. Nodes are killed by pid only.
"""

import base64
import json
import os
import re
import secrets
import signal
import subprocess
import time
import urllib.request

GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


def http_json(port, path, timeout=2.0):
    """GET a management API path on 127.0.0.1:port as guest; JSON or None."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"authorization": GUEST})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


class Node:
    def __init__(self, nid, ports, data, config, log):
        self.id = nid
        (self.cluster_port, self.amqp_port, self.mgmt_port,
         self.prom_port, self.stream_port) = ports
        self.data, self.config, self.log = data, config, log
        self.proc = None
        self.starts = 0
        self.killed = False  # by the harness: its exit is no finding

    @property
    def pid(self):
        return self.proc.pid if self.proc and self.proc.poll() is None else None


class Cluster:
    def __init__(self, root, binary, workdir, ports, pidfile):
        """ports: 15 free loopback ports, 5 per node (cluster, amqp,
        management, prometheus, stream)."""
        self.binary, self.pidfile = binary, pidfile
        cookie = secrets.token_hex(24)
        per = [ports[i * 5:(i + 1) * 5] for i in range(3)]
        self.nodes = []
        for nid in (1, 2, 3):
            text = open(os.path.join(root, "examples", "cluster", f"node{nid}.toml")).read()
            text = self._rewrite(text, nid, per, workdir, cookie)
            config = os.path.join(workdir, f"node{nid}.toml")
            with open(config, "w") as f:
                f.write(text)
            self.nodes.append(Node(nid, per[nid - 1], os.path.join(workdir, f"node{nid}"),
                                   config, os.path.join(workdir, f"node{nid}.log")))

    @staticmethod
    def _rewrite(text, nid, per, workdir, cookie):
        # One pass over every address, so a new port that equals another
        # default (free ports come from 20000-31999, which holds 25701) is
        # never rewritten twice.
        defaults = {}
        for i, p in enumerate(per):
            for base, port in zip((25701, 5672, 15672, None, 5552), p):
                if base is not None:
                    defaults[base + i] = port
        text = re.sub(r'127\.0\.0\.1:(\d+)"',
                      lambda m: f'127.0.0.1:{defaults[int(m.group(1))]}"', text)
        text = text.replace(f'data_dir = "./data/node{nid}"',
                            f'data_dir = "{workdir}/node{nid}"')
        text = text.replace(f"prometheus_port = {15691 + nid}",
                            f"prometheus_port = {per[nid - 1][3]}")
        text, n = re.subn(r'(?m)^cookie = ".*"$', f'cookie = "{cookie}"', text)
        # Fail loudly if the shipped example changed shape: never run on
        # the default ports or data dir by accident.
        ours = {str(p) for p in defaults.values()}
        addrs = set(re.findall(r'127\.0\.0\.1:(\d+)"', text))
        if n != 1 or addrs != ours or workdir not in text or str(per[nid - 1][3]) not in text:
            raise SystemExit(f"examples/cluster/node{nid}.toml no longer has the expected layout")
        return text

    def _write_pids(self):
        """scripts/soak.sh's exit trap kills these if the harness dies."""
        with open(self.pidfile + ".tmp", "w") as f:
            f.write("".join(f"{n.pid}\n" for n in self.nodes if n.pid))
        os.replace(self.pidfile + ".tmp", self.pidfile)

    def start(self, node):
        log = open(node.log, "ab")
        node.proc = subprocess.Popen(
            [self.binary, "serve", "--config", node.config, "--bind", "127.0.0.1",
             "--log-level", "info"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"})
        log.close()
        node.starts += 1
        node.killed = False
        self._write_pids()

    def start_all(self, timeout=60):
        for n in self.nodes:
            self.start(n)
        return self.wait_master(timeout=timeout)

    def kill9(self, node):
        node.killed = True
        if node.proc and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=30)
        self._write_pids()

    def stop_all(self):
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for n in self.nodes:
            if n.proc:
                try:
                    n.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    n.proc.kill()
                    n.proc.wait(timeout=10)
        self._write_pids()

    def status(self, node, timeout=1.0):
        if node.pid is None:
            return None
        return http_json(node.mgmt_port, "/api/stablemq/node-status", timeout)

    def master(self):
        """(node, epoch) serving as master in the highest epoch, or None."""
        best = None
        for n in self.nodes:
            s = self.status(n)
            if s and s.get("role") == "master" and (best is None or s["epoch"] > best[1]):
                best = (n, s["epoch"])
        return best

    def wait_master(self, above_epoch=-1, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.master()
            if m and m[1] > above_epoch:
                return m
            time.sleep(0.1)
        return None

    def amqp_ports(self):
        return [n.amqp_port for n in self.nodes]

    def exited(self):
        """Nodes that died without being killed by the harness (a crash,
        an exit on a store error, the OOM killer)."""
        return [n for n in self.nodes if n.proc and not n.killed and n.proc.poll() is not None]
