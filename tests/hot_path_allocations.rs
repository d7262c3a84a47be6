//! The publish, route and deliver path allocates nothing per message (issue
//! 4: "no per-message allocation on the publish, route and deliver path").
//!
//! A counting global allocator (this test binary's own) counts the heap
//! allocations made on the test's thread.
//!
//! - The connection layer decodes a publish's frames and assembles them into
//!   the master's input. Its test feeds it the wire bytes a client sends.
//! - The real master core handles those inputs, and the outputs are drained
//!   as the master task does. The inputs are made by the real connection
//!   layer before counting starts, so bodies and routing keys are slices of a
//!   read buffer, as in the server.
//!
//! The message is held by value in its queue entry and its delivery, sharing
//! its parts; a logged one's encoded log entry is cut from a shared buffer.
//! Anything that scales with the message count (an `Arc` per message, a queue
//! name or vhost copied into a `String`, a `Vec` of routed queues, a
//! per-delivery id list) fails these tests. Containers that grow now and then
//! (a map's nodes) are allowed a fraction of one allocation per message.

use bytes::Bytes;
use bytes::BytesMut;
use stablemq::amqp::connection::{Action, Connection};
use stablemq::broker::Broker;
use stablemq::config::Config;
use stablemq::master::Master;
use stablemq::master::inout::{Input, Output, ToConn};
use stablemq_protocol::methods::{basic, channel, confirm, connection, queue};
use stablemq_protocol::{
    AMQPClass, BasicProperties, Decoder, FieldTable, Frame, HeaderCheck, LongString, Publish,
    encode_content,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

/// The system allocator, counting allocations (and reallocations that
/// move the block, which are new allocations too) made by threads that
/// turned counting on.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to `System`; counting touches
// only const-initialised thread locals, which do not allocate.
#[allow(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; this one wraps System"
)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        // Resized in place (a shrink, usually) is no new block.
        if moved != ptr {
            note();
        }
        moved
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations `f` makes on this thread.
fn count_allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    f();
    COUNTING.with(|on| on.set(false));
    COUNT.with(|c| c.get())
}

/// A master over the default config's vhost and users.
fn master() -> Master {
    let config = Config::default();
    let mut b = Broker::new();
    for e in stablemq::users::seed_events(&config) {
        b.apply(&e, 0);
    }
    Master::new(Arc::new(config), b, 0)
}

/// The master task's loop in miniature: hand the master an input, then
/// carry out (here: drop) its outputs, reusing the two output buffers as
/// the master task does. Returns (deliveries, appends) seen.
struct Driver {
    m: Master,
    spare: Vec<Output>,
}

impl Driver {
    fn new() -> Driver {
        Driver {
            m: master(),
            spare: Vec::with_capacity(1024),
        }
    }

    fn step(&mut self, input: Input) -> (u64, u64) {
        self.m.handle(input);
        let mut outs = self.m.swap_outputs(std::mem::take(&mut self.spare));
        let (mut delivered, mut appended) = (0, 0);
        for o in outs.drain(..) {
            match o {
                Output::ToConn(_, ToConn::Deliver { .. }) => delivered += 1,
                Output::Append { .. } => appended += 1,
                _ => {}
            }
        }
        self.spare = outs;
        (delivered, appended)
    }

    fn method(&mut self, conn: u64, ch: u16, method: AMQPClass) {
        self.step(Input::Method { conn, ch, method });
    }

    fn open(&mut self, conn: u64, ch: u16) {
        self.step(Input::Open {
            conn,
            user: "guest".into(),
            vhost: "/".into(),
            info: Box::default(),
        });
        self.step(Input::ChannelOpen { conn, ch });
    }

    /// Everything appended so far is durable now.
    fn stable(&mut self) -> (u64, u64) {
        let index = self.m.last_appended();
        self.step(Input::Stable { index })
    }
}

/// `n` publishes to `queue`, as the connection layer hands them to the
/// master: decoded from the wire by the real decoder and connection, so
/// bodies and routing keys are slices of the read buffer, as in the server.
fn publish_inputs(queue: &str, persistent: bool, n: u64) -> Vec<Input> {
    let props = if persistent {
        BasicProperties::default().with_delivery_mode(2)
    } else {
        BasicProperties::default()
    };
    let mut k = open_connection();
    let mut decoder = Decoder::default();
    let (_, inputs) = decode_publishes(&mut k, &mut decoder, &props, |_| queue.to_string(), n);
    inputs
}

