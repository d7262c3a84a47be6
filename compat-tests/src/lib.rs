//! Harness for StableMQ's end-to-end tests.
//!
//! It starts the real `stablemq` binary on free loopback ports with a fresh data
//! directory, and kills it by pid when the handle drops. It is not a mock: every
//! test in `tests/` talks to a real broker process over real TCP.
//!
//! Set `STABLEMQ_TEST_EXTERNAL_URI` (e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`)
//! to point the tests at an already running broker instead, such as a RabbitMQ
//! used to check that a test encodes RabbitMQ's real behaviour. Tests that must
//! kill or restart the broker cannot run in that mode and panic saying so.

pub mod backlog;
pub mod cluster;
pub mod common;
pub mod jepsen;
pub mod netns;
pub mod pki;
pub mod procfs;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of the broker binary under test.
///
/// `.ci/run` builds the release binary once and every test binary shares it, so the
/// default is `target/release/stablemq`; `STABLEMQ_BIN` overrides it.
pub fn binary_path() -> PathBuf {
    if let Ok(p) = std::env::var("STABLEMQ_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.join("target").join("release").join("stablemq")
}

/// A free loopback port for a broker under test.
///
/// Ports come from 20000–31999, below Linux's ephemeral range (32768+), so a
/// client socket's local port can never take the port a broker is about to bind.
/// Each process walks the range from its own pid-derived start, and a port is
/// handed out only once per process and only if it can be bound right now.
///
/// The check binds without listening. A test spawns brokers from several
/// threads at once, and a child forked while the check's socket is open holds
/// a copy of it until it execs. Were that copy listening, another test's
/// readiness probe could connect to it (the probe passes before its broker
/// has bound), and the test's client then met a reset or a refusal when the
/// copy closed at exec (seen in CI: `bystander connect: ConnectionReset`).
/// A copy that only binds (with `SO_REUSEADDR`, as the broker's listener
/// has) neither answers a connect nor stops the broker binding the port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const BASE: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = BASE + (start + n) % SPAN;
        let port = u16::try_from(port).expect("port range fits u16");
        if bind_without_listening(port).is_ok() {
            return port;
        }
    }
    panic!("no free port in {BASE}..{}", BASE + SPAN);
}

/// Bind 127.0.0.1:`port` with `SO_REUSEADDR` and close it: fails while a
/// listener holds the port.
fn bind_without_listening(port: u16) -> std::io::Result<()> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into())
}

/// Options for starting a broker.
#[derive(Debug, Clone, Default)]
pub struct BrokerOptions {
    /// Extra text for a TOML config file passed with `--config`.
    pub config_toml: Option<String>,
    /// Extra command-line arguments after `serve`.
    pub extra_args: Vec<String>,
}

/// A running broker process (or an external broker, see the crate docs).
pub struct Broker {
    child: Option<Child>,
    external: Option<String>,
    /// Port of the AMQP listener.
    pub amqp_port: u16,
    /// Port of the Prometheus `/metrics` listener.
    pub prometheus_port: u16,
    /// Port of the management HTTP API.
    pub management_port: u16,
    /// Port of the stream protocol listener.
    pub stream_port: u16,
    data_dir: tempfile::TempDir,
    opts: BrokerOptions,
}

impl Broker {
    /// Start a broker with a fresh data directory and default options.
    pub fn start() -> Broker {
        Broker::start_with(BrokerOptions::default())
    }

    /// Start a broker with the given options.
    pub fn start_with(opts: BrokerOptions) -> Broker {
        let data_dir = tempfile::tempdir().expect("temp data dir");
        let external = std::env::var("STABLEMQ_TEST_EXTERNAL_URI").ok();
        let mut b = Broker {
            child: None,
            external,
            amqp_port: free_port(),
            prometheus_port: free_port(),
            management_port: free_port(),
            stream_port: free_port(),
            data_dir,
            opts,
        };
        if b.external.is_none() {
            b.spawn();
        }
        b
    }

