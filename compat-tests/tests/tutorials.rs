//! The six RabbitMQ tutorials, run as their official Python (pika) programs.
//!
//! The scripts in `compat-tests/python/tutorials/` are the tutorials as published,
//! changed only to read the broker port from `AMQP_PORT` and to stop consuming after
//! `TUTORIAL_TIMEOUT_S` seconds. Each test starts its own broker, runs the programs
//! with `$STABLEMQ_PYTHON` (the `.venv` interpreter that `scripts/test.sh` sets up
//! with the pinned pika), and checks what the receivers print.
//!
//! Every process is bounded: each wait has a deadline, and a guard kills the process
//! when the test ends, however it ends.

use compat_tests::Broker;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one wait for a line or an exit may take. Generous: starting Python and
/// importing pika on a loaded 2-core machine takes a while.
const WAIT: Duration = Duration::from_secs(60);

/// Upper bound on a receiver's life, passed to the scripts as `TUTORIAL_TIMEOUT_S`.
/// The guard kills them long before this; it only matters if the test runner dies.
const SCRIPT_LIFETIME_S: &str = "180";

use compat_tests::common::python::python;

fn script_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join("tutorials")
        .join(name)
}

/// One running tutorial program. Its stdout is read line by line on a thread;
/// dropping it kills the process.
struct Script {
    name: String,
    child: Child,
    lines: Receiver<String>,
    /// Every stdout line seen so far, in order.
    seen: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Script {
    fn spawn(broker: &Broker, name: &str, args: &[&str]) -> Script {
        let mut child = Command::new(python())
            .arg(script_path(name))
            .args(args)
            .env("AMQP_PORT", broker.addr().port().to_string())
            .env("PYTHONUNBUFFERED", "1")
            .env("TUTORIAL_TIMEOUT_S", SCRIPT_LIFETIME_S)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} {name}: {e}", python().display()));
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Script {
            name: format!("{name} {}", args.join(" ")),
            child,
            lines: rx,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Take every line printed so far without waiting.
    fn poll(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// Wait until the program has printed `line` (exactly) at least `times` times.
    fn wait_for_count(&mut self, line: &str, times: usize) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.poll();
            if self.seen.iter().filter(|l| *l == line).count() >= times {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    let stderr = self.kill_and_stderr();
                    panic!(
                        "{}: did not print {line:?} ({times}x) within {WAIT:?}.\n\
                         stdout: {:#?}\nstderr:\n{stderr}",
                        self.name, self.seen
                    );
                }
            }
        }
    }

    fn wait_for(&mut self, line: &str) {
        self.wait_for_count(line, 1);
    }

    /// Wait for the program to exit by itself; returns its status and whole stdout.
    fn wait_exit(mut self) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The reader thread ends at EOF, which follows the exit.
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(line);
                }
                let seen = std::mem::take(&mut self.seen);
                if !status.success() {
                    let stderr = self.kill_and_stderr();
                    panic!(
                        "{} exited with {status}.\nstdout: {seen:#?}\nstderr:\n{stderr}",
                        self.name
                    );
                }
                return (status, seen);
            }
            if Instant::now() > deadline {
                let stderr = self.kill_and_stderr();
                panic!(
                    "{} did not exit within {WAIT:?}.\nstdout: {:#?}\nstderr:\n{stderr}",
                    self.name, self.seen
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill_and_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }

    /// Lines printed so far that start with `prefix`.
    fn lines_starting(&mut self, prefix: &str) -> Vec<String> {
        self.poll();
        self.seen
            .iter()
            .filter(|l| l.starts_with(prefix))
            .cloned()
            .collect()
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a one-shot program (a sender) to completion and return its stdout.
fn run(broker: &Broker, name: &str, args: &[&str]) -> Vec<String> {
    Script::spawn(broker, name, args).wait_exit().1
}

/// Run an async block with lapin on a private runtime.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(async {
            tokio::time::timeout(WAIT, f)
                .await
                .expect("lapin timed out")
        })
}

/// Against an external broker (see the harness), queues from an earlier run may
/// still hold messages or consumers; a fresh StableMQ has none.
fn delete_queues_if_external(broker: &Broker, queues: &[&str]) {
    if !broker.is_external() {
        return;
    }
    let uri = broker.uri();
    block_on(async move {
        let conn = lapin::Connection::connect(&uri, lapin::ConnectionProperties::default())
            .await
            .expect("connect");
        let ch = conn.create_channel().await.expect("channel");
        for q in queues {
            ch.queue_delete((*q).into(), Default::default())
                .await
                .expect("queue.delete");
        }
        conn.close(200, "bye".into()).await.expect("close");
    });
}

