//! The faults of a partition run, each applied to the live cluster under load.
//!
//! Every nemesis finds the current master, puts its fault in place, holds it,
//! removes it, and returns a [`Window`]: when the fault was in place, which
//! nodes could not reach a quorum of stores meanwhile (the checker requires
//! that no message published through them in that time is confirmed), and,
//! when the master itself was cut off from every peer, how long it took to
//! close its clients.

use super::client::{History, Probe, one_round, probe};
use super::nodes::Nodes;
use crate::netns::Net;
use rand::Rng;
use rand::rngs::StdRng;
use std::time::{Duration, Instant};

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The master cut from both peers; its clients still reach it.
    IsolateMaster,
    /// The master and one peer cut from each other; the third node sees both.
    Bridge,
    /// Messages from the master to one peer lost; the peer's to the master
    /// still arrive.
    OneWay,
    /// The master SIGSTOPped, then SIGCONTed.
    PauseMaster,
    /// The master SIGKILLed, then started again on its data.
    KillMaster,
    /// The master isolated until a peer campaigns, then healed at once.
    HealInElection,
    /// A random node cut from the other two (it may be the master or not).
    RandomHalves,
}

impl Kind {
    /// Every kind, in the order the short run tries them.
    pub const ALL: [Kind; 7] = [
        Kind::IsolateMaster,
        Kind::Bridge,
        Kind::OneWay,
        Kind::PauseMaster,
        Kind::KillMaster,
        Kind::HealInElection,
        Kind::RandomHalves,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::IsolateMaster => "isolate master",
            Kind::Bridge => "bridge",
            Kind::OneWay => "one-way master->peer",
            Kind::PauseMaster => "pause master",
            Kind::KillMaster => "kill -9 master",
            Kind::HealInElection => "heal during election",
            Kind::RandomHalves => "random halves",
        }
    }
}

/// One fault, as it happened.
#[derive(Debug, Clone)]
pub struct Window {
    /// What it was.
    pub kind: Kind,
    /// When the fault was in place.
    pub start: Instant,
    /// When it was removed.
    pub heal: Instant,
    /// When confirms flowed again after it (or the bound ran out).
    pub end: Instant,
    /// Nodes that could not reach a quorum of stores in `start..heal`.
    pub minority: Vec<usize>,
    /// The master (node, epoch) when the fault began.
    pub master: (usize, u64),
    /// Whether the master was cut off from every store but its own for
    /// longer than the close bound, so it must have closed its clients.
    pub close_expected: bool,
    /// When (ms after `start`) and with which code the cut-off master closed
    /// an idle client connection, if it did before the heal.
    pub closed: Option<(u64, Option<u16>)>,
    /// Whether confirms flowed again within the bound after the heal.
    pub recovered: bool,
    /// The master's epoch once confirms flowed again.
    pub epoch_after: Option<u64>,
    /// What happened, for the log.
    pub note: String,
}

/// What a nemesis works on.
pub struct Ctx<'a> {
    /// The namespaces.
    pub net: &'a Net,
    /// The node processes.
    pub nodes: &'a mut Nodes,
    /// The clients' runtime.
    pub rt: &'a tokio::runtime::Runtime,
    /// The seeded choices.
    pub rng: &'a mut StdRng,
    /// check_quorum_ms plus the slack allowed for closing clients.
    pub close_bound: Duration,
    /// The queue the publishers write to.
    pub queue: &'a str,
    /// Where messages are recorded.
    pub history: &'a History,
    /// The first id of the next round published through a cut-off node.
    pub next_cut_id: u64,
}

/// The new content of `text` after `from` bytes.
fn since(text: &str, from: usize) -> &str {
    text.get(from..).unwrap_or("")
}

