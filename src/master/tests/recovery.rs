//! Recovery: the log replayed into a broker gives the state the master had (I4).

use super::*;

#[test]
fn recovery_replays_the_log_into_the_configured_vhosts() {
    let mut m = master();
    let mut log = Vec::new();
    open(&mut m, 1, 1);
    log.extend(method(&mut m, 1, 1, declare("q", true)));
    m.handle(Input::Stable { index: 1 });
    log.extend(m.take_outputs());
    log.extend(publish(&mut m, 1, 1, "q", true, "kept"));
    log.extend(publish(&mut m, 1, 1, "q", false, "transient"));
    // The seed is part of a real log; here it was applied unlogged.
    let mut events = crate::users::seed_events(&Config::default());
    events.extend(log.into_iter().filter_map(|o| match o {
        Output::Append { entry: b, .. } => Some(crate::broker::event::Event::decode(&b).unwrap()),
        _ => None,
    }));
    let b = Broker::replay(events);
    let q = b.queue("/", "q").expect("durable queue recovered");
    let bodies: Vec<_> = q
        .ready
        .to_vec()
        .into_iter()
        .map(|(_, m)| m.msg.body.clone())
        .collect();
    assert_eq!(bodies, vec![Bytes::from_static(b"kept")]);
}
