//! `amqp://user:pass@host:port/vhost` URIs (and `amqps://`), as RabbitMQ's
//! clients read them.

/// Where and as whom to connect: `amqp://user:pass@host:port/vhost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUri {
    /// `amqps://`: TLS first (port 5671 by default).
    pub tls: bool,
    /// Host name or address.
    pub host: String,
    /// TCP port (5672 by default, 5671 for `amqps://`).
    pub port: u16,
    /// User name (guest by default).
    pub user: String,
    /// Password (guest by default).
    pub password: String,
    /// Virtual host (`/` by default).
    pub vhost: String,
}

impl AmqpUri {
    /// Parse an `amqp://` URI. Missing parts default as in RabbitMQ's clients:
    /// guest/guest, port 5672, vhost `/` (an empty path also means `/`). User,
    /// password and vhost are percent-decoded (`%2f` is `/`). Query strings are
    /// ignored. `amqps://` is AMQP over TLS, on port 5671 by default.
    pub fn parse(s: &str) -> Result<AmqpUri, String> {
        let (tls, rest) = match (s.strip_prefix("amqp://"), s.strip_prefix("amqps://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => {
                return Err(format!("{s}: only amqp:// and amqps:// URIs are supported"));
            }
        };
        let rest = rest.split(['?', '#']).next().unwrap_or("");
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((a, b)) => (percent_decode(a)?, percent_decode(b)?),
                None => (percent_decode(u)?, String::new()),
            },
            None => ("guest".to_string(), "guest".to_string()),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{s}: unclosed [ in host"))?;
            (h.to_string(), after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (hostport.to_string(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("{s}: bad port {p:?}"))?,
            None if tls => 5671,
            None => 5672,
        };
        let host = if host.is_empty() {
            "localhost".to_string()
        } else {
            host
        };
        let vhost = if path.is_empty() {
            "/".to_string()
        } else {
            percent_decode(path)?
        };
        Ok(AmqpUri {
            tls,
            host,
            port,
            user,
            password,
            vhost,
        })
    }

    /// The URI with the password masked, for reports.
    pub fn display(&self) -> String {
        let vhost = self.vhost.replace('%', "%25").replace('/', "%2f");
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let scheme = if self.tls { "amqps" } else { "amqp" };
        format!(
            "{scheme}://{}:***@{}:{}/{}",
            self.user, host, self.port, vhost
        )
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_parsing_defaults_and_decoding() {
        let u = AmqpUri::parse("amqp://guest:guest@127.0.0.1:5811/%2f").unwrap();
        assert_eq!(
            u,
            AmqpUri {
                tls: false,
                host: "127.0.0.1".into(),
                port: 5811,
                user: "guest".into(),
                password: "guest".into(),
                vhost: "/".into(),
            }
        );
        let u = AmqpUri::parse("amqp://localhost").unwrap();
        assert_eq!(
            (u.port, u.vhost.as_str(), u.user.as_str()),
            (5672, "/", "guest")
        );
        let u = AmqpUri::parse("amqp://a%40b:p%3Aw@[::1]:1234/my%2Fvh?heartbeat=5").unwrap();
        assert_eq!(u.user, "a@b");
        assert_eq!(u.password, "p:w");
        assert_eq!(u.host, "::1");
        assert_eq!(u.port, 1234);
        assert_eq!(u.vhost, "my/vh");
        assert_eq!(u.display(), "amqp://a@b:***@[::1]:1234/my%2fvh");
        let s = AmqpUri::parse("amqps://x").unwrap();
        assert!(s.tls);
        assert_eq!(s.port, 5671);
        assert_eq!(s.display(), "amqps://guest:***@x:5671/%2f");
        assert!(AmqpUri::parse("http://x").is_err());
        assert!(AmqpUri::parse("amqp://h:notaport").is_err());
        assert!(AmqpUri::parse("amqp://h/%zz").is_err());
    }
}
