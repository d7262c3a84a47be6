//! The frames of an open connection: the channel table (open, close, a
//! close crossing ours, a number reused), channel 0's methods, and every
//! other method on to the master; a publish starts content assembly.

use super::{Action, Connection, PendingContent, Slot, SlotState};
use crate::error::{AmqpError, ReplyCode};
use crate::master::inout::Input;
use stablemq_protocol::methods::{basic, channel as mch, connection as mconn};
use stablemq_protocol::{AMQPClass, Frame, Publish};

impl Connection {
    /// A frame of an open connection: channel 0's, or one for a channel,
    /// as the channel's state has it.
    pub(super) fn open_frame(&mut self, frame: Frame, out: &mut Vec<Action>) {
        let ch = frame.channel();
        if ch == 0 {
            return self.channel_zero(frame, out);
        }
        if let Frame::Heartbeat { .. } = frame {
            let e = AmqpError::new(
                ReplyCode::FrameError,
                format!("heartbeat frame on channel {ch}"),
            );
            return self.close_connection(&e, out);
        }
        let Some(slot) = self.channels.get_mut(&ch) else {
            return self.unopened_channel_frame(ch, frame, out);
        };
        match slot.state {
            SlotState::ClosingByClient => {}
            SlotState::ClosingByServer => self.closing_channel_frame(ch, frame, out),
            SlotState::Open => {
                if slot.content.is_some() {
                    return self.content_frame(ch, frame, out);
                }
                match frame {
                    Frame::Method { method, .. } => self.channel_method(ch, method, out),
                    Frame::Publish { publish, .. } => self.channel_publish(ch, publish, out),
                    _ => {
                        let e = AmqpError::new(
                            ReplyCode::UnexpectedFrame,
                            format!(
                                "expected method frame, got non method frame instead on channel {ch}"
                            ),
                        );
                        self.close_connection(&e, out)
                    }
                }
            }
        }
    }

    /// A frame for channel `ch`, which is not open: channel.open opens it
    /// (within channel_max), anything else closes the connection.
    fn unopened_channel_frame(&mut self, ch: u16, frame: Frame, out: &mut Vec<Action>) {
        match frame {
            Frame::Method {
                method: AMQPClass::Channel(mch::AMQPMethod::Open(_)),
                ..
            } => {
                // RabbitMQ limits how many channels are open, not their numbers.
                if self.channel_max != 0 && self.channels.len() >= usize::from(self.channel_max) {
                    let e = AmqpError::new(
                        ReplyCode::NotAllowed,
                        format!(
                            "number of channels opened ({}) has reached the negotiated channel_max ({})",
                            self.channels.len(),
                            self.channel_max
                        ),
                    )
                    .on(20, 10);
                    return self.close_connection(&e, out);
                }
                self.channels.insert(
                    ch,
                    Slot {
                        state: SlotState::Open,
                        content: None,
                    },
                );
                out.push(Action::ToMaster(Input::ChannelOpen { conn: self.id, ch }));
            }
            other => {
                let (cid, mid) = method_ids(&other);
                let e =
                    AmqpError::new(ReplyCode::ChannelError, "expected 'channel.open'").on(cid, mid);
                self.close_connection(&e, out)
            }
        }
    }

    /// A frame for channel `ch`, which the server closed: only channel
    /// methods count, until the client's close-ok.
    fn closing_channel_frame(&mut self, ch: u16, frame: Frame, out: &mut Vec<Action>) {
        if let Frame::Method {
            method: AMQPClass::Channel(m),
            ..
        } = frame
        {
            match m {
                mch::AMQPMethod::CloseOk(_) => {
                    self.channels.remove(&ch);
                }
                // A crossing close: answer it, and keep waiting for the
                // close-ok to ours, which the client still sends (RabbitMQ
                // waits for it too). Dropping the slot here would make that
                // close-ok a frame on an unopened channel: 504 for the whole
                // connection (amqp091-go's TestChannelExceptionWithCloseIssue43).
                mch::AMQPMethod::Close(_) => {
                    out.push(self.method(
                        ch,
                        AMQPClass::Channel(mch::AMQPMethod::CloseOk(mch::CloseOk {})),
                    ));
                }
                // A client that never sent that close-ok reuses the number.
                mch::AMQPMethod::Open(open) => {
                    self.channels.remove(&ch);
                    let frame = Frame::Method {
                        channel: ch,
                        method: AMQPClass::Channel(mch::AMQPMethod::Open(open)),
                    };
                    self.open_frame(frame, out);
                }
                _ => {}
            }
        }
    }

