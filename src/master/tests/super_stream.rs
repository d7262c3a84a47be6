//! The master's two checks before a create or delete super stream: the
//! user's permissions (RabbitMQ's check_super_stream_management_permitted)
//! and whether any of the names is taken.

use super::*;
use crate::broker::event::Event;
use crate::master::inout::{TrackAnswer, TrackOp};

fn ask(m: &mut Master, op: TrackOp) -> Vec<TrackAnswer> {
    m.handle(Input::StreamTrack { conn: 1, ch: 1, op });
    m.take_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::ToConn(1, ToConn::Tracked { ch: 1, value }) => Some(value),
            _ => None,
        })
        .collect()
}

fn permitted(m: &mut Master, exchange: &str, partitions: Option<&[&str]>) -> bool {
    let op = TrackOp::SuperStreamPermitted {
        exchange: exchange.into(),
        partitions: partitions.map(|p| p.iter().map(|s| s.to_string()).collect()),
    };
    match ask(m, op).as_slice() {
        [TrackAnswer::Permitted(p)] => *p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn permissions_are_configure_on_everything_read_on_the_exchange_write_on_partitions() {
    let mut m = master();
    open(&mut m, 1, 1);
    assert!(permitted(&mut m, "ss", Some(&["p0", "p1"])));
    let limit = |m: &mut Master, configure: &str, write: &str, read: &str| {
        m.broker.apply(
            &Event::PermissionSet {
                user: "guest".into(),
                vhost: "/".into(),
                configure: configure.into(),
                write: write.into(),
                read: read.into(),
            },
            0,
        );
    };
    // Configure on the exchange only: enough for a delete's first check.
    limit(&mut m, "^ss$", ".*", ".*");
    assert!(permitted(&mut m, "ss", None));
    assert!(!permitted(&mut m, "ss", Some(&["p0"])));
    assert!(!permitted(&mut m, "other", None));
    limit(&mut m, ".*", "^p0$", ".*");
    assert!(permitted(&mut m, "ss", Some(&["p0"])));
    assert!(
        !permitted(&mut m, "ss", Some(&["p0", "p1"])),
        "p1 not writable"
    );
    limit(&mut m, ".*", ".*", "^p");
    assert!(permitted(&mut m, "ss", None));
    assert!(!permitted(&mut m, "ss", Some(&["p0"])), "ss not readable");
}

#[test]
fn any_exchange_or_queue_of_the_names_is_taken() {
    let mut m = master();
    open(&mut m, 1, 1);
    let exists = |m: &mut Master, exchange: &str, queues: &[&str]| {
        let op = TrackOp::AnyExists {
            exchange: exchange.into(),
            queues: queues.iter().map(|s| s.to_string()).collect(),
        };
        match ask(m, op).as_slice() {
            [TrackAnswer::Exists(e)] => *e,
            other => panic!("{other:?}"),
        }
    };
    assert!(!exists(&mut m, "ss", &["p0", "p1"]));
    assert!(exists(&mut m, "amq.direct", &[]));
    // A classic queue takes the name as a stream would.
    method(&mut m, 1, 1, declare("p1", true));
    let index = m.last_appended();
    m.handle(Input::Stable { index });
    m.take_outputs();
    assert!(exists(&mut m, "ss", &["p0", "p1"]));
    assert!(!exists(&mut m, "ss", &["p0"]));
}
