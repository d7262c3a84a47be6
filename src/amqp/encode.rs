//! Encoding what the master sends into frames, with publisher confirms merged.

use crate::master::inout::ToConn;
use bytes::BytesMut;
use stablemq_protocol::methods::basic;
use stablemq_protocol::{AMQPClass, Frame, encode_content, encode_deliver, encode_frame};

/// Writes [`ToConn`] messages into a buffer, merging runs of acks on one channel
/// into a single `multiple` ack (valid because confirms come in tag order, I5).
#[derive(Debug, Default)]
pub struct Encoder {
    /// (channel, highest tag, how many merged) of the run not yet written.
    pending_ack: Option<(u16, u64, u32)>,
}

impl Encoder {
    /// Encode one message (acks may be held back until [`Encoder::flush`]).
    pub fn push(&mut self, msg: ToConn, frame_max: u32, out: &mut BytesMut) {
        if let ToConn::Confirm { ch, tag, ack: true } = msg {
            match self.pending_ack {
                Some((c, _, n)) if c == ch => self.pending_ack = Some((ch, tag, n + 1)),
                _ => {
                    self.flush(out);
                    self.pending_ack = Some((ch, tag, 1));
                }
            }
            return;
        }
        self.flush(out);
        match msg {
            ToConn::Method(ch, method) => encode_frame(
                &Frame::Method {
                    channel: ch,
                    method,
                },
                out,
            ),
            ToConn::Confirm { ch, tag, ack: _ } => {
                let m = AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
                    delivery_tag: tag,
                    multiple: false,
                    requeue: false,
                }));
                encode_frame(
                    &Frame::Method {
                        channel: ch,
                        method: m,
                    },
                    out,
                );
            }
            ToConn::Deliver {
                ch,
                consumer_tag,
                delivery_tag,
                redelivered,
                msg,
            } => encode_deliver(
                ch,
                &consumer_tag,
                delivery_tag,
                redelivered,
                &msg.exchange,
                &msg.routing_key,
                &msg.properties,
                &msg.body,
                frame_max,
                out,
            ),
            ToConn::GetOk {
                ch,
                delivery_tag,
                redelivered,
                message_count,
                msg,
            } => {
                let m = AMQPClass::Basic(basic::AMQPMethod::GetOk(basic::GetOk {
                    delivery_tag,
                    redelivered,
                    exchange: (&*msg.exchange).into(),
                    routing_key: (&*msg.routing_key).into(),
                    message_count,
                }));
                encode_content(ch, &m, &msg.properties, &msg.body, frame_max, out);
            }
            ToConn::Return {
                ch,
                reply_code,
                reply_text,
                exchange,
                routing_key,
                properties,
                body,
            } => {
                let m = AMQPClass::Basic(basic::AMQPMethod::Return(basic::Return {
                    reply_code,
                    reply_text: reply_text.into(),
                    exchange: (&*exchange).into(),
                    routing_key: (&*routing_key).into(),
                }));
                encode_content(ch, &m, &properties, &body, frame_max, out);
            }
            // Handled by the connection state machine before encoding.
            // Only stream connections ask for tracking and get records.
            ToConn::Opened
            | ToConn::Tracked { .. }
            | ToConn::StreamRecords { .. }
            | ToConn::StreamDeleted(_)
            | ToConn::SingleActive(_)
            | ToConn::CloseChannel(..)
            | ToConn::CloseConnection(_)
            | ToConn::Alarm(_) => {}
        }
    }

    /// Write a held-back ack run.
    pub fn flush(&mut self, out: &mut BytesMut) {
        if let Some((ch, tag, n)) = self.pending_ack.take() {
            let m = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: tag,
                multiple: n > 1,
            }));
            encode_frame(
                &Frame::Method {
                    channel: ch,
                    method: m,
                },
                out,
            );
        }
    }
}
