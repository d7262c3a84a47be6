//! The stream protocol over TLS (`[tls] stream_port`, RabbitMQ's
//! `stream.listeners.ssl.default`): rstream over TLS
//! (`python/stream/tls.py`), the listener in the overview, SASL EXTERNAL
//! with a client certificate, garbage on the port with a bystander that
//! keeps working; rabbitmq-stream-js-client over TLS too; in a 3-node
//! cluster, the same through a slave.

use super::client::{Pki, TlsBroker, TlsTarget};
use compat_tests::common::python::{python, run_to_end};
use compat_tests::common::*;
use compat_tests::free_port;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// rabbitmq-stream-js-client's smoke script (`js/stream/smoke.js`) over TLS
/// to `port`, trusting `ca`: all 4 of its cases must pass.
fn run_js_smoke_tls(port: u16, ca: &std::path::Path) {
    let tls = [std::ffi::OsStr::new("--tls"), ca.as_os_str()];
    compat_tests::common::js::run_js_smoke(port, &tls);
}

fn start(pki: &Pki) -> (TlsBroker, u16) {
    let port = free_port();
    (
        TlsBroker::start(pki, &format!("stream_port = {port}")),
        port,
    )
}

#[test]
fn rstream_publishes_and_reads_over_tls_and_metadata_names_the_tls_port() {
    let pki = Pki::new();
    let (b, port) = start(&pki);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/tls.py");
    let mut cmd = Command::new(python());
    cmd.arg(script)
        .arg(port.to_string())
        .arg(b.broker.stream_port.to_string())
        .arg(&pki.ca.cert_file)
        .arg(format!("http://127.0.0.1:{}", b.broker.management_port));
    let (ok, out) = run_to_end(cmd, Duration::from_secs(120));
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(ok && oks == 8, "{out}\n{}", b.broker.log());
    let listeners = b.api_get("/api/overview")["listeners"].clone();
    let listed = listeners
        .as_array()
        .expect("listeners")
        .iter()
        .any(|l| l["protocol"] == "stream/ssl" && l["port"] == port);
    assert!(listed, "no stream/ssl listener on {port}: {listeners}");
    run_js_smoke_tls(port, &pki.ca.cert_file);
}

/// SASL EXTERNAL over the stream TLS port: offered with a verified client
/// certificate only, logging in as its CN (`python/stream/tls_external.py`).
#[test]
fn external_logs_a_stream_client_in_as_the_certificate_cn() {
    let pki = Pki::new();
    let port = free_port();
    let top = "auth_mechanisms = [\"PLAIN\", \"AMQPLAIN\", \"EXTERNAL\"]";
    let extra = format!("{}\nstream_port = {port}", pki.verify_peer_lines(false));
    let b = TlsBroker::start_top(&pki, top, &extra);
    b.add_user("alice");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream/tls_external.py");
    let mut cmd = Command::new(python());
    cmd.arg(script)
        .arg(port.to_string())
        .arg(&pki.ca.cert_file)
        .arg(&pki.alice.cert)
        .arg(&pki.alice.key)
        .arg(format!("http://127.0.0.1:{}", b.broker.management_port));
    let (ok, out) = run_to_end(cmd, Duration::from_secs(120));
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(ok && oks == 3, "{out}\n{}", b.broker.log());
    assert!(out.contains("alice"), "{out}");
}

/// A stream protocol PeerPropertiesRequest (key 0x0011, version 1) with
/// correlation id `corr` and no properties.
fn peer_properties(corr: u32) -> Vec<u8> {
    request(0x0011, corr, &0i32.to_be_bytes())
}

/// A stream protocol request frame: `key`, version 1, `corr`, then `rest`.
fn request(key: u16, corr: u32, rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&key.to_be_bytes());
    body.extend_from_slice(&1u16.to_be_bytes());
    body.extend_from_slice(&corr.to_be_bytes());
    body.extend_from_slice(rest);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// Read one stream protocol frame; its key.
async fn read_key<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> u16 {
    let body = read_frame(s).await;
    u16::from_be_bytes([body[0], body[1]])
}

/// Read one stream protocol frame's body (key first).
async fn read_frame<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut len = [0u8; 4];
    within("a stream frame's size", s.read_exact(&mut len))
        .await
        .expect("frame size");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    within("a stream frame", s.read_exact(&mut body))
        .await
        .expect("frame");
    body
}

/// The mechanisms of a SaslHandshakeResponse (key 0x8012) body.
fn mechanisms(body: &[u8]) -> Vec<String> {
    assert_eq!(&body[..2], &[0x80, 0x12], "a SaslHandshakeResponse");
    let count = i32::from_be_bytes(body[10..14].try_into().expect("4 bytes"));
    let mut at = 14;
    (0..count)
        .map(|_| {
            let len = usize::from(u16::from_be_bytes([body[at], body[at + 1]]));
            let m = String::from_utf8_lossy(&body[at + 2..at + 2 + len]).into_owned();
            at += 2 + len;
            m
        })
        .collect()
}

