//! Access control and per-vhost settings against the real broker: parameters,
//! permissions, policies, user and vhost limits, through AMQP and the management
//! API. One test binary (one link) for what used to be five.

#[path = "../http/mod.rs"]
mod http;
mod parameters;
mod permissions;
mod policies;
mod user_limits;
mod vhost_limits;
