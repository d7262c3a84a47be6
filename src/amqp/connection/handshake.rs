//! The handshake: connection.start, SASL, tune and open.

use super::{Action, Connection, Phase};
use crate::auth;
use crate::error::{AmqpError, ReplyCode};
use crate::master::inout::{ClientProtocol, ConnInfo, Input};
use stablemq_protocol::methods::connection as mconn;
use stablemq_protocol::{
    AMQPClass, AMQPValue, FRAME_MIN_SIZE, FieldTable, Frame, LongString, ShortString,
};

impl Connection {
    /// The user name of a verified client certificate, if this is a TLS
    /// connection that carries one.
    fn cert_login(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|t| t.cert_login())
    }

    pub(super) fn start_method(&self) -> mconn::Start {
        let mut caps = FieldTable::default();
        for c in [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "per_consumer_qos",
            "authentication_failure_close",
            "connection.blocked",
            "consumer_priorities",
            "direct_reply_to",
        ] {
            caps.insert(ShortString::from(c), AMQPValue::Boolean(true));
        }
        let mut props = FieldTable::default();
        let s = |v: &str| AMQPValue::LongString(LongString::from(v));
        props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
        let shown = &self.config.server_properties;
        props.insert("product".into(), s(&shown.product));
        props.insert("version".into(), s(shown.amqp_version()));
        props.insert(
            "platform".into(),
            s(&format!("Rust / {}", std::env::consts::OS)),
        );
        props.insert("cluster_name".into(), s(&self.cluster_name_now()));
        props.insert("copyright".into(), s("StableMQ contributors"));
        props.insert(
            "information".into(),
            s("Licensed under the Apache License 2.0"),
        );
        mconn::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: props,
            mechanisms: LongString::from(auth::mechanisms(
                &self.config.auth_mechanisms,
                self.cert_login(),
            )),
            locales: LongString::from("en_US"),
        }
    }

    /// A frame before the connection is open: the start-ok, tune-ok and
    /// open of the handshake, in that order (heartbeats are ignored, a close
    /// is answered, anything else closes the connection).
    pub(super) fn handshake_frame(&mut self, frame: Frame, out: &mut Vec<Action>) {
        let Frame::Method { channel: 0, method } = frame else {
            if let Frame::Heartbeat { .. } = frame {
                return;
            }
            let e = AmqpError::new(
                ReplyCode::UnexpectedFrame,
                "expected a connection method during the handshake",
            );
            return self.close_connection(&e, out);
        };
        let (cid, mid) = (method.get_amqp_class_id(), method.get_amqp_method_id());
        match (self.phase, method) {
            (Phase::AwaitStartOk, AMQPClass::Connection(mconn::AMQPMethod::StartOk(s))) => {
                self.on_start_ok(s, (cid, mid), out)
            }
            (Phase::AwaitTuneOk, AMQPClass::Connection(mconn::AMQPMethod::TuneOk(t))) => {
                self.on_tune_ok(t, (cid, mid), out)
            }
            (Phase::AwaitOpen, AMQPClass::Connection(mconn::AMQPMethod::Open(o))) => {
                self.on_open(o, out)
            }
            (_, AMQPClass::Connection(mconn::AMQPMethod::Close(_))) => {
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::CloseOk(mconn::CloseOk {})),
                ));
                self.linger(out);
            }
            (_, _) => {
                let e = AmqpError::command_invalid("unexpected method during the handshake")
                    .on(cid, mid);
                self.close_connection(&e, out);
            }
        }
    }

    /// connection.start-ok (its class and method ids in `ids`): log the
    /// client in and send tune, or close the connection with the reason.
    fn on_start_ok(&mut self, s: mconn::StartOk, ids: (u16, u16), out: &mut Vec<Action>) {
        let (cid, mid) = ids;
        self.client_properties = s.client_properties;
        let mech = s.mechanism.as_str();
        self.auth_mechanism = mech.to_string();
        match self.login(mech, s.response.as_bytes()) {
            Ok(user) => {
                self.user = Some(user);
                self.phase = Phase::AwaitTuneOk;
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::Tune(mconn::Tune {
                        channel_max: self.config.channel_max,
                        frame_max: self.config.frame_max,
                        heartbeat: self.config.heartbeat_secs,
                    })),
                ));
            }
            Err(e) => {
                tracing::info!(conn = self.id, peer = %self.peer, "login refused: {}", e.reply_text());
                // authentication_failure_close: tell the client why, then close.
                self.close_connection(&e.on(cid, mid), out)
            }
        }
    }

    /// The user that mechanism `mech` with `response` logs in as: the
    /// mechanism must be offered; EXTERNAL takes the client certificate's
    /// user, the others the user and password of the response.
    fn login(&self, mech: &str, response: &[u8]) -> Result<String, AmqpError> {
        let users = self.users_now();
        let offered = auth::offered(&self.config.auth_mechanisms, self.cert_login(), mech);
        if !offered {
            Err(AmqpError::new(
                ReplyCode::AccessRefused,
                format!("unsupported authentication mechanism '{mech}'"),
            )
            .at_connection())
        } else if mech == auth::EXTERNAL {
            auth::authenticate_external(&self.config, &users, self.cert_login(), self.peer)
                .map(|u| u.name.clone())
        } else {
            auth::parse_response(mech, response).and_then(|(u, p)| {
                auth::authenticate(&self.config, &users, &u, &p, self.peer).map(|u| u.name.clone())
            })
        }
    }

    /// connection.tune-ok (its class and method ids in `ids`): take the
    /// client's limits if they are within the server's, else close.
    fn on_tune_ok(&mut self, t: mconn::TuneOk, ids: (u16, u16), out: &mut Vec<Action>) {
        let (cid, mid) = ids;
        let server_frame_max = self.config.frame_max;
        let server_channel_max = self.config.channel_max;
        let refuse = |text: String| AmqpError::new(ReplyCode::NotAllowed, text).on(cid, mid);
        if t.frame_max != 0 && t.frame_max < FRAME_MIN_SIZE {
            return self.close_connection(
                &refuse(format!(
                    "frame_max={} < {} min size",
                    t.frame_max, FRAME_MIN_SIZE
                )),
                out,
            );
        }
        if server_frame_max != 0 && t.frame_max > server_frame_max {
            return self.close_connection(
                &refuse(format!(
                    "frame_max={} > {} max size",
                    t.frame_max, server_frame_max
                )),
                out,
            );
        }
        if server_channel_max != 0 && t.channel_max > server_channel_max {
            return self.close_connection(
                &refuse(format!(
                    "channel_max={} > {} max",
                    t.channel_max, server_channel_max
                )),
                out,
            );
        }
        self.frame_max = if t.frame_max == 0 {
            server_frame_max
        } else {
            t.frame_max
        };
        self.channel_max = if t.channel_max == 0 {
            server_channel_max
        } else {
            t.channel_max
        };
        self.heartbeat = t.heartbeat;
        self.phase = Phase::AwaitOpen;
    }

    /// connection.open: ask the master to open the virtual host.
    fn on_open(&mut self, o: mconn::Open, out: &mut Vec<Action>) {
        self.phase = Phase::AwaitOpenOk;
        self.told_master = true;
        out.push(Action::ToMaster(Input::Open {
            conn: self.id,
            user: self.user.clone().unwrap_or_default(),
            vhost: o.virtual_host.to_string(),
            info: Box::new(ConnInfo {
                peer: self.addresses.0,
                local: self.addresses.1,
                client_properties: self.client_properties.clone(),
                auth_mechanism: self.auth_mechanism.clone(),
                frame_max: self.frame_max,
                channel_max: self.channel_max,
                heartbeat_secs: self.heartbeat,
                tls: self.tls.clone(),
                protocol: ClientProtocol::Amqp091,
            }),
        }));
    }
}
