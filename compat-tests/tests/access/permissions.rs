//! Users, vhosts and permissions, against the real binary: users and
//! permissions are made through the management API (as an operator would),
//! and every AMQP operation class is tried by a user whose permissions allow
//! some names and refuse others, with RabbitMQ's mapping (its access-control
//! guide): configure to declare and delete, write to publish and to bind
//! to a destination, read to consume, get, purge and bind from a source.
//! A refusal is 403 ACCESS_REFUSED on the channel, or 530 NOT_ALLOWED at
//! connection.open for a vhost without permissions.

use crate::http;
use compat_tests::common;

use common::*;
use http::Api;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeBindOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
    QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{Value, json};

const PW: &str = "limited-pw";

/// A broker with user `limited` whose permissions on `/` allow names that
/// start with `ok-` only, and objects made by guest that `limited` may not
/// touch (`no-q`, `no-x`).
async fn setup() -> (Broker, Api) {
    let broker = Broker::start();
    assert!(
        !broker.is_external(),
        "these tests create users through StableMQ's management API"
    );
    let api = Api::new(&broker);
    api.put_ok("/api/users/limited", json!({"password": PW, "tags": ""}));
    api.put_ok(
        "/api/permissions/%2F/limited",
        json!({"configure": "^ok-", "write": "^ok-", "read": "^ok-"}),
    );
    let (_c, ch) = open(&broker).await;
    declare_queue(&ch, "no-q").await;
    declare_queue(&ch, "ok-q").await;
    for x in ["no-x", "ok-x"] {
        declare_exchange_args(&ch, x, ExchangeKind::Topic, FieldTable::default()).await;
    }
    (broker, api)
}

async fn limited(broker: &Broker) -> (Connection, lapin::Channel) {
    let conn = connect_uri(&broker.uri_with("limited", PW, "/")).await;
    let ch = channel(&conn).await;
    (conn, ch)
}

