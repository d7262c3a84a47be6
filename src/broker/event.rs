//! Events: the only way the broker state changes (I4).
//!
//! The master turns each accepted operation into one `Event`. Durable ones are
//! appended to the log; all are applied in log order by [`crate::broker::Broker::apply`].
//! Everything apply needs is inside the event (server-chosen names, message ids,
//! routing decisions), so apply reads no clock and no randomness.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use stablemq_protocol::{BasicProperties, ByteString, FieldTable};
use std::sync::Arc;

/// The exchange types StableMQ implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExchangeKind {
    /// Routing key equals binding key.
    Direct,
    /// Every bound destination.
    Fanout,
    /// Dotted-word patterns with `*` and `#`.
    Topic,
    /// Header tables with `x-match`.
    Headers,
}

impl ExchangeKind {
    /// Parse the exchange type name a client sends.
    pub fn parse(s: &str) -> Option<ExchangeKind> {
        match s {
            "direct" => Some(ExchangeKind::Direct),
            "fanout" => Some(ExchangeKind::Fanout),
            "topic" => Some(ExchangeKind::Topic),
            "headers" => Some(ExchangeKind::Headers),
            _ => None,
        }
    }

    /// The type name as clients spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// What a binding points at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Destination {
    /// A queue by name.
    Queue(String),
    /// An exchange by name (exchange-to-exchange binding).
    Exchange(String),
}

/// A binding from a source exchange to a destination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// Source exchange name.
    pub source: String,
    /// Where matching messages go.
    pub destination: Destination,
    /// Binding key (pattern for topic exchanges).
    pub routing_key: String,
    /// Binding arguments (x-match and header values for headers exchanges).
    pub arguments: FieldTable,
}

/// A queue's declared shape; compared on redeclare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSpec {
    /// Survives restart.
    pub durable: bool,
    /// Deleted when the last consumer goes.
    pub auto_delete: bool,
    /// The owning connection, for exclusive queues.
    pub exclusive_owner: Option<u64>,
    /// Declared arguments (x-queue-type, ...).
    pub arguments: FieldTable,
}

/// An exchange's declared shape; compared on redeclare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeSpec {
    /// Routing algorithm.
    pub kind: ExchangeKind,
    /// Survives restart.
    pub durable: bool,
    /// Deleted when its last binding (as source) goes.
    pub auto_delete: bool,
    /// Clients cannot publish to it directly.
    pub internal: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Messages move once through a channel; boxing the big variants would add an
