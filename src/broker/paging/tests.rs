use super::*;
use crate::broker::event::QueueSpec;
use crate::broker::message::Message;
use crate::broker::queue::Queue;
use bytes::Bytes;
use proptest::prelude::*;
use stablemq_protocol::{AMQPValue, BasicProperties, FieldTable, ShortString};

fn spec(max_priority: Option<u8>) -> QueueSpec {
    let mut arguments = FieldTable::default();
    if let Some(p) = max_priority {
        arguments.insert(
            ShortString::from("x-max-priority"),
            AMQPValue::LongInt(i32::from(p)),
        );
    }
    QueueSpec {
        durable: true,
        auto_delete: false,
        exclusive_owner: None,
        arguments,
    }
}

pub(super) fn msg(id: u64, priority: u8, body_len: usize) -> QueuedMessage {
    let mut properties = BasicProperties::default()
        .with_priority(priority)
        .with_message_id(ShortString::from(format!("m{id}")));
    if id.is_multiple_of(2) {
        properties = properties.with_delivery_mode(2);
    }
    let body: Vec<u8> = (0..body_len).map(|i| (id as usize + i) as u8).collect();
    QueuedMessage {
        msg: Message {
            id,
            exchange: "x".into(),
            routing_key: format!("k{id}").into(),
            properties: Arc::new(properties),
            body: Bytes::from(body),
            timestamp_ms: 1000 + id,
        },
        redelivered: false,
        wait_index: id,
        expires_at_ms: id.is_multiple_of(3).then_some(5000 + id),
        delivery_count: 0,
    }
}

/// Everything observable about a queued message, to compare paged and unpaged.
pub(super) fn view(
    m: &QueuedMessage,
) -> (u64, Bytes, String, Option<u8>, bool, u64, Option<u64>, u32) {
    (
        m.msg.id,
        m.msg.body.clone(),
        m.msg.routing_key.to_string(),
        *m.msg.properties.priority(),
        m.redelivered,
        m.wait_index,
        m.expires_at_ms,
        m.delivery_count,
    )
}

pub(super) fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn a_queue_over_budget_pages_out_and_gives_everything_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let pager = Pager::open(dir.path(), 64 * 1024).unwrap();
    let mut q = Queue::with_pager("q", spec(None), Some(pager.clone()));
    let n = 3000u64;
    for id in 1..=n {
        q.push(msg(id, 0, 1024));
    }
    assert_eq!(q.ready.len(), n as usize);
    assert_eq!(q.ready_bytes, n * 1024);
    assert!(q.ready.ram_len() < 64, "RAM holds {}", q.ready.ram_len());
    assert!(pager.used() <= pager.budget());
    assert!(files_in(dir.path()) > 0, "nothing was written");
    for id in 1..=n {
        let m = q.pop().expect("a message");
        assert_eq!(view(&m), view(&msg(id, 0, 1024)));
        assert!(pager.used() <= pager.budget() + 4096);
    }
    assert!(q.pop().is_none());
    assert_eq!(q.ready_bytes, 0);
    assert_eq!(pager.used(), 0);
    assert_eq!(files_in(dir.path()), 0, "drained runs leave no files");
}

#[test]
fn paged_messages_can_be_removed_read_and_flagged_without_changing_order() {
    let dir = tempfile::tempdir().unwrap();
    let pager = Pager::open(dir.path(), 16 * 1024).unwrap();
    let mut q = Queue::with_pager("q", spec(None), Some(pager.clone()));
    for id in 1..=500 {
        q.push(msg(id, 0, 512));
    }
    assert!(q.ready.ram_len() < 50);
    // Deep in the paged part: read without removing, then remove.
    let m = q.message(400).expect("paged message readable");
    assert_eq!(m.body, msg(400, 0, 512).msg.body);
    assert_eq!(q.is_persistent(400), Some(true));
    assert_eq!(q.is_persistent(401), Some(false));
    assert!(q.remove(400));
    assert!(!q.remove(400), "removing twice is a no-op");
    assert!(q.message(400).is_none());
    assert_eq!(q.ready.len(), 499);
    assert_eq!(q.ready_bytes, 499 * 512);
    q.ready.mark_redelivered();
    let ids = q.ready_ids();
    let expected: Vec<u64> = (1..=500).filter(|i| *i != 400).collect();
    assert_eq!(ids, expected);
    for id in expected {
        let m = q.pop().unwrap();
        assert_eq!(m.msg.id, id);
        assert!(m.redelivered);
    }
    assert!(q.ready.is_empty());
}

