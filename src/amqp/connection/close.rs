//! Closing: with an error (connection.close, then wait for close-ok), at
//! server shutdown (320), after the client's close (linger until it closes
//! the socket), or at once (EOF, a timeout); the master hears once that the
//! connection is gone.

use std::time::Instant;

use super::{Action, Connection, Phase};
use crate::error::{AmqpError, ReplyCode};
use crate::master::inout::Input;
use stablemq_protocol::methods::connection as mconn;
use stablemq_protocol::{AMQPClass, ShortString};

impl Connection {
    pub(super) fn closed(&mut self, out: &mut Vec<Action>) {
        if self.told_master {
            self.told_master = false;
            out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
        }
        self.phase = Phase::Closed;
        out.push(Action::Close);
    }

    /// After our close-ok, wait for the client to close the socket, as RabbitMQ does,
    /// so the client reads close-ok before it sees EOF. `on_tick` ends the wait.
    pub(super) fn linger(&mut self, out: &mut Vec<Action>) {
        if self.told_master {
            self.told_master = false;
            out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
        }
        self.phase = Phase::Closing;
        self.lingering = true;
        self.closing_since = Some(self.last_recv);
    }

    /// The socket reached EOF or failed.
    pub fn on_eof(&mut self, out: &mut Vec<Action>) {
        if self.phase != Phase::Closed {
            self.closed(out);
        }
    }

    /// Close the connection with an error (connection.close, then wait for close-ok).
    pub fn close_connection(&mut self, e: &AmqpError, out: &mut Vec<Action>) {
        self.close_connection_raw(e.code as u16, e.reply_text(), e.class_id, e.method_id, out);
    }

    pub(super) fn close_connection_raw(
        &mut self,
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
        out: &mut Vec<Action>,
    ) {
        if matches!(self.phase, Phase::Closing | Phase::Closed) {
            return;
        }
        tracing::debug!(conn = self.id, code, %text, "closing connection");
        out.push(self.method(
            0,
            AMQPClass::Connection(mconn::AMQPMethod::Close(mconn::Close {
                reply_code: code,
                reply_text: ShortString::from(text),
                class_id,
                method_id,
            })),
        ));
        if self.told_master {
            self.told_master = false;
            out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
        }
        self.phase = Phase::Closing;
        self.closing_since = Some(self.last_recv.max(self.last_send));
    }

    /// Server shutdown: close with 320 CONNECTION_FORCED.
    pub fn shutdown(&mut self, now: Instant, out: &mut Vec<Action>) {
        let e = AmqpError::new(
            ReplyCode::ConnectionForced,
            "broker forced connection closure with reason 'shutdown'",
        );
        self.close_connection(&e, out);
        self.closing_since = Some(now);
    }
}
