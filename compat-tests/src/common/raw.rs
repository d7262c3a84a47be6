//! A minimal raw AMQP client, for what lapin hides: the server's connection.start
//! properties, its connection.tune proposal and its heartbeat frames.

use super::*;

/// Frame types (AMQP 0-9-1 section 4.2.3).
pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xCE;

/// One frame as read off the socket.
#[derive(Debug)]
pub struct RawFrame {
    pub kind: u8,
    pub channel: u16,
    pub payload: Vec<u8>,
}

/// A raw AMQP connection: bytes in, frames out. No state machine beyond the handshake.
/// Over TCP, or over any other byte stream (a TLS session).
pub struct RawConn<S = TcpStream> {
    stream: S,
}

impl RawConn {
    /// Connect and send the AMQP 0-9-1 protocol header.
    pub async fn connect(addr: SocketAddr) -> RawConn {
        let stream = within("tcp connect", TcpStream::connect(addr))
            .await
            .expect("tcp connect");
        RawConn::over(stream).await
    }
}

impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> RawConn<S> {
    /// Send the AMQP 0-9-1 protocol header on `stream`.
    pub async fn over(mut stream: S) -> RawConn<S> {
        stream
            .write_all(b"AMQP\x00\x00\x09\x01")
            .await
            .expect("write protocol header");
        RawConn { stream }
    }

    /// Read one frame; None when the broker closed the socket.
    pub async fn read_frame(&mut self) -> Option<RawFrame> {
        let mut header = [0u8; 7];
        if self.stream.read_exact(&mut header).await.is_err() {
            return None;
        }
        let kind = header[0];
        let channel = u16::from_be_bytes([header[1], header[2]]);
        let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
        assert!(size <= 16 * 1024 * 1024, "absurd frame size {size}");
        let mut payload = vec![0u8; size + 1];
        if self.stream.read_exact(&mut payload).await.is_err() {
            return None;
        }
        assert_eq!(payload.pop(), Some(FRAME_END), "frame-end octet");
        Some(RawFrame {
            kind,
            channel,
            payload,
        })
    }

    /// Read frames until a method frame arrives (skipping heartbeats) and parse it.
    pub async fn read_method(&mut self) -> (u16, AMQPClass) {
        within("a method frame", async {
            loop {
                let f = self
                    .read_frame()
                    .await
                    .expect("broker closed the socket while a method was expected");
                if f.kind == FRAME_HEARTBEAT {
                    continue;
                }
                assert_eq!(f.kind, FRAME_METHOD, "expected a method frame, got {f:?}");
                let (_, class) = lapin::protocol::parse_class(&f.payload[..])
                    .unwrap_or_else(|e| panic!("parse method {:?}: {e:?}", f.payload));
                return (f.channel, class);
            }
        })
        .await
    }

    /// Send a frame.
    pub async fn send_frame(&mut self, kind: u8, channel: u16, payload: &[u8]) {
        let mut buf = Vec::with_capacity(payload.len() + 8);
        buf.push(kind);
        buf.extend_from_slice(&channel.to_be_bytes());
        buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        buf.extend_from_slice(payload);
        buf.push(FRAME_END);
        self.stream.write_all(&buf).await.expect("write frame");
    }

    /// Send a method frame: class id, method id, then the encoded arguments.
    pub async fn send_method(&mut self, channel: u16, class: u16, method: u16, args: &[u8]) {
        let mut payload = Vec::with_capacity(args.len() + 4);
        payload.extend_from_slice(&class.to_be_bytes());
        payload.extend_from_slice(&method.to_be_bytes());
        payload.extend_from_slice(args);
        self.send_frame(FRAME_METHOD, channel, &payload).await;
    }

    /// Read connection.start.
    pub async fn read_start(&mut self) -> lapin::protocol::connection::Start {
        match self.read_method().await {
            (0, AMQPClass::Connection(lapin::protocol::connection::AMQPMethod::Start(s))) => s,
            other => panic!("expected connection.start, got {other:?}"),
        }
    }

    /// Answer connection.start with PLAIN credentials and read connection.tune.
    pub async fn start_ok(&mut self, user: &str, pass: &str) -> lapin::protocol::connection::Tune {
        self.send_start_ok("PLAIN", format!("\0{user}\0{pass}").as_bytes())
            .await;
        match self.read_method().await {
            (0, AMQPClass::Connection(lapin::protocol::connection::AMQPMethod::Tune(t))) => t,
            other => panic!("expected connection.tune, got {other:?}"),
        }
    }

    /// Answer connection.start with `mechanism` and `response`; return what
    /// the broker answers (connection.tune, or connection.close on a refusal).
    pub async fn start_ok_with(&mut self, mechanism: &str, response: &[u8]) -> AMQPClass {
        self.send_start_ok(mechanism, response).await;
        self.read_method().await.1
    }

    /// Send connection.start-ok with empty client properties.
    async fn send_start_ok(&mut self, mechanism: &str, response: &[u8]) {
        let mut args = Vec::new();
        args.extend_from_slice(&0u32.to_be_bytes()); // empty client-properties table
        put_shortstr(&mut args, mechanism);
        put_longstr(&mut args, response);
        put_shortstr(&mut args, "en_US");
        self.send_method(0, 10, 11, &args).await;
    }

    /// Send connection.tune-ok and connection.open, and read connection.open-ok.
    pub async fn tune_ok_and_open(
        &mut self,
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
        vhost: &str,
    ) {
        let mut args = Vec::new();
        args.extend_from_slice(&channel_max.to_be_bytes());
        args.extend_from_slice(&frame_max.to_be_bytes());
        args.extend_from_slice(&heartbeat.to_be_bytes());
        self.send_method(0, 10, 31, &args).await;
        let mut args = Vec::new();
        put_shortstr(&mut args, vhost);
        put_shortstr(&mut args, ""); // reserved-1
        args.push(0); // reserved-2
        self.send_method(0, 10, 40, &args).await;
        match self.read_method().await {
            (0, AMQPClass::Connection(lapin::protocol::connection::AMQPMethod::OpenOk(_))) => {}
            other => panic!("expected connection.open-ok, got {other:?}"),
        }
    }
}

