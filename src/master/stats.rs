//! Message counters for the management API's `message_stats`, counted on the
//! master's real paths (publish, deliver, get, ack, confirm, return), in
//! total and per queue and exchange, as RabbitMQ's management plugin counts
//! them. They are the master's session statistics, not replicated state: a
//! new master starts from zero, as a restarted RabbitMQ node does.

/// hashbrown's map, for `entry_ref`: one lookup by `&str` per level that
/// allocates the key only when the name is new (std's `contains_key` then
/// `get_mut` hashed every name twice, ~1000 instructions per message).
type NameMap<V> = hashbrown::HashMap<String, V, foldhash::fast::RandomState>;

/// One object's counters (RabbitMQ's `message_stats` field names).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Messages published (to an exchange; per queue: routed to it).
    pub publish: u64,
    /// Exchanges: messages published to it.
    pub publish_in: u64,
    /// Exchanges: messages it routed somewhere.
    pub publish_out: u64,
    /// Deliveries to consumers with manual acks.
    pub deliver: u64,
    /// Deliveries to consumers without acks.
    pub deliver_no_ack: u64,
    /// basic.get with manual acks.
    pub get: u64,
    /// basic.get without acks.
    pub get_no_ack: u64,
    /// All of deliver, deliver_no_ack, get, get_no_ack.
    pub deliver_get: u64,
    /// Deliveries flagged redelivered.
    pub redeliver: u64,
    /// Messages acknowledged.
    pub ack: u64,
    /// Publisher confirms sent.
    pub confirm: u64,
    /// Mandatory messages returned as unroutable.
    pub return_unroutable: u64,
}

/// Every counter the master keeps.
#[derive(Debug, Default)]
pub struct Stats {
    /// The whole node (`/api/overview`).
    pub global: Counters,
    /// Per vhost, per queue. Nested, so that counting looks names up as
    /// `&str` and allocates only for an object's first message.
    queues: NameMap<NameMap<Counters>>,
    /// Per vhost, per exchange.
    exchanges: NameMap<NameMap<Counters>>,
}

/// The counters of `name` in `vhost`, created at zero on first use (the
/// `Option` is always `Some`; it spares a panic path).
fn slot<'a>(
    map: &'a mut NameMap<NameMap<Counters>>,
    vhost: &str,
    name: &str,
) -> Option<&'a mut Counters> {
    Some(
        map.entry_ref(vhost)
            .or_default()
            .entry_ref(name)
            .or_default(),
    )
}

impl Stats {
    fn queue(&mut self, vhost: &str, queue: &str) -> Option<&mut Counters> {
        slot(&mut self.queues, vhost, queue)
    }

    /// A queue's counters, if it has seen traffic.
    pub fn queue_counters(&self, vhost: &str, queue: &str) -> Option<&Counters> {
        self.queues.get(vhost)?.get(queue)
    }

    /// An exchange's counters, if it has seen traffic.
    pub fn exchange_counters(&self, vhost: &str, exchange: &str) -> Option<&Counters> {
        self.exchanges.get(vhost)?.get(exchange)
    }

    /// A publish to `exchange` that reached `queues`.
    pub fn published(&mut self, vhost: &str, exchange: &str, queues: &[std::sync::Arc<str>]) {
        self.global.publish += 1;
        if let Some(x) = slot(&mut self.exchanges, vhost, exchange) {
            x.publish_in += 1;
            if !queues.is_empty() {
                x.publish_out += 1;
            }
        }
        for q in queues {
            if let Some(c) = self.queue(vhost, q) {
                c.publish += 1;
            }
        }
    }

    /// A delivery (`get` for basic.get) from `queue`.
    pub fn delivered(
        &mut self,
        vhost: &str,
        queue: &str,
        get: bool,
        no_ack: bool,
        redelivered: bool,
    ) {
        let count = |c: &mut Counters| {
            match (get, no_ack) {
                (false, false) => c.deliver += 1,
                (false, true) => c.deliver_no_ack += 1,
                (true, false) => c.get += 1,
                (true, true) => c.get_no_ack += 1,
            }
            c.deliver_get += 1;
            if redelivered {
                c.redeliver += 1;
            }
        };
        count(&mut self.global);
        if let Some(c) = self.queue(vhost, queue) {
            count(c);
        }
    }

    /// `n` messages of `queue` acknowledged.
    pub fn acked(&mut self, vhost: &str, queue: &str, n: u64) {
        self.global.ack += n;
        if let Some(c) = self.queue(vhost, queue) {
            c.ack += n;
        }
    }
}
