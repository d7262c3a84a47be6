//! A minimal raw AMQP 0-9-1 client for `stablemq perf`, built on the
//! `stablemq-protocol` frame codec and tokio.
//!
//! It does what a load generator needs and nothing else: the connection handshake
//! (PLAIN, heartbeats off), one channel, synchronous setup calls ([`Conn::rpc`]),
//! and non-blocking socket helpers ([`Conn::poll_fill`], [`Conn::poll_write_some`])
//! for the producer and consumer loops, which poll reads and writes from one task.
//!
//! The hot frames (basic.ack/nack from the broker, basic.deliver, content headers
//! and bodies, heartbeats) are read by [`scan_frames`] straight from the read
//! buffer without allocating; every other frame goes through
//! [`stablemq_protocol::decode_frame`].

use std::io;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use stablemq_protocol::methods::{basic, channel, connection};
use stablemq_protocol::{
    AMQPClass, AMQPValue, FRAME_END, FieldTable, Frame, LongString, PROTOCOL_HEADER, decode_frame,
    encode_frame,
};

pub use super::uri::AmqpUri;

/// How much the read buffer grows by before a read.
const READ_CHUNK: usize = 256 * 1024;
/// Setup steps (connect, handshake, declare) give up after this long.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The frame_max we ask for when the broker leaves it open (0).
const DEFAULT_FRAME_MAX: u32 = 131_072;

/// A frame as the hot loops see it. Only what the load generator reads is kept.
#[derive(Debug, PartialEq)]
pub enum Fast<'a> {
    /// basic.ack from the broker: a publisher confirm.
    Ack {
        /// The delivery tag.
        tag: u64,
        /// Whether it covers every tag up to `tag`.
        multiple: bool,
    },
    /// basic.nack from the broker.
    Nack {
        /// The delivery tag.
        tag: u64,
        /// Whether it covers every tag up to `tag`.
        multiple: bool,
    },
    /// basic.deliver (only the delivery tag).
    Deliver {
        /// The delivery tag.
        tag: u64,
    },
    /// A content header (only the body size).
    Header {
        /// The size of the whole body.
        body_size: u64,
    },
    /// A body frame's payload, borrowed from the read buffer.
    Body(&'a [u8]),
    /// A heartbeat from the broker.
    Heartbeat,
    /// Anything else, decoded in full.
    Other(Box<Frame>),
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .map(|s| u64::from_be_bytes(s.try_into().expect("8 octets")))
}

/// Read the hot frames of a complete frame's payload without allocating.
fn fast_frame(frame_type: u8, payload: &[u8]) -> Option<Fast<'_>> {
    match frame_type {
        1 if payload.len() >= 4 => match (be_u16(payload, 0), be_u16(payload, 2)) {
            (60, 80) if payload.len() >= 13 => Some(Fast::Ack {
                tag: be_u64(payload, 4)?,
                multiple: payload[12] & 1 == 1,
            }),
            (60, 120) if payload.len() >= 13 => Some(Fast::Nack {
                tag: be_u64(payload, 4)?,
                multiple: payload[12] & 1 == 1,
            }),
            (60, 60) => {
                let ctag_len = usize::from(*payload.get(4)?);
                Some(Fast::Deliver {
                    tag: be_u64(payload, 5 + ctag_len)?,
                })
            }
            _ => None,
        },
        2 if payload.len() >= 12 => Some(Fast::Header {
            body_size: be_u64(payload, 4)?,
        }),
        3 => Some(Fast::Body(payload)),
        8 => Some(Fast::Heartbeat),
        _ => None,
    }
}

