//! Single active consumer on the bridge: a subscription joins its group
//! instead of consuming, consumes only once active and answered, and stops
//! at once when told to give way.

use super::tests::{bridge, code, from_master, request};
use super::*;
use crate::master::inout::{SacNote, SacOp};

fn sac_subscribe(b: &mut Bridge, super_stream: Option<&str>) -> Vec<Input> {
    let mut properties = vec![
        ("single-active-consumer".to_owned(), "true".to_owned()),
        ("name".to_owned(), "app".to_owned()),
    ];
    if let Some(ss) = super_stream {
        properties.push(("super-stream".to_owned(), ss.to_owned()));
    }
    let (m, c) = request(
        b,
        9,
        Request::Subscribe {
            subscription_id: 4,
            stream: "s".into(),
            offset: OffsetSpec::First,
            credit: 1,
            properties,
        },
    );
    assert!(c.is_empty());
    m
}

fn update(active: bool, stepping_down: bool) -> ToConn {
    ToConn::SingleActive(SacNote::Update {
        subscription: 4,
        active,
        stepping_down,
    })
}

fn registered(result: Result<(), AmqpError>) -> ToConn {
    ToConn::SingleActive(SacNote::Registered {
        subscription: 4,
        result,
    })
}

fn answer(b: &mut Bridge, offset: OffsetSpec) -> Vec<Input> {
    let (mut m, mut c) = (Vec::new(), Vec::new());
    b.on_action(
        sc::Action::ConsumerUpdateAnswered {
            subscription_id: 4,
            code: ResponseCode::Ok,
            offset,
        },
        &mut m,
        &mut c,
    );
    assert!(c.is_empty());
    m
}

/// The offset of the consume among `m`, and its channel.
fn consumed(m: &[Input]) -> Option<(u16, AMQPValue)> {
    m.iter().find_map(|i| match i {
        Input::Method {
            ch,
            method: AMQPClass::Basic(basic::AMQPMethod::Consume(c)),
            ..
        } => Some((*ch, c.arguments.inner().get("x-stream-offset")?.clone())),
        _ => None,
    })
}

fn consumer_updates(c: &[sc::Input]) -> Vec<bool> {
    c.iter()
        .filter_map(|i| match i {
            sc::Input::ConsumerUpdate {
                subscription_id: 4,
                active,
            } => Some(*active),
            _ => None,
        })
        .collect()
}

#[test]
fn joins_its_group_and_consumes_from_the_answered_offset_once_active() {
    let mut b = bridge();
    let m = sac_subscribe(&mut b, Some("ss"));
    assert_eq!(consumed(&m), None);
    assert!(m.iter().any(|i| matches!(
        i,
        Input::SingleActive {
            op: SacOp::Register { subscription: 4, stream, name, super_stream: Some(ss) },
            ..
        } if stream == "s" && name == "app" && ss == "ss"
    )));
    // Registered: the subscribe is answered, before any consumer update.
    let (_, c) = from_master(&mut b, registered(Ok(())));
    assert_eq!(code(&c), [(9, ResponseCode::Ok)]);
    let (m, c) = from_master(&mut b, update(true, false));
    assert!(m.is_empty());
    assert_eq!(consumer_updates(&c), [true]);
    // The client's offset, not the subscribe's.
    let m = answer(&mut b, OffsetSpec::Offset(7));
    assert_eq!(
        consumed(&m),
        Some((FIRST_SUBSCRIPTION, AMQPValue::LongLongInt(7)))
    );
    // Its consume-ok answers nothing more.
    let (_, c) = from_master(
        &mut b,
        ToConn::Method(
            FIRST_SUBSCRIPTION,
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                consumer_tag: "stream-subscription-4".into(),
            })),
        ),
    );
    assert!(c.is_empty());
}

