//! End to end over real TCP (127.0.0.1) and real fjall (temp dirs), in one
//! process: 3 store nodes and 2 broker nodes, each a task. The master appends
//! 1,000 payloads until all are stable; then its task is aborted (a crash), the
//! other broker takes over, holds every payload confirmed before the crash at
//! its position, and appends more.
//!
//! A behaviour test, not a timing test: the bounds are generous and only there
//! so a broken build fails instead of hanging.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use stablemq_cluster::driver::{BrokerEvent, BrokerHandle, BrokerNodeDriver, run_store_node_on};
use stablemq_cluster::replication::{Config, NodeId, RoleKind, is_epoch_marker};
use stablemq_cluster::transport::TransportOptions;
use stablemq_cluster::{Entry, LogPosition};
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

const STORES: [NodeId; 3] = [1, 2, 3];
const BROKERS: [NodeId; 2] = [4, 5];
const PAYLOADS: u64 = 1_000;
/// Generous: elections take about a second with the default timings.
const BOUND: Duration = Duration::from_secs(30);

/// One broker's events, as the broker would keep them.
struct Events {
    rx: UnboundedReceiver<BrokerEvent>,
    /// Everything applied (epoch markers skipped), in order.
    applied: Vec<Entry>,
    stable: u64,
    became_master: Option<(u64, u64)>,
}

impl Events {
    fn new(rx: UnboundedReceiver<BrokerEvent>) -> Self {
        Events {
            rx,
            applied: Vec::new(),
            stable: 0,
            became_master: None,
        }
    }

    /// Take events until `done` holds, within `BOUND`.
    async fn until(&mut self, what: &str, done: impl Fn(&Events) -> bool) {
        let deadline = Instant::now() + BOUND;
        while !done(self) {
            let event = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
                .expect("driver stopped");
            match event {
                BrokerEvent::Apply(entries) => {
                    let real = entries.into_iter().filter(|e| !is_epoch_marker(e));
                    self.applied.extend(real);
                    self.stable = self
                        .stable
                        .max(self.applied.last().map_or(0, |e| e.pos.index));
                }
                BrokerEvent::Stable(index) => self.stable = self.stable.max(index),
                BrokerEvent::BecameMaster { epoch, stable } => {
                    self.stable = self.stable.max(stable);
                    self.became_master = Some((epoch, stable));
                }
                BrokerEvent::Restore { base, .. } => {
                    panic!("snapshot at {base}, but no store compacts in this test")
                }
                BrokerEvent::Campaign { .. } | BrokerEvent::SteppedDown { .. } => {}
            }
        }
    }
}

