//! `stablemq perf` end to end: the real binary's load generator against a real
//! broker, with confirms and manual acks. Counts and the shape of the JSON
//! result are checked; speed is not (benchmarks are not tests).

use std::process::Command;
use std::time::{Duration, Instant};

use compat_tests::{Broker, binary_path};

/// The number after `"key":` in `json` (the first occurrence).
fn number(json: &str, key: &str) -> f64 {
    let pat = format!("\"{key}\":");
    let at = json
        .find(&pat)
        .unwrap_or_else(|| panic!("{key} missing in {json}"))
        + pat.len();
    let rest = &json[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {json}"))
}

/// The `{...}` object after `"key":` (flat objects only).
fn object<'a>(json: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":{{");
    let at = json
        .find(&pat)
        .unwrap_or_else(|| panic!("{key} missing or null in {json}"))
        + pat.len()
        - 1;
    let end = json[at..].find('}').expect("object closes") + at + 1;
    &json[at..end]
}

fn check_latency(json: &str, key: &str, count: f64) {
    let l = object(json, key);
    let (p50, p99, p999, max) = (
        number(l, "p50"),
        number(l, "p99"),
        number(l, "p999"),
        number(l, "max"),
    );
    assert_eq!(number(l, "count"), count, "{key}: {l}");
    assert!(p50 <= p99 && p99 <= p999 && p999 <= max, "{key}: {l}");
    // Microseconds: below an hour, even on the slowest machine.
    assert!(max < 3.6e9, "{key}: {l}");
    assert!(number(l, "mean") <= max, "{key}: {l}");
}

#[test]
fn perf_publishes_confirms_and_consumes_every_message() {
    let broker = Broker::start();
    let started = Instant::now();
    let out = Command::new(binary_path())
        .args([
            "perf",
            "--uri",
            &broker.uri(),
            "-x",
            "1",
            "-y",
            "1",
            "-s",
            "128",
        ])
        .args(["-c", "100", "-C", "2000", "-u", "perf-smoke", "--json"])
        .args(["--timeout", "120"])
        .output()
        .expect("run stablemq perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "perf failed ({:?}): {stdout}\n{stderr}",
        out.status
    );
    assert!(started.elapsed() < Duration::from_secs(130));
    let json = stdout.trim();
    assert!(
        json.starts_with('{') && json.ends_with('}') && !json.contains('\n'),
        "one JSON object expected: {json}"
    );
    assert_eq!(number(json, "published"), 2000.0, "{json}");
    assert_eq!(number(json, "confirmed"), 2000.0, "{json}");
    assert_eq!(number(json, "nacked"), 0.0, "{json}");
    assert_eq!(number(json, "consumed"), 2000.0, "{json}");
    assert!(json.contains("\"timed_out\":false"), "{json}");
    assert!(json.contains("\"errors\":[]"), "{json}");
    for rate in ["publish_rate", "confirm_rate", "consume_rate"] {
        assert!(number(json, rate) > 0.0, "{rate}: {json}");
    }
    check_latency(json, "confirm_latency_us", 2000.0);
    check_latency(json, "e2e_latency_us", 2000.0);
    let cpu = object(json, "cpu");
    assert!(number(cpu, "total_s") >= 0.0, "{cpu}");
}

#[test]
fn perf_spreads_producers_and_consumers_over_several_queues() {
    let broker = Broker::start();
    // 2 producers over 5 queues (3 and 2 each), 3 consumers (2, 2 and 1 each).
    let out = Command::new(binary_path())
        .args(["perf", "--uri", &broker.uri(), "-x", "2", "-y", "3"])
        .args([
            "--queues",
            "5",
            "-u",
            "perf-multi",
            "-C",
            "1000",
            "-c",
            "50",
        ])
        .args(["-q", "20", "--multi-ack-every", "5", "--json"])
        .args(["--timeout", "120"])
        .output()
        .expect("run stablemq perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "perf failed ({:?}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let json = stdout.trim();
    assert_eq!(number(json, "queues"), 5.0, "{json}");
    assert_eq!(number(json, "published"), 2000.0, "{json}");
    assert_eq!(number(json, "confirmed"), 2000.0, "{json}");
    assert_eq!(number(json, "consumed"), 2000.0, "{json}");
    assert!(json.contains("\"errors\":[]"), "{json}");
}

#[test]
fn perf_refuses_bad_flags_with_exit_code_2() {
    let out = Command::new(binary_path())
        .args(["perf", "-x", "0", "-y", "0"])
        .output()
        .expect("run stablemq perf");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to do"));
}
