//! What the tests read about a broker process and its files: resident
//! memory now and at its peak, and the bytes a directory holds.

use std::path::Path;

/// The process's resident memory now.
pub fn rss_bytes(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:") * 1024
}

/// The process's peak resident memory so far (VmHWM: the kernel's high-water
/// mark, so no sampling can miss a peak, including the one at boot).
pub fn peak_rss_bytes(pid: u32) -> u64 {
    status_kb(pid, "VmHWM:") * 1024
}

fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} line"));
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad {field} line: {line}"))
}

/// Bytes of the files directly in `path` (0 when it does not exist).
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Body number `seq` of `len` bytes (at least 8): the number, then
/// incompressible bytes derived from it, so a body read back proves which
/// message it is and that no byte changed.
pub fn numbered_body(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = seq.to_be_bytes().to_vec();
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len.max(8));
    out
}

/// The number of a [`numbered_body`].
pub fn number_of(body: &[u8]) -> u64 {
    let head: [u8; 8] = body
        .get(..8)
        .and_then(|h| h.try_into().ok())
        .expect("a numbered body has 8 bytes of number");
    u64::from_be_bytes(head)
}
