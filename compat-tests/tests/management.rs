//! The management HTTP API's read side, against the real binary: objects
//! made by a real client (lapin) must show up with RabbitMQ's field names and
//! the right values, and credentials and tags decide who reads what.
//!
//! The shapes were taken from a RabbitMQ 3.10.8 node. To run these tests
//! against one, set `STABLEMQ_TEST_EXTERNAL_URI` as for the other tests and
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT` to its management port; the tests
//! then create their users and vhost through RabbitMQ's API.

mod common;
mod http;

use common::*;
use http::{Api, enc};
use lapin::options::{
    BasicQosOptions, ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Users besides guest: one per tag that changes what the API shows.
const USERS: [(&str, &str); 3] = [("mon", "monitoring"), ("mgmt", "management"), ("notag", "")];
const PASSWORD: &str = "pw-123";

/// A broker with the test users and a second vhost.
fn start() -> Broker {
    let mut toml = String::from(
        "vhosts = [\"/\", \"other\"]\n\
         [[users]]\nname = \"guest\"\npassword = \"guest\"\ntags = [\"administrator\"]\n",
    );
    for (name, tag) in USERS {
        let tags = if tag.is_empty() {
            String::new()
        } else {
            format!("\"{tag}\"")
        };
        toml.push_str(&format!(
            "[[users]]\nname = \"{name}\"\npassword = \"{PASSWORD}\"\ntags = [{tags}]\n"
        ));
    }
    let broker = Broker::start_with(BrokerOptions {
        config_toml: Some(toml),
        ..Default::default()
    });
    if broker.is_external() {
        // RabbitMQ: create the same users and vhost through its API. The
        // tests run in parallel and each makes them; RabbitMQ answers 400
        // now and then when two such writes race, so a write is retried.
        let api = Api::new(&broker);
        let put = |path: String, body: serde_json::Value| {
            for _ in 0..10 {
                let a = api.put(&path, &body);
                if a.status < 300 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            panic!("PUT {path} kept failing");
        };
        for (name, tag) in USERS {
            put(
                format!("/api/users/{name}"),
                json!({"password": PASSWORD, "tags": tag}),
            );
        }
        put("/api/vhosts/other".into(), json!({}));
    }
    broker
}

/// The entries of a JSON list that match `pred`.
fn find(list: &Value, pred: impl Fn(&Value) -> bool) -> Vec<&Value> {
    list.as_array()
        .unwrap_or_else(|| panic!("expected a JSON list, got {list}"))
        .iter()
        .filter(|v| pred(v))
        .collect()
}

/// Exactly one entry of a JSON list that matches `pred`.
fn one<'a>(list: &'a Value, what: &str, pred: impl Fn(&Value) -> bool) -> &'a Value {
    let found = find(list, pred);
    assert_eq!(found.len(), 1, "expected one {what} in {list:#}");
    found[0]
}

/// Queue arguments the tests declare, and what the API must echo.
fn queue_args() -> (FieldTable, Value) {
    let args = ftable(&[
        ("x-max-length", AMQPValue::LongInt(10)),
        ("x-message-ttl", AMQPValue::LongInt(60_000)),
    ]);
    (args, json!({"x-max-length": 10, "x-message-ttl": 60000}))
}

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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_exchanges_and_bindings_show_what_clients_declared() {
    let broker = start();
    let api = Api::new(&broker);
    let (conn, ch) = open(&broker).await;
    let q = unique("mgmt-q");
    let x = unique("mgmt-x");
    let x2 = unique("mgmt-x2");
    let (args, args_json) = queue_args();
    let durable = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(&ch, &q, durable, args).await;
    let persistent = BasicProperties::default().with_delivery_mode(2);
    for body in [b"m1", b"m2", b"m3"] {
        publish_props(&ch, "", &q, body, persistent.clone()).await;
    }
    declare_exchange_args(
        &ch,
        &x,
        ExchangeKind::Topic,
        ftable(&[("alternate-exchange", lstr("amq.fanout"))]),
    )
    .await;
    within(
        "exchange.declare",
        ch.exchange_declare(
            x2.as_str().into(),
            ExchangeKind::Fanout,
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
            q.as_str().into(),
            x.as_str().into(),
            "a.#".into(),
            QueueBindOptions::default(),
            ftable(&[("k", AMQPValue::LongInt(1))]),
        ),
    )
    .await
    .expect("queue.bind");
    within(
        "exchange.bind",
        ch.exchange_bind(
            x2.as_str().into(),
            x.as_str().into(),
            "b.*".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.bind");
    // One consumer with prefetch 1 and a priority holds one message unacked.
    let cch = channel(&conn).await;
    within("basic.qos", cch.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("basic.qos");
    let mut consumer = consume_args(
        &cch,
        &q,
        "mgmt-ctag",
        Default::default(),
        ftable(&[("x-priority", AMQPValue::LongInt(5))]),
    )
    .await;
    next_delivery(&mut consumer).await;

    let path = format!("/api/queues/%2F/{}", enc(&q));
    let qj = api.get_until(&path, "one unacked and two ready, and the consumer", |v| {
        v["messages_unacknowledged"] == 1
            && v["messages_ready"] == 2
            && v["messages"] == 3
            && v["consumers"] == 1
            && v["message_bytes"] == 6
            && v["consumer_details"].as_array().map(Vec::len) == Some(1)
    });
    assert_eq!(qj["name"], q.as_str());
    assert_eq!(qj["vhost"], "/");
    assert_eq!(qj["messages"], 3);
    assert_eq!(qj["consumers"], 1);
    assert_eq!(qj["durable"], true);
    assert_eq!(qj["auto_delete"], false);
    assert_eq!(qj["exclusive"], false);
    assert_eq!(qj["type"], "classic");
    assert_eq!(qj["state"], "running");
    assert_eq!(qj["arguments"], args_json);
    assert_eq!(qj["node"], api.get_ok("/api/overview")["node"]);
    assert_eq!(qj["message_bytes"], 6);
    let c = &qj["consumer_details"][0];
    assert_eq!(c["consumer_tag"], "mgmt-ctag");
    assert_eq!(c["prefetch_count"], 1, "{qj:#}");
    assert_eq!(c["ack_required"], true);
    assert_eq!(c["arguments"], json!({"x-priority": 5}));
    assert_eq!(c["queue"], json!({"name": q, "vhost": "/"}));

    let all = api.get_ok("/api/queues");
    one(&all, "queue", |v| {
        v["name"] == q.as_str() && v["vhost"] == "/"
    });
    one(&api.get_ok("/api/queues/%2F"), "queue", |v| {
        v["name"] == q.as_str()
    });
    assert_eq!(api.status("/api/queues/no-such-vhost"), 404);
    assert_eq!(api.status("/api/queues/%2F/no-such-queue"), 404);

    let xj = api.get_ok(&format!("/api/exchanges/%2F/{}", enc(&x)));
    assert_eq!(xj["name"], x.as_str());
    assert_eq!(xj["type"], "topic");
    assert_eq!(xj["durable"], false);
    assert_eq!(xj["internal"], false);
    assert_eq!(xj["arguments"], json!({"alternate-exchange": "amq.fanout"}));
    let default = api.get_ok("/api/exchanges/%2F/amq.default");
    assert_eq!(
        (&default["name"], &default["type"]),
        (&json!(""), &json!("direct"))
    );
    let exchanges = api.get_ok("/api/exchanges/%2F");
    one(&exchanges, "amq.topic", |v| {
        v["name"] == "amq.topic" && v["type"] == "topic"
    });
    one(&exchanges, "x2", |v| {
        v["name"] == x2.as_str() && v["auto_delete"] == true
    });
    one(&api.get_ok("/api/exchanges"), "x", |v| {
        v["name"] == x.as_str()
    });
    assert_eq!(api.status("/api/exchanges/%2F/no-such-exchange"), 404);

    let bindings = api.get_ok("/api/bindings/%2F");
    let b = one(&bindings, "x -> q", |v| {
        v["source"] == x.as_str() && v["destination"] == q.as_str()
    });
    assert_eq!(b["destination_type"], "queue");
    assert_eq!(b["routing_key"], "a.#");
    assert_eq!(b["arguments"], json!({"k": 1}));
    assert_eq!(b["vhost"], "/");
    let key = b["properties_key"]
        .as_str()
        .expect("properties_key")
        .to_string();
    assert!(key.starts_with("a.%23~"), "{key}");
    let implicit = one(&bindings, "default binding", |v| {
        v["source"] == "" && v["destination"] == q.as_str()
    });
    assert_eq!(implicit["routing_key"], q.as_str());
    assert_eq!(implicit["properties_key"], q.as_str());
    let e2e = one(&bindings, "x -> x2", |v| v["destination"] == x2.as_str());
    assert_eq!(e2e["destination_type"], "exchange");
    assert_eq!(e2e["properties_key"], "b.%2A");
    one(&api.get_ok("/api/bindings"), "x -> q", |v| {
        v["source"] == x.as_str() && v["destination"] == q.as_str()
    });

    let between = format!("/api/bindings/%2F/e/{}/q/{}", enc(&x), enc(&q));
    assert_eq!(api.get_ok(&between).as_array().map(Vec::len), Some(1));
    let single = api.get_ok(&format!("{between}/{}", enc(&key)));
    assert_eq!(single["routing_key"], "a.#");
    assert_eq!(api.status(&format!("{between}/nope")), 404);
    let e2e_path = format!("/api/bindings/%2F/e/{}/e/{}", enc(&x), enc(&x2));
    assert_eq!(api.get_ok(&e2e_path)[0]["routing_key"], "b.*");
    let of_queue = api.get_ok(&format!("/api/queues/%2F/{}/bindings", enc(&q)));
    assert_eq!(of_queue.as_array().map(Vec::len), Some(2), "{of_queue:#}");
    let from_x = api.get_ok(&format!("/api/exchanges/%2F/{}/bindings/source", enc(&x)));
    assert_eq!(from_x.as_array().map(Vec::len), Some(2), "{from_x:#}");
    let into_x2 = api.get_ok(&format!(
        "/api/exchanges/%2F/{}/bindings/destination",
        enc(&x2)
    ));
    assert_eq!(into_x2.as_array().map(Vec::len), Some(1), "{into_x2:#}");
    assert_eq!(api.status("/api/bindings/no-such-vhost"), 404);

    within(
        "queue.delete",
        ch.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("queue.delete");
    within(
        "exchange.delete",
        ch.exchange_delete(x.as_str().into(), Default::default()),
    )
    .await
    .expect("exchange.delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_channels_and_consumers_name_their_clients() {
    let broker = start();
    let api = Api::new(&broker);
    let label = unique("mgmt-client");
    let props = ConnectionProperties::default().with_connection_name(label.as_str().into());
    let conn = within("connect", Connection::connect(&broker.uri(), props))
        .await
        .expect("connect");
    let ch = confirm_channel(&conn).await;
    let q = unique("mgmt-consumed");
    declare_queue(&ch, &q).await;
    let cch = channel(&conn).await;
    within("basic.qos", cch.basic_qos(7, BasicQosOptions::default()))
        .await
        .expect("basic.qos");
    let _consumer = consume(&cch, &q, "mgmt-consumer", false).await;

    let conns = api.get_until("/api/connections", "the labelled connection", |l| {
        !find(l, |c| {
            c["user_provided_name"] == label.as_str() && c["state"] == "running"
        })
        .is_empty()
    });
    let c = one(&conns, "connection", |c| {
        c["user_provided_name"] == label.as_str()
    });
    let port = broker.addr().port();
    let peer_port = c["peer_port"].as_u64().expect("peer_port");
    let name = format!("127.0.0.1:{peer_port} -> 127.0.0.1:{port}");
    assert_eq!(c["name"], name.as_str());
    assert_eq!(c["client_properties"]["connection_name"], label.as_str());
    assert_eq!(c["client_properties"]["product"], "lapin");
    assert!(c["client_properties"]["capabilities"].is_object());
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["peer_host"], "127.0.0.1");
    assert_eq!(c["host"], "127.0.0.1");
    assert_eq!(c["port"], port);
    assert_eq!(c["protocol"], "AMQP 0-9-1");
    assert_eq!(c["auth_mechanism"], "PLAIN");
    assert_eq!(c["state"], "running");
    assert!(c["frame_max"].as_u64() > Some(0) && c["channel_max"].as_u64() > Some(0));
    assert!(c["connected_at"].as_u64() > Some(1_600_000_000_000));
    let c = api.get_until(
        &format!("/api/connections/{}", enc(&name)),
        "two channels",
        |c| c["channels"] == 2,
    );
    assert_eq!(c["user_provided_name"], label.as_str());
    one(
        &api.get_ok("/api/vhosts/%2F/connections"),
        "connection",
        |c| c["name"] == name.as_str(),
    );
    assert_eq!(api.status("/api/connections/no-such-connection"), 404);

    let chans = api.get_ok(&format!("/api/connections/{}/channels", enc(&name)));
    assert_eq!(chans.as_array().map(Vec::len), Some(2), "{chans:#}");
    let all = api.get_until("/api/channels", "the consumer's channel", |l| {
        !find(l, |c| {
            c["connection_details"]["name"] == name.as_str() && c["consumer_count"] == 1
        })
        .is_empty()
    });
    let mine = find(&all, |c| c["connection_details"]["name"] == name.as_str());
    assert_eq!(mine.len(), 2);
    let publisher = one(&all, "confirm channel", |c| {
        c["connection_details"]["name"] == name.as_str() && c["confirm"] == true
    });
    assert_eq!(
        publisher["name"],
        format!("{name} ({})", publisher["number"])
    );
    assert_eq!(publisher["user"], "guest");
    assert_eq!(publisher["vhost"], "/");
    assert_eq!(publisher["transactional"], false);
    let reader = one(&all, "consumer channel", |c| {
        c["connection_details"]["name"] == name.as_str() && c["consumer_count"] == 1
    });
    assert_eq!(reader["prefetch_count"], 7);
    assert_eq!(reader["messages_unacknowledged"], 0);
    assert_eq!(reader["connection_details"]["peer_port"], peer_port);
    let channel_name = reader["name"].as_str().expect("channel name");
    assert_eq!(
        api.get_ok(&format!("/api/channels/{}", enc(channel_name)))["number"],
        reader["number"]
    );
    one(&api.get_ok("/api/vhosts/%2F/channels"), "channel", |c| {
        c["name"] == channel_name
    });

    let consumers = api.get_ok("/api/consumers/%2F");
    let k = one(&consumers, "consumer", |c| {
        c["consumer_tag"] == "mgmt-consumer"
    });
    assert_eq!(k["queue"], json!({"name": q, "vhost": "/"}));
    assert_eq!(k["channel_details"]["connection_name"], name.as_str());
    assert_eq!(k["channel_details"]["name"], channel_name);
    assert_eq!(k["channel_details"]["user"], "guest");
    assert_eq!(k["ack_required"], true);
    assert_eq!(k["prefetch_count"], 7);
    assert_eq!(k["exclusive"], false);
    assert_eq!(k["active"], true);
    assert_eq!(k["arguments"], json!({}));
    one(&api.get_ok("/api/consumers"), "consumer", |c| {
        c["consumer_tag"] == "mgmt-consumer"
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhosts_users_permissions_and_definitions_export() {
    let broker = start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let q = unique("mgmt-def-q");
    let x = unique("mgmt-def-x");
    let (args, args_json) = queue_args();
    let durable = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(&ch, &q, durable, args).await;
    declare_exchange_args(&ch, &x, ExchangeKind::Direct, FieldTable::default()).await;
    bind_queue(&ch, &q, &x, "rk").await;
    let exclusive = declare_queue_with(
        &ch,
        "",
        lapin::options::QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    let excl = exclusive.name().to_string();
    bind_queue(&ch, &excl, &x, "excl").await;

    let vhosts = api.get_ok("/api/vhosts");
    for name in ["/", "other"] {
        let v = one(&vhosts, "vhost", |v| v["name"] == name);
        assert_eq!(v["tracing"], false);
        assert!(v["cluster_state"].is_object());
    }
    assert_eq!(api.get_ok("/api/vhosts/other")["name"], "other");
    assert_eq!(api.status("/api/vhosts/no-such-vhost"), 404);

    let users = api.get_ok("/api/users");
    let guest = one(&users, "guest", |u| u["name"] == "guest");
    assert_eq!(guest["tags"], json!(["administrator"]));
    assert_eq!(guest["hashing_algorithm"], "rabbit_password_hashing_sha256");
    // base64 of a 4-byte salt and a SHA-256 digest.
    assert_eq!(guest["password_hash"].as_str().map(str::len), Some(48));
    assert_eq!(api.get_ok("/api/users/mon")["tags"], json!(["monitoring"]));
    assert_eq!(api.get_ok("/api/users/notag")["tags"], json!([]));
    assert_eq!(api.status("/api/users/nobody"), 404);

    let perms = api.get_ok("/api/permissions");
    let p = one(&perms, "guest on /", |p| {
        p["user"] == "guest" && p["vhost"] == "/"
    });
    assert_eq!(
        (&p["configure"], &p["write"], &p["read"]),
        (&json!(".*"), &json!(".*"), &json!(".*"))
    );
    assert_eq!(api.get_ok("/api/permissions/%2F/guest")["read"], ".*");
    one(
        &api.get_ok("/api/users/guest/permissions"),
        "guest on /",
        |p| p["vhost"] == "/",
    );
    one(
        &api.get_ok("/api/vhosts/%2F/permissions"),
        "guest on /",
        |p| p["user"] == "guest",
    );

    let d = api.get_ok("/api/definitions");
    assert!(
        d["rabbit_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("3."))
    );
    one(&d["users"], "guest", |u| {
        u["name"] == "guest" && u["tags"] == json!(["administrator"])
    });
    one(&d["vhosts"], "/", |v| v["name"] == "/");
    one(&d["vhosts"], "other", |v| v["name"] == "other");
    one(&d["permissions"], "guest on /", |p| {
        p["user"] == "guest" && p["vhost"] == "/"
    });
    for key in [
        "policies",
        "parameters",
        "global_parameters",
        "topic_permissions",
    ] {
        assert!(d[key].is_array(), "{key} in {d:#}");
    }
    let qd = one(&d["queues"], "queue", |v| v["name"] == q.as_str());
    assert_eq!(
        qd,
        &json!({"name": q, "vhost": "/", "durable": true, "auto_delete": false, "arguments": args_json})
    );
    assert!(
        find(&d["queues"], |v| v["name"] == excl.as_str()).is_empty(),
        "exclusive queues are not exported"
    );
    let xd = one(&d["exchanges"], "exchange", |v| v["name"] == x.as_str());
    assert_eq!(
        xd,
        &json!({"name": x, "vhost": "/", "type": "direct", "durable": false,
                "auto_delete": false, "internal": false, "arguments": {}})
    );
    assert!(
        find(&d["exchanges"], |v| v["name"]
            .as_str()
            .is_some_and(|n| n.is_empty() || n.starts_with("amq.")))
        .is_empty()
    );
    let bd = one(&d["bindings"], "binding", |b| b["source"] == x.as_str());
    assert_eq!(
        bd,
        &json!({"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
                "routing_key": "rk", "arguments": {}})
    );
    assert!(find(&d["bindings"], |b| b["source"] == "").is_empty());

    let one_vhost = api.get_ok("/api/definitions/%2F");
    let qv = one(&one_vhost["queues"], "queue", |v| v["name"] == q.as_str());
    assert!(
        qv.get("vhost").is_none(),
        "per-vhost export names no vhost: {qv}"
    );
    one(&one_vhost["bindings"], "binding", |b| {
        b["source"] == x.as_str()
    });
    let (status, body) = api.get_as(Some(("guest", "guest")), "/api/definitions/no-such-vhost");
    assert_eq!((status, &body["reason"]), (400, &json!("vhost_not_found")));

    within(
        "queue.delete",
        ch.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("queue.delete");
    within(
        "exchange.delete",
        ch.exchange_delete(x.as_str().into(), Default::default()),
    )
    .await
    .expect("exchange.delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_tags_decide_who_reads_what() {
    let broker = start();
    let api = Api::new(&broker);
    // A guest connection that only monitoring users may see.
    let (_conn, _ch) = open(&broker).await;
    api.get_until("/api/connections", "guest's connection", |l| {
        !find(l, |c| c["user"] == "guest").is_empty()
    });

    let (status, _) = api.get_as(None, "/api/overview");
    assert_eq!(status, 401, "no credentials");
    let (status, body) = api.get_as(Some(("guest", "wrong")), "/api/overview");
    assert_eq!(status, 401, "wrong password");
    assert_eq!(body["error"], "not_authorized");
    let (status, _) = api.get_as(Some(("nobody", "guest")), "/api/whoami");
    assert_eq!(status, 401, "unknown user");

    let notag = Some(("notag", PASSWORD));
    for path in [
        "/api/overview",
        "/api/whoami",
        "/api/queues",
        "/api/health/checks/alarms",
    ] {
        let (status, body) = api.get_as(notag, path);
        assert_eq!(status, 401, "a user without tags reads {path}: {body}");
        assert_eq!(body["reason"], "Not management user");
    }

    let mgmt = Some(("mgmt", PASSWORD));
    assert_eq!(api.get_as(mgmt, "/api/overview").0, 200);
    assert_eq!(
        api.get_as(mgmt, "/api/whoami").1,
        json!({"name": "mgmt", "tags": ["management"]})
    );
    let (status, conns) = api.get_as(mgmt, "/api/connections");
    assert_eq!(status, 200);
    assert_eq!(
        conns,
        json!([]),
        "a management user sees only its own connections"
    );
    for path in ["/api/users", "/api/permissions", "/api/definitions"] {
        let (status, body) = api.get_as(mgmt, path);
        assert_eq!(status, 401, "a management user reads {path}");
        assert_eq!(body["reason"], "Not administrator user");
    }

    let mon = Some(("mon", PASSWORD));
    let (status, conns) = api.get_as(mon, "/api/connections");
    assert_eq!(status, 200);
    assert!(
        !find(&conns, |c| c["user"] == "guest").is_empty(),
        "monitoring sees all connections"
    );
    assert_eq!(api.get_as(mon, "/api/users").0, 401);
    assert_eq!(api.get_as(mon, "/api/queues").0, 200);
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
