//! How many async worker threads a node runs (`worker_threads`,
//! `--worker-threads`; src/config/mod.rs, `Config::worker_threads`), against
//! the real binary: a single node one per core unless told otherwise, the
//! nodes of a co-located cluster (examples/cluster/, all on 127.0.0.1) a
//! third of the cores each, at least one. Checked on what the node says at
//! start-up and on the worker threads it runs.

use compat_tests::cluster::Cluster;
use compat_tests::{Broker, BrokerOptions, binary_path};
use std::time::Duration;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The worker count a node logged at start-up.
fn logged_workers(log: &str) -> Option<usize> {
    let line = log.lines().find(|l| l.contains(" worker threads ("))?;
    let before = line.split(" worker threads (").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// The tokio worker threads of a process (blocking-pool threads carry the
/// same name, but a node that has served nothing has none).
fn worker_threads_of(pid: u32) -> usize {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the node's /proc");
    dir.filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end() == "tokio-rt-worker")
        })
        .count()
}

fn broker(opts: BrokerOptions) -> Broker {
    let b = Broker::start_with(opts);
    // The log line is written before the runtime starts; give the file a moment.
    for _ in 0..50 {
        if logged_workers(&b.log()).is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    b
}

#[test]
fn a_single_node_runs_one_worker_per_core_or_what_it_is_told() {
    let b = broker(BrokerOptions::default());
    assert_eq!(logged_workers(&b.log()), Some(cores()), "{}", b.log());
    assert_eq!(worker_threads_of(b.pid()), cores());
    drop(b);

    let b = broker(BrokerOptions {
        config_toml: Some("worker_threads = 3\n".into()),
        ..Default::default()
    });
    assert_eq!(logged_workers(&b.log()), Some(3), "{}", b.log());
    assert_eq!(worker_threads_of(b.pid()), 3);
    drop(b);

    // The flag wins over the file.
    let b = broker(BrokerOptions {
        config_toml: Some("worker_threads = 3\n".into()),
        extra_args: vec!["--worker-threads".into(), "1".into()],
    });
    assert_eq!(logged_workers(&b.log()), Some(1), "{}", b.log());
    assert_eq!(worker_threads_of(b.pid()), 1);
}

#[test]
fn zero_workers_is_refused() {
    let out = std::process::Command::new(binary_path())
        .args(["serve", "--worker-threads", "0"])
        .output()
        .expect("run the binary");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--worker-threads"), "{err}");
}

#[test]
fn co_located_cluster_nodes_share_the_cores() {
    let cluster = Cluster::start_example();
    cluster.wait_master(Duration::from_secs(30));
    let want = (cores() / 3).max(1);
    for i in 0..3 {
        assert_eq!(
            logged_workers(&cluster.log(i)),
            Some(want),
            "node {}:\n{}",
            i + 1,
            cluster.log(i)
        );
    }
}
