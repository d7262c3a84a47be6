"""Per-node readings: what a leak would show. Read from /proc and the data
directory directly (not from the broker's own reports), so a broker that
miscounts cannot hide anything."""

import csv
import os

NODE_FIELDS = ["minute", "node", "pid", "role", "rss_mb", "fds", "threads",
               "disk_mb", "store_lag_max", "store_lag_last", "rss_anon_mb", "rss_file_mb"]
CLUSTER_FIELDS = ["minute", "published", "confirmed", "deliveries", "queues",
                  "connections", "channels", "consumers", "api_polls",
                  "api_errors", "api_slowest_s", "failovers", "loadavg1"]


def proc_status(pid):
    """{VmRSS, RssAnon, RssFile (MiB), Threads} from /proc/PID/status. RSS
    is split because file-backed pages (mapped files) are bounded by the
    files and given back under pressure; anonymous ones are the heap."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0]) / 1024
                elif key == "Threads":
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def disk_used_mb(path):
    """Allocated bytes under path, as du counts them: the store's segment
    files are allocated up front (fallocate), so their length would mislead."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass  # a file compacted away while walking
    return total / (1024 * 1024)


def sample_node(node, minute, role, lag_max, lag_last):
    pid = node.pid
    st = proc_status(pid) if pid else {}
    return {
        "minute": round(minute, 2), "node": node.id, "pid": pid or "",
        "role": role or ("down" if pid is None else "?"),
        "rss_mb": _r(st.get("VmRSS")), "fds": _v(open_fds(pid) if pid else None),
        "threads": _v(st.get("Threads")), "disk_mb": _r(disk_used_mb(node.data)),
        "store_lag_max": _v(lag_max), "store_lag_last": _v(lag_last),
        "rss_anon_mb": _r(st.get("RssAnon")), "rss_file_mb": _r(st.get("RssFile")),
    }


def _r(x):
    return "" if x is None else round(x, 1)


def _v(x):
    return "" if x is None else x


class CsvLog:
    """A CSV written row by row and flushed, so a killed run keeps its data."""

    def __init__(self, path, fields):
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=fields)
        self.w.writeheader()
        self.f.flush()

    def row(self, row):
        self.w.writerow(row)
        self.f.flush()

    def close(self):
        self.f.close()


def read_series(path, field):
    """{node: [(minute, value)]} from a node CSV, blanks (node down) left out."""
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row[field] != "":
                out.setdefault(int(row["node"]), []).append(
                    (float(row["minute"]), float(row[field])))
    return out
