//! The stream protocol's npm client, rabbitmq-stream-js-client, through its
//! smoke script `compat-tests/js/stream/smoke.js` (installed there by
//! `scripts/test.sh`'s `npm ci`).

use super::python::run_to_end;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Run the smoke script, unpatched (it asks for the server's command
/// versions), against `stream_port` with `more` arguments (e.g. `--tls
/// CA_FILE`), and assert that all 4 of its cases passed; its stdout.
pub fn run_js_smoke<S: AsRef<OsStr>>(stream_port: u16, more: &[S]) -> String {
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
        .arg("--exchange-command-versions")
        .args(more);
    let (ok, stdout) = run_to_end(node, Duration::from_secs(120));
    assert!(ok, "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        4,
        "{stdout}"
    );
    stdout
}
