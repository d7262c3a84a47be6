//! The RabbitMQ stream protocol on the stream port (`--stream-port`), driven
//! by the third-party client rstream: the cases of
//! `compat-tests/python/stream/stream_protocol.py`, each recorded against
//! RabbitMQ 3.10.8 with its stream plugin, and what a SIGKILL restart must
//! keep (entries at their offsets, stored consumer offsets, publisher
//! sequences).

use compat_tests::Broker;
use compat_tests::cluster::Cluster;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn python() -> PathBuf {
    match std::env::var_os("STABLEMQ_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "STABLEMQ_PYTHON is not set: run with scripts/test.sh, which creates .venv \
             with rstream and sets it"
        ),
    }
}

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

/// Run `cmd` to its end (at most `limit`, else it is killed and the test
/// fails); its stdout, and whether it exited 0.
fn run_to_end(mut cmd: Command, limit: Duration) -> (bool, String) {
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

/// Every case of the rstream script gets RabbitMQ 3.10's answer: create and
/// delete, confirms, first / offset / next / last, stored offsets,
/// deduplication, raw and AMQP 1.0 bodies, both protocols on one stream,
/// metadata, bad input (with a bystander consumer that must keep working)
/// and a wrong password.
#[test]
fn rstream_gets_the_answers_rabbitmq_3_10_gives() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/stream_protocol.py");
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &broker.amqp_port.to_string(),
        ],
        Duration::from_secs(240),
    );
    assert!(ok, "a case differs from RabbitMQ 3.10:\n{out}");
    assert!(
        out.lines().filter(|l| l.starts_with("ok ")).count() >= 40,
        "{out}"
    );
}

/// Super streams as RabbitMQ 3.10 makes them (a direct exchange with
/// `x-super-stream`, streams bound with `x-stream-partition-order`, by AMQP
/// declares): route and partitions by raw frames, then rstream's
/// SuperStreamProducer (hash and key routing) and SuperStreamConsumer.
/// The raw cases pass against RabbitMQ 3.10.8 too (under the request key);
/// rstream cannot read 3.10's answers, which the script checks with
/// `--rabbitmq`.
#[test]
fn super_streams_route_and_partition_as_rabbitmq_binds_them() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/super_stream.py");
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &broker.amqp_port.to_string(),
        ],
        Duration::from_secs(120),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        9,
        "{out}"
    );
}

/// Create and delete super stream (0x1d, 0x1e; RabbitMQ 3.13+, which 3.10
/// lacks, so the script checks what rabbit_stream_reader and
/// rabbit_stream_manager answer): rstream's create_super_stream makes the
/// exchange, the streams with their arguments and the bindings (seen through
/// the management API), route, partitions, SuperStreamProducer and
/// SuperStreamConsumer work on it, the error codes (0x05, 0x11, 0x10, 0x02),
/// and delete_super_stream removes all of it.
#[test]
fn create_and_delete_super_stream_as_rabbitmq_3_13() {
    let broker = Broker::start();
    let url = format!("http://127.0.0.1:{}", broker.management_port);
    run_cases(
        "super_stream_create.py",
        &[broker.stream_port.to_string(), url],
        Duration::from_secs(120),
        24,
    );
}

/// Single active consumer (RabbitMQ 3.11+; 3.10 has none, so the script
/// checks RabbitMQ's documented rules): on a stream, one member of a group
/// reads, and the next takes over at its stored offset + 1 when the active
/// one unsubscribes or its connection closes; on a super stream, partition
/// i goes to member i % members, a member giving way being told first.
#[test]
fn single_active_consumers_take_turns_on_streams_and_partitions() {
    let broker = Broker::start();
    run_cases(
        "single_active.py",
        &[broker.stream_port.to_string(), broker.amqp_port.to_string()],
        Duration::from_secs(120),
        13,
    );
}

/// Sub-entry batches with every compression code (none, gzip, and snappy,
/// lz4 and zstd in the framed formats the Java and Go stream clients
/// write, registered into rstream with cramjam) are stored as their
/// records, read back in order from both protocols; a body that is not
/// what its header says is a publish error and stores nothing. The script
/// passes against RabbitMQ 3.10.8 with `--rabbitmq` too (there the bad
/// batches are stored unread).
#[test]
fn sub_entry_batches_of_every_codec_are_stored_as_their_records() {
    let broker = Broker::start();
    run_cases(
        "compression.py",
        &[broker.stream_port.to_string(), broker.amqp_port.to_string()],
        Duration::from_secs(120),
        23,
    );
}