// allocation per message on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// A vhost exists (from config or, later, the management API).
    VhostCreated {
        /// Name.
        vhost: String,
    },
    /// A vhost's description, tags and default queue type (management API,
    /// definitions); the vhost is created if missing.
    VhostMetadata {
        /// Name.
        vhost: String,
        /// Free text.
        description: String,
        /// Tags.
        tags: Vec<String>,
        /// `default_queue_type`, if set.
        default_queue_type: Option<String>,
    },
    /// A vhost was deleted with everything in it and every permission on it.
    VhostDeleted {
        /// Name.
        vhost: String,
    },
    /// A user was created or replaced. The hash is computed before the event
    /// (its salt is random), so every replica stores the same bytes (I4).
    UserPut {
        /// Login name.
        name: String,
        /// base64(salt ‖ hash), RabbitMQ's format; empty = no password login.
        password_hash: String,
        /// Hash function of `password_hash`.
        hashing_algorithm: crate::users::HashAlgorithm,
        /// Tags.
        tags: Vec<String>,
    },
    /// A user was deleted with its permissions.
    UserDeleted {
        /// Login name.
        name: String,
    },
    /// A user's configure/write/read regexes on a vhost.
    PermissionSet {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Configure regex.
        configure: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// A user lost its permissions on a vhost.
    PermissionCleared {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
    },
    /// A user's topic permissions on one exchange.
    TopicPermissionSet {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Exchange.
        exchange: String,
        /// Write regex (routing keys of publishes).
        write: String,
        /// Read regex (binding keys).
        read: String,
    },
    /// Topic permissions cleared on one exchange, or on all (None).
    TopicPermissionCleared {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Exchange, or None for every exchange of the vhost.
        exchange: Option<String>,
    },
    /// An exchange was declared.
    ExchangeDeclared {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
        /// Shape.
        spec: ExchangeSpec,
    },
    /// An exchange was deleted (with its bindings both ways).
    ExchangeDeleted {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
    },
    /// A queue was declared.
    QueueDeclared {
        /// Vhost.
        vhost: String,
        /// Name (server-named queues carry the name the master chose).
        name: String,
        /// Shape.
        spec: QueueSpec,
    },
    /// A queue was deleted with its messages and bindings.
    QueueDeleted {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
    },
    /// A binding was added.
    Bound {
        /// Vhost.
        vhost: String,
        /// The binding.
        binding: Binding,
    },
    /// A binding was removed.
    Unbound {
        /// Vhost.
        vhost: String,
        /// The binding.
        binding: Binding,
    },
    /// A message was routed to `queues`.
    Published {
        /// Vhost (shared with the publishing session: no copy per message;
        /// serde writes an `Arc<str>` as the string, so the log format is
        /// that of a `String`). Decoded through `names`: no allocation
        /// for a name the decoding thread saw lately.
        #[serde(deserialize_with = "names::deserialize")]
        vhost: Arc<str>,
        /// Exchange it was published to (serde writes a `ByteString` as the
        /// string, so the log format is that of a `String`; a shared decode
        /// slices it out of the entry, like the body).
        #[serde(deserialize_with = "shared_body::deserialize_str")]
        exchange: ByteString,
        /// Routing key.
        #[serde(deserialize_with = "shared_body::deserialize_str")]
        routing_key: ByteString,
        /// Id chosen by the master; unique and increasing.
        msg_id: u64,
        /// The master's clock at publish (ms since the Unix epoch): TTLs count from
        /// here, so replicas agree on expiry without reading their own clocks (I4).
        timestamp_ms: u64,
        /// Content properties (shared as decoded; serde encodes an `Arc` as
        /// its content).
        #[serde(deserialize_with = "shared_body::deserialize_properties")]
        properties: Arc<BasicProperties>,
        /// Body, shared by every queue copy.
        #[serde(deserialize_with = "shared_body::deserialize")]
        body: Bytes,
        /// Queues it was routed to, in routing order (encoded as a sequence
        /// of strings, as the `Vec<String>` it replaced).
        #[serde(deserialize_with = "names::deserialize_list")]
        queues: super::QueueList,
    },
    /// Messages left a queue (acked, rejected, purged, or delivered without ack).
    Removed {
        /// Vhost.
        vhost: String,
        /// Queue.
        queue: String,
        /// Message ids.
        msg_ids: Vec<u64>,
    },
    /// A policy was created or replaced (validated by the management API).
    PolicySet {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
        /// Regex on object names.
        pattern: String,
        /// `queues`, `exchanges` or `all`.
        apply_to: String,
        /// Higher wins.
        priority: i64,
        /// The definition as JSON text (postcard cannot carry a free-form
        /// JSON value; the text decodes the same on every replica).
        definition: String,
    },
    /// A policy was removed; its objects fall back to the next match.
    PolicyCleared {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
    },
    // New variants go last: postcard numbers variants by position, so logs
    // written before them still decode.
    /// A runtime parameter was set (validated by the management API); the
    /// vhost limits are the `vhost-limits` component's `limits` parameter.
    ParameterSet {
        /// Vhost.
        vhost: String,
        /// Component (`vhost-limits`, `shovel`, ...).
        component: String,
        /// Name.
        name: String,
        /// The value as JSON text (see `PolicySet::definition`).
        value: String,
    },
    /// A runtime parameter was removed.
    ParameterCleared {
        /// Vhost.
        vhost: String,
        /// Component.
        component: String,
        /// Name.
        name: String,
    },
    /// A global parameter was set.
    GlobalParameterSet {
        /// Name.
        name: String,
        /// The value as JSON text.
        value: String,
    },
    /// A global parameter was removed.
    GlobalParameterCleared {
        /// Name.
        name: String,
    },
}

