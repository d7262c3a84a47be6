//! Publishers and subscriptions: the ids a client picks on its connection,
//! checked here, and the credit of each subscription.
//!
//! A publisher or subscription is reserved when the client declares it and
//! becomes live when the broker answers OK (an error frees the id). Publishing
//! with an id that is not live is answered with a publish error 0x12 for each
//! publishing id, as RabbitMQ does. A chunk costs its subscription one credit;
//! the broker should not hand over more chunks than the client granted (the
//! subscribe's credit plus every `Action::Credit`), but one it hands over
//! without credit is queued here and sent when credit comes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;

use super::dispatch::Pending;
use super::{Action, ChunkSource, Request, StreamConnection};
use crate::stream::code::ResponseCode;
use crate::stream::command::Command;
use crate::stream::server::{ServerMessage, encode_deliver_header};
use crate::stream::types::{OffsetSpec, Properties, PublishedMessage, PublishingError};

/// The longest publisher or consumer reference RabbitMQ accepts.
const MAX_REFERENCE_LEN: usize = 255;

/// A declared publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Publisher {
    /// Shared with every `Action::Publish` (a clone is a count, not a copy).
    pub(super) stream: Arc<str>,
    pub(super) reference: Option<Arc<str>>,
    /// The broker answered OK.
    pub(super) live: bool,
}

/// A subscription and its credit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Subscription {
    pub(super) stream: String,
    /// Chunks the client may still be sent.
    pub(super) credit: u32,
    /// The broker answered OK.
    pub(super) live: bool,
    /// Chunks handed over without credit (committed chunk id, chunk).
    pub(super) queued: VecDeque<(u64, ChunkSource)>,
    /// The subscribe's properties, as the management API lists them.
    pub(super) properties: Properties,
}

/// A subscribe's fields: id, stream, offset, credit, properties.
pub(super) type SubscribeArgs = (u8, String, OffsetSpec, u16, Properties);

impl StreamConnection {
    pub(super) fn on_declare_publisher(
        &mut self,
        correlation_id: u32,
        publisher_id: u8,
        reference: String,
        stream: String,
        now: Instant,
    ) {
        let taken = self.publishers.contains_key(&publisher_id)
            || (!reference.is_empty()
                && self.publishers.values().any(|p| {
                    *p.stream == *stream && p.reference.as_deref() == Some(reference.as_str())
                }));
        if taken || reference.len() > MAX_REFERENCE_LEN {
            let code = ResponseCode::PreconditionFailed;
            self.respond(Command::DeclarePublisher, correlation_id, code, now);
            return;
        }
        let reference = (!reference.is_empty()).then_some(reference);
        if self.pending.contains_key(&correlation_id) {
            let code = ResponseCode::PreconditionFailed;
            self.respond(Command::DeclarePublisher, correlation_id, code, now);
            return;
        }
        let publisher = Publisher {
            stream: Arc::from(stream.as_str()),
            reference: reference.as_deref().map(Arc::from),
            live: false,
        };
        self.publishers.insert(publisher_id, publisher);
        let request = Request::DeclarePublisher {
            publisher_id,
            reference,
            stream,
        };
        let pending = Pending::DeclarePublisher(publisher_id);
        self.request(correlation_id, request, pending, now);
    }

    /// The broker's answer to a declare: the publisher is live or gone.
    pub(super) fn on_publisher_declared(&mut self, publisher_id: u8, code: ResponseCode) {
        if code == ResponseCode::Ok {
            if let Some(p) = self.publishers.get_mut(&publisher_id) {
                p.live = true;
            }
        } else {
            self.publishers.remove(&publisher_id);
        }
    }