/// What rstream's and rabbitmq-stream-js-client's own suites
/// (`scripts/stream-suites.sh`) found StableMQ answering otherwise than
/// RabbitMQ 3.10.8, each case as 3.10.8 answers it (the script passes
/// against it with `--rabbitmq`): deduplication within one frame and of id
/// 0, gzip sub-entries, `last` as the newest publish frame, a metadata
/// update for an idle publisher's deleted stream, a management close
/// without a close frame, the empty stream name.
#[test]
fn what_the_clients_suites_found_is_answered_as_rabbitmq_3_10_does() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/suite_findings.py");
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &broker.amqp_port.to_string(),
            &format!("http://127.0.0.1:{}", broker.management_port),
        ],
        Duration::from_secs(120),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        9,
        "{out}"
    );
}

/// A resource alarm blocks a publishing stream connection (its socket is
/// no longer read, so its publishes wait unconfirmed) and refuses a new
/// publisher with precondition failed, as RabbitMQ's stream reader does for a
/// disk alarm; once it clears every waiting publish is stored, once, in
/// order. The alarm is a memory watermark of one byte, set and cleared with
/// `stablemq ctl` (StableMQ blocks stream publishers on both alarms). The
/// script passes against RabbitMQ 3.10.8 with a disk alarm
/// (`rabbitmqctl set_disk_free_limit`).
#[test]
fn a_resource_alarm_blocks_stream_publishers_until_it_clears() {
    let broker = Broker::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/alarm.py");
    let ctl = |args: &str| {
        format!(
            "{} ctl --url http://127.0.0.1:{} set_vm_memory_high_watermark {args}",
            compat_tests::binary_path().display(),
            broker.management_port
        )
    };
    let (ok, out) = run(
        &[
            script.to_str().expect("utf-8 path"),
            &broker.stream_port.to_string(),
            &format!("http://127.0.0.1:{}", broker.management_port),
            &ctl("absolute 1"),
            &ctl("0.99"),
        ],
        Duration::from_secs(150),
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        5,
        "{out}"
    );
}

