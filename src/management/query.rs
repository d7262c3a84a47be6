//! Reading broker state from the master task.
//!
//! The master task owns the broker state and changes it one input at a time,
//! so a handler hands it a closure ([`Query`]) through the same queue as every
//! other input. The task runs the closure between two inputs: the closure sees
//! one consistent state, with no lock anywhere. Closures run on the broker's
//! hot path, so they copy only what the answer needs (names, counters,
//! argument tables) and leave JSON building to the HTTP task.

use super::{ApiError, AppState};
use crate::broker::Broker;
use crate::master::Master;
use crate::server::MasterMsg;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a handler waits for the master task: it may be queued behind a
/// burst of publishes, but an operator's tool should get an answer (503)
/// rather than hang.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// What a query sees: the master task's state between two inputs.
pub struct CoreView<'a> {
    /// The replicated broker state (a replica's on a slave).
    pub broker: &'a Broker,
    /// Sessions, channels and consumers, while this node is the master.
    pub master: Option<&'a Master>,
    /// The active resource alarm, if any ("low on memory", "low on disk").
    pub alarm: Option<&'a str>,
}

/// A read of the master task's state, run inside the task.
pub type Query = Box<dyn FnOnce(CoreView<'_>) + Send>;

/// Run `f` on the master task and return its result.
pub async fn query<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce(CoreView<'_>) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    let q: Query = Box::new(move |view| {
        // The handler may have given up (timeout); nothing to do then.
        let _ = tx.send(f(view));
    });
    let gone = ApiError::Unavailable("this node runs no broker, or it is stopping");
    let busy = ApiError::Unavailable("the broker did not answer in time");
    match tokio::time::timeout(QUERY_TIMEOUT, state.master.send(MasterMsg::Query(q))).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err(gone),
        Err(_) => return Err(busy),
    }
    match tokio::time::timeout(QUERY_TIMEOUT, rx).await {
        Ok(Ok(v)) => Ok(v),
        // The task dropped the closure unrun: it stopped.
        Ok(Err(_)) => Err(gone),
        Err(_) => Err(busy),
    }
}
