#!/usr/bin/env python3
"""Helpers of compat-tests/bench/compare.sh (standard library only).

  bench.py free-ports N
      print N distinct free TCP ports on 127.0.0.1
  bench.py wait-amqp PORT TIMEOUT PID
      wait until 127.0.0.1:PORT answers the AMQP 0-9-1 header with
      connection.start; fail early if process PID exits
  bench.py scenario NAME --perf BIN --out DIR --runs N --duration S [--backlog N]
                    --broker stablemq=URI,PID[+PID...] --broker rabbitmq=URI,PID[+PID...]
                    [--master stablemq=ID,MGMT_URL[+MGMT_URL...]]
                    [--go BIN] [--java-cp CLASSPATH] [--clients go,java,perf]
      run one scenario's load commands against every broker, RUNS times
      (alternating which broker goes first), sample each broker's CPU time and
      RSS from /proc while it runs, and write one JSON result per run to DIR;
      exit 1 if a run failed or moved no message. A cluster is given by all
      its nodes' pids (CPU and RSS are summed over every node's process tree).
      With --master, StableMQ's management API is asked before and after every
      perf run which node is master; a run fails if it is not node ID. The
      real-client scenarios (R1 to R4) run the load programs of clients/ (the
      Go one, BIN, built from clients/go; the Java one, class PerfTest on
      CLASSPATH, built from clients/java) and `stablemq perf --frames-per-write
      1`; --clients keeps only the phases of the clients named. The stream
      scenarios (ST1, ST2) publish --messages N messages per row and read
      them back from `first`: ST1 over the stream protocol with streams.py
      (rstream, run by --stream-py, on the port of --stream NAME=PORT), ST2
      over AMQP 0-9-1 stream queues with `stablemq perf` and the Go program.
  bench.py smq-master URL TIMEOUT CTL
      wait until `CTL ctl --url URL cluster-status --json` shows every node
      reachable and exactly one master (all agreeing on it); print its id
  bench.py rmq-running-nodes
      read `rabbitmqctl cluster_status --formatter json` on stdin and print the
      number of running nodes
  bench.py has-rstream
      exit 0 if this Python can import rstream (run it with the --stream-py one)
  bench.py table DIR [--markdown]
      print the comparison table (medians over the runs) of every result in DIR
  bench.py machine
      print the machine description (CPU, cores, RAM, kernel, load average)

Broker CPU is utime+stime of the broker's process and all its descendants
(RabbitMQ: the start script, beam.smp, erl_child_setup, ...), from
/proc/<pid>/stat; RSS is the sum of their VmRSS, sampled every 0.2 s. For a
cluster, both are summed over the three nodes' process trees. Broker CPU per
message is that CPU time over the larger of the messages published and
consumed in the run (s per million messages = µs per message). A load program
that reports broker_cpu_s itself (streams.py, which reads the same /proc
counters just before its first publish or subscribe and after its last
confirm or delivery) is taken at its word: its Python start and connection
set-up would otherwise count, and they are a large part of a short phase.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.2

# --- scenarios -------------------------------------------------------------------
# Each scenario is a list of phases; a phase is one `stablemq perf` run. The same
# arguments go to both brokers. {D} is the duration in seconds, {B} the backlog.
S2_ARGS = "-x 1 -y 1 -s 1024 --persistent -c 1000 -q 1000 --multi-ack-every 100 -u {Q}"
QUORUM = "--queue-args x-queue-type=quorum"
S5_RATES_K = (1, 10, 50)
SCENARIOS = {
    "S1": {
        "title": "transient, no confirms, auto-ack, 16 B, 1 producer 1 consumer",
        "phases": [("run", "-x 1 -y 1 -s 16 --auto-ack -u bench-s1 -z {D}")],
    },
    "S2": {
        "title": "persistent, confirm window 1000, prefetch 1000, multi-ack 100, 1 KB, 1x1, durable queue",
        "phases": [("run", S2_ARGS.format(Q="bench-s2") + " -z {D}")],
    },
    # S3, S4, S5 run on 3-node clusters: the load goes to StableMQ's master and to
    # the RabbitMQ node that declares (and so leads) the quorum queues.
    "S3": {
        "title": "S2 on a 3-node cluster: StableMQ (3 stores, quorum 2) vs a RabbitMQ quorum queue (3 members)",
        "cluster": True,
        "phases": [("run", S2_ARGS.format(Q="bench-s3") + " " + QUORUM + " -z {D}")],
    },
    "S3p": {
        "title": "S3 through a node that is not the master (StableMQ: a slave's proxy; RabbitMQ: a node"
                 " that is not the queue's leader), same queue",
        "cluster": True,
        "phases": [("run", S2_ARGS.format(Q="bench-s3") + " " + QUORUM + " -z {D}")],
    },
    "S4": {
        "title": "S3 with 4 producers and 4 consumers on 4 queues",
        "cluster": True,
        "phases": [("run", S2_ARGS.replace("-x 1 -y 1", "-x 4 -y 4 --queues 4").format(Q="bench-s4")
                    + " " + QUORUM + " -z {D}")],
    },
    "S5": {
        "title": "S3's setup at fixed rates of 1k, 10k and 50k msg/s (1 producer): confirm and end-to-end latency",
        "cluster": True,
        "phases": [(f"r{k}k", S2_ARGS.replace("-y 1", f"-y 1 -r {k}000").format(Q="bench-s5")
                    + " " + QUORUM + " -z {D}") for k in S5_RATES_K],
    },
    "S6": {
        "title": "backlog of {B} persistent 1 KB messages (confirm window 1000): fill, then drain",
        "phases": [
            ("fill", "-x 1 -y 0 -s 1024 --persistent -c 1000 -u bench-s6 -C {B} --timeout {T}"),
            ("drain", "-x 0 -y 1 --persistent -q 1000 --multi-ack-every 100 -u bench-s6 -C {B} --timeout {T}"),
        ],
    },
    "S7": {
        "title": "1000 queues at 1 msg/s each (1 producer, 1 consumer with 1000 subscriptions), 16 B transient",
        "phases": [("run", "-x 1 -y 1 --queues 1000 -r 1000 -s 16 -q 10 -u bench-s7 -z {D7}")],
    },
}

# Real-client scenarios (issue 23): the load programs of clients/ (a Go one on
# amqp091-go, a Java one on the RabbitMQ Java client), which publish with one
# library call, and so one socket write, per message. A phase is (name, template,
# client); the Go and Java programs take the same flags. R2 also runs `stablemq
# perf --frames-per-write 1` with S2's settings.
RC_WINDOWS = (1, 10, 100, 1000)
RC_CLIENTS = ("go", "java")
RC_S2 = ("--producers 1 --consumers 1 --size 1024 --persistent --confirm {W} --prefetch 1000"
         " --multi-ack 100 --queue {Q} --duration {{D}}")
RC_S1 = "--producers 1 --consumers 1 --size 16 --auto-ack --queue bench-r1 --duration {D}"
RC_MANY = ("--producers 100 --consumers 1 --size 1024 --persistent --confirm 10 --rate 100"
           " --prefetch 1000 --multi-ack 100 --queue bench-r4 --duration {D}")
SCENARIOS.update({
    "R1": {
        "title": "real clients: S1 (16 B transient, no confirms, auto-ack, 1 producer 1 consumer)",
        "real": True,
        "phases": [(c, RC_S1, c) for c in RC_CLIENTS],
    },
    "R2": {
        "title": "real clients: S2 (1 KB persistent, durable queue, prefetch 1000, multi-ack 100, 1x1)"
                 " at confirm windows 1, 10, 100, 1000; and stablemq perf --frames-per-write 1 with S2's flags",
        "real": True,
        "phases": [(f"{c}-c{w}", RC_S2.format(W=w, Q="bench-r2"), c) for c in RC_CLIENTS for w in RC_WINDOWS]
                  + [("perf-fpw1", S2_ARGS.format(Q="bench-r2") + " --frames-per-write 1 -z {D}", "perf")],
    },
    "R3": {
        "title": "real clients: S3 (R2's load on 3-node clusters; a RabbitMQ quorum queue)"
                 " at confirm windows 1, 10, 100, 1000",
        "real": True,
        "cluster": True,
        "phases": [(f"{c}-c{w}", RC_S2.format(W=w, Q="bench-r3") + " --queue-type quorum", c)
                   for c in RC_CLIENTS for w in RC_WINDOWS],
    },
    "R4": {
        "title": "real clients: 100 producers at 100 msg/s each (100 connections; 1 KB persistent,"
                 " confirm window 10) and 1 consumer (prefetch 1000, multi-ack 100)",
        "real": True,
        "phases": [(c, RC_MANY, c) for c in RC_CLIENTS],
    },
})

# Stream scenarios (issue 22): publish with confirms from 1 producer (16 B and
# 1 KB), then read it all back from `first` with 1 and 10 consumers, over both
# protocols. Each run writes to streams of its own ({R}: the run), so a read
# from `first` finds exactly the N messages ({N}: --messages) of its run. {T}
# bounds each phase in time.
ST_SIZES = (("16", 16), ("1k", 1024))
ST_READERS = (1, 10)
SCENARIOS.update({
    "ST1": {
        "title": "streams over the stream protocol (rstream 1.1.1, compat-tests/bench/streams.py): publish {N}"
                 " with confirms (1 producer, send_batch of 100, at most 10,000 unconfirmed: stream-perf-test's"
                 " defaults), then read them from first with 1 and 10 consumers",
        "stream": True,
        "phases": [p for tag, size in ST_SIZES for p in (
            [(f"pub-{tag}", f"publish --stream bench-st1-{tag}-r{{R}} --count {{N}} --size {size} --timeout {{T}}",
              "rstream")]
            + [(f"read-{tag}-x{c}", f"read --stream bench-st1-{tag}-r{{R}} --count {{N}} --consumers {c}"
                f" --timeout {{T}}", "rstream") for c in ST_READERS])],
    },
    "ST2": {
        "title": "streams over AMQP 0-9-1 (x-queue-type stream): publish {N} with confirms (stablemq perf, 1"
                 " producer, confirm window 1000), then read them with basic.consume x-stream-offset first"
                 " (the Go program on amqp091-go, prefetch 1000, multi-ack 100) with 1 and 10 consumers",
        "stream": True,
        "phases": [p for tag, size in ST_SIZES for p in (
            [(f"pub-{tag}", f"-x 1 -y 0 -s {size} --persistent -c 1000 -C {{N}} --timeout {{T}} --no-purge"
              f" --queue-args x-queue-type=stream -u bench-st2-{tag}-r{{R}}", "perf")]
            + [(f"read-{tag}-x{c}", f"--producers 0 --consumers {c} --queue-type stream --offset first"
                f" --count {{N}} --prefetch 1000 --multi-ack 100 --duration {{T}} --queue bench-st2-{tag}-r{{R}}",
                "go") for c in ST_READERS])],
    },
})
BROKERS = ("stablemq", "rabbitmq")


def phases_of(spec: dict, clients: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(name, template, client) of a scenario's phases; in a real-client
    scenario, only those of `clients` (None: all)."""
    out = [(p[0], p[1], p[2] if len(p) > 2 else "perf") for p in spec["phases"]]
    if not spec.get("real") or clients is None:
        return out
    return [p for p in out if p[2] in clients]


