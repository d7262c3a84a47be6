//! The fuzz targets of the management API's request bodies and of the
//! definitions import (re-exported by [`crate::fuzz`]). They live here
//! because the bodies' field readers are private to the API.
//!
//! Each runs the same parse steps as the handlers, minus the broker state
//! they consult, and checks that nothing panics and that what a parse
//! accepts survives the way on: events encode for the log and decode back,
//! AMQP methods and properties encode into frames that decode back.

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use serde_json::Value;
use stablemq_protocol::methods::{basic as mb, exchange as mx, queue as mq};
use stablemq_protocol::{AMQPClass, Frame, encode_content};

use super::alarms::{Watermark, limit_of};
use super::definitions::parse;
use super::messages::properties_from;
use super::parameters::{limits_event, parameter_event, value_of};
use super::policies::policy_event;
use super::users_api::{body_object, regex, required, tags, text, topic_regex, user_fields};
use super::writes::{arguments, body_json, flag, short_string, string};
use crate::broker::event::Event;
use crate::broker::parameters::{LIMITS_NAME, VHOST_LIMITS, validate_limits};

/// `data` as a definitions document, parsed into events as
/// `POST /api/definitions` (and `/api/definitions/{vhost}`) and
/// `serve --definitions` do; each event must encode for the log and
/// decode to an event that encodes the same.
pub fn definitions(data: &[u8]) {
    let Ok(doc) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for only in [None, Some("/")] {
        if let Ok((events, _not_imported)) = parse(&doc, only) {
            events.iter().for_each(event_round_trip);
        }
    }
}

/// `data` as the body of every management write endpoint, through the
/// parse steps of each: queues, exchanges, bindings, publish, users,
/// vhosts, permissions, topic permissions, policies, parameters, vhost and
/// user limits, and the memory watermark.
pub fn management_bodies(data: &[u8]) {
    let json = body_json(data);
    let object = body_object(data);
    assert_eq!(
        json.is_ok(),
        object.is_ok(),
        "the two body readers disagree"
    );
    if let Ok(w) = serde_json::from_slice::<Watermark>(data) {
        let _ = (limit_of(&w, Some(16 << 30)), limit_of(&w, None));
    }
    let Ok(m) = json else {
        return;
    };
    declares(&m);
    publish(&m);
    let _ = user_fields(&m);
    let _ = (text(&m, "description"), tags(m.get("tags")));
    let _ = text(&m, "default_queue_type");
    for key in ["configure", "write", "read"] {
        if let Ok(r) = required(&m, key) {
            let _ = (regex(&r), topic_regex(&r));
        }
    }
    if let Ok(ev) = policy_event("/", "p", &m) {
        event_round_trip(&ev);
    }
    if let Ok(value) = value_of(&m) {
        for (component, name) in [(VHOST_LIMITS, LIMITS_NAME), ("shovel", "s"), ("x", "y")] {
            if let Ok(ev) = parameter_event("/", component, name, &value) {
                event_round_trip(&ev);
            }
        }
        let mut change = serde_json::Map::new();
        change.insert("max-connections".into(), value);
        let _ = crate::users::limits::validate(&change);
    }
    if validate_limits(&m).is_ok() {
        event_round_trip(&limits_event("/".into(), m.clone()));
    }
}

/// `PUT /api/queues`, `PUT /api/exchanges` and `POST /api/bindings`: the
/// methods they send, encoded as frames.
fn declares(m: &serde_json::Map<String, Value>) {
    let (Ok(durable), Ok(auto_delete), Ok(internal)) = (
        flag(m, "durable", false),
        flag(m, "auto_delete", false),
        flag(m, "internal", false),
    ) else {
        return;
    };
    let Ok(args) = arguments(m) else {
        return;
    };
    let kind = string(m, "type")
        .ok()
        .flatten()
        .unwrap_or_else(|| "direct".into());
    let key = string(m, "routing_key").ok().flatten().unwrap_or_default();
    let _ = super::json::properties_key(&key, &args);
    let (Ok(kind), Ok(key)) = (
        short_string(&kind, "the exchange type"),
        short_string(&key, "the routing key"),
    ) else {
        return;
    };
    method_round_trip(AMQPClass::Queue(mq::AMQPMethod::Declare(mq::Declare {
        queue: "q".into(),
        passive: false,
        durable,
        exclusive: false,
        auto_delete,
        nowait: false,
        arguments: args.clone(),
    })));
    method_round_trip(AMQPClass::Exchange(mx::AMQPMethod::Declare(mx::Declare {
        exchange: "x".into(),
        kind,
        passive: false,
        durable,
        auto_delete,
        internal,
        nowait: false,
        arguments: args.clone(),
    })));
    method_round_trip(AMQPClass::Queue(mq::AMQPMethod::Bind(mq::Bind {
        queue: "q".into(),
        exchange: "x".into(),
        routing_key: key,
        nowait: false,
        arguments: args,
    })));
}

