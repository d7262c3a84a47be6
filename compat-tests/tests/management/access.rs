//! Vhosts, users, permissions and the definitions export; credentials and
//! tags deciding who reads what.

use super::*;

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
