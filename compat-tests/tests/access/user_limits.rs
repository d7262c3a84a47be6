//! Per-user limits (`max-connections`, `max-channels`), as RabbitMQ 3.10
//! has them: `/api/user-limits` in its shapes, the limits in the definitions
//! (export and import) and on `/api/users`, and enforced on AMQP with its
//! codes and texts. They are replicated state: a restart keeps them.
//!
//! These also run against RabbitMQ 3.10.8 (`STABLEMQ_TEST_EXTERNAL_URI` and
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT`), but the restart. RabbitMQ
//! counts connections asynchronously, so a connection allowed after another
//! closed is polled for.

use crate::http;
use compat_tests::common;

use common::*;
use http::{Api, enc};
use lapin::protocol::connection as mconn;
use lapin::{Connection, ConnectionProperties};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A user with every permission on `/`; deleted on drop.
struct TestUser<'a> {
    api: &'a Api,
    name: String,
}

impl<'a> TestUser<'a> {
    fn new(api: &'a Api, prefix: &str, tags: &str) -> TestUser<'a> {
        let name = unique(prefix);
        let a = api.put(
            &format!("/api/users/{}", enc(&name)),
            &json!({"password": "pw", "tags": tags}),
        );
        assert_eq!(a.status, 201, "{a:?}");
        let perms = json!({"configure": ".*", "write": ".*", "read": ".*"});
        let a = api.put(&format!("/api/permissions/%2F/{}", enc(&name)), &perms);
        assert!(a.status == 201 || a.status == 204, "{a:?}");
        TestUser { api, name }
    }

    fn limit_path(&self, limit: &str) -> String {
        format!("/api/user-limits/{}/{limit}", enc(&self.name))
    }

    fn set(&self, limit: &str, value: i64) {
        let a = self
            .api
            .put(&self.limit_path(limit), &json!({"value": value}));
        assert_eq!(a.status, 204, "{a:?}");
    }
}

impl Drop for TestUser<'_> {
    fn drop(&mut self) {
        let _ = self.api.delete(&format!("/api/users/{}", enc(&self.name)));
    }
}

async fn connect_as(broker: &Broker, user: &str) -> lapin::Result<Connection> {
    within(
        "connect",
        Connection::connect(
            &broker.uri_with(user, "pw", "/"),
            ConnectionProperties::default(),
        ),
    )
    .await
}

fn row<'a>(rows: &'a Value, user: &str) -> Option<&'a Value> {
    rows.as_array()?.iter().find(|r| r["user"] == user)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reads_and_writes_user_limits_in_rabbitmqs_shapes() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let u = TestUser::new(&api, "ul-api", "");
    let one = format!("/api/user-limits/{}", enc(&u.name));
    assert_eq!(api.get(&one).body, json!([]));
    u.set("max-connections", 2);
    u.set("max-channels", 3);
    let want = json!({"max-channels": 3, "max-connections": 2});
    assert_eq!(api.get(&one).body, json!([{"user": u.name, "value": want}]));
    let all = api.get("/api/user-limits");
    assert_eq!(all.status, 200);
    assert_eq!(
        row(&all.body, &u.name),
        Some(&json!({"user": u.name, "value": want}))
    );
    // The user and the definitions carry them.
    let user = api.get(&format!("/api/users/{}", enc(&u.name)));
    assert_eq!(user.body["limits"], want);
    let defs = api.get("/api/definitions");
    let exported = defs.body["users"]
        .as_array()
        .and_then(|us| us.iter().find(|x| x["name"] == u.name.as_str()))
        .cloned()
        .expect("the user is exported");
    assert_eq!(exported["limits"], want);

    // Refusals, with RabbitMQ's reasons.
    let a = api.put(&u.limit_path("max-queues"), &json!({"value": 1}));
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(
        a.body["reason"],
        "Unrecognised terms [{<<\"max-queues\">>,1}] in user-limits"
    );
    let a = api.put(&u.limit_path("max-channels"), &json!({"value": "x"}));
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(
        a.body["reason"],
        "max-channels should be a number, actually was <<\"x\">>"
    );
    assert_eq!(
        api.put(&u.limit_path("max-channels"), &json!({})).status,
        400
    );
    let a = api.put(
        "/api/user-limits/no-such-user-here/max-channels",
        &json!({"value": 1}),
    );
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(api.get("/api/user-limits/no-such-user-here").status, 404);
    // A management user reads every user's limits but writes none.
    let m = TestUser::new(&api, "ul-mgmt", "management");
    let as_m = Api::on_port(Api::port_of(&broker), &m.name, "pw");
    let seen = as_m.get("/api/user-limits");
    assert_eq!(seen.status, 200);
    assert!(row(&seen.body, &u.name).is_some(), "{seen:?}");
    assert_eq!(
        as_m.put(&u.limit_path("max-channels"), &json!({"value": 9}))
            .status,
        401
    );

    // Delete one, then the other: 204 each time, set or not.
    assert_eq!(api.delete(&u.limit_path("max-channels")).status, 204);
    assert_eq!(
        api.get(&one).body,
        json!([{"user": u.name, "value": {"max-connections": 2}}])
    );
    assert_eq!(api.delete(&u.limit_path("max-channels")).status, 204);
    assert_eq!(api.delete(&u.limit_path("max-connections")).status, 204);
    assert_eq!(api.get(&one).body, json!([]));
    assert!(row(&api.get("/api/user-limits").body, &u.name).is_none());
    assert_eq!(
        api.get(&format!("/api/users/{}", enc(&u.name))).body["limits"],
        json!({})
    );
}

/// An import sets the limits a user entry names and leaves the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_import_sets_the_limits_they_name() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let u = TestUser::new(&api, "ul-import", "");
    u.set("max-connections", 7);
    let entry = |limits: Value| {
        json!({"users": [{"name": u.name, "password_hash": "", "tags": [],
            "hashing_algorithm": "rabbit_password_hashing_sha256", "limits": limits}]})
    };
    let a = api.post("/api/definitions", &entry(json!({"max-channels": 3})));
    assert!(a.status == 201 || a.status == 204, "{a:?}");
    let one = format!("/api/user-limits/{}", enc(&u.name));
    let both = json!([{"user": u.name, "value": {"max-channels": 3, "max-connections": 7}}]);
    assert_eq!(api.get(&one).body, both);
    // `{}` (what an export shows for no limits) changes nothing.
    let a = api.post("/api/definitions", &entry(json!({})));
    assert!(a.status == 201 || a.status == 204, "{a:?}");
    assert_eq!(api.get(&one).body, both);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_refuses_the_users_connection_over_the_limit() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let u = TestUser::new(&api, "ul-conn", "");
    u.set("max-connections", 1);
    let (bystander, by_ch) = open(&broker).await;
    let first = connect_as(&broker, &u.name)
        .await
        .expect("first connection");
    let err = connect_as(&broker, &u.name)
        .await
        .expect_err("a second connection is over the limit");
    let e = amqp_error(&err).expect("an AMQP close");
    assert_eq!(e.get_id(), NOT_ALLOWED);
    assert_eq!(
        e.get_message().as_str(),
        format!(
            "NOT_ALLOWED - connection refused for user '{}': user connection limit (1) is reached",
            u.name
        )
    );
    // Other users are not limited by it.
    let q = unique("ul-by");
    declare_queue(&by_ch, &q).await;
    publish(&by_ch, "", &q, b"still here").await;
    assert_eq!(
        get_eventually(&by_ch, &q, true).await.delivery.data,
        b"still here"
    );
    // Room again once the first is gone.
    first.close(200, "bye".into()).await.expect("close");
    let deadline = Instant::now() + WAIT;
    let again = loop {
        match connect_as(&broker, &u.name).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(amqp_error(&e).map(|e| e.get_id()), Some(NOT_ALLOWED));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no connection after the first closed: {e}"),
        }
    };
    again.close(200, "bye".into()).await.expect("close");
    within(
        "delete",
        by_ch.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("delete");
    bystander.close(200, "bye".into()).await.expect("close");
}

/// Raw, to read the connection.close the over-limit channel.open gets.
async fn raw_as(broker: &Broker, user: &str) -> RawConn {
    let mut c = RawConn::connect(broker.addr()).await;
    c.read_start().await;
    let tune = c.start_ok(user, "pw").await;
    c.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    c
}

async fn open_channel(c: &mut RawConn, ch: u16) -> lapin::protocol::AMQPClass {
    let mut args = Vec::new();
    put_shortstr(&mut args, "");
    c.send_method(ch, 20, 10, &args).await;
    c.read_method().await.1
}

/// `max-channels` counts the user's channels over all its connections; the
/// channel.open over it closes that connection with 530, as RabbitMQ 3.10
/// does, and the user's other connection keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_channels_closes_the_connection_that_opens_one_too_many() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let u = TestUser::new(&api, "ul-chan", "");
    u.set("max-channels", 2);
    let other = connect_as(&broker, &u.name).await.expect("connect");
    let other_ch = channel(&other).await;
    let mut c = raw_as(&broker, &u.name).await;
    assert!(matches!(
        open_channel(&mut c, 1).await,
        lapin::protocol::AMQPClass::Channel(lapin::protocol::channel::AMQPMethod::OpenOk(_))
    ));
    match open_channel(&mut c, 2).await {
        lapin::protocol::AMQPClass::Connection(mconn::AMQPMethod::Close(close)) => {
            assert_eq!(close.reply_code, NOT_ALLOWED);
            assert_eq!(
                close.reply_text.as_str(),
                format!(
                    "NOT_ALLOWED - number of channels opened for user '{}' has reached the maximum allowed user limit of (2)",
                    u.name
                )
            );
        }
        other => panic!("expected connection.close, got {other:?}"),
    }
    // The user's other connection and channel are fine.
    let q = unique("ul-chan-q");
    declare_queue(&other_ch, &q).await;
    within(
        "delete",
        other_ch.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("delete");
    other.close(200, "bye".into()).await.expect("close");
}

/// The limits are replicated state: after a restart (the log replayed) they
/// are still listed and enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_limits_survive_a_restart() {
    let mut broker = Broker::start();
    if broker.is_external() {
        return; // no process to restart
    }
    let name = unique("ul-restart");
    {
        let api = Api::new(&broker);
        let a = api.put(
            &format!("/api/users/{}", enc(&name)),
            &json!({"password": "pw", "tags": ""}),
        );
        assert_eq!(a.status, 201, "{a:?}");
        let a = api.put(
            &format!("/api/permissions/%2F/{}", enc(&name)),
            &json!({"configure": ".*", "write": ".*", "read": ".*"}),
        );
        assert_eq!(a.status, 201, "{a:?}");
        let a = api.put(
            &format!("/api/user-limits/{}/max-connections", enc(&name)),
            &json!({"value": 0}),
        );
        assert_eq!(a.status, 204, "{a:?}");
    }
    broker.restart();
    let api = Api::new(&broker);
    assert_eq!(
        api.get(&format!("/api/user-limits/{}", enc(&name))).body,
        json!([{"user": name, "value": {"max-connections": 0}}])
    );
    let err = connect_as(&broker, &name)
        .await
        .expect_err("max-connections 0 allows none");
    assert_eq!(amqp_error(&err).map(|e| e.get_id()), Some(NOT_ALLOWED));
}
