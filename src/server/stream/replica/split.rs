//! A slave's stream connection, split between the master and this node.
//!
//! Sans-IO: the task hands over whole frames from each side and carries out
//! what this says. Everything goes to the master (the frames unchanged), so
//! writes, tracking, the handshake and its checks are the master's, except
//! the reads this node can serve from its replica: a subscribe without a
//! single active consumer group (with a filter or not), on a stream the
//! replica has,
//! by a user the replicated permissions let read it, and that
//! subscription's credit and unsubscribe. Their chunks are packed as the
//! master packs them (`bridge::pack`) and go to the client between the
//! master's frames, never inside one.
//!
//! It watches the master's answers only for what a local subscribe needs:
//! who authenticated, which virtual host opened, whether the client reads
//! deliver v2 (its own command versions say), and its frame_max (its tune
//! answer). The open answer is rewritten to advertise this node, as a
//! RabbitMQ replica advertises itself, so a client that checks where it
//! landed (a load balancer's address resolver) finds the replica it asked
//! for.

use super::super::bridge::{Packed, chunk_max_bytes, pack, ready_len, start_at, stored_chunks};
use super::read::{From, ReadAnswer, ReadRequest};
use crate::broker::stream_filter::StreamFilter;
use crate::master::inout::StreamRecord;
use crate::metrics as m;
use crate::metrics::stream_clients::ConsumerStats;
use crate::users::{AccessTable, Perm};
use bytes::{BufMut, Bytes, BytesMut};
use stablemq_protocol::stream::conn::negotiate_frame_max;
use stablemq_protocol::stream::{
    ClientMessage, Command, DEFAULT_FRAME_MAX, FrameHeader, INITIAL_FRAME_MAX, OffsetSpec,
    Properties, ResponseCode, ServerMessage, encode_deliver_header,
};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// Entries one read of the replica takes at most.
const READ_RECORDS: usize = 2000;
/// Record bytes one read takes at most (the entry crossing it is the last).
const READ_BYTES: usize = 4 << 20;

/// What to do with a client's frame.
#[derive(Debug)]
pub(super) enum ClientStep {
    /// Send it to the master, unchanged.
    Relay,
    /// Answered here; what goes to the client is in the output.
    Done,
    /// A subscribe this node may serve: read the replica, then
    /// [`Split::subscribed`].
    Subscribe(PendingSubscribe),
}

/// A subscribe waiting for its first read.
#[derive(Debug)]
pub(super) struct PendingSubscribe {
    correlation_id: u32,
    id: u8,
    credit: u16,
    filter: Option<StreamFilter>,
    properties: Properties,
    pub(super) read: ReadRequest,
}

/// A subscription served from the replica.
#[derive(Debug)]
struct Local {
    stream: String,
    /// The next offset to read.
    at: u64,
    /// Chunks the client takes now.
    credit: u32,
    /// Read, not yet packed: the start of a stored chunk whose tail has not
    /// been applied here yet.
    pending: Vec<StreamRecord>,
    /// Packed, waiting for credit.
    chunks: VecDeque<Packed>,
    /// The last read found nothing new: read again once the replica grows.
    caught_up: bool,
    /// A read of it is out.
    reading: bool,
    /// Its filter (`filter.N` and `match-unfiltered` properties), if any:
    /// a stored chunk none of whose entries matches is not sent and costs
    /// no credit, as the master's chunk-level filtering.
    filter: Option<StreamFilter>,
    /// The subscribe's properties, records delivered and the offset of the
    /// last one, for the management API.
    properties: Properties,
    consumed: u64,
    last: Option<u64>,
}

impl Local {
    /// Credit, nothing packed, more to read, no read out.
    fn wants_read(&self) -> bool {
        self.credit > 0 && self.chunks.is_empty() && !self.caught_up && !self.reading
    }
}

/// The state of one split connection.
#[derive(Debug)]
pub(super) struct Split {
    /// This node's stream address, advertised in the open answer.
    advertise: (String, u16),
    /// The frame_max agreed on (once the client's tune answer came).
    frame_max: Option<u32>,
    /// The user of the SASL response sent, until the master answers it.
    authenticating: Option<String>,
    user: Option<String>,
    /// The virtual host asked for, until the master answers.
    opening: Option<String>,
    vhost: Option<String>,
    deliver_v2: bool,
    subs: BTreeMap<u8, Local>,
    /// Subscription ids the master serves.
    relayed: HashSet<u8>,
    /// Frames for the client, in order.
    out: BytesMut,
    /// A subscription came, went, got credit or was sent a chunk since the
    /// management API's copy was taken.
    changed: bool,
}

