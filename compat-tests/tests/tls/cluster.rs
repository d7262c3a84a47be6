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