/// An event could not be read back from the log.
#[derive(Debug, thiserror::Error)]
pub enum EventCodecError {
    /// The version byte is one this build does not know.
    #[error("unknown event encoding version {0}")]
    Version(u8),
    /// The payload is empty.
    #[error("empty event payload")]
    Empty,
    /// The payload does not decode.
    #[error("corrupt event: {0}")]
    Corrupt(#[from] postcard::Error),
}

/// Bumped whenever `Event`'s encoding changes, so old logs are refused, not misread.
const EVENT_FORMAT_VERSION: u8 = 3;

impl Event {
    /// Encode for the log: one version byte, then postcard.
    pub fn encode(&self) -> Bytes {
        // Sized up front, and written through `io::Write` (slices copied whole):
        // `to_extend` pushed a body through an iterator byte by byte, ~3k
        // instructions per 1 KB publish. Same postcard serializer, same bytes.
        let mut out = Vec::with_capacity(self.size_hint());
        out.push(EVENT_FORMAT_VERSION);
        // postcard cannot fail writing to a Vec for these types; a failure here is a bug.
        match postcard::to_io(self, out) {
            // As a boxed slice, `Bytes` keeps the buffer itself; from a Vec
            // with spare capacity it allocates a shared header besides, one
            // more allocation per logged event. Shrinking within the size
            // hint is done in place by the allocator (mimalloc keeps a block
            // shrunk by less than half), so this copies nothing.
            Ok(v) => Bytes::from(v.into_boxed_slice()),
            Err(e) => panic!("event encoding failed: {e}"),
        }
    }

    /// [`Event::encode`], cut from `arena`, one buffer that entry after
    /// entry shares: no allocation per entry, one per [`Event::ARENA_CHUNK`]
    /// of log (or per entry bigger than that). A buffer stays alive while
    /// any entry cut from it does; the master's entries live until they are
    /// written and reduced, so chunks are soon free, and one whose entries
    /// are all gone is written over again.
    pub fn encode_into(&self, arena: &mut BytesMut) -> Bytes {
        let hint = self.size_hint();
        if arena.capacity() < hint {
            arena.reserve(hint.max(Self::ARENA_CHUNK));
        }
        arena.put_u8(EVENT_FORMAT_VERSION);
        // postcard cannot fail writing to memory for these types; a failure here is a bug.
        if let Err(e) = postcard::to_io(self, arena.writer()) {
            panic!("event encoding failed: {e}");
        }
        arena.split().freeze()
    }

    /// The smallest chunk [`Event::encode_into`] allocates.
    pub const ARENA_CHUNK: usize = 64 * 1024;

    /// Room for the encoding: a body plus its names, or a definition.
    fn size_hint(&self) -> usize {
        match self {
            Event::Published { body, .. } => body.len() + 256,
            _ => 128,
        }
    }

    /// [`Event::decode`], with a published body as a slice of `b` rather
    /// than a copy: for an event that lives briefly (the state's reducer
    /// drops it by the end of its window), since the body keeps the whole
    /// buffer `b` is part of alive (a replication frame of many entries).
    pub fn decode_shared(b: &Bytes) -> Result<Event, EventCodecError> {
        shared_body::with_source(b, || Event::decode(b))
    }

    /// Decode an entry read from the log.
    pub fn decode(b: &[u8]) -> Result<Event, EventCodecError> {
        let (&v, rest) = b.split_first().ok_or(EventCodecError::Empty)?;
        if v != EVENT_FORMAT_VERSION {
            return Err(EventCodecError::Version(v));
        }
        Ok(postcard::from_bytes(rest)?)
    }
}

/// Vhost and queue names as a decoding thread (a store's reducer, a slave)
/// meets them: the same few, event after event. A thread keeps the names it
/// decoded last and hands out clones of them, so decoding a publish allocates
/// no name; serde's own `Arc<str>` made two allocations of each (a `Box<str>`,
/// then the `Arc` it is moved into).
mod names {
    use std::cell::RefCell;
    use std::fmt;
    use std::sync::Arc;

    use serde::Deserializer;
    use serde::de::{SeqAccess, Visitor};

    use crate::broker::QueueList;

    /// Few: a lookup compares against each, and a thread that meets more
    /// names than this in turn only allocates as before.
    const KEPT: usize = 16;

    thread_local! {
        /// The names, and the slot the next new one replaces.
        static RECENT: RefCell<(Vec<Arc<str>>, usize)> = const { RefCell::new((Vec::new(), 0)) };
    }