/// A subscribed rstream consumer shows as RabbitMQ 3.10 shows it: a
/// connection of protocol `stream` in `/api/connections`, and a consumer in
/// `rabbitmq_global_consumers{protocol="stream"}`.
#[test]
fn a_stream_client_is_listed_and_counted_under_its_protocol() {
    let broker = Broker::start();
    let port = broker.stream_port.to_string();
    let subscriber = std::thread::spawn(move || {
        run(&["-c", SUBSCRIBE_AND_WAIT, &port], Duration::from_secs(60))
    });
    let get = |url: String, auth: bool| {
        let mut req = ureq::get(&url);
        if auth {
            req = req.header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=");
        }
        req.call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut connections, mut metrics) = (String::new(), String::new());
    while Instant::now() < deadline {
        connections = get(
            format!(
                "http://127.0.0.1:{}/api/connections",
                broker.management_port
            ),
            true,
        );
        metrics = get(
            format!("http://127.0.0.1:{}/metrics", broker.prometheus_port),
            false,
        );
        if metrics.contains("\nrabbitmq_global_consumers{protocol=\"stream\"} 1\n") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        metrics.contains("\nrabbitmq_global_consumers{protocol=\"stream\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("\nrabbitmq_global_consumers{protocol=\"amqp091\"} 0\n"));
    assert!(
        connections.contains("\"protocol\":\"stream\""),
        "{connections}"
    );
    assert!(!connections.contains("AMQP 0-9-1"), "{connections}");
    let (ok, out) = subscriber.join().expect("the subscriber thread");
    assert!(ok, "{out}");
}

/// Stream-protocol traffic is counted as rabbitmq_stream counts it (checked
/// against RabbitMQ 3.10.8 with the same script): publishes, confirms and
/// deliveries under `protocol="stream"` (deliveries on
/// `rabbit_stream_queue`), nothing routed and nothing under `amqp091`; and
/// one `rabbitmq_global_stream_error_*` per error answered on an open
/// connection (a failed login counts none).
#[test]
fn stream_traffic_and_errors_are_counted_under_the_stream_protocol() {
    let broker = Broker::start();
    let (ok, out) = run(
        &[
            "-c",
            PUBLISH_CONSUME_AND_FAIL,
            &broker.stream_port.to_string(),
        ],
        Duration::from_secs(60),
    );
    assert!(ok, "{out}");
    assert!(out.contains("exists StreamAlreadyExists"), "{out}");
    assert!(out.contains("missing StreamDoesNotExist"), "{out}");
    assert!(out.contains("consumed 10"), "{out}");
    assert!(out.contains("login AuthenticationFailure"), "{out}");
    let metrics = ureq::get(&format!(
        "http://127.0.0.1:{}/metrics",
        broker.prometheus_port
    ))
    .call()
    .ok()
    .and_then(|mut r| r.body_mut().read_to_string().ok())
    .unwrap_or_default();
    let value = |series: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(str::to_owned)
    };
    let stream = r#"{protocol="stream"}"#;
    let amqp = r#"{protocol="amqp091"}"#;
    for (series, want) in [
        (format!("rabbitmq_global_messages_received_total{stream}"), "10"),
        (format!("rabbitmq_global_messages_received_confirm_total{stream}"), "10"),
        (format!("rabbitmq_global_messages_confirmed_total{stream}"), "10"),
        (
            r#"rabbitmq_global_messages_delivered_total{protocol="stream",queue_type="rabbit_stream_queue"}"#.to_string(),
            "10",
        ),
        (format!("rabbitmq_global_messages_routed_total{stream}"), "0"),
        (
            format!("rabbitmq_global_stream_error_stream_already_exists_total{stream}"),
            "1",
        ),
        (
            format!("rabbitmq_global_stream_error_stream_does_not_exist_total{stream}"),
            "1",
        ),
        (
            format!("rabbitmq_global_stream_error_publisher_does_not_exist_total{stream}"),
            "0",
        ),
        // A failed login counts nothing, as in RabbitMQ 3.10.
        (
            format!("rabbitmq_global_stream_error_authentication_failure_total{stream}"),
            "0",
        ),
        (format!("rabbitmq_global_messages_received_total{amqp}"), "0"),
        (format!("rabbitmq_global_messages_routed_total{amqp}"), "0"),
        (format!("rabbitmq_global_messages_confirmed_total{amqp}"), "0"),
        (
            r#"rabbitmq_global_messages_delivered_total{protocol="amqp091",queue_type="rabbit_classic_queue"}"#.to_string(),
            "0",
        ),
        (
            r#"rabbitmq_global_messages_acknowledged_total{protocol="amqp091",queue_type="rabbit_classic_queue"}"#.to_string(),
            "0",
        ),
    ] {
        assert_eq!(value(&series).as_deref(), Some(want), "{series}\n{metrics}");
    }
}

