//! `message_stats` in RabbitMQ's shape: each counter with a `_details`
//! object holding its rate per second.
//!
//! The counters are the master's ([`crate::master::stats`]). Rates are
//! derived here from two readings of a counter at least a second apart,
//! kept per object and counter in a small table, so an API poller sees the
//! rate of the last few seconds as RabbitMQ's default sampling shows it.

use crate::master::Master;
use crate::master::stats::Counters;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Readings older than this are replaced, so a rate covers recent seconds.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Bound on remembered readings (deleted objects leave theirs behind).
const SAMPLES_MAX: usize = 100_000;

/// One reading of a counter: its value, when it was read, the last rate.
type Reading = (u64, Instant, f64);

/// Readings by "kind/vhost/name/counter".
static SAMPLES: Mutex<Option<HashMap<String, Reading>>> = Mutex::new(None);

/// The rate per second of counter `key` now reading `count`, from the last
/// reading at least a second old (0 on the first reading).
pub(super) fn rate(key: String, count: u64) -> f64 {
    let now = Instant::now();
    let Ok(mut guard) = SAMPLES.lock() else {
        return 0.0;
    };
    let map = guard.get_or_insert_with(HashMap::new);
    if map.len() > SAMPLES_MAX {
        map.clear();
    }
    match map.get(&key).copied() {
        None => {
            map.insert(key, (count, now, 0.0));
            0.0
        }
        Some((before, at, last)) => {
            let dt = now.duration_since(at);
            if dt < SAMPLE_EVERY {
                return last;
            }
            let r = count.saturating_sub(before) as f64 / dt.as_secs_f64();
            map.insert(key, (count, now, r));
            r
        }
    }
}

/// The counters named in `fields` as RabbitMQ's `message_stats` object.
fn render(prefix: &str, c: &Counters, fields: &[&str]) -> Value {
    let mut m = Map::new();
    for f in fields {
        let n = match *f {
            "publish" => c.publish,
            "publish_in" => c.publish_in,
            "publish_out" => c.publish_out,
            "deliver" => c.deliver,
            "deliver_no_ack" => c.deliver_no_ack,
            "get" => c.get,
            "get_no_ack" => c.get_no_ack,
            "deliver_get" => c.deliver_get,
            "redeliver" => c.redeliver,
            "ack" => c.ack,
            "confirm" => c.confirm,
            "return_unroutable" => c.return_unroutable,
            _ => continue,
        };
        m.insert((*f).to_string(), json!(n));
        let r = rate(format!("{prefix}/{f}"), n);
        m.insert(format!("{f}_details"), json!({ "rate": r }));
    }
    Value::Object(m)
}

const QUEUE_FIELDS: &[&str] = &[
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "deliver_get",
    "redeliver",
    "ack",
];

const OVERVIEW_FIELDS: &[&str] = &[
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "deliver_get",
    "redeliver",
    "ack",
    "confirm",
    "return_unroutable",
];

/// A queue's `message_stats`, if it has seen traffic.
pub fn queue(master: Option<&Master>, vhost: &str, name: &str) -> Option<Value> {
    let c = master?.stats().queue_counters(vhost, name)?;
    Some(render(&format!("q/{vhost}/{name}"), c, QUEUE_FIELDS))
}

/// An exchange's `message_stats`, if it has seen traffic.
pub fn exchange(master: Option<&Master>, vhost: &str, name: &str) -> Option<Value> {
    let c = master?.stats().exchange_counters(vhost, name)?;
    Some(render(
        &format!("x/{vhost}/{name}"),
        c,
        &["publish_in", "publish_out"],
    ))
}

/// The node's `message_stats` for `/api/overview` (empty on a slave).
pub fn overview(master: Option<&Master>) -> Value {
    match master {
        Some(m) => render("overview", &m.stats().global, OVERVIEW_FIELDS),
        None => json!({}),
    }
}
