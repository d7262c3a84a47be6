//! The management API's writes on queues, exchanges, bindings and
//! connections, in RabbitMQ 3.10's shapes and status codes: PUT and DELETE
//! of queues and exchanges, queue purge, binding create and delete, and
//! connection force-close (`/get` and `/publish` are in `messages`).
//!
//! Each one runs as AMQP methods on an internal session
//! ([`super::internal`]) opened as the API user, as RabbitMQ's plugin does
//! over its direct connection: the core validates, checks permissions and
//! answers only once the change is stable, and a refusal comes back as the
//! AMQP close a client would get, which [`WriteError`] maps to HTTP.

use super::internal::{Session, SessionError};
use super::json::properties_key;
use super::query::query;
use super::{Access, ApiError, AppState, Caller, caller};
use crate::broker::event::Destination;
use crate::error::ReplyCode;
use axum::Router;
use axum::body::Bytes as Body;
use axum::extract::{Path, Query as UrlQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post, put};
use serde_json::{Map, Value, json};
use stablemq_protocol::methods::{exchange as mx, queue as mq};
use stablemq_protocol::{AMQPClass, AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use std::collections::HashMap;

/// The routes of this file (merged with the read side's on the same paths).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/api/queues/{vhost}/{name}",
            put(put_queue).delete(delete_queue),
        )
        .route("/api/queues/{vhost}/{name}/contents", delete(purge_queue))
        .route(
            "/api/exchanges/{vhost}/{name}",
            put(put_exchange).delete(delete_exchange),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{dest}",
            post(create_binding),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}",
            delete(delete_binding),
        )
        .route("/api/connections/{name}", delete(close_connection))
}

/// A refused write, answered as RabbitMQ's API answers it.
#[derive(Debug)]
pub enum WriteError {
    /// A refusal the read side also makes (auth, 404, 503).
    Api(ApiError),
    /// 400 with RabbitMQ's `{"error": "bad_request", "reason": ...}`.
    BadRequest(String),
    /// 401 for an operation the user's permissions refuse.
    NotAuthorised(String),
}

impl From<ApiError> for WriteError {
    fn from(e: ApiError) -> WriteError {
        WriteError::Api(e)
    }
}

impl From<SessionError> for WriteError {
    /// The AMQP close becomes the HTTP answer RabbitMQ's plugin gives for
    /// it: 404 for NOT_FOUND, 401 for ACCESS_REFUSED and NOT_ALLOWED, 400
    /// with "code text" for the rest.
    fn from(e: SessionError) -> WriteError {
        match e {
            SessionError::Amqp(e) => match e.code {
                ReplyCode::NotFound => WriteError::Api(ApiError::NotFound),
                ReplyCode::AccessRefused | ReplyCode::NotAllowed => {
                    WriteError::NotAuthorised(e.reply_text())
                }
                // RabbitMQ gives a precondition's text alone ("inequivalent
                // arg ..."), other codes as "code NAME - text".
                ReplyCode::PreconditionFailed => WriteError::BadRequest(e.detail),
                _ => WriteError::BadRequest(e.to_string()),
            },
            SessionError::Unavailable(why) => WriteError::Api(ApiError::Unavailable(why)),
        }
    }
}

impl IntoResponse for WriteError {
    fn into_response(self) -> Response {
        match self {
            WriteError::Api(e) => e.into_response(),
            WriteError::BadRequest(reason) => (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "bad_request", "reason": reason})),
            )
                .into_response(),
            WriteError::NotAuthorised(reason) => (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "not_authorised", "reason": reason})),
            )
                .into_response(),
        }
    }
}

pub(super) type WriteResult = Result<Response, WriteError>;

/// `amq.default` names the default exchange in URLs.
pub(super) fn exchange_name(url_name: String) -> String {
    if url_name == "amq.default" {
        String::new()
    } else {
        url_name
    }
}

/// A request body as a JSON object; an empty body is an empty object.
pub(super) fn body_json(body: &[u8]) -> Result<Map<String, Value>, WriteError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(WriteError::BadRequest("not_json_object".into())),
        Err(e) => Err(WriteError::BadRequest(format!("failed_to_parse_json: {e}"))),
    }
}