    /// `name` as an `Arc<str>`: a kept one's clone, else a new one, kept.
    pub(super) fn intern(name: &str) -> Arc<str> {
        RECENT.with_borrow_mut(|(kept, next)| {
            if let Some(known) = kept.iter().find(|k| ***k == *name) {
                return Arc::clone(known);
            }
            let new: Arc<str> = Arc::from(name);
            if kept.len() < KEPT {
                kept.push(Arc::clone(&new));
            } else {
                kept[*next] = Arc::clone(&new);
                *next = (*next + 1) % KEPT;
            }
            new
        })
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
        d.deserialize_str(NameVisitor)
    }

    pub(super) fn deserialize_list<'de, D: Deserializer<'de>>(d: D) -> Result<QueueList, D::Error> {
        d.deserialize_seq(ListVisitor)
    }

    struct NameVisitor;

    impl<'de> Visitor<'de> for NameVisitor {
        type Value = Arc<str>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a name")
        }

        fn visit_str<E>(self, v: &str) -> Result<Arc<str>, E> {
            Ok(intern(v))
        }
    }

    /// One name of a list, through [`intern`].
    struct Name(Arc<str>);

    impl<'de> serde::Deserialize<'de> for Name {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
            deserialize(d).map(Name)
        }
    }

    struct ListVisitor;

    impl<'de> Visitor<'de> for ListVisitor {
        type Value = QueueList;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of queue names")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<QueueList, A::Error> {
            let mut list = QueueList::new();
            while let Some(Name(name)) = seq.next_element()? {
                list.push(name);
            }
            Ok(list)
        }
    }
}

/// Decoding a published body, exchange and routing key as slices of the
/// buffer being decoded ([`Event::decode_shared`]). serde's derive has no way
/// to pass the source `Bytes` down to one field, so it is set for the
/// decode's duration in a thread-local; without one (or for a part from
/// elsewhere) it is copied.
mod shared_body {
    use std::cell::RefCell;
    use std::fmt;
    use std::sync::Arc;

    use bytes::Bytes;
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use stablemq_protocol::{BasicProperties, ByteString};

    thread_local! {
        static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
    }

    /// Run `f` with `src` as the buffer bodies may be sliced from.
    pub(super) fn with_source<T>(src: &Bytes, f: impl FnOnce() -> T) -> T {
        struct Clear;
        impl Drop for Clear {
            fn drop(&mut self) {
                SOURCE.with_borrow_mut(|s| *s = None);
            }
        }
        SOURCE.with_borrow_mut(|s| *s = Some(src.clone()));
        let _clear = Clear;
        f()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        d.deserialize_bytes(BodyVisitor)
    }

    /// A string as a slice of the source when it lies in it.
    pub(super) fn deserialize_str<'de, D: Deserializer<'de>>(d: D) -> Result<ByteString, D::Error> {
        d.deserialize_str(StrVisitor)
    }

    thread_local! {
        /// The properties this thread decoded last.
        static LAST_PROPERTIES: RefCell<Option<Arc<BasicProperties>>> = const { RefCell::new(None) };
    }

    /// Properties equal to the last ones this thread decoded share their
    /// `Arc`, as a connection's `Decoder` does: a publisher sends the same
    /// properties again and again. Otherwise one allocation, the `Arc`'s
    /// (serde's own `Arc<T>` decodes a `Box<T>`, then moves it into a new
    /// `Arc`: two).
    pub(super) fn deserialize_properties<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Arc<BasicProperties>, D::Error> {
        let decoded = BasicProperties::deserialize(d)?;
        Ok(LAST_PROPERTIES.with_borrow_mut(|last| match last {
            Some(known) if **known == decoded => Arc::clone(known),
            _ => Arc::clone(last.insert(Arc::new(decoded))),
        }))
    }

    struct StrVisitor;

    impl<'de> Visitor<'de> for StrVisitor {
        type Value = ByteString;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<ByteString, E> {
            SOURCE.with_borrow(|src| match src {
                Some(src) if contains(src, v.as_bytes()) => {
                    ByteString::try_from(src.slice_ref(v.as_bytes())).map_err(E::custom)
                }
                _ => Ok(ByteString::from(v)),
            })
        }

        fn visit_str<E>(self, v: &str) -> Result<ByteString, E> {
            Ok(ByteString::from(v))
        }