/// Number of consumers the broker reports for `queue` (passive queue.declare).
fn consumer_count(broker: &Broker, queue: &str) -> u32 {
    let uri = broker.uri();
    block_on(async move {
        let conn = lapin::Connection::connect(&uri, lapin::ConnectionProperties::default())
            .await
            .expect("connect");
        let ch = conn.create_channel().await.expect("channel");
        let q = ch
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions::default().passive(),
                Default::default(),
            )
            .await
            .expect("passive queue.declare");
        conn.close(200, "bye".into()).await.expect("close");
        q.consumer_count()
    })
}

#[test]
fn tutorial_1_hello_world() {
    python(); // fail before starting a broker when the venv is missing
    let broker = Broker::start();
    delete_queues_if_external(&broker, &["hello"]);

    let out = run(&broker, "send.py", &[]);
    assert_eq!(out, vec![" [x] Sent 'Hello World!'"]);

    let mut receive = Script::spawn(&broker, "receive.py", &[]);
    receive.wait_for(" [*] Waiting for messages. To exit press CTRL+C");
    receive.wait_for(" [x] Received Hello World!");

    // A second send reaches the consumer that is already waiting.
    run(&broker, "send.py", &[]);
    receive.wait_for_count(" [x] Received Hello World!", 2);
    assert_eq!(
        receive.lines_starting(" [x]").len(),
        2,
        "{:#?}",
        receive.seen
    );
}