impl Split {
    /// A connection on a node whose stream listener clients reach at
    /// `advertise`.
    pub(super) fn new(advertise: (String, u16)) -> Split {
        Split {
            advertise,
            frame_max: None,
            authenticating: None,
            user: None,
            opening: None,
            vhost: None,
            deliver_v2: false,
            subs: BTreeMap::new(),
            relayed: HashSet::new(),
            out: BytesMut::with_capacity(64 * 1024),
            changed: false,
        }
    }

    /// The largest client frame this node splits off, the master's limit:
    /// [`INITIAL_FRAME_MAX`] until the client's tune, then the frame_max
    /// the two tunes agree on (the server's is [`DEFAULT_FRAME_MAX`]). A
    /// larger one turns the connection into a plain relay, and the master
    /// answers it as it answers a client of its own.
    pub(super) fn client_frame_max(&self) -> u32 {
        match self.frame_max {
            None => INITIAL_FRAME_MAX,
            Some(n) => n,
        }
    }

    /// Frames for the client, taken.
    pub(super) fn take_output(&mut self) -> BytesMut {
        self.out.split()
    }

    /// Whether subscriptions are served here (the task reads the replica
    /// for them).
    pub(super) fn has_local(&self) -> bool {
        !self.subs.is_empty()
    }

