//! `stablemq ctl` against the real binary: objects made by a real client
//! (lapin) show up in its tables and JSON, and its write commands change the
//! broker as the matching `rabbitmqctl` commands would.
//!
//! ctl speaks RabbitMQ's management API, so these tests also run against a
//! RabbitMQ 3.10 with the management plugin: set `STABLEMQ_TEST_EXTERNAL_URI`
//! and `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT` (e.g. from
//! `scripts/rabbitmq-node.sh start`). RabbitMQ refreshes its queue statistics
//! every 5 seconds, so list checks poll until they hold.

use compat_tests::common;

use common::*;
use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The management API's base URL for `broker`.
fn api_url(broker: &Broker) -> String {
    let port = match std::env::var("STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT") {
        Ok(p) if broker.is_external() => p.parse().expect("management port"),
        _ => broker.management_port,
    };
    format!("http://127.0.0.1:{port}")
}

/// Run `stablemq ctl --url API ARGS...` (bounded: ctl's own request timeout
/// is 60 s, and nothing here sends a large body).
fn ctl(broker: &Broker, args: &[&str]) -> Output {
    Command::new(compat_tests::binary_path())
        .arg("ctl")
        .arg("--url")
        .arg(api_url(broker))
        .args(args)
        .output()
        .expect("run stablemq ctl")
}

