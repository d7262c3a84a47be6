use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::timeout;

use super::*;
use crate::position::Entry;
use crate::replication::{Endpoint, Message};

const WAIT: Duration = Duration::from_secs(10);

async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Bind a port just freed: the aborted listener task may not have been dropped
/// yet when the abort returns.
async fn rebind(addr: SocketAddr) -> TcpListener {
    timeout(WAIT, async {
        loop {
            match TcpListener::bind(addr).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .unwrap()
}

fn append(index: u64) -> Envelope {
    Envelope {
        from: Endpoint::broker(1),
        to: Endpoint::store(2),
        msg: Message::Append(Append {
            epoch: 1,
            prev: crate::LogPosition::new(1, index - 1),
            entries: vec![Entry::new(1, index, format!("payload {index}"))],
            stable: 0,
            floor: 0,
        }),
    }
}

/// A small frame from node `from`'s store to node 1's broker, and its bytes.
fn frame(from: NodeId) -> (Envelope, BytesMut) {
    let env = Envelope {
        from: Endpoint::store(from),
        to: Endpoint::broker(1),
        msg: Message::FenceRefused { promised: 4 },
    };
    let mut buf = BytesMut::new();
    wire::encode(&env, &mut buf, MAX_FRAME_DEFAULT).unwrap();
    (env, buf)
}

#[tokio::test]
async fn messages_arrive_in_order_and_self_sends_skip_tcp() {
    let (l1, a1) = bind().await;
    let (l2, a2) = bind().await;
    let (mut t1, mut in1) =
        Transport::start(1, l1, HashMap::from([(2, a2)]), TransportOptions::default());
    let (_t2, mut in2) =
        Transport::start(2, l2, HashMap::from([(1, a1)]), TransportOptions::default());
    // A burst: queued faster than written, so it leaves in few writes.
    for i in 1..=500 {
        t1.send(append(i));
    }
    for i in 1..=500 {
        let got = timeout(WAIT, in2.recv()).await.unwrap().unwrap();
        assert_eq!(got, append(i));
    }
    let to_self = Envelope {
        from: Endpoint::broker(1),
        to: Endpoint::store(1),
        msg: Message::Fence { epoch: 1, nonce: 9 },
    };
    t1.send(to_self.clone());
    assert_eq!(timeout(WAIT, in1.recv()).await.unwrap(), Some(to_self));
}

#[tokio::test]
async fn a_late_or_restarted_peer_is_redialed() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    drop(l2); // node 2 is down; its port is free
    let (mut t1, _in1) =
        Transport::start(1, l1, HashMap::from([(2, a2)]), TransportOptions::default());
    t1.send(append(1)); // dropped: nobody listens

    for life in 0..2 {
        let listener = rebind(a2).await;
        let (t2, mut in2) =
            Transport::start(2, listener, HashMap::new(), TransportOptions::default());
        // Like the engine: resend until something gets through.
        let got = timeout(WAIT, async {
            loop {
                t1.send(append(1));
                tokio::select! {
                    got = in2.recv() => break got,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("life {life}: nothing arrived"));
        assert_eq!(got, Some(append(1)));
        drop(t2); // "crash": the port is freed for the next life
        drop(in2);
    }
}

#[tokio::test]
async fn garbage_closes_the_connection_but_not_the_node() {
    let (l1, a1) = bind().await;
    let (_t1, mut in1) = Transport::start(1, l1, HashMap::new(), TransportOptions::default());
    let mut bad = TcpStream::connect(a1).await.unwrap();
    bad.write_all(&[0, 0, 0, 3, 99, 1, 2]).await.unwrap();
    // The node closes it: the next read sees EOF.
    let mut rest = Vec::new();
    timeout(WAIT, bad.read_to_end(&mut rest))
        .await
        .unwrap()
        .ok();

    let mut good = TcpStream::connect(a1).await.unwrap();
    auth::dial(&mut good, 3, 1, None).await.unwrap();
    let (env, buf) = frame(3);
    good.write_all(&buf).await.unwrap();
    assert_eq!(timeout(WAIT, in1.recv()).await.unwrap(), Some(env));
}

fn with_cookie(secret: &str) -> TransportOptions {
    TransportOptions {
        cookie: Some(Cookie::new(secret.as_bytes()).unwrap()),
        ..TransportOptions::default()
    }
}

#[tokio::test]
async fn nodes_with_the_same_cookie_talk() {
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let secret = "the-clusters-shared-cookie";
    let (mut t1, _in1) = Transport::start(1, l1, HashMap::from([(2, a2)]), with_cookie(secret));
    let (_t2, mut in2) = Transport::start(2, l2, HashMap::new(), with_cookie(secret));
    t1.send(append(1));
    assert_eq!(timeout(WAIT, in2.recv()).await.unwrap(), Some(append(1)));
}

#[tokio::test]
async fn an_acceptor_with_a_cookie_refuses_a_wrong_or_missing_one() {
    let (l1, a1) = bind().await;
    let (_t1, mut in1) = Transport::start(
        1,
        l1,
        HashMap::new(),
        with_cookie("the-clusters-shared-cookie"),
    );

    // A wrong cookie: refused, told why, and the connection is closed.
    let mut wrong = TcpStream::connect(a1).await.unwrap();
    let other = Cookie::new(b"somebody-elses-cookie").unwrap();
    let err = auth::dial(&mut wrong, 2, 1, Some(&other))
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::BadCookie), "{err:?}");
    let (_, buf) = frame(2);
    let _ = wrong.write_all(&buf).await; // the node must not take it
    let mut rest = Vec::new();
    timeout(WAIT, wrong.read_to_end(&mut rest))
        .await
        .unwrap()
        .ok();

    // No cookie: the dialer learns one is required and sends nothing.
    let mut none = TcpStream::connect(a1).await.unwrap();
    let err = auth::dial(&mut none, 2, 1, None).await.unwrap_err();
    assert!(matches!(err, AuthError::CookieRequired), "{err:?}");

    // The right cookie gets through; it is the first frame the node received.
    let mut good = TcpStream::connect(a1).await.unwrap();
    let right = Cookie::new(b"the-clusters-shared-cookie").unwrap();
    auth::dial(&mut good, 3, 1, Some(&right)).await.unwrap();
    let (env, buf) = frame(3);
    good.write_all(&buf).await.unwrap();
    assert_eq!(timeout(WAIT, in1.recv()).await.unwrap(), Some(env));
}

#[tokio::test]
async fn an_authenticated_peer_cannot_speak_for_another_node() {
    let (l1, a1) = bind().await;
    let (_t1, mut in1) = Transport::start(1, l1, HashMap::new(), TransportOptions::default());
    let mut conn = TcpStream::connect(a1).await.unwrap();
    auth::dial(&mut conn, 2, 1, None).await.unwrap();
    let (_forged, buf) = frame(3);
    conn.write_all(&buf).await.unwrap();
    let mut rest = Vec::new();
    timeout(WAIT, conn.read_to_end(&mut rest))
        .await
        .unwrap()
        .ok();
    assert!(
        in1.try_recv().is_err(),
        "a frame naming another sender was delivered"
    );
}

#[tokio::test]
async fn a_dialer_with_a_cookie_proves_it_and_refuses_an_unauthenticated_peer() {
    let (l1, _) = bind().await;
    let (peer, a2) = bind().await;
    let secret = "the-clusters-shared-cookie";
    let (mut t1, _in1) = Transport::start(1, l1, HashMap::from([(2, a2)]), with_cookie(secret));
    t1.send(append(1));
    // Node 2 here is a raw socket playing acceptor with another cookie: the
    // transport's proof fails against it...
    let (mut conn, _) = timeout(WAIT, peer.accept()).await.unwrap().unwrap();
    let other = Cookie::new(b"somebody-elses-cookie").unwrap();
    let err = auth::accept(&mut conn, 2, Some(&other)).await.unwrap_err();
    assert!(matches!(err, AuthError::BadCookie), "{err:?}");
    // ... and against an acceptor without a cookie it sends no proof at all.
    t1.send(append(1));
    let (mut conn, _) = timeout(WAIT, peer.accept()).await.unwrap().unwrap();
    let err = auth::accept(&mut conn, 2, None).await.unwrap_err();
    assert!(matches!(err, AuthError::Io(_)), "{err:?}");
    // With the right cookie it authenticates as node 1.
    t1.send(append(1));
    let (mut conn, _) = timeout(WAIT, peer.accept()).await.unwrap().unwrap();
    let right = Cookie::new(secret.as_bytes()).unwrap();
    assert_eq!(auth::accept(&mut conn, 2, Some(&right)).await.unwrap(), 1);
}

/// A CA and a node certificate for 127.0.0.1 signed by it, as PEM files in
/// `dir` (`<name>.crt`, `<name>.key`, `<name>-ca.crt`); returns the config.
fn tls_files(dir: &std::path::Path, name: &str) -> TlsConfig {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut node = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    node.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = node.signed_by(&key, &ca, &ca_key).unwrap();
    let path = |suffix: &str| dir.join(format!("{name}{suffix}"));
    std::fs::write(path(".crt"), cert.pem()).unwrap();
    std::fs::write(path(".key"), key.serialize_pem()).unwrap();
    std::fs::write(path("-ca.crt"), ca.pem()).unwrap();
    TlsConfig::from_pem_files(&path(".crt"), &path(".key"), &path("-ca.crt")).unwrap()
}

fn with_tls(tls: &TlsConfig) -> TransportOptions {
    TransportOptions {
        tls: Some(tls.clone()),
        cookie: Some(Cookie::new(b"the-clusters-shared-cookie").unwrap()),
        ..TransportOptions::default()
    }
}

#[tokio::test]
async fn nodes_with_certificates_of_one_ca_talk_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let tls = tls_files(dir.path(), "cluster");
    let (l1, _) = bind().await;
    let (l2, a2) = bind().await;
    let (mut t1, _in1) = Transport::start(1, l1, HashMap::from([(2, a2)]), with_tls(&tls));
    let (_t2, mut in2) = Transport::start(2, l2, HashMap::new(), with_tls(&tls));
    for i in 1..=50 {
        t1.send(append(i));
    }
    for i in 1..=50 {
        assert_eq!(timeout(WAIT, in2.recv()).await.unwrap(), Some(append(i)));
    }
}

#[tokio::test]
async fn a_tls_node_refuses_plain_tcp_and_a_foreign_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let tls = tls_files(dir.path(), "cluster");
    let foreign = tls_files(dir.path(), "stranger");
    let (l1, a1) = bind().await;
    let (_t1, mut in1) = Transport::start(1, l1, HashMap::new(), with_tls(&tls));
    let cookie = Cookie::new(b"the-clusters-shared-cookie").unwrap();

    // Plain TCP: the node waits for a TLS handshake, never sends the plain
    // hello, and closes at its handshake timeout.
    let mut plain = TcpStream::connect(a1).await.unwrap();
    let err = timeout(WAIT, auth::dial(&mut plain, 2, 1, Some(&cookie)))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, AuthError::Io(_)), "{err:?}");

    // A certificate from another CA (even with the right cookie) fails the
    // TLS handshake on one side or the other.
    let tcp = TcpStream::connect(a1).await.unwrap();
    let refused = async {
        let mut s = foreign.connect(a1, tcp).await?;
        auth::dial(&mut s, 2, 1, Some(&cookie))
            .await
            .map_err(std::io::Error::other)
    };
    assert!(timeout(WAIT, refused).await.unwrap().is_err());
    // Trusting the node but presenting a certificate it does not trust: the
    // node refuses the client certificate.
    let p = |f: &str| dir.path().join(f);
    let imposter =
        TlsConfig::from_pem_files(&p("stranger.crt"), &p("stranger.key"), &p("cluster-ca.crt"))
            .unwrap();
    let tcp = TcpStream::connect(a1).await.unwrap();
    let refused = async {
        let mut s = imposter.connect(a1, tcp).await?;
        auth::dial(&mut s, 2, 1, Some(&cookie))
            .await
            .map_err(std::io::Error::other)
    };
    assert!(timeout(WAIT, refused).await.unwrap().is_err());

    // The cluster's own certificate gets through.
    let tcp = TcpStream::connect(a1).await.unwrap();
    let mut s = tls.connect(a1, tcp).await.unwrap();
    auth::dial(&mut s, 3, 1, Some(&cookie)).await.unwrap();
    let (env, buf) = frame(3);
    s.write_all(&buf).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(timeout(WAIT, in1.recv()).await.unwrap(), Some(env));
}