impl Ctx<'_> {
    fn other_than(&mut self, m: usize) -> usize {
        let k = self.rng.random_range(1..self.nodes.len());
        (m + k) % self.nodes.len()
    }

    fn open_probe(&self, node: usize) -> Option<Probe> {
        self.rt.block_on(probe(&self.nodes.uri(node)))
    }

    /// Publish a round through `node` (cut off) in the background: its
    /// confirms must not arrive before the heal.
    fn publish_through(&mut self, node: usize) {
        self.rt.spawn(one_round(
            self.nodes.uri(node),
            self.queue.to_string(),
            node,
            self.next_cut_id,
            self.history.clone(),
        ));
        self.next_cut_id += 1 << 20;
    }

    /// Apply `kind` to a cluster whose master is `master`, holding the fault
    /// for `hold`. `end`, `recovered` are filled in by the caller.
    pub fn apply(&mut self, kind: Kind, master: (usize, u64), hold: Duration) -> Window {
        let m = master.0;
        let mut minority = Vec::new();
        let mut probe = None;
        let mut note;
        let start;
        match kind {
            Kind::IsolateMaster => {
                probe = self.open_probe(m);
                self.net.isolate(m);
                start = Instant::now();
                minority.push(m);
                self.publish_through(m);
                std::thread::sleep(hold);
                note = format!("node {} isolated", m + 1);
            }
            Kind::Bridge => {
                let a = self.other_than(m);
                self.net.cut(m, a);
                self.net.cut(a, m);
                start = Instant::now();
                std::thread::sleep(hold);
                note = format!("nodes {} and {} cut from each other", m + 1, a + 1);
            }
            Kind::OneWay => {
                let a = self.other_than(m);
                self.net.cut_dialed(m, a, Nodes::cluster_port(a));
                start = Instant::now();
                std::thread::sleep(hold);
                note = format!("node {} -> node {} lost", m + 1, a + 1);
            }
            Kind::PauseMaster => {
                self.nodes.pause(m);
                start = Instant::now();
                std::thread::sleep(hold);
                self.nodes.resume(m);
                note = format!("node {} paused", m + 1);
            }
            Kind::KillMaster => {
                self.nodes.kill9(m);
                start = Instant::now();
                std::thread::sleep(hold);
                self.nodes.restart(m);
                note = format!("node {} killed and restarted", m + 1);
            }
            Kind::HealInElection => {
                let peers: Vec<usize> = (0..self.nodes.len()).filter(|i| *i != m).collect();
                let seen: Vec<usize> = peers.iter().map(|p| self.nodes.log(*p).len()).collect();
                self.net.isolate(m);
                start = Instant::now();
                minority.push(m);
                note = self.heal_at_campaign(m, master.1, &peers, &seen, start);
            }
            Kind::RandomHalves => {
                let lone = self.rng.random_range(0..self.nodes.len());
                if lone == m {
                    probe = self.open_probe(m);
                }
                self.net.isolate(lone);
                start = Instant::now();
                minority.push(lone);
                self.publish_through(lone);
                std::thread::sleep(hold);
                let role = if lone == m { "the master" } else { "a slave" };
                note = format!("node {} ({role}) alone", lone + 1);
            }
        }
        let closed = probe.as_ref().and_then(|p| {
            let c = *p.closed.lock().expect("probe");
            c.map(|(t, code)| (t.saturating_duration_since(start).as_millis() as u64, code))
        });
        // The heal time is taken before the first rule goes: flushing the
        // namespaces one after another takes a while (tens to hundreds of
        // ms on a loaded machine), and a confirm that arrives after the
        // first flush may be legitimate. A paused or killed node was
        // restored above.
        let heal = Instant::now();
        self.net.heal();
        let close_expected = probe.is_some() && heal.duration_since(start) > self.close_bound;
        if probe.is_none() && minority.contains(&m) && kind != Kind::HealInElection {
            note.push_str("; the master took no probe client");
        }
        Window {
            kind,
            start,
            heal,
            end: heal,
            minority,
            master,
            close_expected,
            closed,
            recovered: false,
            epoch_after: None,
            note,
        }
    }

    /// Wait (up to 5 s) until a peer logs a campaign, then return at once so
    /// the caller heals mid-election. Says whether the heal came before the
    /// new master served.
    fn heal_at_campaign(
        &self,
        m: usize,
        epoch: u64,
        peers: &[usize],
        seen: &[usize],
        start: Instant,
    ) -> String {
        let deadline = start + Duration::from_secs(5);
        while Instant::now() < deadline {
            for (k, p) in peers.iter().enumerate() {
                let log = self.nodes.log(*p);
                let new = since(&log, seen[k]);
                if new.contains("campaigning for mastership") {
                    let at = start.elapsed().as_millis();
                    // Healed right after this returns: did anyone already
                    // serve a newer epoch?
                    let served = new.contains("serving clients as master");
                    return format!(
                        "node {} isolated; node {} campaigned {at} ms later (epoch > {epoch}); \
                         healed {}",
                        m + 1,
                        p + 1,
                        if served {
                            "after the new master served"
                        } else {
                            "mid-election"
                        }
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        format!("node {} isolated; no campaign within 5 s", m + 1)
    }
}
