//! The HTTP side of `stablemq ctl`: one blocking client of a management API
//! (StableMQ's or RabbitMQ's, which answer the same requests), and the errors
//! an operator may see.

use serde_json::Value;
use std::time::Duration;

/// Why a ctl command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The request did not get an answer (refused, timed out, reset).
    #[error("{method} {url}: {source}")]
    Transport {
        /// HTTP method.
        method: &'static str,
        /// Full URL.
        url: String,
        /// ureq's error.
        source: Box<ureq::Error>,
    },
    /// The API answered with an error status; `reason` is its own words.
    #[error("{method} {url}: {status} {reason}")]
    Status {
        /// HTTP method.
        method: &'static str,
        /// Full URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// The `reason` (or `error`) of RabbitMQ's error body, else the body.
        reason: String,
    },
    /// The API answered 2xx with something that is not the expected JSON.
    #[error("{url}: unexpected answer: {detail}")]
    BadAnswer {
        /// Full URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Arguments that cannot be sent as they are.
    #[error("{0}")]
    Usage(String),
}

impl CtlError {
    /// The HTTP status, if the API answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            CtlError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The TLS settings of an `https://` API whose certificate chains to the
/// CA bundle `ca_file` (PEM), as `rabbitmqadmin --ssl-ca-cert-file` has it.
pub fn trusting(ca_file: &std::path::Path) -> Result<ureq::tls::TlsConfig, CtlError> {
    let certs = stablemq_cluster::transport::pem::read_certs("CA", ca_file)
        .map_err(|e| CtlError::Usage(format!("--tls-ca-file: {e}")))?;
    let roots = certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned());
    Ok(ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::from(roots))
        .build())
}

/// A management API with one user's credentials.
pub struct Api {
    base: String,
    authorization: String,
    agent: ureq::Agent,
}

/// How long one request may take; imports of large definitions files are the
/// slowest thing ctl sends.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

impl Api {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:15672`).
    pub fn new(base: &str, user: &str, password: &str) -> Api {
        Api::with_tls(base, user, password, None)
    }

    /// A client of the API at `base`, which may be `https://`: its
    /// certificate is checked against the PEM bundle `ca_file` if given, else
    /// against Mozilla's roots (the `webpki-roots` crate), as browsers would.
    pub fn with_tls(
        base: &str,
        user: &str,
        password: &str,
        tls: Option<ureq::tls::TlsConfig>,
    ) -> Api {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut config = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false);
        if let Some(tls) = tls {
            config = config.tls_config(tls);
        }
        let agent = config.build().into();
        Api {
            base: base.trim_end_matches('/').to_string(),
            authorization: format!("Basic {token}"),
            agent,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET `path` and parse the JSON answer.
    pub fn get(&self, path: &str) -> Result<Value, CtlError> {
        let url = self.url(path);
        let resp = self
            .agent
            .get(&url)
            .header("authorization", &self.authorization)
            .call();
        let text = answer("GET", &url, resp)?;
        serde_json::from_str(&text).map_err(|e| CtlError::BadAnswer {
            url,
            detail: e.to_string(),
        })
    }

    /// GET `path` and return the body as it came (definitions export).
    pub fn get_text(&self, path: &str) -> Result<String, CtlError> {
        let url = self.url(path);
        let resp = self
            .agent
            .get(&url)
            .header("authorization", &self.authorization)
            .call();
        answer("GET", &url, resp)
    }

    /// PUT a JSON body.
    pub fn put(&self, path: &str, body: &Value) -> Result<(), CtlError> {
        let url = self.url(path);
        let resp = self
            .agent
            .put(&url)
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .send(body.to_string());
        answer("PUT", &url, resp).map(drop)
    }

    /// POST a body that is JSON already (a definitions file, sent unparsed
    /// so that nothing in it is reordered or lost on the way).
    pub fn post_raw(&self, path: &str, body: Vec<u8>) -> Result<(), CtlError> {
        let url = self.url(path);
        let resp = self
            .agent
            .post(&url)
            .header("authorization", &self.authorization)
            .header("content-type", "application/json")
            .send(body);
        answer("POST", &url, resp).map(drop)
    }

    /// DELETE, with extra headers (`X-Reason` for connections).
    pub fn delete(&self, path: &str, headers: &[(&str, &str)]) -> Result<(), CtlError> {
        let url = self.url(path);
        let mut req = self
            .agent
            .delete(&url)
            .header("authorization", &self.authorization);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        answer("DELETE", &url, req.call()).map(drop)
    }
}

/// The body of a 2xx answer, or the error the API gave.
fn answer(
    method: &'static str,
    url: &str,
    resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<String, CtlError> {
    let mut resp = resp.map_err(|e| CtlError::Transport {
        method,
        url: url.to_string(),
        source: Box::new(e),
    })?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| CtlError::Transport {
            method,
            url: url.to_string(),
            source: Box::new(e),
        })?;
    if (200..300).contains(&status) {
        return Ok(text);
    }
    Err(CtlError::Status {
        method,
        url: url.to_string(),
        status,
        reason: error_reason(&text),
    })
}

/// RabbitMQ's error bodies are `{"error": ..., "reason": ...}`; say the
/// reason (or the error), else the body itself.
fn error_reason(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let field = |k: &str| {
        parsed.as_ref().and_then(|v| v.get(k)).map(|r| match r {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    field("reason")
        .or_else(|| field("error"))
        .unwrap_or_else(|| body.trim().to_string())
}

/// One path segment, percent-encoded as the management API wants it (`/`
/// is `%2F`, so the default vhost is `%2F`).
pub fn enc(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(enc("/"), "%2F");
        assert_eq!(enc("orders.eu-1"), "orders.eu-1");
        assert_eq!(enc("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(
            enc("127.0.0.1:5672 -> 127.0.0.1:5673"),
            "127.0.0.1%3A5672%20-%3E%20127.0.0.1%3A5673"
        );
    }

    #[test]
    fn error_bodies_give_their_reason() {
        assert_eq!(
            error_reason(r#"{"error":"Object Not Found","reason":"Not Found"}"#),
            "Not Found"
        );
        assert_eq!(error_reason(r#"{"error":"bad_request"}"#), "bad_request");
        assert_eq!(error_reason("plain text\n"), "plain text");
    }
}
