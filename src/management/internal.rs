//! Internal sessions: the management API's own AMQP-shaped connections to
//! the master core.
//!
//! RabbitMQ's management plugin declares queues, publishes and gets messages
//! over an internal ("direct") AMQP connection opened as the API user. This
//! does the same without a socket: a session registers its own outbox with
//! the master task under a connection id from a reserved range and sends the
//! very [`Input`]s a connection task would (open, channel.open, methods,
//! publishes), then reads the replies the core sends back. So every rule of
//! the AMQP path holds for the API too, with no second implementation:
//! validation, permission checks, and the wait for the stable index before
//! a reply (I1) — a 201 from a PUT means the declaration is in the log.
//!
//! Internal sessions are hidden from `/api/connections` and `/api/channels`
//! ([`is_internal`]).

use super::AppState;
use crate::error::AmqpError;
use crate::master::inout::{ConnId, ConnInfo, Input, ToConn};
use crate::server::MasterMsg;
use bytes::Bytes;
use stablemq_protocol::methods::{basic as mbasic, confirm as mconfirm};
use stablemq_protocol::{
    AMQPClass, AMQPValue, BasicProperties, FieldTable, LongString, Publish, ShortString,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// First connection id of internal sessions; socket connections count up
/// from 1 and never get near it.
pub const INTERNAL_BASE: ConnId = 1 << 62;

/// Ids of internal sessions, counting up from [`INTERNAL_BASE`].
static NEXT_ID: AtomicU64 = AtomicU64::new(INTERNAL_BASE);

/// How long a session waits for one answer: the master may wait for a
/// quorum of stores, and an operator should get 503 rather than a hang.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The channel number every internal session uses.
const CH: u16 = 1;

/// Whether a connection id belongs to an internal session.
pub fn is_internal(id: ConnId) -> bool {
    id >= INTERNAL_BASE
}

/// Why an internal operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The core refused it, as it would refuse a client.
    #[error("{0}")]
    Amqp(AmqpError),
    /// No master here, or it did not answer in time.
    #[error("{0}")]
    Unavailable(&'static str),
}

/// A message taken with basic.get.
#[derive(Debug)]
pub struct Got {
    /// Delivery tag on the session's channel.
    pub delivery_tag: u64,
    /// Redelivered flag.
    pub redelivered: bool,
    /// Messages left in the queue.
    pub message_count: u32,
    /// Exchange it was published to.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Properties.
    pub properties: BasicProperties,
    /// Body.
    pub body: Bytes,
}

/// One internal session: a connection with one channel.
pub struct Session {
    id: ConnId,
    master: mpsc::Sender<MasterMsg>,
    rx: crate::server::outbox::OutboxRx,
    /// The rest of the last batch from the master, in order.
    received: std::collections::VecDeque<ToConn>,
    /// Channel 1 is open (a refusal closes it; the next call reopens it).
    ch_open: bool,
    /// confirm.select was sent on the open channel.
    confirming: bool,
    /// Last publish sequence number on the channel.
    publish_seq: u64,
}

impl Session {
    /// Open a session as `user` on `vhost`.
    pub async fn open(state: &AppState, user: &str, vhost: &str) -> Result<Session, SessionError> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = crate::server::outbox::channel();
        let mut s = Session {
            id,
            master: state.master.clone(),
            rx,
            received: std::collections::VecDeque::new(),
            ch_open: false,
            confirming: false,
            publish_seq: 0,
        };
        s.send_msg(MasterMsg::Register(id, tx)).await?;
        let mut props = FieldTable::default();
        props.insert(
            ShortString::from("product"),
            AMQPValue::LongString(LongString::from("StableMQ management")),
        );
        let info = ConnInfo {
            client_properties: props,
            auth_mechanism: "internal".into(),
            ..ConnInfo::default()
        };
        s.send(Input::Open {
            conn: id,
            user: user.to_string(),
            vhost: vhost.to_string(),
            info: Box::new(info),
        })
        .await?;
        match s.recv().await? {
            ToConn::Opened => Ok(s),
            _ => Err(SessionError::Unavailable("unexpected answer to open")),
        }
    }

    async fn send_msg(&self, m: MasterMsg) -> Result<(), SessionError> {
        match tokio::time::timeout(REPLY_TIMEOUT, self.master.send(m)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(SessionError::Unavailable(
                "this node runs no broker, or it is stopping",
            )),
            Err(_) => Err(SessionError::Unavailable(
                "the broker did not answer in time",
            )),
        }
    }

    async fn send(&self, i: Input) -> Result<(), SessionError> {
        self.send_msg(MasterMsg::Input(i)).await
    }

    /// The next message for this session; refusals become errors.
    async fn recv(&mut self) -> Result<ToConn, SessionError> {
        loop {
            if let Some(m) = self.received.pop_front() {
                match m {
                    ToConn::Alarm(_) => continue,
                    ToConn::CloseChannel(_, e) => {
                        self.ch_open = false;
                        self.confirming = false;
                        return Err(SessionError::Amqp(e));
                    }
                    ToConn::CloseConnection(e) => return Err(SessionError::Amqp(e)),
                    other => return Ok(other),
                }
            }
            let batch = match tokio::time::timeout(REPLY_TIMEOUT, self.rx.recv()).await {
                Ok(Some(b)) => b,
                Ok(None) => return Err(SessionError::Unavailable("the broker closed the session")),
                Err(_) => {
                    return Err(SessionError::Unavailable(
                        "the broker did not answer in time",
                    ));
                }
            };
            self.received.extend(batch);
        }
    }

    async fn ensure_channel(&mut self) -> Result<(), SessionError> {
        if self.ch_open {
            return Ok(());
        }
        self.send(Input::ChannelOpen {
            conn: self.id,
            ch: CH,
        })
        .await?;
        self.recv().await?;
        self.ch_open = true;
        self.publish_seq = 0;
        Ok(())
    }

    /// Send a method and wait for its reply.
    pub async fn call(&mut self, method: AMQPClass) -> Result<ToConn, SessionError> {
        self.cast(method).await?;
        self.recv().await
    }

    /// Send a method that has no reply (basic.ack, basic.reject).
    pub async fn cast(&mut self, method: AMQPClass) -> Result<(), SessionError> {
        self.ensure_channel().await?;
        self.send(Input::Method {
            conn: self.id,
            ch: CH,
            method,
        })
        .await
    }

    /// basic.get: None when the queue is empty.
    pub async fn get(&mut self, queue: &str, no_ack: bool) -> Result<Option<Got>, SessionError> {
        let m = AMQPClass::Basic(mbasic::AMQPMethod::Get(mbasic::Get {
            queue: queue.into(),
            no_ack,
        }));
        match self.call(m).await? {
            ToConn::GetOk {
                delivery_tag,
                redelivered,
                message_count,
                msg,
                ..
            } => Ok(Some(Got {
                delivery_tag,
                redelivered,
                message_count,
                exchange: msg.exchange.to_string(),
                routing_key: msg.routing_key.to_string(),
                properties: (*msg.properties).clone(),
                body: msg.body.clone(),
            })),
            _ => Ok(None),
        }
    }

    /// Publish with confirms and `mandatory`; true when the message reached
    /// a queue. Returns once the publish is confirmed (stable).
    pub async fn publish(
        &mut self,
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: Bytes,
    ) -> Result<bool, SessionError> {
        self.ensure_channel().await?;
        if !self.confirming {
            let select = AMQPClass::Confirm(mconfirm::AMQPMethod::Select(mconfirm::Select {
                nowait: false,
            }));
            self.call(select).await?;
            self.confirming = true;
        }
        self.send(Input::Publish {
            conn: self.id,
            ch: CH,
            publish: Publish {
                exchange: exchange.into(),
                routing_key: routing_key.into(),
                mandatory: true,
                immediate: false,
            },
            properties: Arc::new(properties),
            body,
        })
        .await?;
        self.publish_seq += 1;
        let mut routed = true;
        loop {
            match self.recv().await? {
                ToConn::Return { .. } => routed = false,
                ToConn::Confirm { tag, .. } if tag >= self.publish_seq => return Ok(routed),
                _ => {}
            }
        }
    }
}

impl Drop for Session {
    /// Tell the master the session is gone: it forgets the channel and
    /// requeues what the session still holds, as for a closed socket.
    fn drop(&mut self) {
        let master = self.master.clone();
        let conn = self.id;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = master
                    .send(MasterMsg::Input(Input::Disconnected { conn }))
                    .await;
            });
        }
    }
}
