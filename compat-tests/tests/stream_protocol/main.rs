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

/// The js client's smoke script against `stream_port` (all 4 cases pass);
/// its stdout.
fn run_js_smoke(stream_port: u16) -> String {
    compat_tests::common::js::run_js_smoke::<&str>(stream_port, &[])
}

mod cases;
mod counted;
mod durable;
mod replica_reads;
