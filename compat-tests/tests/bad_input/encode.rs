//! AMQP 0-9-1 frames written by hand, so that the tests share no codec with
//! the broker they test.

use super::*;

pub(crate) fn shortstr(out: &mut Vec<u8>, s: &str) {
    out.push(u8::try_from(s.len()).expect("short string"));
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn longstr(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).expect("long").to_be_bytes());
    out.extend_from_slice(b);
}

/// A field table from already encoded `(name, type octet + value)` entries.
pub(crate) fn table(out: &mut Vec<u8>, entries: &[(&str, Vec<u8>)]) {
    let mut body = Vec::new();
    for (name, value) in entries {
        shortstr(&mut body, name);
        body.extend_from_slice(value);
    }
    longstr(out, &body);
}

pub(crate) fn frame(frame_type: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![frame_type];
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(&u32::try_from(payload.len()).expect("size").to_be_bytes());
    f.extend_from_slice(payload);
    f.push(FRAME_END);
    f
}

pub(crate) fn method_frame(channel: u16, class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + args.len());
    p.extend_from_slice(&class.to_be_bytes());
    p.extend_from_slice(&method.to_be_bytes());
    p.extend_from_slice(args);
    frame(FRAME_METHOD, channel, &p)
}

/// connection.start-ok with PLAIN credentials. The client announces the
/// `authentication_failure_close` capability, as lapin and pika do, so a refused
/// login gets a connection.close instead of a bare socket close.
pub(crate) fn start_ok(user: &str, pass: &str) -> Vec<u8> {
    let mut caps = vec![b'F'];
    table(
        &mut caps,
        &[("authentication_failure_close", vec![b't', 1])],
    );
    let mut product = vec![b'S'];
    longstr(&mut product, b"stablemq bad_input test");
    let mut a = Vec::new();
    table(&mut a, &[("capabilities", caps), ("product", product)]);
    shortstr(&mut a, "PLAIN");
    longstr(&mut a, format!("\0{user}\0{pass}").as_bytes());
    shortstr(&mut a, "en_US");
    method_frame(0, 10, 11, &a)
}

pub(crate) fn tune_ok(channel_max: u16, frame_max: u32, heartbeat: u16) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&channel_max.to_be_bytes());
    a.extend_from_slice(&frame_max.to_be_bytes());
    a.extend_from_slice(&heartbeat.to_be_bytes());
    method_frame(0, 10, 31, &a)
}

pub(crate) fn connection_open(vhost: &str) -> Vec<u8> {
    let mut a = Vec::new();
    shortstr(&mut a, vhost);
    shortstr(&mut a, ""); // reserved-1
    a.push(0); // reserved-2
    method_frame(0, 10, 40, &a)
}

pub(crate) fn connection_close_ok() -> Vec<u8> {
    method_frame(0, 10, 51, &[])
}

pub(crate) fn channel_open(channel: u16) -> Vec<u8> {
    let mut a = Vec::new();
    shortstr(&mut a, ""); // reserved-1
    method_frame(channel, 20, 10, &a)
}

pub(crate) fn queue_declare(channel: u16, queue: &str) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&0u16.to_be_bytes()); // reserved-1
    shortstr(&mut a, queue);
    a.push(0b0000_1000); // auto-delete
    table(&mut a, &[]);
    method_frame(channel, 50, 10, &a)
}

pub(crate) fn basic_publish(channel: u16, exchange: &str, routing_key: &str) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&0u16.to_be_bytes()); // reserved-1
    shortstr(&mut a, exchange);
    shortstr(&mut a, routing_key);
    a.push(0);
    method_frame(channel, 60, 40, &a)
}

/// Content header for class basic with no properties.
pub(crate) fn content_header(channel: u16, body_size: u64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&60u16.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes()); // weight
    p.extend_from_slice(&body_size.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes()); // property flags
    frame(FRAME_HEADER, channel, &p)
}
