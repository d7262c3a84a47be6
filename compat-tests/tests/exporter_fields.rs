//! The management API as two third-party tools read it, field by field:
//!
//! - kbudde/rabbitmq_exporter (the Prometheus exporter many RabbitMQ users ran
//!   before rabbitmq_prometheus). It GETs `/api/{overview,queues,exchanges,
//!   nodes,connections}?sort=` and `/api/nodes/{node}/memory?sort=` and
//!   `/api/aliveness-test/{vhost}`, and flattens each JSON object into
//!   `a.b.c -> number` (numbers and booleans; an array `x` becomes `x_len`),
//!   taking labels from string fields. A field we leave out or give another type
//!   silently drops its series, so these tests read the fields the way it does
//!   ([`flatten`]) and check their values for objects a real client made.
//! - amqp091-go's integration test helpers (internal/utils/http.go): they list
//!   `GET /api/connections/` (trailing slash) for `name` and
//!   `client_properties.connection_name`, and close one with
//!   `DELETE /api/connections/{url.PathEscape(name)}`.
//!
//! Neither tool can be built on this machine (the exporter is not packaged by
//! any registry it reaches, and the helpers are newer than Debian's amqp091-go
//! 1.5.0), so their reads are reproduced here from their source. amqp091-go
//! 1.5.0's own integration tests run against StableMQ in
//! scripts/amqp091-go-check.sh.
//!
//! These also run against RabbitMQ 3.10: set `STABLEMQ_TEST_EXTERNAL_URI` and
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT`.

use compat_tests::common;
mod http;

use common::*;
use http::{Api, enc};
use lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The exporter's reading of one JSON object: every number and boolean under
/// its dotted path, every array as `path_len`.
fn flatten(v: &Value) -> BTreeMap<String, f64> {
    fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, f64>) {
        let Value::Object(map) = v else { return };
        for (k, v) in map {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Number(n) => {
                    out.insert(key, n.as_f64().unwrap_or(f64::NAN));
                }
                Value::Bool(b) => {
                    out.insert(key, f64::from(u8::from(*b)));
                }
                Value::Array(a) => {
                    out.insert(format!("{key}_len"), a.len() as f64);
                }
                Value::Object(_) => walk(&key, v, out),
                _ => {}
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", v, &mut out);
    out
}

/// The value the exporter would chart for `key`, or a failure naming it.
#[track_caller]
fn num(flat: &BTreeMap<String, f64>, key: &str, what: &str) -> f64 {
    *flat
        .get(key)
        .unwrap_or_else(|| panic!("{what}: no number at `{key}` (the exporter drops that series)"))
}

/// A label the exporter takes from a string field.
#[track_caller]
fn label<'a>(v: &'a Value, key: &str, what: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: `{key}` is not a string: {}", v[key]))
}

/// Go's `url.PathEscape`: what amqp091-go's helper puts in the DELETE path.
fn go_path_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z'
            | b'A'..=b'Z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'$'
            | b'&'
            | b'+'
            | b':'
            | b'='
            | b'@' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporter_reads_queue_exchange_node_and_connection_fields() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let name = unique("exporter-probe");
    let (queue, exchange) = (format!("{name}-q"), format!("{name}-x"));

    // One connection with a publisher channel and a consumer channel holding
    // two unacked messages: 7 published, 5 ready, 2 unacked.
    let props = ConnectionProperties::default().with_connection_name(name.as_str().into());
    let conn = within("connect", Connection::connect(&broker.uri(), props))
        .await
        .expect("connect");
    let ch = confirm_channel(&conn).await;
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(100));
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(
        "queue.declare",
        ch.queue_declare(queue.as_str().into(), durable, args),
    )
    .await
    .expect("queue.declare");
    within(
        "exchange.declare",
        ch.exchange_declare(
            exchange.as_str().into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.declare");
    within(
        "queue.bind",
        ch.queue_bind(
            queue.as_str().into(),
            exchange.as_str().into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.bind");
    // The first two (the ones the consumer below will hold) transient, the
    // other five persistent.
    for i in 0..7 {
        let mode = if i < 2 { 1 } else { 2 };
        let props = lapin::BasicProperties::default().with_delivery_mode(mode);
        publish_props(&ch, &exchange, "k", b"hello", props).await;
    }
    let ch2 = channel(&conn).await;
    within("basic.qos", ch2.basic_qos(2, BasicQosOptions::default()))
        .await
        .expect("basic.qos");
    let _consumer = within(
        "basic.consume",
        ch2.basic_consume(
            queue.as_str().into(),
            "probe".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("basic.consume");

    // overview: node, versions and cluster name as labels; object and queue totals.
    let overview = api.get_until("/api/overview?sort=", "our objects", |o| {
        let f = flatten(o);
        let at_least = |k: &str, n: f64| f.get(k).is_some_and(|v| *v >= n);
        at_least("queue_totals.messages", 7.0)
            && at_least("object_totals.consumers", 1.0)
            && at_least("object_totals.channels", 2.0)
            && at_least("object_totals.connections", 1.0)
    });
    let node = label(&overview, "node", "overview").to_string();
    label(&overview, "rabbitmq_version", "overview");
    label(&overview, "erlang_version", "overview");
    label(&overview, "cluster_name", "overview");
    let o = flatten(&overview);
    for key in [
        "object_totals.channels",
        "object_totals.connections",
        "object_totals.consumers",
        "object_totals.queues",
        "object_totals.exchanges",
        "queue_totals.messages",
        "queue_totals.messages_ready",
        "queue_totals.messages_unacknowledged",
        "message_stats.publish_details.rate",
    ] {
        num(&o, key, "overview");
    }

    // queues: labels vhost, name, durable (a boolean), policy, state, node.
    let queues = api.get_until("/api/queues?sort=", "7 messages, 2 unacked", |l| {
        l.as_array().into_iter().flatten().any(|q| {
            q["name"] == queue.as_str()
                && q["messages"] == 7
                && q["messages_unacknowledged"] == 2
                && q["message_stats"]["publish"] == 7
        })
    });
    let q = queues
        .as_array()
        .expect("queue list")
        .iter()
        .find(|q| q["name"] == queue.as_str())
        .expect("our queue");
    assert_eq!(label(q, "vhost", "queue"), "/");
    assert_eq!(q["durable"], true, "durable is the label `durable`");
    assert!(q["policy"].is_null() || q["policy"].is_string());
    assert_eq!(label(q, "state", "queue"), "running");
    assert_eq!(
        label(q, "node", "queue"),
        node,
        "queue on the overview's node"
    );
    let f = flatten(q);
    let want = [
        ("messages", 7.0),
        ("messages_ready", 5.0),
        ("messages_unacknowledged", 2.0),
        ("message_bytes", 35.0),
        ("message_bytes_ready", 25.0),
        ("message_bytes_unacknowledged", 10.0),
        ("consumers", 1.0),
        ("message_stats.publish", 7.0),
        ("message_stats.deliver", 2.0),
        ("arguments.x-max-length", 100.0),
    ];
    for (key, value) in want {
        assert_eq!(num(&f, key, "queue"), value, "queue {key}");
    }
    // Held in memory: RabbitMQ pages durable queues' messages out, StableMQ
    // pages only past its RAM budget, far above these 7 messages (the `_ram`
    // counts equal the totals).
    for (key, value) in [
        ("messages_ram", 7.0),
        ("messages_ready_ram", 5.0),
        ("messages_unacknowledged_ram", 2.0),
        ("message_bytes_ram", 35.0),
    ] {
        let got = num(&f, key, "queue");
        if !broker.is_external() {
            assert_eq!(got, value, "queue {key}");
        }
    }
    for key in [
        "message_stats.publish_details.rate",
        "message_stats.deliver_details.rate",
        "message_stats.deliver_no_ack",
        "message_stats.get",
        "message_stats.get_no_ack",
        "message_stats.redeliver",
        "message_stats.ack",
    ] {
        num(&f, key, "queue");
    }
    // Persistence, memory and consumer capacity: 5 ready messages are
    // persistent, and the consumer holds 2 (transient) with more waiting.
    for (key, value) in [
        ("messages_persistent", 5.0),
        ("message_bytes_persistent", 25.0),
    ] {
        assert_eq!(num(&f, key, "queue"), value, "queue {key}");
    }
    assert!(num(&f, "memory", "queue") > 0.0, "queue memory");
    for key in ["consumer_utilisation", "consumer_capacity"] {
        let u = num(&f, key, "queue");
        assert!((0.0..=1.0).contains(&u), "queue {key} {u}");
    }
    if let Some(idle) = q.get("idle_since").and_then(Value::as_str) {
        // The exporter parses "2006-01-02 15:04:05" or "2006-01-02T15:04:05.999-07:00".
        assert!(
            idle.len() >= 19 && idle.as_bytes()[4] == b'-',
            "idle_since {idle}"
        );
    }

    // exchanges: labels vhost, name; publish_in and publish_out counters.
    let exchanges = api.get_until("/api/exchanges?sort=", "7 published in and out", |l| {
        l.as_array().into_iter().flatten().any(|x| {
            x["name"] == exchange.as_str()
                && x["message_stats"]["publish_in"] == 7
                && x["message_stats"]["publish_out"] == 7
        })
    });
    let x = exchanges
        .as_array()
        .expect("exchange list")
        .iter()
        .find(|x| x["name"] == exchange.as_str())
        .expect("our exchange");
    assert_eq!(label(x, "vhost", "exchange"), "/");

    // nodes: label name; memory, disk, fds, sockets, uptime, alarms, partitions.
    let nodes = api.get("/api/nodes?sort=");
    assert_eq!(nodes.status, 200);
    let n = nodes
        .body
        .as_array()
        .expect("node list")
        .iter()
        .find(|n| n["name"] == node.as_str())
        .expect("the overview's node in /api/nodes");
    let f = flatten(n);
    assert_eq!(num(&f, "running", "node"), 1.0);
    assert!(num(&f, "uptime", "node") > 0.0, "uptime in ms");
    assert!(num(&f, "mem_used", "node") > 1e6, "resident memory");
    assert!(num(&f, "mem_limit", "node") > num(&f, "mem_used", "node"));
    assert_eq!(num(&f, "mem_alarm", "node"), 0.0);
    assert!(num(&f, "disk_free", "node") > 0.0);
    assert!(num(&f, "disk_free_limit", "node") > 0.0);
    assert_eq!(num(&f, "disk_free_alarm", "node"), 0.0);
    assert!(num(&f, "fd_used", "node") >= 1.0);
    assert!(num(&f, "fd_total", "node") >= num(&f, "fd_used", "node"));
    // RabbitMQ 3.10 reports 0 sockets used whatever is open; StableMQ counts them.
    assert!(num(&f, "sockets_total", "node") >= num(&f, "sockets_used", "node"));
    assert!(num(&f, "sockets_total", "node") >= 1.0);
    assert_eq!(num(&f, "partitions_len", "node"), 0.0);

    // The memory module: /api/nodes/{node}/memory (the node name unescaped, '@' and all).
    let mem = api.get(&format!("/api/nodes/{node}/memory?sort="));
    assert_eq!(mem.status, 200, "{:?}", mem.body);
    let m = flatten(&mem.body);
    assert!(num(&m, "memory.total.rss", "memory") > 1e6);
    num(&m, "memory.total.allocated", "memory");
    num(&m, "memory.total.erlang", "memory");

    // connections: labels vhost, node, peer_host, user, state; socket traffic.
    let conns = api.get_until("/api/connections?sort=", "traffic on our connection", |l| {
        l.as_array().into_iter().flatten().any(|c| {
            c["client_properties"]["connection_name"] == name.as_str()
                && c["channels"] == 2
                && c["recv_oct"].as_u64().unwrap_or(0) > 0
        })
    });
    let c = conns
        .as_array()
        .expect("connection list")
        .iter()
        .find(|c| c["client_properties"]["connection_name"] == name.as_str())
        .expect("our connection");
    assert!(c["name"].is_string(), "the exporter keys items by name");
    assert_eq!(label(c, "vhost", "connection"), "/");
    assert_eq!(label(c, "node", "connection"), node);
    assert_eq!(label(c, "peer_host", "connection"), "127.0.0.1");
    assert_eq!(label(c, "user", "connection"), "guest");
    assert_eq!(label(c, "state", "connection"), "running");
    let f = flatten(c);
    assert_eq!(num(&f, "channels", "connection"), 2.0);
    // Handshake, 2 channel opens, declares, 7 publishes with their bodies...
    assert!(num(&f, "recv_oct", "connection") > 7.0 * 5.0);
    assert!(num(&f, "recv_cnt", "connection") >= 1.0);
    // ...and start, tune, confirms and 2 deliveries back.
    assert!(num(&f, "send_oct", "connection") > 2.0 * 5.0);
    assert!(num(&f, "send_cnt", "connection") >= 1.0);
    num(&f, "send_pend", "connection");

    // The aliveness module.
    let alive = api.get("/api/aliveness-test/%2F");
    assert_eq!(alive.status, 200);
    assert_eq!(alive.body["status"], "ok");

    conn.close(200, "bye".into()).await.ok();
}

/// What amqp091-go's helpers do to test connection recovery: find a connection
/// by its client-given name in `GET /api/connections/`, then close it with
/// `DELETE /api/connections/{url.PathEscape(name)}`. The client sees 320
/// CONNECTION_FORCED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp091_go_helpers_find_and_drop_a_connection_by_name() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let label = unique("go-helper");
    let props = ConnectionProperties::default().with_connection_name(label.as_str().into());
    let conn = within("connect", Connection::connect(&broker.uri(), props))
        .await
        .expect("connect");
    let mut errors = ErrorWatch::new(&conn);

    let list = api.get_until("/api/connections/", "our connection", |l| {
        l.as_array()
            .into_iter()
            .flatten()
            .any(|c| c["client_properties"]["connection_name"] == label.as_str())
    });
    let name = list
        .as_array()
        .expect("list")
        .iter()
        .find(|c| c["client_properties"]["connection_name"] == label.as_str())
        .and_then(|c| c["name"].as_str())
        .expect("a string name")
        .to_string();

    let gone = api.delete(&format!("/api/connections/{}", go_path_escape(&name)));
    assert!(
        [200, 201, 204].contains(&gone.status),
        "DELETE answered {}: {:?}",
        gone.status,
        gone.body
    );
    errors
        .expect(CONNECTION_FORCED, "closed through the API")
        .await;
    let left = api.get_until("/api/connections/", "our connection gone", |l| {
        !l.as_array()
            .into_iter()
            .flatten()
            .any(|c| c["client_properties"]["connection_name"] == label.as_str())
    });
    assert!(left.is_array());
    assert_eq!(
        api.get(&format!("/api/connections/{}", enc(&name))).status,
        404,
        "gone by name too"
    );
}
