//! The connection machine, driven frame by frame.

use super::*;
use crate::error::{AmqpError, ReplyCode};
use stablemq_protocol::LongString;
use stablemq_protocol::methods::basic as mb;
use stablemq_protocol::methods::connection as c;

fn now() -> Instant {
    Instant::now()
}

fn conn() -> Connection {
    Connection::new(
        1,
        "127.0.0.1".parse().unwrap(),
        Arc::new(Config::default()),
        now(),
    )
}

fn m(channel: u16, method: AMQPClass) -> Frame {
    Frame::Method { channel, method }
}

fn start_ok(user: &str, pass: &str) -> Frame {
    m(
        0,
        AMQPClass::Connection(c::AMQPMethod::StartOk(c::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: LongString::from(format!("\0{user}\0{pass}")),
            locale: "en_US".into(),
        })),
    )
}

fn close_code(actions: &[Action]) -> Option<u16> {
    actions.iter().find_map(|a| match a {
        Action::Write(Frame::Method {
            method: AMQPClass::Connection(c::AMQPMethod::Close(cl)),
            ..
        }) => Some(cl.reply_code),
        _ => None,
    })
}

/// Run the handshake up to an open connection.
fn opened() -> Connection {
    let mut k = conn();
    let mut out = Vec::new();
    k.on_header(HeaderCheck::Ok, now(), &mut out);
    k.on_frame(start_ok("guest", "guest"), now(), &mut out);
    k.on_frame(
        m(
            0,
            AMQPClass::Connection(c::AMQPMethod::TuneOk(c::TuneOk {
                channel_max: 10,
                frame_max: 4096,
                heartbeat: 2,
            })),
        ),
        now(),
        &mut out,
    );
    k.on_frame(
        m(
            0,
            AMQPClass::Connection(c::AMQPMethod::Open(c::Open {
                virtual_host: "/".into(),
            })),
        ),
        now(),
        &mut out,
    );
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::ToMaster(Input::Open { .. })))
    );
    out.clear();
    k.on_master(ToConn::Opened, &mut out);
    k
}

#[test]
fn bad_header_gets_our_header_then_close() {
    let mut k = conn();
    let mut out = Vec::new();
    k.on_header(HeaderCheck::Bad, now(), &mut out);
    assert!(matches!(&out[0], Action::WriteRaw(b) if b[..] == PROTOCOL_HEADER));
    assert!(matches!(out[1], Action::Close));
}

#[test]
fn start_advertises_exactly_the_implemented_capabilities() {
    let mut k = conn();
    let mut out = Vec::new();
    k.on_header(HeaderCheck::Ok, now(), &mut out);
    let Action::Write(Frame::Method {
        method: AMQPClass::Connection(c::AMQPMethod::Start(s)),
        ..
    }) = &out[0]
    else {
        panic!("expected connection.start");
    };
    let Some(AMQPValue::FieldTable(caps)) = s.server_properties.inner().get("capabilities") else {
        panic!("no capabilities");
    };
    assert_eq!(caps.inner().len(), 9);
    assert!(caps.inner().contains_key("publisher_confirms"));
    assert!(s.server_properties.inner().contains_key("cluster_name"));
    assert_eq!(s.mechanisms.as_bytes(), b"PLAIN AMQPLAIN");
}

#[test]
fn wrong_password_closes_with_403() {
    let mut k = conn();
    let mut out = Vec::new();
    k.on_header(HeaderCheck::Ok, now(), &mut out);
    k.on_frame(start_ok("guest", "nope"), now(), &mut out);
    assert_eq!(close_code(&out), Some(403));
}

#[test]
fn tune_takes_client_values_and_refuses_larger_ones() {
    let k = opened();
    assert_eq!(k.frame_max(), 4096);
    let mut k2 = conn();
    let mut out = Vec::new();
    k2.on_header(HeaderCheck::Ok, now(), &mut out);
    k2.on_frame(start_ok("guest", "guest"), now(), &mut out);
    k2.on_frame(
        m(
            0,
            AMQPClass::Connection(c::AMQPMethod::TuneOk(c::TuneOk {
                channel_max: 0,
                frame_max: 1 << 30,
                heartbeat: 0,
            })),
        ),
        now(),
        &mut out,
    );
    assert_eq!(close_code(&out), Some(530));
}

#[test]
fn frame_on_unopened_channel_is_504() {
    let mut k = opened();
    let mut out = Vec::new();
    k.on_frame(
        m(
            5,
            AMQPClass::Basic(mb::AMQPMethod::Qos(mb::Qos {
                prefetch_count: 1,
                global: false,
            })),
        ),
        now(),
        &mut out,
    );
    assert_eq!(close_code(&out), Some(504));
}

/// An open connection with channel 1 open, and its actions so far.
fn with_channel_1() -> (Connection, Vec<Action>) {
    let mut k = opened();
    let mut out = Vec::new();
    k.on_frame(
        m(1, AMQPClass::Channel(mch::AMQPMethod::Open(mch::Open {}))),
        now(),
        &mut out,
    );
    (k, out)
}