#[tokio::test]
async fn garbage_on_the_stream_tls_port_is_closed_and_a_bystander_goes_on() {
    let pki = Pki::new();
    let (b, port) = start(&pki);
    let target = TlsTarget::new(&pki.ca.cert_file, port);
    let mut bystander = target.handshake(None).await.expect("TLS handshake");
    bystander
        .write_all(&peer_properties(1))
        .await
        .expect("write");
    assert_eq!(
        read_key(&mut bystander).await,
        0x8011,
        "peer properties answer"
    );
    // Garbage where a ClientHello belongs, and a plain stream client.
    for junk in [vec![0xffu8; 64], peer_properties(7)] {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(&junk).await.expect("write");
        let mut buf = [0u8; 256];
        let mut total = 0;
        // rustls answers with an alert, then the socket closes.
        loop {
            match within("the close", s.read(&mut buf)).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
            assert!(total < 4096, "the broker kept talking to garbage");
        }
    }
    // Its next step of the handshake: SaslHandshake (0x0012), answered
    // with what RabbitMQ 3.10 offers a stream client by default (EXTERNAL
    // is not configured).
    bystander
        .write_all(&request(0x0012, 2, &[]))
        .await
        .expect("write");
    let answer = read_frame(&mut bystander).await;
    assert_eq!(
        mechanisms(&answer),
        ["PLAIN", "AMQPLAIN"],
        "the bystander goes on"
    );
    let log = b.broker.log();
    assert!(log.contains("TLS handshake failed"), "{log}");
}

/// In a cluster the nodes' TLS listeners are `stream_tls_addr`s (every
/// node names the others' in metadata): `[tls] stream_port` is refused.
#[test]
fn a_cluster_refuses_the_single_node_stream_tls_port_with_a_clear_error() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("node.toml");
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster/node1.toml");
    let example = std::fs::read_to_string(example).expect("examples/cluster/node1.toml");
    let section = compat_tests::pki::tls_section(&pki.server, free_port(), "stream_port = 5551");
    std::fs::write(&config, format!("{example}\n{section}")).expect("write config");
    let out = Command::new("timeout")
        .arg("20")
        .arg(compat_tests::binary_path())
        .args(["serve", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .expect("run the broker");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("give each node a stream_tls_addr"), "{err}");
}

/// A 3-node cluster with a `stream_tls_addr` per node: rstream over TLS
/// through a slave (its publishes relayed to the master with the client's
/// TLS session, its reads served where rstream goes), metadata naming
/// every node's TLS listener, and SASL EXTERNAL through the slave.
#[test]
fn a_cluster_serves_streams_over_tls_through_any_node() {
    use compat_tests::cluster::Cluster;
    let pki = Pki::new();
    let tls_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let top = "auth_mechanisms = [\"PLAIN\", \"AMQPLAIN\", \"EXTERNAL\"]\n";
    let section = |_: usize| {
        let tls =
            compat_tests::pki::tls_section(&pki.server, free_port(), &pki.verify_peer_lines(false));
        format!("{top}{tls}")
    };
    // Each [[cluster.nodes]] entry, in order, gets its stream_tls_addr.
    let edit = |_: usize, text: String| {
        let mut out = String::new();
        let mut k = 0;
        for line in text.lines() {
            out.push_str(line);
            out.push('\n');
            if line.starts_with("stream_addr = ") {
                out.push_str(&format!(
                    "stream_tls_addr = \"127.0.0.1:{}\"\n",
                    tls_ports[k]
                ));
                k += 1;
            }
        }
        assert_eq!(k, 3, "three stream_addr lines in {text}");
        out
    };
    let cluster = Cluster::start_example_edited(None, "", &section, &edit);
    let master = cluster.wait_master(Duration::from_secs(60));
    let slave = (0..3).find(|i| *i != master).expect("a slave");
    let api = format!("http://127.0.0.1:{}", cluster.nodes[master].management_port);
    super::client::add_cert_user(cluster.nodes[master].management_port, "alice");
    let replicas: Vec<String> = (0..3)
        .filter(|i| *i != master)
        .map(|i| tls_ports[i].to_string())
        .collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/stream");
    let mut cmd = Command::new(python());
    cmd.arg(dir.join("tls.py"))
        .arg(tls_ports[slave].to_string())
        .arg(cluster.nodes[slave].stream_port.to_string())
        .arg(&pki.ca.cert_file)
        .arg(&api)
        .arg(tls_ports[master].to_string())
        .arg(replicas.join(","));
    let (ok, out) = run_to_end(cmd, Duration::from_secs(120));
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(ok && oks == 8, "{out}\n{}", cluster.all_logs());
    let mut cmd = Command::new(python());
    cmd.arg(dir.join("tls_external.py"))
        .arg(tls_ports[slave].to_string())
        .arg(&pki.ca.cert_file)
        .arg(&pki.alice.cert)
        .arg(&pki.alice.key)
        .arg(&api);
    let (ok, out) = run_to_end(cmd, Duration::from_secs(120));
    let oks = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(ok && oks == 3, "{out}\n{}", cluster.all_logs());
    run_js_smoke_tls(tls_ports[slave], &pki.ca.cert_file);
}