/// `env` readdressed to `to`.
fn to(mut env: Envelope, to: Endpoint) -> Envelope {
    env.to = to;
    env
}

/// Every frame of `buf`, each as the envelopes it decodes to.
fn frames(mut buf: BytesMut) -> Vec<Vec<Envelope>> {
    let mut out = Vec::new();
    while let Some((env, broker)) = wire::decode_copies(&mut buf, MAX_FRAME_DEFAULT).unwrap() {
        out.push(std::iter::once(env).chain(broker).collect());
    }
    assert!(buf.is_empty());
    out
}

#[test]
fn an_append_repeated_to_the_nodes_broker_shares_the_stores_frame() {
    let a = append(5);
    let b = append(6);
    let mut batch = vec![
        a.clone(),
        b.clone(),
        to(a.clone(), Endpoint::broker(2)),
        to(b.clone(), Endpoint::broker(2)),
    ];
    let mut buf = BytesMut::new();
    encode_batch(2, &mut batch, &mut buf, MAX_FRAME_DEFAULT);
    assert_eq!(
        frames(buf),
        vec![
            vec![a.clone(), to(a.clone(), Endpoint::broker(2))],
            vec![b.clone(), to(b.clone(), Endpoint::broker(2))],
        ]
    );
}

#[test]
fn the_broker_keeps_its_order_and_different_appends_go_apart() {
    let a = append(5);
    let heartbeat = to(append(9), Endpoint::broker(2));
    let mut other_stable = to(a.clone(), Endpoint::broker(2));
    if let Message::Append(Append { stable, .. }) = &mut other_stable.msg {
        *stable = 4;
    }
    // A broker message between the two copies: merging would overtake it.
    let mut batch = vec![
        a.clone(),
        heartbeat.clone(),
        to(a.clone(), Endpoint::broker(2)),
    ];
    let mut buf = BytesMut::new();
    encode_batch(2, &mut batch, &mut buf, MAX_FRAME_DEFAULT);
    assert_eq!(
        frames(buf),
        vec![
            vec![a.clone()],
            vec![heartbeat],
            vec![to(a.clone(), Endpoint::broker(2))]
        ]
    );
    // Not the same Append (another stable index): two frames.
    let mut batch = vec![a.clone(), other_stable.clone()];
    let mut buf = BytesMut::new();
    encode_batch(2, &mut batch, &mut buf, MAX_FRAME_DEFAULT);
    assert_eq!(frames(buf), vec![vec![a], vec![other_stable]]);
}

#[tokio::test]
async fn a_shared_frame_reaches_both_services_over_tcp() {
    let (l1, a1) = bind().await;
    let (l2, a2) = bind().await;
    let (mut t1, _in1) =
        Transport::start(1, l1, HashMap::from([(2, a2)]), TransportOptions::default());
    let (_t2, mut in2) =
        Transport::start(2, l2, HashMap::from([(1, a1)]), TransportOptions::default());
    let mut sent = Vec::new();
    for i in 1..=200 {
        let env = append(i);
        t1.send(env.clone());
        t1.send(to(env.clone(), Endpoint::broker(2)));
        sent.push(env.clone());
        sent.push(to(env, Endpoint::broker(2)));
    }
    // Per service, everything arrives, in order.
    let mut got = Vec::new();
    for _ in 0..sent.len() {
        got.push(timeout(WAIT, in2.recv()).await.unwrap().unwrap());
    }
    for service in [Endpoint::store(2), Endpoint::broker(2)] {
        let want: Vec<_> = sent.iter().filter(|e| e.to == service).collect();
        let have: Vec<_> = got.iter().filter(|e| e.to == service).collect();
        assert_eq!(have, want);
    }
}
