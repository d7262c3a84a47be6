//! AMQPS on a 3-node cluster: every broker node serves AMQPS; a client that
//! dials a slave has its TLS session end there, and the slave forwards its
//! frames to the master, so publishing with confirms and consuming work
//! through any node. Then the master is killed: the client reconnects over
//! AMQPS to the new master and every confirmed message is there.

use super::client::{Pki, TlsTarget};
use super::common::*;
use compat_tests::cluster::Cluster;
use compat_tests::free_port;
use std::time::Duration;

const CLUSTER_WAIT: Duration = Duration::from_secs(60);

fn pika(port: u16, pki: &Pki, mode: &str) -> (bool, String) {
    super::run_pika(&[
        port.to_string(),
        pki.ca.cert_file.display().to_string(),
        mode.to_string(),
    ])
}

#[test]
fn a_slave_serves_amqps_clients_through_the_master_and_failover_keeps_them() {
    let pki = Pki::new();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let section = |i: usize| compat_tests::pki::tls_section(&pki.server, ports[i], "");
    let mut cluster = Cluster::start_example_sections(None, "", &section);
    let master = cluster.wait_master(CLUSTER_WAIT);
    let slave = (0..3).find(|i| *i != master).expect("a slave");
    // Through the slave: TLS ends on the slave, AMQP goes on to the master.
    let (ok, out) = pika(ports[slave], &pki, "plain-login");
    assert!(
        ok && out.contains("ok 200 200"),
        "pika via the slave: {out}\n{}",
        cluster.all_logs()
    );
    // The master's own AMQPS listener, too.
    let (ok, out) = pika(ports[master], &pki, "plain-login");
    assert!(
        ok && out.contains("ok 200 200"),
        "pika via the master: {out}"
    );
    // kill -9 the master; the survivors elect one, and AMQPS on it serves.
    cluster.kill9(master);
    let next = cluster.wait_master_other_than(Some(master), CLUSTER_WAIT);
    let target = TlsTarget::new(&pki.ca.cert_file, ports[next]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let s = within("AMQPS on the new master", target.handshake(None))
            .await
            .expect("handshake");
        let mut raw = RawConn::over(s).await;
        raw.read_start().await;
    });
    let (ok, out) = pika(ports[next], &pki, "plain-login");
    assert!(
        ok && out.contains("ok 200 200"),
        "pika after failover: {out}\n{}",
        cluster.all_logs()
    );
}

/// The connections node `i`'s management API lists.
fn connections(cluster: &Cluster, i: usize) -> Vec<serde_json::Value> {
    let v = cluster.api(i, "/api/connections");
    v.as_array().cloned().unwrap_or_default()
}

