//! `stablemq perf --frames-per-write 1` writes each publish (and each consumer
//! ack) as a socket write of its own, as client libraries do; without the flag
//! it packs many into one write.
//!
//! The real binary runs against a real broker through a counting TCP proxy in
//! this test. A TCP receiver cannot see write boundaries in what it reads, but
//! the kernel counts the data segments it received (`tcpi_data_segs_in` of
//! `TCP_INFO`), and on loopback with `TCP_NODELAY` (perf sets it) a small write
//! goes out as one segment of its own unless earlier data is still unsent. The
//! proxy makes sure it never is, and that several publishes are due at once:
//!
//! - the confirm window and the prefetch are 4, so at most 4 small publishes
//!   (or acks) are ever in flight, below any congestion or receive window;
//! - the proxy holds what the broker sends (confirms, deliveries) for 20 ms and
//!   forwards it in one write, so perf learns of 4 confirms (or deliveries) at
//!   once and has 4 publishes (or acks) to write together.
//!
//! One write per publish then means at least one data segment per publish;
//! batched writes put the 4 into one segment, about a quarter as many. The same
//! check runs on both modes, and must fail on the batching one.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use compat_tests::{Broker, binary_path, free_port};

/// How long the proxy holds what the broker sends before forwarding it at once.
const HOLD: Duration = Duration::from_millis(20);
/// No proxy thread outlives this.
const PROXY_LIFETIME: Duration = Duration::from_secs(120);
/// Messages per run, and the confirm window and prefetch.
const COUNT: u64 = 200;
const WINDOW: &str = "4";

/// What the proxy saw from one client connection.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// basic.publish method frames from the client.
    publishes: u64,
    /// basic.ack method frames from the client.
    acks: u64,
    /// read() calls on the client socket that returned a publish's method frame.
    reads_with_publishes: u64,
    /// The most publish method frames one read returned.
    most_publishes_in_a_read: u64,
    /// Data segments the kernel received on the client socket.
    data_segments: u32,
}

/// `tcpi_data_segs_in` of a socket: segments received that carried data.
#[allow(
    unsafe_code,
    reason = "TCP_INFO has no safe wrapper in libc or socket2; getsockopt into a zeroed tcp_info"
)]
fn data_segments_in(s: &TcpStream) -> u32 {
    // SAFETY: a zeroed tcp_info is a valid value (plain integers); getsockopt
    // writes at most `len` octets into it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(
        rc,
        0,
        "getsockopt(TCP_INFO): {}",
        std::io::Error::last_os_error()
    );
    info.tcpi_data_segs_in
}

/// Count the publish and ack method frames in `buf`, cutting complete frames
/// off its front (a partial frame stays). The protocol header is skipped.
fn count_frames(buf: &mut Vec<u8>, seen: &mut Seen) -> u64 {
    if buf.starts_with(b"AMQP") {
        if buf.len() < 8 {
            return 0;
        }
        buf.drain(..8);
    }
    let (mut pos, mut publishes) = (0, 0);
    while buf.len() >= pos + 7 {
        let size = u32::from_be_bytes([buf[pos + 3], buf[pos + 4], buf[pos + 5], buf[pos + 6]]);
        let end = pos + 8 + size as usize;
        if buf.len() < end {
            break;
        }
        if buf[pos] == 1 && size >= 4 {
            match (&buf[pos + 7..pos + 9], &buf[pos + 9..pos + 11]) {
                ([0, 60], [0, 40]) => publishes += 1,
                ([0, 60], [0, 80]) => seen.acks += 1,
                _ => {}
            }
        }
        pos = end;
    }
    buf.drain(..pos);
    seen.publishes += publishes;
    publishes
}

/// Client to broker: forward everything at once, counting frames and reads.
fn upstream(client: TcpStream, mut broker: TcpStream, out: Arc<Mutex<Vec<Seen>>>) {
    let mut c = &client;
    let started = Instant::now();
    let (mut seen, mut pending, mut buf) = (Seen::default(), Vec::new(), vec![0u8; 65536]);
    c.set_read_timeout(Some(Duration::from_millis(200))).ok();
    while started.elapsed() < PROXY_LIFETIME {
        let n = match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&buf[..n]);
        let p = count_frames(&mut pending, &mut seen);
        if p > 0 {
            seen.reads_with_publishes += 1;
            seen.most_publishes_in_a_read = seen.most_publishes_in_a_read.max(p);
        }
        if broker.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    seen.data_segments = data_segments_in(&client);
    let _ = broker.shutdown(Shutdown::Write);
    out.lock().expect("results lock").push(seen);
}

