//! Queues, exchanges, bindings, connections, channels and consumers, as
//! clients declared and opened them.

use super::*;

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
