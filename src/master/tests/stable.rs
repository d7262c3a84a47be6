//! The stable gate: replies, confirms and deliveries wait for the log (I1) and keep their order (I5).

use super::*;

#[test]
fn durable_declare_ok_waits_for_stable_i1() {
    let mut m = master();
    open(&mut m, 1, 1);
    let out = method(&mut m, 1, 1, declare("q", true));
    assert_eq!(appends(&out), 1, "a durable declare is logged");
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::ToConn(_, ToConn::Method(..)))),
        "no reply before stable"
    );
    m.handle(Input::Stable { index: 1 });
    let out = m.take_outputs();
    assert!(out.iter().any(|o| matches!(
        o,
        Output::ToConn(
            1,
            ToConn::Method(1, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_)))
        )
    )));
}

#[test]
fn transient_queue_is_not_logged_and_answers_at_once() {
    let mut m = master();
    open(&mut m, 1, 1);
    let out = method(&mut m, 1, 1, declare("t", false));
    assert_eq!(appends(&out), 0);
    assert_eq!(out.len(), 1);
    let out = publish(&mut m, 1, 1, "t", true, "x");
    assert_eq!(
        appends(&out),
        0,
        "persistent message in a transient queue is not logged"
    );
}

#[test]
fn confirms_and_deliveries_wait_for_stable_and_keep_tag_order_i1_i5() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("q", true));
    m.handle(Input::Stable { index: 1 });
    m.take_outputs();
    method(
        &mut m,
        1,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
    );
    // A consumer on another connection.
    open(&mut m, 2, 1);
    method(
        &mut m,
        2,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "q".into(),
            consumer_tag: "c".into(),
            no_ack: true,
            ..Default::default()
        })),
    );
    let mut out = Vec::new();
    for i in 0..3 {
        out.extend(publish(&mut m, 1, 1, "q", true, &format!("p{i}")));
    }
    // A transient publish after durable ones must not overtake them.
    out.extend(publish(&mut m, 1, 1, "q", false, "t3"));
    assert_eq!(appends(&out), 3);
    assert!(confirms(&out).is_empty(), "no confirm before stable");
    assert!(delivered(&out).is_empty(), "no delivery before stable");
    // The declare was index 1, so the publishes are 2, 3 and 4.
    m.handle(Input::Stable { index: 3 });
    let out = m.take_outputs();
    assert_eq!(confirms(&out), vec![1, 2]);
    assert_eq!(delivered(&out), vec!["p0", "p1"]);
    m.handle(Input::Stable { index: 4 });
    let out = m.take_outputs();
    assert_eq!(confirms(&out), vec![3, 4]);
    assert_eq!(delivered(&out), vec!["p2", "t3"]);
}

#[test]
fn partial_stability_confirms_a_prefix_only() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("q", true));
    m.handle(Input::Stable { index: 1 });
    method(
        &mut m,
        1,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
    );
    m.take_outputs();
    for i in 0..5 {
        publish(&mut m, 1, 1, "q", true, &format!("{i}"));
    }
    m.handle(Input::Stable { index: 3 });
    assert_eq!(confirms(&m.take_outputs()), vec![1, 2]);
    m.handle(Input::Stable { index: 6 });
    assert_eq!(confirms(&m.take_outputs()), vec![3, 4, 5]);
}

/// Methods pipelined behind a reply that waits for the log run once it is
/// out, in order: a declare-ok waiting for stable, then two declares of
/// transient queues on the same channel (deferred), then the stable index.
/// (Each deferred method used to count the others as replies ahead of it
/// and went back to the end of the queue for ever: the master task spun.)
#[test]
fn methods_deferred_behind_a_waiting_reply_run_in_order_once_it_is_out_i5() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut m = master();
        open(&mut m, 1, 1);
        let out = method(&mut m, 1, 1, declare("durable", true));
        assert_eq!(appends(&out), 1);
        for name in ["t1", "t2", "t3"] {
            let out = method(&mut m, 1, 1, declare(name, false));
            assert!(out.is_empty(), "{name}: deferred behind the waiting reply");
        }
        m.handle(Input::Stable { index: 1 });
        let names: Vec<String> = m
            .take_outputs()
            .into_iter()
            .filter_map(|o| match o {
                Output::ToConn(
                    1,
                    ToConn::Method(1, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok))),
                ) => Some(ok.queue.to_string()),
                _ => None,
            })
            .collect();
        let _ = tx.send(names);
    });
    let names = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the master handles the stable index within 10 s");
    assert_eq!(names, ["durable", "t1", "t2", "t3"]);
}
