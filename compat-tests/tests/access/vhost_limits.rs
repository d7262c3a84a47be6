//! Vhost limits (`max-connections`, `max-queues`) set through the
//! management API and enforced on AMQP, against the real binary: a
//! connection or a queue over the limit is refused with RabbitMQ's code and
//! text, one within it is accepted, and lifting the limit lets it through.
//!
//! These also run against RabbitMQ 3.10 (`STABLEMQ_TEST_EXTERNAL_URI` and
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT`). RabbitMQ counts connections
//! asynchronously, so a connection allowed after another closed is polled for.

use crate::http;
use compat_tests::common;

use common::*;
use http::{Api, enc};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::json;
use std::time::{Duration, Instant};

/// A fresh vhost on which guest has every permission; deleted on drop.
struct TestVhost<'a> {
    api: &'a Api,
    name: String,
}

impl<'a> TestVhost<'a> {
    fn new(api: &'a Api, prefix: &str) -> TestVhost<'a> {
        let name = unique(prefix);
        let v = enc(&name);
        assert_eq!(api.put(&format!("/api/vhosts/{v}"), &json!({})).status, 201);
        let perms = json!({"configure": ".*", "write": ".*", "read": ".*"});
        let a = api.put(&format!("/api/permissions/{v}/guest"), &perms);
        assert!(a.status == 201 || a.status == 204, "{a:?}");
        TestVhost { api, name }
    }

    fn path(&self) -> String {
        enc(&self.name)
    }
}

impl Drop for TestVhost<'_> {
    fn drop(&mut self) {
        let _ = self.api.delete(&format!("/api/vhosts/{}", self.path()));
    }
}

async fn connect_to(broker: &Broker, vhost: &str) -> lapin::Result<Connection> {
    within(
        "connect",
        Connection::connect(
            &broker.uri_with("guest", "guest", vhost),
            ConnectionProperties::default(),
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_refuses_the_connection_over_the_limit() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let vh = TestVhost::new(&api, "limit-conn");
    let a = api.put(
        &format!("/api/vhost-limits/{}/max-connections", vh.path()),
        &json!({"value": 1}),
    );
    assert_eq!(a.status, 204, "{a:?}");
    let listed = api.get(&format!("/api/vhost-limits/{}", vh.path()));
    assert_eq!(
        listed.body,
        json!([{"vhost": vh.name, "value": {"max-connections": 1}}])
    );

    // Within the limit: allowed.
    let first = connect_to(&broker, &vh.name)
        .await
        .expect("first connection");
    // Over it: 530 with RabbitMQ's text.
    let err = connect_to(&broker, &vh.name)
        .await
        .expect_err("second connection is over the limit");
    let e = amqp_error(&err).expect("an AMQP close");
    assert_eq!(e.get_id(), NOT_ALLOWED);
    assert_eq!(
        e.get_message().as_str(),
        format!(
            "NOT_ALLOWED - access to vhost '{}' refused for user 'guest': connection limit (1) is reached",
            vh.name
        )
    );
    // Another vhost is not limited by this one's limit.
    let other = connect_to(&broker, "/")
        .await
        .expect("vhost / has no limit");
    other.close(200, "bye".into()).await.expect("close");

    // Once the first one is gone there is room again.
    first.close(200, "bye".into()).await.expect("close");
    let deadline = Instant::now() + WAIT;
    let again = loop {
        match connect_to(&broker, &vh.name).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(amqp_error(&e).map(|e| e.get_id()), Some(NOT_ALLOWED));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no connection after the first closed: {e}"),
        }
    };
    // Lifting the limit lets a second one in.
    let a = api.delete(&format!("/api/vhost-limits/{}/max-connections", vh.path()));
    assert_eq!(a.status, 204, "{a:?}");
    assert_eq!(
        api.get(&format!("/api/vhost-limits/{}", vh.path())).body,
        json!([])
    );
    let second = connect_to(&broker, &vh.name)
        .await
        .expect("no limit any more");
    second.close(200, "bye".into()).await.expect("close");
    again.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_queues_refuses_a_new_queue_over_the_limit() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let vh = TestVhost::new(&api, "limit-q");
    let a = api.put(
        &format!("/api/vhost-limits/{}/max-queues", vh.path()),
        &json!({"value": 2}),
    );
    assert_eq!(a.status, 204, "{a:?}");
    let conn = connect_to(&broker, &vh.name).await.expect("connect");
    let ch = channel(&conn).await;
    declare_queue(&ch, "q1").await;
    declare_queue(&ch, "q2").await;
    // Redeclaring an existing queue creates nothing: allowed at the limit.
    declare_queue(&ch, "q1").await;
    let res = within(
        "declare q3",
        ch.queue_declare(
            "q3".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    let err = res.expect_err("a third queue is over the limit");
    let e = amqp_error(&err).expect("a channel close");
    assert_eq!(e.get_id(), PRECONDITION_FAILED);
    assert_eq!(
        e.get_message().as_str(),
        format!(
            "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost '{}' (2) is reached",
            vh.name
        )
    );
    // The management API's declare is refused the same way.
    let a = api.put(
        &format!("/api/queues/{}/q3", vh.path()),
        &json!({"durable": true}),
    );
    assert_eq!(a.status, 400, "{a:?}");
    // Deleting a queue makes room.
    let ch = channel(&conn).await;
    within(
        "delete q2",
        ch.queue_delete("q2".into(), lapin::options::QueueDeleteOptions::default()),
    )
    .await
    .expect("delete");
    declare_queue(&ch, "q3").await;
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_validated_and_admin_only() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let vh = TestVhost::new(&api, "limit-val");
    let a = api.put(
        &format!("/api/vhost-limits/{}/max-bogus", vh.path()),
        &json!({"value": 1}),
    );
    assert_eq!(a.status, 400, "{a:?}");
    let a = api.put(
        &format!("/api/vhost-limits/{}/max-queues", vh.path()),
        &json!({"value": "many"}),
    );
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(
        api.put(
            "/api/vhost-limits/no-such-vhost/max-queues",
            &json!({"value": 1})
        )
        .status,
        404
    );
    assert_eq!(api.get("/api/vhost-limits/no-such-vhost").status, 404);
    // Both limits in one value; the list shows every limited vhost.
    for (name, n) in [("max-queues", 10), ("max-connections", 20)] {
        let a = api.put(
            &format!("/api/vhost-limits/{}/{name}", vh.path()),
            &json!({"value": n}),
        );
        assert_eq!(a.status, 204, "{a:?}");
    }
    let all = api.get("/api/vhost-limits");
    let mine: Vec<_> = all
        .body
        .as_array()
        .expect("list")
        .iter()
        .filter(|l| l["vhost"] == vh.name.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{:?}", all.body);
    assert_eq!(
        mine[0]["value"],
        json!({"max-queues": 10, "max-connections": 20})
    );
    // The same limits are the vhost-limits runtime parameter.
    let p = api.get(&format!(
        "/api/parameters/vhost-limits/{}/limits",
        vh.path()
    ));
    assert_eq!(p.status, 200, "{p:?}");
    assert_eq!(p.body["component"], "vhost-limits");
    assert_eq!(p.body["value"], mine[0]["value"]);

    // A user without the administrator tag may not set limits.
    let user = unique("limit-user");
    let a = api.put(
        &format!("/api/users/{}", enc(&user)),
        &json!({"password": "pw", "tags": "management"}),
    );
    assert_eq!(a.status, 201, "{a:?}");
    let weak = Api::on_port(Api::port_of(&broker), &user, "pw");
    let a = weak.put(
        &format!("/api/vhost-limits/{}/max-queues", vh.path()),
        &json!({"value": 1}),
    );
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(
        api.delete(&format!("/api/users/{}", enc(&user))).status,
        204
    );
}

/// RabbitMQ keeps a vhost's limits parameter once its last limit is
/// deleted (and even when a limit that was never set is deleted), as the
/// empty list `[]`; `{}` set directly is stored the same way. The list of
/// all vhosts shows it, the one-vhost list and the enforcement ignore it,
/// and definitions carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_limits_are_kept_as_rabbitmq_keeps_them() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let vh = TestVhost::new(&api, "limit-empty");
    let lim = |name: &str| format!("/api/vhost-limits/{}/{name}", vh.path());
    let param = format!("/api/parameters/vhost-limits/{}/limits", vh.path());
    let in_all = |api: &Api| -> Vec<serde_json::Value> {
        let all = api.get("/api/vhost-limits");
        assert_eq!(all.status, 200, "{all:?}");
        all.body
            .as_array()
            .expect("list")
            .iter()
            .filter(|l| l["vhost"] == vh.name.as_str())
            .cloned()
            .collect()
    };

    // Deleting a limit that was never set leaves an empty parameter.
    assert_eq!(api.get(&param).status, 404);
    assert_eq!(api.delete(&lim("max-queues")).status, 204);
    assert_eq!(api.get(&param).body["value"], json!([]));
    assert_eq!(in_all(&api), vec![json!({"vhost": vh.name, "value": []})]);

    // Set, then the last one deleted: empty again, not gone.
    assert_eq!(
        api.put(&lim("max-queues"), &json!({"value": 0})).status,
        204
    );
    assert_eq!(
        api.get(&format!("/api/vhost-limits/{}", vh.path())).body,
        json!([{"vhost": vh.name, "value": {"max-queues": 0}}])
    );
    assert_eq!(api.delete(&lim("max-queues")).status, 204);
    assert_eq!(
        api.get(&format!("/api/vhost-limits/{}", vh.path())).body,
        json!([])
    );
    assert_eq!(in_all(&api), vec![json!({"vhost": vh.name, "value": []})]);
    let doc = api.get("/api/definitions").body;
    let want =
        json!({"vhost": vh.name, "component": "vhost-limits", "name": "limits", "value": []});
    assert!(
        doc["parameters"].as_array().expect("list").contains(&want),
        "{:?}",
        doc["parameters"]
    );

    // `{}` through the parameters API is stored as `[]` too.
    let a = api.put(&param, &json!({"value": {}}));
    assert!(a.status == 201 || a.status == 204, "{a:?}");
    assert_eq!(api.get(&param).body["value"], json!([]));

    // Empty limits limit nothing: the queue that max-queues 0 refused is
    // declared now.
    let conn = connect_to(&broker, &vh.name).await.expect("connect");
    let ch = channel(&conn).await;
    declare_queue(&ch, "no-limit-left").await;
    conn.close(200, "bye".into()).await.expect("close");
}
