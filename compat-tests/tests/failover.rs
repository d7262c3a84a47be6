//! Failover of a real 3-node cluster (the shipped `examples/cluster/` configs):
//! lapin clients publish persistent messages with confirms while nodes are
//! SIGKILLed, SIGSTOPped and restarted, and every confirmed message must be
//! consumable afterwards (I1). Duplicates (republished after a lost confirm)
//! are allowed and reported, as with RabbitMQ quorum queues.
//!
//! Clients know every node's URI and nothing about roles: whichever node they
//! reach serves them (a slave proxies to the master).

use compat_tests::common;

use common::confirmed::*;
use compat_tests::cluster::Cluster;
use futures_lite::StreamExt;
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_master_mid_stream_loses_nothing() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    // Publish through a slave: the proxied client is closed when the master
    // dies, and reconnects to whichever node it reaches next.
    let through_slave = start_publisher(&cluster, "failover.kill", (master + 1) % 3);
    wait_confirms(&through_slave.record, 3000).await;
    let killed_at = Instant::now();
    blocking(|| cluster.kill9(master));
    let new_master = blocking(|| cluster.wait_master_other_than(Some(master), WAIT));
    let serving_after = killed_at.elapsed();
    wait_confirms(&through_slave.record, 3000).await;
    let record = through_slave.finish().await;
    // The stall a confirming publisher sees: the longest wait between two
    // rounds of confirms from the last round before the kill on.
    let first_after = record
        .confirm_times
        .iter()
        .position(|t| *t > killed_at)
        .expect("a confirm after the kill");
    let stall = record.confirm_times[first_after.saturating_sub(1)..]
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default();
    let ids = consume_all(&cluster.uris(), "failover.kill").await;
    let dups = assert_no_loss(&record.confirmed, &ids, "kill -9 master");
    assert_eq!(record.nacks, 0, "no publish was nacked");
    eprintln!(
        "kill -9 master (node {}): node {} master after {serving_after:?}; publisher stall {stall:?}; \
         {} confirmed, {} consumed, {dups} duplicates, lost 0",
        master + 1,
        new_master + 1,
        record.confirmed.len(),
        ids.len()
    );
    // The 3 s target is a measurement, not an assertion: a test must not fail
    // because the machine was slow (it is reported above, and in the notes).
    // The new master says so in its metrics, and counts the failover.
    let text = blocking(|| cluster.metrics(new_master));
    for want in [
        "stablemq_role{role=\"master\"} 1",
        "stablemq_failovers_total 1",
        "stablemq_quorum_ack_seconds",
        "stablemq_store_fsync_batch_messages",
        "stablemq_epoch ",
        "stablemq_stable_index ",
    ] {
        assert!(text.contains(want), "metrics lack {want:?}:\n{text}");
    }
    let slave = (0..3)
        .find(|i| *i != master && *i != new_master)
        .expect("a third node");
    let text = blocking(|| cluster.metrics(slave));
    assert!(
        text.contains("stablemq_role{role=\"slave\"} 1"),
        "the remaining node reports itself slave:\n{text}"
    );
    // /api/nodes on the slave: the dead node unreachable, one master.
    let nodes = blocking(|| cluster.api_nodes(slave));
    let nodes = nodes.as_array().expect("a list");
    assert_eq!(nodes.len(), 3);
    let dead = &nodes[master];
    assert_eq!(dead["reachable"], false, "{dead}");
    let masters: Vec<u64> = nodes
        .iter()
        .filter(|n| n["role"] == "master")
        .filter_map(|n| n["id"].as_u64())
        .collect();
    assert_eq!(masters, vec![new_master as u64 + 1], "{nodes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_one_store_publishing_continues() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    let victim = (master + 1) % 3;
    // The publisher talks to the master's node, which stays up.
    let p = start_publisher(&cluster, "failover.minority", master);
    wait_confirms(&p.record, 2000).await;
    blocking(|| cluster.kill9(victim));
    // One store of three is gone: two still make a quorum.
    wait_confirms(&p.record, 4000).await;
    let record = p.finish().await;
    assert_eq!(
        blocking(|| cluster.master()),
        Some(master),
        "losing a minority does not move the master"
    );
    let ids = consume_all(&cluster.uris(), "failover.minority").await;
    let dups = assert_no_loss(&record.confirmed, &ids, "kill one store");
    assert_eq!(
        dups, 0,
        "the master never lost its clients: nothing republished"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_down_blocks_confirms_and_restart_keeps_everything() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    let uri = cluster.uri(master);
    let (_conn, ch, _) = connect_any(std::slice::from_ref(&uri), 0).await;
    declare(&ch, "failover.majority").await.expect("declare");
    for round in 0..5 {
        let nacks = publish_round(
            &ch,
            "failover.majority",
            round * WINDOW..(round + 1) * WINDOW,
        )
        .await
        .expect("confirmed while all stores are up");
        assert_eq!(nacks, 0);
    }
    let before: BTreeSet<u64> = (0..5 * WINDOW).collect();
    let others: Vec<usize> = (0..3).filter(|i| *i != master).collect();
    for i in &others {
        blocking(|| cluster.kill9(*i));
    }
    // One store of three cannot make anything stable: the publish must not be
    // confirmed (neither acked nor nacked) while the others are down.
    let pending = ch
        .basic_publish(
            "".into(),
            "failover.majority".into(),
            BasicPublishOptions::default(),
            &u64::MAX.to_be_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish is accepted");
    // It stays pending, or the master steps down (check-quorum, after
    // 1 s) and closes the connection: either way it is neither acked nor
    // nacked.
    match timeout(Duration::from_secs(2), pending).await {
        Err(_) | Ok(Err(_)) => {}
        Ok(Ok(confirm)) => {
            panic!("a publish was confirmed with only one store of three up: {confirm:?}")
        }
    }
    for i in &others {
        blocking(|| cluster.start(*i));
    }
    let m = blocking(|| cluster.wait_master(WAIT));
    let ids = consume_all(&cluster.uris(), "failover.majority").await;
    assert_no_loss(&before, &ids, "two stores down, then back");
    eprintln!(
        "two stores down: nothing confirmed for 2 s; after restart node {} is master, {} messages there",
        m + 1,
        ids.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopped_master_steps_down_after_takeover() {
    let mut cluster = blocking(Cluster::start_example);
    let old = blocking(|| cluster.wait_master(WAIT));
    // Publishers on every node, so one is on the master itself.
    let pubs: Vec<Running> = (0..3)
        .map(|i| start_publisher(&cluster, &format!("failover.stop{i}"), i))
        .collect();
    for p in &pubs {
        wait_confirms(&p.record, 1000).await;
    }
    blocking(|| cluster.sigstop(old));
    let new = blocking(|| cluster.wait_master_other_than(Some(old), WAIT));
    for (i, p) in pubs.iter().enumerate() {
        if i != old {
            wait_confirms(&p.record, 1000).await;
        }
    }
    blocking(|| cluster.sigcont(old));
    // The old master hears of the higher epoch and steps down: one master.
    let deadline = Instant::now() + WAIT;
    loop {
        let s = blocking(|| cluster.status(old, Duration::from_secs(2)));
        if s.as_ref().is_some_and(|s| s.role != "master") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "old master still claims mastership: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for p in &pubs {
        wait_confirms(&p.record, 1000).await;
    }
    // No split brain: two nodes never claim mastership of one epoch (I2),
    // and the cluster settles on exactly one master. Under load a further
    // election may legitimately follow (then `new` is no longer the one), and
    // a scan that spans it can see the outgoing and the incoming master at
    // two epochs: scan again rather than call that a split brain.
    let deadline = Instant::now() + WAIT;
    loop {
        let masters: Vec<(usize, u64)> = (0..3)
            .filter_map(|i| {
                blocking(|| cluster.status(i, Duration::from_secs(2)))
                    .filter(|s| s.role == "master")
                    .map(|s| (i, s.epoch))
            })
            .collect();
        for (k, a) in masters.iter().enumerate() {
            for b in &masters[k + 1..] {
                assert_ne!(a.1, b.1, "two masters of one epoch: {masters:?}");
            }
        }
        if let [(m, _)] = masters[..] {
            if m != new {
                eprintln!(
                    "a further election after the wake-up: node {} is master",
                    m + 1
                );
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no single master after the old one woke: {masters:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (i, p) in pubs.into_iter().enumerate() {
        let record = p.finish().await;
        let queue = format!("failover.stop{i}");
        let ids = consume_all(&cluster.uris(), &queue).await;
        let dups = assert_no_loss(&record.confirmed, &ids, &queue);
        eprintln!(
            "{queue}: {} confirmed, {dups} duplicates",
            record.confirmed.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_cluster_restart_keeps_everything_confirmed() {
    let mut cluster = blocking(Cluster::start_example);
    let p = start_publisher(&cluster, "failover.restart", 0);
    wait_confirms(&p.record, 5000).await;
    // Every node dies at once, mid-stream.
    for i in 0..3 {
        blocking(|| cluster.kill9(i));
    }
    let record = p.finish_after_crash().await;
    for i in 0..3 {
        blocking(|| cluster.start(i));
    }
    blocking(|| cluster.wait_master(WAIT));
    let ids = consume_all(&cluster.uris(), "failover.restart").await;
    assert_no_loss(&record.confirmed, &ids, "whole-cluster restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proxied_client_is_closed_with_320_when_the_master_dies() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    let slave = (master + 1) % 3;
    let conn = Connection::connect(&cluster.uri(slave), ConnectionProperties::default())
        .await
        .expect("connect through a slave");
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, "failover.proxied")
        .await
        .expect("declare through the proxy");
    // lapin records connection events only while a listener exists.
    let mut events = Box::pin(conn.events_listener());
    blocking(|| cluster.kill9(master));
    let err = timeout(WAIT, async {
        loop {
            match events.next().await {
                Some(lapin::Event::Error(e)) => return e,
                Some(_) => {}
                None => panic!("connection event stream ended without an error"),
            }
        }
    })
    .await
    .expect("the proxied connection is closed");
    let code = match err.kind() {
        lapin::ErrorKind::ProtocolError(e) => e.get_id(),
        other => panic!("expected connection.close 320, got {other:?}"),
    };
    assert_eq!(
        code, 320,
        "CONNECTION_FORCED, as RabbitMQ closes connections: {err}"
    );
    // And the slave serves a new connection once a master is elected.
    blocking(|| cluster.wait_master_other_than(Some(master), WAIT));
    let (_c, ch, _) = connect_any(&[cluster.uri(slave)], 0).await;
    declare(&ch, "failover.proxied")
        .await
        .expect("declare after failover");
}

/// Wait until node `i` has applied at least what node `master` reports stable.
fn wait_caught_up(cluster: &Cluster, i: usize, master: usize) {
    let target = cluster
        .status(master, Duration::from_secs(2))
        .expect("master status")
        .stable_index;
    let deadline = Instant::now() + WAIT;
    while cluster
        .status(i, Duration::from_secs(2))
        .is_none_or(|s| s.stable_index < target)
    {
        assert!(
            Instant::now() < deadline,
            "node {} did not catch up to {target}",
            i + 1
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_nodes_catch_up_from_the_stores_and_can_take_over() {
    let mut cluster = blocking(Cluster::start_example);
    let first = blocking(|| cluster.wait_master(WAIT));
    let p = start_publisher(&cluster, "failover.catchup", first);
    wait_confirms(&p.record, 2000).await;
    // A slave dies and misses a lot: the master drops from memory what every
    // store holds, so the slave must catch up from a store when it returns.
    let b = (first + 1) % 3;
    blocking(|| cluster.kill9(b));
    wait_confirms(&p.record, 5000).await;
    blocking(|| cluster.start(b));
    blocking(|| wait_caught_up(&cluster, b, first));
    // Now make a restarted node the master: kill the master; if the third
    // node wins, restart the old master, let it catch up, and kill the winner.
    blocking(|| cluster.kill9(first));
    let mut master = blocking(|| cluster.wait_master_other_than(Some(first), WAIT));
    if master != b {
        blocking(|| cluster.start(first));
        blocking(|| wait_caught_up(&cluster, first, master));
        let previous = master;
        blocking(|| cluster.kill9(previous));
        master = blocking(|| cluster.wait_master_other_than(Some(previous), WAIT));
    }
    wait_confirms(&p.record, 2000).await;
    let record = p.finish().await;
    let ids = consume_all(&[cluster.uri(master)], "failover.catchup").await;
    let dups = assert_no_loss(&record.confirmed, &ids, "restarted nodes as master");
    eprintln!(
        "catch-up: node {} (restarted) is master; {} confirmed, {dups} duplicates, lost 0",
        master + 1,
        record.confirmed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_only_node_counts_towards_the_quorum() {
    // Node 3 runs `stablemq store`: two brokers, three stores.
    let mut cluster = blocking(|| Cluster::start_example_with(Some(2)));
    let status = blocking(|| cluster.status(2, Duration::from_secs(2))).expect("store status");
    assert_eq!(status.role, "store");
    let master = blocking(|| cluster.wait_master(WAIT));
    assert_ne!(master, 2, "a store-only node never serves");
    let other = 1 - master;
    let p = start_publisher(&cluster, "failover.store_only", master);
    wait_confirms(&p.record, 2000).await;
    // With the master's node gone, its store goes too: the other broker's
    // store and the store-only node are the quorum.
    blocking(|| cluster.kill9(master));
    let new = blocking(|| cluster.wait_master_other_than(Some(master), WAIT));
    assert_eq!(new, other);
    wait_confirms(&p.record, 2000).await;
    let record = p.finish().await;
    let ids = consume_all(&[cluster.uri(other)], "failover.store_only").await;
    assert_no_loss(&record.confirmed, &ids, "store-only quorum member");
}

/// The value of a Prometheus counter line `name{labels} value`, 0 if absent.
fn counter(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_behind_the_compacted_log_catches_up_by_snapshot_and_takes_over() {
    // Stores keep only 50 stable entries behind their stable index: a node
    // down for a while comes back below every peer's log base, where only
    // the stores' materialized state has what it missed.
    let mut cluster = blocking(|| Cluster::start_example_tuned(None, "store_retention = 50"));
    let first = blocking(|| cluster.wait_master(WAIT));
    let p = start_publisher(&cluster, "failover.snapshot", first);
    wait_confirms(&p.record, 1000).await;
    let b = (first + 1) % 3;
    blocking(|| cluster.kill9(b));
    // More than a pipeline window (8192 entries) behind: the master stops
    // keeping the log in memory for b's store too, so both halves of b
    // must catch up from the other stores.
    wait_confirms(&p.record, 10_000).await;
    blocking(|| cluster.start(b));
    blocking(|| wait_caught_up(&cluster, b, first));
    let metrics = blocking(|| cluster.metrics(b));
    let restored = counter(
        &metrics,
        "stablemq_snapshots_installed_total{role=\"broker\"}",
    );
    assert!(
        restored >= 1.0,
        "node {} did not restore its broker from a snapshot; metrics:\n{metrics}",
        b + 1
    );
    // The store may finish its snapshot just after the broker caught up.
    let deadline = std::time::Instant::now() + WAIT;
    while !cluster.log(b).contains("store caught up by snapshot") {
        assert!(
            std::time::Instant::now() < deadline,
            "node {}'s store did not install a snapshot; log:\n{}",
            b + 1,
            cluster.log(b)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A restarted node takes over: kill the master; if the third node wins,
    // restart the old master, let it catch up, and kill the winner.
    blocking(|| cluster.kill9(first));
    let mut master = blocking(|| cluster.wait_master_other_than(Some(first), WAIT));
    if master != b {
        blocking(|| cluster.start(first));
        blocking(|| wait_caught_up(&cluster, first, master));
        let previous = master;
        blocking(|| cluster.kill9(previous));
        master = blocking(|| cluster.wait_master_other_than(Some(previous), WAIT));
    }
    // Either b or the old master, restarted: both came back below the
    // stores' log bases, so the new master rebuilt its broker from a
    // snapshot plus the log suffix.
    let restores = counter(
        &blocking(|| cluster.metrics(master)),
        "stablemq_snapshots_installed_total{role=\"broker\"}",
    );
    assert!(
        restores >= 1.0,
        "the new master (node {}) did not restore from a snapshot",
        master + 1
    );
    wait_confirms(&p.record, 1000).await;
    let record = p.finish().await;
    let ids = consume_all(&[cluster.uri(master)], "failover.snapshot").await;
    let dups = assert_no_loss(&record.confirmed, &ids, "master restored from a snapshot");
    eprintln!(
        "snapshot catch-up: node {} restored from a snapshot and took over; \
         {} confirmed, {dups} duplicates, lost 0",
        master + 1,
        record.confirmed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_node_behind_the_compacted_log_catches_up_by_snapshot() {
    // As above, but node b is SIGSTOPped rather than killed: it comes back
    // with its memory (its broker's applied state, its store's log and
    // promise), far below every peer's log base, and with timers that
    // expired while it slept.
    let mut cluster = blocking(|| Cluster::start_example_tuned(None, "store_retention = 50"));
    let first = blocking(|| cluster.wait_master(WAIT));
    let p = start_publisher(&cluster, "failover.paused", first);
    wait_confirms(&p.record, 1000).await;
    let b = (first + 1) % 3;
    let before = blocking(|| cluster.status(b, Duration::from_secs(2)))
        .expect("b's status before the pause")
        .stable_index;
    blocking(|| cluster.sigstop(b));
    // Far more than a pipeline window (8192 entries) and the retention (50)
    // behind: the master drops the log from memory and the other stores
    // compact theirs past everything b holds.
    wait_confirms(&p.record, 10_000).await;
    blocking(|| cluster.sigcont(b));
    // Whoever serves now (b may campaign as it wakes), b catches up to it.
    let serving = blocking(|| cluster.wait_master(WAIT));
    blocking(|| wait_caught_up(&cluster, b, serving));
    // Both halves of b caught up by snapshot: the log they lacked is gone
    // from every peer. The store may finish just after the broker.
    let deadline = Instant::now() + WAIT;
    loop {
        let metrics = blocking(|| cluster.metrics(b));
        let restored = counter(
            &metrics,
            "stablemq_snapshots_installed_total{role=\"broker\"}",
        );
        let installed = cluster.log(b).contains("store caught up by snapshot");
        if restored >= 1.0 && installed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {} did not catch up by snapshot (broker restores {restored}, store \
             installed {installed}); metrics:\n{metrics}\nlog:\n{}",
            b + 1,
            cluster.log(b)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Publishing goes on, and exactly one node claims to be master: the
    // woken node neither kept nor grabbed a second mastership.
    wait_confirms(&p.record, 2000).await;
    let deadline = Instant::now() + WAIT;
    let masters = loop {
        let masters: Vec<usize> = (0..3)
            .filter(|i| {
                blocking(|| cluster.status(*i, Duration::from_secs(2)))
                    .is_some_and(|s| s.role == "master")
            })
            .collect();
        if masters.len() == 1 {
            break masters;
        }
        assert!(
            Instant::now() < deadline,
            "not exactly one master after node {} woke: {masters:?}",
            b + 1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let after = blocking(|| cluster.status(b, Duration::from_secs(2)))
        .expect("b's status after the pause")
        .stable_index;
    assert!(
        after > before + 10_000,
        "b applied {before} before the pause and only {after} after"
    );
    let record = p.finish().await;
    // Read everything back through b: its rebuilt state serves (as a
    // proxying slave or as master) and nothing confirmed is missing.
    let ids = consume_all(&[cluster.uri(b)], "failover.paused").await;
    let dups = assert_no_loss(&record.confirmed, &ids, "paused node caught up by snapshot");
    assert_eq!(record.nacks, 0, "no publish was nacked");
    eprintln!(
        "paused node {}: applied {before} before, {after} after; master node {}; \
         {} confirmed, {dups} duplicates, lost 0",
        b + 1,
        masters[0] + 1,
        record.confirmed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_cut_off_from_the_stores_steps_down_and_closes_clients_with_320() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    let conn = Connection::connect(&cluster.uri(master), ConnectionProperties::default())
        .await
        .expect("connect to the master");
    let ch = conn.create_channel().await.expect("channel");
    declare(&ch, "failover.check_quorum")
        .await
        .expect("declare on the master");
    let mut events = Box::pin(conn.events_listener());
    // Both other nodes die: the master's own store alone is no quorum, so
    // nothing can become stable there. Check-quorum (1 s by default) makes
    // it step down rather than leave its clients hanging.
    let others: Vec<usize> = (0..3).filter(|i| *i != master).collect();
    let cut_at = Instant::now();
    for i in &others {
        blocking(|| cluster.kill9(*i));
    }
    let err = timeout(WAIT, async {
        loop {
            match events.next().await {
                Some(lapin::Event::Error(e)) => return e,
                Some(_) => {}
                None => panic!("connection event stream ended without an error"),
            }
        }
    })
    .await
    .expect("the master closes its clients once it has no quorum");
    let closed_after = cut_at.elapsed();
    let code = match err.kind() {
        lapin::ErrorKind::ProtocolError(e) => e.get_id(),
        other => panic!("expected connection.close 320, got {other:?}"),
    };
    assert_eq!(code, 320, "CONNECTION_FORCED: {err}");
    let status = blocking(|| cluster.status(master, Duration::from_secs(2))).expect("status");
    assert_ne!(status.role, "master", "it no longer claims mastership");
    // With the other nodes back, a master serves again (any of the three).
    for i in &others {
        blocking(|| cluster.start(*i));
    }
    let now_master = blocking(|| cluster.wait_master(WAIT));
    let (_c, ch, _) = connect_any(&cluster.uris(), 0).await;
    declare(&ch, "failover.check_quorum")
        .await
        .expect("declare after the quorum is back");
    eprintln!(
        "check-quorum: node {} closed its clients {closed_after:?} after losing its quorum; \
         node {} is master again",
        master + 1,
        now_master + 1
    );
}
