//! Policies, set through the management API, against the real binary: they
//! apply live to existing and new queues and exchanges (length limits,
//! TTL, dead-lettering, alternate exchanges), the highest priority wins,
//! queue arguments combine with them by RabbitMQ's rules, and removing a
//! policy restores the queue's own arguments.
//!
//! These also run against RabbitMQ 3.10 (`STABLEMQ_TEST_EXTERNAL_URI` and
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT`); RabbitMQ applies policies
//! asynchronously, so effects are polled for.

use crate::http;
use compat_tests::common;

use common::*;
use http::{Api, enc};
use lapin::ExchangeKind;
use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const V: &str = "%2F";

/// Set a policy, expecting 201 (new) or 204 (replaced).
fn set_policy(api: &Api, name: &str, pattern: &str, apply_to: &str, priority: i64, def: Value) {
    let a = api.put(
        &format!("/api/policies/{V}/{}", enc(name)),
        &json!({"pattern": pattern, "apply-to": apply_to, "priority": priority, "definition": def}),
    );
    assert!(
        a.status == 201 || a.status == 204,
        "PUT policy {name}: {a:?}"
    );
}

fn clear_policy(api: &Api, name: &str) {
    let a = api.delete(&format!("/api/policies/{V}/{}", enc(name)));
    assert_eq!(a.status, 204, "DELETE policy {name}: {a:?}");
}

fn queue_path(q: &str) -> String {
    format!("/api/queues/{V}/{}", enc(q))
}

/// Ready messages of a queue, by passive declare.
async fn ready(ch: &lapin::Channel, q: &str) -> u32 {
    queue_counts(ch, q).await.0
}

/// Wait until `q` holds exactly `n` ready messages.
async fn wait_ready(ch: &lapin::Channel, q: &str, n: u32) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = ready(ch, q).await;
        if got == n {
            return;
        }
        assert!(Instant::now() < deadline, "{q}: {got} ready, want {n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_length_policy_trims_existing_queues_and_limits_new_ones() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let prefix = unique("pol-len");
    let old = format!("{prefix}.old");
    declare_queue(&ch, &old).await;
    for b in ["a", "b", "c", "d", "e"] {
        publish(&ch, "", &old, b.as_bytes()).await;
    }
    wait_ready(&ch, &old, 5).await;

    let policy = unique("len");
    set_policy(
        &api,
        &policy,
        &format!("^{prefix}\\."),
        "queues",
        0,
        json!({"max-length": 2}),
    );
    // drop-head: the oldest go.
    wait_ready(&ch, &old, 2).await;
    let shown = api.get_until(&queue_path(&old), "the policy", |b| {
        b["policy"] == policy.as_str()
    });
    assert_eq!(
        shown["effective_policy_definition"],
        json!({"max-length": 2})
    );
    assert_eq!(drain(&ch, &old).await, [b"d".to_vec(), b"e".to_vec()]);

    let new = format!("{prefix}.new");
    declare_queue(&ch, &new).await;
    for b in ["1", "2", "3"] {
        publish(&ch, "", &new, b.as_bytes()).await;
    }
    wait_ready(&ch, &new, 2).await;

    // Removal restores the queue's own (absent) limit.
    clear_policy(&api, &policy);
    api.get_until(&queue_path(&new), "no policy", |b| b["policy"].is_null());
    for b in ["4", "5", "6"] {
        publish(&ch, "", &new, b.as_bytes()).await;
    }
    wait_ready(&ch, &new, 5).await;
    // A queue outside the pattern never had a limit.
    let other = unique("pol-other");
    declare_queue(&ch, &other).await;
    set_policy(
        &api,
        &policy,
        &format!("^{prefix}\\."),
        "queues",
        0,
        json!({"max-length": 1}),
    );
    for b in ["x", "y"] {
        publish(&ch, "", &other, b.as_bytes()).await;
    }
    wait_ready(&ch, &other, 2).await;
    wait_ready(&ch, &new, 1).await;
    clear_policy(&api, &policy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_and_dead_letter_policy_dead_letters_expired_messages() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let dlx = unique("pol-dlx");
    ch.exchange_declare(
        dlx.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare dlx");
    let dead = unique("pol-dead");
    declare_queue(&ch, &dead).await;
    ch.queue_bind(
        dead.as_str().into(),
        dlx.as_str().into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind dead");
    let q = unique("pol-ttl");
    declare_queue(&ch, &q).await;
    let policy = unique("ttl");
    set_policy(
        &api,
        &policy,
        &format!("^{q}$"),
        "queues",
        0,
        json!({"message-ttl": 50, "dead-letter-exchange": dlx}),
    );
    api.get_until(&queue_path(&q), "the policy", |b| {
        b["policy"] == policy.as_str()
    });
    publish(&ch, "", &q, b"expires").await;
    wait_ready(&ch, &dead, 1).await;
    let m = get(&ch, &dead).await.expect("dead-lettered message");
    assert_eq!(m.delivery.data, b"expires");
    let headers = m.delivery.properties.headers().clone().expect("x-death");
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("no x-death in {headers:?}");
    };
    let Some(AMQPValue::FieldTable(first)) = deaths.as_slice().first() else {
        panic!("empty x-death");
    };
    assert_eq!(
        first.inner().get("reason"),
        Some(&AMQPValue::LongString("expired".into()))
    );
    assert_eq!(ready(&ch, &q).await, 0);

    // Without the policy a message stays.
    clear_policy(&api, &policy);
    api.get_until(&queue_path(&q), "no policy", |b| b["policy"].is_null());
    publish(&ch, "", &q, b"stays").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready(&ch, &q).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_highest_priority_wins_and_arguments_combine_by_rabbitmq_rules() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let prefix = unique("pol-prio");
    let low = unique("low");
    let high = unique("high");
    set_policy(
        &api,
        &low,
        &format!("^{prefix}"),
        "all",
        1,
        json!({"max-length": 10}),
    );
    set_policy(
        &api,
        &high,
        &format!("^{prefix}\\.q"),
        "queues",
        5,
        json!({"max-length": 1}),
    );
    let q = format!("{prefix}.q");
    declare_queue(&ch, &q).await;
    let shown = api.get_until(&queue_path(&q), "the policy", |b| {
        b["policy"] == high.as_str()
    });
    assert_eq!(
        shown["effective_policy_definition"],
        json!({"max-length": 1})
    );
    for b in ["1", "2", "3"] {
        publish(&ch, "", &q, b.as_bytes()).await;
    }
    wait_ready(&ch, &q, 1).await;

    // max-length: the smaller of argument (3) and policy (10) applies.
    let argq = format!("{prefix}.arg");
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(3));
    declare_queue_with(&ch, &argq, QueueDeclareOptions::default(), args).await;
    api.get_until(&queue_path(&argq), "the policy", |b| {
        b["policy"] == low.as_str()
    });
    for b in ["1", "2", "3", "4", "5"] {
        publish(&ch, "", &argq, b.as_bytes()).await;
    }
    wait_ready(&ch, &argq, 3).await;
    // And the smaller policy value wins over a larger argument.
    set_policy(
        &api,
        &low,
        &format!("^{prefix}"),
        "all",
        1,
        json!({"max-length": 2}),
    );
    wait_ready(&ch, &argq, 2).await;
    clear_policy(&api, &low);
    clear_policy(&api, &high);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alternate_exchange_policy_catches_unroutable_messages() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let (_conn, ch) = open(&broker).await;
    let x = unique("pol-x");
    let ae = unique("pol-ae");
    for (name, kind) in [(&x, ExchangeKind::Direct), (&ae, ExchangeKind::Fanout)] {
        ch.exchange_declare(
            name.as_str().into(),
            kind,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    }
    let caught = unique("pol-caught");
    declare_queue(&ch, &caught).await;
    ch.queue_bind(
        caught.as_str().into(),
        ae.as_str().into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    let policy = unique("ae");
    // A queue-only policy does not touch exchanges.
    set_policy(
        &api,
        &policy,
        &format!("^{x}$"),
        "queues",
        0,
        json!({"alternate-exchange": ae}),
    );
    publish(&ch, &x, "nowhere", b"lost").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ready(&ch, &caught).await, 0);

    set_policy(
        &api,
        &policy,
        &format!("^{x}$"),
        "exchanges",
        0,
        json!({"alternate-exchange": ae}),
    );
    api.get_until(
        &format!("/api/exchanges/{V}/{}", enc(&x)),
        "the policy",
        |b| b["policy"] == policy.as_str(),
    );
    publish(&ch, &x, "nowhere", b"caught").await;
    wait_ready(&ch, &caught, 1).await;
    assert_eq!(
        get_body(&ch, &caught).await.as_deref(),
        Some(&b"caught"[..])
    );

    clear_policy(&api, &policy);
    api.get_until(
        &format!("/api/exchanges/{V}/{}", enc(&x)),
        "no policy",
        |b| b["policy"].is_null(),
    );
    publish(&ch, &x, "nowhere", b"lost again").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ready(&ch, &caught).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_endpoints_answer_like_rabbitmq() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let name = unique("pol-api");
    let path = format!("/api/policies/{V}/{}", enc(&name));
    let body = json!({"pattern": "^pol-api", "definition": {"max-length": 7}, "priority": 3, "apply-to": "queues"});
    assert_eq!(api.put(&path, &body).status, 201);
    assert_eq!(api.put(&path, &body).status, 204);
    let got = api.get(&path);
    assert_eq!(got.status, 200);
    assert_eq!(
        got.body,
        json!({"vhost": "/", "name": name, "pattern": "^pol-api", "apply-to": "queues",
               "definition": {"max-length": 7}, "priority": 3})
    );
    let listed = api.get(&format!("/api/policies/{V}"));
    assert!(
        listed
            .body
            .as_array()
            .expect("list")
            .iter()
            .any(|p| p["name"] == name.as_str()),
        "{:?}",
        listed.body
    );
    assert!(
        api.get("/api/policies")
            .body
            .as_array()
            .expect("list")
            .iter()
            .any(|p| p["name"] == name.as_str())
    );

    for bad in [
        json!({"pattern": "^x", "definition": {"no-such-key": 1}}),
        json!({"pattern": "^x", "definition": {"max-length": "ten"}}),
        json!({"pattern": "^x", "definition": {"max-length": 1}, "apply-to": "bogus"}),
        json!({"definition": {"max-length": 1}}),
        json!({"pattern": "^x"}),
    ] {
        let a = api.put(&format!("/api/policies/{V}/{}", enc(&unique("bad"))), &bad);
        assert_eq!(a.status, 400, "{bad}: {a:?}");
        assert_eq!(a.body["error"], "bad_request");
    }
    assert_eq!(api.put("/api/policies/no-such-vhost/p", &body).status, 404);
    assert_eq!(api.get("/api/policies/no-such-vhost").status, 404);
    assert_eq!(api.delete(&path).status, 204);
    assert_eq!(api.delete(&path).status, 404);
    assert_eq!(api.get(&path).status, 404);

    // Operator policies list empty; a parameter of a component no plugin
    // provides is refused (parameters.rs tests the rest).
    assert_eq!(api.get("/api/operator-policies").body, json!([]));
    let p = api.put(
        &format!("/api/parameters/no-such-component/{V}/up"),
        &json!({"value": {"uri": "amqp://"}}),
    );
    assert_eq!(p.status, 400);
    let globals = api.get("/api/global-parameters");
    assert!(
        globals
            .body
            .as_array()
            .expect("list")
            .iter()
            .all(|p| p["name"].is_string() && !p["value"].is_null()),
        "{:?}",
        globals.body
    );
}
