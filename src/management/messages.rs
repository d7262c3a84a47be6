//! `POST /api/queues/{vhost}/{name}/get` and
//! `POST /api/exchanges/{vhost}/{name}/publish`: messages in and out through
//! the management API, in RabbitMQ 3.10's shapes, over an internal session
//! as RabbitMQ's plugin does over its direct connection.

use super::internal::Got;
use super::writes::{
    WriteError, WriteResult, body_json, exchange_name, field_table, in_vhost, session,
    short_string, string,
};
use super::{Access, ApiError, AppState, caller};
use axum::Router;
use axum::body::Bytes as Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use stablemq_protocol::methods::basic as mbasic;
use stablemq_protocol::{AMQPClass, BasicProperties, ShortString};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/queues/{vhost}/{name}/get", post(get_messages))
        .route("/api/exchanges/{vhost}/{name}/publish", post(publish))
}

/// How `/get` settles what it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckMode {
    /// Taken without ack: the messages leave the queue.
    AckRequeueFalse,
    /// Put back (redelivered) once read.
    AckRequeueTrue,
    /// Rejected and requeued.
    RejectRequeueTrue,
    /// Rejected without requeue: dead-lettered if the queue has a DLX.
    RejectRequeueFalse,
}

impl AckMode {
    fn parse(s: &str) -> Option<AckMode> {
        match s {
            "ack_requeue_false" => Some(AckMode::AckRequeueFalse),
            "ack_requeue_true" => Some(AckMode::AckRequeueTrue),
            "reject_requeue_true" => Some(AckMode::RejectRequeueTrue),
            "reject_requeue_false" => Some(AckMode::RejectRequeueFalse),
            _ => None,
        }
    }
}

/// `POST /api/queues/{vhost}/{name}/get`: up to `count` messages with
/// RabbitMQ's fields; every message is taken before any is put back, so the
/// answer holds distinct messages.
async fn get_messages(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let m = body_json(&body)?;
    let count = match m.get("count") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| WriteError::BadRequest("count must be a non-negative integer".into()))?;
    let ackmode = string(&m, "ackmode")?
        .as_deref()
        .and_then(AckMode::parse)
        .ok_or_else(|| {
            WriteError::BadRequest(
                "ackmode must be ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false".into(),
            )
        })?;
    let encoding = string(&m, "encoding")?.unwrap_or_else(|| "auto".into());
    if encoding != "auto" && encoding != "base64" {
        return Err(WriteError::BadRequest(format!(
            "Unsupported encoding {encoding}; use auto or base64"
        )));
    }
    let truncate = match m.get("truncate") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let n = name.clone();
    if !in_vhost(&state, &vhost, move |v| v.queues.contains_key(&n)).await? {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    let mut s = session(&state, &who, &vhost).await?;
    let no_ack = ackmode == AckMode::AckRequeueFalse;
    let mut got: Vec<Got> = Vec::new();
    for _ in 0..count {
        match s.get(&name, no_ack).await? {
            Some(g) => got.push(g),
            None => break,
        }
    }
    if !no_ack {
        let requeue = ackmode != AckMode::RejectRequeueFalse;
        for g in &got {
            s.cast(AMQPClass::Basic(mbasic::AMQPMethod::Reject(
                mbasic::Reject {
                    delivery_tag: g.delivery_tag,
                    requeue,
                },
            )))
            .await?;
        }
    }
    let out: Vec<Value> = got
        .into_iter()
        .map(|g| message_json(g, &encoding, truncate))
        .collect();
    Ok(axum::Json(out).into_response())
}

/// One message as `/get` answers it.
fn message_json(g: Got, encoding: &str, truncate: Option<u64>) -> Value {
    let payload_bytes = g.body.len();
    let mut body = g.body;
    if let Some(t) = truncate
        && (t as usize) < body.len()
    {
        body = body.slice(..t as usize);
    }
    let (payload, payload_encoding) = match (encoding, std::str::from_utf8(&body)) {
        ("auto", Ok(text)) => (text.to_string(), "string"),
        _ => (
            base64::engine::general_purpose::STANDARD.encode(&body),
            "base64",
        ),
    };
    json!({
        "payload_bytes": payload_bytes,
        "redelivered": g.redelivered,
        "exchange": g.exchange,
        "routing_key": g.routing_key,
        "message_count": g.message_count,
        "properties": properties_json(&g.properties),
        "payload": payload,
        "payload_encoding": payload_encoding,
    })
}