#[test]
fn content_is_assembled_from_header_and_bodies() {
    let (mut k, mut out) = with_channel_1();
    k.on_frame(
        m(
            1,
            AMQPClass::Basic(mb::AMQPMethod::Publish(mb::Publish::default())),
        ),
        now(),
        &mut out,
    );
    k.on_frame(
        Frame::Header {
            channel: 1,
            class_id: 60,
            body_size: 6,
            properties: Arc::new(BasicProperties::default()),
        },
        now(),
        &mut out,
    );
    k.on_frame(
        Frame::Body {
            channel: 1,
            payload: Bytes::from_static(b"abc"),
        },
        now(),
        &mut out,
    );
    assert!(
        !out.iter()
            .any(|a| matches!(a, Action::ToMaster(Input::Publish { .. })))
    );
    k.on_frame(
        Frame::Body {
            channel: 1,
            payload: Bytes::from_static(b"def"),
        },
        now(),
        &mut out,
    );
    let body = out.iter().find_map(|a| match a {
        Action::ToMaster(Input::Publish { body, .. }) => Some(body.clone()),
        _ => None,
    });
    assert_eq!(body.as_deref(), Some(&b"abcdef"[..]));
}

/// The routing key of the publish the connection passes on, for a body of
/// `len` octets sent in frames of at most 4096, and whether it still points
/// into the buffer the frames were read from.
fn routing_key_after(len: usize) -> (String, bool) {
    let (mut k, mut out) = with_channel_1();
    let publish = Publish {
        routing_key: "the-key".into(),
        ..Default::default()
    };
    let mut wire = bytes::BytesMut::new();
    let body = Bytes::from(vec![7; len]);
    let props = BasicProperties::default();
    stablemq_protocol::encode_content(1, &publish.to_method(), &props, &body, 4096, &mut wire);
    let read = wire.as_ptr_range();
    let read = read.start as usize..read.end as usize;
    let mut decoder = stablemq_protocol::Decoder::default();
    while let Ok(Some(frame)) = decoder.decode(&mut wire, 4096) {
        k.on_frame(frame, now(), &mut out);
    }
    let Some(key) = out.iter().find_map(|a| match a {
        Action::ToMaster(Input::Publish { publish, .. }) => Some(publish.routing_key.clone()),
        _ => None,
    }) else {
        panic!("no publish: {out:?}");
    };
    let shared = read.contains(&(key.as_ptr() as usize));
    (key.to_string(), shared)
}

#[test]
fn a_publish_keeps_its_key_in_the_read_buffer_only_while_its_body_does() {
    // One body frame: the body is a slice of the read buffer, and so is the key.
    assert_eq!(routing_key_after(100), ("the-key".into(), true));
    // A joined body or none: the key is copied, so it does not keep the read
    // buffer alive by itself.
    assert_eq!(routing_key_after(10_000), ("the-key".into(), false));
    assert_eq!(routing_key_after(0), ("the-key".into(), false));
}

#[test]
fn method_instead_of_content_header_is_505() {
    let (mut k, mut out) = with_channel_1();
    k.on_frame(
        m(
            1,
            AMQPClass::Basic(mb::AMQPMethod::Publish(mb::Publish::default())),
        ),
        now(),
        &mut out,
    );
    k.on_frame(
        m(
            1,
            AMQPClass::Basic(mb::AMQPMethod::Publish(mb::Publish::default())),
        ),
        now(),
        &mut out,
    );
    assert_eq!(close_code(&out), Some(505));
}

#[test]
fn two_missed_heartbeats_close_and_quiet_links_get_heartbeats() {
    let mut k = opened();
    let t0 = Instant::now();
    let mut out = Vec::new();
    k.on_tick(t0 + Duration::from_millis(1500), &mut out);
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::Write(Frame::Heartbeat { .. })))
    );
    out.clear();
    k.on_tick(t0 + Duration::from_secs(5), &mut out);
    assert!(out.iter().any(|a| matches!(a, Action::Close)));
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::ToMaster(Input::Disconnected { .. })))
    );
}

/// A client that closes from two threads sends connection.close twice: both get a
/// close-ok and the socket stays open until the client drops it (or the close
/// timeout), so neither caller reads EOF in place of its close-ok.
#[test]
fn repeated_client_close_gets_close_ok_and_keeps_the_socket() {
    let mut k = opened();
    let close = || {
        m(
            0,
            AMQPClass::Connection(c::AMQPMethod::Close(c::Close {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            })),
        )
    };
    let close_oks = |out: &[Action]| {
        out.iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::Write(Frame::Method {
                        method: AMQPClass::Connection(c::AMQPMethod::CloseOk(_)),
                        ..
                    })
                )
            })
            .count()
    };
    for _ in 0..2 {
        let mut out = Vec::new();
        k.on_frame(close(), now(), &mut out);
        assert_eq!(close_oks(&out), 1);
        assert!(!out.iter().any(|a| matches!(a, Action::Close)));
    }
    let mut out = Vec::new();
    k.on_eof(&mut out);
    assert!(out.iter().any(|a| matches!(a, Action::Close)));
}

