//! Node authentication on a real 3-node cluster (the shipped
//! `examples/cluster/` configs, which set a cookie): a node restarted with
//! the wrong cookie is kept out of the replication on both sides and says
//! why in its log, the other two keep a quorum and confirm publishes, and
//! once its cookie is fixed it catches up and can carry a failover. And the
//! same cluster with mutual TLS between nodes replicates and fails over.

use compat_tests::common;

use common::*;
use compat_tests::cluster::Cluster;
use lapin::BasicProperties;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use std::time::{Duration, Instant};

/// Bound on waits for the cluster (elections, catch-up), longer than
/// `common::WAIT` for one AMQP reply.
const CLUSTER_WAIT: Duration = Duration::from_secs(60);
const COOKIE_LINE: &str = "cookie = \"stablemq-example-cluster-cookie\"";
const FAILED: &str = "node authentication failed";

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn set_cookie(cluster: &Cluster, i: usize, line: &str) {
    let path = cluster.config(i);
    let text = std::fs::read_to_string(path).expect("read config");
    let old = text
        .lines()
        .find(|l| l.starts_with("cookie = "))
        .expect("the example config sets a cookie")
        .to_string();
    std::fs::write(path, text.replace(&old, line)).expect("write config");
}

/// Wait until `cond` holds, polling; panics with `what` after `CLUSTER_WAIT`.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what} within {CLUSTER_WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Node `node`'s store lag as `GET /api/nodes` on node `on` reports it.
fn store_lag(cluster: &Cluster, on: usize, node: usize) -> Option<u64> {
    let nodes = cluster.api_nodes(on);
    nodes.as_array().expect("a list")[node]["store_lag"].as_u64()
}

/// Node `node`'s entry in `GET /api/nodes` on node `on`.
fn node_report(cluster: &Cluster, on: usize, node: usize) -> serde_json::Value {
    cluster.api_nodes(on).as_array().expect("a list")[node].clone()
}

/// Whether node `node` replicates (the master hears it on an authenticated
/// node-to-node connection), as `GET /api/nodes` on node `on` reports it.
fn replicating(cluster: &Cluster, on: usize, node: usize) -> Option<bool> {
    node_report(cluster, on, node)["replicating"].as_bool()
}

/// Node `node`'s row of `stablemq ctl cluster-status` run against node `on`,
/// split into columns.
fn ctl_row(cluster: &Cluster, on: usize, node: usize) -> Vec<String> {
    let url = format!("http://127.0.0.1:{}", cluster.nodes[on].management_port);
    let out = std::process::Command::new(compat_tests::binary_path())
        .args(["ctl", "--url", &url, "cluster-status"])
        .output()
        .expect("run stablemq ctl");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = (node + 1).to_string();
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cols| cols.first() == Some(&id))
        .unwrap_or_else(|| panic!("no row for node {id}:\n{table}"))
}

/// Publish `n` persistent messages with confirms to `queue`; each must be acked.
async fn publish_confirmed(uri: &str, queue: &str, n: u64) {
    let conn = connect_uri(uri).await;
    let ch = confirm_channel(&conn).await;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(&ch, queue, durable, FieldTable::default()).await;
    for id in 0..n {
        let props = BasicProperties::default().with_delivery_mode(2);
        let body = id.to_be_bytes();
        let confirm = publish_full(&ch, "", queue, Default::default(), &body, props).await;
        assert!(confirm.is_ack(), "publish {id} not acked");
    }
}

