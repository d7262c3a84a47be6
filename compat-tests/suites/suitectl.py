#!/usr/bin/env python3
"""Small helpers for scripts/suites.sh (standard library only).

  suitectl.py free-ports N
      print N distinct free TCP ports on 127.0.0.1
  suitectl.py wait-amqp PORT TIMEOUT PID
      wait until 127.0.0.1:PORT answers an AMQP 0-9-1 protocol header with a
      connection.start frame; fail early if process PID exits
  suitectl.py wait-amqps PORT TIMEOUT PID CA_FILE CERT_FILE KEY_FILE
      the same over TLS: the server's certificate must chain to CA_FILE (the name
      is not checked), and the client shows CERT_FILE/KEY_FILE
  suitectl.py wait-http PORT TIMEOUT PID
      wait until 127.0.0.1:PORT answers an HTTP request (any status); fail early
      if process PID exits
  suitectl.py deselected SUITE FILE
      print the test ids of SUITE in the deselection file, one a line
  suitectl.py cargo-result SUITE LOG DESELECT_FILE OUT_JSON EXIT_STATUS
      turn the output of `cargo test` into the same JSON the pytest plugin writes
  suitectl.py mocha-grep SUITE DESELECT_FILE
      print a regular expression matching the full titles of SUITE's deselected
      mocha tests (for mocha --grep ... --invert); nothing if there are none
  suitectl.py mocha-result SUITE MOCHA_JSON DESELECT_FILE OUT_JSON EXIT_STATUS
      turn mocha's JSON reporter output into the same JSON the pytest plugin writes
  suitectl.py summarize RESULTS_DIR BROKER OUT_JSON WALL_SECONDS SUITE...
      print the per-suite table, write the summary JSON, exit 1 if a suite failed
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import ssl
import sys
import time


def free_ports(n: int) -> None:
    """n distinct loopback ports from 20000-31999, the range the Rust harness and
    scripts/lib/common.sh pick from. A port the kernel hands out for port 0 is in
    the ephemeral range (32768+), where a client socket of a suite running beside
    this one can take it before the broker binds it."""
    ports: list[int] = []
    for port in random.sample(range(20000, 32000), 12000):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        ports.append(port)
        if len(ports) == n:
            break
    if len(ports) < n:
        sys.exit(f"only {len(ports)} free ports in 20000-31999, want {n}")
    print(" ".join(map(str, ports)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by the shell) still answers kill -0.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def wait_amqp(port: int, timeout: float, pid: int, tls: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = "no attempt"
    what = "AMQPS" if tls else "AMQP"
    while time.monotonic() < deadline:
        if not _alive(pid):
            sys.exit(f"broker process {pid} exited before it listened on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                raw.settimeout(5)
                s = tls.wrap_socket(raw) if tls else raw
                s.sendall(b"AMQP\x00\x00\x09\x01")
                data = s.recv(7)
                # A method frame (type 1) on channel 0: connection.start.
                if len(data) >= 3 and data[0] == 1 and data[1:3] == b"\x00\x00":
                    return
                last = f"unexpected reply {data!r}"
        except OSError as e:  # ssl.SSLError is an OSError
            last = str(e)
        time.sleep(0.25)
    sys.exit(f"broker did not answer {what} on 127.0.0.1:{port} within {timeout:.0f} s ({last})")


def wait_amqps(port: int, timeout: float, pid: int, ca: str, cert: str, key: str) -> None:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    ctx.load_cert_chain(cert, key)
    wait_amqp(port, timeout, pid, ctx)


def wait_http(port: int, timeout: float, pid: int) -> None:
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while time.monotonic() < deadline:
        if not _alive(pid):
            sys.exit(f"broker process {pid} exited before it served HTTP on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.settimeout(5)
                s.sendall(b"GET /api/overview HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                data = s.recv(12)
                if data.startswith(b"HTTP/1."):
                    return
                last = f"unexpected reply {data!r}"
        except OSError as e:
            last = str(e)
        time.sleep(0.25)
    sys.exit(f"broker did not answer HTTP on 127.0.0.1:{port} within {timeout:.0f} s ({last})")


def load_deselections(path: str, suite: str) -> list[tuple[str, str]]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            cols = [c.strip() for c in line.split("|", 2)]
            if len(cols) != 3 or not all(cols):
                sys.exit(f"{path}: malformed line (want 'suite | test id | reason'): {line}")
            if cols[0] == suite:
                out.append((cols[1], cols[2]))
    return out


def deselected(suite: str, path: str) -> None:
    for test_id, _ in load_deselections(path, suite):
        print(test_id)


_RUNNING = re.compile(r"^\s*Running (?:unittests )?(\S+)")
_RESULT = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)")
_PANIC_HEAD = re.compile(r"^---- (\S+) stdout ----$")


def cargo_result(suite: str, log: str, desel_path: str, out: str, status: int) -> None:
    """Test ids are '<target>::<test name>' with target the test file's stem or 'lib'."""
    with open(log, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    target = "?"
    outcomes: dict[str, str] = {}
    tid_of: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        m = _RUNNING.match(line)
        if m:
            src = m.group(1)
            target = "lib" if src.startswith("src/") else os.path.splitext(os.path.basename(src))[0]
            current = None
            continue
        m = _RESULT.match(line)
        if m:
            name, res = m.groups()
            tid = f"{target}::{name}"
            outcomes[tid] = {"ok": "passed", "FAILED": "failed", "ignored": "skipped"}[res]
            tid_of[name] = tid
            continue
        m = _PANIC_HEAD.match(line)
        if m:
            current = sections.setdefault(tid_of.get(m.group(1), f"{target}::{m.group(1)}"), [])
            continue
        if line.startswith("failures:") or line.startswith("test result:"):
            current = None
        elif current is not None:
            current.append(line.strip())
    errors: dict[str, str] = {}
    for tid, body in sections.items():
        text = [l for l in body if l]
        for i, l in enumerate(text):
            if "panicked at" in l:
                errors[tid] = " ".join(text[i:i + 2])[:2000]
                break
        else:
            errors[tid] = " ".join(text[-2:])[:2000]
    desel = load_deselections(desel_path, suite)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for o in outcomes.values():
        counts[o] += 1
    result = {
        "suite": suite,
        **counts,
        "deselected": len(desel),
        "cargo_exit_status": status,
        "failures": [{"id": t, "error": errors.get(t, "")} for t, o in outcomes.items() if o == "failed"],
        "deselected_tests": [{"id": t, "reason": r} for t, r in desel],
    }
    if status != 0 and counts["failed"] == 0:
        # A build error or a test binary that crashed.
        tail = [l for l in lines if l.startswith("error")][-5:]
        result["failures"].append({"id": f"{suite}::<cargo>", "error": f"cargo test exited with {status}: {' / '.join(tail)}"})
        result["failed"] += 1
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")


def _mocha_title(test_id: str) -> str:
    """A mocha test's id is '<file>::<full title>'; mocha greps the title."""
    return test_id.split("::", 1)[1] if "::" in test_id else test_id


def mocha_grep(suite: str, path: str) -> None:
    """`*` in an entry is the only wildcard, as for the pytest suites."""
    titles = [_mocha_title(t) for t, _ in load_deselections(path, suite)]
    if titles:
        alts = "|".join(".*".join(re.escape(part) for part in t.split("*")) for t in titles)
        print(f"^(?:{alts})$")


def mocha_result(suite: str, report: str, desel_path: str, out: str, status: int) -> None:
    """Test ids are '<test file relative to the package>::<full title>'; a failed
    hook is a failure of its own (mocha then skips the tests it guards)."""
    try:
        with open(report, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        data = {"passes": [], "failures": [], "pending": [], "error": str(e)}

    def tid(t: dict) -> str:
        f = t.get("file") or "?"
        f = f[f.find("test/"):] if "test/" in f else f
        return f"{f}::{t.get('fullTitle', t.get('title', '?'))}"

    desel = load_deselections(desel_path, suite)
    failures = [{"id": tid(t), "error": str((t.get("err") or {}).get("message", ""))[:2000]}
                for t in data.get("failures", [])]
    result = {
        "suite": suite,
        "passed": len(data.get("passes", [])),
        "failed": len(failures),
        "skipped": len(data.get("pending", [])),
        "deselected": len(desel),
        "pytest_exit_status": 0 if failures or status == 0 else status,
        "failures": failures,
        "deselected_tests": [{"id": t, "reason": r} for t, r in desel],
    }
    if "error" in data:
        result["failures"].append({"id": f"{suite}::<mocha>", "error": f"no report ({data['error']}), exit {status}"})
        result["failed"] += 1
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")


def _load_run(results_dir: str, tag: str, suite: str) -> dict:
    """The result of one run (a suite, or one shard of it) with its meta data."""
    try:
        with open(os.path.join(results_dir, f"{tag}.json"), encoding="utf-8") as fh:
            r = json.load(fh)
    except (OSError, ValueError):
        r = {"suite": suite, "passed": 0, "failed": 1, "skipped": 0, "deselected": 0,
             "failures": [{"id": f"{tag}::<run>", "error": "the suite produced no result (crashed, or the broker did not start)"}]}
    meta_path = os.path.join(results_dir, f"{tag}.meta.json")
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as fh:
            r.update(json.load(fh))
    return r


_SHARD_FILE = re.compile(r"^(?P<suite>.+)-s(?P<k>[0-9]+)\.json$")


def _load_suite(results_dir: str, suite: str) -> dict:
    """A suite's result; the shards of a suite that ran in shards, added up."""
    shards = sorted(
        (int(m.group("k")), name)
        for name in os.listdir(results_dir)
        if (m := _SHARD_FILE.match(name)) and m.group("suite") == suite
    )
    if not shards:
        return _load_run(results_dir, suite, suite)
    runs = [_load_run(results_dir, f"{suite}-s{k}", suite) for k, _ in shards]
    r = {"suite": suite, "shards": len(runs), "version": runs[0].get("version", "")}
    for key in ("passed", "failed", "skipped", "deselected", "tls_passed", "tls_run"):
        r[key] = sum(x.get(key, 0) for x in runs)
    for key in ("failures", "deselected_tests"):
        r[key] = [item for x in runs for item in x.get(key, [])]
    # An entry is unused only when no shard used it.
    unused = [set(x.get("unused_deselections") or []) for x in runs]
    r["unused_deselections"] = sorted(set.intersection(*unused))
    statuses = [x.get("pytest_exit_status", x.get("cargo_exit_status", 0)) or 0 for x in runs]
    r["pytest_exit_status"] = next((s for s in statuses if s != 0), 0)
    r["broker_died"] = any(x.get("broker_died") for x in runs)
    r["wall_seconds"] = max(x.get("wall_seconds", x.get("seconds", 0)) for x in runs)
    r["seconds"] = max(x.get("seconds", 0) for x in runs)
    return r


def summarize(results_dir: str, broker: str, out: str, wall: float, suites: list[str]) -> None:
    rows, any_failed = [], False
    per_suite = {}
    for suite in suites:
        r = _load_suite(results_dir, suite)
        exit_status = r.get("pytest_exit_status", r.get("cargo_exit_status", 0))
        if r.get("failed", 0) == 0 and exit_status not in (0, None):
            # Collection error, interruption, usage error, or no test collected (5).
            r["failed"] = 1
            r.setdefault("failures", []).append({"id": f"{suite}::<run>", "error": f"test runner exited with {exit_status} without a failed test"})
        if r.get("broker_died"):
            r["failed"] = max(1, r.get("failed", 0))
            r.setdefault("failures", []).append({"id": f"{suite}::<broker>", "error": "the broker process exited during the suite"})
        any_failed |= r.get("failed", 0) > 0
        per_suite[suite] = r
        rows.append((suite, r.get("version", ""), r.get("passed", 0), r.get("failed", 0), r.get("deselected", 0),
                     r.get("skipped", 0), r.get("tls_passed", 0), r.get("tls_run", 0),
                     r.get("wall_seconds", r.get("seconds", 0))))
    print()
    print(f"==> third-party suites against {broker}")
    print(f"{'suite':<20} {'version':<8} {'passed':>7} {'failed':>7} {'deselected':>11} {'skipped':>8} {'TLS passed/run':>15} {'seconds':>8}")
    tot = [0, 0, 0, 0, 0, 0]
    for suite, ver, p, f, d, s, tp, tr, sec in rows:
        print(f"{suite:<20} {ver:<8} {p:>7} {f:>7} {d:>11} {s:>8} {f'{tp}/{tr}':>15} {sec:>8.0f}")
        tot = [tot[0] + p, tot[1] + f, tot[2] + d, tot[3] + s, tot[4] + tp, tot[5] + tr]
    print(f"{'total':<20} {'':<8} {tot[0]:>7} {tot[1]:>7} {tot[2]:>11} {tot[3]:>8} {f'{tot[4]}/{tot[5]}':>15} {wall:>8.0f}")
    print("(deselected: listed in compat-tests/suites/deselected.txt; TLS passed/run: of the tests run, those of the "
          "suite's TLS cases, over AMQPS, counted in passed/failed/skipped too)")
    for suite in suites:
        fails = per_suite[suite].get("failures", [])
        if fails:
            print(f"\nfailed in {suite} ({len(fails)}):")
            for f in fails[:200]:
                print(f"  {f['id']}: {f.get('error', '').splitlines()[0][:160] if f.get('error') else ''}")
            if len(fails) > 200:
                print(f"  ... and {len(fails) - 200} more (see {out})")
        unused = per_suite[suite].get("unused_deselections") or []
        if unused:
            print(f"\nwarning: deselection entries of {suite} that matched no test: {', '.join(unused)}")
    summary = {
        "broker": broker,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_seconds": round(wall, 1),
        "passed": tot[0], "failed": tot[1], "deselected": tot[2], "skipped": tot[3],
        "tls_passed": tot[4], "tls_run": tot[5],
        "suites": per_suite,
    }
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")
    print()
    # The plain closing line that CI-style readers understand.
    print(f"suites: {tot[0]} passed, {tot[1]} failed, {tot[3]} skipped")
    sys.exit(1 if any_failed else 0)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    cmd, args = argv[0], argv[1:]
    if cmd == "free-ports":
        free_ports(int(args[0]))
    elif cmd == "wait-amqp":
        wait_amqp(int(args[0]), float(args[1]), int(args[2]))
    elif cmd == "wait-amqps":
        wait_amqps(int(args[0]), float(args[1]), int(args[2]), args[3], args[4], args[5])
    elif cmd == "wait-http":
        wait_http(int(args[0]), float(args[1]), int(args[2]))
    elif cmd == "deselected":
        deselected(args[0], args[1])
    elif cmd == "cargo-result":
        cargo_result(args[0], args[1], args[2], args[3], int(args[4]))
    elif cmd == "mocha-grep":
        mocha_grep(args[0], args[1])
    elif cmd == "mocha-result":
        mocha_result(args[0], args[1], args[2], args[3], int(args[4]))
    elif cmd == "summarize":
        summarize(args[0], args[1], args[2], float(args[3]), args[4:])
    else:
        sys.exit(f"unknown command {cmd}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