    fn channel_zero(&mut self, frame: Frame, out: &mut Vec<Action>) {
        match frame {
            Frame::Heartbeat { .. } => {}
            Frame::Method {
                method: AMQPClass::Connection(mconn::AMQPMethod::Close(_)),
                ..
            } => {
                if self.told_master {
                    self.told_master = false;
                    out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
                }
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::CloseOk(mconn::CloseOk {})),
                ));
                self.linger(out);
            }
            // A new secret (token refresh): with password logins there is nothing to
            // re-check, so accept it as RabbitMQ's internal backend does.
            Frame::Method {
                method: AMQPClass::Connection(mconn::AMQPMethod::UpdateSecret(_)),
                ..
            } => out.push(self.method(
                0,
                AMQPClass::Connection(mconn::AMQPMethod::UpdateSecretOk(mconn::UpdateSecretOk {})),
            )),
            // Clients may tell us they are blocked/unblocked; ignore.
            Frame::Method {
                method:
                    AMQPClass::Connection(
                        mconn::AMQPMethod::Blocked(_)
                        | mconn::AMQPMethod::Unblocked(_)
                        | mconn::AMQPMethod::CloseOk(_),
                    ),
                ..
            } => {}
            Frame::Method { .. } | Frame::Publish { .. } => {
                let (cid, mid) = method_ids(&frame);
                let e = AmqpError::command_invalid("unexpected method on channel 0").on(cid, mid);
                self.close_connection(&e, out)
            }
            _ => {
                let e = AmqpError::new(ReplyCode::UnexpectedFrame, "content frame on channel 0");
                self.close_connection(&e, out)
            }
        }
    }

    fn channel_method(&mut self, ch: u16, method: AMQPClass, out: &mut Vec<Action>) {
        match method {
            AMQPClass::Channel(mch::AMQPMethod::Open(_)) => {
                let e = AmqpError::new(ReplyCode::ChannelError, "second 'channel.open' seen")
                    .on(20, 10);
                self.close_connection(&e, out)
            }
            AMQPClass::Channel(mch::AMQPMethod::Close(_)) => {
                if let Some(slot) = self.channels.get_mut(&ch) {
                    slot.state = SlotState::ClosingByClient;
                }
                out.push(Action::ToMaster(Input::ChannelClose { conn: self.id, ch }));
            }
            AMQPClass::Channel(mch::AMQPMethod::CloseOk(_)) => {}
            // Only when the hand parser left it to amq-protocol's (see
            // `Frame::Publish`).
            AMQPClass::Basic(basic::AMQPMethod::Publish(p)) => {
                self.channel_publish(ch, p.into(), out)
            }
            AMQPClass::Connection(_) => {
                let e = AmqpError::command_invalid(format!("connection method on channel {ch}"))
                    .on(method.get_amqp_class_id(), method.get_amqp_method_id());
                self.close_connection(&e, out)
            }
            method => out.push(Action::ToMaster(Input::Method {
                conn: self.id,
                ch,
                method,
            })),
        }
    }
}

impl Connection {
    /// basic.publish starts content assembly: the header and bodies follow.
    fn channel_publish(&mut self, ch: u16, publish: Publish, out: &mut Vec<Action>) {
        if !self.has_published {
            self.has_published = true;
            self.update_blocked(out);
        }
        if let Some(slot) = self.channels.get_mut(&ch) {
            slot.content = Some(PendingContent {
                publish,
                header: None,
                parts: smallvec::SmallVec::new(),
                received: 0,
            });
        }
    }
}

fn method_ids(f: &Frame) -> (u16, u16) {
    match f {
        Frame::Method { method, .. } => (method.get_amqp_class_id(), method.get_amqp_method_id()),
        Frame::Publish { .. } => (60, 40),
        _ => (0, 0),
    }
}