/// How many distinct messages `queue` holds, consumed from `uri`.
async fn count_messages(uri: &str, queue: &str) -> usize {
    let conn = connect_uri(uri).await;
    let ch = channel(&conn).await;
    let (count, _) = queue_counts(&ch, queue).await;
    let mut consumer = consume(&ch, queue, "count", true).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..count {
        seen.insert(next_delivery(&mut consumer).await.data);
    }
    seen.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_with_the_wrong_cookie_is_kept_out_until_fixed() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(CLUSTER_WAIT));
    let victim = (master + 1) % 3;
    for i in 0..3 {
        assert!(
            !cluster.log(i).contains("not authenticated"),
            "node {} runs unauthenticated although the example sets a cookie",
            i + 1
        );
    }
    blocking(|| {
        wait_for("every store caught up", || {
            store_lag(&cluster, master, victim) == Some(0)
        })
    });
    blocking(|| {
        wait_for("every node replicating", || {
            (0..3).all(|i| replicating(&cluster, master, i) == Some(true))
        })
    });

    // Restart the victim with another cookie.
    blocking(|| cluster.kill9(victim));
    set_cookie(
        &cluster,
        victim,
        "cookie = \"not-the-clusters-cookie-at-all\"",
    );
    let (before_victim, before_master) = (
        cluster.log(victim).matches(FAILED).count(),
        cluster.log(master).matches(FAILED).count(),
    );
    blocking(|| cluster.start(victim));
    blocking(|| {
        wait_for("both sides log the refused handshake", || {
            cluster.log(victim).matches(FAILED).count() > before_victim
                && cluster.log(master).matches(FAILED).count() > before_master
        })
    });
    let log = cluster.log(master);
    assert!(
        log.contains("cluster cookie mismatch"),
        "master log:\n{log}"
    );

    // The other two make a quorum: publishing is confirmed without it.
    let uri = cluster.uri(master);
    publish_confirmed(&uri, "auth.q", 300).await;
    // Its management port answers, but its store got none of it.
    let lag = blocking(|| store_lag(&cluster, master, victim));
    assert!(
        lag.is_some_and(|l| l >= 300),
        "store lag of the outsider: {lag:?}"
    );
    // It answers HTTP, but the master does not hear it replicate, from
    // any node's point of view, in /api/nodes and in ctl cluster-status.
    blocking(|| {
        wait_for("the outsider shown as not replicating", || {
            replicating(&cluster, master, victim) == Some(false)
        })
    });
    let report = blocking(|| node_report(&cluster, victim, victim));
    assert_eq!(report["reachable"], true, "{report}");
    assert_eq!(report["replicating"], false, "{report}");
    let other = (victim + 1) % 3;
    assert_eq!(
        blocking(|| replicating(&cluster, master, other)),
        Some(true),
        "the other member"
    );
    let row = blocking(|| ctl_row(&cluster, master, victim));
    assert_eq!(
        (row[3].as_str(), row[4].as_str()),
        ("yes", "no"),
        "reachable but not replicating: {row:?}"
    );
    let status =
        blocking(|| cluster.status(victim, Duration::from_secs(2))).expect("victim status");
    assert_ne!(status.role, "master", "an outsider elected itself");
    assert_eq!(blocking(|| cluster.master()), Some(master));
    assert!(
        status.stable_index
            < blocking(|| cluster.status(master, Duration::from_secs(2)))
                .expect("master status")
                .stable_index,
        "the outsider learned the log anyway"
    );

    // Fixed: it catches up, and then its store is needed for a quorum after
    // the master dies, so the next failover proves it is a full member.
    blocking(|| cluster.kill9(victim));
    set_cookie(&cluster, victim, COOKIE_LINE);
    blocking(|| cluster.start(victim));
    blocking(|| {
        wait_for("the fixed node's store caught up", || {
            store_lag(&cluster, master, victim) == Some(0)
        })
    });
    assert_eq!(
        blocking(|| replicating(&cluster, master, victim)),
        Some(true),
        "the fixed node replicates"
    );
    assert_eq!(blocking(|| ctl_row(&cluster, master, victim))[4], "yes");
    let target = blocking(|| cluster.status(master, Duration::from_secs(2)))
        .expect("master status")
        .stable_index;
    blocking(|| {
        wait_for("the fixed node caught up", || {
            cluster
                .status(victim, Duration::from_secs(2))
                .is_some_and(|s| s.stable_index >= target)
        })
    });
    blocking(|| cluster.kill9(master));
    let new_master = blocking(|| cluster.wait_master_other_than(Some(master), CLUSTER_WAIT));
    assert_eq!(
        count_messages(&cluster.uri(new_master), "auth.q").await,
        300
    );
}

/// A CA and one certificate for 127.0.0.1 that every node uses, as PEM files;
/// returns the `[cluster]` lines that turn TLS on.
fn tls_lines(dir: &std::path::Path) -> String {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).expect("CA certificate");
    let key = KeyPair::generate().expect("node key");
    let mut node = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    node.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let cert = node
        .signed_by(&key, &ca, &ca_key)
        .expect("node certificate");
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("write PEM");
        path.display().to_string()
    };
    format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\ntls_ca_file = \"{}\"",
        write("node.crt", cert.pem()),
        write("node.key", key.serialize_pem()),
        write("ca.crt", ca.pem()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_with_mutual_tls_replicates_and_fails_over() {
    let pki = tempfile::tempdir().expect("temp dir");
    let lines = tls_lines(pki.path());
    let mut cluster = blocking(|| Cluster::start_example_tuned(None, &lines));
    let master = blocking(|| cluster.wait_master(CLUSTER_WAIT));
    for i in 0..3 {
        let log = cluster.log(i);
        assert!(
            log.contains("uses mutual TLS"),
            "node {} log:\n{log}",
            i + 1
        );
    }
    publish_confirmed(&cluster.uri(master), "tls.q", 200).await;
    blocking(|| cluster.kill9(master));
    let new_master = blocking(|| cluster.wait_master_other_than(Some(master), CLUSTER_WAIT));
    assert_eq!(count_messages(&cluster.uri(new_master), "tls.q").await, 200);
    for i in (0..3).filter(|i| *i != master) {
        let log = cluster.log(i);
        assert!(!log.contains(FAILED), "node {} log:\n{log}", i + 1);
    }
}
