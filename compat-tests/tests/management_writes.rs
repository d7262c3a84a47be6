//! The management API's writes on queues, exchanges and bindings, against
//! the real binary: each endpoint's success and refusal, in RabbitMQ 3.10's
//! status codes and shapes, and their effect seen by a real client (lapin).
//!
//! These also run against RabbitMQ 3.10: set `STABLEMQ_TEST_EXTERNAL_URI`
//! and `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT`.

use compat_tests::common;
mod http;

use common::*;
use http::{Api, enc};
use serde_json::json;

const V: &str = "%2F";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_put_and_delete() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let q = unique("w-queue");
    let path = format!("/api/queues/{V}/{}", enc(&q));
    let body = json!({"durable": true, "auto_delete": false, "arguments": {"x-max-length": 5}});
    assert_eq!(api.put(&path, &body).status, 201, "new queue");
    assert_eq!(api.put(&path, &body).status, 204, "equivalent redeclare");
    let bad = api.put(&path, &json!({"durable": false}));
    assert_eq!(bad.status, 400, "inequivalent: {:?}", bad);
    assert_eq!(bad.body["error"], "bad_request");
    assert!(
        bad.body["reason"]
            .as_str()
            .unwrap_or("")
            .contains("durable"),
        "{:?}",
        bad.body
    );
    let got = api.get(&path);
    assert_eq!(got.status, 200);
    assert_eq!(got.body["durable"], true);
    assert_eq!(got.body["arguments"]["x-max-length"], 5);

    // A real client sees the queue with its argument.
    let (_conn, ch) = open(&broker).await;
    let mut args = lapin::types::FieldTable::default();
    args.insert(
        "x-max-length".into(),
        lapin::types::AMQPValue::LongLongInt(5),
    );
    let opts = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(&ch, &q, opts, args).await;

    assert_eq!(
        api.put("/api/queues/no-such-vhost/q", &json!({})).status,
        404,
        "queue in a missing vhost"
    );
    assert_eq!(
        api.put(&format!("/api/queues/{V}/amq.reserved"), &json!({}))
            .status,
        401,
        "reserved name (ACCESS_REFUSED)"
    );
    assert_eq!(api.delete(&path).status, 204);
    assert_eq!(api.delete(&path).status, 404, "already gone");
    assert_eq!(api.get(&path).status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_delete_conditions_and_purge() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let q = unique("w-purge");
    let path = format!("/api/queues/{V}/{}", enc(&q));
    assert_eq!(api.put(&path, &json!({"durable": true})).status, 201);
    let (_conn, ch) = open(&broker).await;
    publish(&ch, "", &q, b"one").await;
    publish(&ch, "", &q, b"two").await;
    api.get_until(&path, "2 messages", |b| b["messages"] == 2);

    let refused = api.delete(&format!("{path}?if-empty=true"));
    assert_eq!(refused.status, 400, "not empty: {refused:?}");
    let (conn2, ch2) = open(&broker).await;
    let _consumer = consume(&ch2, &q, "w-purge-c", false).await;
    let refused = api.delete(&format!("{path}?if-unused=true"));
    assert_eq!(refused.status, 400, "in use: {refused:?}");
    // Closing the consumer's connection requeues what it took.
    conn2.close(200, "bye".into()).await.expect("close");
    api.get_until(&path, "no consumers", |b| b["consumers"] == 0);

    assert_eq!(api.delete(&format!("{path}/contents")).status, 204);
    api.get_until(&path, "no messages", |b| b["messages"] == 0);
    assert_eq!(
        api.delete(&format!(
            "/api/queues/{V}/{}/contents",
            enc("w-no-such-queue")
        ))
        .status,
        404
    );
    assert_eq!(api.delete(&format!("{path}?if-empty=true")).status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_and_get_through_the_api() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let q = unique("w-get");
    let qpath = format!("/api/queues/{V}/{}", enc(&q));
    assert_eq!(api.put(&qpath, &json!({"durable": true})).status, 201);
    let publish_path = format!("/api/exchanges/{V}/amq.default/publish");
    for body in ["first", "second", "third"] {
        let a = api.post(
            &publish_path,
            &json!({"properties": {"delivery_mode": 2, "headers": {"h": "v"}},
                    "routing_key": q, "payload": body, "payload_encoding": "string"}),
        );
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.body, json!({"routed": true}));
    }
    let unroutable = api.post(
        &publish_path,
        &json!({"properties": {}, "routing_key": "w-nobody-here", "payload": "x", "payload_encoding": "string"}),
    );
    assert_eq!(unroutable.body, json!({"routed": false}));
    let bad = api.post(&publish_path, &json!({"payload": "x"}));
    assert_eq!(bad.status, 400, "no routing key: {bad:?}");
    let missing = api.post(
        &format!("/api/exchanges/{V}/w-no-such-exchange/publish"),
        &json!({"properties": {}, "routing_key": "k", "payload": "x", "payload_encoding": "string"}),
    );
    assert_eq!(
        missing.status, 400,
        "RabbitMQ answers 400 here: {missing:?}"
    );
    assert!(
        missing.body["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("404 NOT_FOUND")),
        "{missing:?}"
    );

    // Peek: requeued, so the queue still holds all three.
    let get = format!("{qpath}/get");
    let peek = api.post(
        &get,
        &json!({"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    );
    assert_eq!(peek.status, 200, "{peek:?}");
    let msgs = peek.body.as_array().expect("list").clone();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["payload"], "first");
    assert_eq!(msgs[0]["payload_encoding"], "string");
    assert_eq!(msgs[0]["payload_bytes"], 5);
    assert_eq!(msgs[0]["redelivered"], false);
    assert_eq!(msgs[0]["exchange"], "");
    assert_eq!(msgs[0]["routing_key"], q.as_str());
    assert_eq!(msgs[0]["message_count"], 2);
    assert_eq!(msgs[0]["properties"]["delivery_mode"], 2);
    assert_eq!(msgs[0]["properties"]["headers"]["h"], "v");
    assert_eq!(msgs[1]["payload"], "second");
    api.get_until(&qpath, "3 messages", |b| b["messages"] == 3);

    // base64 and truncate.
    let b64 = api.post(
        &get,
        &json!({"count": 1, "ackmode": "reject_requeue_true", "encoding": "base64", "truncate": 3}),
    );
    assert_eq!(b64.body[0]["payload"], "Zmly"); // "fir"
    assert_eq!(b64.body[0]["payload_encoding"], "base64");
    assert_eq!(b64.body[0]["payload_bytes"], 5);
    assert_eq!(b64.body[0]["redelivered"], true);

    // Take them all.
    let take = api.post(
        &get,
        &json!({"count": 10, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    );
    let bodies: Vec<&str> = take
        .body
        .as_array()
        .expect("list")
        .iter()
        .map(|m| m["payload"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(bodies, ["first", "second", "third"]);
    api.get_until(&qpath, "an empty queue", |b| b["messages"] == 0);
    let (_conn, ch) = open(&broker).await;
    assert!(
        get_body(&ch, &q).await.is_none(),
        "the API took them for good"
    );

    let bad_mode = api.post(
        &get,
        &json!({"count": 1, "ackmode": "nope", "encoding": "auto"}),
    );
    // RabbitMQ 3.10 crashes on this one (500); StableMQ refuses it (400).
    let refused = if broker.is_external() { 500 } else { 400 };
    assert_eq!(bad_mode.status, refused);
    let no_queue = api.post(
        &format!("/api/queues/{V}/w-no-such-queue/get"),
        &json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    );
    assert_eq!(no_queue.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_put_and_delete() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let x = unique("w-exchange");
    let path = format!("/api/exchanges/{V}/{}", enc(&x));
    let body = json!({"type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}});
    assert_eq!(api.put(&path, &body).status, 201);
    assert_eq!(api.put(&path, &body).status, 204);
    let got = api.get(&path);
    assert_eq!(got.body["type"], "topic");
    let bad = api.put(&path, &json!({"type": "direct"}));
    assert_eq!(bad.status, 400, "inequivalent type: {bad:?}");
    assert_eq!(
        api.put(
            &format!("/api/exchanges/{V}/{}", enc(&unique("w-x"))),
            &json!({"type": "nope"})
        )
        .status,
        400,
        "unknown type"
    );
    // A bare `{}` makes a transient direct exchange, as in RabbitMQ.
    let bare = format!("/api/exchanges/{V}/{}", enc(&unique("w-x")));
    assert_eq!(api.put(&bare, &json!({})).status, 201, "no type");
    let shown = api.get(&bare).body;
    assert_eq!(
        (&shown["type"], &shown["durable"]),
        (&json!("direct"), &json!(false))
    );
    assert_eq!(api.delete(&bare).status, 204);

    // A real client can publish to it.
    let (_conn, ch) = open(&broker).await;
    let q = unique("w-x-q");
    declare_queue(&ch, &q).await;
    let bind = api.post(
        &format!("/api/bindings/{V}/e/{}/q/{}", enc(&x), enc(&q)),
        &json!({"routing_key": "a.*", "arguments": {}}),
    );
    assert_eq!(bind.status, 201, "{bind:?}");
    publish(&ch, &x, "a.b", b"via-api-exchange").await;
    assert_eq!(
        get_body(&ch, &q).await.as_deref(),
        Some(&b"via-api-exchange"[..])
    );

    let in_use = api.delete(&format!("{path}?if-unused=true"));
    assert_eq!(in_use.status, 400, "{in_use:?}");
    assert_eq!(api.delete(&path).status, 204);
    assert_eq!(api.delete(&path).status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_create_and_delete() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let q = unique("w-bind-q");
    declare_queue(&ch, &q).await;
    let x = unique("w-bind-x");
    assert_eq!(
        api.put(
            &format!("/api/exchanges/{V}/{}", enc(&x)),
            &json!({"type": "direct"})
        )
        .status,
        201
    );
    let to_queue = format!("/api/bindings/{V}/e/amq.direct/q/{}", enc(&q));
    let made = api.post(&to_queue, &json!({"routing_key": "rk", "arguments": {}}));
    assert_eq!(made.status, 201, "{made:?}");
    let location = made.location.clone().expect("Location header");
    assert!(location.ends_with("/rk"), "{location}");
    let listed = api.get(&to_queue);
    assert_eq!(listed.body[0]["properties_key"], "rk");
    publish(&ch, "amq.direct", "rk", b"bound").await;
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"bound"[..]));

    // Exchange to exchange.
    let e2e = format!("/api/bindings/{V}/e/amq.direct/e/{}", enc(&x));
    let made = api.post(&e2e, &json!({"routing_key": "", "arguments": {}}));
    assert_eq!(made.status, 201, "{made:?}");
    assert_eq!(api.get(&e2e).body[0]["properties_key"], "~");

    let missing = api.post(
        &format!("/api/bindings/{V}/e/amq.direct/q/w-no-such-queue"),
        &json!({"routing_key": "rk"}),
    );
    assert_eq!(missing.status, 404);

    assert_eq!(api.delete(&format!("{to_queue}/rk")).status, 204);
    assert_eq!(api.delete(&format!("{to_queue}/rk")).status, 404);
    assert_eq!(api.delete(&format!("{e2e}/~")).status, 204);
    publish(&ch, "amq.direct", "rk", b"unbound").await;
    assert!(get_body(&ch, &q).await.is_none(), "the binding is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_need_credentials() {
    let broker = Broker::start();
    let api = http::Api::on_port(Api::port_of(&broker), "guest", "wrong");
    let a = api.put(&format!("/api/queues/{V}/w-nope"), &json!({}));
    assert_eq!(a.status, 401);
    let a = api.delete(&format!("/api/queues/{V}/w-nope"));
    assert_eq!(a.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_connection_force_closes_it_with_320_and_the_reason() {
    use futures_lite::StreamExt;
    let broker = Broker::start();
    let api = Api::new(&broker);
    let label = unique("w-conn");
    let props = lapin::ConnectionProperties::default().with_connection_name(label.as_str().into());
    let conn = within("connect", lapin::Connection::connect(&broker.uri(), props))
        .await
        .expect("connect");
    let mut events = Box::pin(conn.events_listener());
    let list = api.get_until("/api/connections", "the client", |b| {
        b.as_array()
            .is_some_and(|l| l.iter().any(|c| c["user_provided_name"] == label.as_str()))
    });
    let name = list
        .as_array()
        .and_then(|l| l.iter().find(|c| c["user_provided_name"] == label.as_str()))
        .and_then(|c| c["name"].as_str())
        .expect("connection name")
        .to_string();
    let path = format!("/api/connections/{}", enc(&name));
    let a = api.delete_with(&path, &[("X-Reason", "maintenance window")]);
    assert_eq!(a.status, 204, "{a:?}");
    let (code, text) = within("the forced close", async {
        loop {
            match events.next().await {
                Some(lapin::Event::Error(e)) => {
                    if let Some(err) = amqp_error(&e) {
                        return (err.get_id(), err.get_message().as_str().to_string());
                    }
                }
                Some(_) => {}
                None => panic!("event stream ended"),
            }
        }
    })
    .await;
    assert_eq!(code, CONNECTION_FORCED);
    assert!(text.contains("maintenance window"), "{text}");
    api.get_until("/api/connections", "the client gone", |b| {
        b.as_array()
            .is_some_and(|l| !l.iter().any(|c| c["user_provided_name"] == label.as_str()))
    });
    assert_eq!(api.delete(&path).status, 404);
}

/// A write sent to a slave's management API reaches the master (which
/// creates the queue and the policy), and the slave's replica shows them.
#[test]
fn writes_on_a_slave_reach_the_master() {
    if std::env::var("STABLEMQ_TEST_EXTERNAL_URI").is_ok() {
        return; // a cluster of StableMQ processes only
    }
    let cluster = compat_tests::cluster::Cluster::start_example();
    let master = cluster.wait_master(std::time::Duration::from_secs(30));
    let slave = (master + 1) % 3;
    let on = |i: usize| Api::on_port(cluster.nodes[i].management_port, "guest", "guest");
    let (m, s) = (on(master), on(slave));
    let q = unique("w-cluster");
    let path = format!("/api/queues/{V}/{}", enc(&q));
    let a = s.put(&path, &json!({"durable": true}));
    assert_eq!(a.status, 201, "PUT on the slave: {a:?}");
    assert_eq!(m.get(&path).status, 200, "the master has the queue");
    s.get_until(&path, "the queue on the slave's replica", |b| {
        b["name"] == q.as_str()
    });

    let policy = format!("/api/policies/{V}/{}", enc(&unique("w-cluster-pol")));
    let p = s.put(
        &policy,
        &json!({"pattern": format!("^{q}$"), "definition": {"max-length": 3}}),
    );
    assert_eq!(p.status, 201, "policy PUT on the slave: {p:?}");
    m.get_until(&path, "the policy on the master", |b| {
        b["effective_policy_definition"]["max-length"] == 3
    });
    s.get_until(&path, "the policy on the slave", |b| {
        b["effective_policy_definition"]["max-length"] == 3
    });

    let bad = s.put(&path, &json!({"durable": false}));
    assert_eq!(bad.status, 400, "the master's refusal comes back: {bad:?}");
    assert_eq!(s.delete(&path).status, 204);
    assert_eq!(m.get(&path).status, 404, "deleted on the master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_stats_count_publishes_deliveries_and_acks() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let (conn, _ch) = open(&broker).await;
    let ch = confirm_channel(&conn).await;
    let q = unique("w-stats");
    declare_queue(&ch, &q).await;
    ch.queue_bind(
        q.as_str().into(),
        "amq.direct".into(),
        q.as_str().into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("bind");
    for b in ["1", "2", "3"] {
        publish(&ch, "amq.direct", &q, b.as_bytes()).await;
    }
    for _ in 0..2 {
        let m = get_with(&ch, &q, false).await.expect("a message");
        m.delivery
            .ack(lapin::options::BasicAckOptions::default())
            .await
            .expect("ack");
    }
    let qpath = format!("/api/queues/{V}/{}", enc(&q));
    let shown = api.get_until(&qpath, "message_stats", |b| {
        b["message_stats"]["ack"] == 2 && b["message_stats"]["publish"] == 3
    });
    let s = &shown["message_stats"];
    assert_eq!(s["deliver_get"], 2, "{s:#}");
    assert_eq!(s["get"], 2, "{s:#}");
    assert!(s["publish_details"]["rate"].is_number(), "{s:#}");
    let x = api.get_until(
        &format!("/api/exchanges/{V}/amq.direct"),
        "message_stats",
        |b| {
            b["message_stats"]["publish_in"]
                .as_u64()
                .is_some_and(|n| n >= 3)
        },
    );
    assert!(
        x["message_stats"]["publish_out"]
            .as_u64()
            .is_some_and(|n| n >= 3)
    );
    let o = api.get_until("/api/overview", "message_stats", |b| {
        b["message_stats"]["ack"].as_u64().is_some_and(|n| n >= 2)
    });
    let s = &o["message_stats"];
    assert!(s["publish"].as_u64().is_some_and(|n| n >= 3), "{s:#}");
    assert!(s["confirm"].as_u64().is_some_and(|n| n >= 3), "{s:#}");
    assert!(s["deliver_get"].as_u64().is_some_and(|n| n >= 2), "{s:#}");
    assert!(s["ack_details"]["rate"].is_number(), "{s:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_and_filter_by_name() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let prefix = unique("w-page");
    for s in ["abc", "abd", "xyz"] {
        let path = format!("/api/queues/{V}/{}", enc(&format!("{prefix}-{s}")));
        assert_eq!(api.put(&path, &json!({"durable": true})).status, 201);
    }
    let re = enc(&format!("^{prefix}-ab"));
    let a = api.get(&format!(
        "/api/queues/{V}?page=1&page_size=1&name={re}&use_regex=true"
    ));
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["filtered_count"], 2);
    assert_eq!(a.body["page_count"], 2);
    assert_eq!(a.body["item_count"], 1);
    assert_eq!(a.body["items"][0]["name"], format!("{prefix}-abc"));
    let plain = api.get(&format!(
        "/api/queues?page=1&page_size=100&name={}",
        enc(&prefix)
    ));
    assert_eq!(plain.body["filtered_count"], 3, "{:?}", plain.body);
    assert_eq!(
        api.get(&format!("/api/queues?page=99&name={}", enc(&prefix)))
            .status,
        400
    );
}

/// Users below administrator (`management`, and `monitoring` too) see the
/// queues, exchanges and bindings of the vhosts they may use and no others,
/// and a read of another vhost is refused with 401, as RabbitMQ 3.10 filters
/// them (checked against it); an administrator sees every vhost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_users_see_only_their_vhosts() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let own = unique("vis-own");
    let other = unique("vis-other");
    for v in [&own, &other] {
        assert!(
            api.put(&format!("/api/vhosts/{}", enc(v)), &json!({}))
                .status
                < 300
        );
        let q = format!("/api/queues/{}/q", enc(v));
        assert!(api.put(&q, &json!({"durable": true})).status < 300, "{q}");
    }
    let (mgmt, mon) = (unique("vis-mgmt"), unique("vis-mon"));
    for (user, tag) in [(&mgmt, "management"), (&mon, "monitoring")] {
        let path = format!("/api/users/{}", enc(user));
        assert!(
            api.put(&path, &json!({"password": "pw", "tags": tag}))
                .status
                < 300
        );
        let perm = format!("/api/permissions/{}/{}", enc(&own), enc(user));
        let all = json!({"configure": ".*", "write": ".*", "read": ".*"});
        assert!(api.put(&perm, &all).status < 300, "{perm}");
    }
    let port = Api::port_of(&broker);
    let as_mgmt = Api::on_port(port, &mgmt, "pw");
    let vhosts_in = |list: &serde_json::Value| -> Vec<String> {
        let mut v: Vec<String> = list
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|o| o["vhost"].as_str())
            .filter(|v| *v == own || *v == other)
            .map(str::to_string)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    for list in ["/api/queues", "/api/exchanges", "/api/bindings"] {
        let got = as_mgmt.get(list);
        assert_eq!(got.status, 200, "{list}");
        assert_eq!(
            vhosts_in(&got.body),
            vec![own.clone()],
            "{list} as management"
        );
    }
    for path in [
        format!("/api/queues/{}", enc(&other)),
        format!("/api/queues/{}/q", enc(&other)),
        format!("/api/exchanges/{}", enc(&other)),
        format!("/api/bindings/{}", enc(&other)),
    ] {
        assert_eq!(as_mgmt.get(&path).status, 401, "{path} as management");
    }
    assert_eq!(
        as_mgmt.get(&format!("/api/queues/{}/q", enc(&own))).status,
        200
    );
    // Policies follow the same rule.
    let policy = json!({"pattern": "^q$", "definition": {"max-length": 9}});
    for v in [&own, &other] {
        let path = format!("/api/policies/{}/vis", enc(v));
        assert!(api.put(&path, &policy).status < 300, "{path}");
    }
    assert_eq!(
        vhosts_in(&as_mgmt.get("/api/policies").body),
        vec![own.clone()]
    );
    let path = format!("/api/policies/{}", enc(&other));
    assert_eq!(as_mgmt.get(&path).status, 401, "{path} as management");
    let as_mon = Api::on_port(port, &mon, "pw");
    let only_own = vec![own.clone()];
    assert_eq!(
        vhosts_in(&as_mon.get("/api/queues").body),
        only_own,
        "as monitoring"
    );
    let path = format!("/api/queues/{}/q", enc(&other));
    assert_eq!(as_mon.get(&path).status, 401, "{path} as monitoring");
    // guest, an administrator, sees a vhost it has no permissions on (its
    // creator's permissions, granted by PUT /api/vhosts, are taken away).
    let perm = format!("/api/permissions/{}/guest", enc(&other));
    assert!(api.delete(&perm).status < 300, "{perm}");
    let mut both = vec![own.clone(), other.clone()];
    both.sort();
    assert_eq!(
        vhosts_in(&api.get("/api/queues").body),
        both,
        "as administrator"
    );
    for v in [&own, &other] {
        api.delete(&format!("/api/vhosts/{}", enc(v)));
    }
    for u in [&mgmt, &mon] {
        api.delete(&format!("/api/users/{}", enc(u)));
    }
}
