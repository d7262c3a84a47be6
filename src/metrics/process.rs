//! Facts about this process and its host that the Prometheus endpoint and the
//! management API report: memory, file descriptors, sockets, disk, uptime.
//!
//! They are read from /proc and libc at the moment they are asked for, so a
//! scrape always sees the current value rather than one cached by a timer.

use std::sync::OnceLock;
use std::time::Instant;

/// This node's name, RabbitMQ style: `stablemq@host` for the single node,
/// `stablemq-N@host` for cluster node N (several may share a host).
pub fn node_name(cluster_node: Option<u64>) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into());
    match cluster_node {
        None => format!("stablemq@{host}"),
        Some(id) => format!("stablemq-{id}@{host}"),
    }
}

/// Resident set size of this process in bytes, from /proc (0 where unavailable).
#[allow(unsafe_code, reason = "libc has no safe wrapper for this call")]
pub fn resident_memory_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Total memory of the machine in bytes, from /proc/meminfo (None where unavailable).
pub fn total_memory_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Free bytes on the filesystem holding `path` (None where unavailable).
#[allow(unsafe_code, reason = "libc has no safe wrapper for this call")]
pub fn disk_free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Open file descriptors, and how many of them are sockets (the process's
/// TCP listeners and connections, plus the few Unix sockets tokio keeps).
pub fn open_fds() -> Option<(u64, u64)> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    let (mut fds, mut sockets) = (0u64, 0u64);
    for entry in dir.flatten() {
        fds += 1;
        if std::fs::read_link(entry.path())
            .is_ok_and(|t| t.as_os_str().to_string_lossy().starts_with("socket:"))
        {
            sockets += 1;
        }
    }
    // The directory handle read_dir held is one of them.
    Some((fds.saturating_sub(1), sockets))
}

/// The soft limit on open file descriptors (RLIMIT_NOFILE).
#[allow(unsafe_code, reason = "libc has no safe wrapper for this call")]
pub fn max_fds() -> Option<u64> {
    // SAFETY: getrlimit writes into the struct we own.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// When the process started, as near as we can tell: the first call, which
/// `serve` makes before anything else.
pub fn started() -> Instant {
    static STARTED: OnceLock<Instant> = OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// Seconds since [`started`].
pub fn uptime_seconds() -> f64 {
    started().elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_facts_are_plausible() {
        assert!(resident_memory_bytes() > 0);
        let (fds, sockets) = open_fds().expect("/proc/self/fd");
        assert!(fds >= 3, "stdin, stdout and stderr at least: {fds}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let (_, with_listener) = open_fds().expect("/proc/self/fd");
        assert!(
            with_listener >= 1,
            "the listener is a socket: {sockets} before, {with_listener} with it"
        );
        drop(listener);
        assert!(max_fds().is_none_or(|m| m >= fds));
        assert!(disk_free_bytes(std::path::Path::new("/")).is_some());
    }
}
