//! Exchanges and their bindings, and routing over them.

use super::event::{Binding, Destination, ExchangeKind, ExchangeSpec};
use super::policy::AppliedPolicy;
use super::routing::{headers_match, topic_matches};
use stablemq_protocol::FieldTable;

/// An exchange and the bindings that leave it.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Name (empty for the default exchange).
    pub name: String,
    /// Declared shape.
    pub spec: ExchangeSpec,
    /// Bindings whose source is this exchange, in creation order.
    pub bindings: Vec<Binding>,
    /// The policy this exchange follows, if any (recomputed by apply).
    pub policy: Option<AppliedPolicy>,
}

impl Exchange {
    /// Destinations this exchange routes a message to (one hop; no e2e recursion here).
    pub fn matches<'a>(
        &'a self,
        routing_key: &'a str,
        headers: Option<&'a FieldTable>,
    ) -> impl Iterator<Item = &'a Destination> + 'a {
        self.bindings
            .iter()
            .filter(move |b| match self.spec.kind {
                ExchangeKind::Direct => b.routing_key == routing_key,
                ExchangeKind::Fanout => true,
                ExchangeKind::Topic => topic_matches(&b.routing_key, routing_key),
                ExchangeKind::Headers => headers_match(&b.arguments, headers),
            })
            .map(|b| &b.destination)
    }

    /// The alternate exchange in force: the `alternate-exchange` argument,
    /// else the policy's (an argument wins over a policy, as in RabbitMQ).
    pub fn alternate_exchange(&self) -> Option<String> {
        self.spec
            .arguments
            .inner()
            .get("alternate-exchange")
            .and_then(super::queue_args::text)
            .or_else(|| {
                self.policy
                    .as_ref()
                    .and_then(|p| super::policy::string(&p.definition, "alternate-exchange"))
            })
    }

    /// Whether an identical binding exists (same destination, key and arguments).
    pub fn has_binding(&self, b: &Binding) -> bool {
        self.bindings.iter().any(|x| x == b)
    }
}

/// Names RabbitMQ predeclares in every vhost, with their types.
pub const PREDECLARED: [(&str, ExchangeKind); 6] = [
    ("", ExchangeKind::Direct),
    ("amq.direct", ExchangeKind::Direct),
    ("amq.fanout", ExchangeKind::Fanout),
    ("amq.topic", ExchangeKind::Topic),
    ("amq.headers", ExchangeKind::Headers),
    ("amq.match", ExchangeKind::Headers),
];