/// `POST /api/exchanges/{vhost}/{name}/publish`: the message it publishes,
/// encoded as the frames a consumer would get.
fn publish(m: &serde_json::Map<String, Value>) {
    let (Ok(Some(key)), Ok(Some(payload))) = (string(m, "routing_key"), string(m, "payload"))
    else {
        return;
    };
    // As the handler refuses a routing key a consumer could not be sent.
    let Ok(key) = short_string(&key, "the routing key") else {
        return;
    };
    let body = match string(m, "payload_encoding").ok().flatten().as_deref() {
        None | Some("string") => Bytes::from(payload.into_bytes()),
        Some("base64") => match base64::engine::general_purpose::STANDARD.decode(payload) {
            Ok(b) => Bytes::from(b),
            Err(_) => return,
        },
        Some(_) => return,
    };
    let properties = match m.get("properties") {
        Some(Value::Object(o)) => match properties_from(o) {
            Ok(p) => p,
            Err(_) => return,
        },
        _ => Default::default(),
    };
    let method = AMQPClass::Basic(mb::AMQPMethod::Deliver(mb::Deliver {
        consumer_tag: "c".into(),
        delivery_tag: 1,
        redelivered: false,
        exchange: "x".into(),
        routing_key: key,
    }));
    let mut wire = BytesMut::new();
    encode_content(1, &method, &properties, &body, 4096, &mut wire);
    let bytes = wire.clone();
    let mut frames = 0;
    loop {
        match stablemq_protocol::decode_frame(&mut wire, 4096) {
            Ok(Some(_)) => frames += 1,
            Ok(None) if wire.is_empty() => break,
            other => panic!("a published message encodes to {bytes:?}, which decodes as {other:?}"),
        }
    }
    assert!(frames >= 2, "a message is a method and a header at least");
}

fn method_round_trip(method: AMQPClass) {
    crate::fuzz::check_encodes(&Frame::Method { channel: 1, method });
}

/// An event encodes for the log and decodes to one that encodes the same.
fn event_round_trip(ev: &Event) {
    let bytes = ev.encode();
    let back = Event::decode(&bytes).unwrap_or_else(|e| panic!("{ev:?} does not decode: {e}"));
    assert_eq!(back.encode(), bytes, "{ev:?} does not re-encode the same");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::management::writes::WriteError;
    use serde_json::json;

    fn object(v: Value) -> serde_json::Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object literal"),
        }
    }

    /// Found by fuzzing: a table key or a property longer than a short
    /// string (255 bytes) made `ShortString::from` panic in the handler.
    /// It is a 400 now, and the definitions import refuses the document.
    #[test]
    fn strings_longer_than_a_short_string_are_a_bad_request_not_a_panic() {
        let long = "k".repeat(256);
        let bad = |r: Result<_, WriteError>| matches!(r, Err(WriteError::BadRequest(t)) if t.contains("longer than 255"));
        assert!(bad(arguments(&object(
            json!({"arguments": {long.clone(): 1}})
        ))
        .map(|_| ())));
        assert!(bad(arguments(&object(
            json!({"arguments": {"a": [{long.clone(): 1}]}})
        ))
        .map(|_| ())));
        assert!(bad(properties_from(&object(
            json!({"message_id": long.clone()})
        ))
        .map(|_| ())));
        assert!(bad(properties_from(&object(
            json!({"headers": {long.clone(): 1}})
        ))
        .map(|_| ())));
        assert!(bad(short_string(&long, "the routing key").map(|_| ())));
        // 255 bytes still fit.
        assert!(arguments(&object(json!({"arguments": {"k".repeat(255): 1}}))).is_ok());

        let doc = json!({"queues": [{"name": "q", "vhost": "/", "durable": true,
            "auto_delete": false, "arguments": {long: 1}}]});
        let err = parse(&doc, None).err().unwrap_or_default();
        assert!(err.contains("longer than 255 bytes"), "{err}");
    }
}
