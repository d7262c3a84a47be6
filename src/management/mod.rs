//! The management HTTP API (RabbitMQ's port 15672), over axum.
//!
//! It answers in the JSON shapes of RabbitMQ 3.10's management plugin, so that
//! rabbitmqadmin, exporters and test helpers written for RabbitMQ work
//! unchanged. So far it is the read side: overview, health checks, vhosts,
//! users, permissions, queues, exchanges, bindings, connections, channels,
//! consumers and the definitions export, plus `GET /api/nodes` (each node's
//! role and replication progress).
//!
//! Broker state is owned by the master task, so a handler never reads it
//! directly: it sends a closure to the master task (`query::query`), which
//! runs it between two inputs and so sees one consistent state without locks.
//! The closure only copies what the answer needs (never message bodies); the
//! JSON is built back on the HTTP task.
//!
//! Requests use HTTP basic auth with the broker's users, and the user's tags
//! decide what it may read, as in RabbitMQ ([`Access`]).

mod access;
pub mod alarms;
mod bindings;
pub mod definitions;
mod forward;
/// The management bodies' and definitions' fuzz targets; see [`crate::fuzz`].
pub(crate) mod fuzz;
pub mod internal;
mod json;
mod messages;
pub mod node_proof;
mod nodes;
mod objects;
mod overview;
mod paging;
mod parameters;
mod policies;
mod query;
mod sessions;
mod stats;
mod stream_api;
mod stream_replicas;
mod tls;
mod ui;
mod user_limits;
mod users_api;
mod writes;

pub use nodes::{NodeReport, NodeStatusSource, Peer, StoreReport};
pub use query::{CoreView, Query};

use crate::config::Config;
use crate::server::MasterMsg;
use crate::users::{AccessTable, User};
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The version of RabbitMQ whose management API this one imitates; tools
/// read `rabbitmq_version` to decide which fields and endpoints to expect.
pub const RABBITMQ_COMPAT_VERSION: &str = "3.10.0";

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    /// Users and tags.
    pub config: Arc<Config>,
    /// This node's and its peers' status.
    pub nodes: Arc<NodeStatusSource>,
    /// The master task's input: queries of broker state go through it, in
    /// line with every other input, so they see a consistent state.
    pub(crate) master: mpsc::Sender<MasterMsg>,
    /// What this node listens on, for the overview and the port-listener
    /// health check.
    pub listeners: Listeners,
    /// The master task's latest users and permissions (replicated state):
    /// logins and the user, permission and definitions endpoints read it.
    pub users: crate::users::Snapshot,
    /// The config's users, for a node whose table is still empty: a
    /// store-only node (no broker state at all) or a slave whose replica
    /// has not received the first master's seed yet.
    seed: Arc<crate::users::AccessTable>,
}

impl AppState {
    /// State for a node whose master task reads `master`.
    pub(crate) fn new(
        config: Arc<Config>,
        nodes: NodeStatusSource,
        master: mpsc::Sender<MasterMsg>,
        listeners: Listeners,
        users: crate::users::Snapshot,
    ) -> AppState {
        AppState {
            seed: Arc::new(crate::users::table_from_config(&config)),
            config,
            nodes: Arc::new(nodes),
            master,
            listeners,
            users,
        }
    }

    /// The access table as of now.
    pub fn access(&self) -> Arc<crate::users::AccessTable> {
        let t = self.users.borrow().clone();
        if t.initialized { t } else { self.seed.clone() }
    }

    /// This node's name, RabbitMQ style.
    pub fn node(&self) -> &str {
        &self.nodes.me.name
    }
}

/// A socket this node listens on.
#[derive(Debug, Clone)]
pub struct Listener {
    /// RabbitMQ's protocol name: `amqp`, `http`, `http/prometheus`,
    /// `stream`, `stream/ssl`.
    pub protocol: &'static str,
    /// Address and port.
    pub addr: SocketAddr,
}

/// What a node listens on, as its listeners are bound: the management API
/// lists them while the node starts the rest (the stream listener on its
/// default port is skipped when that port is taken, so it is listed only
/// once bound).
#[derive(Debug, Clone, Default)]
pub struct Listeners(Arc<std::sync::RwLock<Vec<Listener>>>);

impl Listeners {
    /// One more listener.
    pub fn push(&self, l: Listener) {
        if let Ok(mut v) = self.0.write() {
            v.push(l);
        }
    }