/// Publish 10 entries with confirms to a new stream, make two errors (the
/// stream again; a stream that does not exist), read the 10 back, and log in
/// with a wrong password.
const PUBLISH_CONSUME_AND_FAIL: &str = r#"
import asyncio, sys
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer
PORT = int(sys.argv[1])
async def main():
    async with Producer("127.0.0.1", port=PORT, username="guest", password="guest") as p:
        await p.create_stream("counted")
        for i in range(10):
            await p.send_wait("counted", b"m%d" % i)
        for what, call in [("exists", p.create_stream("counted")),
                           ("missing", p.delete_stream("never-made"))]:
            try:
                await call
                print("no error for", what, flush=True)
            except Exception as e:
                print(what, type(e).__name__, flush=True)
    got = []
    c = Consumer("127.0.0.1", port=PORT, username="guest", password="guest")
    await c.start()
    async def on(msg, ctx):
        got.append(msg)
    await c.subscribe("counted", on,
                      offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    for _ in range(100):
        if len(got) >= 10:
            break
        await asyncio.sleep(0.1)
    print("consumed", len(got), flush=True)
    await c.close()
    try:
        async with Producer("127.0.0.1", port=PORT, username="guest", password="wrong"):
            print("login accepted", flush=True)
    except Exception as e:
        print("login", type(e).__name__, flush=True)
asyncio.run(main())
"#;

/// Subscribe to a new stream and stay subscribed for a few seconds.
const SUBSCRIBE_AND_WAIT: &str = r#"
import asyncio, sys
from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer
PORT = int(sys.argv[1])
async def main():
    async with Producer("127.0.0.1", port=PORT, username="guest", password="guest") as p:
        await p.create_stream("listed")
    c = Consumer("127.0.0.1", port=PORT, username="guest", password="guest")
    await c.start()
    async def on(msg, ctx):
        pass
    await c.subscribe("listed", on, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
    print("subscribed", flush=True)
    await asyncio.sleep(6)
    await c.close()
asyncio.run(main())
"#;

/// What one phase of the restart test does, with rstream.
const PHASES: &str = r#"
import asyncio, sys
from rstream import Producer, Consumer, ConsumerOffsetSpecification, OffsetType
from rstream.client import Client
PORT, PHASE = int(sys.argv[1]), sys.argv[2]
S = sys.argv[3] if len(sys.argv) > 3 else "restarted"
async def write():
    async with Producer("127.0.0.1", port=PORT, username="guest", password="guest") as p:
        await p.create_stream(S)
    async with Producer("127.0.0.1", port=PORT, username="guest", password="guest") as p:
        for i in range(1, 51):
            await p.send_wait(S, f"e{i}".encode(), publisher_name="p1")
    async with Consumer("127.0.0.1", port=PORT, username="guest", password="guest") as c:
        await c.start()
        await c.store_offset(S, "c1", 20)
        for _ in range(100):
            try:
                if await c.query_offset(S, "c1") == 20:
                    break
            except Exception:
                pass
            await asyncio.sleep(0.05)
    print("written")
async def check():
    got = []
    done = asyncio.Event()
    async with Consumer("127.0.0.1", port=PORT, username="guest", password="guest") as c:
        await c.start()
        print("offset", await c.query_offset(S, "c1"))
        async def cb(msg, ctx):
            got.append((ctx.offset, msg))
            if len(got) == 50:
                done.set()
        await c.subscribe(S, cb, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        await asyncio.wait_for(done.wait(), 10)
    print("entries", all(got[i] == (i, f"e{i+1}".encode()) for i in range(50)), len(got))
    client = Client("127.0.0.1", PORT, frame_max=1048576, heartbeat=60)
    await client.start()
    await client.authenticate(vhost="/", username="guest", password="guest")
    print("sequence", await client.query_publisher_sequence(S, "p1"))
    leader, replicas = await client.query_leader_and_replicas(S)
    print("leader", leader.port, "replicas", sorted(r.port for r in replicas))
    await client.close()
asyncio.run(asyncio.wait_for(write() if PHASE == "write" else check(), 60))
"#;

/// After a SIGKILL, a restarted node has every confirmed entry at its
/// offset, the consumer offset stored before the kill, and the publisher's
/// sequence (so a producer that resends is deduplicated).
#[test]
fn entries_stored_offsets_and_sequences_survive_a_kill_9_restart() {
    let mut broker = Broker::start();
    let port = broker.stream_port.to_string();
    let (ok, out) = run(&["-c", PHASES, &port, "write"], Duration::from_secs(90));
    assert!(ok && out.contains("written"), "{out}");
    broker.kill9();
    broker.start_again();
    let (ok, out) = run(&["-c", PHASES, &port, "check"], Duration::from_secs(90));
    assert!(ok, "{out}");
    assert!(out.contains("offset 20"), "stored offset lost:\n{out}");
    assert!(out.contains("entries True 50"), "entries changed:\n{out}");
    assert!(
        out.contains("sequence 50"),
        "publisher sequence lost:\n{out}"
    );
}

/// The npm client rabbitmq-stream-js-client (installed by scripts/test.sh
/// into compat-tests/js/stream) publishes 100 with confirms and reads them
/// back from `first`, unpatched: it asks for the server's command versions,
/// which StableMQ answers (RabbitMQ 3.10 does not, and this client then dies;
/// the script patches that out only for 3.10).
#[test]
fn the_js_stream_client_publishes_and_consumes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("js/stream");
    assert!(
        dir.join("node_modules/rabbitmq-stream-js-client").is_dir(),
        "rabbitmq-stream-js-client is not installed in {}: run scripts/test.sh, which runs npm ci there",
        dir.display()
    );
    let broker = Broker::start();
    let mut node = Command::new("node");
    node.current_dir(&dir)
        .arg("smoke.js")
        .arg(broker.stream_port.to_string())
        .arg("--exchange-command-versions");
    let (ok, stdout) = run_to_end(node, Duration::from_secs(120));
    assert!(ok, "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        4,
        "{stdout}"
    );
}

/// A 3-node cluster: a client connected to a slave is served (its bytes go
/// to the master), metadata names the master as leader and the live others
/// as replicas, and after a SIGKILL of the master the new one has every
/// confirmed entry at its offset, the stored offset and the publisher's
/// sequence.
#[test]
fn a_master_kill_loses_no_confirmed_entry_nor_stored_offset() {
    let mut cluster = Cluster::start_example();
    let master = cluster.wait_master(Duration::from_secs(30));
    let slave = (master + 1) % 3;
    let ports: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| n.stream_port.to_string())
        .collect();
    let port = |i: usize| ports[i].clone();
    let (ok, out) = run(
        &["-c", PHASES, &port(slave), "write", "replicated"],
        Duration::from_secs(90),
    );
    assert!(ok && out.contains("written"), "{out}");
    cluster.kill9(master);
    let new_master = cluster.wait_master_other_than(Some(master), Duration::from_secs(30));
    let other = (0..3)
        .find(|i| *i != master && *i != new_master)
        .expect("a third node");
    // Through the node that is neither: it forwards to the new master.
    let (ok, out) = run(
        &["-c", PHASES, &port(other), "check", "replicated"],
        Duration::from_secs(90),
    );
    assert!(ok, "{out}");
    assert!(out.contains("offset 20"), "stored offset lost:\n{out}");
    assert!(out.contains("entries True 50"), "entries changed:\n{out}");
    assert!(
        out.contains("sequence 50"),
        "publisher sequence lost:\n{out}"
    );
    let leader = format!("leader {} replicas [{}]", port(new_master), port(other));
    assert!(out.contains(&leader), "want {leader:?}:\n{out}");
}

/// A publisher with a reference publishes without waiting for confirms while
/// the master is killed, then resends everything it sent: every id must be
/// stored exactly once, in order. The broker keeps the entries it made stable
/// and the sequence that deduplicates them in the same events, so a resend
/// stores only what the failover lost (a sequence logged apart from its
/// entries could be lost while they survive, and the resend would store
/// them twice).
#[test]
fn a_deduplicating_publisher_resending_after_a_master_kill_stores_each_id_once() {
    let mut cluster = Cluster::start_example();
    let master = cluster.wait_master(Duration::from_secs(30));
    let order = [master, (master + 1) % 3, (master + 2) % 3];
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/dedup_failover.py");
    let mut cmd = Command::new(python());
    cmd.arg(&script).arg("dedup-failover");
    for i in order {
        cmd.arg(cluster.nodes[i].stream_port.to_string());
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    // Publishing for a few seconds: kill the master in the middle of it.
    std::thread::sleep(Duration::from_secs(3));
    cluster.kill9(master);
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().expect("wait for the script").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dedup_failover.py did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("the script's output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("sent "))
        .unwrap_or_else(|| panic!("no result line:\n{stdout}"));
    let field = |name: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == name).expect(name);
        words[at + 1].parse().expect(name)
    };
    let sent = field("sent");
    assert!(sent >= 50, "too little was sent before the kill: {line}");
    assert_eq!(field("stored"), sent, "{line}");
    assert_eq!(field("distinct"), sent, "{line}");
    assert_eq!(field("missing"), 0, "{line}");
    assert_eq!(field("duplicated"), 0, "{line}");
    assert_eq!(field("out-of-order"), 0, "{line}");
}

/// rabbitmq_stream_management's endpoints (`/api/stream/connections`,
/// `/publishers`, `/consumers`, per vhost, stream and connection) list a
/// publisher and a consumer with RabbitMQ 3.10.8's fields and counts; the
/// script's checks pass against RabbitMQ 3.10.8 with that plugin too.
#[test]
fn the_stream_management_endpoints_list_publishers_and_consumers() {
    let broker = Broker::start();
    let url = format!("http://127.0.0.1:{}", broker.management_port);
    run_cases(
        "stream_api.py",
        &[broker.stream_port.to_string(), url],
        Duration::from_secs(90),
        19,
    );
}

/// Stream filtering (3.13+) over both protocols (`python/stream/filtering.py`):
/// a filtered subscription gets no chunk that holds only other values, an
/// AMQP 0-9-1 consumer only matching entries, across protocols, and the
/// filter values are still there after a SIGKILL restart.
#[test]
fn stream_filtering_over_both_protocols_survives_a_kill_9_restart() {
    let mut broker = Broker::start();
    let ports = [broker.stream_port.to_string(), broker.amqp_port.to_string()];
    let phase = |p: &str| [ports[0].clone(), ports[1].clone(), p.to_owned()];
    run_cases(
        "filtering.py",
        &phase("write"),
        Duration::from_secs(180),
        15,
    );
    broker.kill9();
    broker.start_again();
    run_cases("filtering.py", &phase("check"), Duration::from_secs(90), 3);
}
