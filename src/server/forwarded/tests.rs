use super::*;
use crate::tls::PeerCert;

fn cookie(s: &str) -> Cookie {
    Cookie::new(s.as_bytes()).expect("cookie")
}

fn alice_over_tls() -> Forwarded {
    Forwarded {
        peer: "192.0.2.7:40001".parse().unwrap(),
        local: "10.0.0.2:5671".parse().unwrap(),
        tls: Some(TlsInfo {
            protocol: "tlsv1.3".into(),
            key_exchange: "any".into(),
            cipher: "aes_256_gcm".into(),
            hash: "sha384".into(),
            peer_cert: Some(PeerCert {
                subject: "CN=alice".into(),
                issuer: "CN=ca".into(),
                validity: "{..}".into(),
                login: Some("alice".into()),
            }),
        }),
    }
}

fn trust(node: &str, cookie: Option<Cookie>) -> Trust {
    Trust {
        nodes: [node.parse().unwrap()].into_iter().collect(),
        cookie,
    }
}

const NOW: u64 = 1_800_000_000_000;

#[test]
fn a_header_written_by_a_node_with_the_cookie_reads_back_whole() {
    let c = cookie("a-cluster-cookie-of-some-length");
    let client = alice_over_tls();
    let bytes = header(&client, Some(&c), NOW);
    assert_eq!(&bytes[..12], SIGNATURE);
    assert_eq!(
        header_len(bytes[..FIXED].try_into().unwrap()),
        Some(bytes.len())
    );
    let t = trust("10.0.0.2", Some(c));
    assert_eq!(
        parse(&bytes, "10.0.0.2".parse().unwrap(), &t, NOW + 5),
        Ok(client)
    );
}

#[test]
fn only_cluster_nodes_with_the_cookie_and_a_recent_clock_are_believed() {
    let c = cookie("a-cluster-cookie-of-some-length");
    let client = alice_over_tls();
    let from: IpAddr = "10.0.0.2".parse().unwrap();
    let t = trust("10.0.0.2", Some(c.clone()));
    let good = header(&client, Some(&c), NOW);
    // From an address that is no node's.
    assert_eq!(
        parse(&good, "10.0.0.9".parse().unwrap(), &t, NOW),
        Err(Refused::Untrusted("10.0.0.9".parse().unwrap()))
    );
    // Another cookie, or none, where one is required.
    let other = header(&client, Some(&cookie("another-cookie-entirely-here")), NOW);
    assert_eq!(parse(&other, from, &t, NOW), Err(Refused::BadProof));
    let unsigned = header(&client, None, NOW);
    assert_eq!(parse(&unsigned, from, &t, NOW), Err(Refused::BadProof));
    // A recorded header replayed later than the allowed skew.
    assert_eq!(
        parse(&good, from, &t, NOW + SKEW_MS + 1),
        Err(Refused::Stale(-(SKEW_MS as i64) - 1))
    );
    // Tampering with the TLS session (another login) breaks the proof.
    let mut forged = good.clone();
    let at = forged
        .windows(5)
        .position(|w| w == b"alice")
        .expect("the login is in the header");
    forged[at..at + 5].copy_from_slice(b"admin");
    assert_eq!(parse(&forged, from, &t, NOW), Err(Refused::BadProof));
    // Without a cookie in the cluster, a node's address is enough.
    assert_eq!(
        parse(&unsigned, from, &trust("10.0.0.2", None), NOW),
        Ok(client)
    );
    // Garbage after the signature.
    let mut junk = SIGNATURE.to_vec();
    junk.extend_from_slice(&[0x21, 0x11, 0, 3, 1, 2, 3]);
    assert!(matches!(
        parse(&junk, from, &t, NOW),
        Err(Refused::Malformed(_))
    ));
}

#[test]
fn mixed_address_families_travel_mapped_and_come_back_as_they_were() {
    let client = Forwarded {
        peer: "192.0.2.7:40001".parse().unwrap(),
        local: "[2001:db8::2]:5672".parse().unwrap(),
        tls: None,
    };
    let bytes = header(&client, None, NOW);
    let got = parse(
        &bytes,
        "10.0.0.2".parse().unwrap(),
        &trust("10.0.0.2", None),
        NOW,
    );
    assert_eq!(got, Ok(client));
}

async fn pair() -> (TcpStream, TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dial = TcpStream::connect(l.local_addr().unwrap());
    let (dialed, accepted) = tokio::join!(dial, l.accept());
    (dialed.unwrap(), accepted.unwrap().0)
}

#[tokio::test]
async fn take_consumes_a_header_and_leaves_an_ordinary_client_untouched() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = trust("127.0.0.1", None);
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let within = Duration::from_secs(5);
    // An AMQP client: nothing taken, its header still there to read.
    let (mut c, mut s) = pair().await;
    c.write_all(b"AMQP\0\0\x09\x01").await.unwrap();
    assert_eq!(take(&mut s, lo, &t, within).await, Ok(None));
    let mut got = [0u8; 8];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"AMQP\0\0\x09\x01");
    // A forwarded client: the header is taken, the AMQP bytes follow.
    let (mut c, mut s) = pair().await;
    let client = alice_over_tls();
    let mut bytes = header(&client, None, super::super::master_task::now_ms());
    bytes.extend_from_slice(b"AMQP\0\0\x09\x01");
    c.write_all(&bytes).await.unwrap();
    assert_eq!(take(&mut s, lo, &t, within).await, Ok(Some(client)));
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"AMQP\0\0\x09\x01");
    // Half a signature and then silence: bounded by the timeout.
    let (mut c, mut s) = pair().await;
    c.write_all(&SIGNATURE[..5]).await.unwrap();
    let short = Duration::from_millis(200);
    assert_eq!(
        take(&mut s, lo, &t, short).await,
        Err(Refused::Timeout(short))
    );
    // A length past the bound is refused before anything is read.
    let (mut c, mut s) = pair().await;
    let mut huge = SIGNATURE.to_vec();
    huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    c.write_all(&huge).await.unwrap();
    assert!(matches!(
        take(&mut s, lo, &t, within).await,
        Err(Refused::Malformed(_))
    ));
}