fn declare(d: &mut Driver, name: &str, durable: bool) {
    d.method(
        1,
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: name.into(),
            durable,
            ..Default::default()
        })),
    );
    d.stable();
}

fn consume(d: &mut Driver, name: &str, no_ack: bool) {
    d.method(
        2,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: name.into(),
            consumer_tag: "c".into(),
            no_ack,
            ..Default::default()
        })),
    );
}

/// S1's path: transient publishes to the default exchange, routed to one
/// queue and delivered at once to an auto-ack consumer on another connection.
fn transient_allocations(d: &mut Driver, n: u64) -> u64 {
    let inputs = publish_inputs("q", false, n);
    let mut delivered = 0;
    let allocs = count_allocations(|| {
        for input in inputs {
            delivered += d.step(input).0;
        }
    });
    assert_eq!(delivered, n, "every publish is delivered at once");
    allocs
}

#[test]
fn transient_publish_route_deliver_allocates_nothing_per_message() {
    let mut d = Driver::new();
    d.open(1, 1);
    d.open(2, 1);
    declare(&mut d, "q", false);
    consume(&mut d, "q", true);
    // Warm up: counters and buffers reach their steady size.
    transient_allocations(&mut d, 2_000);
    let small = transient_allocations(&mut d, 1_000);
    let large = transient_allocations(&mut d, 5_000);
    eprintln!("transient: {small} allocations for 1000 messages, {large} for 5000");
    // At most a few for buffers that still grow now and then.
    assert!(
        small <= 8 && large <= 8,
        "allocations: {small} for 1000 messages, {large} for 5000 (none per message expected)"
    );
}

/// S2's path: persistent publishes in confirm mode to a durable queue, each
/// logged, made stable, confirmed and delivered to a consumer with a
/// prefetch, which acks with `multiple` every 100 deliveries.
fn persistent_allocations(d: &mut Driver, n: u64, delivered_so_far: &mut u64) -> u64 {
    let inputs = publish_inputs("pq", true, n);
    let mut appended = 0;
    let mut delivered = 0;
    let allocs = count_allocations(|| {
        for input in inputs {
            appended += d.step(input).1;
            delivered += d.stable().0;
            let total = *delivered_so_far + delivered;
            if total.is_multiple_of(100) {
                let ack = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                    delivery_tag: total,
                    multiple: true,
                }));
                appended += d
                    .step(Input::Method {
                        conn: 2,
                        ch: 1,
                        method: ack,
                    })
                    .1;
                d.stable();
            }
        }
    });
    *delivered_so_far += delivered;
    assert_eq!(delivered, n, "every publish is delivered once stable");
    assert!(appended >= n, "every publish is logged");
    allocs
}

#[test]
fn persistent_confirmed_publish_allocates_a_fraction_per_message() {
    let mut d = Driver::new();
    d.open(1, 1);
    d.open(2, 1);
    declare(&mut d, "pq", true);
    d.method(
        1,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
    );
    d.method(
        2,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 1000,
            ..Default::default()
        })),
    );
    consume(&mut d, "pq", false);
    let mut delivered = 0;
    persistent_allocations(&mut d, 2_000, &mut delivered);
    let small = persistent_allocations(&mut d, 1_000, &mut delivered);
    let large = persistent_allocations(&mut d, 5_000, &mut delivered);
    let per_message = (large - small.min(large)) as f64 / 4_000.0;
    eprintln!("persistent: {small} allocations for 1000 messages, {large} for 5000");
    // The log entry is cut from the master's arena (one buffer per 64 KiB
    // of log). An ack of 100 messages costs a few (its id list, its log
    // entry's event), and the unacked maps grow by nodes: well under one
    // per message.
    assert!(
        per_message <= 0.5,
        "{per_message} allocations per message ({small} for 1000, {large} for 5000)"
    );
}

