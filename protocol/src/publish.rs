//! basic.publish as the broker receives it.
//!
//! Publish is the one method a broker decodes once per message, so it gets its
//! own frame ([`crate::Frame::Publish`]) rather than amq-protocol's generic
//! method: the exchange and the routing key stay [`ByteString`] slices of the
//! frame they arrived in. A `ShortString` would be a heap allocation per message
//! (issue 4: "no per-message allocation on the publish, route and deliver path"),
//! and the key travels on unchanged into the queued message and every delivery.

use std::ops::Range;

use amq_protocol::protocol::basic;
use bytes::Bytes;
use bytestring::ByteString;

use crate::AMQPClass;

/// basic.publish's arguments (the ticket, a reserved short, is dropped).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Publish {
    /// The exchange to publish to (empty: the default exchange).
    pub exchange: ByteString,
    /// The routing key.
    pub routing_key: ByteString,
    /// Return the message (basic.return) if no queue takes it.
    pub mandatory: bool,
    /// The deprecated `immediate` flag, which the broker refuses as RabbitMQ does.
    pub immediate: bool,
}

impl Publish {
    /// The same method as amq-protocol's type, for encoding and for code that
    /// speaks amq-protocol's methods (a client).
    pub fn to_method(&self) -> AMQPClass {
        AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: (&*self.exchange).into(),
            routing_key: (&*self.routing_key).into(),
            mandatory: self.mandatory,
            immediate: self.immediate,
        }))
    }

    /// Cuts the exchange and routing key out of `args`, a method payload's
    /// arguments that [`layout`] accepted.
    pub(crate) fn from_args(args: &Bytes, at: &Layout) -> Publish {
        // SAFETY: `layout` checked that both ranges of these very bytes are
        // UTF-8, and `Bytes::slice` shares them unchanged.
        #[allow(
            unsafe_code,
            reason = "an unchecked UTF-8 slice: a checked one would scan the bytes twice per publish"
        )]
        let (exchange, routing_key) = unsafe {
            (
                ByteString::from_bytes_unchecked(args.slice(at.exchange.clone())),
                ByteString::from_bytes_unchecked(args.slice(at.routing_key.clone())),
            )
        };
        Publish {
            exchange,
            routing_key,
            mandatory: at.bits & 1 != 0,
            immediate: at.bits & 2 != 0,
        }
    }
}

impl From<basic::Publish> for Publish {
    fn from(p: basic::Publish) -> Publish {
        Publish {
            exchange: String::from(p.exchange).into(),
            routing_key: String::from(p.routing_key).into(),
            mandatory: p.mandatory,
            immediate: p.immediate,
        }
    }
}

/// Where the strings of basic.publish's arguments lie.
pub(crate) struct Layout {
    exchange: Range<usize>,
    routing_key: Range<usize>,
    bits: u8,
}