    /// True when the tests run against an external broker (no process to control).
    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// The data directory of this broker.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// AMQP URI for the default `guest` user and the `/` vhost.
    pub fn uri(&self) -> String {
        match &self.external {
            Some(u) => u.clone(),
            None => format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port),
        }
    }

    /// AMQP URI with explicit credentials and vhost (vhost is URL-encoded here).
    pub fn uri_with(&self, user: &str, pass: &str, vhost: &str) -> String {
        let vhost = vhost.replace('%', "%25").replace('/', "%2f");
        let host = match &self.external {
            Some(u) => u
                .split('@')
                .nth(1)
                .and_then(|r| r.split('/').next())
                .unwrap_or("127.0.0.1:5672")
                .to_string(),
            None => format!("127.0.0.1:{}", self.amqp_port),
        };
        format!("amqp://{user}:{pass}@{host}/{vhost}")
    }

    /// Socket address of the AMQP listener.
    pub fn addr(&self) -> SocketAddr {
        match &self.external {
            Some(u) => {
                let host = u
                    .split('@')
                    .nth(1)
                    .and_then(|r| r.split('/').next())
                    .unwrap_or("127.0.0.1:5672");
                host.parse().expect("external URI host:port")
            }
            None => SocketAddr::from(([127, 0, 0, 1], self.amqp_port)),
        }
    }

    /// Process id of the broker, for tests that signal it.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("no broker process").id()
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(binary_path());
        cmd.arg("serve")
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--amqp-port")
            .arg(self.amqp_port.to_string())
            .arg("--prometheus-port")
            .arg(self.prometheus_port.to_string())
            .arg("--management-port")
            .arg(self.management_port.to_string())
            .arg("--stream-port")
            .arg(self.stream_port.to_string())
            .arg("--data-dir")
            .arg(self.data_dir.path().join("data"));
        if let Some(toml) = &self.opts.config_toml {
            let path = self.data_dir.path().join("stablemq.toml");
            std::fs::write(&path, toml).expect("write config");
            cmd.arg("--config").arg(path);
        }
        cmd.args(&self.opts.extra_args);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.path().join("broker.log"))
            .expect("open broker log");
        let log2 = log.try_clone().expect("clone log");
        cmd.stdout(Stdio::from(log)).stderr(Stdio::from(log2));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary_path().display()));
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = self.addr();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("broker exited early with {status}; log:\n{}", self.log());
            }
            if Instant::now() > deadline {
                panic!("broker did not listen within 60 s; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The broker's stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.path().join("broker.log")).unwrap_or_default()
    }

    fn require_process(&self, what: &str) {
        assert!(
            self.external.is_none(),
            "{what} needs a broker process; it cannot run with STABLEMQ_TEST_EXTERNAL_URI"
        );
    }

    /// SIGKILL the broker and reap it. Nothing is flushed: this is a crash.
    pub fn kill9(&mut self) {
        self.require_process("kill9");
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send SIGTERM and wait (up to 30 s) for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        self.require_process("terminate");
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start the broker again on the same ports and data directory.
    pub fn restart(&mut self) {
        self.require_process("restart");
        self.kill9();
        self.spawn();
    }

    /// Start the broker again after `kill9`/`terminate` (same ports and data dir).
    pub fn start_again(&mut self) {
        self.require_process("start_again");
        assert!(self.child.is_none(), "broker still running");
        self.spawn();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // Whether the broker was still running when a test failed tells a broker
        // that died (and how: a signal leaves no line in its log) from one that
        // answered wrongly.
        let mut exited = None;
        if let Some(mut c) = self.child.take() {
            exited = c.try_wait().ok().flatten();
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() && self.external.is_none() {
            match exited {
                Some(status) => eprintln!("--- the broker had exited: {status} ---"),
                None => eprintln!("--- the broker was still running ---"),
            }
            eprintln!("--- broker log ---\n{}", self.log());
        }
    }
}
