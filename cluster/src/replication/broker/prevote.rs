//! Pre-vote: a slave asks before it raises its epoch.
//!
//! Without it, a slave that cannot hear the master (a one-way partition, a
//! pause) fences the stores with a higher epoch and deposes a master that
//! every store still hears. With it, the slave first sends
//! [`Message::PreVote`] to the stores; a store grants only an epoch above
//! its promise and only if it has itself heard no master for an election
//! timeout (leader stickiness, `StoreNode::master_heard_ms`). Only with a
//! quorum of grants does the slave campaign. A pre-vote changes no state
//! anywhere, so safety (I1, I2) rests on the Fence and promise exactly as
//! before; this is a liveness measure.

use std::collections::BTreeSet;

use super::{BrokerCommand, BrokerNode, Role};
use crate::replication::NodeId;
use crate::replication::messages::{Endpoint, Message, Service};

/// A slave's pre-vote: before it raises its epoch and fences the stores, a
/// slave whose master went quiet asks them whether they would promise. A
/// store says yes only if it has not heard a master for an election timeout
/// itself, so a slave cut off from a master that the stores still hear gets
/// no quorum, raises no epoch, and deposes nobody.
#[derive(Debug)]
pub(super) struct PreVoteRound {
    /// The epoch it would fence with: the highest seen plus one.
    pub(super) epoch: u64,
    /// Stores that said yes.
    granted: BTreeSet<NodeId>,
    /// When PreVote was last sent, for resending to the others.
    sent_ms: u64,
}

impl BrokerNode {
    /// The master went quiet: ask the stores whether they would promise the
    /// next epoch, and campaign only with a quorum of yeses. Tries again
    /// after another election timeout if that fails.
    pub(super) fn start_prevote(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        let next_deadline = self.election_deadline(now);
        if let Role::Slave { deadline_ms, .. } = &mut self.role {
            *deadline_ms = next_deadline;
        }
        let epoch = self.epoch + 1;
        self.prevote = Some(PreVoteRound {
            epoch,
            granted: BTreeSet::new(),
            sent_ms: now,
        });
        for &store in &self.cfg.stores {
            out.push(BrokerCommand::Send {
                to: Endpoint::store(store),
                msg: Message::PreVote { epoch },
            });
        }
    }

    /// Ask again the stores that have not said yes, every `retry_ms` (a
    /// store that refused may stop hearing the master meanwhile).
    pub(super) fn resend_prevote(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        let Some(round) = &mut self.prevote else {
            return;
        };
        if now.saturating_sub(round.sent_ms) < self.cfg.retry_ms {
            return;
        }
        round.sent_ms = now;
        for &store in &self.cfg.stores {
            if !round.granted.contains(&store) {
                out.push(BrokerCommand::Send {
                    to: Endpoint::store(store),
                    msg: Message::PreVote { epoch: round.epoch },
                });
            }
        }
    }

    pub(super) fn on_prevote_reply(
        &mut self,
        now: u64,
        from: Endpoint,
        epoch: u64,
        granted: bool,
        out: &mut Vec<BrokerCommand>,
    ) {
        if !granted {
            // A store promised at least our round's epoch: `observe_epoch`
            // has raised ours from its reply; ask again above it at once
            // (a restarted slave starts from epoch 0).
            if self.prevote.as_ref().is_some_and(|r| r.epoch <= self.epoch) {
                self.start_prevote(now, out);
            }
            return;
        }
        if from.service != Service::Store
            || !self.cfg.stores.contains(&from.node)
            || !matches!(self.role, Role::Slave { .. })
            || epoch != self.epoch + 1
        {
            return;
        }
        let Some(round) = &mut self.prevote else {
            return;
        };
        if round.epoch != epoch {
            return;
        }
        round.granted.insert(from.node);
        if round.granted.len() >= self.cfg.quorum() {
            self.prevote = None;
            self.campaign(now, out);
        }
    }
}
