//! SIGTERM closes clients with 320 CONNECTION_FORCED and keeps the data.

use super::*;

const TERM_QUEUE: &str = "restart.sigterm";

/// Wait until the lapin connection reports that it ended with an error.
///
/// With a broker that waits for close-ok (as the spec asks) lapin reports the
/// server's 320 CONNECTION_FORCED. RabbitMQ 3.10.8 resets the socket about 3 ms
/// after sending that close, so lapin reports only the reset
/// (`Connection reset by peer`). Either shows the client noticed; the exact reply
/// code is checked on the wire by [`RawClient`].
pub async fn expect_connection_ended(events: impl futures_lite::Stream<Item = Event> + Unpin) {
    let mut events = events;
    let err = bounded("the lapin client to notice the close", async {
        loop {
            match events.next().await {
                Some(Event::Error(e)) => return e,
                Some(_) => continue,
                None => panic!("the connection's events ended without an error"),
            }
        }
    })
    .await;
    match err.kind() {
        ErrorKind::ProtocolError(e) => assert_eq!(e.get_id(), 320, "{err}"),
        ErrorKind::IOError(_) => {}
        _ => panic!("expected connection.close 320 CONNECTION_FORCED, got {err}"),
    }
}

/// A hand-written AMQP client that logs in and then reads the raw frames, to see
/// exactly what the server sends when it closes the connection.
pub struct RawClient {
    stream: std::net::TcpStream,
    buf: Vec<u8>,
}

impl RawClient {
    fn frame(frame_type: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![frame_type, 0, 0];
        f.extend_from_slice(&u32::try_from(payload.len()).expect("size").to_be_bytes());
        f.extend_from_slice(payload);
        f.push(0xCE);
        f
    }

    fn method(class: u16, method: u16, args: &[u8]) -> Vec<u8> {
        let mut p = class.to_be_bytes().to_vec();
        p.extend_from_slice(&method.to_be_bytes());
        p.extend_from_slice(args);
        Self::frame(1, &p)
    }

    /// Connect as guest to vhost "/" and wait for open-ok.
    pub fn connect(addr: std::net::SocketAddr) -> RawClient {
        let stream = std::net::TcpStream::connect_timeout(&addr, WAIT).expect("connect");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut c = RawClient {
            stream,
            buf: Vec::new(),
        };
        c.write(b"AMQP\x00\x00\x09\x01");
        c.expect_method(10, 10);
        let mut a = 0u32.to_be_bytes().to_vec(); // client-properties: empty table
        a.push(5);
        a.extend_from_slice(b"PLAIN");
        a.extend_from_slice(&12u32.to_be_bytes());
        a.extend_from_slice(b"\0guest\0guest");
        a.push(5);
        a.extend_from_slice(b"en_US");
        c.write(&Self::method(10, 11, &a));
        let tune = c.expect_method(10, 30);
        // tune-ok with the server's channel-max and frame-max, no heartbeats.
        let mut a = tune[4..10].to_vec();
        a.extend_from_slice(&0u16.to_be_bytes());
        c.write(&Self::method(10, 31, &a));
        c.write(&Self::method(10, 40, b"\x01/\x00\x00"));
        c.expect_method(10, 41);
        c
    }

    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stream.write_all(bytes).expect("write");
    }

    /// Next frame's type and payload; None once the socket is closed or reset.
    fn read_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        use std::io::Read;
        loop {
            if self.buf.len() >= 7 {
                let size = u32::from_be_bytes(self.buf[3..7].try_into().expect("4 bytes"));
                let total = 8 + size as usize;
                if self.buf.len() >= total {
                    let rest = self.buf.split_off(total);
                    let f = std::mem::replace(&mut self.buf, rest);
                    assert_eq!(f[total - 1], 0xCE, "bad frame end from the server");
                    return Some((f[0], f[7..total - 1].to_vec()));
                }
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    panic!("no frame from the server within {WAIT:?}")
                }
                Err(_) => return None,
            }
        }
    }

    fn expect_method(&mut self, class: u16, method: u16) -> Vec<u8> {
        let (t, p) = self
            .read_frame()
            .unwrap_or_else(|| panic!("closed while waiting for {class}.{method}"));
        assert_eq!(t, 1, "expected a method frame");
        assert_eq!(
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]])
            ),
            (class, method)
        );
        p
    }

    /// Read until connection.close; return its reply code and text, answer
    /// close-ok and wait for the socket to close.
    pub fn expect_connection_close(&mut self) -> (u16, String) {
        loop {
            let (t, p) = self
                .read_frame()
                .expect("the server closed the socket without sending connection.close");
            if t == 1 && p[..4] == [0, 10, 0, 50] {
                let code = u16::from_be_bytes([p[4], p[5]]);
                let len = p[6] as usize;
                let text = String::from_utf8_lossy(&p[7..7 + len]).into_owned();
                use std::io::Write;
                let _ = self.stream.write_all(&Self::method(10, 51, &[]));
                while self.read_frame().is_some() {}
                return (code, text);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_clients_with_connection_forced_and_keeps_data() {
    let mut broker = Broker::start();
    let conn = connect(&broker.uri()).await;
    let events = Box::pin(conn.events_listener());
    let ch = confirm_channel(&conn).await;
    ch.queue_declare(TERM_QUEUE.into(), durable_queue(), FieldTable::default())
        .await
        .expect("queue.declare");
    for i in 0..100 {
        publish_confirmed(
            &ch,
            "",
            TERM_QUEUE,
            format!("m{i}").as_bytes(),
            persistent(),
        )
        .await;
    }
    // A second client, idle, speaks raw AMQP so the test sees the exact close.
    let addr = broker.addr();
    let raw = tokio::task::spawn_blocking(move || {
        let mut raw = RawClient::connect(addr);
        move || raw.expect_connection_close()
    })
    .await
    .expect("raw client");
    let raw_close = tokio::task::spawn_blocking(raw);

    let code = blocking(|| broker.terminate());
    assert_eq!(
        code,
        Some(0),
        "SIGTERM must exit cleanly; log:\n{}",
        broker.log()
    );
    expect_connection_ended(events).await;
    let (reply_code, reply_text) = raw_close.await.expect("raw client");
    assert_eq!(reply_code, 320, "{reply_text}");
    assert!(
        reply_text.starts_with("CONNECTION_FORCED - "),
        "{reply_text}"
    );

    blocking(|| broker.start_again());
    let conn = connect(&broker.uri()).await;
    let ch = conn.create_channel().await.expect("channel");
    let want: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&ch, TERM_QUEUE).await, want);
    conn.close(200, "bye".into()).await.expect("close");
}
