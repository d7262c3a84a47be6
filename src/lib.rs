//! StableMQ: an AMQP 0-9-1 broker that RabbitMQ clients use unchanged, whose
//! durable state is an event log made stable on a quorum of stores before any
//! client sees its effect.
//!
//! This crate is the broker: the connection state machine ([`amqp`]), the master
//! that orders operations into events ([`master`]), the broker state machine that
//! applies them ([`broker`]), login ([`auth`]), configuration, metrics, the tokio
//! runtime ([`server`]) and the CLI ([`cli`]).
//!
//! It is not the frame codec (`stablemq-protocol`) nor the replication and storage
//! layer (`stablemq-cluster`), which knows nothing of AMQP. See `docs/architecture.md`.

#![warn(missing_docs)]

pub mod amqp;
pub mod auth;
pub mod broker;
pub mod cli;
pub mod config;
pub mod ctl;
pub mod error;
pub mod fastmap;
pub mod fifo_map;
#[doc(hidden)]
pub mod fuzz;
pub mod management;
pub mod master;
pub mod metrics;
pub mod perf;
pub mod server;
pub mod shovel;
pub mod tls;
pub mod users;
