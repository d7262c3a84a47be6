//! The management API client of the compat tests (`management`,
//! `management_writes`, `permissions`, `policies`, `exporter_fields`): every call returns the status and the JSON body, and never
//! panics on a non-2xx status, so tests can check refusals.
//!
//! Against an external RabbitMQ (`STABLEMQ_TEST_EXTERNAL_URI`), set
//! `STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT` to its management port.

#![allow(dead_code)]

use compat_tests::Broker;
use serde_json::Value;
use std::time::Duration;

/// Bound on one HTTP call.
const HTTP_WAIT: Duration = Duration::from_secs(20);

/// An HTTP answer: status, `Location` header, JSON body (null if none).
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// The body as JSON.
    pub body: Value,
}

/// A management API client for one broker, as one user.
pub struct Api {
    base: String,
    agent: ureq::Agent,
    auth: String,
}

impl Api {
    /// As guest.
    pub fn new(broker: &Broker) -> Api {
        Api::on_port(Api::port_of(broker), "guest", "guest")
    }

    /// The management port of `broker` (or of the external RabbitMQ).
    pub fn port_of(broker: &Broker) -> u16 {
        match std::env::var("STABLEMQ_TEST_EXTERNAL_MANAGEMENT_PORT") {
            Ok(p) if broker.is_external() => p.parse().expect("management port"),
            _ => broker.management_port,
        }
    }

    /// On a port, as a user.
    pub fn on_port(port: u16, user: &str, pass: &str) -> Api {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(HTTP_WAIT))
            .build()
            .into();
        Api {
            base: format!("http://127.0.0.1:{port}"),
            agent,
            auth: basic(user, pass),
        }
    }

    fn finish(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>, what: &str) -> Answer {
        let mut resp = resp.unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Answer {
            status,
            location,
            body,
        }
    }

    /// GET.
    pub fn get(&self, path: &str) -> Answer {
        let url = format!("{}{path}", self.base);
        let r = self
            .agent
            .get(&url)
            .header("authorization", &self.auth)
            .call();
        Api::finish(r, &format!("GET {url}"))
    }

    /// GET as another user, or with no credentials at all (`None`): the
    /// status and the JSON body, for the tests of who may read what.
    pub fn get_as(&self, user: Option<(&str, &str)>, path: &str) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.get(&url);
        if let Some((u, p)) = user {
            req = req.header("authorization", basic(u, p));
        }
        let a = Api::finish(req.call(), &format!("GET {url}"));
        (a.status, a.body)
    }

    /// GET, expecting 200: the body.
    pub fn get_ok(&self, path: &str) -> Value {
        let a = self.get(path);
        assert_eq!(a.status, 200, "GET {path}: {}", a.body);
        a.body
    }

    /// GET: the status only.
    pub fn status(&self, path: &str) -> u16 {
        self.get(path).status
    }

    /// PUT a JSON body.
    pub fn put(&self, path: &str, body: &Value) -> Answer {
        let url = format!("{}{path}", self.base);
        let r = self
            .agent
            .put(&url)
            .header("authorization", &self.auth)
            .send_json(body);
        Api::finish(r, &format!("PUT {url}"))
    }

    /// POST a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Answer {
        let url = format!("{}{path}", self.base);
        let r = self
            .agent
            .post(&url)
            .header("authorization", &self.auth)
            .send_json(body);
        Api::finish(r, &format!("POST {url}"))
    }

    /// DELETE.
    pub fn delete(&self, path: &str) -> Answer {
        self.delete_with(path, &[])
    }

    /// DELETE with extra headers.
    pub fn delete_with(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.delete(&url).header("authorization", &self.auth);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Api::finish(req.call(), &format!("DELETE {url}"))
    }

    /// Any method by name, with a JSON body or none: the status and the body.
    pub fn send(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let empty = Value::Object(Default::default());
        let a = match method {
            "GET" => self.get(path),
            "DELETE" => self.delete(path),
            "PUT" => self.put(path, body.unwrap_or(&empty)),
            "POST" => self.post(path, body.unwrap_or(&empty)),
            _ => panic!("unsupported method {method}"),
        };
        (a.status, a.body)
    }

    /// PUT, expecting 201 (created) or 204 (updated).
    #[track_caller]
    pub fn put_ok(&self, path: &str, body: Value) {
        let a = self.put(path, &body);
        assert!(
            a.status == 201 || a.status == 204,
            "PUT {path}: {} {}",
            a.status,
            a.body
        );
    }

    /// GET until `check` holds (RabbitMQ refreshes its statistics every few
    /// seconds; StableMQ answers at once).
    pub fn get_until(&self, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let a = self.get(path);
            if a.status == 200 && check(&a.body) {
                return a.body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path} never showed {what}: {} {:#}",
                a.status,
                a.body
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// An HTTP basic `Authorization` value.
pub fn basic(user: &str, pass: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{user}:{pass}");
    let mut out = String::new();
    for chunk in input.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

/// Percent-encode one path segment (vhost, names).
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
