//! A raw client: a TCP stream that sends hand-written bytes and reads frames
//! back, for the inputs no real client library would send.

use super::*;

// ---------------------------------------------------------------------------
// A raw client.

#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) frame_type: u8,
    pub(crate) channel: u16,
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    pub(crate) fn class_method(&self) -> Option<(u16, u16)> {
        if self.frame_type != FRAME_METHOD || self.payload.len() < 4 {
            return None;
        }
        let p = &self.payload;
        Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ))
    }
}

/// What the server said in its connection.close.
#[derive(Debug)]
pub(crate) struct Close {
    pub(crate) reply_code: u16,
    pub(crate) reply_text: String,
    pub(crate) class_id: u16,
    pub(crate) method_id: u16,
}

pub(crate) struct Raw {
    pub(crate) stream: TcpStream,
    pub(crate) buf: Vec<u8>,
    /// frame_max the server proposed in connection.tune.
    pub(crate) server_frame_max: u32,
}

impl Raw {
    pub(crate) async fn connect(addr: SocketAddr) -> Raw {
        let stream = timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect timed out")
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Raw {
            stream,
            buf: Vec::new(),
            server_frame_max: 0,
        }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        timeout(WAIT, self.stream.write_all(bytes))
            .await
            .expect("write timed out")
            .expect("write");
    }

    /// Read more bytes into the buffer; false at EOF (or a reset: the peer is gone).
    pub(crate) async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match timeout(WAIT, self.stream.read(&mut chunk))
            .await
            .expect("read timed out")
        {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Everything the server sends until it closes the socket.
    pub(crate) async fn read_to_eof(&mut self) -> Vec<u8> {
        while self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// The next frame, or None if the server closed the socket first.
    pub(crate) async fn read_frame(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 7 {
                let size = u32::from_be_bytes([self.buf[3], self.buf[4], self.buf[5], self.buf[6]]);
                let total = 7 + size as usize + 1;
                if self.buf.len() >= total {
                    let rest = self.buf.split_off(total);
                    let f = std::mem::replace(&mut self.buf, rest);
                    assert_eq!(
                        f[total - 1],
                        FRAME_END,
                        "server sent a bad frame end: {f:?}"
                    );
                    return Some(Frame {
                        frame_type: f[0],
                        channel: u16::from_be_bytes([f[1], f[2]]),
                        payload: f[7..total - 1].to_vec(),
                    });
                }
            }
            if !self.fill().await {
                assert!(
                    self.buf.is_empty(),
                    "server closed mid-frame: {:?}",
                    self.buf
                );
                return None;
            }
        }
    }

    pub(crate) async fn expect_method(&mut self, class: u16, method: u16) -> Frame {
        loop {
            let f = self
                .read_frame()
                .await
                .unwrap_or_else(|| panic!("socket closed while waiting for {class}.{method}"));
            if f.frame_type == FRAME_HEARTBEAT {
                continue;
            }
            assert_eq!(
                f.class_method(),
                Some((class, method)),
                "expected method {class}.{method}, got {f:?}"
            );
            return f;
        }
    }

    /// Protocol header, start/start-ok, tune/tune-ok, open/open-ok: a working
    /// connection to vhost "/". `frame_max` 0 takes the server's proposal.
    pub(crate) async fn handshake(addr: SocketAddr, frame_max: u32) -> Raw {
        let mut raw = Raw::connect(addr).await;
        raw.send(PROTOCOL_HEADER).await;
        raw.expect_method(10, 10).await; // connection.start
        raw.send(&start_ok("guest", "guest")).await;
        let tune = raw.expect_method(10, 30).await;
        let p = &tune.payload[4..];
        let channel_max = u16::from_be_bytes([p[0], p[1]]);
        raw.server_frame_max = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
        let frame_max = if frame_max == 0 {
            raw.server_frame_max
        } else {
            frame_max
        };
        raw.send(&tune_ok(channel_max, frame_max, 0)).await;
        raw.send(&connection_open("/")).await;
        raw.expect_method(10, 41).await; // connection.open-ok
        raw
    }

    /// Read until the server's connection.close (skipping anything else it sends
    /// first), answer close-ok, and check the server then closes the socket.
    pub(crate) async fn expect_connection_close(&mut self) -> Close {
        self.connection_close_or_eof()
            .await
            .expect("the server closed the socket without sending connection.close")
    }

    /// Like `expect_connection_close`, but a socket closed without any
    /// connection.close gives None. Panics if the server keeps the connection.
    pub(crate) async fn connection_close_or_eof(&mut self) -> Option<Close> {
        let f = loop {
            let f = self.read_frame().await?;
            if f.class_method() == Some((10, 50)) {
                break f;
            }
        };
        assert_eq!(f.channel, 0, "connection.close on channel {}", f.channel);
        let p = &f.payload[4..];
        let reply_code = u16::from_be_bytes([p[0], p[1]]);
        let text_len = p[2] as usize;
        let reply_text = String::from_utf8_lossy(&p[3..3 + text_len]).into_owned();
        let q = &p[3 + text_len..];
        let close = Close {
            reply_code,
            reply_text,
            class_id: u16::from_be_bytes([q[0], q[1]]),
            method_id: u16::from_be_bytes([q[2], q[3]]),
        };
        // The server may already have shut the socket; a failed write is fine.
        let _ = self.stream.write_all(&connection_close_ok()).await;
        let rest = self.read_to_eof().await;
        assert!(
            rest.is_empty(),
            "the server sent more after connection.close: {rest:?}"
        );
        Some(close)
    }
}

/// The reply code, and RabbitMQ's reply-text convention "NAME - details" that
/// some clients match on.
pub(crate) fn assert_close(close: &Close, code: u16, name: &str) {
    assert_eq!(close.reply_code, code, "{close:?}");
    assert!(
        close.reply_text.starts_with(&format!("{name} - ")),
        "reply text should start with \"{name} - \": {close:?}"
    );
}

// ---------------------------------------------------------------------------
// The bystander: a well-behaved lapin client that must not notice anything.