    pub(super) fn on_delete_publisher(
        &mut self,
        correlation_id: u32,
        publisher_id: u8,
        now: Instant,
    ) {
        let live = self.publishers.get(&publisher_id).is_some_and(|p| p.live);
        let Some(p) = live
            .then(|| self.publishers.remove(&publisher_id))
            .flatten()
        else {
            let code = ResponseCode::PublisherDoesNotExist;
            self.respond(Command::DeletePublisher, correlation_id, code, now);
            return;
        };
        self.respond(
            Command::DeletePublisher,
            correlation_id,
            ResponseCode::Ok,
            now,
        );
        self.push(Action::DeletePublisher {
            publisher_id,
            stream: p.stream.to_string(),
            reference: p.reference.map(|r| r.to_string()),
        });
    }

    pub(super) fn on_publish(
        &mut self,
        version: u16,
        publisher_id: u8,
        messages: Vec<PublishedMessage>,
        now: Instant,
    ) {
        match self.publishers.get(&publisher_id) {
            Some(p) if p.live => {
                let action = Action::Publish {
                    publisher_id,
                    stream: p.stream.clone(),
                    reference: p.reference.clone(),
                    version,
                    messages,
                };
                self.push(action);
            }
            _ => {
                let errors = messages
                    .iter()
                    .map(|m| PublishingError {
                        publishing_id: m.publishing_id,
                        code: ResponseCode::PublisherDoesNotExist,
                    })
                    .collect();
                let answer = ServerMessage::PublishError {
                    publisher_id,
                    errors,
                };
                self.send(&answer, now);
            }
        }
    }

    pub(super) fn on_publish_confirm(&mut self, publisher_id: u8, ids: Vec<u64>, now: Instant) {
        if !ids.is_empty() && self.publishers.get(&publisher_id).is_some_and(|p| p.live) {
            let confirm = ServerMessage::PublishConfirm {
                publisher_id,
                publishing_ids: ids,
            };
            self.send(&confirm, now);
        }
    }

    pub(super) fn on_publish_error(
        &mut self,
        publisher_id: u8,
        errors: Vec<PublishingError>,
        now: Instant,
    ) {
        if !errors.is_empty() && self.publishers.get(&publisher_id).is_some_and(|p| p.live) {
            let error = ServerMessage::PublishError {
                publisher_id,
                errors,
            };
            self.send(&error, now);
        }
    }

    pub(super) fn on_subscribe(&mut self, correlation_id: u32, sub: SubscribeArgs, now: Instant) {
        let (subscription_id, stream, offset, credit, properties) = sub;
        let code = if self.subscriptions.contains_key(&subscription_id) {
            Some(ResponseCode::SubscriptionIdAlreadyExists)
        } else if single_active_without_name(&properties)
            || self.pending.contains_key(&correlation_id)
        {
            Some(ResponseCode::PreconditionFailed)
        } else {
            None
        };
        if let Some(code) = code {
            self.respond(Command::Subscribe, correlation_id, code, now);
            return;
        }
        let subscription = Subscription {
            stream: stream.clone(),
            credit: u32::from(credit),
            live: false,
            queued: VecDeque::new(),
            properties: properties.clone(),
        };
        self.subscriptions.insert(subscription_id, subscription);
        let request = Request::Subscribe {
            subscription_id,
            stream,
            offset,
            credit,
            properties,
        };
        let pending = Pending::Subscribe(subscription_id);
        self.request(correlation_id, request, pending, now);
    }

    /// The broker's answer to a subscribe: the subscription is live (and
    /// gets what was queued for it) or gone.
    pub(super) fn on_subscribed(&mut self, subscription_id: u8, code: ResponseCode, now: Instant) {
        if code == ResponseCode::Ok {
            if let Some(s) = self.subscriptions.get_mut(&subscription_id) {
                s.live = true;
            }
            self.send_queued(subscription_id, now);
        } else {
            self.subscriptions.remove(&subscription_id);
        }
    }