def load_command(client: str, uri: str, args: list[str], a: argparse.Namespace,
                 broker: tuple[str, list[int]] = ("", [])) -> list[str]:
    """The command line of one phase's load program; broker = (name, pids), for
    the stream protocol's port and the CPU that streams.py measures."""
    if client == "rstream":
        port = dict(x.split("=", 1) for x in a.stream or []).get(broker[0])
        if not port or not a.stream_py:
            sys.exit(f"bench.py: a stream protocol phase needs --stream-py and --stream {broker[0]}=PORT")
        streams_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "streams.py")
        return [a.stream_py, streams_py, args[0], "--port", port,
                "--pids", "+".join(str(p) for p in broker[1]), *args[1:]]
    if client == "perf":
        return [a.perf, "perf", "--uri", uri, *args, "--json"]
    if client == "go":
        if not a.go:
            sys.exit("bench.py: a Go phase needs --go")
        return [a.go, "--uri", uri, *args]
    if client == "java":
        if not a.java_cp:
            sys.exit("bench.py: a Java phase needs --java-cp")
        return ["java", "-XX:+UseSerialGC", "-cp", a.java_cp, "PerfTest", "--uri", uri, *args]
    sys.exit(f"bench.py: unknown client {client}")


def phase_args(template: str, duration: float, backlog: int, messages: int = 0, run: int = 1,
               stream: bool = False) -> list[str]:
    d = f"{duration:g}"
    d7 = f"{3 * duration:g}"
    # S6 phases: bounded by --timeout; a broker slower than 1000 msg/s times out.
    # Stream phases: 10 readers of N each at no less than 2000 msg/s in all.
    t = f"{max(120, backlog // 1000 + 60)}" if not stream else f"{max(120, messages * 10 // 2000)}"
    return shlex.split(template.format(D=d, D7=d7, B=backlog, T=t, N=messages, R=run))


