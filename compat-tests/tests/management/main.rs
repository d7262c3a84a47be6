//! The management HTTP API's read side, against the real binary: objects
//! made by a real client (lapin) must show up with RabbitMQ's field names and
//! the right values, and credentials and tags decide who reads what.
//!
//! The shapes were taken from a RabbitMQ 3.10.8 node. To run these tests
//! against one, set `STABLEMQ_TEST_EXTERNAL_URI` as for the other tests and
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT` to its management port; the tests
//! then create their users and vhost through RabbitMQ's API.

use compat_tests::common;
#[path = "../http/mod.rs"]
mod http;

mod access;
mod health;
mod objects;

use common::*;
use http::{Api, enc};
use lapin::options::{
    BasicQosOptions, ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Users besides guest: one per tag that changes what the API shows.
const USERS: [(&str, &str); 3] = [("mon", "monitoring"), ("mgmt", "management"), ("notag", "")];
const PASSWORD: &str = "pw-123";

/// A broker with the test users and a second vhost.
fn start() -> Broker {
    let mut toml = String::from(
        "vhosts = [\"/\", \"other\"]\n\
         [[users]]\nname = \"guest\"\npassword = \"guest\"\ntags = [\"administrator\"]\n",
    );
    for (name, tag) in USERS {
        let tags = if tag.is_empty() {
            String::new()
        } else {
            format!("\"{tag}\"")
        };
        toml.push_str(&format!(
            "[[users]]\nname = \"{name}\"\npassword = \"{PASSWORD}\"\ntags = [{tags}]\n"
        ));
    }
    let broker = Broker::start_with(BrokerOptions {
        config_toml: Some(toml),
        ..Default::default()
    });
    if broker.is_external() {
        // RabbitMQ: create the same users and vhost through its API. The
        // tests run in parallel and each makes them; RabbitMQ answers 400
        // now and then when two such writes race, so a write is retried.
        let api = Api::new(&broker);
        let put = |path: String, body: serde_json::Value| {
            for _ in 0..10 {
                let a = api.put(&path, &body);
                if a.status < 300 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            panic!("PUT {path} kept failing");
        };
        for (name, tag) in USERS {
            put(
                format!("/api/users/{name}"),
                json!({"password": PASSWORD, "tags": tag}),
            );
        }
        put("/api/vhosts/other".into(), json!({}));
    }
    broker
}

/// The entries of a JSON list that match `pred`.
fn find(list: &Value, pred: impl Fn(&Value) -> bool) -> Vec<&Value> {
    list.as_array()
        .unwrap_or_else(|| panic!("expected a JSON list, got {list}"))
        .iter()
        .filter(|v| pred(v))
        .collect()
}

/// Exactly one entry of a JSON list that matches `pred`.
fn one<'a>(list: &'a Value, what: &str, pred: impl Fn(&Value) -> bool) -> &'a Value {
    let found = find(list, pred);
    assert_eq!(found.len(), 1, "expected one {what} in {list:#}");
    found[0]
}

/// Queue arguments the tests declare, and what the API must echo.
fn queue_args() -> (FieldTable, Value) {
    let args = ftable(&[
        ("x-max-length", AMQPValue::LongInt(10)),
        ("x-message-ttl", AMQPValue::LongInt(60_000)),
    ]);
    (args, json!({"x-max-length": 10, "x-message-ttl": 60000}))
}
