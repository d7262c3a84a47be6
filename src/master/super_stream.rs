//! Super streams (RabbitMQ 3.10+): a direct exchange whose bindings lead to
//! streams, its partitions. The stream protocol's route and partitions
//! commands are answered from the exchange's bindings as they are in the
//! state, so a super stream made by AMQP declares, by the management API or
//! by the stream protocol's create super stream is the same thing.
//!
//! Create and delete super stream (3.13+) are run by the stream bridge as
//! AMQP declares, binds and deletes; the master adds the two checks RabbitMQ
//! makes first, from its state: the permissions, and that none of the names
//! is taken.
//!
//! Neither route nor partitions looks at the exchange's `x-super-stream` argument: RabbitMQ does
//! not either (rabbitmq-stream-js-client's tests make theirs with
//! `x-super-stream-enabled`), any exchange with streams bound to it answers.

use crate::broker::Broker;
use crate::broker::event::{Binding, Destination};
use crate::broker::queue_args::{int, text};
use crate::users::Perm;
use std::cmp::Ordering;

/// The binding argument that orders a super stream's partitions.
pub(crate) const PARTITION_ORDER: &str = "x-stream-partition-order";

/// The streams `exchange` routes `routing_key` to (by name, each once; none
/// is an answer too), or `Err` when there is no such exchange.
pub(super) fn route(
    broker: &Broker,
    vhost: &str,
    exchange: &str,
    routing_key: &str,
) -> Result<Vec<String>, ()> {
    let x = broker.exchange(vhost, exchange).ok_or(())?;
    let mut streams: Vec<String> = x
        .matches(routing_key, None)
        .filter_map(|d| stream_name(broker, vhost, d))
        .map(str::to_owned)
        .collect();
    streams.sort();
    streams.dedup();
    Ok(streams)
}

/// The streams bound to `exchange`, in partition order, or `Err` when there
/// is no such exchange.
pub(super) fn partitions(broker: &Broker, vhost: &str, exchange: &str) -> Result<Vec<String>, ()> {
    let x = broker.exchange(vhost, exchange).ok_or(())?;
    let mut bound: Vec<(&Binding, &str)> = x
        .bindings
        .iter()
        .filter_map(|b| stream_name(broker, vhost, &b.destination).map(|s| (b, s)))
        .collect();
    // By name first, so that partitions of equal (or no) order come out the
    // same way every time; then stably by their order.
    bound.sort_by(|a, b| a.1.cmp(b.1));
    bound.sort_by(|a, b| by_order(partition_order(a.0), partition_order(b.0)));
    let mut streams: Vec<String> = Vec::with_capacity(bound.len());
    for (_, s) in bound {
        if !streams.iter().any(|x| x == s) {
            streams.push(s.to_owned());
        }
    }
    Ok(streams)
}

/// Whether `user` may create or delete the super stream `exchange` of
/// `vhost`, as RabbitMQ's stream plugin checks before it touches anything:
/// configure on the exchange (all a delete checks before it looks up the
/// partitions); with `partitions`, read on the exchange and configure and
/// write on every partition too (declaring, binding from, binding to).
pub(super) fn permitted(
    broker: &Broker,
    user: &str,
    vhost: &str,
    exchange: &str,
    partitions: Option<&[String]>,
) -> bool {
    let allows = |perm, name: &str| broker.access.allows(user, vhost, perm, name);
    if !allows(Perm::Configure, exchange) {
        return false;
    }
    let Some(partitions) = partitions else {
        return true;
    };
    allows(Perm::Read, exchange)
        && partitions
            .iter()
            .all(|p| allows(Perm::Configure, p) && allows(Perm::Write, p))
}

/// Whether the exchange or any of the queues (of any type) exists in
/// `vhost`: a new super stream must take none of them (RabbitMQ answers
/// stream already exists, 0x05).
pub(super) fn any_exists(broker: &Broker, vhost: &str, exchange: &str, queues: &[String]) -> bool {
    broker.exchange(vhost, exchange).is_some()
        || queues.iter().any(|q| broker.queue(vhost, q).is_some())
}

/// A destination's name if it is a stream of `vhost`.
fn stream_name<'a>(broker: &Broker, vhost: &str, d: &'a Destination) -> Option<&'a str> {
    match d {
        Destination::Queue(q) if broker.queue(vhost, q).is_some_and(|q| q.stream.is_some()) => {
            Some(q.as_str())
        }
        _ => None,
    }
}

/// A binding's `x-stream-partition-order`: an integer, or a string of one
/// (RabbitMQ coerces both; the management API and js client send strings).
fn partition_order(b: &Binding) -> Option<i128> {
    let v = b.arguments.inner().get(PARTITION_ORDER)?;
    int(v).or_else(|| text(v).and_then(|t| t.trim().parse().ok()))
}

/// Ordered partitions first, by their order; those without one after them.
fn by_order(a: Option<i128>, b: Option<i128>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{AMQPValue, FieldTable, ShortString};

    fn binding(to: &str, order: Option<AMQPValue>) -> Binding {
        let mut arguments = FieldTable::default();
        if let Some(v) = order {
            arguments.insert(ShortString::from(PARTITION_ORDER), v);
        }
        Binding {
            source: "ss".into(),
            destination: Destination::Queue(to.into()),
            routing_key: to.into(),
            arguments,
        }
    }

    #[test]
    fn orders_are_integers_or_strings_of_integers() {
        let o = |v| partition_order(&binding("s", Some(v)));
        assert_eq!(o(AMQPValue::LongInt(2)), Some(2));
        assert_eq!(o(AMQPValue::ShortShortUInt(7)), Some(7));
        assert_eq!(o(AMQPValue::LongString("12".into())), Some(12));
        assert_eq!(o(AMQPValue::LongString("x".into())), None);
        assert_eq!(partition_order(&binding("s", None)), None);
    }

    #[test]
    fn ordered_partitions_come_first() {
        let mut v = vec![None, Some(3), Some(-1), None, Some(0)];
        v.sort_by(|a, b| by_order(*a, *b));
        assert_eq!(v, vec![Some(-1), Some(0), Some(3), None, None]);
    }
}
