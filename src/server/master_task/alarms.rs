//! Resource alarms (memory, disk), as RabbitMQ's: while one lasts,
//! publishers are blocked (connection.blocked). The disk alarm is
//! cluster-wide: a peer low on disk blocks this node's publishers too
//! (`peer_alarms.rs`).

use super::peer_alarms::PeerAlarms;
use crate::config::Config;
use std::path::PathBuf;
use std::sync::Arc;

/// The alarms are checked every this many master ticks (1 s)...
const GAUGE_TICKS: u32 = 20;
/// ...and every this many (100 ms, RabbitMQ's fastest disk check) while an
/// alarm is on or the disk's free space is within `NEAR` times its limit,
/// so a fast writer cannot fill the last of the disk between two checks.
const NEAR_TICKS: u32 = 2;
/// How close to the disk limit counts as near (free < NEAR x limit).
const NEAR: u64 = 4;

/// Ticks until the next check, after one that found `free` bytes free on
/// the data dir's filesystem (None: unknown) with the disk limit `limit`.
fn next_check(free: Option<u64>, limit: u64, alarm: bool) -> u32 {
    let near = free.is_some_and(|f| f < limit.saturating_mul(NEAR));
    match alarm || near {
        true => NEAR_TICKS - 1,
        false => GAUGE_TICKS - 1,
    }
}

/// The alarm state and when to look again.
pub(super) struct Alarms {
    config: Arc<Config>,
    /// The directory whose filesystem's free space counts.
    data_dir: PathBuf,
    /// The memory high watermark (bytes), before the runtime override.
    memory_limit: u64,
    /// Ticks until the next check.
    ticks_left: u32,
    /// The active alarm, with RabbitMQ's reason text.
    current: Option<String>,
    /// The other nodes' disk alarms (a cluster with a cookie).
    peers: PeerAlarms,
}

impl Alarms {
    /// No alarm yet; the first tick checks.
    pub(super) fn new(config: Arc<Config>, data_dir: PathBuf) -> Alarms {
        let memory_limit = config.memory_high_watermark_bytes.unwrap_or_else(|| {
            crate::metrics::total_memory_bytes().map_or(u64::MAX, |t| t / 10 * 4)
        });
        let peers = match &config.cluster {
            Some(c) => match c.cookie() {
                Ok(Some(cookie)) => {
                    let others = c
                        .nodes
                        .iter()
                        .filter(|n| n.id != c.node)
                        .filter_map(|n| n.management_addr.map(|a| (n.id, a)))
                        .collect();
                    PeerAlarms::watch(others, cookie)
                }
                _ => PeerAlarms::none(),
            },
            None => PeerAlarms::none(),
        };
        Alarms {
            config,
            data_dir,
            memory_limit,
            ticks_left: 0,
            current: None,
            peers,
        }
    }

    /// The active alarm.
    pub(super) fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// One master tick: every [`GAUGE_TICKS`]-th (and the first) checks.
    /// Returns the new state when it changed.
    pub(super) fn on_tick(&mut self) -> Option<Option<String>> {
        if self.ticks_left > 0 {
            self.ticks_left -= 1;
            return None;
        }
        let limit = crate::management::alarms::effective_limit(self.memory_limit);
        let (mut now, free) = check(&self.config, &self.data_dir, limit);
        let peers_low = self.peers.low_on_disk();
        if now.is_none() && !peers_low.is_empty() {
            // RabbitMQ's reason is the same whichever node is low.
            now = Some("low on disk".into());
        }
        self.ticks_left = next_check(free, self.config.disk_free_limit_bytes, now.is_some());
        if now == self.current {
            return None;
        }
        match &now {
            Some(r) if peers_low.is_empty() => {
                tracing::warn!("resource alarm: {r}; blocking publishers")
            }
            Some(r) => tracing::warn!(
                nodes = ?peers_low,
                "resource alarm on another node: {r}; blocking publishers"
            ),
            None => tracing::info!("resource alarm cleared"),
        }
        self.current = now.clone();
        Some(now)
    }
}

/// The active resource alarm, if any, with RabbitMQ's reason text, and the
/// free bytes of the data dir's filesystem.
fn check(
    config: &Config,
    data_dir: &std::path::Path,
    memory_limit: u64,
) -> (Option<String>, Option<u64>) {
    let rss = crate::metrics::resident_memory_bytes();
    let free = crate::metrics::disk_free_bytes(data_dir);
    let memory = rss > memory_limit;
    let disk = free.is_some_and(|f| f < config.disk_free_limit_bytes);
    // The Prometheus endpoint reports the decision made here.
    crate::metrics::set_alarm_state(memory_limit, memory, disk);
    let alarm = if memory {
        Some("low on memory".into())
    } else if disk {
        Some("low on disk".into())
    } else {
        None
    };
    (alarm, free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_is_checked_ten_times_a_second_near_its_limit_or_in_alarm() {
        const MIB: u64 = 1 << 20;
        assert_eq!(
            next_check(Some(1000 * MIB), 50 * MIB, false),
            GAUGE_TICKS - 1
        );
        assert_eq!(next_check(Some(199 * MIB), 50 * MIB, false), NEAR_TICKS - 1);
        assert_eq!(next_check(Some(1000 * MIB), 50 * MIB, true), NEAR_TICKS - 1);
        assert_eq!(next_check(None, 50 * MIB, false), GAUGE_TICKS - 1);
        // A limit of 0 (the alarm off) is never near.
        assert_eq!(next_check(Some(0), 0, false), GAUGE_TICKS - 1);
    }
}
