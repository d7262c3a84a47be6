"""A failover every few minutes: kill -9 of the current master (by pid),
restart it on the same data directory some seconds later."""

import time


def failover(cluster, down_seconds, log):
    """Kill the master, wait for a new one, restart the old one. Returns a
    record of what happened (the times are seconds from the kill)."""
    found = cluster.master()
    if found is None:
        log("failover: no master found, skipped")
        return None
    node, epoch = found
    killed_at = time.monotonic()
    cluster.kill9(node)
    new = cluster.wait_master(above_epoch=epoch, timeout=60)
    new_after = time.monotonic() - killed_at
    time.sleep(max(0.0, down_seconds - new_after))
    cluster.start(node)
    rec = {
        "killed": node.id, "epoch_before": epoch,
        "new_master": new[0].id if new else None,
        "epoch_after": new[1] if new else None,
        "new_master_after_s": round(new_after, 2) if new else None,
    }
    log(f"failover: killed node {node.id} (master, epoch {epoch}); "
        + (f"node {new[0].id} master in epoch {new[1]} after {new_after:.2f} s; "
           if new else "NO new master within 60 s; ")
        + f"node {node.id} restarted")
    return rec