    /// Every listener so far.
    pub fn all(&self) -> Vec<Listener> {
        self.0.read().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Bind `addr` and serve until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    state: AppState,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!("management API listening on {addr}");
    Ok(tokio::spawn(run_api(listener, state, "management API")))
}

/// Bind `addr` and serve the same API over HTTPS with the node's client
/// certificate, until the task is aborted.
pub async fn serve_https(
    addr: SocketAddr,
    state: AppState,
    tls: Arc<crate::tls::ServerTls>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tls::HttpsListener::bind(addr, tls).await?;
    tracing::info!("management API listening on {addr} (HTTPS)");
    Ok(tokio::spawn(run_api(
        listener,
        state,
        "management API (HTTPS)",
    )))
}

/// Serve the API on `listener` until the task is aborted.
async fn run_api<L>(listener: L, state: AppState, what: &'static str)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    // Writes that reach a slave are passed on to the master (`forward`).
    let forward = axum::middleware::from_fn_with_state(state.clone(), forward::writes_to_master);
    let app = router()
        .layer(axum::middleware::from_fn(paging::paginate))
        .layer(forward)
        .with_state(state);
    // In front of the router, so the rewritten path is the one routed.
    let app = tower_layer::Layer::layer(&axum::middleware::from_fn(trim_trailing_slash), app);
    let app = axum::ServiceExt::<axum::extract::Request>::into_make_service(app);
    if let Err(err) = axum::serve(listener, app).await {
        tracing::error!("{what} stopped: {err}");
    }
}

/// `/api/connections/` is `/api/connections`: RabbitMQ's router ignores a
/// trailing slash, and clients rely on it (amqp091-go's test helpers list
/// connections with `GET /api/connections/`).
async fn trim_trailing_slash(
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/');
        let rebuilt = match req.uri().query() {
            Some(q) => format!("{trimmed}?{q}"),
            None => trimmed.to_string(),
        };
        if let Ok(uri) = rebuilt.parse() {
            *req.uri_mut() = uri;
        }
    }
    next.run(req).await
}

/// Every route. Vhost names arrive URL-encoded (`%2F` for `/`) and axum's
/// `Path` decodes them.
fn router() -> Router<AppState> {
    Router::new()
        .route("/api/nodes", get(nodes::list))
        .route("/api/nodes/{name}", get(nodes::one))
        .route("/api/nodes/{name}/memory", get(nodes::memory))
        .route("/api/stablemq/node-status", get(nodes::local))
        .merge(overview::routes())
        .merge(access::routes())
        .merge(objects::routes())
        .merge(bindings::routes())
        .merge(sessions::routes())
        .merge(stream_api::routes())
        .merge(alarms::routes())
        .merge(definitions::routes())
        .merge(writes::routes())
        .merge(messages::routes())
        .merge(policies::routes())
        .merge(parameters::routes())
        .merge(tls::routes())
        .merge(ui::routes())
        .merge(user_limits::routes())
        .fallback(|| async { ApiError::NotFound })
}

/// Why a request was refused, as RabbitMQ's API answers it.
#[derive(Debug)]
pub enum ApiError {
    /// No credentials, or wrong ones: 401 with a WWW-Authenticate challenge.
    Unauthorized,
    /// A known user whose tags do not allow this request: 401 with
    /// RabbitMQ's reason ("Not management user", ...).
    NotAuthorised(&'static str),
    /// 404.
    NotFound,
    /// A malformed request (a port that is not a number): 400.
    BadRequest(String),
    /// The broker state could not be read (a store-only node, a node
    /// shutting down, or a master too busy to answer in time): 503.
    Unavailable(&'static str),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let challenge = [(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"RabbitMQ Management\"",
        )];
        let body = |error: &str, reason: &str| {
            axum::Json(serde_json::json!({"error": error, "reason": reason}))
        };
        match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                challenge,
                body("not_authorized", "Login failed"),
            )
                .into_response(),
            ApiError::NotAuthorised(reason) => (
                StatusCode::UNAUTHORIZED,
                challenge,
                body("not_authorised", reason),
            )
                .into_response(),
            ApiError::NotFound => {
                (StatusCode::NOT_FOUND, body("Object Not Found", "Not Found")).into_response()
            }
            ApiError::BadRequest(reason) => {
                (StatusCode::BAD_REQUEST, body("bad_request", &reason)).into_response()
            }
            ApiError::Unavailable(reason) => (
                StatusCode::SERVICE_UNAVAILABLE,
                body("service_unavailable", reason),
            )
                .into_response(),
        }
    }
}

/// What a user's tags let it read, in RabbitMQ's order: each level sees
/// everything the one before it does. `policymaker` reads like `management`
/// (its extra rights are writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Its own connections and channels, and every vhost it may use (all of
    /// them, until permissions exist).
    Management,
    /// Every connection and channel, and node status.
    Monitoring,
    /// Users, permissions and definitions too.
    Administrator,
}

impl Access {
    /// The level a set of tags grants, if any.
    fn of(tags: &[String]) -> Option<Access> {
        let has = |t: &str| tags.iter().any(|x| x == t);
        if has("administrator") {
            Some(Access::Administrator)
        } else if has("monitoring") {
            Some(Access::Monitoring)
        } else if has("management") || has("policymaker") {
            Some(Access::Management)
        } else {
            None
        }
    }