/// Assert a 403 with RabbitMQ's text for `kind` `name`.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: lapin::Result<T>, kind: &str, name: &str) {
    let e = r.expect_err("refused");
    let err = amqp_error(&e).unwrap_or_else(|| panic!("not an AMQP error: {e:?}"));
    assert_eq!(err.get_id(), ACCESS_REFUSED, "{e:?}");
    let text = err.get_message().to_string();
    assert_eq!(
        text,
        format!(
            "ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user 'limited'"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_open_needs_permissions_on_the_vhost() {
    let (broker, api) = setup().await;
    api.put_ok(
        "/api/users/noperm",
        json!({"password": PW, "tags": "administrator"}),
    );
    let err = Connection::connect(
        &broker.uri_with("noperm", PW, "/"),
        ConnectionProperties::default(),
    )
    .await
    .expect_err("no permissions on /");
    let e = amqp_error(&err).expect("an AMQP close");
    assert_eq!(e.get_id(), NOT_ALLOWED);
    assert_eq!(
        e.get_message().as_str(),
        "NOT_ALLOWED - access to vhost '/' refused for user 'noperm'"
    );
    // Allowed once granted, even with expressions that match nothing.
    api.put_ok(
        "/api/permissions/%2F/noperm",
        json!({"configure": "", "write": "", "read": ""}),
    );
    let conn = connect_uri(&broker.uri_with("noperm", PW, "/")).await;
    // ...but the administrator tag grants nothing over AMQP.
    let ch = channel(&conn).await;
    let r = ch
        .queue_declare(
            "ok-admin".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, ACCESS_REFUSED, "administrator without configure");
    // Wrong password and a user without a password hash: login refused.
    for (user, pass) in [("limited", "wrong"), ("nohash", "")] {
        if user == "nohash" {
            api.put_ok("/api/users/nohash", json!({"tags": ""}));
            api.put_ok(
                "/api/permissions/%2F/nohash",
                json!({"configure": ".*", "write": ".*", "read": ".*"}),
            );
        }
        let r = Connection::connect(
            &broker.uri_with(user, pass, "/"),
            ConnectionProperties::default(),
        )
        .await;
        assert_code(r, ACCESS_REFUSED, "login");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_declare_and_delete_need_configure() {
    let (broker, _api) = setup().await;
    let (_conn, ch) = limited(&broker).await;
    let r = ch
        .exchange_declare(
            "no-x2".into(),
            ExchangeKind::Direct,
            Default::default(),
            FieldTable::default(),
        )
        .await;
    refused(r, "exchange", "no-x2");
    let ch = channel(&_conn).await;
    ch.exchange_declare(
        "ok-x2".into(),
        ExchangeKind::Direct,
        Default::default(),
        FieldTable::default(),
    )
    .await
    .expect("allowed declare");
    // Passive declare needs no permission.
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    ch.exchange_declare(
        "no-x".into(),
        ExchangeKind::Topic,
        passive,
        FieldTable::default(),
    )
    .await
    .expect("passive declare");
    let r = ch
        .exchange_delete("no-x".into(), ExchangeDeleteOptions::default())
        .await;
    refused(r, "exchange", "no-x");
    let ch = channel(&_conn).await;
    ch.exchange_delete("ok-x2".into(), ExchangeDeleteOptions::default())
        .await
        .expect("allowed delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_declare_and_delete_need_configure() {
    let (broker, _api) = setup().await;
    let (conn, ch) = limited(&broker).await;
    let r = ch
        .queue_declare(
            "no-q2".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    refused(r, "queue", "no-q2");
    // A server-named queue is checked under its amq.gen- name.
    let ch = channel(&conn).await;
    let r = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, ACCESS_REFUSED, "server-named queue");
    let ch = channel(&conn).await;
    declare_queue(&ch, "ok-q2").await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    ch.queue_declare("no-q".into(), passive, FieldTable::default())
        .await
        .expect("passive declare");
    // A dead-letter exchange needs write on it (and read on the queue).
    let args = ftable(&[("x-dead-letter-exchange", lstr("no-x"))]);
    let r = ch
        .queue_declare("ok-dlq".into(), QueueDeclareOptions::default(), args)
        .await;
    refused(r, "exchange", "no-x");
    let ch = channel(&conn).await;
    let r = ch
        .queue_delete("no-q".into(), QueueDeleteOptions::default())
        .await;
    refused(r, "queue", "no-q");
    let ch = channel(&conn).await;
    ch.queue_delete("ok-q2".into(), QueueDeleteOptions::default())
        .await
        .expect("allowed delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_need_write_on_the_destination_and_read_on_the_source() {
    let (broker, _api) = setup().await;
    let (conn, ch) = limited(&broker).await;
    let bind = |ch: lapin::Channel, q: &'static str, x: &'static str| async move {
        ch.queue_bind(
            q.into(),
            x.into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
    };
    refused(bind(ch, "no-q", "ok-x").await, "queue", "no-q");
    refused(
        bind(channel(&conn).await, "ok-q", "no-x").await,
        "exchange",
        "no-x",
    );
    bind(channel(&conn).await, "ok-q", "ok-x")
        .await
        .expect("allowed bind");
    let ch = channel(&conn).await;
    let r = ch
        .queue_unbind(
            "ok-q".into(),
            "no-x".into(),
            "k".into(),
            FieldTable::default(),
        )
        .await;
    refused(r, "exchange", "no-x");
    let ch = channel(&conn).await;
    ch.queue_unbind(
        "ok-q".into(),
        "ok-x".into(),
        "k".into(),
        FieldTable::default(),
    )
    .await
    .expect("allowed unbind");
    // exchange.bind: write on the destination, read on the source.
    let r = ch
        .exchange_bind(
            "no-x".into(),
            "ok-x".into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    refused(r, "exchange", "no-x");
    let ch = channel(&conn).await;
    declare_exchange_args(&ch, "ok-x3", ExchangeKind::Fanout, FieldTable::default()).await;
    ch.exchange_bind(
        "ok-x3".into(),
        "ok-x".into(),
        "k".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("allowed exchange.bind");
    ch.exchange_unbind(
        "ok-x3".into(),
        "ok-x".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .expect("allowed exchange.unbind");
    let r = ch
        .exchange_unbind(
            "ok-x3".into(),
            "no-x".into(),
            "k".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await;
    refused(r, "exchange", "no-x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_needs_write_on_the_exchange_default_exchange_included() {
    let (broker, _api) = setup().await;
    let (conn, _ch) = limited(&broker).await;
    for x in ["no-x", ""] {
        let mut watch = ErrorWatch::new(&conn);
        let pch = channel(&conn).await;
        publish(&pch, x, "ok-q", b"refused").await;
        watch.expect(ACCESS_REFUSED, "publish").await;
        wait_channel_closed(&pch).await;
    }
    let ch = confirm_channel(&conn).await;
    publish(&ch, "ok-x", "k", b"allowed").await;
    // Nothing reached the queue through the default exchange.
    let (_g, gch) = open(&broker).await;
    assert_eq!(get_body(&gch, "ok-q").await, None);
}

/// The master caches a channel's last granted publish check; a permission
/// change must still refuse the very next publish on a channel that was
/// allowed to publish a moment before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_write_permission_refuses_the_next_publish_on_an_open_channel() {
    let (broker, api) = setup().await;
    let (conn, _ch) = limited(&broker).await;
    let ch = confirm_channel(&conn).await;
    for _ in 0..3 {
        publish(&ch, "ok-x", "k", b"allowed").await;
    }
    api.put_ok(
        "/api/permissions/%2F/limited",
        json!({"configure": "^ok-", "write": "^other-", "read": "^ok-"}),
    );
    let mut watch = ErrorWatch::new(&conn);
    // The refusal closes the channel: the watch sees it, whatever lapin
    // makes of the pending confirm.
    let _pending = ch
        .basic_publish(
            "ok-x".into(),
            "k".into(),
            BasicPublishOptions::default(),
            b"revoked",
            BasicProperties::default(),
        )
        .await;
    watch.expect(ACCESS_REFUSED, "publish after revoke").await;
    wait_channel_closed(&ch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_consume_and_purge_need_read_on_the_queue() {
    let (broker, _api) = setup().await;
    let (conn, ch) = limited(&broker).await;
    let r = ch.basic_get("no-q".into(), Default::default()).await;
    refused(r, "queue", "no-q");
    let ch = channel(&conn).await;
    assert!(
        ch.basic_get("ok-q".into(), Default::default())
            .await
            .expect("allowed get")
            .is_none()
    );
    let r = ch
        .basic_consume(
            "no-q".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    refused(r, "queue", "no-q");
    let ch = channel(&conn).await;
    ch.basic_consume(
        "ok-q".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("allowed consume");
    let r = ch
        .queue_purge("no-q".into(), QueuePurgeOptions::default())
        .await;
    refused(r, "queue", "no-q");
    let ch = channel(&conn).await;
    ch.queue_purge("ok-q".into(), QueuePurgeOptions::default())
        .await
        .expect("allowed purge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_permissions_check_routing_keys_on_topic_exchanges() {
    let (broker, api) = setup().await;
    api.put_ok(
        "/api/topic-permissions/%2F/limited",
        json!({"exchange": "ok-x", "write": "^{username}\\.", "read": "^r\\."}),
    );
    let (_s, body) = api.send("GET", "/api/topic-permissions/%2F/limited", None);
    assert_eq!(body[0]["write"], "^{username}\\.");
    let (conn, ch) = limited(&broker).await;
    let r = ch
        .queue_bind(
            "ok-q".into(),
            "ok-x".into(),
            "w.x".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    let e = r.expect_err("topic read refused");
    assert_eq!(reply_code(&e), Some(ACCESS_REFUSED));
    assert_eq!(
        amqp_error(&e)
            .map(|e| e.get_message().to_string())
            .as_deref(),
        Some(
            "ACCESS_REFUSED - access to topic 'w.x' in exchange 'ok-x' in vhost '/' refused for user 'limited'"
        )
    );
    let ch = channel(&conn).await;
    bind_queue(&ch, "ok-q", "ok-x", "r.#").await;
    let mut watch = ErrorWatch::new(&conn);
    let pch = channel(&conn).await;
    publish(&pch, "ok-x", "r.not-mine", b"refused").await;
    watch.expect(ACCESS_REFUSED, "topic write").await;
    let cch = confirm_channel(&conn).await;
    publish(&cch, "ok-x", "limited.x", b"allowed").await;
    // Other exchanges have no topic permissions: unrestricted.
    declare_exchange_args(&cch, "ok-t2", ExchangeKind::Topic, FieldTable::default()).await;
    publish(&cch, "ok-t2", "w.x", b"").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_writes_answer_in_rabbitmq_shapes_and_survive_a_restart() {
    let mut broker = Broker::start();
    let api = Api::new(&broker);
    // Users: 201 new, 204 replaced, 404 gone; tags as a string or a list.
    let (s, _) = api.send(
        "PUT",
        "/api/users/u1",
        Some(&json!({"password": "p1", "tags": "monitoring,management"})),
    );
    assert_eq!(s, 201);
    let (s, _) = api.send(
        "PUT",
        "/api/users/u1",
        Some(&json!({"password": "p2", "tags": ["monitoring"]})),
    );
    assert_eq!(s, 204);
    let (_, u) = api.send("GET", "/api/users/u1", None);
    assert_eq!(u["tags"], json!(["monitoring"]));
    let (s, b) = api.send(
        "PUT",
        "/api/users/u2",
        Some(&json!({"password": "x", "password_hash": "y"})),
    );
    assert_eq!((s, &b["error"]), (400, &json!("bad_request")));
    // RabbitMQ's hash of "guest" logs in as "guest" would.
    api.put_ok(
        "/api/users/imported",
        json!({"password_hash": "VA8YUP5eIyCJ+fy2FIB8Xh7iw0jHB8SKyFLVC6eHQ0swaZqk",
               "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""}),
    );
    // Vhosts and permissions.
    let (s, _) = api.send("PUT", "/api/vhosts/v1", Some(&json!({"description": "d"})));
    assert_eq!(s, 201);
    let (s, _) = api.send("PUT", "/api/vhosts/v1", Some(&json!({})));
    assert_eq!(s, 204);
    let (_, v) = api.send("GET", "/api/vhosts/v1", None);
    assert_eq!(v["description"], "d");
    // The creator (guest) gets full permissions on the new vhost, as in RabbitMQ.
    let (_, p) = api.send("GET", "/api/permissions/v1/guest", None);
    assert_eq!(p["configure"], ".*", "{p}");
    let (s, b) = api.send(
        "PUT",
        "/api/permissions/nope/u1",
        Some(&json!({"configure": ".*", "write": ".*", "read": ".*"})),
    );
    assert_eq!((s, &b["reason"]), (400, &json!("vhost_or_user_not_found")));
    let (s, _) = api.send(
        "PUT",
        "/api/permissions/v1/u1",
        Some(&json!({"configure": "(", "write": ".*", "read": ".*"})),
    );
    assert_eq!(s, 400, "invalid regex");
    for user in ["u1", "imported"] {
        api.put_ok(
            &format!("/api/permissions/v1/{user}"),
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        );
    }
    let conn = connect_uri(&broker.uri_with("imported", "guest", "v1")).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "in-v1").await;
    drop(conn);
    connect_uri(&broker.uri_with("u1", "p2", "v1")).await;

    // Everything above is in the log: a restart keeps it.
    broker.restart();
    let api = Api::new(&broker);
    let (_, v) = api.send("GET", "/api/vhosts/v1", None);
    assert_eq!(v["description"], "d");
    let conn = connect_uri(&broker.uri_with("u1", "p2", "v1")).await;
    let mut watch = ErrorWatch::new(&conn);
    // Deleting the vhost closes its connections (320) and drops permissions.
    let (s, _) = api.send("DELETE", "/api/vhosts/v1", None);
    assert_eq!(s, 204);
    watch.expect(CONNECTION_FORCED, "vhost deleted").await;
    let (s, _) = api.send("DELETE", "/api/vhosts/v1", None);
    assert_eq!(s, 404);
    let (_, p) = api.send("GET", "/api/users/u1/permissions", None);
    assert_eq!(p, json!([]));
    // Bulk delete ignores missing users.
    let (s, _) = api.send(
        "POST",
        "/api/users/bulk-delete",
        Some(&json!({"users": ["u1", "imported", "ghost"]})),
    );
    assert_eq!(s, 204);
    let (s, _) = api.send("DELETE", "/api/users/u1", None);
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_import_into_one_vhost_and_say_what_was_not_imported() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let doc = json!({
        "queues": [{"name": "imp-q", "durable": true, "auto_delete": false,
                    "arguments": {"x-max-length": 7}}],
        "exchanges": [{"name": "imp-x", "type": "fanout", "durable": true,
                       "auto_delete": false, "internal": false, "arguments": {}},
                      {"name": "imp-delayed", "type": "x-delayed-message", "durable": true,
                       "auto_delete": false, "internal": false, "arguments": {}}],
        "bindings": [{"source": "imp-x", "destination": "imp-q", "destination_type": "queue",
                      "routing_key": "", "arguments": {}}],
        "parameters": [{"name": "up", "component": "no-such-component", "value": {}}]
    });
    let (s, body) = api.send("POST", "/api/definitions/%2F", Some(&doc));
    assert_eq!(s, 200, "{body}");
    let skipped = body["not_imported"].as_array().expect("list").len();
    assert_eq!(skipped, 2, "the delayed exchange and the parameter: {body}");
    let (_, q) = api.send("GET", "/api/queues/%2F/imp-q", None);
    assert_eq!(q["arguments"]["x-max-length"], 7);
    let (_c, ch) = open(&broker).await;
    publish(&ch, "imp-x", "", b"routed").await;
    assert_eq!(get_eventually(&ch, "imp-q", true).await.data, b"routed");
    // Importing again changes nothing and reports nothing new for the objects.
    let (s, _) = api.send(
        "POST",
        "/api/definitions/%2F",
        Some(&json!({"queues": doc["queues"]})),
    );
    assert_eq!(s, 204);
    let (s, _) = api.send("POST", "/api/definitions/nope", Some(&json!({})));
    assert_eq!(s, 404);
    let (s, _) = api.send("POST", "/api/definitions", Some(&json!({"queues": "x"})));
    assert_eq!(s, 400);
}

/// A request as guest to node `port`'s management API.
fn node_api(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    Api::on_port(port, "guest", "guest").send(method, path, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_replicated_written_through_a_slave_and_survive_failover() {
    use compat_tests::cluster::Cluster;
    let mut cluster = tokio::task::spawn_blocking(Cluster::start_example)
        .await
        .expect("cluster");
    let master = cluster.wait_master(WAIT);
    let slave = (master + 1) % 3;
    let sport = cluster.nodes[slave].management_port;
    // Written on a slave: forwarded to the master, answered once stable.
    let (s, b) = node_api(
        sport,
        "PUT",
        "/api/users/rep",
        Some(&json!({"password": "rep-pw", "tags": ""})),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = node_api(
        sport,
        "PUT",
        "/api/permissions/%2F/rep",
        Some(&json!({"configure": "^rep-", "write": "^rep-", "read": "^rep-"})),
    );
    assert_eq!(s, 201, "{b}");
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.amqp_port).collect();
    let uri = |i: usize| format!("amqp://rep:rep-pw@127.0.0.1:{}/%2f", ports[i]);
    // Through the slave's proxy: the master logs the user in and enforces.
    let conn = connect_uri(&uri(slave)).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "rep-q").await;
    let r = ch
        .queue_declare(
            "other-q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, ACCESS_REFUSED, "replicated permissions");
    drop(conn);
    // Every replica has the user (its API reads its own replica).
    let api_ports: Vec<u16> = cluster.nodes.iter().map(|n| n.management_port).collect();
    for (i, &port) in api_ports.iter().enumerate() {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let (s, _) = node_api(port, "GET", "/api/users/rep", None);
            if s == 200 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node {i} never listed rep"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    // The next master has it too.
    tokio::task::block_in_place(|| cluster.kill9(master));
    let new = cluster.wait_master_other_than(Some(master), WAIT);
    let conn = connect_uri(&uri(new)).await;
    let ch = channel(&conn).await;
    declare_queue(&ch, "rep-q2").await;
}
