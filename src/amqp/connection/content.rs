//! Content assembly: basic.publish, then a content header, then body frames.

use super::{Action, Connection, MAX_MESSAGE_SIZE};
use crate::error::{AmqpError, ReplyCode};
use crate::master::inout::Input;
use bytes::{Bytes, BytesMut};
use stablemq_protocol::{ByteString, Frame};

impl Connection {
    pub(super) fn content_frame(&mut self, ch: u16, frame: Frame, out: &mut Vec<Action>) {
        let Some(slot) = self.channels.get_mut(&ch) else {
            return;
        };
        let Some(pending) = slot.content.as_mut() else {
            return;
        };
        match (frame, pending.header.is_some()) {
            (
                Frame::Header {
                    class_id,
                    body_size,
                    properties,
                    ..
                },
                false,
            ) => {
                if class_id != 60 {
                    let e = AmqpError::new(
                        ReplyCode::FrameError,
                        format!("content header for class {class_id}, expected 60"),
                    );
                    return self.close_connection(&e, out);
                }
                if body_size > MAX_MESSAGE_SIZE {
                    slot.content = None;
                    let e = AmqpError::precondition(format!(
                        "message size {body_size} is larger than configured max size {MAX_MESSAGE_SIZE}"
                    ))
                    .on(60, 40);
                    out.push(Action::ToMaster(Input::ChannelError {
                        conn: self.id,
                        ch,
                        error: e,
                    }));
                    return;
                }
                pending.header = Some((properties, body_size));
            }
            (Frame::Body { payload, .. }, true) => {
                pending.received += payload.len() as u64;
                if !payload.is_empty() {
                    pending.parts.push(payload);
                }
            }
            (_, has_header) => {
                let text = if has_header {
                    "expected content body, got non content body frame instead"
                } else {
                    "expected content header for class 60, got non content header frame instead"
                };
                let e = AmqpError::new(ReplyCode::UnexpectedFrame, text);
                return self.close_connection(&e, out);
            }
        }
        let Some((_, size)) = pending.header else {
            return;
        };
        if pending.received > size {
            let e = AmqpError::new(
                ReplyCode::FrameError,
                format!("content body exceeds declared size {size}"),
            );
            return self.close_connection(&e, out);
        }
        if pending.received == size {
            let Some(done) = slot.content.take() else {
                return;
            };
            let Some((properties, _)) = done.header else {
                return;
            };
            let mut publish = done.publish;
            if done.parts.len() != 1 {
                // The exchange and routing key are slices of the read buffer,
                // which a one-frame body keeps alive anyway. A joined body or
                // none does not: copied, they let the read buffer go.
                publish.exchange = ByteString::from(&*publish.exchange);
                publish.routing_key = ByteString::from(&*publish.routing_key);
            }
            let body = join(done.parts, size);
            out.push(Action::ToMaster(Input::Publish {
                conn: self.id,
                ch,
                publish,
                properties,
                body,
            }));
        }
    }
}

/// One body frame stays a zero-copy slice; several are joined once.
fn join(mut parts: smallvec::SmallVec<[Bytes; 1]>, size: u64) -> Bytes {
    match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(usize::try_from(size).unwrap_or(0));
            for p in parts {
                b.extend_from_slice(&p);
            }
            b.freeze()
        }
    }
}
