//! What a SIGKILL of the node or of a cluster's master must keep: entries at
//! their offsets, stored consumer offsets, publisher sequences.

use super::*;

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