/// basic.publish's arguments (ticket, exchange, routing key, mandatory and
/// immediate bits), checked by hand rather than by nom: the generic parser cost
/// ~10% of the broker's instructions per message. None when they are not exactly
/// that, or a string is not UTF-8; the generic parser then has the last word.
pub(crate) fn layout(args: &[u8]) -> Option<Layout> {
    let (_ticket, rest) = args.split_first_chunk::<2>()?;
    let (&len, rest) = rest.split_first()?;
    let (exchange, rest) = rest.split_at_checked(usize::from(len))?;
    let (&len, rest) = rest.split_first()?;
    let (routing_key, rest) = rest.split_at_checked(usize::from(len))?;
    let [bits] = rest else {
        return None;
    };
    std::str::from_utf8(exchange).ok()?;
    std::str::from_utf8(routing_key).ok()?;
    let exchange_at = 3;
    let key_at = exchange_at + exchange.len() + 1;
    Some(Layout {
        exchange: exchange_at..exchange_at + exchange.len(),
        routing_key: key_at..key_at + routing_key.len(),
        bits: *bits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FRAME_METHOD, put_frame};
    use crate::{Frame, decode_frame};
    use amq_protocol::protocol::parse_class;
    use bytes::BytesMut;
    use nom::{Parser, combinator::all_consuming};

    /// The hand parser's result, as amq-protocol's method.
    fn hand(args: &[u8]) -> Option<AMQPClass> {
        let at = layout(args)?;
        Some(Publish::from_args(&Bytes::copy_from_slice(args), &at).to_method())
    }

    /// What amq-protocol's generic parser makes of a basic.publish payload
    /// (None when it refuses it).
    fn generic(args: &[u8]) -> Option<AMQPClass> {
        let mut payload = vec![0, 60, 0, 40];
        payload.extend_from_slice(args);
        all_consuming(parse_class)
            .parse(payload.as_slice())
            .ok()
            .map(|(_, m)| m)
    }

    #[test]
    fn hand_parsed_publish_agrees_with_amq_protocol() {
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for (x, k, bits) in [
            ("", "q", 0u8),
            ("amq.topic", "a.b.c", 1),
            ("x", "", 2),
            ("é", "ключ", 3),
            ("x", "k", 0xfc),
        ] {
            let mut a = vec![0, 0, x.len() as u8];
            a.extend_from_slice(x.as_bytes());
            a.push(k.len() as u8);
            a.extend_from_slice(k.as_bytes());
            a.push(bits);
            cases.push(a);
        }
        // Malformed: short, long, bad UTF-8, lengths past the end.
        cases.push(vec![0, 0, 1, b'x', 0]);
        cases.push(vec![0, 0, 0, 0, 0, 9]);
        cases.push(vec![0, 0, 1, 0xff, 1, b'k', 0]);
        cases.push(vec![0, 0, 200, b'x']);
        for args in cases {
            assert_eq!(hand(&args), generic(&args), "args {args:?}");
        }
    }

    #[test]
    fn the_strings_are_slices_of_the_frame() {
        let args = Bytes::from_static(b"\0\0\x09amq.topic\x05a.b.c\x01");
        let Some(at) = layout(&args) else {
            panic!("well-formed publish refused");
        };
        let p = Publish::from_args(&args, &at);
        assert_eq!((&*p.exchange, &*p.routing_key), ("amq.topic", "a.b.c"));
        assert!(p.mandatory && !p.immediate);
        let frame = args.as_ptr_range();
        assert!(
            frame.contains(&p.routing_key.as_ptr()),
            "routing key copied"
        );
        assert!(frame.contains(&p.exchange.as_ptr()), "exchange copied");
    }

    /// Well-formed publish arguments: any ticket, any strings (also ones that
    /// are not UTF-8), any bits byte; optionally cut short or with trailing
    /// bytes, so near-misses are covered too, not only random noise.
    fn publish_args() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        (
            any::<u16>(),
            prop_oneof![
                "[a-z.\\-_é]{0,40}".prop_map(String::into_bytes),
                proptest::collection::vec(any::<u8>(), 0..40),
            ],
            prop_oneof![
                "[a-z.#*é]{0,255}".prop_map(String::into_bytes),
                proptest::collection::vec(any::<u8>(), 0..300),
            ],
            any::<u8>(),
            0usize..4,
            proptest::collection::vec(any::<u8>(), 0..3),
        )
            .prop_map(|(ticket, x, k, bits, cut, extra)| {
                let mut a = ticket.to_be_bytes().to_vec();
                a.push(x.len() as u8);
                a.extend_from_slice(&x[..x.len().min(255)]);
                a.push(k.len() as u8);
                a.extend_from_slice(&k[..k.len().min(255)]);
                a.push(bits);
                a.truncate(a.len().saturating_sub(cut % 2 * cut));
                a.extend_from_slice(&extra[..(cut % 2 == 0) as usize * extra.len()]);
                a
            })
    }

    proptest::proptest! {
        /// The hand parser never accepts what nom refuses and never gives a
        /// different value.
        #[test]
        fn hand_parsed_publish_is_nom_on_near_valid_input(args in publish_args()) {
            if let Some(hand) = hand(&args) {
                proptest::prop_assert_eq!(Some(hand), generic(&args));
            }
        }

        #[test]
        fn hand_parsed_publish_is_nom_on_arbitrary_bytes(
            args in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)
        ) {
            if let Some(hand) = hand(&args) {
                proptest::prop_assert_eq!(Some(hand), generic(&args));
            }
        }
    }
    /// A basic.publish frame with these arguments.
    fn publish_frame(args: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        put_frame(FRAME_METHOD, 1, &mut out, |out| {
            out.extend_from_slice(&[0, 60, 0, 40]);
            out.extend_from_slice(args);
        });
        out
    }

    proptest::proptest! {
        /// Whatever the arguments, a publish decodes to what amq-protocol's
        /// generic parser makes of them: as a `Frame::Publish` when the hand
        /// parser takes it, else as the generic method, else as an error.
        #[test]
        fn a_publish_decodes_as_amq_protocol_reads_it(
            args in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)
        ) {
            let mut payload = vec![0, 60, 0, 40];
            payload.extend_from_slice(&args);
            let generic = all_consuming(parse_class)
                .parse(payload.as_slice())
                .ok()
                .map(|(_, m)| m);
            let ours = match decode_frame(&mut publish_frame(&args), 0) {
                Ok(Some(Frame::Publish { publish, .. })) => Some(publish.to_method()),
                Ok(Some(Frame::Method { method, .. })) => Some(method),
                Ok(other) => panic!("publish decoded as {other:?}"),
                Err(_) => None,
            };
            proptest::prop_assert_eq!(ours, generic);
        }
    }
}