# --- small commands --------------------------------------------------------------

# One picker for the suite runner and the bench: 20000-31999, off the kernel's
# ephemeral range (see suitectl.free_ports).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "suites"))
from suitectl import free_ports  # noqa: E402


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_amqp(port: int, timeout: float, pid: int) -> None:
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        if not alive(pid):
            sys.exit(f"broker process {pid} exited before it listened on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.settimeout(5)
                s.sendall(b"AMQP\x00\x00\x09\x01")
                data = s.recv(7)
                if len(data) >= 3 and data[0] == 1 and data[1:3] == b"\x00\x00":
                    return
                last = f"unexpected reply {data!r}"
        except OSError as e:
            last = str(e)
        time.sleep(0.25)
    sys.exit(f"broker did not answer AMQP on 127.0.0.1:{port} within {timeout:.0f} s ({last})")


def wait_smq_master(url: str, timeout: float, ctl: str) -> int:
    """Wait until `stablemq ctl cluster-status --json` shows every node reachable,
    each one master or slave, and all agreeing on one master; print its id."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = subprocess.run([ctl, "ctl", "--url", url, "cluster-status", "--json"],
                               capture_output=True, text=True, timeout=10)
            nodes = json.loads(r.stdout) if r.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            nodes, last = None, str(e)
        if nodes:
            masters = {n["id"] for n in nodes if n.get("role") == "master"}
            ok = (len(masters) == 1 and all(n.get("reachable") for n in nodes)
                  and all(n.get("role") in ("master", "slave") for n in nodes)
                  and all(n.get("master") in masters for n in nodes))
            if ok:
                print(masters.pop())
                return 0
            last = "; ".join(f"node {n.get('id')}: {n.get('role')}, master {n.get('master')},"
                             f" reachable {n.get('reachable')}" for n in nodes)
        time.sleep(0.5)
    print(f"no single master within {timeout:.0f} s ({last})", file=sys.stderr)
    return 1


def machine() -> None:
    model = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    mem_kib = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    with open("/proc/loadavg") as fh:
        load = " ".join(fh.read().split()[:3])
    print(f"cpu: {model}, {os.cpu_count()} logical CPUs (nproc {len(os.sched_getaffinity(0))})")
    print(f"ram: {mem_kib / 1048576:.1f} GiB; kernel: {platform.system()} {platform.release()}")
    print(f"load average (1/5/15 min): {load}")


# --- /proc sampling --------------------------------------------------------------

def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime ticks) of pid, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # after the comm: state ppid ... utime is field 14 of stat, i.e. index 11 here
    return int(f[1]), int(f[11]) + int(f[12])


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def hwm_kib(roots: list[int]) -> int:
    """The largest VmHWM (peak RSS over its life) in each node's process tree,
    summed over the nodes."""
    total = 0
    for root in roots:
        best = 0
        for pid in process_tree([root]):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    for line in fh:
                        if line.startswith("VmHWM:"):
                            best = max(best, int(line.split()[1]))
            except OSError:
                pass
        total += best
    return total


def process_tree(roots: list[int]) -> list[int]:
    """The roots and all their descendants."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class Sampler:
    """CPU ticks and RSS of a broker's process trees (one per node) over time."""

    def __init__(self, roots: list[int]):
        self.roots = roots
        self.pids = process_tree(roots)
        self.found_at = time.monotonic()
        self.samples: list[tuple[float, int, int]] = []  # (t, ticks, rss KiB)

    def sample(self) -> None:
        now = time.monotonic()
        if now - self.found_at > 2.0:
            self.pids = process_tree(self.roots)
            self.found_at = now
        ticks = rss = 0
        for p in self.pids:
            st = _stat(p)
            if st:
                ticks += st[1]
                rss += _rss_kib(p)
        self.samples.append((now, ticks, rss))

    def cpu_s(self, t0: float, t1: float) -> tuple[float, float]:
        """CPU seconds and wall seconds between the samples nearest t0 and t1."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return 0.0, 0.0
        return (inside[-1][1] - inside[0][1]) / CLK_TCK, inside[-1][0] - inside[0][0]

    def peak_rss_kib(self) -> int:
        return max((s[2] for s in self.samples), default=0)


def busy_ticks() -> int:
    """Non-idle CPU ticks of the whole machine (all CPUs), from /proc/stat."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest is inside user)
    return f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)


def load_1m() -> float:
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


def perf_deadline_s(args: list[str]) -> float:
    """How long perf may take before it is killed: its own --timeout (default
    -z + 30, or 300 with -C) plus a minute of slack for setup and teardown."""
    def opt(*names):
        for i, x in enumerate(args[:-1]):
            if x in names:
                return float(args[i + 1])
        return None
    t = opt("--timeout")
    if t is None:
        z = opt("-z", "--duration", "--time")
        t = z + 30 if z is not None else 300
    return t + 60


