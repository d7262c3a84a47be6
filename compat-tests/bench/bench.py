#!/usr/bin/env python3
"""Helpers of compat-tests/bench/compare.sh (standard library only).

  bench.py free-ports N
      print N distinct free TCP ports on 127.0.0.1
  bench.py wait-amqp PORT TIMEOUT PID
      wait until 127.0.0.1:PORT answers the AMQP 0-9-1 header with
      connection.start; fail early if process PID exits
  bench.py scenario NAME --perf BIN --out DIR --runs N --duration S [--backlog N]
                    --broker stablemq=URI,PID --broker rabbitmq=URI,PID
      run one scenario's perf commands against every broker, RUNS times
      (alternating which broker goes first), sample each broker's CPU time and
      RSS from /proc while it runs, and write one JSON result per run to DIR;
      exit 1 if a run failed or moved no message
  bench.py table DIR [--markdown]
      print the comparison table (medians over the runs) of every result in DIR
  bench.py machine
      print the machine description (CPU, cores, RAM, kernel, load average)

Broker CPU is utime+stime of the broker's process and all its descendants
(RabbitMQ: the start script, beam.smp, erl_child_setup, ...), from
/proc/<pid>/stat; RSS is the sum of their VmRSS, sampled every 0.2 s.
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

CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.2

# --- scenarios -------------------------------------------------------------------
# Each scenario is a list of phases; a phase is one `stablemq perf` run. The same
# arguments go to both brokers. {D} is the duration in seconds, {B} the backlog.
SCENARIOS = {
    "S1": {
        "title": "transient, no confirms, auto-ack, 16 B, 1 producer 1 consumer",
        "phases": [("run", "-x 1 -y 1 -s 16 --auto-ack -u bench-s1 -z {D}")],
    },
    "S2": {
        "title": "persistent, confirm window 1000, prefetch 1000, multi-ack 100, 1 KB, 1x1, durable queue",
        "phases": [("run", "-x 1 -y 1 -s 1024 --persistent -c 1000 -q 1000 --multi-ack-every 100 -u bench-s2 -z {D}")],
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
PENDING = {
    "S3": "S2 on a 3-node cluster (3 stores, quorum 2) vs a 3-node RabbitMQ quorum queue",
    "S4": "S3 with 4 producers and 4 consumers on 4 queues (perf: -x 4 -y 4 --queues 4)",
    "S5": "fixed rates of 1k, 10k and 50k msg/s on S3's setup: confirm and end-to-end latency",
}
BROKERS = ("stablemq", "rabbitmq")


def phase_args(template: str, duration: float, backlog: int) -> list[str]:
    d = f"{duration:g}"
    d7 = f"{3 * duration:g}"
    # S6 phases: bounded by --timeout; a broker slower than 1000 msg/s times out.
    t = f"{max(120, backlog // 1000 + 60)}"
    return shlex.split(template.format(D=d, D7=d7, B=backlog, T=t))


# --- small commands --------------------------------------------------------------

def free_ports(n: int) -> None:
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    print(" ".join(map(str, ports)))


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


def hwm_kib(root: int) -> int:
    """The largest VmHWM (peak RSS over its life) in the broker's process tree."""
    best = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        best = max(best, int(line.split()[1]))
        except OSError:
            pass
    return best


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


class Sampler:
    """CPU ticks and RSS of a broker's process tree over time."""

    def __init__(self, root: int):
        self.root = root
        self.pids = process_tree(root)
        self.found_at = time.monotonic()
        self.samples: list[tuple[float, int, int]] = []  # (t, ticks, rss KiB)

    def sample(self) -> None:
        now = time.monotonic()
        if now - self.found_at > 2.0:
            self.pids = process_tree(self.root)
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