#[test]
fn a_step_down_closes_its_channel_and_the_answer_goes_to_the_master() {
    let mut b = bridge();
    sac_subscribe(&mut b, Some("ss"));
    from_master(&mut b, registered(Ok(())));
    from_master(&mut b, update(true, false));
    answer(&mut b, OffsetSpec::Offset(7));
    let (m, c) = from_master(&mut b, update(false, true));
    assert_eq!(consumer_updates(&c), [false]);
    assert!(m.iter().any(|i| matches!(
        i,
        Input::ChannelClose {
            ch: FIRST_SUBSCRIPTION,
            ..
        }
    )));
    let fresh = m.iter().find_map(|i| match i {
        Input::ChannelOpen { ch, .. } => Some(*ch),
        _ => None,
    });
    assert!(fresh.is_some_and(|ch| ch != FIRST_SUBSCRIPTION));
    let m = answer(&mut b, OffsetSpec::Offset(9));
    assert_eq!(consumed(&m), None);
    assert!(m.iter().any(|i| matches!(
        i,
        Input::SingleActive {
            op: SacOp::SteppedDown {
                subscription: 4,
                ..
            },
            ..
        }
    )));
    // Active again, answered without an offset: the subscribe's (first),
    // on the fresh channel.
    from_master(&mut b, update(true, false));
    let m = answer(&mut b, OffsetSpec::None);
    assert_eq!(
        consumed(&m),
        Some((fresh.unwrap_or(0), AMQPValue::LongString("first".into())))
    );
}

#[test]
fn an_activation_taken_back_before_its_answer_does_not_consume() {
    let mut b = bridge();
    sac_subscribe(&mut b, Some("ss"));
    from_master(&mut b, registered(Ok(())));
    from_master(&mut b, update(true, false));
    let (_, c) = from_master(&mut b, update(false, true));
    assert_eq!(consumer_updates(&c), [false]);
    assert_eq!(consumed(&answer(&mut b, OffsetSpec::Offset(1))), None);
    let m = answer(&mut b, OffsetSpec::Offset(1));
    assert!(matches!(
        m[..],
        [Input::SingleActive {
            op: SacOp::SteppedDown { .. },
            ..
        }]
    ));
}

#[test]
fn a_refused_registration_answers_the_subscribe() {
    let mut b = bridge();
    sac_subscribe(&mut b, None);
    let (m, c) = from_master(&mut b, registered(Err(AmqpError::no_queue("/", "s"))));
    assert_eq!(code(&c), [(9, ResponseCode::StreamDoesNotExist)]);
    assert!(m.iter().any(|i| matches!(
        i,
        Input::ChannelClose {
            ch: FIRST_SUBSCRIPTION,
            ..
        }
    )));
    // Gone: a late update is ignored.
    let (m, c) = from_master(&mut b, update(true, false));
    assert!(m.is_empty() && c.is_empty());
}

#[test]
fn unsubscribing_or_a_deleted_stream_leaves_the_group() {
    let mut b = bridge();
    sac_subscribe(&mut b, None);
    from_master(&mut b, registered(Ok(())));
    let (mut m, mut c) = (Vec::new(), Vec::new());
    b.on_action(
        sc::Action::Unsubscribe {
            subscription_id: 4,
            stream: "s".into(),
        },
        &mut m,
        &mut c,
    );
    assert!(m.iter().any(|i| matches!(
        i,
        Input::SingleActive {
            op: SacOp::Unregister {
                subscription: 4,
                ..
            },
            ..
        }
    )));
    // A waiting member has no consumer for the master to cancel: the
    // stream's deletion ends it.
    sac_subscribe(&mut b, None);
    from_master(&mut b, registered(Ok(())));
    let (m, c) = from_master(&mut b, ToConn::StreamDeleted("s".into()));
    assert!(m.iter().any(|i| matches!(
        i,
        Input::SingleActive {
            op: SacOp::Unregister {
                subscription: 4,
                ..
            },
            ..
        }
    )));
    assert!(matches!(c[..], [sc::Input::StreamGone { .. }]));
}

#[test]
fn a_plain_subscription_ignores_a_name_without_single_active_consumer() {
    let mut b = bridge();
    let (m, _) = request(
        &mut b,
        3,
        Request::Subscribe {
            subscription_id: 1,
            stream: "s".into(),
            offset: OffsetSpec::Next,
            credit: 1,
            properties: vec![("name".into(), "app".into())],
        },
    );
    assert!(consumed(&m).is_some());
    assert!(!m.iter().any(|i| matches!(i, Input::SingleActive { .. })));
}