/// Run ctl, expect success, return stdout.
fn ctl_ok(broker: &Broker, args: &[&str]) -> String {
    let out = ctl(broker, args);
    assert!(
        out.status.success(),
        "stablemq ctl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Run ctl until `check` accepts its output (RabbitMQ's statistics lag).
fn ctl_until(broker: &Broker, args: &[&str], what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = ctl_ok(broker, args);
        if check(&out) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "ctl {args:?} never showed {what}:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The table's rows, each split on runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn has_row(table: &str, want: &[&str]) -> bool {
    rows(table).iter().any(|r| r == want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_show_what_a_client_made_as_tables_and_json() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("ctl-q");
    let x = unique("ctl-x");
    declare_queue_with(
        &ch,
        &q,
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    within(
        "exchange.declare",
        ch.exchange_declare(
            x.as_str().into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.declare");
    bind_queue(&ch, &q, &x, "orders.#").await;
    for i in 0..3 {
        publish(&ch, &x, "orders.new", format!("m{i}").as_bytes()).await;
    }

    let table = ctl_until(
        &broker,
        &["list_queues", "name", "messages", "durable"],
        "3 messages",
        |t| has_row(t, &[&q, "3", "true"]),
    );
    assert_eq!(rows(&table)[0], ["name", "messages", "durable"], "{table}");

    // rabbitmqctl's default columns, and the JSON formatter with JSON types.
    let default = ctl_ok(&broker, &["list_queues"]);
    assert!(has_row(&default, &[&q, "3"]), "{default}");
    let json: Value = serde_json::from_str(&ctl_ok(
        &broker,
        &[
            "list_queues",
            "name",
            "messages",
            "durable",
            "--formatter",
            "json",
        ],
    ))
    .expect("json");
    let mine: Vec<&Value> = json
        .as_array()
        .expect("array")
        .iter()
        .filter(|o| o["name"] == q.as_str())
        .collect();
    assert_eq!(
        mine,
        [&serde_json::json!({"name": q, "messages": 3, "durable": true})]
    );

    let exchanges = ctl_ok(&broker, &["list_exchanges"]);
    assert!(has_row(&exchanges, &[&x, "topic"]), "{exchanges}");
    assert!(
        has_row(&exchanges, &["amq.fanout", "fanout"]),
        "{exchanges}"
    );

    let bindings = ctl_ok(&broker, &["list_bindings"]);
    assert!(
        has_row(&bindings, &[&x, "exchange", &q, "queue", "orders.#", "{}"]),
        "{bindings}"
    );
    let no_header = ctl_ok(
        &broker,
        &[
            "list_bindings",
            "source_name",
            "destination_name",
            "--no-table-headers",
        ],
    );
    assert!(!no_header.contains("source_name"), "{no_header}");
    assert!(has_row(&no_header, &[&x, &q]), "{no_header}");

    let conns = ctl_until(
        &broker,
        &["list_connections", "user", "peer_host"],
        "our connection",
        |t| has_row(t, &["guest", "127.0.0.1"]),
    );
    assert_eq!(rows(&conns)[0], ["user", "peer_host"]);

    let users = ctl_ok(&broker, &["list_users"]);
    assert!(has_row(&users, &["guest", "[administrator]"]), "{users}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_commands_change_the_broker() {
    let broker = Broker::start();
    // A connection name of its own, to find it among others on a shared broker.
    let conn_name = unique("ctl-conn");
    let conn = within(
        "connection",
        Connection::connect(
            &broker.uri(),
            ConnectionProperties::default().with_connection_name(conn_name.as_str().into()),
        ),
    )
    .await
    .expect("connect");
    let ch = confirm_channel(&conn).await;
    let q = unique("ctl-w");
    declare_queue(&ch, &q).await;
    for _ in 0..5 {
        publish_props(&ch, "", &q, b"x", BasicProperties::default()).await;
    }

    // A user made by ctl logs in over AMQP with the permissions ctl gave it.
    let user = unique("ctl-user");
    ctl_ok(
        &broker,
        &["add_user", &user, "pw-1", "--tags", "monitoring"],
    );
    ctl_ok(
        &broker,
        &["set_permissions", &user, "^$", "^$", &format!("^{q}$")],
    );
    let users = ctl_ok(&broker, &["list_users"]);
    assert!(has_row(&users, &[&user, "[monitoring]"]), "{users}");
    let perms = ctl_ok(&broker, &["list_permissions"]);
    assert!(
        has_row(&perms, &[&user, "^$", "^$", &format!("^{q}$")]),
        "{perms}"
    );
    let theirs = connect_uri(&broker.uri_with(&user, "pw-1", "/")).await;
    theirs.close(200, "bye".into()).await.expect("close");
    // ... and ctl as that user reads, but cannot write (monitoring tag).
    let denied = ctl(
        &broker,
        &["--user", &user, "--password", "pw-1", "add_user", "x", "y"],
    );
    assert_eq!(denied.status.code(), Some(1));
    ctl_ok(&broker, &["delete_user", &user]);
    let users = ctl_ok(&broker, &["list_users", "name"]);
    assert!(!has_row(&users, &[&user]), "{users}");

    ctl_ok(&broker, &["purge_queue", &q]);
    assert_eq!(queue_counts(&ch, &q).await.0, 0);

    // --if-empty refuses a queue with messages, as RabbitMQ does.
    publish(&ch, "", &q, b"y").await;
    let refused = ctl(&broker, &["delete_queue", &q, "--if-empty"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    ctl_ok(&broker, &["delete_queue", &q]);
    let gone = ctl_ok(&broker, &["list_queues", "name"]);
    assert!(!has_row(&gone, &[&q]), "{gone}");

    // close_connection with the name list_connections shows.
    let find = |out: &str| -> Option<String> {
        let list: Value = serde_json::from_str(out).expect("json");
        list.as_array()?
            .iter()
            .find(|c| c["user_provided_name"] == conn_name.as_str())
            .and_then(|c| c["name"].as_str().map(str::to_string))
    };
    let listed = ctl_until(
        &broker,
        &[
            "list_connections",
            "name",
            "user_provided_name",
            "--formatter",
            "json",
        ],
        "our connection",
        |out| find(out).is_some(),
    );
    let name = find(&listed).expect("our connection");
    ctl_ok(&broker, &["close_connection", &name, "moving to StableMQ"]);
    wait_connection_closed(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_export_and_import_through_files() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("ctl-def");
    declare_queue_with(
        &ch,
        &q,
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("defs.json");
    let file = file.to_str().expect("utf-8 path");
    ctl_ok(&broker, &["export_definitions", file]);
    let defs: Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("read")).expect("json");
    assert!(
        defs["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .any(|x| x["name"] == q.as_str()),
        "{defs:#}"
    );
    assert_eq!(
        ctl_ok(&broker, &["export_definitions", "-"])
            .trim_start()
            .chars()
            .next(),
        Some('{')
    );

    // Import into a second broker: the queue appears there.
    let other = Broker::start();
    ctl_ok(&other, &["import_definitions", file]);
    let listed = ctl_ok(&other, &["list_queues", "name", "durable"]);
    assert!(has_row(&listed, &[&q, "true"]), "{listed}");

    // Not JSON: refused before anything is sent, exit 2.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "not json").expect("write");
    let out = ctl(&other, &["import_definitions", bad.to_str().expect("path")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn memory_watermark_raises_and_clears_the_alarm() {
    let broker = Broker::start();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(WAIT))
        .build()
        .into();
    // guest:guest
    let alarms = |b: &Broker| {
        let url = format!("{}/api/health/checks/alarms", api_url(b));
        let resp = agent
            .get(&url)
            .header("authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        resp.status().as_u16().to_string()
    };
    if broker.is_external() {
        // RabbitMQ has no HTTP endpoint for it: a clear usage error.
        let out = ctl(&broker, &["set_vm_memory_high_watermark", "0.4"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("rabbitmqctl"));
        return;
    }
    let wait_for = |code: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while alarms(&broker) != code {
            assert!(
                Instant::now() < deadline,
                "alarms check never answered {code}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for("200");
    ctl_ok(&broker, &["set_vm_memory_high_watermark", "absolute", "1"]);
    wait_for("503");
    ctl_ok(&broker, &["set_vm_memory_high_watermark", "0.99"]);
    wait_for("200");
    let bad = ctl(
        &broker,
        &["set_vm_memory_high_watermark", "absolute", "12XB"],
    );
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn cluster_status_in_both_spellings_and_errors_with_the_api_reason() {
    let broker = Broker::start();
    let table = ctl_ok(&broker, &["cluster_status"]);
    let json: Value =
        serde_json::from_str(&ctl_ok(&broker, &["cluster-status", "--json"])).expect("json");
    let nodes = json.as_array().expect("array");
    assert_eq!(nodes.len(), 1, "{json:#}");
    let name = nodes[0]["name"].as_str().expect("name");
    assert!(table.contains(name), "{table}");
    if !broker.is_external() {
        assert_eq!(nodes[0]["role"], "master", "{json:#}");
    }
    let out = ctl(&broker, &["--password", "wrong", "list_queues"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("401"), "{err}");
}