/// Cut every complete frame off the front of `buf` and hand each to `f`. A
/// partial frame at the end stays in `buf`. `frame_max` 0 means no limit.
pub fn scan_frames<F>(buf: &mut BytesMut, frame_max: u32, mut f: F) -> Result<(), String>
where
    F: FnMut(Fast<'_>) -> Result<(), String>,
{
    let limit = if frame_max == 0 {
        u64::MAX
    } else {
        u64::from(frame_max) + 8
    };
    let mut pos = 0;
    loop {
        let slow = {
            let b = &buf[pos..];
            if b.len() < 7 {
                break;
            }
            let size = u32::from_be_bytes([b[3], b[4], b[5], b[6]]) as usize;
            if size as u64 + 8 > limit {
                return Err(format!("broker sent a {size}-octet frame, over frame_max"));
            }
            if b.len() < size + 8 {
                break;
            }
            if b[7 + size] != FRAME_END {
                return Err("broker sent a frame with a bad end octet".to_string());
            }
            match fast_frame(b[0], &b[7..7 + size]) {
                Some(fast) => {
                    f(fast)?;
                    pos += size + 8;
                    false
                }
                None => true,
            }
        };
        if slow {
            buf.advance(pos);
            pos = 0;
            match decode_frame(buf, 0) {
                Ok(Some(frame)) => f(Fast::Other(Box::new(frame)))?,
                Ok(None) => unreachable!("a complete frame decodes"),
                Err(e) => return Err(format!("bad frame from the broker: {e}")),
            }
        }
    }
    buf.advance(pos);
    Ok(())
}

/// Turn a close from the broker into an error message; `None` for other methods.
pub fn close_error(method: &AMQPClass) -> Option<String> {
    match method {
        AMQPClass::Connection(connection::AMQPMethod::Close(c)) => Some(format!(
            "connection closed by the broker: {} {}",
            c.reply_code,
            c.reply_text.as_str()
        )),
        AMQPClass::Channel(channel::AMQPMethod::Close(c)) => Some(format!(
            "channel closed by the broker: {} {}",
            c.reply_code,
            c.reply_text.as_str()
        )),
        AMQPClass::Basic(basic::AMQPMethod::Cancel(_)) => {
            Some("the broker cancelled the consumer".to_string())
        }
        _ => None,
    }
}

/// [`close_error`] of a frame that is a method.
pub fn frame_error(frame: &Frame) -> Option<String> {
    match frame {
        Frame::Method { method, .. } => close_error(method),
        _ => None,
    }
}

/// Append a heartbeat frame.
pub fn put_heartbeat(out: &mut Vec<u8>) {
    out.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// One connection with channel 1 open.
pub struct Conn {
    stream: super::stream::PerfStream,
    /// Bytes read and not yet cut into frames.
    pub rbuf: BytesMut,
    /// The negotiated frame_max.
    pub frame_max: u32,
}

impl Conn {
    /// Connect, log in, open the vhost and channel 1. `name` goes into the
    /// client properties (`connection_name`), as it shows in management tools.
    pub async fn open(uri: &AmqpUri, name: &str) -> Result<Conn, String> {
        tokio::time::timeout(SETUP_TIMEOUT, Conn::open_inner(uri, name))
            .await
            .map_err(|_| format!("{}: connection setup timed out", uri.display()))?
    }

    async fn open_inner(uri: &AmqpUri, name: &str) -> Result<Conn, String> {
        let at = uri.display();
        let stream = super::stream::PerfStream::connect(&uri.host, uri.port, uri.tls)
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        let mut conn = Conn {
            stream,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            frame_max: DEFAULT_FRAME_MAX,
        };
        conn.write_all(&PROTOCOL_HEADER).await?;
        match conn.read_method().await? {
            (0, AMQPClass::Connection(connection::AMQPMethod::Start(_))) => {}
            (_, m) => return Err(format!("{at}: expected connection.start, got {m:?}")),
        }
        let mut caps = FieldTable::default();
        for c in [
            "publisher_confirms",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
        ] {
            caps.insert(c.into(), AMQPValue::Boolean(true));
        }
        let mut props = FieldTable::default();
        props.insert("product".into(), long_str("stablemq perf"));
        props.insert("connection_name".into(), long_str(name));
        props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
        let response = format!("\0{}\0{}", uri.user, uri.password);
        conn.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: props,
                mechanism: "PLAIN".into(),
                response: LongString::from(response.into_bytes()),
                locale: "en_US".into(),
            })),
        )
        .await?;
        let tune = match conn.read_method().await? {
            (0, AMQPClass::Connection(connection::AMQPMethod::Tune(t))) => t,
            (_, m) => return Err(format!("{at}: login failed: {m:?}")),
        };
        conn.frame_max = if tune.frame_max == 0 {
            DEFAULT_FRAME_MAX
        } else {
            tune.frame_max
        };
        conn.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max: conn.frame_max,
                heartbeat: 0,
            })),
        )
        .await?;
        let open = AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: uri.vhost.as_str().into(),
        }));
        match conn.rpc_on(0, open).await {
            Ok(AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))) => {}
            Ok(m) => return Err(format!("{at}: expected connection.open-ok, got {m:?}")),
            Err(e) => return Err(format!("{at}: {e}")),
        }
        let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
        match conn.rpc(open).await? {
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)) => Ok(conn),
            m => Err(format!("{at}: expected channel.open-ok, got {m:?}")),
        }
    }

    /// Write `bytes` to the socket.
    pub async fn write_all(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    /// Encode `method` as one frame on `channel` and write it.
    pub async fn send_method(&mut self, channel: u16, method: AMQPClass) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode_frame(&Frame::Method { channel, method }, &mut out);
        self.write_all(&out).await
    }

    /// The next frame, answering heartbeats on the way.
    async fn read_frame(&mut self) -> Result<Frame, String> {
        loop {
            match decode_frame(&mut self.rbuf, self.frame_max.saturating_add(8)) {
                Ok(Some(Frame::Heartbeat { .. })) => {
                    let mut hb = Vec::new();
                    put_heartbeat(&mut hb);
                    self.write_all(&hb).await?;
                }
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(e) => return Err(format!("bad frame from the broker: {e}")),
            }
            self.rbuf.reserve(READ_CHUNK);
            let n = std::future::poll_fn(|cx| self.stream.poll_read_into(cx, &mut self.rbuf))
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the broker closed the connection".to_string());
            }
        }
    }

    /// The next method frame (content frames in between are skipped).
    async fn read_method(&mut self) -> Result<(u16, AMQPClass), String> {
        loop {
            if let Frame::Method { channel, method } = self.read_frame().await? {
                return Ok((channel, method));
            }
        }
    }

    /// Send a method on channel 1 and return the broker's reply; a close from
    /// the broker is an error.
    pub async fn rpc(&mut self, method: AMQPClass) -> Result<AMQPClass, String> {
        tokio::time::timeout(SETUP_TIMEOUT, self.rpc_on(1, method))
            .await
            .map_err(|_| "no reply from the broker".to_string())?
    }

    async fn rpc_on(&mut self, channel: u16, method: AMQPClass) -> Result<AMQPClass, String> {
        self.send_method(channel, method).await?;
        loop {
            let (ch, reply) = self.read_method().await?;
            if let Some(e) = close_error(&reply) {
                return Err(e);
            }
            if ch == channel {
                return Ok(reply);
            }
        }
    }

    /// Close the connection politely, waiting at most `wait` for close-ok.
    pub async fn close(mut self, wait: Duration) {
        let close = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "perf done".into(),
            class_id: 0,
            method_id: 0,
        }));
        let _ = tokio::time::timeout(wait, async {
            self.send_method(0, close).await?;
            loop {
                if let Frame::Method {
                    method: AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)),
                    ..
                } = self.read_frame().await?
                {
                    return Ok::<(), String>(());
                }
            }
        })
        .await;
    }

    /// Read whatever the socket has into `rbuf`. `Ready(Ok(0))` is end of stream.
    pub fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
        self.stream.poll_read_into(cx, &mut self.rbuf)
    }

    /// Write as much of `bytes` as the socket takes now.
    pub fn poll_write_some(
        &mut self,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_write_some(cx, bytes)
    }
}

