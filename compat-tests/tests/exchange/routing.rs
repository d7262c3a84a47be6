//! How the four built-in exchange types route.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_routing() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let x = unique("ex-direct");
    declare_exchange(&ch, &x, ExchangeKind::Direct).await;
    let qs: Vec<String> = (0..3).map(|i| unique(&format!("ex-direct-q{i}"))).collect();
    for q in &qs {
        declare_queue(&ch, q).await;
    }
    bind(&ch, &qs[0], &x, "red", FieldTable::default()).await;
    bind(&ch, &qs[1], &x, "red", FieldTable::default()).await;
    bind(&ch, &qs[1], &x, "green", FieldTable::default()).await;
    bind(&ch, &qs[2], &x, "", FieldTable::default()).await;
    let p = BasicProperties::default;
    assert_eq!(routed_to(&ch, &x, "red", p(), &qs).await, vec![0, 1]);
    assert_eq!(routed_to(&ch, &x, "green", p(), &qs).await, vec![1]);
    assert_eq!(routed_to(&ch, &x, "", p(), &qs).await, vec![2]);
    // Exact, case-sensitive match only.
    assert_eq!(
        routed_to(&ch, &x, "Red", p(), &qs).await,
        Vec::<usize>::new()
    );
    assert_eq!(
        routed_to(&ch, &x, "red.x", p(), &qs).await,
        Vec::<usize>::new()
    );
    // The same binding twice is one binding: still one copy.
    bind(&ch, &qs[0], &x, "red", FieldTable::default()).await;
    assert_eq!(routed_to(&ch, &x, "red", p(), &qs).await, vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_routing() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let x = unique("ex-fanout");
    declare_exchange(&ch, &x, ExchangeKind::Fanout).await;
    let qs: Vec<String> = (0..3).map(|i| unique(&format!("ex-fanout-q{i}"))).collect();
    for q in &qs {
        declare_queue(&ch, q).await;
    }
    bind(&ch, &qs[0], &x, "", FieldTable::default()).await;
    bind(&ch, &qs[1], &x, "ignored", FieldTable::default()).await;
    // Two bindings of one queue (different keys): still one copy.
    bind(&ch, &qs[1], &x, "also-ignored", FieldTable::default()).await;
    let p = BasicProperties::default;
    assert_eq!(routed_to(&ch, &x, "", p(), &qs).await, vec![0, 1]);
    assert_eq!(
        routed_to(&ch, &x, "anything.at.all", p(), &qs).await,
        vec![0, 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_routing() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let x = unique("ex-topic");
    declare_exchange(&ch, &x, ExchangeKind::Topic).await;
    let patterns = [
        "a.b",   // 0
        "a.*",   // 1
        "a.#",   // 2
        "#",     // 3
        "*",     // 4
        "a.*.c", // 5
        "a.#.c", // 6
        "#.c",   // 7
        "*.b.#", // 8
        "a.#.b", // 9
    ];
    let qs: Vec<String> = (0..patterns.len())
        .map(|i| unique(&format!("ex-topic-q{i}")))
        .collect();
    for (q, pat) in qs.iter().zip(patterns) {
        declare_queue(&ch, q).await;
        bind(&ch, q, &x, pat, FieldTable::default()).await;
    }
    let cases: &[(&str, &[usize])] = &[
        ("a.b", &[0, 1, 2, 3, 8, 9]),
        ("a", &[2, 3, 4]),
        ("a.c", &[1, 2, 3, 6, 7]),
        ("a.b.c", &[2, 3, 5, 6, 7, 8]),
        ("a.x.y.c", &[2, 3, 6, 7]),
        ("a.x.b", &[2, 3, 9]),
        ("a.x.y.b", &[2, 3, 9]),
        ("b.c", &[3, 7]),
        ("x.b.y.z", &[3, 8]),
        ("c", &[3, 4, 7]),
        ("a.b.c.d", &[2, 3, 8]),
        // Empty words: "a..c" is the three words "a", "", "c".
        ("a..c", &[2, 3, 5, 6, 7]),
        // The empty routing key: only "#" matches it.
        ("", &[3]),
    ];
    for (key, want) in cases {
        let got = routed_to(&ch, &x, key, BasicProperties::default(), &qs).await;
        let got_pats: Vec<&str> = got.iter().map(|&i| patterns[i]).collect();
        let want_pats: Vec<&str> = want.iter().map(|&i| patterns[i]).collect();
        assert_eq!(got_pats, want_pats, "routing key {key:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_routing() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let x = unique("ex-headers");
    declare_exchange(&ch, &x, ExchangeKind::Headers).await;

    let binding = |mode: Option<&str>, pairs: &[(&str, &str)]| {
        let mut t = headers(pairs);
        if let Some(m) = mode {
            t.insert("x-match".into(), AMQPValue::LongString(m.into()));
        }
        t
    };
    let bindings = [
        binding(Some("all"), &[("format", "pdf"), ("type", "report")]), // 0
        binding(Some("any"), &[("format", "pdf"), ("type", "report")]), // 1
        binding(None, &[("format", "pdf")]),                            // 2: default is all
        binding(Some("all"), &[("x-tag", "v")]),                        // 3: x-* ignored
        binding(Some("any"), &[("x-tag", "v")]),                        // 4: x-* ignored
        binding(Some("all-with-x"), &[("x-tag", "v"), ("format", "pdf")]), // 5
        binding(Some("any-with-x"), &[("x-tag", "v"), ("type", "log")]), // 6
    ];
    let qs: Vec<String> = (0..bindings.len())
        .map(|i| unique(&format!("ex-headers-q{i}")))
        .collect();
    for (q, args) in qs.iter().zip(bindings) {
        declare_queue(&ch, q).await;
        bind(&ch, q, &x, "", args).await;
    }
    let cases: &[(Headers, &[usize])] = &[
        (&[("format", "pdf"), ("type", "report")], &[0, 1, 2, 3]),
        (
            &[("format", "pdf"), ("type", "report"), ("extra", "1")],
            &[0, 1, 2, 3],
        ),
        (&[("format", "pdf")], &[1, 2, 3]),
        (&[("type", "report")], &[1, 3]),
        (&[("format", "zip"), ("type", "log")], &[3, 6]),
        (&[("x-tag", "v")], &[3, 6]),
        (&[("x-tag", "v"), ("format", "pdf")], &[1, 2, 3, 5, 6]),
        (&[("x-tag", "other"), ("format", "pdf")], &[1, 2, 3]),
        (&[], &[3]),
    ];
    for (hdrs, want) in cases {
        let got = routed_to(&ch, &x, "", header_props(headers(hdrs)), &qs).await;
        assert_eq!(got, want.to_vec(), "message headers {hdrs:?}");
    }
    // A message without any headers property behaves like an empty table.
    let got = routed_to(&ch, &x, "", BasicProperties::default(), &qs).await;
    assert_eq!(got, vec![3], "message without headers");
    // The routing key plays no part.
    let got = routed_to(
        &ch,
        &x,
        "some.key",
        header_props(headers(&[("format", "pdf")])),
        &qs,
    )
    .await;
    assert_eq!(got, vec![1, 2, 3], "routing key ignored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_routing_compares_values_and_void_matches_presence() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let x = unique("ex-headers-types");
    declare_exchange(&ch, &x, ExchangeKind::Headers).await;
    let mut int_binding = FieldTable::default();
    int_binding.insert("n".into(), AMQPValue::LongInt(42));
    let mut void_binding = FieldTable::default();
    void_binding.insert("present".into(), AMQPValue::Void);
    let qs = [unique("ex-hdr-int"), unique("ex-hdr-void")];
    declare_queue(&ch, &qs[0]).await;
    declare_queue(&ch, &qs[1]).await;
    bind(&ch, &qs[0], &x, "", int_binding).await;
    bind(&ch, &qs[1], &x, "", void_binding).await;

    let mut m = FieldTable::default();
    m.insert("n".into(), AMQPValue::LongInt(42));
    assert_eq!(routed_to(&ch, &x, "", header_props(m), &qs).await, vec![0]);
    let mut m = FieldTable::default();
    m.insert("n".into(), AMQPValue::LongInt(43));
    assert_eq!(
        routed_to(&ch, &x, "", header_props(m), &qs).await,
        Vec::<usize>::new()
    );
    let mut m = FieldTable::default();
    m.insert("n".into(), AMQPValue::LongString("42".into()));
    assert_eq!(
        routed_to(&ch, &x, "", header_props(m), &qs).await,
        Vec::<usize>::new(),
        "a string is not the integer 42"
    );
    let mut m = FieldTable::default();
    m.insert("present".into(), AMQPValue::LongString("anything".into()));
    assert_eq!(routed_to(&ch, &x, "", header_props(m), &qs).await, vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_binding_with_invalid_x_match_is_precondition_failed() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let x = unique("ex-headers-bad");
    let q = unique("ex-headers-bad-q");
    declare_exchange(&ch, &x, ExchangeKind::Headers).await;
    declare_queue(&ch, &q).await;
    let mut t = headers(&[("format", "pdf")]);
    t.insert("x-match".into(), AMQPValue::LongString("some".into()));
    let res = within(
        "queue.bind",
        ch.queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            t,
        ),
    )
    .await;
    // "Invalid x-match field value <<\"some\">>; expected all, any, all-with-x, or any-with-x"
    assert_code(res, PRECONDITION_FAILED, "bind with x-match=some");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}
