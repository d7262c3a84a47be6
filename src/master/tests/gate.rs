//! The stable gate on its own: what it holds comes out in log order and only
//! once the stable index passes it (I1, I5), and it never believes a stable
//! index beyond what was appended.

use super::super::queue_key::QueueKey;
use super::super::stable::{Completion, StableGate};
use crate::broker::event::Event;

fn ev() -> Event {
    Event::VhostDeleted { vhost: "v".into() }
}

fn released(g: &mut StableGate) -> Vec<(u64, u64)> {
    std::iter::from_fn(|| g.next_released())
        .map(|w| match w.what {
            Completion::Confirm(tag, _) => (w.index, tag),
            _ => (w.index, 0),
        })
        .collect()
}

#[test]
fn held_effects_leave_in_order_once_their_index_is_stable() {
    let mut g = StableGate::new(10);
    assert!(g.clear());
    let (i1, _) = g.append(&ev());
    let (i2, _) = g.append(&ev());
    assert_eq!(
        (i1, i2),
        (11, 12),
        "appends are numbered after the recovered log"
    );
    assert!(!g.settled());
    g.hold(i1, 1, 1, 7, Completion::Confirm(1, true));
    g.hold(i2, 1, 1, 7, Completion::Confirm(2, true));
    assert!(released(&mut g).is_empty(), "nothing is stable yet");
    assert!(g.advance(11));
    assert_eq!(released(&mut g), vec![(11, 1)]);
    assert!(!g.advance(11), "the same stable index again moves nothing");
    assert!(!g.clear());
    assert!(g.advance(12));
    assert_eq!(released(&mut g), vec![(12, 2)]);
    assert!(g.clear());
}

#[test]
#[should_panic(expected = "I1")]
fn a_stable_index_beyond_the_last_append_is_refused() {
    let mut g = StableGate::new(0);
    g.append(&ev());
    g.advance(2);
}

#[test]
fn a_stalled_queue_is_noted_once_and_its_key_reused() {
    let mut g = StableGate::new(0);
    g.stall("/", "q", 0);
    g.stall("/", "q", 0);
    assert!(g.is_stalled("/", "q"));
    let taken: Vec<QueueKey> = g.take_stalled();
    assert_eq!(taken, vec![("/".to_string(), "q".to_string())]);
    assert!(!g.is_stalled("/", "q"));
    let mut taken = taken;
    for key in taken.drain(..) {
        g.recycle(key);
    }
    g.return_spare(taken);
    g.stall("/", "q", 0);
    assert!(g.is_stalled("/", "q"));
    g.forget_queue(&("/".to_string(), "q".to_string()));
    assert!(!g.is_stalled("/", "q"));
}

#[test]
fn what_is_needed_is_the_highest_index_held_or_stalled_on_and_never_goes_down() {
    let mut g = StableGate::new(0);
    for _ in 0..5 {
        g.append(&ev());
    }
    assert_eq!(g.needed(), 0, "appends alone are needed by nobody");
    g.stall("/", "q", 2);
    assert_eq!(
        g.needed(),
        2,
        "a stalled queue needs its head, not the last append"
    );
    g.stall("/", "q", 3);
    assert_eq!(g.needed(), 3, "noted even when the queue stalled before");
    g.need(1);
    assert_eq!(g.needed(), 3);
    g.advance(5);
    assert_eq!(g.needed(), 3);
}