/// Message properties as RabbitMQ's API writes them: only those set.
pub(super) fn properties_json(p: &BasicProperties) -> Value {
    let mut m = Map::new();
    let mut s = |k: &str, v: &Option<ShortString>| {
        if let Some(v) = v {
            m.insert(k.into(), Value::String(v.as_str().to_string()));
        }
    };
    s("content_type", p.content_type());
    s("content_encoding", p.content_encoding());
    s("correlation_id", p.correlation_id());
    s("reply_to", p.reply_to());
    s("expiration", p.expiration());
    s("message_id", p.message_id());
    s("type", p.kind());
    s("user_id", p.user_id());
    s("app_id", p.app_id());
    s("cluster_id", p.cluster_id());
    if let Some(d) = p.delivery_mode() {
        m.insert("delivery_mode".into(), json!(d));
    }
    if let Some(x) = p.priority() {
        m.insert("priority".into(), json!(x));
    }
    if let Some(t) = p.timestamp() {
        m.insert("timestamp".into(), json!(t));
    }
    if let Some(h) = p.headers() {
        m.insert("headers".into(), super::json::table(h));
    }
    Value::Object(m)
}

/// Properties from a `/publish` body.
pub(super) fn properties_from(m: &Map<String, Value>) -> Result<BasicProperties, WriteError> {
    let bad = |k: &str| WriteError::BadRequest(format!("invalid property {k}"));
    let mut p = BasicProperties::default();
    for (k, v) in m {
        let text = || match v.as_str() {
            Some(s) => short_string(s, k),
            None => Err(bad(k)),
        };
        let num = || {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .ok_or_else(|| bad(k))
        };
        p = match k.as_str() {
            "content_type" => p.with_content_type(text()?),
            "content_encoding" => p.with_content_encoding(text()?),
            "correlation_id" => p.with_correlation_id(text()?),
            "reply_to" => p.with_reply_to(text()?),
            "expiration" => p.with_expiration(text()?),
            "message_id" => p.with_message_id(text()?),
            "type" => p.with_type(text()?),
            "user_id" => p.with_user_id(text()?),
            "app_id" => p.with_app_id(text()?),
            "cluster_id" => p.with_cluster_id(text()?),
            "delivery_mode" => p.with_delivery_mode(u8::try_from(num()?).map_err(|_| bad(k))?),
            "priority" => p.with_priority(u8::try_from(num()?).map_err(|_| bad(k))?),
            "timestamp" => p.with_timestamp(num()?),
            "headers" => match v {
                Value::Object(o) => p.with_headers(field_table(o)?),
                _ => return Err(bad(k)),
            },
            _ => return Err(WriteError::BadRequest(format!("unknown property {k}"))),
        };
    }
    Ok(p)
}

/// `POST /api/exchanges/{vhost}/{name}/publish`: `{"routed": bool}` once
/// the message is confirmed.
async fn publish(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let m = body_json(&body)?;
    let routing_key = string(&m, "routing_key")?
        .ok_or_else(|| WriteError::BadRequest("routing_key is required".into()))?;
    let payload = string(&m, "payload")?
        .ok_or_else(|| WriteError::BadRequest("payload is required".into()))?;
    let encoding = string(&m, "payload_encoding")?.unwrap_or_else(|| "string".into());
    let body = match encoding.as_str() {
        "string" => Bytes::from(payload.into_bytes()),
        "base64" => Bytes::from(
            base64::engine::general_purpose::STANDARD
                .decode(payload.as_bytes())
                .map_err(|_| WriteError::BadRequest("payload is not valid base64".into()))?,
        ),
        other => {
            return Err(WriteError::BadRequest(format!(
                "payload_encoding {other} is not string or base64"
            )));
        }
    };
    let properties = match m.get("properties") {
        None | Some(Value::Null) => BasicProperties::default(),
        Some(Value::Object(o)) => properties_from(o)?,
        Some(Value::Array(a)) if a.is_empty() => BasicProperties::default(),
        Some(_) => {
            return Err(WriteError::BadRequest(
                "properties must be an object".into(),
            ));
        }
    };
    let name = exchange_name(name);
    // A consumer gets both as short strings: longer ones cannot be delivered.
    short_string(&name, "the exchange name")?;
    short_string(&routing_key, "the routing key")?;
    let n = name.clone();
    if !in_vhost(&state, &vhost, move |v| v.exchanges.contains_key(&n)).await? {
        // RabbitMQ answers the channel's 404 as a bad request.
        return Err(WriteError::BadRequest(format!(
            "404 NOT_FOUND - no exchange '{name}' in vhost '{vhost}'"
        )));
    }
    let mut s = session(&state, &who, &vhost).await?;
    let routed = s.publish(&name, &routing_key, properties, body).await?;
    Ok(axum::Json(json!({ "routed": routed })).into_response())
}
