//! The disk alarm is cluster-wide, as RabbitMQ's: a slave low on disk blocks
//! the master's publishers (connection.blocked), and the block lifts when
//! that node is gone (a node that is down takes its alarm with it).
//!
//! The slave is made "low on disk" without filling anything: it restarts with
//! a `disk_free_limit_bytes` far above any disk's size, so its own alarm is
//! on, as it would be on a full disk. (`full_disk/` fills real disks on a
//! single node.) The master reads its peers' alarms through their
//! node-status with a proof of the cluster cookie, which a stranger cannot
//! make.

use compat_tests::cluster::Cluster;
use compat_tests::common::confirmed::blocking;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
/// A petabyte: no test machine's disk has that much free.
const HUGE_LIMIT: &str = "disk_free_limit_bytes = 1000000000000000\n";

/// What node `i`'s own node-status says of its disk alarm, with guest.
fn own_disk_alarm(cluster: &Cluster, i: usize) -> Option<bool> {
    let v = cluster.try_api(i, "/api/stablemq/node-status").ok()?;
    v["disk_free_alarm"].as_bool()
}

/// Wait until `cond` holds, or fail with `what`.
async fn until(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < WAIT, "no {what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slave_low_on_disk_blocks_the_masters_publishers_until_it_is_gone() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    let slave = (master + 1) % 3;
    // The slave comes back with a limit no disk meets: its alarm is on.
    blocking(|| cluster.kill9(slave));
    let config = cluster.config(slave).to_path_buf();
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(&config, format!("{HUGE_LIMIT}{text}")).expect("config");
    blocking(|| cluster.start(slave));
    until("the slave's own disk alarm", || {
        own_disk_alarm(&cluster, slave) == Some(true)
    })
    .await;
    assert_eq!(
        own_disk_alarm(&cluster, master),
        Some(false),
        "the master's own disk is fine: only the peer's alarm may block"
    );

    // A publisher on the master is blocked.
    let conn = Connection::connect(&cluster.uri(master), ConnectionProperties::default())
        .await
        .expect("connect to the master");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    ch.queue_declare(
        "alarm".into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    let publish = || {
        ch.basic_publish(
            "".into(),
            "alarm".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default().with_delivery_mode(2),
        )
    };
    // The first publish makes this connection a publisher (RabbitMQ blocks
    // publishers only); its confirm may or may not come before the block.
    let _first = publish().await.expect("publish");
    let blocked_after = until("connection.blocked on the master", || {
        conn.status().blocked()
    })
    .await;
    let master_log = cluster.log(master);
    assert!(
        master_log.contains("resource alarm on another node: low on disk"),
        "the master did not say why:\n{master_log}"
    );

    // The node low on disk goes away: its alarm goes with it.
    blocking(|| cluster.kill9(slave));
    let unblocked_after = until("connection.unblocked after the node left", || {
        !conn.status().blocked()
    })
    .await;
    let confirm = match publish().await {
        Ok(pending) => pending.await,
        Err(e) => Err(e),
    };
    let confirm = match confirm {
        Ok(c) => c,
        // On a loaded machine the kill can cost the master its lease (the
        // other slave did not hear it in time and an election moved the
        // master): the alarm must be gone there too, so a publisher of the
        // new master is not blocked and gets its confirm.
        Err(e) if format!("{e:?}").contains("no longer the master") => {
            let now = blocking(|| cluster.wait_master(WAIT));
            eprintln!(
                "the master moved from node {} to node {} after the kill",
                master + 1,
                now + 1
            );
            confirmed_on_master(&cluster, now).await
        }
        Err(e) => panic!("publish after the block: {e:?}"),
    };
    assert!(confirm.is_ack(), "{confirm:?}");
    eprintln!(
        "cluster disk alarm: node {} low on disk blocked the master (node {})'s publisher \
         after {blocked_after:?}; unblocked {unblocked_after:?} after that node was killed",
        slave + 1,
        master + 1
    );
}

/// A node's status answers a user, or a peer with the cluster cookie's
/// proof; a made-up proof is refused like no credentials at all.
#[test]
fn node_status_refuses_a_forged_node_proof() {
    let cluster = Cluster::start_example();
    cluster.wait_master(WAIT);
    let url = format!(
        "http://127.0.0.1:{}/api/stablemq/node-status",
        cluster.nodes[0].management_port
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let forged = format!("{now}.{}", "ab".repeat(32));
    let r = ureq::get(&url)
        .header("x-stablemq-node-proof", &forged)
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .expect("an answer");
    assert_eq!(r.status().as_u16(), 401, "a forged proof was accepted");
}

/// A publish with confirms on a new connection to node `i` (not blocked,
/// as the alarm went with the node that had it), and its confirm.
async fn confirmed_on_master(cluster: &Cluster, i: usize) -> lapin::Confirmation {
    let conn = Connection::connect(&cluster.uri(i), ConnectionProperties::default())
        .await
        .expect("connect to the new master");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    ch.queue_declare(
        "alarm".into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    let confirm = tokio::time::timeout(WAIT, async {
        ch.basic_publish(
            "".into(),
            "alarm".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish on the new master")
        .await
        .expect("confirm on the new master")
    })
    .await
    .expect("a confirm from the new master within the wait");
    assert!(
        !conn.status().blocked(),
        "the new master's publisher is blocked"
    );
    confirm
}
