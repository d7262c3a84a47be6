//! The per-class AMQP 0-9-1 tests against the real broker, as RabbitMQ does
//! each class and extension: one test binary (one link) for what used to be
//! eleven; each module starts its own brokers, as before.

mod channel;
mod closed_channel;
mod confirm;
mod connection;
mod consumers;
mod dead_letter;
mod length_limit;
mod priority;
mod routing_ext;
mod ttl;
mod tx;