    /// A whole frame from the client (without its size field).
    pub(super) fn on_client(&mut self, frame: &Bytes, users: &AccessTable) -> ClientStep {
        let Ok(header) = FrameHeader::read(frame) else {
            return ClientStep::Relay;
        };
        let interesting = [
            Command::Tune,
            Command::SaslAuthenticate,
            Command::Open,
            Command::ExchangeCommandVersions,
            Command::Subscribe,
            Command::Credit,
            Command::Unsubscribe,
        ];
        // The client's tune is its answer to the server's (a response key);
        // every other frame watched here is a request.
        let command = header.command().ok().filter(|c| interesting.contains(c));
        if command.is_none() || (header.is_response() && command != Some(Command::Tune)) {
            return ClientStep::Relay;
        }
        let Ok(msg) = ClientMessage::decode(frame) else {
            // The master answers a malformed frame.
            return ClientStep::Relay;
        };
        use ClientMessage as C;
        match msg {
            C::Tune { frame_max, .. } => {
                self.frame_max = Some(negotiate_frame_max(frame_max, DEFAULT_FRAME_MAX))
            }
            C::SaslAuthenticate {
                mechanism, data, ..
            } => {
                self.authenticating = data
                    .and_then(|d| crate::auth::parse_response(&mechanism, &d).ok())
                    .filter(|_| mechanism == "PLAIN")
                    .map(|(user, _)| user);
            }
            C::Open { virtual_host, .. } => self.opening = Some(virtual_host),
            C::ExchangeCommandVersions { commands, .. } => {
                self.deliver_v2 = commands
                    .iter()
                    .any(|c| c.key == Command::Deliver.key() && c.max_version >= 2);
            }
            C::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                return self.on_subscribe(
                    correlation_id,
                    subscription_id,
                    stream,
                    offset,
                    credit,
                    properties.as_deref().unwrap_or_default(),
                    users,
                );
            }
            C::Credit {
                subscription_id,
                credit,
            } => {
                if let Some(s) = self.subs.get_mut(&subscription_id) {
                    s.credit = s.credit.saturating_add(u32::from(credit));
                    self.changed = true;
                    self.deliver(subscription_id);
                    return ClientStep::Done;
                }
            }
            C::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                if self.subs.remove(&subscription_id).is_some() {
                    self.changed = true;
                    self.answer(Command::Unsubscribe, correlation_id, ResponseCode::Ok);
                    return ClientStep::Done;
                }
                self.relayed.remove(&subscription_id);
            }
            _ => {}
        }
        ClientStep::Relay
    }

    /// A subscribe: served here if it can be.
    #[allow(clippy::too_many_arguments)]
    fn on_subscribe(
        &mut self,
        correlation_id: u32,
        id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: &[(String, String)],
        users: &AccessTable,
    ) -> ClientStep {
        if self.relayed.contains(&id) {
            return ClientStep::Relay;
        }
        if self.subs.contains_key(&id) {
            self.answer(
                Command::Subscribe,
                correlation_id,
                ResponseCode::SubscriptionIdAlreadyExists,
            );
            return ClientStep::Done;
        }
        let here = match (&self.user, &self.vhost) {
            (Some(user), Some(vhost)) => {
                !single_active(properties) && users.allows(user, vhost, Perm::Read, &stream)
            }
            _ => false,
        };
        let Some(vhost) = self.vhost.clone().filter(|_| here) else {
            self.relayed.insert(id);
            return ClientStep::Relay;
        };
        let start = start_at(offset);
        let filter = StreamFilter::from_properties(properties);
        ClientStep::Subscribe(PendingSubscribe {
            correlation_id,
            id,
            credit,
            read: ReadRequest {
                vhost,
                stream,
                from: From::Spec(start),
                max_records: READ_RECORDS,
                max_bytes: READ_BYTES,
                filter_values: filter.is_some(),
            },
            filter,
            properties: properties.to_vec(),
        })
    }

    /// The first read of a subscribe. False: the replica has no such
    /// stream (not yet, or not at all), and the master gets the subscribe.
    pub(super) fn subscribed(&mut self, p: PendingSubscribe, answer: ReadAnswer) -> bool {
        let start = match &answer {
            ReadAnswer::NoStream => {
                self.relayed.insert(p.id);
                return false;
            }
            ReadAnswer::Entries { start, .. } => *start,
        };
        self.answer(Command::Subscribe, p.correlation_id, ResponseCode::Ok);
        self.subs.insert(
            p.id,
            Local {
                stream: p.read.stream,
                at: start,
                credit: u32::from(p.credit),
                pending: Vec::new(),
                chunks: VecDeque::new(),
                caught_up: false,
                reading: true,
                filter: p.filter,
                properties: p.properties,
                consumed: 0,
                last: None,
            },
        );
        self.changed = true;
        self.on_read(p.id, answer);
        true
    }

    /// The replica applied more of the log: every subscription may read.
    pub(super) fn on_applied(&mut self) {
        for s in self.subs.values_mut() {
            s.caught_up = false;
        }
    }

    /// Whether a subscription would read now ([`Split::reads`]).
    pub(super) fn wants_read(&self) -> bool {
        self.subs.values().any(Local::wants_read)
    }

    /// The reads to make now: subscriptions with credit, nothing packed
    /// and more to read, none of their reads out.
    pub(super) fn reads(&mut self) -> Vec<(u8, ReadRequest)> {
        let (Some(vhost), mut out) = (&self.vhost, Vec::new()) else {
            return Vec::new();
        };
        for (&id, s) in &mut self.subs {
            if s.wants_read() {
                s.reading = true;
                out.push((
                    id,
                    ReadRequest {
                        vhost: vhost.clone(),
                        stream: s.stream.clone(),
                        from: From::Offset(s.at),
                        max_records: READ_RECORDS,
                        max_bytes: READ_BYTES,
                        filter_values: s.filter.is_some(),
                    },
                ));
            }
        }
        out
    }

    /// What a read for subscription `id` found.
    pub(super) fn on_read(&mut self, id: u8, answer: ReadAnswer) {
        let max_bytes = chunk_max_bytes(self.frame_max.unwrap_or(0));
        let Some(s) = self.subs.get_mut(&id) else {
            // Unsubscribed while its read was out.
            return;
        };
        s.reading = false;
        match answer {
            ReadAnswer::NoStream => {
                // Deleted: the client hears it as from RabbitMQ.
                let stream = self.subs.remove(&id).map(|s| s.stream).unwrap_or_default();
                self.changed = true;
                ServerMessage::MetadataUpdate {
                    code: ResponseCode::StreamNotAvailable,
                    stream,
                }
                .encode(&mut self.out);
                return;
            }
            ReadAnswer::Entries {
                start,
                next,
                entries,
            } => {
                s.caught_up = entries.is_empty();
                if start > s.at {
                    // Retention cut what was not read yet: on from the
                    // oldest entry kept, and a chunk begun before the cut
                    // will not be finished.
                    s.pending.clear();
                }
                s.at = next;
                s.pending.extend(entries);
                let ready = ready_len(&s.pending);
                let held = s.pending.split_off(ready);
                let mut whole = std::mem::replace(&mut s.pending, held);
                if let Some(filter) = &s.filter {
                    whole = stored_chunks(whole)
                        .into_iter()
                        .filter(|c| {
                            filter.chunk_matches(c.iter().map(|d| d.filter_value.as_deref()))
                        })
                        .flatten()
                        .collect();
                }
                s.chunks.extend(pack(whole, max_bytes));
            }
        }
        self.deliver(id);
    }

    /// Send subscription `id` what its credit allows.
    fn deliver(&mut self, id: u8) {
        let Some(s) = self.subs.get_mut(&id) else {
            return;
        };
        while s.credit > 0 {
            let Some(chunk) = s.chunks.pop_front() else {
                break;
            };
            s.credit -= 1;
            s.consumed += chunk.records;
            s.last = Some(chunk.id + chunk.records.saturating_sub(1));
            self.changed = true;
            let committed = self.deliver_v2.then_some(chunk.id);
            encode_deliver_header(&mut self.out, id, committed, chunk.bytes.len());
            self.out.put_slice(&chunk.bytes);
            metrics::counter!(m::STREAM_REPLICA_CHUNKS).increment(1);
            metrics::counter!(m::STREAM_REPLICA_RECORDS).increment(chunk.records);
        }
    }

    /// A whole frame from the master (without its size field): on to the
    /// client, the open answer advertising this node.
    pub(super) fn on_master(&mut self, frame: Bytes) {
        let header = FrameHeader::read(&frame).ok();
        let command = header.and_then(|h| h.command().ok());
        let watched = matches!(command, Some(Command::SaslAuthenticate | Command::Open))
            && header.is_some_and(|h| h.is_response());
        if watched && let Ok(msg) = ServerMessage::decode(&frame) {
            match msg {
                ServerMessage::SaslAuthenticateResponse {
                    code: ResponseCode::Ok,
                    ..
                } => self.user = self.authenticating.take(),
                ServerMessage::OpenResponse {
                    correlation_id,
                    code,
                    properties,
                } => {
                    if code == ResponseCode::Ok {
                        self.vhost = self.opening.take();
                    }
                    ServerMessage::OpenResponse {
                        correlation_id,
                        code,
                        properties: self.advertised(properties),
                    }
                    .encode(&mut self.out);
                    return;
                }
                _ => {}
            }
        }
        self.out.put_u32(frame.len() as u32);
        self.out.put_slice(&frame);
    }

    /// Who the master let in and the virtual host it opened, once it did.
    pub(super) fn session(&self) -> (Option<&str>, Option<&str>) {
        (self.user.as_deref(), self.vhost.as_deref())
    }

    /// The subscriptions served here as the management API shows them, if
    /// anything changed since the last call.
    pub(super) fn shown(&mut self) -> Option<Vec<ConsumerStats>> {
        if !std::mem::take(&mut self.changed) {
            return None;
        }
        let stats = self
            .subs
            .iter()
            .map(|(&id, s)| ConsumerStats {
                subscription_id: id,
                stream: s.stream.clone(),
                credits: s.credit,
                consumed: s.consumed,
                offset: s.last,
                properties: s.properties.clone(),
            })
            .collect();
        Some(stats)
    }

    /// The open answer's properties with this node as the advertised one.
    fn advertised(&self, properties: Properties) -> Properties {
        properties
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "advertised_host" => (k, self.advertise.0.clone()),
                "advertised_port" => (k, self.advertise.1.to_string()),
                _ => (k, v),
            })
            .collect()
    }

    /// A code-only response to the client.
    fn answer(&mut self, command: Command, correlation_id: u32, code: ResponseCode) {
        ServerMessage::Response {
            command,
            correlation_id,
            code,
        }
        .encode(&mut self.out);
    }
}

/// Whether a subscribe asks for a single active consumer: the master keeps
/// the groups (and tells the active one), so it serves those.
fn single_active(properties: &[(String, String)]) -> bool {
    properties
        .iter()
        .any(|(k, _)| k == "single-active-consumer")
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
