//! Runtime parameters and global parameters through the management API,
//! against the real binary: RabbitMQ's JSON shapes and status codes, the
//! components that are accepted or refused, the definitions export and
//! import, and persistence across a SIGKILL restart (they are events in
//! the log, like declarations).
//!
//! The API tests also run against RabbitMQ 3.10 (`STABLEMQ_TEST_EXTERNAL_URI`
//! and `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT`) with the federation and
//! shovel plugins enabled (`RABBITMQ_EXTRA_PLUGINS=rabbitmq_shovel,
//! rabbitmq_federation scripts/rabbitmq-node.sh start ...`): without them
//! RabbitMQ refuses those components, as StableMQ refuses unknown ones.

use crate::http;
use compat_tests::common;

use common::*;
use http::{Api, enc};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::{Value, json};

const V: &str = "%2F";

fn upstream(uri: &str) -> Value {
    json!({"uri": uri, "expires": 3600000})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_are_stored_listed_and_deleted_in_rabbitmq_shapes() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let name = unique("up");
    let path = format!("/api/parameters/federation-upstream/{V}/{}", enc(&name));

    let a = api.put(&path, &json!({"value": upstream("amqp://127.0.0.1:1")}));
    assert_eq!(a.status, 201, "{a:?}");
    let a = api.put(&path, &json!({"value": upstream("amqp://127.0.0.1:2")}));
    assert_eq!(a.status, 204, "{a:?}");
    let one = api.get(&path);
    assert_eq!(one.status, 200, "{one:?}");
    assert_eq!(
        one.body,
        json!({"vhost": "/", "component": "federation-upstream", "name": name,
               "value": upstream("amqp://127.0.0.1:2")})
    );
    for list in [
        "/api/parameters".to_string(),
        "/api/parameters/federation-upstream".to_string(),
        format!("/api/parameters/federation-upstream/{V}"),
    ] {
        let l = api.get(&list);
        assert_eq!(l.status, 200, "{list}: {l:?}");
        assert!(
            l.body.as_array().expect("list").contains(&one.body),
            "{list}: {:?}",
            l.body
        );
    }
    // Another component's list does not show it.
    let l = api.get(&format!("/api/parameters/shovel/{V}"));
    assert_eq!(l.status, 200);
    assert!(!l.body.as_array().expect("list").contains(&one.body));

    assert_eq!(api.delete(&path).status, 204);
    assert_eq!(api.get(&path).status, 404);
    assert_eq!(api.delete(&path).status, 404);

    // Refusals: a component no plugin provides, a missing value, a vhost
    // that does not exist.
    let bad = api.put(
        &format!("/api/parameters/no-such-component/{V}/x"),
        &json!({"value": {}}),
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(bad.body["error"], "bad_request");
    assert!(
        bad.body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("component no-such-component not found")),
        "{bad:?}"
    );
    assert_eq!(api.put(&path, &json!({})).status, 400);
    let a = api.put(
        "/api/parameters/federation-upstream/no-such-vhost/x",
        &json!({"value": upstream("amqp://127.0.0.1:1")}),
    );
    assert_eq!(a.status, 404, "{a:?}");
    assert_eq!(
        api.get("/api/parameters/federation-upstream/no-such-vhost")
            .status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_parameters_are_stored_listed_and_deleted() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let name = unique("global");
    let path = format!("/api/global-parameters/{}", enc(&name));
    assert_eq!(api.get(&path).status, 404);
    let a = api.put(&path, &json!({"value": {"a": 1, "b": "two"}}));
    assert_eq!(a.status, 201, "{a:?}");
    let a = api.put(&path, &json!({"value": {"a": 2}}));
    assert_eq!(a.status, 204, "{a:?}");
    let one = api.get(&path);
    assert_eq!(one.body, json!({"name": name, "value": {"a": 2}}));
    let all = api.get("/api/global-parameters");
    let all = all.body.as_array().expect("list");
    assert!(all.contains(&one.body), "{all:?}");
    assert_eq!(api.delete(&path).status, 204);
    assert_eq!(api.get(&path).status, 404);
    assert_eq!(api.delete(&path).status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_survive_a_sigkill_restart() {
    let mut broker = Broker::start();
    let api = Api::new(&broker);
    let up = format!("/api/parameters/federation-upstream/{V}/up1");
    assert_eq!(
        api.put(&up, &json!({"value": upstream("amqp://127.0.0.1:1")}))
            .status,
        201
    );
    let shovel =
        json!({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"});
    let sh = format!("/api/parameters/shovel/{V}/sh1");
    assert_eq!(api.put(&sh, &json!({"value": shovel})).status, 201);
    let g = "/api/global-parameters/g1";
    assert_eq!(api.put(g, &json!({"value": "kept"})).status, 201);
    let lim = format!("/api/vhost-limits/{V}/max-queues");
    assert_eq!(api.put(&lim, &json!({"value": 1})).status, 204);
    // Deleted before the crash: must stay deleted.
    let gone = "/api/global-parameters/g2";
    assert_eq!(api.put(gone, &json!({"value": 1})).status, 201);
    assert_eq!(api.delete(gone).status, 204);

    broker.restart();
    let api = Api::new(&broker);
    assert_eq!(api.get(&up).body["value"], upstream("amqp://127.0.0.1:1"));
    assert_eq!(api.get(&sh).body["value"], shovel);
    assert_eq!(api.get(g).body["value"], "kept");
    assert_eq!(api.get(gone).status, 404);
    assert_eq!(
        api.get(&format!("/api/vhost-limits/{V}")).body,
        json!([{"vhost": "/", "value": {"max-queues": 1}}])
    );
    // And the restored limit is enforced.
    let (_c, ch) = open(&broker).await;
    declare_queue(&ch, "only-one").await;
    let err = within(
        "declare over the limit",
        ch.queue_declare(
            "one-too-many".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect_err("over the restored limit");
    assert_eq!(reply_code(&err), Some(PRECONDITION_FAILED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_carry_parameters_global_parameters_and_limits() {
    let broker = Broker::start();
    let api = Api::new(&broker);
    let vhost = unique("defs-params");
    let v = enc(&vhost);
    assert_eq!(api.put(&format!("/api/vhosts/{v}"), &json!({})).status, 201);
    let up = upstream("amqp://127.0.0.1:1");
    let a = api.put(
        &format!("/api/parameters/federation-upstream/{v}/up"),
        &json!({"value": up}),
    );
    assert_eq!(a.status, 201, "{a:?}");
    let a = api.put(
        &format!("/api/vhost-limits/{v}/max-connections"),
        &json!({"value": 5}),
    );
    assert_eq!(a.status, 204, "{a:?}");
    let gname = unique("g");
    let a = api.put(
        &format!("/api/global-parameters/{}", enc(&gname)),
        &json!({"value": [1, 2]}),
    );
    assert_eq!(a.status, 201, "{a:?}");

    let doc = api.get("/api/definitions").body;
    let params = doc["parameters"].as_array().expect("parameters");
    let want_up =
        json!({"vhost": vhost, "component": "federation-upstream", "name": "up", "value": up});
    let want_lim = json!({"vhost": vhost, "component": "vhost-limits", "name": "limits",
                          "value": {"max-connections": 5}});
    assert!(params.contains(&want_up), "{params:?}");
    assert!(params.contains(&want_lim), "{params:?}");
    let globals = doc["global_parameters"].as_array().expect("globals");
    assert!(
        globals.contains(&json!({"name": gname, "value": [1, 2]})),
        "{globals:?}"
    );
    let per_vhost = api.get(&format!("/api/definitions/{v}")).body;
    let mine = per_vhost["parameters"].as_array().expect("parameters");
    assert_eq!(mine.len(), 2, "{mine:?}");
    // RabbitMQ 3.10 keeps the vhost field on parameters in this export.
    assert!(
        mine.iter().all(|p| p["vhost"] == vhost.as_str()),
        "{mine:?}"
    );

    // Into a fresh broker: everything comes back, the limit enforced.
    if broker.is_external() {
        return;
    }
    let fresh = Broker::start();
    let api2 = Api::new(&fresh);
    let a = api2.post("/api/definitions", &doc);
    assert_eq!(a.status, 204, "{a:?}");
    let back = api2.get("/api/definitions").body;
    assert!(
        back["parameters"]
            .as_array()
            .expect("list")
            .contains(&want_up)
    );
    assert!(
        back["parameters"]
            .as_array()
            .expect("list")
            .contains(&want_lim)
    );
    assert!(
        back["global_parameters"]
            .as_array()
            .expect("list")
            .contains(&json!({"name": gname, "value": [1, 2]}))
    );
    assert_eq!(
        api2.get(&format!("/api/vhost-limits/{v}")).body,
        json!([{"vhost": vhost, "value": {"max-connections": 5}}])
    );
}

/// The cluster's identity as RabbitMQ keeps it among the global
/// parameters: an `internal_cluster_id` made at first boot (kept across a
/// restart) and replaced by a definitions import, and `cluster_name`
/// listed only once set, by `PUT /api/cluster-name`, which renames the
/// cluster in `/api/cluster-name` and `/api/overview`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_id_and_name_are_global_parameters_as_in_rabbitmq() {
    let mut broker = Broker::start();
    let api = Api::new(&broker);
    let id_path = "/api/global-parameters/internal_cluster_id";
    let id = api.get(id_path);
    assert_eq!(id.status, 200, "{id:?}");
    let id = id.body["value"].as_str().expect("a string").to_string();
    assert!(id.starts_with("rabbitmq-cluster-id-"), "{id}");
    let listed = api.get("/api/global-parameters").body;
    assert!(
        listed
            .as_array()
            .expect("list")
            .contains(&json!({"name": "internal_cluster_id", "value": id})),
        "{listed:?}"
    );
    if !broker.is_external() {
        // Nobody named this cluster yet: RabbitMQ lists no cluster_name.
        assert_eq!(api.get("/api/global-parameters/cluster_name").status, 404);
    }

    // Renaming the cluster.
    let name = unique("renamed");
    let a = api.put("/api/cluster-name", &json!({"name": name}));
    assert_eq!(a.status, 204, "{a:?}");
    assert_eq!(api.get_ok("/api/cluster-name")["name"], name.as_str());
    assert_eq!(api.get_ok("/api/overview")["cluster_name"], name.as_str());
    assert_eq!(
        api.get("/api/global-parameters/cluster_name").body,
        json!({"name": "cluster_name", "value": name})
    );
    // Deleting the parameter gives the cluster its default name back.
    assert_eq!(
        api.delete("/api/global-parameters/cluster_name").status,
        204
    );
    assert_ne!(api.get_ok("/api/cluster-name")["name"], name.as_str());

    // An import takes the file's cluster id, as RabbitMQ 3.10's does.
    let imported = unique("rabbitmq-cluster-id-imported");
    let doc = json!({"global_parameters": [{"name": "internal_cluster_id", "value": imported}]});
    let a = api.post("/api/definitions", &doc);
    assert_eq!(a.status, 204, "{a:?}");
    assert_eq!(api.get(id_path).body["value"], imported.as_str());
    if broker.is_external() {
        // Give the shared RabbitMQ its own id back.
        let doc = json!({"global_parameters": [{"name": "internal_cluster_id", "value": id}]});
        assert_eq!(api.post("/api/definitions", &doc).status, 204);
        return;
    }
    // The id is replicated state: it survives a restart.
    broker.restart();
    let api = Api::new(&broker);
    assert_eq!(api.get(id_path).body["value"], imported.as_str());
}

/// The one cluster name, as RabbitMQ reports it everywhere: by default the
/// first node's name (as `/api/nodes` lists it); once stored
/// (`PUT /api/cluster-name`) `/api/cluster-name`, `/api/overview`, the AMQP
/// handshake's `cluster_name` server property and the Prometheus
/// `rabbitmq_cluster` label of `rabbitmq_identity_info` all report the
/// stored one, and the default again once the parameter is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_cluster_name_is_reported_by_handshake_metrics_and_api() {
    let broker = Broker::start();
    if broker.is_external() {
        return;
    }
    let api = Api::new(&broker);
    let node = api.get_ok("/api/nodes")[0]["name"]
        .as_str()
        .expect("a node name")
        .to_string();
    assert_cluster_name(&broker, &api, &node).await;

    let name = unique("renamed-cluster");
    let a = api.put("/api/cluster-name", &json!({"name": name}));
    assert_eq!(a.status, 204, "{a:?}");
    assert_cluster_name(&broker, &api, &name).await;

    assert_eq!(
        api.delete("/api/global-parameters/cluster_name").status,
        204
    );
    assert_cluster_name(&broker, &api, &node).await;
}

/// Every place that reports the cluster name reports `want`.
async fn assert_cluster_name(broker: &Broker, api: &Api, want: &str) {
    assert_eq!(api.get_ok("/api/cluster-name")["name"], want);
    assert_eq!(api.get_ok("/api/overview")["cluster_name"], want);
    let mut raw = RawConn::connect(broker.addr()).await;
    let start = raw.read_start().await;
    match start.server_properties.inner().get("cluster_name") {
        Some(lapin::types::AMQPValue::LongString(s)) => assert_eq!(s.to_string(), want),
        other => panic!("cluster_name server property: {other:?}"),
    }
    let url = format!("http://127.0.0.1:{}/metrics", broker.prometheus_port);
    let text = ureq::get(&url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .body_mut()
        .read_to_string()
        .expect("metrics text");
    let identity = text
        .lines()
        .find(|l| l.starts_with("rabbitmq_identity_info{"))
        .unwrap_or_else(|| panic!("no rabbitmq_identity_info in {text}"));
    assert!(
        identity.contains(&format!("rabbitmq_cluster=\"{want}\"")),
        "{identity}"
    );
}
