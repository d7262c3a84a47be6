use super::*;

fn key(stream: &str) -> GroupKey {
    ("/".into(), stream.into(), "app".into())
}

fn on(conn: ConnId, subscription: u8, active: bool) -> Notify {
    Notify {
        conn,
        subscription,
        active,
        stepping_down: false,
    }
}

fn step_down(conn: ConnId, subscription: u8) -> Notify {
    Notify {
        conn,
        subscription,
        active: false,
        stepping_down: true,
    }
}

#[test]
fn plain_stream_first_member_is_active_and_the_next_takes_over() {
    let mut g = Groups::default();
    let k = key("s");
    assert_eq!(g.register(k.clone(), None, (1, 0)), vec![on(1, 0, true)]);
    // Newcomers wait, untold (RabbitMQ 3.13 sends them nothing).
    assert_eq!(g.register(k.clone(), None, (2, 0)), vec![]);
    assert_eq!(g.register(k.clone(), None, (1, 1)), vec![]);
    assert_eq!(g.active(&k), Some((1, 0)));
    // An inactive member leaving changes nothing.
    assert_eq!(g.unregister(&k, (1, 1)), vec![]);
    // The active one leaving: the next in arrival order.
    assert_eq!(g.unregister(&k, (1, 0)), vec![on(2, 0, true)]);
    assert_eq!(g.active(&k), Some((2, 0)));
    assert_eq!(g.unregister(&k, (2, 0)), vec![]);
    assert!(g.is_empty());
}

#[test]
fn groups_are_per_stream_and_name() {
    let mut g = Groups::default();
    assert_eq!(g.register(key("a"), None, (1, 0)), vec![on(1, 0, true)]);
    assert_eq!(g.register(key("b"), None, (1, 1)), vec![on(1, 1, true)]);
    let other = ("/".into(), "a".into(), "other".into());
    assert_eq!(g.register(other, None, (2, 0)), vec![on(2, 0, true)]);
    let vhost = ("v".into(), "a".into(), "app".into());
    assert_eq!(g.register(vhost, None, (3, 0)), vec![on(3, 0, true)]);
    assert_eq!(g.register(key("a"), None, (2, 1)), vec![]);
}

#[test]
fn a_second_registration_of_a_member_is_ignored() {
    let mut g = Groups::default();
    g.register(key("s"), None, (1, 0));
    assert_eq!(g.register(key("s"), None, (1, 0)), vec![]);
    assert_eq!(g.unregister(&key("s"), (1, 0)), vec![]);
    assert!(g.is_empty());
}

#[test]
fn partition_hands_over_through_a_step_down() {
    let mut g = Groups::default();
    // Partition 1 of a super stream.
    let k = key("ss-1");
    assert_eq!(g.register(k.clone(), Some(1), (1, 0)), vec![on(1, 0, true)]);
    // Two members: 1 % 2 = 1, the newcomer is due: the active steps down
    // first, and nobody is active until it answers.
    assert_eq!(
        g.register(k.clone(), Some(1), (2, 0)),
        vec![step_down(1, 0)]
    );
    assert_eq!(g.active(&k), None);
    assert_eq!(g.stepped_down(&k, (1, 0)), vec![on(2, 0, true)]);
    assert_eq!(g.active(&k), Some((2, 0)));
    // A second answer, or one from a member not stepping down: nothing.
    assert_eq!(g.stepped_down(&k, (1, 0)), vec![]);
    assert_eq!(g.stepped_down(&k, (2, 0)), vec![]);
    // Three members: 1 % 3 = 1, still the second.
    assert_eq!(g.register(k.clone(), Some(1), (3, 0)), vec![]);
    // The second leaves: [1, 3], 1 % 2 = 1: the third, at once (nobody
    // was active any more).
    assert_eq!(g.unregister(&k, (2, 0)), vec![on(3, 0, true)]);
    // The first leaves: [3], 1 % 1 = 0: the third stays.
    assert_eq!(g.unregister(&k, (1, 0)), vec![]);
    assert_eq!(g.active(&k), Some((3, 0)));
}