        fn visit_string<E>(self, v: String) -> Result<ByteString, E> {
            Ok(ByteString::from(v))
        }
    }

    struct BodyVisitor;

    impl<'de> Visitor<'de> for BodyVisitor {
        type Value = Bytes;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a message body")
        }

        fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Bytes, E> {
            Ok(SOURCE.with_borrow(|src| match src {
                Some(src) if contains(src, v) => src.slice_ref(v),
                _ => Bytes::copy_from_slice(v),
            }))
        }

        fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }

        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(b) = seq.next_element::<u8>()? {
                v.push(b);
            }
            Ok(Bytes::from(v))
        }
    }

    /// Whether `part` lies inside `src` (`Bytes::slice_ref` panics otherwise).
    fn contains(src: &Bytes, part: &[u8]) -> bool {
        let start = src.as_ptr() as usize;
        let p = part.as_ptr() as usize;
        p >= start && p + part.len() <= start + src.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{AMQPValue, LongString, ShortString};

    #[test]
    fn events_round_trip_through_the_codec() {
        let mut args = FieldTable::default();
        args.insert(
            ShortString::from("x-queue-type"),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        args.insert(ShortString::from("n"), AMQPValue::LongLongInt(-5));
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_headers(args.clone())
            .with_content_type(ShortString::from("text/plain"));
        let evs = vec![
            Event::QueueDeclared {
                vhost: "/".into(),
                name: "q".into(),
                spec: QueueSpec {
                    durable: true,
                    auto_delete: false,
                    exclusive_owner: None,
                    arguments: args.clone(),
                },
            },
            Event::Published {
                vhost: "/".into(),
                exchange: "amq.direct".into(),
                routing_key: "k".into(),
                msg_id: 42,
                timestamp_ms: 1_700_000_000_000,
                properties: Arc::new(props),
                body: Bytes::from_static(b"hello"),
                queues: ["q".into()].into_iter().collect(),
            },
            Event::Removed {
                vhost: "/".into(),
                queue: "q".into(),
                msg_ids: vec![1, 2, 3],
            },
            Event::ParameterSet {
                vhost: "/".into(),
                component: "vhost-limits".into(),
                name: "limits".into(),
                value: r#"{"max-queues":3}"#.into(),
            },
            Event::GlobalParameterCleared { name: "g".into() },
        ];
        for e in evs {
            assert_eq!(Event::decode(&e.encode()).unwrap(), e);
        }
        assert!(Event::decode(&[]).is_err());
        assert!(Event::decode(&[9, 1, 2]).is_err());
        assert!(Event::decode(&[EVENT_FORMAT_VERSION, 200, 200, 200]).is_err());
    }

    fn published(body: &'static [u8]) -> Event {
        Event::Published {
            vhost: "/".into(),
            exchange: "".into(),
            routing_key: "q".into(),
            msg_id: 7,
            timestamp_ms: 1,
            properties: Arc::default(),
            body: Bytes::from_static(body),
            queues: ["q".into()].into_iter().collect(),
        }
    }

    fn body_of(e: &Event) -> &Bytes {
        match e {
            Event::Published { body, .. } => body,
            other => panic!("not a publish: {other:?}"),
        }
    }

    #[test]
    fn a_shared_decode_slices_the_body_out_of_the_entry_and_a_plain_one_copies_it() {
        let e = published(b"a body of some length");
        let wire = e.encode();
        let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();

        let shared = Event::decode_shared(&wire).unwrap();
        assert_eq!(shared, e);
        assert!(range.contains(&(body_of(&shared).as_ptr() as usize)));

        let copied = Event::decode(&wire).unwrap();
        assert_eq!(copied, e);
        assert!(!range.contains(&(body_of(&copied).as_ptr() as usize)));
        // The source is forgotten after a shared decode: a later plain
        // decode of the same buffer copies again.
        let again = Event::decode(&wire).unwrap();
        assert!(!range.contains(&(body_of(&again).as_ptr() as usize)));
    }

    #[test]
    fn a_shared_decode_slices_the_exchange_and_routing_key_too() {
        let e = Event::Published {
            vhost: "/".into(),
            exchange: "amq.topic".into(),
            routing_key: "a.b.ключ".into(),
            msg_id: 7,
            timestamp_ms: 1,
            properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
            body: Bytes::from_static(b"body"),
            queues: ["q".into()].into_iter().collect(),
        };
        let wire = e.encode();
        let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
        let in_entry = |s: &ByteString| range.contains(&(s.as_ptr() as usize));
        let Event::Published {
            exchange,
            routing_key,
            ..
        } = Event::decode_shared(&wire).unwrap()
        else {
            panic!("not a publish");
        };
        assert_eq!((&*exchange, &*routing_key), ("amq.topic", "a.b.ключ"));
        assert!(in_entry(&exchange) && in_entry(&routing_key));
        let Event::Published { routing_key, .. } = Event::decode(&wire).unwrap() else {
            panic!("not a publish");
        };
        assert!(!in_entry(&routing_key), "a plain decode copies");
        assert_eq!(Event::decode_shared(&wire).unwrap(), e);
    }

    fn names_of(e: &Event) -> (Arc<str>, Arc<str>) {
        match e {
            Event::Published { vhost, queues, .. } => (vhost.clone(), queues[0].clone()),
            other => panic!("not a publish: {other:?}"),
        }
    }

    #[test]
    fn decoding_reuses_the_names_it_saw_lately_and_still_decodes_new_ones() {
        let wire = published(b"x").encode();
        let (vhost, queue) = names_of(&Event::decode(&wire).unwrap());
        let (vhost2, queue2) = names_of(&Event::decode_shared(&wire).unwrap());
        assert!(Arc::ptr_eq(&vhost, &vhost2) && Arc::ptr_eq(&queue, &queue2));
        // Equal properties share one value too; different ones do not.
        let props = |e: Event| match e {
            Event::Published { properties, .. } => properties,
            other => panic!("not a publish: {other:?}"),
        };
        let persistent = |id| Event::Published {
            vhost: "/".into(),
            exchange: "".into(),
            routing_key: "q".into(),
            msg_id: id,
            timestamp_ms: 1,
            properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
            body: Bytes::new(),
            queues: ["q".into()].into_iter().collect(),
        };
        let first = props(Event::decode(&persistent(1).encode()).unwrap());
        let second = props(Event::decode(&persistent(2).encode()).unwrap());
        assert!(Arc::ptr_eq(&first, &second));
        let other = props(Event::decode(&wire).unwrap());
        assert_eq!(*other, BasicProperties::default());
        assert!(!Arc::ptr_eq(&first, &other));
        // More names than are kept: each still decodes to itself.
        for i in 0..40 {
            let name: Arc<str> = format!("q{i}").into();
            let e = Event::Published {
                vhost: name.clone(),
                exchange: "".into(),
                routing_key: "".into(),
                msg_id: i,
                timestamp_ms: 0,
                properties: Arc::default(),
                body: Bytes::new(),
                queues: [name.clone(), "other".into()].into_iter().collect(),
            };
            assert_eq!(Event::decode(&e.encode()).unwrap(), e);
        }
    }

    #[test]
    fn entries_cut_from_an_arena_are_the_plain_encoding_back_to_back() {
        let mut arena = BytesMut::new();
        let events = [
            published(b"one"),
            published(&[7; 100_000]),
            Event::QueueDeleted {
                vhost: "/".into(),
                name: "q".into(),
            },
            published(b"two"),
            published(b"three"),
        ];
        let entries: Vec<Bytes> = events.iter().map(|e| e.encode_into(&mut arena)).collect();
        for (e, entry) in events.iter().zip(&entries) {
            assert_eq!(entry, &e.encode());
            assert_eq!(&Event::decode(entry).unwrap(), e);
        }
        // Small entries follow each other in one chunk (the big one filled
        // its own, which the one after it used up).
        assert_eq!(entries[3].as_ptr_range().end, entries[4].as_ptr());
    }

    #[test]
    fn a_shared_decode_of_a_failing_entry_leaves_nothing_behind() {
        let bad = Bytes::from_static(&[EVENT_FORMAT_VERSION, 200, 200, 200]);
        assert!(Event::decode_shared(&bad).is_err());
        let e = published(b"x");
        assert_eq!(Event::decode_shared(&e.encode()).unwrap(), e);
    }
}