/// Broker to client: hold what arrives for [`HOLD`], then forward it in one write.
fn downstream(mut broker: TcpStream, mut client: TcpStream) {
    let started = Instant::now();
    let (mut held, mut buf) = (Vec::new(), vec![0u8; 65536]);
    let mut first_at = Instant::now();
    broker.set_read_timeout(Some(Duration::from_millis(2))).ok();
    while started.elapsed() < PROXY_LIFETIME {
        let open = match broker.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                if held.is_empty() {
                    first_at = Instant::now();
                }
                held.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => true,
            Err(_) => false,
        };
        if !held.is_empty() && (!open || first_at.elapsed() >= HOLD) {
            if client.write_all(&held).is_err() {
                break;
            }
            held.clear();
        }
        if !open {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}

/// A proxy to `broker` on a free loopback port; what it saw from each client
/// connection lands in the returned list when that connection ends.
fn start_proxy(broker: std::net::SocketAddr) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let port = free_port();
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("proxy listens");
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    let out = Arc::new(Mutex::new(Vec::new()));
    let results = out.clone();
    thread::spawn(move || {
        let started = Instant::now();
        while started.elapsed() < PROXY_LIFETIME {
            let client = match listener.accept() {
                Ok((c, _)) => c,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(_) => break,
            };
            client
                .set_nonblocking(false)
                .expect("blocking client socket");
            client.set_nodelay(true).ok();
            let Ok(upstream_sock) = TcpStream::connect(broker) else {
                continue;
            };
            upstream_sock.set_nodelay(true).ok();
            let (c2, b2) = (
                client.try_clone().expect("clone"),
                upstream_sock.try_clone().expect("clone"),
            );
            let out = out.clone();
            thread::spawn(move || upstream(client, upstream_sock, out));
            thread::spawn(move || downstream(b2, c2));
        }
    });
    (port, results)
}

/// One perf run through a fresh proxy: the producer's and the consumer's
/// connections as the proxy saw them.
fn run_through_proxy(broker: &Broker, queue: &str, extra: &[&str]) -> (Seen, Seen) {
    let (port, results) = start_proxy(broker.addr());
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let count = COUNT.to_string();
    let out = Command::new(binary_path())
        .args(["perf", "--uri", &uri, "-x", "1", "-y", "1", "-s", "16"])
        .args(["-c", WINDOW, "-q", WINDOW, "--multi-ack-every", "1"])
        .args(["-C", &count, "-u", queue, "--json", "--timeout", "90"])
        .args(extra)
        .output()
        .expect("run stablemq perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "perf failed ({:?}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for key in ["published", "confirmed", "consumed"] {
        assert!(
            stdout.contains(&format!("\"{key}\":{COUNT},")),
            "{key} is not {COUNT}: {stdout}"
        );
    }
    // The setup connection, the producer and the consumer all end; wait for
    // the proxy to have seen their ends (bounded).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = results.lock().expect("results lock").clone();
        let producer = seen.iter().find(|s| s.publishes > 0).cloned();
        let consumer = seen.iter().find(|s| s.acks > 0).cloned();
        if let (Some(p), Some(c)) = (producer, consumer) {
            return (p, c);
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not see a producer and a consumer end: {seen:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The check: every publish (and ack) came in a data segment of its own.
fn one_per_write(producer: &Seen, consumer: &Seen) -> Result<(), String> {
    if u64::from(producer.data_segments) < producer.publishes {
        return Err(format!(
            "{} publishes arrived in {} data segments: some writes carried several ({producer:?})",
            producer.publishes, producer.data_segments
        ));
    }
    if u64::from(consumer.data_segments) < consumer.acks {
        return Err(format!(
            "{} acks arrived in {} data segments: some writes carried several ({consumer:?})",
            consumer.acks, consumer.data_segments
        ));
    }
    Ok(())
}

#[test]
fn frames_per_write_1_writes_each_publish_and_ack_on_its_own() {
    let broker = Broker::start();
    let (producer, consumer) =
        run_through_proxy(&broker, "perf-fpw1", &["--frames-per-write", "1"]);
    eprintln!("one per write: producer {producer:?}, consumer {consumer:?}");
    assert_eq!(producer.publishes, COUNT, "{producer:?}");
    assert_eq!(consumer.acks, COUNT, "{consumer:?}");
    one_per_write(&producer, &consumer).unwrap();
}

#[test]
fn the_default_batches_several_publishes_and_acks_per_write() {
    let broker = Broker::start();
    let (producer, consumer) = run_through_proxy(&broker, "perf-batched", &[]);
    eprintln!("batched: producer {producer:?}, consumer {consumer:?}");
    assert_eq!(producer.publishes, COUNT, "{producer:?}");
    assert!(consumer.acks >= 1, "{consumer:?}");
    let err = one_per_write(&producer, &consumer)
        .expect_err("batched writes must fail the one-publish-per-write check");
    assert!(err.contains("several"), "{err}");
    // The proxy released 4 confirms at a time, so batches of up to 4 went out:
    // far fewer segments than publishes.
    assert!(
        u64::from(producer.data_segments) * 2 < producer.publishes,
        "{producer:?}"
    );
    // A write of several publishes reaches the proxy in one read.
    assert!(producer.most_publishes_in_a_read >= 2, "{producer:?}");
}
