//! Single active consumer (RabbitMQ 3.11+), the connection's side: a
//! subscription with `single-active-consumer=true` and a `name` joins its
//! group in the master (`master::sac`) instead of consuming at once. It
//! consumes only while the master says it is the active one: told so, the
//! client gets a consumer update (active) and answers with an offset, and
//! only then does its channel start a basic.consume from that offset. Told
//! to give way, its channel is closed at once (a fresh one waits for the
//! next activation), the client gets a consumer update (not active), and
//! its answer lets the master hand the partition to the next member.

use super::*;
use crate::master::inout::{SacNote, SacOp};
use stablemq_protocol::stream::Properties;

/// A subscription's membership of a single active consumer group.
#[derive(Debug)]
pub(super) struct Sac {
    /// The consumer name: the group.
    pub(super) name: String,
    /// The super stream its stream is a partition of, as it said.
    pub(super) super_stream: Option<String>,
    /// The subscribe's offset: where it starts when the client's answer to
    /// its activation names none (or fails).
    pub(super) offset: OffsetSpec,
    /// Consumer updates sent to the client and not answered yet, oldest
    /// first (the client answers in order).
    pub(super) updates: VecDeque<Update>,
    /// The master's latest word: it is the active consumer.
    pub(super) active: bool,
    /// Its basic.consume was started (it was active and the client answered).
    pub(super) consuming: bool,
}

/// A consumer update sent to the client.
#[derive(Debug, Clone, Copy)]
pub(super) struct Update {
    active: bool,
    stepping_down: bool,
}