async fn append_all(handle: &BrokerHandle, payloads: &[Bytes]) -> Vec<LogPosition> {
    // Concurrent appends, like many publishers: they leave in shared batches.
    let mut set = JoinSet::new();
    for (i, payload) in payloads.iter().enumerate() {
        let (handle, payload) = (handle.clone(), payload.clone());
        set.spawn(async move { (i, handle.append(payload).await) });
    }
    let mut positions = vec![LogPosition::ZERO; payloads.len()];
    while let Some(joined) = set.join_next().await {
        let (i, result) = joined.expect("append task");
        positions[i] = result.expect("append on the master");
    }
    positions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_crash_loses_nothing_confirmed() {
    // Bounded as a whole too, so nothing can hang the suite.
    timeout(Duration::from_secs(120), scenario())
        .await
        .expect("the scenario finished in time");
}

async fn scenario() {
    let mut listeners = HashMap::new();
    let mut addrs: HashMap<NodeId, SocketAddr> = HashMap::new();
    for node in STORES.into_iter().chain(BROKERS) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(node, listener.local_addr().unwrap());
        listeners.insert(node, listener);
    }
    let peers_of = |me: NodeId| -> HashMap<NodeId, SocketAddr> {
        addrs
            .iter()
            .filter(|(n, _)| **n != me)
            .map(|(n, a)| (*n, *a))
            .collect()
    };
    let config = Config::new(STORES.to_vec(), BROKERS.to_vec());
    let dirs: Vec<_> = STORES
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();

    let mut stores = JoinSet::new();
    for (node, dir) in STORES.into_iter().zip(&dirs) {
        let run = run_store_node_on(
            config.clone(),
            node,
            listeners.remove(&node).unwrap(),
            peers_of(node),
            dir.path().to_path_buf(),
            TransportOptions::default(),
        );
        stores.spawn(async move { panic!("store {node} stopped: {:?}", run.await) });
    }
    let mut brokers = HashMap::new();
    let mut events = HashMap::new();
    for node in BROKERS {
        let (driver, rx) = BrokerNodeDriver::start_on(
            config.clone(),
            node,
            listeners.remove(&node).unwrap(),
            peers_of(node),
            0x5eed ^ node,
            TransportOptions::default(),
        )
        .unwrap();
        brokers.insert(node, driver);
        events.insert(node, Events::new(rx));
    }

    // Someone wins the first election.
    let started = Instant::now();
    let master = loop {
        if let Some(node) = BROKERS
            .into_iter()
            .find(|n| brokers[n].role() == RoleKind::Master)
        {
            break node;
        }
        assert!(started.elapsed() < BOUND, "no master elected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let other = BROKERS.into_iter().find(|n| *n != master).unwrap();
    eprintln!("master {master} elected after {:?}", started.elapsed());

    let payloads: Vec<Bytes> = (0..PAYLOADS)
        .map(|i| Bytes::from(format!("event {i:04} {}", "x".repeat(200))))
        .collect();
    let began = Instant::now();
    let positions = append_all(&brokers[&master].handle(), &payloads).await;
    let last = positions.iter().map(|p| p.index).max().unwrap();
    let ev = events.get_mut(&master).unwrap();
    ev.until("the 1,000 payloads to become stable", |e| e.stable >= last)
        .await;
    eprintln!("{PAYLOADS} payloads stable in {:?}", began.elapsed());
    let confirmed: Vec<(LogPosition, Bytes)> = positions
        .iter()
        .zip(&payloads)
        .filter(|(p, _)| p.index <= ev.stable)
        .map(|(p, b)| (*p, b.clone()))
        .collect();
    assert_eq!(confirmed.len() as u64, PAYLOADS);

    // Crash the master.
    let old_epoch = brokers[&master].epoch();
    let crashed = Instant::now();
    brokers.remove(&master).unwrap().abort();
    let ev = events.get_mut(&other).unwrap();
    ev.until("the other broker to become master", |e| {
        e.became_master.is_some_and(|(epoch, _)| epoch > old_epoch)
    })
    .await;
    eprintln!(
        "broker {other} became master {:?} after the crash",
        crashed.elapsed()
    );
    let survivor = &brokers[&other];

    // Every confirmed payload, at its position, in the new master's applied log.
    for (pos, payload) in &confirmed {
        let got = ev
            .applied
            .iter()
            .find(|e| e.pos.index == pos.index)
            .unwrap_or_else(|| panic!("confirmed {pos} missing after failover"));
        assert_eq!((got.pos, &got.payload), (*pos, payload), "entry at {pos}");
    }
    for pair in ev.applied.windows(2) {
        assert!(
            pair[0].pos.index < pair[1].pos.index,
            "applied out of order"
        );
    }

    // And it serves: new appends become stable.
    let more: Vec<Bytes> = (0..50).map(|i| Bytes::from(format!("after {i}"))).collect();
    let positions = append_all(&survivor.handle(), &more).await;
    let new_epoch = survivor.epoch();
    assert!(positions.iter().all(|p| p.epoch == new_epoch));
    let last = positions.iter().map(|p| p.index).max().unwrap();
    ev.until("appends on the new master to become stable", |e| {
        e.stable >= last
    })
    .await;

    // Stop everything: tasks aborted, sockets and ports closed.
    drop(brokers);
    stores.abort_all();
    while stores.join_next().await.is_some() {}
    for (node, addr) in &addrs {
        // The listening ports are free again.
        let rebound = timeout(BOUND, async {
            loop {
                match TcpListener::bind(addr).await {
                    Ok(listener) => break listener,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        assert!(rebound.is_ok(), "port of node {node} still taken");
    }
}
