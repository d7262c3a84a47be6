//! The Prometheus endpoint (RabbitMQ's port 15692): `/metrics` and
//! `/metrics/per-object`.
//!
//! As in rabbitmq_prometheus, `/metrics` aggregates: queue depths are summed
//! over every queue and carry no queue label, so a scrape stays small however
//! many queues there are. `/metrics/per-object` gives one series per queue
//! (labels `vhost`, `queue`) and per channel. Both carry the same counters,
//! node facts and `rabbitmq_identity_info`, whose `rabbitmq_endpoint` label
//! says which one answered (as RabbitMQ 4 does; 3.10 dashboards ignore it).
//!
//! State gauges are computed at scrape time from the master task (a query
//! closure, like the management API's), so they are never stale and a
//! deleted queue's series disappears. A slave has no sessions and does not
//! own the queues, so it reports zero connections and no queues, and a
//! dashboard summing over nodes counts each queue once.
//!
//! `snapshot` copies the state out of the master task and reads the node
//! facts; [`render`] turns both into exposition text.

mod render;
mod snapshot;

pub use render::render;
pub use snapshot::{
    ChannelSample, ConnectionSample, NodeFacts, ProtocolSample, QueueSample, Snapshot,
};

use super::text::Exposition;
use crate::server::MasterMsg;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use snapshot::take_snapshot;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
/// How long a scrape waits for the master task before answering 503: a
/// scrape that hangs past Prometheus's own timeout helps nobody.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// What the endpoint needs to answer.
#[derive(Clone)]
pub struct EndpointState {
    /// The recorder holding the counters.
    pub recorder: PrometheusHandle,
    /// The master task's input, for the state query.
    pub master: mpsc::Sender<MasterMsg>,
    /// `rabbitmq_node`.
    pub node: String,
    /// `rabbitmq_cluster` while no cluster name is stored.
    pub cluster_name: String,
    /// Where the data lives (for free disk space).
    pub data_dir: PathBuf,
    /// The free disk alarm threshold.
    pub disk_free_limit: u64,
}

/// Bind `addr` and serve until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    state: EndpointState,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!("prometheus metrics on http://{addr}/metrics");
    let app = Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .with_state(Arc::new(state));
    Ok(tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!("prometheus endpoint stopped: {err}");
        }
    }))
}

async fn aggregated(State(state): State<Arc<EndpointState>>) -> Response {
    scrape(&state, false).await
}

async fn per_object(State(state): State<Arc<EndpointState>>) -> Response {
    scrape(&state, true).await
}

async fn scrape(state: &EndpointState, per_object: bool) -> Response {
    let snapshot = match take_snapshot(&state.master).await {
        Ok(s) => s,
        Err(()) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the broker did not answer in time\n",
            )
                .into_response();
        }
    };
    let node = NodeFacts::read(state, snapshot.cluster_name.clone());
    let mut e = Exposition::default();
    render(&mut e, &snapshot, &node, per_object);
    e.raw(&state.recorder.render());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        e.finish(),
    )
        .into_response()
}