/// The server closes channel 1 (say 404 on a publish) while the client closes it
/// too: the client's close gets a close-ok, and the client's close-ok to our close,
/// which follows, is taken quietly instead of as a frame on an unopened channel.
#[test]
fn crossing_channel_close_waits_for_the_clients_close_ok() {
    use stablemq_protocol::methods::channel as chm;
    let mut k = opened();
    let mut out = Vec::new();
    k.on_frame(
        m(1, AMQPClass::Channel(chm::AMQPMethod::Open(chm::Open {}))),
        now(),
        &mut out,
    );
    k.on_master(
        ToConn::CloseChannel(1, AmqpError::new(ReplyCode::NotFound, "no exchange")),
        &mut out,
    );
    out.clear();
    let close = chm::Close {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    };
    k.on_frame(
        m(1, AMQPClass::Channel(chm::AMQPMethod::Close(close))),
        now(),
        &mut out,
    );
    assert!(out.iter().any(|a| matches!(
        a,
        Action::Write(Frame::Method {
            channel: 1,
            method: AMQPClass::Channel(chm::AMQPMethod::CloseOk(_)),
        })
    )));
    k.on_frame(
        m(
            1,
            AMQPClass::Channel(chm::AMQPMethod::CloseOk(chm::CloseOk {})),
        ),
        now(),
        &mut out,
    );
    assert_eq!(close_code(&out), None, "{out:?}");
    // The number is free again.
    k.on_frame(
        m(1, AMQPClass::Channel(chm::AMQPMethod::Open(chm::Open {}))),
        now(),
        &mut out,
    );
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::ToMaster(Input::ChannelOpen { ch: 1, .. })))
    );
    assert_eq!(close_code(&out), None);
}

/// What the master still sends for a channel the client is closing, or has
/// closed, is dropped: only its close-ok goes out; an open channel's messages
/// pass.
#[test]
fn a_closing_or_closed_channel_gets_nothing_but_its_close_ok() {
    let (mut k, _) = with_channel_1();
    let mut out = Vec::new();
    k.on_frame(
        m(
            1,
            AMQPClass::Channel(mch::AMQPMethod::Close(mch::Close {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            })),
        ),
        now(),
        &mut out,
    );
    out.clear();
    let ack = |ch| ToConn::Confirm {
        ch,
        tag: 1,
        ack: true,
    };
    k.on_master(ack(1), &mut out);
    assert!(out.is_empty(), "a confirm while closing: {out:?}");
    k.on_master(
        ToConn::Method(
            1,
            AMQPClass::Channel(mch::AMQPMethod::CloseOk(mch::CloseOk {})),
        ),
        &mut out,
    );
    assert!(matches!(
        out.as_slice(),
        [Action::Write(Frame::Method {
            channel: 1,
            method: AMQPClass::Channel(mch::AMQPMethod::CloseOk(_))
        })]
    ));
    out.clear();
    k.on_master(ack(1), &mut out);
    assert!(out.is_empty(), "a confirm after close-ok: {out:?}");
    // Reopened, the number gets its messages again.
    k.on_frame(
        m(1, AMQPClass::Channel(mch::AMQPMethod::Open(mch::Open {}))),
        now(),
        &mut out,
    );
    out.clear();
    k.on_master(ack(1), &mut out);
    assert!(matches!(
        out.as_slice(),
        [Action::Out(ToConn::Confirm { ch: 1, .. })]
    ));
}

/// The handshake timeout is the config's, counted from the connect.
#[test]
fn the_handshake_timeout_is_configurable() {
    let config = Config {
        handshake_timeout_ms: 1000,
        ..Config::default()
    };
    let t0 = now();
    let mut k = Connection::new(1, "127.0.0.1".parse().unwrap(), Arc::new(config), t0);
    let mut out = Vec::new();
    k.on_header(HeaderCheck::Ok, t0, &mut out);
    out.clear();
    k.on_tick(t0 + Duration::from_millis(999), &mut out);
    assert!(out.is_empty());
    k.on_tick(t0 + Duration::from_millis(1000), &mut out);
    // Closed without a connection.close, as RabbitMQ does.
    assert!(matches!(out.as_slice(), [Action::Close]), "{out:?}");
}

/// An idle open connection is ticked a quarter heartbeat apart, never more
/// often than every 500 ms, and rarely without heartbeats; the handshake and
/// the close are ticked often, for their second-scale timeouts.
#[test]
fn the_tick_follows_what_the_connection_waits_for() {
    let t0 = Instant::now();
    let mut k = Connection::new(
        1,
        "127.0.0.1".parse().unwrap(),
        Arc::new(Config::default()),
        t0,
    );
    assert_eq!(k.tick_every(), Duration::from_millis(500), "handshake");
    k.phase = Phase::Open;
    k.heartbeat = 60;
    assert_eq!(k.tick_every(), Duration::from_secs(15));
    k.heartbeat = 1;
    assert_eq!(k.tick_every(), Duration::from_millis(500));
    k.heartbeat = 0;
    assert_eq!(k.tick_every(), Duration::from_secs(60));
    k.phase = Phase::Closing;
    assert_eq!(k.tick_every(), Duration::from_millis(500));
}
