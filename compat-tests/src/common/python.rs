//! Case scripts in Python: a pika script that prints `ok NAME` or
//! `FAIL NAME: ...` per case, checked against what RabbitMQ answers (each
//! script says how to run it against a RabbitMQ node).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `.venv` interpreter `scripts/test.sh` sets up (`STABLEMQ_PYTHON`).
pub fn python() -> std::path::PathBuf {
    match std::env::var_os("STABLEMQ_PYTHON") {
        Some(p) if !p.is_empty() => std::path::PathBuf::from(p),
        _ => panic!(
            "STABLEMQ_PYTHON is not set: run with scripts/test.sh, which creates .venv \
             with pika and sets it"
        ),
    }
}

/// Run `script` (under `compat-tests/python/`) against the AMQP port `port`,
/// for at most 180 s, and assert that it passed with at least `min_ok` cases.
pub fn run_cases(script: &str, port: u16, min_ok: usize) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(script);
    let mut child = Command::new(python())
        .arg(&path)
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the pika script");
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the pika script") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{script} did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().expect("the script's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(status.success(), "a case differs from RabbitMQ:\n{stdout}");
    let passed = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(
        passed >= min_ok,
        "{passed} cases passed, want {min_ok}:\n{stdout}"
    );
}