    pub(super) fn on_unsubscribe(
        &mut self,
        correlation_id: u32,
        subscription_id: u8,
        now: Instant,
    ) {
        let live = self
            .subscriptions
            .get(&subscription_id)
            .is_some_and(|s| s.live);
        let Some(s) = live
            .then(|| self.subscriptions.remove(&subscription_id))
            .flatten()
        else {
            let code = ResponseCode::SubscriptionIdDoesNotExist;
            self.respond(Command::Unsubscribe, correlation_id, code, now);
            return;
        };
        self.respond(Command::Unsubscribe, correlation_id, ResponseCode::Ok, now);
        self.push(Action::Unsubscribe {
            subscription_id,
            stream: s.stream,
        });
    }

    pub(super) fn on_credit(&mut self, subscription_id: u8, credit: u16, now: Instant) {
        let Some(s) = self.subscriptions.get_mut(&subscription_id) else {
            // RabbitMQ's answer, the only response without a correlation id.
            let answer = ServerMessage::CreditResponse {
                code: ResponseCode::SubscriptionIdDoesNotExist,
                subscription_id,
            };
            self.send(&answer, now);
            return;
        };
        s.credit = s.credit.saturating_add(u32::from(credit));
        self.send_queued(subscription_id, now);
        self.push(Action::Credit {
            subscription_id,
            credit,
        });
    }

    pub(super) fn on_deliver(
        &mut self,
        subscription_id: u8,
        committed_chunk_id: u64,
        chunk: ChunkSource,
        now: Instant,
    ) {
        // A chunk for a subscription that is gone is a leftover: dropped.
        if let Some(s) = self.subscriptions.get_mut(&subscription_id) {
            s.queued.push_back((committed_chunk_id, chunk));
            self.send_queued(subscription_id, now);
        }
    }

    /// Sends the subscription's queued chunks while it is live and has credit.
    fn send_queued(&mut self, subscription_id: u8, now: Instant) {
        loop {
            let Some(s) = self.subscriptions.get_mut(&subscription_id) else {
                return;
            };
            if !s.live || s.credit == 0 {
                return;
            }
            let Some((committed, chunk)) = s.queued.pop_front() else {
                return;
            };
            s.credit -= 1;
            let mut head = BytesMut::with_capacity(21);
            let committed = self.deliver_v2.then_some(committed);
            encode_deliver_header(&mut head, subscription_id, committed, chunk.len());
            self.last_sent = now;
            self.push(Action::WriteChunk {
                head: head.freeze(),
                chunk,
            });
        }
    }

    /// The stream is gone (or moved): forget its publishers and subscriptions
    /// and, if there were any, tell the client.
    pub(super) fn on_stream_gone(&mut self, stream: &str, code: ResponseCode, now: Instant) {
        let before = self.publishers.len() + self.subscriptions.len();
        self.publishers
            .retain(|_, p| !(p.live && &*p.stream == stream));
        self.subscriptions
            .retain(|_, s| !(s.live && s.stream == stream));
        if self.publishers.len() + self.subscriptions.len() < before {
            let update = ServerMessage::MetadataUpdate {
                code,
                stream: stream.to_owned(),
            };
            self.send(&update, now);
        }
    }

    pub(super) fn on_consumer_update(&mut self, subscription_id: u8, active: bool, now: Instant) {
        if !self.subscriptions.contains_key(&subscription_id) {
            return;
        }
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.consumer_updates
            .insert(correlation_id, subscription_id);
        let update = ServerMessage::ConsumerUpdate {
            correlation_id,
            subscription_id,
            active,
        };
        self.send(&update, now);
    }

    /// A code-only response.
    fn respond(&mut self, command: Command, correlation_id: u32, code: ResponseCode, now: Instant) {
        let answer = ServerMessage::Response {
            command,
            correlation_id,
            code,
        };
        self.send(&answer, now);
    }
}

/// RabbitMQ refuses a single active consumer without a name.
fn single_active_without_name(properties: &Properties) -> bool {
    let has = |key: &str, value: Option<&str>| {
        properties
            .iter()
            .any(|(k, v)| k == key && value.is_none_or(|want| v == want))
    };
    has("single-active-consumer", Some("true")) && !has("name", None)
}

#[cfg(test)]
#[path = "streams_tests.rs"]
mod tests;