def run_perf(perf: str, uri: str, args: list[str], pid: int, log) -> dict:
    """One perf run with the broker sampled; returns the result record."""
    cmd = [perf, "perf", "--uri", uri, *args, "--json"]
    shown = " ".join(shlex.quote(c) for c in [os.path.basename(perf), *cmd[1:]])
    print(f"    $ {shown}", file=log, flush=True)
    load_before = load_1m()
    sampler = Sampler(pid)
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = time.process_time()
    busy0 = busy_ticks()
    sampler.sample()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Read the output in the background so a large report never blocks perf.
    out: dict[str, str] = {}

    def reader(name, stream):
        out[name] = stream.read()

    threads = [threading.Thread(target=reader, args=(n, s)) for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for t in threads:
        t.start()
    while proc.poll() is None:
        time.sleep(SAMPLE_S)
        sampler.sample()
    for t in threads:
        t.join()
    ended = time.monotonic()
    sampler.sample()
    busy1 = busy_ticks()
    self_cpu = time.process_time() - self0
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    perf_cpu = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
    rec: dict = {"command": shown, "exit_code": proc.returncode, "wall_s": ended - started,
                 "load_1m_before": load_before, "load_1m_after": load_1m()}
    try:
        rec["perf"] = json.loads(out.get("stdout", "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        rec["perf"] = None
        rec["stderr"] = out.get("stderr", "")[-2000:]
    cpu_total, _ = sampler.cpu_s(started - 1, ended + 1)
    rec["broker_cpu_s"] = cpu_total
    # Everything else the machine did meanwhile (other builds and tests): the
    # machine's busy time less the broker, perf and this sampler.
    other = (busy1 - busy0) / CLK_TCK - cpu_total - perf_cpu - self_cpu
    rec["other_cpu_cores"] = max(0.0, other) / max(ended - started, 1e-9)
    rec["broker_peak_rss_kib"] = sampler.peak_rss_kib()
    rec["broker_hwm_kib"] = hwm_kib(pid)
    rec["broker_alive"] = alive(pid)
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
        return "the broker process died"
    return None


def scenario(a: argparse.Namespace) -> int:
    spec = SCENARIOS[a.name]
    brokers = []
    for b in a.broker:
        name, rest = b.split("=", 1)
        uri, pid = rest.rsplit(",", 1)
        brokers.append((name, uri, int(pid)))
    os.makedirs(a.out, exist_ok=True)
    title = spec["title"].format(B=a.backlog)
    print(f"==> {a.name}: {title}", flush=True)
    failed = 0
    for run in range(1, a.runs + 1):
        order = brokers if run % 2 == 1 else list(reversed(brokers))
        for name, uri, pid in order:
            phases = []
            for phase, template in spec["phases"]:
                rec = run_perf(a.perf, uri, phase_args(template, a.duration, a.backlog), pid, sys.stdout)
                rec["phase"] = phase
                why = check(rec)
                rec["failure"] = why
                phases.append(rec)
                if why:
                    break
                time.sleep(1)  # let the broker settle between phases and runs
            result = {"scenario": a.name, "title": title, "broker": name, "run": run,
                      "duration_s": a.duration, "backlog": a.backlog, "phases": phases}
            with open(os.path.join(a.out, f"{a.name}-{name}-{run}.json"), "w") as fh:
                json.dump(result, fh, indent=1)
            bad = [p["failure"] for p in phases if p["failure"]]
            if bad:
                failed += 1
                print(f"    FAILED {a.name} run {run} on {name}: {bad[0]}", flush=True)
            else:
                other = max(p["other_cpu_cores"] for p in phases)
                print(f"    {a.name} run {run}/{a.runs} {name}: {summary_line(a.name, metrics(result))}"
                      f" (other processes: {other:.2f} cores)", flush=True)
    return 1 if failed else 0


# --- metrics and the table ---------------------------------------------------------
# (key, label, unit, higher_is_better)
METRICS = {
    "S1": [("consume_rate", "end-to-end (consume) rate", "msg/s", True),
           ("publish_rate", "publish rate", "msg/s", True),
           ("cpu_per_m", "broker CPU per million msgs", "s", False),
           ("peak_rss", "broker peak RSS", "MiB", False)],
    "S2": [("confirm_rate", "confirmed rate", "msg/s", True),
           ("consume_rate", "consume rate", "msg/s", True),
           ("confirm_p50", "confirm latency p50", "ms", False),
           ("confirm_p99", "confirm latency p99", "ms", False),
           ("cpu_per_m", "broker CPU per million msgs", "s", False),
           ("peak_rss", "broker peak RSS", "MiB", False)],
    "S6": [("fill_rate", "fill (confirmed) rate", "msg/s", True),
           ("drain_rate", "drain rate", "msg/s", True),
           ("peak_rss", "broker peak RSS", "MiB", False),
           ("cpu_per_m", "broker CPU per million msgs", "s", False)],
    "S7": [("cpu_pct", "broker CPU (steady 2nd half)", "% of a core", False),
           ("peak_rss", "broker peak RSS", "MiB", False),
           ("consume_rate", "delivered", "msg/s", True),
           ("e2e_p99", "end-to-end latency p99", "ms", False)],
}


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
    for fn in sorted(os.listdir(a.dir)):
        if not fn.endswith(".json") or fn.count("-") < 2:
            continue
        with open(os.path.join(a.dir, fn)) as fh:
            r = json.load(fh)
        titles[r["scenario"]] = r["title"]
        key = (r["scenario"], r["broker"])
        if any(p["failure"] for p in r["phases"]):
            failed[key] = failed.get(key, 0) + 1
            continue
        results.setdefault(key, []).append(metrics(r))
        for p in r["phases"]:
            loads.extend(p[k] for k in ("load_1m_before", "load_1m_after") if k in p)
            cpu = (p.get("perf") or {}).get("cpu") or {}
            client_cores.append(cpu.get("cores") or 0.0)
            if "other_cpu_cores" in p:
                others.append(p["other_cpu_cores"])
    rows = []
    for name in sorted(titles):
        for k, label, unit, higher in METRICS[name]:
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
    runs = {k: len(v) for k, v in results.items()}
    print()
    for name in sorted(titles):
        counts = ", ".join(f"{b} {runs.get((name, b), 0)} ok / {failed.get((name, b), 0)} failed" for b in BROKERS)
        print(f"{name}: {titles[name]} (runs: {counts})")
    for name, what in PENDING.items():
        print(f"{name}: pending the cluster ({what})")
    if loads:
        print(f"1-minute load average around the runs: {min(loads):.2f} to {max(loads):.2f}"
              f" ({os.cpu_count()} CPUs, the benchmark itself included); other processes used"
              f" {statistics.median(others) if others else 0:.2f} cores (median, max"
              f" {max(others, default=0):.2f}) during the runs; the load generator (stablemq perf)"
              f" used at most {max(client_cores):.2f} cores.")
    print("Medians over the runs; ratio = StableMQ / RabbitMQ. Broker CPU per million msgs counts the"
          " larger of published and consumed; RSS is sampled every 0.2 s over the broker's process tree.")
    return 1 if failed else 0


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
    p.add_argument("--broker", action="append", required=True, help="NAME=URI,PID")
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
