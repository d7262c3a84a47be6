//! AMQP class `connection`: handshake, authentication, vhost access, server
//! properties, tuning, heartbeats and close, as RabbitMQ does them.

use compat_tests::common;

use std::time::Duration;

use common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Config for tests that need a second vhost and a non-guest user. RabbitMQ needs
/// the same by hand: `rabbitmqctl add_vhost other; add_user alice secret;
/// set_permissions -p other alice ".*" ".*" ".*"; set_permissions -p / alice ".*"
/// ".*" ".*"`.
const ALICE_CONFIG: &str = r#"
vhosts = ["/", "other"]

[[users]]
name = "alice"
password = "secret"
tags = ["administrator"]
"#;

fn broker_with_alice() -> Broker {
    Broker::start_with(BrokerOptions {
        config_toml: Some(ALICE_CONFIG.to_string()),
        ..Default::default()
    })
}

async fn try_connect(uri: &str) -> lapin::Result<Connection> {
    within(
        "connection attempt",
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_connects_from_loopback() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    assert!(conn.status().connected());
    assert_eq!(conn.status().username(), "guest");
    assert_eq!(conn.status().vhost().as_str(), "/");
    // The connection is usable: a channel opens and a declare round-trips.
    let ch = channel(&conn).await;
    let q = declare_queue(&ch, &unique("conn-guest")).await;
    assert_eq!(q.message_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused_with_access_refused() {
    let broker = Broker::start();
    let res = try_connect(&broker.uri_with("guest", "not-the-password", "/")).await;
    // RabbitMQ advertises authentication_failure_close and sends connection.close
    // 403 ACCESS_REFUSED ("Login was refused using authentication mechanism PLAIN").
    assert_code(res, ACCESS_REFUSED, "connect with a wrong password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_user_is_refused_with_access_refused() {
    let broker = Broker::start();
    let res = try_connect(&broker.uri_with("nobody-such", "guest", "/")).await;
    assert_code(res, ACCESS_REFUSED, "connect as an unknown user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_is_refused_with_not_allowed() {
    let broker = Broker::start();
    let res = try_connect(&broker.uri_with("guest", "guest", &unique("no-such-vhost"))).await;
    // connection.open of a missing vhost: connection.close 530 NOT_ALLOWED
    // ("vhost ... not found").
    assert_code(res, NOT_ALLOWED, "connection.open of an unknown vhost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_user_uses_configured_vhost_in_isolation() {
    let broker = broker_with_alice();
    let alice = connect_uri(&broker.uri_with("alice", "secret", "other")).await;
    assert_eq!(alice.status().username(), "alice");
    assert_eq!(alice.status().vhost().as_str(), "other");
    let ach = confirm_channel(&alice).await;
    let q = unique("conn-vhost");
    declare_queue(&ach, &q).await;
    publish(&ach, "", &q, b"in other").await;
    assert_eq!(get_body(&ach, &q).await.as_deref(), Some(&b"in other"[..]));

    // The same queue name does not exist in "/": vhosts are separate namespaces.
    // (alice, not guest: whether guest survives a users list is config policy.)
    let alice_root = connect_uri(&broker.uri_with("alice", "secret", "/")).await;
    let gch = channel(&alice_root).await;
    let res = gch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_code(res, NOT_FOUND, "passive declare of another vhost's queue");

    // A wrong password for a configured user is refused like guest's.
    let res = try_connect(&broker.uri_with("alice", "wrong", "other")).await;
    assert_code(res, ACCESS_REFUSED, "alice with a wrong password");
}

/// What lapin hides: connection.start as the broker sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_properties_advertise_rabbitmq_capabilities() {
    let broker = Broker::start();
    let mut raw = RawConn::connect(broker.addr()).await;
    let start = raw.read_start().await;
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    let mechanisms = start.mechanisms.to_string();
    assert!(
        mechanisms.split_whitespace().any(|m| m == "PLAIN"),
        "mechanisms {mechanisms:?} lack PLAIN"
    );
    let locales = start.locales.to_string();
    assert!(
        locales.split_whitespace().any(|l| l == "en_US"),
        "locales {locales:?} lack en_US"
    );

    let props = start.server_properties.inner();
    for key in ["product", "version", "platform", "cluster_name"] {
        match props.get(key) {
            Some(AMQPValue::LongString(s)) => assert!(!s.is_empty(), "{key} is empty"),
            other => panic!("server property {key}: expected a long string, got {other:?}"),
        }
    }
    let caps = match props.get("capabilities") {
        Some(AMQPValue::FieldTable(t)) => t.inner(),
        other => panic!("capabilities: expected a table, got {other:?}"),
    };
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "per_consumer_qos",
        "authentication_failure_close",
        "connection.blocked",
    ] {
        assert_eq!(
            caps.get(cap),
            Some(&AMQPValue::Boolean(true)),
            "capability {cap}"
        );
    }
}

/// RabbitMQ's defaults: channel_max 2047, frame_max 131072, heartbeat 60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_proposes_rabbitmq_defaults() {
    let broker = Broker::start();
    let mut raw = RawConn::connect(broker.addr()).await;
    raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    assert_eq!(tune.channel_max, 2047, "channel_max proposal");
    assert_eq!(tune.frame_max, 131072, "frame_max proposal");
    assert_eq!(tune.heartbeat, 60, "heartbeat proposal");

    // Accepting the proposal opens the connection.
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_takes_the_lower_client_limits_and_broker_respects_them() {
    let broker = Broker::start();
    let uri = format!("{}?frame_max=4096&channel_max=10", broker.uri());
    let conn = connect_uri(&uri).await;
    assert_eq!(conn.configuration().frame_max(), 4096);
    assert_eq!(conn.configuration().channel_max(), 10);

    // lapin fails the connection on any inbound frame above the negotiated
    // frame_max, so a 64 KiB body proves the broker splits its deliveries to 4096.
    let ch = confirm_channel(&conn).await;
    let q = unique("conn-frame-max");
    declare_queue(&ch, &q).await;
    let body: Vec<u8> = (0..65_536u32).map(|i| (i % 251) as u8).collect();
    publish(&ch, "", &q, &body).await;
    let mut consumer = consume(&ch, &q, "", true).await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data.len(), body.len());
    assert!(d.data == body, "body changed in transit");
    let got = get_body(&ch, &q).await;
    assert!(got.is_none());
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_negotiates_to_the_lower_value() {
    let broker = Broker::start();
    // The client asks 5 s; the broker proposes 60 s; the lower one wins.
    let conn = connect_uri(&format!("{}?heartbeat=5", broker.uri())).await;
    assert_eq!(conn.configuration().heartbeat(), 5);
    // A client that asks nothing (0) takes the broker's proposal.
    let conn2 = connect(&broker).await;
    assert_eq!(conn2.configuration().heartbeat(), 60);
    drop(conn);
    drop(conn2);
}

/// With a 1 s heartbeat an idle lapin connection lives on: the broker sends
/// heartbeats (lapin would fail the connection without them) and accepts lapin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connection_with_heartbeats_stays_open() {
    let broker = Broker::start();
    let conn = connect_uri(&format!("{}?heartbeat=1", broker.uri())).await;
    assert_eq!(conn.configuration().heartbeat(), 1);
    let ch = confirm_channel(&conn).await;
    let q = unique("conn-hb");
    declare_queue(&ch, &q).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(conn.status().connected(), "connection died while idle");
    publish(&ch, "", &q, b"still here").await;
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"still here"[..]));
}

/// A client that negotiates heartbeats and then goes silent gets heartbeat frames
/// on channel 0, and then has its socket closed (RabbitMQ closes the TCP connection
/// without a connection.close after missed heartbeats).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_gets_heartbeats_then_is_disconnected() {
    let broker = Broker::start();
    let mut raw = RawConn::connect(broker.addr()).await;
    raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 1, "/")
        .await;
    let mut heartbeats = 0;
    within("the broker to drop a silent client", async {
        while let Some(f) = raw.read_frame().await {
            if f.kind == FRAME_HEARTBEAT {
                assert_eq!(f.channel, 0, "heartbeat on a non-zero channel");
                assert!(f.payload.is_empty(), "heartbeat with a payload");
                heartbeats += 1;
            }
        }
    })
    .await;
    assert!(heartbeats >= 1, "no heartbeat before the disconnect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_amqp_protocol_header_gets_the_supported_header_back() {
    let broker = Broker::start();
    let mut s = within("tcp connect", tokio::net::TcpStream::connect(broker.addr()))
        .await
        .expect("tcp connect");
    // Exactly 8 bytes, the size of a protocol header, so the broker has read all
    // we sent when it closes (unread bytes would turn its close into a reset).
    s.write_all(b"GET / HT").await.expect("write");
    let mut buf = Vec::new();
    within("the broker to close", async {
        let mut chunk = [0u8; 64];
        while let Ok(n) = s.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    // Spec 4.2.2: reply with the supported protocol header, then close.
    assert_eq!(buf, b"AMQP\x00\x00\x09\x01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_close_is_acknowledged() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("conn-close");
    declare_queue_with(
        &ch,
        &q,
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    within("connection.close-ok", conn.close(200, "bye".into()))
        .await
        .expect("connection.close");
    // lapin resolves close() a moment before it marks the connection closed.
    within("lapin to mark the connection closed", async {
        while !conn.status().closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(conn.create_channel().await.is_err());

    // The broker really ended the connection: its exclusive queue is gone.
    let (_c2, ch2) = open(&broker).await;
    let res = ch2
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_code(
        res,
        NOT_FOUND,
        "exclusive queue after its connection closed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_channels_on_one_connection() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let mut chans = Vec::new();
    for _ in 0..100 {
        chans.push(confirm_channel(&conn).await);
    }
    let mut ids: Vec<u16> = chans.iter().map(|c| c.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 100, "channel ids are not distinct");

    let prefix = unique("conn-many");
    for (i, ch) in chans.iter().enumerate() {
        let q = format!("{prefix}-{i}");
        declare_queue(ch, &q).await;
        publish(ch, "", &q, format!("m{i}").as_bytes()).await;
    }
    // Read each queue from a different channel than the one that filled it.
    for (i, ch) in chans.iter().enumerate() {
        let q = format!("{prefix}-{}", (i + 1) % 100);
        let want = format!("m{}", (i + 1) % 100);
        assert_eq!(get_body(ch, &q).await, Some(want.into_bytes()));
    }
    for ch in &chans {
        within("channel.close", ch.close(200, "OK".into()))
            .await
            .expect("channel.close");
    }
    assert!(conn.status().connected());
}
