//! Case scripts in Python: a pika script that prints `ok NAME` or
//! `FAIL NAME: ...` per case, checked against what RabbitMQ answers (each
//! script says how to run it against a RabbitMQ node).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `.venv` interpreter `scripts/test.sh` sets up (`STABLEMQ_PYTHON`),
/// with the packages of `compat-tests/python/requirements.txt` (pika,
/// aio-pika, rstream, ...).
pub fn python() -> std::path::PathBuf {
    match std::env::var_os("STABLEMQ_PYTHON") {
        Some(p) if !p.is_empty() => std::path::PathBuf::from(p),
        _ => panic!(
            "STABLEMQ_PYTHON is not set: run the tests with scripts/test.sh, which \
             creates .venv from compat-tests/python/requirements.txt and sets it"
        ),
    }
}

/// Run `cmd` to its end (at most `limit`, else it is killed and the test
/// fails); its stdout, and whether it exited 0. Both outputs are printed,
/// for a failing test's log.
pub fn run_to_end(mut cmd: Command, limit: Duration) -> (bool, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the child") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().expect("the child's output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (status.success(), stdout)
}

/// Run `script` (under `compat-tests/python/`) against the AMQP port `port`,
/// for at most 180 s, and assert that it passed with at least `min_ok` cases.
pub fn run_cases(script: &str, port: u16, min_ok: usize) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(script);
    let mut cmd = Command::new(python());
    cmd.arg(&path).arg(port.to_string());
    let (ok, stdout) = run_to_end(cmd, Duration::from_secs(180));
    assert!(ok, "a case differs from RabbitMQ:\n{stdout}");
    let passed = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(
        passed >= min_ok,
        "{passed} cases passed, want {min_ok}:\n{stdout}"
    );
}