/// A connection through its handshake, with channel 1 open.
fn open_connection() -> Connection {
    let now = std::time::Instant::now();
    let mut k = Connection::new(1, [127, 0, 0, 1].into(), Arc::new(Config::default()), now);
    let mut out = Vec::new();
    k.on_header(HeaderCheck::Ok, now, &mut out);
    let on_zero = |method| Frame::Method { channel: 0, method };
    let handshake = [
        on_zero(AMQPClass::Connection(connection::AMQPMethod::StartOk(
            connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "PLAIN".into(),
                response: LongString::from("\0guest\0guest"),
                locale: "en_US".into(),
            },
        ))),
        on_zero(AMQPClass::Connection(connection::AMQPMethod::TuneOk(
            connection::TuneOk {
                channel_max: 10,
                frame_max: 131_072,
                heartbeat: 0,
            },
        ))),
        on_zero(AMQPClass::Connection(connection::AMQPMethod::Open(
            connection::Open {
                virtual_host: "/".into(),
            },
        ))),
    ];
    for frame in handshake {
        k.on_frame(frame, now, &mut out);
    }
    k.on_master(ToConn::Opened, &mut out);
    let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
    k.on_frame(
        Frame::Method {
            channel: 1,
            method: open,
        },
        now,
        &mut out,
    );
    assert!(
        out.iter()
            .any(|a| matches!(a, Action::ToMaster(Input::ChannelOpen { ch: 1, .. }))),
        "channel 1 did not open: {out:?}"
    );
    k
}

/// Decodes `n` publishes as a client sends them (publish, header, one body
/// frame; the same properties each time, as a publisher does) and feeds
/// them to the connection. Returns the allocations made and the routing
/// keys of the publishes the connection passed on.
fn decode_publishes(
    k: &mut Connection,
    decoder: &mut Decoder,
    props: &BasicProperties,
    key: impl Fn(u64) -> String,
    n: u64,
) -> (u64, Vec<Input>) {
    let mut wire = BytesMut::new();
    for i in 0..n {
        let publish = Publish {
            exchange: "".into(),
            routing_key: key(i).into(),
            ..Default::default()
        };
        let body = Bytes::from(i.to_le_bytes().to_vec());
        encode_content(1, &publish.to_method(), props, &body, 131_072, &mut wire);
    }
    let now = std::time::Instant::now();
    let mut out = Vec::with_capacity(4);
    let mut inputs = Vec::with_capacity(n as usize);
    let allocs = count_allocations(|| {
        while let Ok(Some(frame)) = decoder.decode(&mut wire, 131_072) {
            k.on_frame(frame, now, &mut out);
            for a in out.drain(..) {
                if let Action::ToMaster(input) = a {
                    inputs.push(input);
                }
            }
        }
    });
    assert!(wire.is_empty(), "{} octets left undecoded", wire.len());
    (allocs, inputs)
}

#[test]
fn decoding_and_assembling_a_publish_allocates_nothing_per_message() {
    let mut k = open_connection();
    let mut decoder = Decoder::default();
    let props = BasicProperties::default().with_delivery_mode(2);
    let key = |i| format!("q{}", i % 3);
    // Warm up: the connection's first publish does its one-time work.
    decode_publishes(&mut k, &mut decoder, &props, key, 100);
    let (small, inputs) = decode_publishes(&mut k, &mut decoder, &props, key, 1_000);
    assert_eq!(inputs.len(), 1_000, "every publish reaches the master");
    for (i, input) in inputs.iter().enumerate() {
        let Input::Publish {
            publish,
            properties,
            body,
            ..
        } = input
        else {
            panic!("not a publish: {input:?}");
        };
        assert_eq!(&*publish.routing_key, format!("q{}", i % 3));
        assert_eq!(properties.delivery_mode(), &Some(2));
        assert_eq!(&body[..], &(i as u64).to_le_bytes());
    }
    drop(inputs);
    let (large, _) = decode_publishes(&mut k, &mut decoder, &props, key, 5_000);
    eprintln!("connection layer: {small} allocations for 1000 publishes, {large} for 5000");
    // Freezing the read buffer once to share its slices is an allocation,
    // whatever the count; nothing may scale with the messages.
    assert!(
        small <= 4 && large <= 4,
        "allocations: {small} for 1000 publishes, {large} for 5000 (none per message expected)"
    );
}