/// Append an AMQP short string.
pub fn put_shortstr(buf: &mut Vec<u8>, s: &str) {
    assert!(s.len() < 256);
    buf.push(s.len() as u8);
    buf.extend_from_slice(s.as_bytes());
}

/// Append an AMQP long string.
pub fn put_longstr(buf: &mut Vec<u8>, s: &[u8]) {
    buf.extend_from_slice(&(s.len() as u32).to_be_bytes());
    buf.extend_from_slice(s);
}

/// One frame's bytes: type, channel, size, payload, frame-end.
pub fn frame_bytes(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(payload.len() + 8);
    buf.push(kind);
    buf.extend_from_slice(&channel.to_be_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    buf.push(FRAME_END);
    buf
}

/// A method frame's bytes: class id, method id, then the encoded arguments.
pub fn method_bytes(channel: u16, class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(args.len() + 4);
    payload.extend_from_slice(&class.to_be_bytes());
    payload.extend_from_slice(&method.to_be_bytes());
    payload.extend_from_slice(args);
    frame_bytes(FRAME_METHOD, channel, &payload)
}

impl RawConn {
    /// Connect, log in as guest/guest and open vhost `/` (no heartbeats).
    pub async fn open(addr: SocketAddr) -> RawConn {
        let mut c = RawConn::connect(addr).await;
        c.read_start().await;
        let tune = c.start_ok("guest", "guest").await;
        c.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
            .await;
        c
    }

    /// Write bytes as they are, in one write.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write bytes");
    }

    /// The next frame if one comes within `d`: None when none came, Some(None)
    /// when the broker closed the socket.
    pub async fn frame_within(&mut self, d: Duration) -> Option<Option<RawFrame>> {
        tokio::time::timeout(d, self.read_frame()).await.ok()
    }
}