    /// RabbitMQ's reason when a user lacks this level.
    fn refusal(self) -> &'static str {
        match self {
            Access::Management => "Not management user",
            Access::Monitoring => "Not monitor user",
            Access::Administrator => "Not administrator user",
        }
    }
}

/// The authenticated user of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// User name.
    pub name: String,
    /// Its tags, as configured.
    pub tags: Vec<String>,
    /// What the tags let it read.
    pub access: Access,
    /// The `Authorization` header, to forward to peers.
    pub authorization: String,
}

impl Caller {
    /// Whether this caller sees a vhost's queues, exchanges and bindings:
    /// administrators see every vhost, everyone else (monitoring users too)
    /// only the vhosts they may log in to. RabbitMQ 3.10 filters so, even
    /// though it lists every vhost to a monitoring user on /api/vhosts.
    pub fn sees_vhost(&self, access: &crate::users::AccessTable, vhost: &str) -> bool {
        self.access >= Access::Administrator || access.may_use_vhost(&self.name, vhost)
    }

    /// Whether this caller sees a connection (or its channels and consumers)
    /// owned by `user`: monitoring users see all of them, others their own.
    pub fn sees_user(&self, user: &str) -> bool {
        self.access >= Access::Monitoring || self.name == user
    }
}

/// Check basic auth against the replicated users and that the user's tags
/// reach `need`.
pub fn caller(state: &AppState, headers: &HeaderMap, need: Access) -> Result<Caller, ApiError> {
    caller_in(&state.access(), headers, need)
}

/// [`caller`] for a read of one vhost's objects (management tag at least): a
/// user below monitoring that may not use the vhost is refused with
/// RabbitMQ's 401, whether or not the vhost exists.
pub fn caller_for_vhost(
    state: &AppState,
    headers: &HeaderMap,
    vhost: &str,
) -> Result<Caller, ApiError> {
    let who = caller(state, headers, Access::Management)?;
    if who.sees_vhost(&state.access(), vhost) {
        Ok(who)
    } else {
        Err(ApiError::NotAuthorised(
            "User not authorised to access virtual host",
        ))
    }
}

/// [`caller`] against a given table.
fn caller_in(users: &AccessTable, headers: &HeaderMap, need: Access) -> Result<Caller, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(ApiError::Unauthorized)?;
    let user = check_basic(users, value).ok_or(ApiError::Unauthorized)?;
    let access =
        Access::of(&user.tags).ok_or(ApiError::NotAuthorised(Access::Management.refusal()))?;
    if access < need {
        return Err(ApiError::NotAuthorised(need.refusal()));
    }
    Ok(Caller {
        name: user.name.clone(),
        tags: user.tags.clone(),
        access,
        authorization: value.to_string(),
    })
}

/// The user a `Basic` header names, if the password matches its hash.
fn check_basic<'t>(users: &'t AccessTable, value: &str) -> Option<&'t User> {
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    let u = users.users.get(user)?;
    u.password_matches(password).then_some(u)
}

/// Check basic auth for node status (monitoring or administrator). Returns
/// the `Authorization` header to forward to peers.
pub fn authorize(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    caller(state, headers, Access::Monitoring).map(|c| c.authorization)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, pass: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let v = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        h.insert(
            header::AUTHORIZATION,
            format!("Basic {v}").parse().expect("header"),
        );
        h
    }

    fn config() -> AccessTable {
        let mut c = Config::default();
        for (name, tags) in [("mon", "monitoring"), ("mgmt", "management"), ("none", "")] {
            c.users.push(crate::config::UserConfig {
                name: name.into(),
                password: "pw".into(),
                tags: tags
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .map(Into::into)
                    .collect(),
            });
        }
        crate::users::table_from_config(&c)
    }

    #[test]
    fn tags_decide_what_a_user_reads() {
        let c = config();
        let admin = caller_in(&c, &basic("guest", "guest"), Access::Administrator).expect("admin");
        assert_eq!(admin.access, Access::Administrator);
        assert!(caller_in(&c, &basic("mon", "pw"), Access::Monitoring).is_ok());
        assert!(matches!(
            caller_in(&c, &basic("mon", "pw"), Access::Administrator),
            Err(ApiError::NotAuthorised("Not administrator user"))
        ));
        let m = caller_in(&c, &basic("mgmt", "pw"), Access::Management).expect("mgmt");
        assert!(m.sees_user("mgmt") && !m.sees_user("guest"));
        assert!(matches!(
            caller_in(&c, &basic("none", "pw"), Access::Management),
            Err(ApiError::NotAuthorised("Not management user"))
        ));
        assert!(matches!(
            caller_in(&c, &basic("guest", "nope"), Access::Management),
            Err(ApiError::Unauthorized)
        ));
        assert!(matches!(
            caller_in(&c, &HeaderMap::new(), Access::Management),
            Err(ApiError::Unauthorized)
        ));
    }
}
