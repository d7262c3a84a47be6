//! The AMQP connection: a sans-IO state machine plus the encoder for what the
//! master sends. The tokio task in [`crate::server`] only moves bytes and timers.

pub mod connection;
pub mod encode;
