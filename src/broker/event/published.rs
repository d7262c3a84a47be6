//! The one place a publish changes form: a [`Message`] routed to queues
//! becomes an [`Event::Published`] on the master, and the event becomes the
//! message again wherever it is applied (the master, a replica, the stores'
//! state).
//!
//! The event keeps its own flat fields because they are its log format
//! (postcard writes fields in order); the message is what queues hold.

use super::Event;
use crate::broker::QueueList;
use crate::broker::message::Message;
use std::sync::Arc;

/// A publish, taken out of its event.
#[derive(Debug)]
pub struct Published {
    /// Vhost of the exchange and of every target queue.
    pub vhost: Arc<str>,
    /// The message, with the id and clock the master gave it.
    pub msg: Message,
    /// The queues it was routed to.
    pub queues: QueueList,
}

impl Event {
    /// The event of publishing `msg` into `queues` of `vhost`.
    pub fn published(vhost: Arc<str>, msg: Message, queues: QueueList) -> Event {
        let Message {
            id,
            exchange,
            routing_key,
            properties,
            body,
            timestamp_ms,
        } = msg;
        Event::Published {
            vhost,
            exchange,
            routing_key,
            msg_id: id,
            timestamp_ms,
            properties,
            body,
            queues,
        }
    }

    /// The publish this event is, moved out (no copy of the body); None for
    /// any other event.
    pub fn into_published(self) -> Option<Published> {
        match self {
            Event::Published {
                vhost,
                exchange,
                routing_key,
                msg_id,
                timestamp_ms,
                properties,
                body,
                queues,
            } => Some(Published {
                vhost,
                msg: Message {
                    id: msg_id,
                    exchange,
                    routing_key,
                    properties,
                    body,
                    timestamp_ms,
                },
                queues,
            }),
            _ => None,
        }
    }
}