#[test]
fn tutorial_2_work_queues() {
    python(); // fail before starting a broker when the venv is missing
    let broker = Broker::start();
    delete_queues_if_external(&broker, &["task_queue"]);

    let mut workers = [
        Script::spawn(&broker, "worker.py", &[]),
        Script::spawn(&broker, "worker.py", &[]),
    ];
    for w in &mut workers {
        w.wait_for(" [*] Waiting for messages. To exit press CTRL+C");
    }
    // The workers print before they call basic.consume: wait until the broker
    // has both consumers, so that both take part from the first task on.
    let deadline = Instant::now() + WAIT;
    while consumer_count(&broker, "task_queue") < 2 {
        assert!(Instant::now() < deadline, "the two workers never consumed");
        std::thread::sleep(Duration::from_millis(100));
    }

    // One dot = one second of work in worker.py.
    let tasks = ["First task.", "Second task.", "Third task.", "Fourth task."];
    for t in tasks {
        assert_eq!(
            run(&broker, "new_task.py", &[t]),
            vec![format!(" [x] Sent {t}")]
        );
    }

    let deadline = Instant::now() + WAIT;
    loop {
        let done: usize = workers
            .iter_mut()
            .map(|w| w.lines_starting(" [x] Done").len())
            .sum();
        if done >= tasks.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "workers did not finish all tasks: {:#?} / {:#?}",
            workers[0].seen,
            workers[1].seen
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut received: Vec<String> = Vec::new();
    for w in &mut workers {
        let got = w.lines_starting(" [x] Received ");
        // Fair dispatch (prefetch 1) hands work to both workers, never all to one.
        assert!(
            !got.is_empty(),
            "one worker got no task: {:#?}",
            w.seen.clone()
        );
        assert_eq!(got.len(), w.lines_starting(" [x] Done").len());
        received.extend(got);
    }
    received.sort();
    let mut expected: Vec<String> = tasks.iter().map(|t| format!(" [x] Received {t}")).collect();
    expected.sort();
    assert_eq!(received, expected, "every task exactly once");
}

#[test]
fn tutorial_3_publish_subscribe() {
    python(); // fail before starting a broker when the venv is missing
    let broker = Broker::start();

    // A fanout exchange with no queue bound drops the message.
    run(&broker, "emit_log.py", &["info: nobody listens yet"]);

    let mut receivers = [
        Script::spawn(&broker, "receive_logs.py", &[]),
        Script::spawn(&broker, "receive_logs.py", &[]),
    ];
    for r in &mut receivers {
        r.wait_for(" [*] Waiting for logs. To exit press CTRL+C");
    }
    assert_eq!(
        run(&broker, "emit_log.py", &[]),
        vec![" [x] Sent info: Hello World!"]
    );
    assert_eq!(
        run(&broker, "emit_log.py", &["warning: disk almost full"]),
        vec![" [x] Sent warning: disk almost full"]
    );
    for r in &mut receivers {
        r.wait_for(" [x] warning: disk almost full");
        assert_eq!(
            r.lines_starting(" [x]"),
            vec![" [x] info: Hello World!", " [x] warning: disk almost full"],
            "each receiver gets every message published after it bound, in order"
        );
    }
}

#[test]
fn tutorial_4_routing() {
    python(); // fail before starting a broker when the venv is missing
    let broker = Broker::start();

    let mut warn_err = Script::spawn(&broker, "receive_logs_direct.py", &["warning", "error"]);
    let mut info = Script::spawn(&broker, "receive_logs_direct.py", &["info"]);
    warn_err.wait_for(" [*] Waiting for logs. To exit press CTRL+C");
    info.wait_for(" [*] Waiting for logs. To exit press CTRL+C");

    // Each receiver's last expected message comes after every message it must not get.
    for (severity, msg) in [
        ("info", "first info"),
        ("debug", "nobody binds debug"),
        ("warning", "a warning"),
        ("error", "Run. Run. Or it will explode."),
        ("info", "last info"),
    ] {
        assert_eq!(
            run(&broker, "emit_log_direct.py", &[severity, msg]),
            vec![format!(" [x] Sent {severity}:{msg}")]
        );
    }
    warn_err.wait_for(" [x] error:Run. Run. Or it will explode.");
    info.wait_for(" [x] info:last info");
    assert_eq!(
        warn_err.lines_starting(" [x]"),
        vec![
            " [x] warning:a warning",
            " [x] error:Run. Run. Or it will explode."
        ]
    );
    assert_eq!(
        info.lines_starting(" [x]"),
        vec![" [x] info:first info", " [x] info:last info"]
    );

    // Without a severity the emitter uses "info" and "Hello World!".
    assert_eq!(
        run(&broker, "emit_log_direct.py", &[]),
        vec![" [x] Sent info:Hello World!"]
    );
    info.wait_for(" [x] info:Hello World!");
}

#[test]
fn tutorial_5_topics() {
    python(); // fail before starting a broker when the venv is missing
    let broker = Broker::start();

    let mut all = Script::spawn(&broker, "receive_logs_topic.py", &["#"]);
    let mut kern = Script::spawn(&broker, "receive_logs_topic.py", &["kern.*"]);
    let mut critical = Script::spawn(&broker, "receive_logs_topic.py", &["*.critical"]);
    let mut both = Script::spawn(&broker, "receive_logs_topic.py", &["kern.*", "*.critical"]);
    for r in [&mut all, &mut kern, &mut critical, &mut both] {
        r.wait_for(" [*] Waiting for logs. To exit press CTRL+C");
    }

    // The last message matches every binding, so once a receiver has it, it has
    // every earlier message routed to it.
    assert_eq!(
        run(&broker, "emit_log_topic.py", &[]),
        vec![" [x] Sent anonymous.info:Hello World!"]
    );
    for (key, msg) in [
        ("kern.info", "kernel info"),
        ("cron.critical", "cron failed"),
        ("kern.disk.critical", "two words between"),
        ("kern.critical", "A critical kernel error"),
    ] {
        assert_eq!(
            run(&broker, "emit_log_topic.py", &[key, msg]),
            vec![format!(" [x] Sent {key}:{msg}")]
        );
    }
    let last = " [x] kern.critical:A critical kernel error";
    for r in [&mut all, &mut kern, &mut critical, &mut both] {
        r.wait_for(last);
    }
    assert_eq!(
        all.lines_starting(" [x]"),
        vec![
            " [x] anonymous.info:Hello World!",
            " [x] kern.info:kernel info",
            " [x] cron.critical:cron failed",
            " [x] kern.disk.critical:two words between",
            last,
        ]
    );
    assert_eq!(
        kern.lines_starting(" [x]"),
        vec![" [x] kern.info:kernel info", last],
        "kern.* gets kern.critical but not anonymous.info"
    );
    assert_eq!(
        critical.lines_starting(" [x]"),
        vec![" [x] cron.critical:cron failed", last]
    );
    // Matching two bindings still delivers one copy.
    assert_eq!(
        both.lines_starting(" [x]"),
        vec![
            " [x] kern.info:kernel info",
            " [x] cron.critical:cron failed",
            last
        ]
    );
}

#[test]
fn tutorial_6_rpc() {
    python(); // fail before starting a broker when the venv is missing
    let broker = Broker::start();
    delete_queues_if_external(&broker, &["rpc_queue"]);

    let mut server = Script::spawn(&broker, "rpc_server.py", &[]);
    server.wait_for(" [x] Awaiting RPC requests");

    let out = run(&broker, "rpc_client.py", &[]);
    assert_eq!(out, vec![" [x] Requesting fib(30)", " [.] Got 832040"]);
    server.wait_for(" [.] fib(30)");

    // The server keeps serving: a second client gets its own answer.
    let out = run(&broker, "rpc_client.py", &[]);
    assert_eq!(out, vec![" [x] Requesting fib(30)", " [.] Got 832040"]);
    server.wait_for_count(" [.] fib(30)", 2);
}