pub(super) fn flag(m: &Map<String, Value>, key: &str, default: bool) -> Result<bool, WriteError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        // rabbitmqadmin sends "true"/"false" as strings.
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(v) => Err(WriteError::BadRequest(format!(
            "{key} must be a boolean, got {v}"
        ))),
    }
}

pub(super) fn string(m: &Map<String, Value>, key: &str) -> Result<Option<String>, WriteError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(WriteError::BadRequest(format!(
            "{key} must be a string, got {v}"
        ))),
    }
}

/// A JSON value as the AMQP value RabbitMQ's API makes of it: integers are
/// longs, other numbers doubles, objects tables, arrays arrays.
pub(super) fn amqp_value(v: &Value) -> Result<AMQPValue, WriteError> {
    Ok(match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        Value::Array(a) => AMQPValue::FieldArray(FieldArray::from(
            a.iter().map(amqp_value).collect::<Result<Vec<_>, _>>()?,
        )),
        Value::Object(o) => AMQPValue::FieldTable(field_table(o)?),
    })
}

/// A JSON object as a field table. A key longer than a short string
/// (255 bytes) is refused with 400: AMQP cannot carry it.
pub(super) fn field_table(o: &Map<String, Value>) -> Result<FieldTable, WriteError> {
    let mut t = FieldTable::default();
    for (k, v) in o {
        t.insert(short_string(k, "a table key")?, amqp_value(v)?);
    }
    Ok(t)
}

/// `s` as an AMQP short string, or a 400 saying that `what` is longer than
/// the 255 bytes one holds (found by fuzzing: `ShortString::from` panics).
pub(super) fn short_string(s: &str, what: &str) -> Result<ShortString, WriteError> {
    ShortString::try_new(s).map_err(|_| {
        WriteError::BadRequest(format!(
            "{what} of {} bytes is longer than 255 bytes, the most AMQP allows",
            s.len()
        ))
    })
}

pub(super) fn arguments(m: &Map<String, Value>) -> Result<FieldTable, WriteError> {
    match m.get("arguments") {
        None | Some(Value::Null) => Ok(FieldTable::default()),
        Some(Value::Object(o)) => field_table(o),
        // The management UI sends an empty list for "no arguments".
        Some(Value::Array(a)) if a.is_empty() => Ok(FieldTable::default()),
        Some(v) => Err(WriteError::BadRequest(format!(
            "arguments must be an object, got {v}"
        ))),
    }
}

/// Whether the vhost exists, and the answer of `f` on it.
pub(super) async fn in_vhost<T: Send + 'static>(
    state: &AppState,
    vhost: &str,
    f: impl FnOnce(&crate::broker::Vhost) -> T + Send + 'static,
) -> Result<T, WriteError> {
    let v = vhost.to_string();
    query(state, move |view| view.broker.vhost(&v).map(f))
        .await?
        .ok_or(WriteError::Api(ApiError::NotFound))
}

