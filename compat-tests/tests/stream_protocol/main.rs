//! The RabbitMQ stream protocol on the stream port (`--stream-port`), driven
//! by the third-party client rstream: the cases of
//! `compat-tests/python/stream/stream_protocol.py`, each recorded against
//! RabbitMQ 3.10.8 with its stream plugin, and what a SIGKILL restart must
//! keep (entries at their offsets, stored consumer offsets, publisher
//! sequences).

use compat_tests::Broker;
use compat_tests::cluster::Cluster;
use compat_tests::common::python::{python, run_to_end};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run `python args...` to its end (at most `limit`); its stdout, and
/// whether it exited 0.
fn run(args: &[&str], limit: Duration) -> (bool, String) {
    let mut cmd = Command::new(python());
    cmd.args(args);
    run_to_end(cmd, limit)
}

/// Run the case script `python/stream/NAME` with `args` (at most `limit`):
/// it must exit 0 and print `checks` lines starting "ok ".
fn run_cases(name: &str, args: &[String], limit: Duration, checks: usize) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python/stream")
        .join(name);
    let mut all = vec![script.to_str().expect("utf-8 path").to_string()];
    all.extend(args.iter().cloned());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (ok, out) = run(&all, limit);
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        checks,
        "{out}"
    );
}

/// Run the js client's smoke script (`js/stream/smoke.js`, unpatched: it
/// asks for the server's command versions) against `stream_port`, and
/// assert that all 4 of its cases passed; its stdout.
fn run_js_smoke(stream_port: u16) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/stream");
    assert!(
        dir.join("node_modules/rabbitmq-stream-js-client").is_dir(),
        "rabbitmq-stream-js-client is not installed in {}: run scripts/test.sh, which runs npm ci there",
        dir.display()
    );
    let mut node = Command::new("node");
    node.current_dir(&dir)
        .arg("smoke.js")
        .arg(stream_port.to_string())
        .arg("--exchange-command-versions");
    let (ok, stdout) = run_to_end(node, Duration::from_secs(120));
    assert!(ok, "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        4,
        "{stdout}"
    );
    stdout
}

mod cases;
mod counted;
mod durable;
mod replica_reads;