fn long_str(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use stablemq_protocol::{BasicProperties, encode_deliver};

    #[test]
    fn scan_reads_hot_frames_without_decoding_and_keeps_partial_frames() {
        let mut wire = BytesMut::new();
        let ack = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 77,
            multiple: true,
        }));
        encode_frame(
            &Frame::Method {
                channel: 1,
                method: ack,
            },
            &mut wire,
        );
        let nack = AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
            delivery_tag: 78,
            multiple: false,
            requeue: false,
        }));
        encode_frame(
            &Frame::Method {
                channel: 1,
                method: nack,
            },
            &mut wire,
        );
        let body = Bytes::from_static(b"0123456789");
        let props = BasicProperties::default();
        encode_deliver(
            1, "ctag-x", 9, false, "", "q", &props, &body, 131_072, &mut wire,
        );
        let close = AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: 406,
            reply_text: "PRECONDITION_FAILED".into(),
            class_id: 50,
            method_id: 10,
        }));
        encode_frame(
            &Frame::Method {
                channel: 1,
                method: close,
            },
            &mut wire,
        );
        wire.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, FRAME_END]);
        let full = wire.len();
        wire.extend_from_slice(&[1, 0, 1, 0, 0]); // a partial frame

        let mut seen = Vec::new();
        scan_frames(&mut wire, 131_072, |f| {
            seen.push(match f {
                Fast::Body(b) => format!("body {}", b.len()),
                Fast::Other(frame) => frame_error(&frame).unwrap_or_default(),
                other => format!("{other:?}"),
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                "Ack { tag: 77, multiple: true }",
                "Nack { tag: 78, multiple: false }",
                "Deliver { tag: 9 }",
                "Header { body_size: 10 }",
                "body 10",
                "channel closed by the broker: 406 PRECONDITION_FAILED",
                "Heartbeat",
            ]
        );
        assert_eq!(wire.len(), 5, "the partial frame stays ({full} were read)");
    }

    #[test]
    fn scan_rejects_oversized_and_unterminated_frames() {
        let mut wire = BytesMut::from(&[3u8, 0, 1, 0, 1, 0, 0][..]);
        assert!(scan_frames(&mut wire, 4096, |_| Ok(())).is_err());
        let mut wire = BytesMut::from(&[3u8, 0, 1, 0, 0, 0, 1, b'x', 0][..]);
        assert!(scan_frames(&mut wire, 4096, |_| Ok(())).is_err());
    }
}
