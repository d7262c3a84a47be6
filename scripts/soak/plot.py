"""The PNG of a run: RSS, open fds, threads, disk and store lag per node
against minutes, with the warm-up shaded and each failover marked."""

import csv
import os

import matplotlib

matplotlib.use("Agg")  # no display: a file only
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [("rss_mb", "RSS (MiB)"), ("fds", "open fds"), ("threads", "threads"),
          ("disk_mb", "disk used (MiB)"), ("store_lag_max", "store lag, max per interval (entries)")]


def plot(out, warmup_min, failover_minutes, name="soak.png"):
    rows = list(csv.DictReader(open(os.path.join(out, "nodes.csv"))))
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(10, 13), sharex=True)
    for ax, (field, label) in zip(axes, PANELS):
        for node in sorted({r["node"] for r in rows}):
            pts = [(float(r["minute"]), float(r[field])) for r in rows
                   if r["node"] == node and r[field] != ""]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", lw=1,
                    label=f"node {node}")
        ax.axvspan(0, warmup_min, color="0.9", lw=0)
        for m in failover_minutes:
            ax.axvline(m, color="0.6", ls=":", lw=0.8)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        if field == "store_lag_max":
            # A restarted node reports its store empty until the store has
            # opened its log (docs/reliability.md): spikes of the whole log
            # beside a normal lag of tens of entries need a log scale.
            ax.set_yscale("symlog", linthresh=10)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", ncol=3)
    axes[0].set_title("StableMQ soak: 3 nodes, mixed load; grey: warm-up, dotted: kill -9 of the master")
    axes[-1].set_xlabel("minute")
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main():
    """Redraw OUT/soak.png from OUT/nodes.csv and OUT/summary.json."""
    import json
    import sys

    out = sys.argv[2]
    summary = json.load(open(os.path.join(out, "summary.json")))
    from .run import schedule
    warmup = schedule(summary["minutes"])[2]
    print(plot(out, warmup, [f["minute"] for f in summary["events"]["failovers"]]))
    return 0
