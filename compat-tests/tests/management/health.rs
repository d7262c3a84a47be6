//! Overview, whoami, cluster name, aliveness and the health checks.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_whoami_and_health_checks() {
    let broker = start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let q = unique("mgmt-overview");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"one").await;

    let o = api.get_until("/api/overview", "the queued message", |o| {
        o["queue_totals"]["messages_ready"].as_u64() >= Some(1)
    });
    assert!(
        o["management_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("3."))
    );
    assert!(
        o["rabbitmq_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("3."))
    );
    assert!(o["cluster_name"].is_string());
    let node = o["node"].as_str().expect("node name").to_string();
    assert!(node.contains('@'), "RabbitMQ-style node name: {node}");
    assert!(o["object_totals"]["queues"].as_u64() >= Some(1));
    assert!(o["object_totals"]["exchanges"].as_u64() >= Some(6));
    assert!(o["object_totals"]["connections"].as_u64() >= Some(1));
    assert!(o["object_totals"]["channels"].as_u64() >= Some(1));
    assert!(o["object_totals"]["consumers"].is_u64());
    assert!(o["queue_totals"]["messages"].as_u64() >= Some(1));
    assert!(o["queue_totals"]["messages_unacknowledged"].is_u64());
    assert!(o["message_stats"].is_object());
    let amqp = find(&o["listeners"], |l| l["protocol"] == "amqp");
    assert!(
        amqp.iter().any(|l| l["port"] == broker.addr().port()),
        "AMQP listener in {:#}",
        o["listeners"]
    );

    assert_eq!(
        api.get_ok("/api/whoami"),
        json!({"name": "guest", "tags": ["administrator"]})
    );
    assert_eq!(api.get_ok("/api/cluster-name")["name"], o["cluster_name"]);
    assert_eq!(
        api.get_ok("/api/aliveness-test/%2F"),
        json!({"status": "ok"})
    );
    assert_eq!(api.status("/api/aliveness-test/no-such-vhost"), 404);
    assert_eq!(
        api.get_ok("/api/health/checks/alarms"),
        json!({"status": "ok"})
    );
    assert_eq!(
        api.get_ok("/api/health/checks/local-alarms"),
        json!({"status": "ok"})
    );
    assert_eq!(
        api.get_ok("/api/health/checks/virtual-hosts"),
        json!({"status": "ok"})
    );
    let port = broker.addr().port();
    assert_eq!(
        api.get_ok(&format!("/api/health/checks/port-listener/{port}")),
        json!({"status": "ok", "port": port})
    );
    let (status, body) = api.get_as(
        Some(("guest", "guest")),
        "/api/health/checks/port-listener/1",
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "failed");
    assert_eq!(body["missing"], 1);
    assert!(
        body["ports"]
            .as_array()
            .is_some_and(|p| p.contains(&json!(port)))
    );
    assert_eq!(api.status("/api/health/checks/port-listener/abc"), 400);
    assert_eq!(api.status("/api/no-such-endpoint"), 404);
    if !broker.is_external() {
        // The stream protocol's listener, as RabbitMQ's stream plugin
        // lists it (`rabbitmq-diagnostics check_protocol_listener stream`).
        let stream = broker.stream_port;
        let listed = find(&o["listeners"], |l| l["protocol"] == "stream");
        assert!(
            listed.iter().any(|l| l["port"] == stream),
            "stream listener in {:#}",
            o["listeners"]
        );
        assert_eq!(
            api.get_ok("/api/health/checks/protocol-listener/stream"),
            json!({"status": "ok", "protocol": "stream"})
        );
        assert_eq!(
            api.get_ok(&format!("/api/health/checks/port-listener/{stream}")),
            json!({"status": "ok", "port": stream})
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_alarm_fails_the_alarm_health_checks() {
    // A 1-byte memory watermark: the alarm is on from the first check (1 s).
    let broker = Broker::start_with(BrokerOptions {
        config_toml: Some("memory_high_watermark_bytes = 1\n".into()),
        ..Default::default()
    });
    if broker.is_external() {
        return; // RabbitMQ's alarms cannot be raised from here.
    }
    let api = Api::new(&broker);
    let deadline = Instant::now() + Duration::from_secs(20);
    for path in [
        "/api/health/checks/alarms",
        "/api/health/checks/local-alarms",
    ] {
        loop {
            let (status, body) = api.get_as(Some(("guest", "guest")), path);
            if status == 503 {
                assert_eq!(body["status"], "failed");
                let node = api.get_ok("/api/overview")["node"].clone();
                assert_eq!(
                    body["alarms"],
                    json!([{"node": node, "resource": "memory"}])
                );
                break;
            }
            assert_eq!(status, 200, "{path}: {body}");
            assert!(Instant::now() < deadline, "{path} never reported the alarm");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The rest of the API still answers during an alarm.
    assert_eq!(
        api.get_ok("/api/aliveness-test/%2F"),
        json!({"status": "ok"})
    );
}