pub(super) async fn session(
    state: &AppState,
    who: &Caller,
    vhost: &str,
) -> Result<Session, WriteError> {
    Ok(Session::open(state, &who.name, vhost).await?)
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn created_or_not(existed: bool) -> Response {
    if existed {
        StatusCode::NO_CONTENT.into_response()
    } else {
        StatusCode::CREATED.into_response()
    }
}

/// `PUT /api/queues/{vhost}/{name}`: declare; 201 when new, 204 when an
/// equivalent queue exists, 400 when it is not equivalent.
async fn put_queue(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let m = body_json(&body)?;
    // RabbitMQ's defaults for a bare `{}`: transient, not auto-delete.
    let durable = flag(&m, "durable", false)?;
    let auto_delete = flag(&m, "auto_delete", false)?;
    let arguments = arguments(&m)?;
    let n = name.clone();
    let existed = in_vhost(&state, &vhost, move |v| v.queues.contains_key(&n)).await?;
    let mut s = session(&state, &who, &vhost).await?;
    s.call(AMQPClass::Queue(mq::AMQPMethod::Declare(mq::Declare {
        queue: short_string(&name, "the queue name")?,
        passive: false,
        durable,
        exclusive: false,
        auto_delete,
        nowait: false,
        arguments,
    })))
    .await?;
    Ok(created_or_not(existed))
}

/// `DELETE /api/queues/{vhost}/{name}` with `if-empty` and `if-unused`.
async fn delete_queue(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
    headers: HeaderMap,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let n = name.clone();
    if !in_vhost(&state, &vhost, move |v| v.queues.contains_key(&n)).await? {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    let on = |k: &str| params.get(k).is_some_and(|v| v == "true");
    let mut s = session(&state, &who, &vhost).await?;
    s.call(AMQPClass::Queue(mq::AMQPMethod::Delete(mq::Delete {
        queue: short_string(&name, "the queue name")?,
        if_unused: on("if-unused"),
        if_empty: on("if-empty"),
        nowait: false,
    })))
    .await?;
    Ok(no_content())
}

/// `DELETE /api/queues/{vhost}/{name}/contents`: purge.
async fn purge_queue(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    in_vhost(&state, &vhost, |_| ()).await?;
    let mut s = session(&state, &who, &vhost).await?;
    s.call(AMQPClass::Queue(mq::AMQPMethod::Purge(mq::Purge {
        queue: short_string(&name, "the queue name")?,
        nowait: false,
    })))
    .await?;
    Ok(no_content())
}

/// `PUT /api/exchanges/{vhost}/{name}`.
async fn put_exchange(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let m = body_json(&body)?;
    let kind = string(&m, "type")?.unwrap_or_else(|| "direct".into());
    // RabbitMQ's defaults for a bare `{}`: transient, not auto-delete.
    let durable = flag(&m, "durable", false)?;
    let auto_delete = flag(&m, "auto_delete", false)?;
    let internal = flag(&m, "internal", false)?;
    let arguments = arguments(&m)?;
    let name = exchange_name(name);
    let n = name.clone();
    let existed = in_vhost(&state, &vhost, move |v| v.exchanges.contains_key(&n)).await?;
    let mut s = session(&state, &who, &vhost).await?;
    s.call(AMQPClass::Exchange(mx::AMQPMethod::Declare(mx::Declare {
        exchange: short_string(&name, "the exchange name")?,
        kind: short_string(&kind, "the exchange type")?,
        passive: false,
        durable,
        auto_delete,
        internal,
        nowait: false,
        arguments,
    })))
    .await?;
    Ok(created_or_not(existed))
}

/// `DELETE /api/exchanges/{vhost}/{name}` with `if-unused`.
async fn delete_exchange(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    UrlQuery(params): UrlQuery<HashMap<String, String>>,
    headers: HeaderMap,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let name = exchange_name(name);
    let n = name.clone();
    if !in_vhost(&state, &vhost, move |v| v.exchanges.contains_key(&n)).await? {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    let mut s = session(&state, &who, &vhost).await?;
    s.call(AMQPClass::Exchange(mx::AMQPMethod::Delete(mx::Delete {
        exchange: short_string(&name, "the exchange name")?,
        if_unused: params.get("if-unused").is_some_and(|v| v == "true"),
        nowait: false,
    })))
    .await?;
    Ok(no_content())
}

fn destination(kind: &str, dest: String) -> Result<Destination, WriteError> {
    match kind {
        "q" => Ok(Destination::Queue(dest)),
        "e" => Ok(Destination::Exchange(exchange_name(dest))),
        _ => Err(WriteError::Api(ApiError::NotFound)),
    }
}

fn bind_method(
    source: &str,
    dest: &Destination,
    key: &str,
    args: FieldTable,
    add: bool,
) -> Result<AMQPClass, WriteError> {
    let source = short_string(source, "the source exchange name")?;
    let key = short_string(key, "the routing key")?;
    let name = |d: &str| short_string(d, "the destination name");
    Ok(match (dest, add) {
        (Destination::Queue(q), true) => AMQPClass::Queue(mq::AMQPMethod::Bind(mq::Bind {
            queue: name(q)?,
            exchange: source,
            routing_key: key,
            nowait: false,
            arguments: args,
        })),
        (Destination::Queue(q), false) => AMQPClass::Queue(mq::AMQPMethod::Unbind(mq::Unbind {
            queue: name(q)?,
            exchange: source,
            routing_key: key,
            arguments: args,
        })),
        (Destination::Exchange(x), true) => AMQPClass::Exchange(mx::AMQPMethod::Bind(mx::Bind {
            destination: name(x)?,
            source,
            routing_key: key,
            nowait: false,
            arguments: args,
        })),
        (Destination::Exchange(x), false) => {
            AMQPClass::Exchange(mx::AMQPMethod::Unbind(mx::Unbind {
                destination: name(x)?,
                source,
                routing_key: key,
                nowait: false,
                arguments: args,
            }))
        }
    })
}

/// `POST /api/bindings/{vhost}/e/{source}/{q|e}/{dest}`: 201 with the new
/// binding's URL (ending in its properties key) in `Location`.
async fn create_binding(
    State(state): State<AppState>,
    Path((vhost, source, kind, dest)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let m = body_json(&body)?;
    let key = string(&m, "routing_key")?.unwrap_or_default();
    let args = arguments(&m)?;
    let source = exchange_name(source);
    let dest = destination(&kind, dest)?;
    let (s_name, d) = (source.clone(), dest.clone());
    let both = in_vhost(&state, &vhost, move |v| {
        v.exchanges.contains_key(&s_name)
            && match &d {
                Destination::Queue(q) => v.queues.contains_key(q),
                Destination::Exchange(x) => v.exchanges.contains_key(x),
            }
    })
    .await?;
    if !both {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    let props = properties_key(&key, &args);
    let mut s = session(&state, &who, &vhost).await?;
    s.call(bind_method(&source, &dest, &key, args, true)?)
        .await?;
    let dest_name = match &dest {
        Destination::Queue(q) | Destination::Exchange(q) => q.clone(),
    };
    let location = format!(
        "/api/bindings/{}/e/{}/{kind}/{}/{props}",
        url_segment(&vhost),
        url_segment(if source.is_empty() {
            "amq.default"
        } else {
            &source
        }),
        url_segment(&dest_name),
    );
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

/// Percent-encode one URL path segment.
fn url_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{dest}/{props}`.
async fn delete_binding(
    State(state): State<AppState>,
    Path((vhost, source, kind, dest, props)): Path<(String, String, String, String, String)>,
    headers: HeaderMap,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let source = exchange_name(source);
    let dest = destination(&kind, dest)?;
    let (s_name, d) = (source.clone(), dest.clone());
    let found = in_vhost(&state, &vhost, move |v| {
        v.exchanges.get(&s_name).and_then(|x| {
            x.bindings
                .iter()
                .find(|b| {
                    b.destination == d && properties_key(&b.routing_key, &b.arguments) == props
                })
                .map(|b| (b.routing_key.clone(), b.arguments.clone()))
        })
    })
    .await?;
    let Some((key, args)) = found else {
        return Err(WriteError::Api(ApiError::NotFound));
    };
    let mut s = session(&state, &who, &vhost).await?;
    s.call(bind_method(&source, &dest, &key, args, false)?)
        .await?;
    Ok(no_content())
}

/// `DELETE /api/connections/{name}`: close a client's connection with 320
/// CONNECTION_FORCED and the `X-Reason` header's text ("Closed via
/// management plugin" without one), as RabbitMQ does. A user may close its
/// own connections; administrators any.
async fn close_connection(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> WriteResult {
    let who = caller(&state, &headers, Access::Management)?;
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin")
        .to_string();
    let found = query(&state, move |view| {
        view.master.and_then(|m| {
            m.sessions()
                .filter(|(id, _)| !super::internal::is_internal(*id))
                .find(|(_, s)| super::json::connection_name(s.info.peer, s.info.local) == name)
                .map(|(id, s)| (id, s.user.clone()))
        })
    })
    .await?;
    let Some((conn, owner)) = found else {
        return Err(WriteError::Api(ApiError::NotFound));
    };
    if who.access < Access::Administrator && who.name != owner {
        return Err(WriteError::NotAuthorised(
            "User not authorised to access object".into(),
        ));
    }
    state
        .master
        .send(crate::server::MasterMsg::Input(
            crate::master::inout::Input::ForceClose { conn, reason },
        ))
        .await
        .map_err(|_| WriteError::Api(ApiError::Unavailable("the broker is stopping")))?;
    Ok(no_content())
}