def smq_master(mgmt_urls: list[str]) -> dict | None:
    """{master, epoch} of the highest-epoch master among the nodes that answer
    GET /api/nodes (StableMQ's management API), or None if none does."""
    best = None
    for url in mgmt_urls:
        req = urllib.request.Request(url.rstrip("/") + "/api/nodes",
                                     headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})  # guest:guest
        try:
            with urllib.request.urlopen(req, timeout=3) as resp:
                nodes = json.load(resp)
        except (OSError, ValueError):
            continue
        for n in nodes:
            if n.get("role") == "master" and n.get("reachable", True):
                if best is None or n.get("epoch", 0) > best["epoch"]:
                    best = {"master": n["id"], "epoch": n.get("epoch", 0)}
        if best:
            return best
    return best


def run_perf(cmd: list[str], pids: list[int], log, master: tuple | None = None,
             idle_pids: list[int] | None = None) -> dict:
    """One perf run with the broker (every node's process tree) sampled; returns
    the result record. With master = (id, mgmt urls), the StableMQ master is
    checked before and after the run. idle_pids: the other broker, which is up
    but has no load; its CPU during the run is recorded too (it is part of the
    "other processes")."""
    shown = " ".join(shlex.quote(c) for c in [os.path.basename(cmd[0]), *cmd[1:]])
    print(f"    $ {shown}", file=log, flush=True)
    cluster_before = smq_master(master[1]) if master else None
    load_before = load_1m()
    sampler = Sampler(pids)
    idle = Sampler(idle_pids) if idle_pids else None
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = time.process_time()
    busy0 = busy_ticks()
    sampler.sample()
    if idle:
        idle.sample()
    started = time.monotonic()
    deadline = started + perf_deadline_s(cmd)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Read the output in the background so a large report never blocks perf.
    out: dict[str, str] = {}

    def reader(name, stream):
        out[name] = stream.read()

    threads = [threading.Thread(target=reader, args=(n, s)) for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in threads:
        t.start()
    killed = False
    while proc.poll() is None:
        if time.monotonic() > deadline and not killed:
            # perf bounds itself with --timeout; this is the backstop if it hangs.
            proc.kill()
            killed = True
        time.sleep(SAMPLE_S)
        sampler.sample()
    for t in threads:
        t.join()
    ended = time.monotonic()
    sampler.sample()
    if idle:
        idle.pids = process_tree(idle.roots)
        idle.sample()
    busy1 = busy_ticks()
    self_cpu = time.process_time() - self0
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    perf_cpu = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
    rec: dict = {"command": shown, "exit_code": proc.returncode, "wall_s": ended - started,
                 "load_1m_before": load_before, "load_1m_after": load_1m(), "killed": killed,
                 "broker_pids": pids, "client_cpu_s": perf_cpu}
    try:
        rec["perf"] = json.loads(out.get("stdout", "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        rec["perf"] = None
        rec["stderr"] = out.get("stderr", "")[-2000:]
    cpu_total, _ = sampler.cpu_s(started - 1, ended + 1)
    rec["broker_cpu_s"] = cpu_total
    if rec["perf"] and rec["perf"].get("broker_cpu_s") is not None:
        # The load program measured the broker over its phase alone (streams.py).
        rec["broker_cpu_s_sampled"] = cpu_total
        rec["broker_cpu_s"] = rec["perf"]["broker_cpu_s"]
    # Everything else the machine did meanwhile (other builds and tests): the
    # machine's busy time less the broker, perf and this sampler.
    other = (busy1 - busy0) / CLK_TCK - cpu_total - perf_cpu - self_cpu
    rec["other_cpu_cores"] = max(0.0, other) / max(ended - started, 1e-9)
    if idle and len(idle.samples) >= 2:
        # Of which the other broker (idle, no load) used this much.
        rec["idle_broker_cpu_cores"] = ((idle.samples[-1][1] - idle.samples[0][1]) / CLK_TCK
                                        / max(idle.samples[-1][0] - idle.samples[0][0], 1e-9))
    rec["broker_peak_rss_kib"] = sampler.peak_rss_kib()
    rec["broker_hwm_kib"] = hwm_kib(pids)
    rec["broker_dead_pids"] = [p for p in pids if not alive(p)]
    rec["broker_alive"] = not rec["broker_dead_pids"]
    if master:
        rec["expected_master"] = master[0]
        rec["cluster_before"] = cluster_before
        rec["cluster_after"] = smq_master(master[1])
    # Steady-state window: the second half of the timed run, leaving out its last
    # second (perf exits a few ms after its -z deadline).
    dur = (rec["perf"] or {}).get("settings", {}).get("duration_s")
    if dur:
        cpu_w, wall_w = sampler.cpu_s(ended - 1 - dur / 2, ended - 1)
        rec["broker_window_cpu_pct"] = 100 * cpu_w / wall_w if wall_w > 0 else None
        rec["broker_window_s"] = wall_w
    return rec


def check(rec: dict) -> str | None:
    """Why this run does not count as having moved messages, or None."""
    p = rec.get("perf")
    if p is None:
        return f"perf printed no result (exit {rec['exit_code']}): {rec.get('stderr', '').strip()[:300]}"
    if rec.get("killed"):
        return "perf overran its --timeout by a minute and was killed"
    if rec["exit_code"] != 0 or p.get("errors") or p.get("timed_out"):
        return f"perf exit {rec['exit_code']}, timed out {p.get('timed_out')}, errors {p.get('errors')}"
    s = p["settings"]
    if s["producers"] > 0 and p["published"] == 0:
        return "nothing was published"
    if s["consumers"] > 0 and p["consumed"] == 0:
        return "nothing was consumed"
    if s["confirm_window"] > 0 and p["confirmed"] == 0:
        return "nothing was confirmed"
    if not rec["broker_alive"]:
        return f"a broker process died (pids {rec.get('broker_dead_pids')})"
    if "expected_master" in rec:
        want = rec["expected_master"]
        for when in ("before", "after"):
            c = rec.get(f"cluster_{when}")
            if c is None:
                return f"no StableMQ node said who is master {when} the run"
            if c["master"] != want:
                return (f"StableMQ's master was node {c['master']} (epoch {c['epoch']}) {when} the run,"
                        f" not node {want}: a failover")
        if rec["cluster_before"]["epoch"] != rec["cluster_after"]["epoch"]:
            return (f"StableMQ's epoch went from {rec['cluster_before']['epoch']} to"
                    f" {rec['cluster_after']['epoch']} during the run: a failover")
    return None


def scenario(a: argparse.Namespace) -> int:
    spec = SCENARIOS[a.name]
    brokers = []
    for b in a.broker:
        name, rest = b.split("=", 1)
        uri, pids = rest.rsplit(",", 1)
        brokers.append((name, uri, [int(x) for x in pids.split("+")]))
    masters = {}
    for m in a.master or []:
        name, rest = m.split("=", 1)
        mid, urls = rest.split(",", 1)
        masters[name] = (int(mid), urls.split("+"))
    os.makedirs(a.out, exist_ok=True)
    clients = a.clients.split(",") if a.clients else None
    if not phases_of(spec, clients):
        print(f"==> {a.name}: no phase for the clients {a.clients}", flush=True)
        return 0
    title = spec["title"].format(B=a.backlog, N=f"{a.messages:,}")
    print(f"==> {a.name}: {title}", flush=True)
    kept = phases_of(spec, clients)
    left_out = [f"{p[0]} (client {p[2]})" for p in phases_of(spec) if p not in kept]
    if left_out:
        print(f"    --clients {a.clients}: not running {', '.join(left_out)}", flush=True)
    failed = 0
    for run in range(1, a.runs + 1):
        order = brokers if run % 2 == 1 else list(reversed(brokers))
        for name, uri, pids in order:
            phases = []
            for phase, template, client in phases_of(spec, clients):
                idle = [p for n2, _, ps in brokers if n2 != name for p in ps]
                args = phase_args(template, a.duration, a.backlog, a.messages, run, is_stream(a.name))
                cmd = load_command(client, uri, args, a, (name, pids))
                rec = run_perf(cmd, pids, sys.stdout, masters.get(name), idle)
                rec["client"] = client
                rec["phase"] = phase
                why = check(rec)
                rec["failure"] = why
                phases.append(rec)
                if why:
                    break
                time.sleep(1)  # let the broker settle between phases and runs
            result = {"scenario": a.name, "title": title, "broker": name, "run": run, "nodes": len(pids),
                      "duration_s": a.duration, "backlog": a.backlog, "messages": a.messages,
                      "clients": a.clients, "phases": phases}
            with open(os.path.join(a.out, f"{a.name}-{name}-{run}.json"), "w") as fh:
                json.dump(result, fh, indent=1)
            bad = [p["failure"] for p in phases if p["failure"]]
            if bad:
                failed += 1
                print(f"    FAILED {a.name} run {run} on {name}: {bad[0]}", flush=True)
            else:
                other = max(p["other_cpu_cores"] for p in phases)
                idle = max((p.get("idle_broker_cpu_cores", 0.0) for p in phases), default=0.0)
                print(f"    {a.name} run {run}/{a.runs} {name}: {summary_line(a.name, metrics(result))}"
                      f" (other processes: {other:.2f} cores, of which the idle other broker {idle:.2f})",
                      flush=True)
    return 1 if failed else 0


# --- metrics and the table ---------------------------------------------------------
# (key, label, unit, higher_is_better)
S2_METRICS = [("confirm_rate", "confirmed rate", "msg/s", True),
              ("consume_rate", "consume rate", "msg/s", True),
              ("confirm_p50", "confirm latency p50", "ms", False),
              ("confirm_p99", "confirm latency p99", "ms", False),
              ("cpu_per_m", "broker CPU per million msgs", "s", False),
              ("peak_rss", "broker peak RSS", "MiB", False)]
METRICS = {
    "S1": [("consume_rate", "end-to-end (consume) rate", "msg/s", True),
           ("publish_rate", "publish rate", "msg/s", True),
           ("cpu_per_m", "broker CPU per million msgs", "s", False),
           ("peak_rss", "broker peak RSS", "MiB", False)],
    "S2": S2_METRICS,
    "S3": S2_METRICS,
    "S3p": S2_METRICS,
    "S4": S2_METRICS,
    "S5": [m for k in S5_RATES_K for m in (
               (f"r{k}k_confirm_rate", f"at {k}k msg/s: confirmed rate", "msg/s", True),
               (f"r{k}k_confirm_p50", f"at {k}k msg/s: confirm latency p50", "ms", False),
               (f"r{k}k_confirm_p99", f"at {k}k msg/s: confirm latency p99", "ms", False),
               (f"r{k}k_e2e_p50", f"at {k}k msg/s: end-to-end latency p50", "ms", False),
               (f"r{k}k_e2e_p99", f"at {k}k msg/s: end-to-end latency p99", "ms", False))]
          + [("cpu_per_m", "broker CPU per million msgs (all rates)", "s", False),
             ("peak_rss", "broker peak RSS (all rates)", "MiB", False)],
    "S6": [("fill_rate", "fill (confirmed) rate", "msg/s", True),
           ("drain_rate", "drain rate", "msg/s", True),
           ("peak_rss", "broker peak RSS", "MiB", False),
           ("cpu_per_m", "broker CPU per million msgs", "s", False)],
    "S7": [("cpu_pct", "broker CPU (steady 2nd half)", "% of a core", False),
           ("peak_rss", "broker peak RSS", "MiB", False),
           ("consume_rate", "delivered", "msg/s", True),
           ("e2e_p99", "end-to-end latency p99", "ms", False)],
}


# The metric(s) shown per run under the table: (label, keys).
HEADLINE = {"S1": ("consume msg/s", ["consume_rate"]),
            "S2": ("confirmed msg/s", ["confirm_rate"]),
            "S3": ("confirmed msg/s", ["confirm_rate"]),
            "S3p": ("confirmed msg/s", ["confirm_rate"]),
            "S4": ("confirmed msg/s", ["confirm_rate"]),
            "S5": ("end-to-end p99 ms at 1k / 10k / 50k msg/s", [f"r{k}k_e2e_p99" for k in S5_RATES_K]),
            "S6": ("fill / drain msg/s", ["fill_rate", "drain_rate"]),
            "S7": ("broker CPU %", ["cpu_pct"])}


def _real_metrics(name: str) -> list[tuple[str, str, str, bool]]:
    """Per phase of a real-client scenario: the rate (confirmed, or consumed
    without confirms), its latency p50 and p99, and broker CPU per message."""
    rows = []
    for ph, template, _ in phases_of(SCENARIOS[name]):
        confirms = "--confirm" in template or " -c " in template
        what = "confirmed rate" if confirms else "consume rate"
        lat = "confirm latency" if confirms else "end-to-end latency"
        rows += [(f"{ph}_rate", f"{ph}: {what}", "msg/s", True),
                 (f"{ph}_p50", f"{ph}: {lat} p50", "ms", False),
                 (f"{ph}_p99", f"{ph}: {lat} p99", "ms", False),
                 (f"{ph}_cpu_us", f"{ph}: broker CPU per message", "us", False)]
    rows.append(("peak_rss", "broker peak RSS (all phases)", "MiB", False))
    return rows


def _stream_metrics(name: str) -> list[tuple[str, str, str, bool]]:
    """Per row of a stream scenario: the confirmed rate (pub-*) or the read
    rate, every consumer's messages counted (read-*), and broker CPU per message."""
    rows = []
    for ph, _, _ in phases_of(SCENARIOS[name]):
        what = "confirmed rate" if ph.startswith("pub-") else "read rate (all consumers)"
        rows += [(f"{ph}_rate", f"{ph}: {what}", "msg/s", True),
                 (f"{ph}_cpu_us", f"{ph}: broker CPU per message", "us", False)]
    rows.append(("peak_rss", "broker peak RSS (all rows)", "MiB", False))
    return rows


for _name, _spec in SCENARIOS.items():
    if _spec.get("real") or _spec.get("stream"):
        METRICS[_name] = _stream_metrics(_name) if _spec.get("stream") else _real_metrics(_name)
        HEADLINE[_name] = ("msg/s per phase (" + ", ".join(ph for ph, _, _ in phases_of(_spec)) + ")",
                           [f"{ph}_rate" for ph, _, _ in phases_of(_spec)])


def is_real(name: str) -> bool:
    return bool(SCENARIOS.get(name, {}).get("real"))


def is_stream(name: str) -> bool:
    return bool(SCENARIOS.get(name, {}).get("stream"))


def is_cluster(name: str) -> bool:
    return bool(SCENARIOS.get(name, {}).get("cluster"))


def metrics(result: dict) -> dict:
    ph = {p["phase"]: p for p in result["phases"]}
    m: dict = {}
    cpu = sum(p["broker_cpu_s"] for p in result["phases"])
    moved = sum(max(p["perf"]["published"], p["perf"]["consumed"]) for p in result["phases"] if p.get("perf"))
    m["cpu_per_m"] = cpu / (moved / 1e6) if moved else None
    m["peak_rss"] = max(p["broker_peak_rss_kib"] for p in result["phases"]) / 1024
    if "run" in ph and ph["run"].get("perf"):
        p = ph["run"]["perf"]
        for k in ("publish_rate", "confirm_rate", "consume_rate"):
            m[k] = p[k]
        cl, el = p.get("confirm_latency_us"), p.get("e2e_latency_us")
        m["confirm_p50"] = cl["p50"] / 1000 if cl else None
        m["confirm_p99"] = cl["p99"] / 1000 if cl else None
        m["e2e_p99"] = el["p99"] / 1000 if el else None
        m["cpu_pct"] = ph["run"].get("broker_window_cpu_pct")
    for k in S5_RATES_K:
        p = (ph.get(f"r{k}k") or {}).get("perf")
        if p:
            cl, el = p.get("confirm_latency_us"), p.get("e2e_latency_us")
            m[f"r{k}k_confirm_rate"] = p["confirm_rate"]
            m[f"r{k}k_confirm_p50"] = cl["p50"] / 1000 if cl else None
            m[f"r{k}k_confirm_p99"] = cl["p99"] / 1000 if cl else None
            m[f"r{k}k_e2e_p50"] = el["p50"] / 1000 if el else None
            m[f"r{k}k_e2e_p99"] = el["p99"] / 1000 if el else None
    if is_real(result["scenario"]) or is_stream(result["scenario"]):
        for rec in result["phases"]:
            p = rec.get("perf")
            if not p:
                continue
            name = rec["phase"]
            confirms = p["settings"].get("confirm_window", 0) > 0
            m[f"{name}_rate"] = p["confirm_rate"] if confirms else p["consume_rate"]
            lat = p.get("confirm_latency_us") if confirms else p.get("e2e_latency_us")
            m[f"{name}_p50"] = lat["p50"] / 1000 if lat else None
            m[f"{name}_p99"] = lat["p99"] / 1000 if lat else None
            moved = max(p["published"], p["consumed"])
            m[f"{name}_cpu_us"] = rec["broker_cpu_s"] / moved * 1e6 if moved else None
            # The load program's CPU in cores: over its phase as it reports it
            # (streams.py; stablemq perf's cpu.cores), else over its whole run.
            m[f"{name}_client_cores"] = (p.get("client_cores") or (p.get("cpu") or {}).get("cores")
                                         or rec.get("client_cpu_s", 0.0) / max(rec.get("wall_s", 0.0), 1e-9))
    if "fill" in ph and ph["fill"].get("perf"):
        m["fill_rate"] = ph["fill"]["perf"]["confirm_rate"]
    if "drain" in ph and ph["drain"].get("perf"):
        m["drain_rate"] = ph["drain"]["perf"]["consume_rate"]
    return m


def fmt(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "msg/s":
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def summary_line(name: str, m: dict) -> str:
    return ", ".join(f"{label} {fmt(m.get(k), unit)} {unit}" for k, label, unit, _ in METRICS[name])


def table(a: argparse.Namespace) -> int:
    results: dict[tuple[str, str], list[dict]] = {}
    titles: dict[str, str] = {}
    failed: dict[tuple[str, str], int] = {}
    loads: list[float] = []
    client_cores: list[float] = []
    others: list[float] = []
    per_run: dict[tuple[str, str], list[tuple[int, dict | None, float, float | None]]] = {}
    ran: dict[str, set[str]] = {}  # per scenario, the phases some run of either broker ran
    clients_seen: dict[str, set[str]] = {}  # per scenario, the --clients it ran with
    for fn in sorted(os.listdir(a.dir)):
        if not fn.endswith(".json") or fn.count("-") < 2:
            continue
        with open(os.path.join(a.dir, fn)) as fh:
            r = json.load(fh)
        titles[r["scenario"]] = r["title"]
        ran.setdefault(r["scenario"], set()).update(p["phase"] for p in r["phases"])
        clients_seen.setdefault(r["scenario"], set()).add(r.get("clients") or "all")
        key = (r["scenario"], r["broker"])
        other = max((p.get("other_cpu_cores", 0.0) for p in r["phases"]), default=0.0)
        idle = max((p["idle_broker_cpu_cores"] for p in r["phases"] if "idle_broker_cpu_cores" in p), default=None)
        if any(p["failure"] for p in r["phases"]):
            failed[key] = failed.get(key, 0) + 1
            per_run.setdefault(key, []).append((r["run"], None, other, idle))
            continue
        results.setdefault(key, []).append(metrics(r))
        per_run.setdefault(key, []).append((r["run"], results[key][-1], other, idle))
        for p in r["phases"]:
            loads.extend(p[k] for k in ("load_1m_before", "load_1m_after") if k in p)
            cpu = (p.get("perf") or {}).get("cpu") or {}
            client_cores.append(cpu.get("cores") or 0.0)
            if "other_cpu_cores" in p:
                others.append(p["other_cpu_cores"])
    rows = []
    not_run = {name: [ph for ph, _, _ in phases_of(SCENARIOS[name]) if ph not in ran.get(name, set())]
               for name in titles if is_real(name) or is_stream(name)}
    for name in sorted(titles):
        for k, label, unit, higher in METRICS[name]:
            if any(k.startswith(ph + "_") for ph in not_run.get(name, [])):
                continue  # a phase no run ran (--clients left it out): no row of dashes
            med = {}
            for b in BROKERS:
                vals = [m[k] for m in results.get((name, b), []) if m.get(k) is not None]
                med[b] = statistics.median(vals) if vals else None
            s, r = med["stablemq"], med["rabbitmq"]
            ratio = f"{s / r:.2f}" if s is not None and r else "-"
            arrow = "higher is better" if higher else "lower is better"
            rows.append((name, f"{label}, {unit} ({arrow})", fmt(s, unit), fmt(r, unit), ratio))
    head = ("scenario", "metric", "StableMQ", "RabbitMQ", "ratio S/R")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|---|---:|---:|---:|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        w = [max(len(str(x[i])) for x in [head, *rows]) for i in range(5)]
        line = lambda x: "  ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i]) for i, c in enumerate(x))
        print(line(head))
        print("  ".join("-" * n for n in w))
        for row in rows:
            print(line(row))
    real = [n for n in sorted(titles) if is_real(n)]
    if real:
        print()
        real_table(real, results, a.markdown)
    streams = [n for n in sorted(titles) if is_stream(n)]
    if streams:
        print()
        stream_table(streams, results, a.markdown)
    runs = {k: len(v) for k, v in results.items()}
    print()
    for name, phs in sorted(not_run.items()):
        if phs:
            print(f"{name}: not run, so not in the tables: {', '.join(phs)}"
                  f" (--clients {' / '.join(sorted(clients_seen.get(name, set())))})")
    for name in sorted(titles):
        counts = ", ".join(f"{b} {runs.get((name, b), 0)} ok / {failed.get((name, b), 0)} failed" for b in BROKERS)
        print(f"{name}: {titles[name]} (runs: {counts})")
    print()
    print("Per run (headline metric; in brackets, the cores other processes used during the run, and of"
          " those, the cores the other broker used while it stood idle):")
    for name in sorted(titles):
        labels, keys = HEADLINE[name]
        if not_run.get(name):
            kept = [ph for ph, _, _ in phases_of(SCENARIOS[name]) if ph not in not_run[name]]
            labels, keys = f"msg/s per phase ({', '.join(kept)})", [f"{ph}_rate" for ph in kept]
        for b in BROKERS:
            cells = []
            for run, m, other, idle in sorted(per_run.get((name, b), []), key=lambda x: x[0]):
                v = "FAILED" if m is None else " / ".join(
                    fmt(m.get(k), next(u for k2, _, u, _ in METRICS[name] if k2 == k)) for k in keys)
                cells.append(f"run {run}: {v} ({other:.2f}; {'-' if idle is None else f'{idle:.2f}'})")
            print(f"  {name} {labels} {b}: {'; '.join(cells) or '-'}")
    if any(is_cluster(n) for n in titles):
        print("Cluster scenarios (S3, S3p, S4, S5, R3): 3 nodes per broker; broker CPU and RSS are summed over"
              " all three nodes' process trees.")
    if loads:
        print(f"1-minute load average around the runs: {min(loads):.2f} to {max(loads):.2f}"
              f" ({os.cpu_count()} CPUs, the benchmark itself included); other processes used"
              f" {statistics.median(others) if others else 0:.2f} cores (median, max"
              f" {max(others, default=0):.2f}) during the runs; the load generator (stablemq perf)"
              f" used at most {max(client_cores):.2f} cores.")
    print("Medians over the runs; ratio = StableMQ / RabbitMQ. Broker CPU per million msgs counts the"
          " larger of published and consumed; RSS is sampled every 0.2 s over the broker's process tree.")
    return 1 if failed else 0


def median_of(results: dict, name: str, broker: str, key: str):
    """The median of one metric over a scenario's runs on one broker, or None."""
    vals = [m[key] for m in results.get((name, broker), []) if m.get(key) is not None]
    return statistics.median(vals) if vals else None


def print_table(title: str, head: tuple, rows: list[tuple], markdown: bool, left: set[int]) -> None:
    """Print a side-by-side table: markdown, or padded columns, with the
    columns in `left` aligned left and the others (the figures) right."""
    print(title)
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i in left else "---:" for i in range(len(head))) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    w = [max(len(str(x[i])) for x in [head, *rows]) for i in range(len(head))]
    for row in [head, tuple("-" * n for n in w), *rows]:
        print("  ".join(str(c).ljust(w[i]) if i in left else str(c).rjust(w[i]) for i, c in enumerate(row)))


def stream_table(names: list[str], results: dict, markdown: bool) -> None:
    """The stream rows side by side: rate, ratio and broker CPU per message
    (medians over the runs)."""
    def med(name, broker, key):
        return median_of(results, name, broker, key)
    protocol = {"ST1": "stream protocol (rstream)", "ST2": "AMQP 0-9-1 (perf / amqp091-go)"}
    head = ("scenario", "protocol", "row", "StableMQ msg/s", "RabbitMQ msg/s", "ratio",
            "StableMQ CPU us/msg", "RabbitMQ CPU us/msg", "client cores (S / R)")
    rows = []
    for name in names:
        for ph, _, _ in phases_of(SCENARIOS[name]):
            s, r = med(name, "stablemq", f"{ph}_rate"), med(name, "rabbitmq", f"{ph}_rate")
            if s is None and r is None:
                continue
            tag, size = next((t, z) for t, z in ST_SIZES if ph.split("-")[1] == t)
            readers = ph.rsplit("-x", 1)[-1]
            what = (f"publish with confirms, {size} B" if ph.startswith("pub-")
                    else f"read from first, {readers} consumer{'' if readers == '1' else 's'}, {size} B")
            ratio = f"{s / r:.2f}" if s is not None and r else "-"
            rows.append((name, protocol.get(name, "?"), what, fmt(s, "msg/s"), fmt(r, "msg/s"), ratio,
                         fmt(med(name, "stablemq", f"{ph}_cpu_us"), "us"),
                         fmt(med(name, "rabbitmq", f"{ph}_cpu_us"), "us"),
                         " / ".join(fmt(med(name, b, f"{ph}_client_cores"), "cores") for b in BROKERS)))
    print_table("Streams (read rates count every consumer's messages), medians over the runs:",
                head, rows, markdown, left={0, 1, 2})


def real_table(names: list[str], results: dict, markdown: bool) -> None:
    """The real-client rows side by side, one line per phase: rate, ratio,
    broker CPU per message and latency (medians over the runs)."""
    def med(name, broker, key):
        return median_of(results, name, broker, key)
    head = ("scenario", "load", "StableMQ msg/s", "RabbitMQ msg/s", "ratio",
            "broker CPU per msg, us (S vs R)", "latency p50 / p99, ms (S vs R)")
    rows = []
    for name in names:
        for ph, _, _ in phases_of(SCENARIOS[name]):
            s, r = med(name, "stablemq", f"{ph}_rate"), med(name, "rabbitmq", f"{ph}_rate")
            if s is None and r is None:
                continue
            cpu = f"{fmt(med(name, 'stablemq', f'{ph}_cpu_us'), 'us')} vs {fmt(med(name, 'rabbitmq', f'{ph}_cpu_us'), 'us')}"
            lat = " vs ".join(f"{fmt(med(name, b, f'{ph}_p50'), 'ms')} / {fmt(med(name, b, f'{ph}_p99'), 'ms')}"
                              for b in BROKERS)
            ratio = f"{s / r:.2f}" if s is not None and r else "-"
            rows.append((name, ph, fmt(s, "msg/s"), fmt(r, "msg/s"), ratio, cpu, lat))
    print_table("Real clients (one socket write per publish), medians over the runs:",
                head, rows, markdown, left={0, 1, 5, 6})


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("free-ports")
    p.add_argument("n", type=int)
    p = sub.add_parser("wait-amqp")
    p.add_argument("port", type=int)
    p.add_argument("timeout", type=float)
    p.add_argument("pid", type=int)
    p = sub.add_parser("scenario")
    p.add_argument("name", choices=sorted(SCENARIOS))
    p.add_argument("--perf", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--backlog", type=int, default=1_000_000)
    p.add_argument("--broker", action="append", required=True, help="NAME=URI,PID[+PID...]")
    p.add_argument("--master", action="append", help="NAME=ID,MGMT_URL[+MGMT_URL...] (StableMQ cluster)")
    p.add_argument("--go", help="the Go load program (clients/go, built)")
    p.add_argument("--java-cp", help="class path of the Java load program (clients/java, built)")
    p.add_argument("--clients", help="comma-separated: run only the phases of these clients (go, java, perf)")
    p.add_argument("--messages", type=int, default=200_000, help="stream scenarios: messages per row")
    p.add_argument("--stream", action="append", help="NAME=PORT: the broker's stream protocol port (ST1)")
    p.add_argument("--stream-py", help="a Python with rstream, to run streams.py (ST1)")
    p = sub.add_parser("smq-master")
    p.add_argument("url")
    p.add_argument("timeout", type=float)
    p.add_argument("ctl")
    sub.add_parser("rmq-running-nodes")
    sub.add_parser("has-rstream")
    p = sub.add_parser("table")
    p.add_argument("dir")
    p.add_argument("--markdown", action="store_true")
    sub.add_parser("machine")
    a = ap.parse_args(argv)
    if a.cmd == "free-ports":
        free_ports(a.n)
    elif a.cmd == "wait-amqp":
        wait_amqp(a.port, a.timeout, a.pid)
    elif a.cmd == "scenario":
        return scenario(a)
    elif a.cmd == "table":
        return table(a)
    elif a.cmd == "machine":
        machine()
    elif a.cmd == "smq-master":
        return wait_smq_master(a.url, a.timeout, a.ctl)
    elif a.cmd == "has-rstream":
        try:
            import rstream  # noqa: F401
        except ImportError:
            return 1
    elif a.cmd == "rmq-running-nodes":
        st = json.load(sys.stdin)
        print(len(st.get("running_nodes", [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
