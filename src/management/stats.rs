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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// When a queue was last seen busy, by "vhost/name": its traffic count then
/// and the wall-clock time it was first seen at that count.
static ACTIVITY: Mutex<Option<HashMap<String, (u64, SystemTime)>>> = Mutex::new(None);

/// A queue's `idle_since`: the time its traffic count (publishes, deliveries,
/// gets, acks) was first seen at its present value, unless the count moved
/// since the previous reading (a busy queue has none, as in RabbitMQ). A
/// queue that has seen no traffic counts as idle since its first reading.
pub fn queue_idle_since(master: Option<&Master>, vhost: &str, name: &str) -> Option<String> {
    let master = master?;
    let count = master
        .stats()
        .queue_counters(vhost, name)
        .map_or(0, |c| c.publish + c.deliver_get + c.ack);
    let now = SystemTime::now();
    let mut guard = ACTIVITY.lock().ok()?;
    let map = guard.get_or_insert_with(HashMap::new);
    if map.len() > SAMPLES_MAX {
        map.clear();
    }
    let key = format!("{vhost}/{name}");
    match map.get(&key).copied() {
        Some((seen, since)) if seen == count => Some(utc_rfc3339_millis(since)),
        Some(_) => {
            map.insert(key, (count, now));
            None
        }
        None => {
            map.insert(key, (count, now));
            Some(utc_rfc3339_millis(now))
        }
    }
}

/// `2026-11-30T03:35:02.244+00:00`, RabbitMQ's format for `idle_since`.
fn utc_rfc3339_millis(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}+00:00",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Year, month, day of the proleptic Gregorian calendar for a count of days
/// since 1970-01-01 (eras of 400 years, each 146,097 days, starting in March
/// so the leap day falls last).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_since_is_rabbitmq_s_utc_format() {
        let at = |secs: u64, ms: u64| {
            utc_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(secs * 1000 + ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000+00:00");
        // `date -u -d @1796009702` = Mon Nov 30 03:35:02 UTC 2026
        assert_eq!(at(1_796_009_702, 244), "2026-11-30T03:35:02.244+00:00");
        // A leap day and the day after it.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000+00:00");
        assert_eq!(at(951_868_800, 5), "2000-03-01T00:00:00.005+00:00");
        assert_eq!(at(1_735_689_599, 999), "2024-12-31T23:59:59.999+00:00");
    }
}
