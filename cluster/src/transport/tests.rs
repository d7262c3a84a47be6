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
        msg: Message::Append {
            epoch: 1,
            prev: crate::LogPosition::new(1, index - 1),
            entries: vec![Entry::new(1, index, format!("payload {index}"))],
            stable: 0,
            floor: 0,
        },
    }
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
    let env = Envelope {
        from: Endpoint::store(3),
        to: Endpoint::broker(1),
        msg: Message::FenceRefused { promised: 4 },
    };
    let mut buf = BytesMut::new();
    wire::encode(&env, &mut buf, MAX_FRAME_DEFAULT).unwrap();
    good.write_all(&buf).await.unwrap();
    assert_eq!(timeout(WAIT, in1.recv()).await.unwrap(), Some(env));
}