#[test]
fn partition_zero_keeps_its_first_member() {
    let mut g = Groups::default();
    let k = key("ss-0");
    assert_eq!(g.register(k.clone(), Some(0), (1, 0)), vec![on(1, 0, true)]);
    assert_eq!(g.register(k.clone(), Some(0), (2, 0)), vec![]);
    assert_eq!(g.register(k.clone(), Some(0), (3, 0)), vec![]);
    // An inactive member leaving: 0 % 2 is still the first.
    assert_eq!(g.unregister(&k, (2, 0)), vec![]);
    assert_eq!(g.active(&k), Some((1, 0)));
}

#[test]
fn leaving_member_moves_the_due_place() {
    let mut g = Groups::default();
    // Partition 2: with three members the third is due.
    let k = key("ss-2");
    g.register(k.clone(), Some(2), (1, 0));
    assert_eq!(g.register(k.clone(), Some(2), (2, 0)), vec![]); // 2 % 2 = 0
    assert_eq!(
        g.register(k.clone(), Some(2), (3, 0)),
        vec![step_down(1, 0)]
    );
    assert_eq!(g.stepped_down(&k, (1, 0)), vec![on(3, 0, true)]);
    // The second leaves: [1, 3], 2 % 2 = 0: the third steps down for the
    // first.
    assert_eq!(g.unregister(&k, (2, 0)), vec![step_down(3, 0)]);
    assert_eq!(g.stepped_down(&k, (3, 0)), vec![on(1, 0, true)]);
}

#[test]
fn joins_while_a_member_steps_down_wait_for_its_answer() {
    let mut g = Groups::default();
    let k = key("ss-1");
    g.register(k.clone(), Some(1), (1, 0));
    assert_eq!(
        g.register(k.clone(), Some(1), (2, 0)),
        vec![step_down(1, 0)]
    );
    // 1 % 3 = 1: still the second once the first answers.
    assert_eq!(g.register(k.clone(), Some(1), (3, 0)), vec![]);
    assert_eq!(g.unregister(&k, (3, 0)), vec![]);
    assert_eq!(g.stepped_down(&k, (1, 0)), vec![on(2, 0, true)]);
}

#[test]
fn a_member_that_leaves_while_stepping_down_hands_over_at_once() {
    let mut g = Groups::default();
    let k = key("ss-1");
    g.register(k.clone(), Some(1), (1, 0));
    g.register(k.clone(), Some(1), (2, 0));
    // [2] alone: it is due and nobody answers for the first.
    assert_eq!(g.unregister(&k, (1, 0)), vec![on(2, 0, true)]);
    assert_eq!(g.active(&k), Some((2, 0)));
}

#[test]
fn a_connection_gone_leaves_every_group_and_is_told_nothing() {
    let mut g = Groups::default();
    g.register(key("a"), None, (1, 0));
    g.register(key("a"), None, (2, 0));
    g.register(key("b"), None, (1, 1));
    g.register(key("b"), None, (1, 2));
    g.register(key("ss-1"), Some(1), (2, 1));
    g.register(key("ss-1"), Some(1), (1, 3));
    // Connection 2's partition member stepped down for connection 1's.
    assert_eq!(g.stepped_down(&key("ss-1"), (2, 1)), vec![on(1, 3, true)]);
    let mut told = g.remove_connection(1);
    told.sort_by_key(|n| (n.conn, n.subscription));
    // "a": connection 2 takes over; "b" is gone; "ss-1": back to 2.
    assert_eq!(told, vec![on(2, 0, true), on(2, 1, true)]);
    assert_eq!(g.active(&key("b")), None);
    assert_eq!(g.remove_connection(2), vec![]);
    assert!(g.is_empty());
}

#[test]
fn a_deleted_stream_drops_its_groups_only() {
    let mut g = Groups::default();
    g.register(key("a"), None, (1, 0));
    g.register(key("b"), None, (1, 1));
    g.register(("v".into(), "a".into(), "app".into()), None, (2, 0));
    g.remove_stream("/", "a");
    assert_eq!(g.active(&key("a")), None);
    assert_eq!(g.active(&key("b")), Some((1, 1)));
    assert_eq!(
        g.active(&("v".into(), "a".into(), "app".into())),
        Some((2, 0))
    );
    // A member of a dropped group joining again starts a new group.
    assert_eq!(g.register(key("a"), None, (3, 0)), vec![on(3, 0, true)]);
}
