//! How a stream client shows to operators: listed under its protocol by the
//! management API, its traffic and errors counted by Prometheus.

use super::*;

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