/// SASL EXTERNAL through a slave: TLS ends on the slave, which tells the
/// master who the client is (a PROXY header signed with the cluster cookie),
/// so the master offers EXTERNAL to a client with a verified certificate and
/// logs it in as the certificate's CN, and lists it with its own address and
/// TLS session. A header the slave did not write is refused.
#[test]
fn external_through_a_slave_logs_in_as_the_certificate_cn() {
    let pki = Pki::new();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let top = "auth_mechanisms = [\"PLAIN\", \"AMQPLAIN\", \"EXTERNAL\"]\n";
    let section = |i: usize| {
        let tls =
            compat_tests::pki::tls_section(&pki.server, ports[i], &pki.verify_peer_lines(false));
        format!("{top}{tls}")
    };
    let cluster = Cluster::start_example_sections(None, "", &section);
    let master = cluster.wait_master(CLUSTER_WAIT);
    let slave = (0..3).find(|i| *i != master).expect("a slave");
    super::client::add_cert_user(cluster.nodes[master].management_port, "alice");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let target = TlsTarget::new(&pki.ca.cert_file, ports[slave]);
        // A raw client first, kept open so the master's API can be asked.
        let s = within("TLS to the slave", target.handshake(Some(&pki.alice)))
            .await
            .expect("handshake");
        let mut alice = RawConn::over(s).await;
        let start = alice.read_start().await;
        assert!(
            start.mechanisms.to_string().contains("EXTERNAL"),
            "the master did not offer EXTERNAL through the slave: {:?}\n{}",
            start.mechanisms,
            cluster.all_logs()
        );
        match alice.start_ok_with("EXTERNAL", b"").await {
            lapin::protocol::AMQPClass::Connection(
                lapin::protocol::connection::AMQPMethod::Tune(_),
            ) => {}
            other => panic!("EXTERNAL refused through the slave: {other:?}"),
        }
        alice.tune_ok_and_open(0, 131072, 0, "/").await;
        let listed = connections(&cluster, master);
        let c = listed
            .iter()
            .find(|c| c["user"] == "alice")
            .unwrap_or_else(|| panic!("no connection of alice on the master: {listed:?}"));
        assert_eq!(c["auth_mechanism"], "EXTERNAL", "{c}");
        assert_eq!(c["ssl"], true, "{c}");
        assert_eq!(c["peer_host"], "127.0.0.1", "{c}");
        assert_eq!(c["port"], ports[slave], "the port the client dialed: {c}");
        assert!(
            c["peer_cert_subject"]
                .as_str()
                .unwrap_or("")
                .contains("CN=alice"),
            "{c}"
        );
        // Without a certificate, no EXTERNAL.
        let s = target.handshake(None).await.expect("handshake");
        let mut anon = RawConn::over(s).await;
        assert_eq!(
            anon.read_start().await.mechanisms.to_string(),
            "PLAIN AMQPLAIN"
        );
        // A stranger on the master's plain port claiming to be a forwarded
        // alice, without the cookie's proof: closed, and logged.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let master_amqp = cluster.nodes[master].amqp_port;
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", master_amqp))
            .await
            .expect("connect");
        let mut forged = forged_header();
        forged.extend_from_slice(b"AMQP\x00\x00\x09\x01");
        s.write_all(&forged).await.expect("write");
        let mut buf = [0u8; 64];
        let got = within("the forged header's close", s.read(&mut buf)).await;
        assert!(
            matches!(got, Ok(0) | Err(_)),
            "a forged forwarding header was answered: {:?}",
            got.map(|n| buf[..n].to_vec())
        );
        // Alice's connection through the slave goes on.
        let mut args = Vec::new();
        put_shortstr(&mut args, "");
        alice.send_method(1, 20, 10, &args).await;
        match alice.read_method().await {
            (
                1,
                lapin::protocol::AMQPClass::Channel(lapin::protocol::channel::AMQPMethod::OpenOk(
                    _,
                )),
            ) => {}
            other => panic!("alice's channel did not open: {other:?}"),
        }
        // A message larger than the sockets' buffers, read late, arrives
        // whole through the slave's proxy too.
        let queue = unique("big-tls");
        super::large::publish_large(cluster.nodes[master].amqp_port, &queue).await;
        super::large::get_late_whole(&mut alice, &queue).await;
    });
    let log = cluster.log(master);
    assert!(
        log.contains("PROXY header without a valid cluster-cookie proof"),
        "the refusal is not logged:\n{log}"
    );
    // pika with ExternalCredentials, end to end, through the slave.
    let (ok, out) = super::run_pika(&[
        ports[slave].to_string(),
        pki.ca.cert_file.display().to_string(),
        "external".into(),
        pki.alice.cert.display().to_string(),
        pki.alice.key.display().to_string(),
    ]);
    assert!(
        ok && out.contains("ok 200 200"),
        "pika EXTERNAL via the slave: {out}\n{}",
        cluster.all_logs()
    );
}

/// A PROXY protocol v2 header as a slave would write it for a client
/// logged in as alice, with no proof: 127.0.0.1:40000 -> 127.0.0.1:5671 and
/// StableMQ's client TLV (0xE0).
fn forged_header() -> Vec<u8> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let client = serde_json::json!({
        "at_ms": now_ms as u64,
        "tls": {
            "protocol": "tlsv1.3", "key_exchange": "any", "cipher": "aes_256_gcm",
            "hash": "sha384",
            "peer_cert": {"subject": "CN=alice", "issuer": "CN=x", "validity": "",
                          "login": "alice"}
        }
    })
    .to_string();
    let mut payload = vec![127, 0, 0, 1, 127, 0, 0, 1];
    payload.extend_from_slice(&40000u16.to_be_bytes());
    payload.extend_from_slice(&5671u16.to_be_bytes());
    payload.push(0xE0);
    payload.extend_from_slice(&(client.len() as u16).to_be_bytes());
    payload.extend_from_slice(client.as_bytes());
    let mut out = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    out.extend_from_slice(&[0x21, 0x11]);
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(&payload);
    out
}
