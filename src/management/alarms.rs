//! `GET`/`PUT /api/stablemq/vm-memory-high-watermark`: read or change the
//! memory alarm threshold of this node while it runs, as `rabbitmqctl
//! set_vm_memory_high_watermark` does for RabbitMQ (which offers it only
//! through its Erlang CLI, hence an endpoint of StableMQ's own).
//!
//! The threshold lives in a process-wide atomic rather than in the master
//! task's state: one `stablemq serve` process runs one master task, the
//! master task only reads it once a second when it checks alarms, and an
//! atomic keeps that task's code unchanged but for one call. Like RabbitMQ's
//! command, the change lasts until the node restarts; the config file's
//! `memory_high_watermark_bytes` (or 40% of RAM) applies again after that.

use super::{Access, ApiError, AppState, caller};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

/// The threshold set through the API, in bytes; 0 means none was set and the
/// configured one applies. (A limit of 0 bytes is stored as 1: it blocks
/// publishers all the same.)
static OVERRIDE_BYTES: AtomicU64 = AtomicU64::new(0);

/// The memory limit the master task should use now: the one set through the
/// API if any, else `configured`.
pub fn effective_limit(configured: u64) -> u64 {
    match OVERRIDE_BYTES.load(Ordering::Relaxed) {
        0 => configured,
        n => n,
    }
}

/// Set the threshold (bytes); the master task picks it up within a second.
pub fn set_limit(bytes: u64) {
    OVERRIDE_BYTES.store(bytes.max(1), Ordering::Relaxed);
}

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/api/stablemq/vm-memory-high-watermark",
        get(current).put(change),
    )
}

/// A new threshold: a fraction of total memory or a number of bytes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Watermark {
    fraction: Option<f64>,
    absolute: Option<u64>,
}

/// Bytes for a request body, or why it cannot be applied.
pub(super) fn limit_of(w: &Watermark, total: Option<u64>) -> Result<u64, String> {
    match (w.fraction, w.absolute) {
        (Some(f), None) => {
            if !f.is_finite() || f < 0.0 {
                return Err(format!("fraction must be 0 or more, not {f}"));
            }
            let total = total.ok_or("total memory is unknown here; give absolute bytes")?;
            // f64 has 53 bits of mantissa: exact enough for memory sizes.
            Ok((total as f64 * f) as u64)
        }
        (None, Some(bytes)) => Ok(bytes),
        _ => Err("give exactly one of {\"fraction\": f} or {\"absolute\": bytes}".into()),
    }
}

async fn change(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let w: Watermark = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "expected {{\"fraction\": f}} or {{\"absolute\": bytes}}: {e}"
        ))
    })?;
    let bytes = limit_of(&w, crate::metrics::total_memory_bytes()).map_err(ApiError::BadRequest)?;
    set_limit(bytes);
    tracing::info!("memory high watermark set to {bytes} bytes through the management API");
    Ok(StatusCode::NO_CONTENT)
}

async fn current(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Monitoring)?;
    let set = OVERRIDE_BYTES.load(Ordering::Relaxed);
    Ok(Json(json!({
        "limit_bytes": (set != 0).then_some(set),
        "source": if set != 0 { "api" } else { "config" },
        "total_memory_bytes": crate::metrics::total_memory_bytes(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_or_bytes_but_not_both() {
        let w = |fraction, absolute| Watermark { fraction, absolute };
        assert_eq!(limit_of(&w(Some(0.5), None), Some(1000)), Ok(500));
        assert_eq!(limit_of(&w(None, Some(123)), None), Ok(123));
        assert!(limit_of(&w(Some(0.5), None), None).is_err());
        assert!(limit_of(&w(Some(-1.0), None), Some(1000)).is_err());
        assert!(limit_of(&w(Some(f64::NAN), None), Some(1000)).is_err());
        assert!(limit_of(&w(Some(0.5), Some(1)), Some(1000)).is_err());
        assert!(limit_of(&w(None, None), Some(1000)).is_err());
    }
}
