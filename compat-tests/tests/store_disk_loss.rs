//! A store whose disk is lost rejoins a real 3-node cluster (the shipped
//! `examples/cluster/` configs) without losing anything confirmed: lapin
//! clients publish persistent messages with confirms; a node is SIGKILLed,
//! its whole data directory deleted, and started again on an empty one. It
//! must not vote until it holds what its peers hold (it reports itself as
//! joining meanwhile), and once it has joined, the cluster must survive the
//! loss of another node with the wiped one in the quorum: every confirmed
//! message is consumed afterwards (I1).

use compat_tests::common;

use common::confirmed::*;
use compat_tests::cluster::Cluster;
use std::time::{Duration, Instant};

/// Node `i`'s store as its own `/api/nodes` reports it: `(joined, last_index)`.
fn own_store(cluster: &Cluster, i: usize) -> Option<(bool, u64)> {
    let nodes = cluster.api_nodes(i);
    let me = nodes
        .as_array()?
        .iter()
        .find(|n| n["id"].as_u64() == Some(i as u64 + 1))?;
    let store = &me["store"];
    Some((store["joined"].as_bool()?, store["last_index"].as_u64()?))
}

/// Wait until node `i` reports its store `joined` (or not).
fn wait_store_joined(cluster: &Cluster, i: usize, joined: bool) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some((j, last)) = own_store(cluster, i)
            && j == joined
        {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "node {} never reported its store joined = {joined}; logs:\n{}",
            i + 1,
            cluster.all_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_store_rejoins_and_carries_a_failover_without_loss() {
    // A short retention, so the wiped store also installs a peer's state.
    let mut cluster = blocking(|| Cluster::start_example_tuned(None, "store_retention = 50"));
    let master = blocking(|| cluster.wait_master(WAIT));
    let victim = (master + 1) % 3;
    let other = (master + 2) % 3;
    let running = start_publisher(&cluster, "disk-loss", other);
    wait_confirms(&running.record, 2_000).await;

    // The victim's disk is lost: SIGKILL, delete its whole data directory.
    blocking(|| cluster.kill9(victim));
    let data = cluster.dir().join(format!("node{}", victim + 1));
    assert!(data.is_dir(), "no data dir at {}", data.display());
    std::fs::remove_dir_all(&data).expect("wipe the data dir");
    wait_confirms(&running.record, 1_000).await;

    // It comes back on an empty disk while the third node is paused: with
    // only one peer answering it cannot join (it needs n - quorum + 1 = 2),
    // and says so.
    blocking(|| cluster.sigstop(other));
    blocking(|| cluster.start(victim));
    blocking(|| wait_store_joined(&cluster, victim, false));
    let table = blocking(|| {
        let url = format!("http://127.0.0.1:{}", cluster.nodes[victim].management_port);
        let out = std::process::Command::new(compat_tests::binary_path())
            .args(["ctl", "--url", &url, "cluster-status"])
            .output()
            .expect("run stablemq ctl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    assert!(
        table.contains("joining"),
        "cluster-status shows no joining store:\n{table}"
    );

    // The third node comes back: the wiped store catches up and joins.
    blocking(|| cluster.sigcont(other));
    let last = blocking(|| wait_store_joined(&cluster, victim, true));
    assert!(last > 0, "the rejoined store holds nothing");
    wait_confirms(&running.record, 1_000).await;

    // Now the master dies: the wiped store is half of the remaining quorum.
    blocking(|| cluster.kill9(master));
    let new_master = blocking(|| cluster.wait_master_other_than(Some(master), WAIT));
    assert_ne!(new_master, master);
    wait_confirms(&running.record, 500).await;
    let record = running.finish().await;
    assert_eq!(record.nacks, 0, "nacks");

    let ids = consume_all(&cluster.uris(), "disk-loss").await;
    let duplicates = assert_no_loss(&record.confirmed, &ids, "after the rejoin and failover");
    eprintln!(
        "confirmed {}, read back {}, duplicates {duplicates}, lost 0",
        record.confirmed.len(),
        ids.len()
    );
    assert!(
        cluster.log(victim).contains("store joined"),
        "the wiped store never logged its join"
    );
}