/// A subscription's group, if its properties ask for a single active
/// consumer (the connection has refused one without a name already).
pub(super) fn group_of(properties: &Properties, offset: &OffsetSpec) -> Option<Sac> {
    let get = |key: &str| {
        properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    if get("single-active-consumer") != Some("true") {
        return None;
    }
    Some(Sac {
        name: get("name")?.to_owned(),
        super_stream: get("super-stream").map(str::to_owned),
        offset: *offset,
        updates: VecDeque::new(),
        active: false,
        consuming: false,
    })
}

impl Bridge {
    /// Ask the master to put a subscription into its group.
    pub(super) fn join_group(&self, id: u8, stream: &str, sac: &Sac, master: &mut Vec<Input>) {
        master.push(Input::SingleActive {
            conn: self.conn,
            op: SacOp::Register {
                subscription: id,
                stream: stream.to_owned(),
                name: sac.name.clone(),
                super_stream: sac.super_stream.clone(),
            },
        });
    }

    /// A subscription ended (unsubscribed, cancelled, refused): it leaves
    /// its group, if it is in one.
    pub(super) fn leave_group(&self, id: u8, s: &Subscription, master: &mut Vec<Input>) {
        if let Some(sac) = &s.sac {
            master.push(Input::SingleActive {
                conn: self.conn,
                op: SacOp::Unregister {
                    subscription: id,
                    stream: s.stream.clone(),
                    name: sac.name.clone(),
                },
            });
        }
    }

    /// What the master says of a subscription's group.
    pub(super) fn on_single_active(
        &mut self,
        note: SacNote,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        match note {
            SacNote::Registered {
                subscription,
                result,
            } => self.on_registered(subscription, result, master, conn),
            SacNote::Update {
                subscription,
                active,
                stepping_down,
            } => {
                let Some(sac) = self
                    .subs
                    .get_mut(&subscription)
                    .and_then(|s| s.sac.as_mut())
                else {
                    // Gone: its unregister is on its way to the master.
                    return;
                };
                sac.active = active;
                sac.updates.push_back(Update {
                    active,
                    stepping_down,
                });
                if !active {
                    self.stop_consuming(subscription, master);
                }
                conn.push(sc::Input::ConsumerUpdate {
                    subscription_id: subscription,
                    active,
                });
            }
        }
    }

    /// The answer to a subscribe that joined a group: OK, or the master's
    /// refusal (no such stream, access refused), which ends it.
    fn on_registered(
        &mut self,
        id: u8,
        result: Result<(), AmqpError>,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        let Some(correlation_id) = self.subs.get_mut(&id).and_then(|s| s.subscribing.take()) else {
            return;
        };
        let code = match result {
            Ok(()) => ResponseCode::Ok,
            Err(e) => {
                if let Some(s) = self.subs.remove(&id) {
                    self.close_subscription_channel(s.channel, master);
                }
                stream_code(e.code)
            }
        };
        conn.push(sc::Input::Reply {
            correlation_id,
            reply: Reply::Code(code),
        });
    }

    /// The client answered a consumer update. To an activation: the
    /// subscription consumes from the offset it answered (the subscribe's
    /// if it answered none, or an error), unless the master took it back
    /// meanwhile. To a step-down: the master may hand over.
    pub(super) fn on_consumer_update_answered(
        &mut self,
        id: u8,
        code: ResponseCode,
        offset: OffsetSpec,
        master: &mut Vec<Input>,
    ) {
        let Some(s) = self.subs.get_mut(&id) else {
            return;
        };
        let Some(sac) = s.sac.as_mut() else {
            return;
        };
        let Some(update) = sac.updates.pop_front() else {
            return;
        };
        if update.active {
            if sac.active && sac.updates.is_empty() && !sac.consuming {
                sac.consuming = true;
                let start = match (code, offset) {
                    (ResponseCode::Ok, o) if o != OffsetSpec::None => o,
                    _ => sac.offset,
                };
                let (ch, stream) = (s.channel, s.stream.clone());
                self.consume(ch, id, &stream, start, master);
            }
        } else if update.stepping_down {
            master.push(Input::SingleActive {
                conn: self.conn,
                op: SacOp::SteppedDown {
                    subscription: id,
                    stream: s.stream.clone(),
                    name: sac.name.clone(),
                },
            });
        }
    }

    /// A subscription that is no longer active stops receiving: its
    /// channel (and the consumer on it) is closed, what it had not packed
    /// yet is dropped, and a fresh channel waits for its next activation.
    /// Chunks already handed to the connection still go out, and their
    /// acks are not sent (their channel is gone).
    fn stop_consuming(&mut self, id: u8, master: &mut Vec<Input>) {
        let Some(s) = self.subs.get(&id) else {
            return;
        };
        if !s.sac.as_ref().is_some_and(|sac| sac.consuming) {
            return;
        }
        let old = s.channel;
        self.close_subscription_channel(old, master);
        let ch = self.free_channel();
        master.push(Input::ChannelOpen {
            conn: self.conn,
            ch,
        });
        self.channels.insert(ch, id);
        if let Some(s) = self.subs.get_mut(&id) {
            s.channel = ch;
            s.pending.clear();
            s.checked = 0;
            if let Some(sac) = s.sac.as_mut() {
                sac.consuming = false;
            }
        }
    }

    /// A stream was deleted: the subscriptions on it that wait in a group
    /// have no consumer for the master to cancel, so they end here (the
    /// connection forgets them with its metadata update).
    pub(super) fn drop_waiting_members(&mut self, stream: &str, master: &mut Vec<Input>) {
        let waiting: Vec<u8> = self
            .subs
            .iter()
            .filter(|(_, s)| s.stream == stream && s.sac.as_ref().is_some_and(|g| !g.consuming))
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            if let Some(s) = self.subs.remove(&id) {
                self.close_subscription_channel(s.channel, master);
                self.leave_group(id, &s, master);
            }
        }
    }

    /// Close a subscription's channel: forgotten now, its close-ok awaited.
    pub(super) fn close_subscription_channel(&mut self, ch: u16, master: &mut Vec<Input>) {
        self.channels.remove(&ch);
        self.closing.insert(ch);
        master.push(Input::ChannelClose {
            conn: self.conn,
            ch,
        });
    }
}