#[test]
fn dropping_a_paged_queue_deletes_its_files_and_returns_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let pager = Pager::open(dir.path(), 8 * 1024).unwrap();
    let mut q = Queue::with_pager("q", spec(None), Some(pager.clone()));
    for id in 1..=2000 {
        q.push(msg(id, 0, 1024));
    }
    assert!(files_in(dir.path()) > 0);
    drop(q);
    assert_eq!(files_in(dir.path()), 0);
    assert_eq!(pager.used(), 0);
}

#[test]
fn opening_the_body_store_wipes_what_a_previous_process_left() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("7-0.pages"), b"stale").unwrap();
    let _pager = Pager::open(dir.path(), 1024).unwrap();
    assert_eq!(files_in(dir.path()), 0);
}

/// One step of the differential test.
#[derive(Debug, Clone)]
enum Op {
    Push {
        priority: u8,
        body_len: usize,
    },
    /// Pop the head; keep it out for delivery (it may be requeued).
    Deliver,
    /// Requeue the i-th delivered message (modulo how many are out).
    Requeue(usize),
    /// Remove the ready message at this position (modulo the length).
    Remove(usize),
    /// Drop-head style: remove the first n.
    DropHead(usize),
    MarkRedelivered,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..12, 0usize..3000).prop_map(|(priority, body_len)| Op::Push { priority, body_len }),
        3 => Just(Op::Deliver),
        1 => any::<usize>().prop_map(Op::Requeue),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => (0usize..40).prop_map(Op::DropHead),
        1 => Just(Op::MarkRedelivered),
    ]
}

fn step(q: &mut Queue, out: &mut Vec<u64>, op: &Op, next_id: &mut u64) -> Option<QueuedMessage> {
    match op {
        Op::Push { priority, body_len } => {
            *next_id += 1;
            q.push(msg(*next_id, *priority, *body_len));
            None
        }
        Op::Deliver => {
            let m = q.pop()?;
            out.push(m.msg.id);
            q.unacked.insert(m.msg.id, m.clone());
            Some(m)
        }
        Op::Requeue(i) => {
            if !out.is_empty() {
                let id = out.remove(i % out.len());
                q.requeue(id, true);
            }
            None
        }
        Op::Remove(i) => {
            let ids = q.ready_ids();
            if !ids.is_empty() {
                q.remove(ids[i % ids.len()]);
            }
            None
        }
        Op::DropHead(n) => {
            for id in q.ready_ids().into_iter().take(*n) {
                q.remove(id);
            }
            None
        }
        Op::MarkRedelivered => {
            q.ready.mark_redelivered();
            None
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// I4: a queue that pages behaves exactly like one that keeps everything in
    /// RAM, with and without priorities: same heads, same deliveries (content
    /// and flags), same counts and bytes, same order, after any mix of
    /// publishes, deliveries, requeues, removals and redelivery flags.
    #[test]
    fn paging_never_changes_what_a_queue_does(
        prioritized in any::<bool>(),
        budget in 2_000u64..40_000,
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let pager = Pager::open(dir.path(), budget).unwrap();
        let max = prioritized.then_some(9);
        let mut paged = Queue::with_pager("q", spec(max), Some(pager.clone()));
        let mut plain = Queue::with_pager("q", spec(max), None);
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        let (mut id_a, mut id_b) = (0, 0);
        for (n, op) in ops.iter().enumerate() {
            let a = step(&mut paged, &mut out_a, op, &mut id_a);
            let b = step(&mut plain, &mut out_b, op, &mut id_b);
            prop_assert_eq!(a.as_ref().map(view), b.as_ref().map(view));
            prop_assert_eq!(paged.head().map(view), plain.head().map(view));
            prop_assert_eq!(paged.ready.len(), plain.ready.len());
            prop_assert_eq!(paged.ready_ids(), plain.ready_ids(), "after op {} {:?}", n, op);
            prop_assert_eq!(paged.ready_bytes, plain.ready_bytes);
            prop_assert_eq!(paged.any_ready_persistent(), plain.any_ready_persistent());
        }
        prop_assert_eq!(paged.ready_ids(), plain.ready_ids());
        for id in plain.ready_ids() {
            prop_assert_eq!(paged.is_persistent(id), plain.is_persistent(id));
            let (a, b) = (paged.message(id), plain.message(id));
            prop_assert_eq!(a.map(|m| m.body.clone()), b.map(|m| m.body.clone()));
        }
        loop {
            let (a, b) = (paged.pop(), plain.pop());
            prop_assert_eq!(a.as_ref().map(view), b.as_ref().map(view));
            if a.is_none() {
                break;
            }
        }
    }
}
