//! The handshake: peer properties, SASL, tune and open, each in its phase.
//!
//! RabbitMQ's reader moves through tcp_connected, peer_properties_exchanged,
//! authenticating, tuning and tuned to open; a frame that does not move it to
//! the next of these (or keep it, for a heartbeat, a repeated SASL handshake or
//! a SASL challenge) is an invalid transition, and the socket is closed without
//! a close frame. A failed authentication or open is answered with its code
//! first. Open is accepted in the tuning phase too (the client's tune is
//! optional for RabbitMQ); the connection then keeps the server's frame_max and
//! sends no heartbeats.

use std::time::Instant;

use super::{Action, AuthOutcome, CloseReason, HandshakeFault, Phase, StreamConnection};
use crate::stream::client::ClientMessage;
use crate::stream::code::ResponseCode;
use crate::stream::server::ServerMessage;

impl StreamConnection {
    /// A frame before open, while no broker answer is awaited.
    pub(super) fn on_handshake_message(&mut self, msg: ClientMessage, now: Instant) {
        use ClientMessage as C;
        match (&self.phase, msg) {
            (_, C::Heartbeat) => {}
            (
                Phase::AwaitPeerProperties,
                C::PeerProperties {
                    correlation_id,
                    properties,
                },
            ) => {
                self.client_properties = properties;
                let answer = ServerMessage::PeerPropertiesResponse {
                    correlation_id,
                    code: ResponseCode::Ok,
                    properties: self.config.server_properties.clone(),
                };
                self.send(&answer, now);
                self.phase = Phase::AwaitSaslHandshake;
            }
            (
                Phase::AwaitSaslHandshake | Phase::AwaitSaslAuthenticate,
                C::SaslHandshake { correlation_id },
            ) => {
                let answer = ServerMessage::SaslHandshakeResponse {
                    correlation_id,
                    code: ResponseCode::Ok,
                    mechanisms: self.config.mechanisms.clone(),
                };
                self.send(&answer, now);
                self.phase = Phase::AwaitSaslAuthenticate;
            }
            (
                Phase::AwaitSaslAuthenticate,
                C::SaslAuthenticate {
                    correlation_id,
                    mechanism,
                    data,
                },
            ) => self.on_sasl_authenticate(correlation_id, mechanism, data, now),
            (
                Phase::AwaitTune,
                C::Tune {
                    frame_max,
                    heartbeat,
                    ..
                },
            ) => {
                self.frame_max = negotiate_frame_max(frame_max, self.config.frame_max);
                self.heartbeat = heartbeat;
                self.phase = Phase::AwaitOpen;
            }
            (
                Phase::AwaitTune | Phase::AwaitOpen,
                C::Open {
                    correlation_id,
                    virtual_host,
                },
            ) => {
                if self.phase == Phase::AwaitTune {
                    self.frame_max = self.config.frame_max;
                }
                let user = self.user.clone().unwrap_or_default();
                self.phase = Phase::OpeningVhost {
                    correlation_id,
                    vhost: virtual_host.clone(),
                };
                self.push(Action::OpenVhost {
                    user,
                    vhost: virtual_host,
                });
            }
            (_, other) => {
                let fault = HandshakeFault::Unexpected(other.command());
                self.close_now(CloseReason::HandshakeFault(fault));
            }
        }
    }

    fn on_sasl_authenticate(
        &mut self,
        correlation_id: u32,
        mechanism: String,
        data: Option<bytes::Bytes>,
        now: Instant,
    ) {
        if !self.config.mechanisms.contains(&mechanism) {
            let code = ResponseCode::SaslMechanismNotSupported;
            self.send_sasl_answer(correlation_id, code, None, now);
            self.close_now(CloseReason::AuthenticationFailed(code));
            return;
        }
        self.phase = Phase::Authenticating { correlation_id };
        self.push(Action::Authenticate { mechanism, data });
    }

    fn send_sasl_answer(
        &mut self,
        correlation_id: u32,
        code: ResponseCode,
        challenge: Option<bytes::Bytes>,
        now: Instant,
    ) {
        let answer = ServerMessage::SaslAuthenticateResponse {
            correlation_id,
            code,
            challenge,
        };
        self.send(&answer, now);
    }

    /// The broker's verdict on a SASL step.
    pub(super) fn on_authenticated(&mut self, outcome: AuthOutcome, now: Instant) {
        let Phase::Authenticating { correlation_id } = self.phase else {
            return;
        };
        let code = match outcome {
            AuthOutcome::Ok { user } => {
                self.user = Some(user);
                self.send_sasl_answer(correlation_id, ResponseCode::Ok, None, now);
                let tune = ServerMessage::Tune {
                    frame_max: self.config.frame_max,
                    heartbeat: self.config.heartbeat,
                };
                self.send(&tune, now);
                self.phase = Phase::AwaitTune;
                self.drain_deferred(now);
                return;
            }
            AuthOutcome::Challenge(challenge) => {
                let code = ResponseCode::SaslChallenge;
                self.send_sasl_answer(correlation_id, code, Some(challenge), now);
                self.phase = Phase::AwaitSaslAuthenticate;
                self.drain_deferred(now);
                return;
            }
            AuthOutcome::Refused => ResponseCode::AuthenticationFailure,
            AuthOutcome::SaslError => ResponseCode::SaslError,
            AuthOutcome::LoopbackOnly => ResponseCode::SaslAuthenticationFailureLoopback,
        };
        self.send_sasl_answer(correlation_id, code, None, now);
        self.close_now(CloseReason::AuthenticationFailed(code));
    }

    /// The broker's verdict on the virtual host.
    pub(super) fn on_vhost_opened(&mut self, allowed: bool, now: Instant) {
        let Phase::OpeningVhost { correlation_id, .. } = self.phase else {
            return;
        };
        let Phase::OpeningVhost { vhost, .. } = std::mem::replace(&mut self.phase, Phase::Open)
        else {
            return;
        };
        if !allowed {
            let answer = ServerMessage::OpenResponse {
                correlation_id,
                code: ResponseCode::VirtualHostAccessFailure,
                properties: Vec::new(),
            };
            self.send(&answer, now);
            self.close_now(CloseReason::VhostAccessRefused);
            return;
        }
        let answer = ServerMessage::OpenResponse {
            correlation_id,
            code: ResponseCode::Ok,
            properties: self.config.open_properties(),
        };
        self.send(&answer, now);
        self.vhost = Some(vhost);
        // The heartbeat clocks start at open.
        self.last_received = now;
        self.drain_deferred(now);
    }

    /// Handles the frames that arrived while the broker was answering, until
    /// one of them makes the connection wait again.
    fn drain_deferred(&mut self, now: Instant) {
        while !matches!(
            self.phase,
            Phase::Authenticating { .. } | Phase::OpeningVhost { .. } | Phase::Closed
        ) {
            let Some(frame) = self.deferred.pop_front() else {
                break;
            };
            self.on_frame(frame, now);
        }
    }
}

/// RabbitMQ's rule: the smaller of the two, 0 on either side meaning "no
/// limit" (the other value holds).
pub fn negotiate_frame_max(client: u32, server: u32) -> u32 {
    match (client, server) {
        (0, s) => s,
        (c, 0) => c,
        (c, s) => c.min(s),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::{Bytes, BytesMut};

    use super::super::testing::*;
    use super::super::{Input, StreamConnectionConfig, server_properties};
    use super::*;
    use crate::stream::command::Command;
    use crate::stream::error::StreamFrameError;

    fn config() -> StreamConnectionConfig {
        StreamConnectionConfig {
            server_properties: server_properties("StableMQ", "0.1.0", "test"),
            mechanisms: vec!["PLAIN".into(), "EXTERNAL".into()],
            advertised_host: Some("localhost".into()),
            advertised_port: Some(5552),
            ..StreamConnectionConfig::default()
        }
    }

    fn authenticating() -> (StreamConnection, Instant) {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(config(), t0);
        let msgs = [
            peer_properties(),
            ClientMessage::SaslHandshake { correlation_id: 2 },
            sasl_plain(3),
        ];
        feed(&mut conn, &msgs, t0);
        (conn, t0)
    }

    fn closed(reason: CloseReason) -> Seen {
        Seen::Do(Action::Closed(reason))
    }

    fn sasl_answer(correlation_id: u32, code: ResponseCode) -> Seen {
        Seen::Sent(ServerMessage::SaslAuthenticateResponse {
            correlation_id,
            code,
            challenge: None,
        })
    }

    #[test]
    fn the_handshake_runs_in_order_and_asks_the_broker() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(config(), t0);
        let msgs = [
            peer_properties(),
            ClientMessage::SaslHandshake { correlation_id: 2 },
            sasl_plain(3),
        ];
        assert_eq!(
            feed(&mut conn, &msgs, t0),
            vec![
                Seen::Sent(ServerMessage::PeerPropertiesResponse {
                    correlation_id: 1,
                    code: ResponseCode::Ok,
                    properties: server_properties("StableMQ", "0.1.0", "test"),
                }),
                Seen::Sent(ServerMessage::SaslHandshakeResponse {
                    correlation_id: 2,
                    code: ResponseCode::Ok,
                    mechanisms: vec!["PLAIN".into(), "EXTERNAL".into()],
                }),
                Seen::Do(Action::Authenticate {
                    mechanism: "PLAIN".into(),
                    data: Some(Bytes::from_static(b"\0guest\0guest")),
                }),
            ]
        );
        assert_eq!(conn.client_properties()[0].1, "test");
        let ok = AuthOutcome::Ok {
            user: "guest".into(),
        };
        assert_eq!(
            input(&mut conn, Input::Authenticated(ok), t0),
            vec![
                sasl_answer(3, ResponseCode::Ok),
                Seen::Sent(ServerMessage::Tune {
                    frame_max: 1_048_576,
                    heartbeat: 60
                }),
            ]
        );
        assert_eq!(conn.user(), Some("guest"));
        assert_eq!(
            feed(&mut conn, &[tune(131_072, 30), open(4)], t0),
            vec![Seen::Do(Action::OpenVhost {
                user: "guest".into(),
                vhost: "/".into()
            })]
        );
        assert_eq!((conn.frame_max(), conn.heartbeat()), (131_072, 30));
        assert_eq!(
            input(&mut conn, Input::VhostOpened(true), t0),
            vec![Seen::Sent(ServerMessage::OpenResponse {
                correlation_id: 4,
                code: ResponseCode::Ok,
                properties: vec![
                    ("advertised_port".into(), "5552".into()),
                    ("advertised_host".into(), "localhost".into()),
                ],
            })]
        );
        assert!(conn.is_open());
        assert_eq!(conn.vhost(), Some("/"));
    }

    #[test]
    fn frames_out_of_their_phase_drop_the_connection_without_a_close() {
        for (msgs, unexpected) in [
            (vec![open(1)], Command::Open),
            (
                vec![ClientMessage::SaslHandshake { correlation_id: 1 }],
                Command::SaslHandshake,
            ),
            (
                vec![peer_properties(), sasl_plain(2)],
                Command::SaslAuthenticate,
            ),
            (
                vec![peer_properties(), peer_properties()],
                Command::PeerProperties,
            ),
            (
                vec![ClientMessage::Metadata {
                    correlation_id: 1,
                    streams: vec![],
                }],
                Command::Metadata,
            ),
            (
                vec![ClientMessage::Close {
                    correlation_id: 1,
                    code: 1,
                    reason: "OK".into(),
                }],
                Command::Close,
            ),
        ] {
            let mut conn = StreamConnection::new(config(), Instant::now());
            let out = feed(&mut conn, &msgs, Instant::now());
            assert_eq!(
                out.last(),
                Some(&closed(CloseReason::HandshakeFault(
                    HandshakeFault::Unexpected(unexpected)
                ))),
                "{msgs:?}"
            );
            assert!(conn.is_closed());
            // Nothing more comes out of a closed connection.
            assert!(feed(&mut conn, &[peer_properties()], Instant::now()).is_empty());
        }
    }

    #[test]
    fn heartbeats_before_open_are_ignored() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(config(), t0);
        let out = feed(
            &mut conn,
            &[ClientMessage::Heartbeat, peer_properties()],
            t0,
        );
        assert_eq!(out.len(), 1);
        assert!(!conn.is_closed());
    }

    #[test]
    fn garbage_and_oversized_frames_before_open_drop_the_connection() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(config(), t0);
        let mut buf = BytesMut::from(&[0u8, 0, 0, 6, 0, 0x63, 0, 1, 0, 0][..]);
        conn.handle_bytes(&mut buf, t0);
        assert_eq!(
            seen(conn.take_actions()),
            vec![closed(CloseReason::HandshakeFault(HandshakeFault::Frame(
                StreamFrameError::UnknownKey { key: 0x63 }
            )))]
        );
        assert!(buf.is_empty());

        // Before tune the initial frame_max (8192) holds, from the size field.
        let mut conn = StreamConnection::new(config(), t0);
        let mut buf = BytesMut::from(&[0u8, 0, 0x20, 0x01][..]);
        conn.handle_bytes(&mut buf, t0);
        assert_eq!(
            seen(conn.take_actions()),
            vec![closed(CloseReason::HandshakeFault(HandshakeFault::Frame(
                StreamFrameError::FrameTooLarge {
                    size: 8193,
                    max: 8192
                }
            )))]
        );
    }

    #[test]
    fn an_unknown_mechanism_is_refused_without_asking_the_broker() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(config(), t0);
        let msgs = [
            peer_properties(),
            ClientMessage::SaslHandshake { correlation_id: 2 },
            ClientMessage::SaslAuthenticate {
                correlation_id: 3,
                mechanism: "AMQPLAIN".into(),
                data: None,
            },
        ];
        let out = feed(&mut conn, &msgs, t0);
        assert_eq!(
            out[2..],
            [
                sasl_answer(3, ResponseCode::SaslMechanismNotSupported),
                closed(CloseReason::AuthenticationFailed(
                    ResponseCode::SaslMechanismNotSupported
                )),
            ]
        );
    }

    #[test]
    fn failed_authentication_is_answered_then_dropped() {
        for (outcome, code) in [
            (AuthOutcome::Refused, ResponseCode::AuthenticationFailure),
            (AuthOutcome::SaslError, ResponseCode::SaslError),
            (
                AuthOutcome::LoopbackOnly,
                ResponseCode::SaslAuthenticationFailureLoopback,
            ),
        ] {
            let (mut conn, t0) = authenticating();
            assert_eq!(
                input(&mut conn, Input::Authenticated(outcome), t0),
                vec![
                    sasl_answer(3, code),
                    closed(CloseReason::AuthenticationFailed(code))
                ]
            );
        }
    }

    #[test]
    fn a_challenge_waits_for_the_next_sasl_response() {
        let (mut conn, t0) = authenticating();
        let challenge = Bytes::from_static(b"nonce");
        assert_eq!(
            input(
                &mut conn,
                Input::Authenticated(AuthOutcome::Challenge(challenge.clone())),
                t0
            ),
            vec![Seen::Sent(ServerMessage::SaslAuthenticateResponse {
                correlation_id: 3,
                code: ResponseCode::SaslChallenge,
                challenge: Some(challenge),
            })]
        );
        let out = feed(&mut conn, &[sasl_plain(4)], t0);
        assert!(matches!(out[..], [Seen::Do(Action::Authenticate { .. })]));
        let ok = AuthOutcome::Ok { user: "u".into() };
        let out = input(&mut conn, Input::Authenticated(ok), t0);
        assert_eq!(out[0], sasl_answer(4, ResponseCode::Ok));
    }

    #[test]
    fn frames_sent_ahead_wait_for_the_brokers_answer() {
        let (mut conn, t0) = authenticating();
        // rstream waits, but a client may pipeline tune and open.
        assert!(feed(&mut conn, &[tune(0, 0), open(4)], t0).is_empty());
        let ok = AuthOutcome::Ok { user: "u".into() };
        let out = input(&mut conn, Input::Authenticated(ok), t0);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[2],
            Seen::Do(Action::OpenVhost {
                user: "u".into(),
                vhost: "/".into()
            })
        );
        // Client 0 (no limit) takes the server's; heartbeat 0: none.
        assert_eq!((conn.frame_max(), conn.heartbeat()), (1_048_576, 0));
    }

    #[test]
    fn a_bad_frame_sent_ahead_takes_its_turn() {
        let (mut conn, t0) = authenticating();
        let mut buf = BytesMut::from(&[0u8, 0, 0, 4, 0, 0x63, 0, 1][..]);
        conn.handle_bytes(&mut buf, t0);
        assert!(conn.take_actions().is_empty());
        let ok = AuthOutcome::Ok { user: "u".into() };
        let out = input(&mut conn, Input::Authenticated(ok), t0);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[2],
            closed(CloseReason::HandshakeFault(HandshakeFault::Frame(
                StreamFrameError::UnknownKey { key: 0x63 }
            )))
        );
    }

    #[test]
    fn a_refused_vhost_is_answered_then_dropped() {
        let (mut conn, t0) = authenticating();
        let ok = AuthOutcome::Ok { user: "u".into() };
        input(&mut conn, Input::Authenticated(ok), t0);
        feed(&mut conn, &[tune(1_048_576, 60), open(4)], t0);
        assert_eq!(
            input(&mut conn, Input::VhostOpened(false), t0),
            vec![
                Seen::Sent(ServerMessage::OpenResponse {
                    correlation_id: 4,
                    code: ResponseCode::VirtualHostAccessFailure,
                    properties: vec![],
                }),
                closed(CloseReason::VhostAccessRefused),
            ]
        );
        assert!(conn.is_closed());
    }

    #[test]
    fn open_without_tune_keeps_the_servers_frame_max() {
        let (mut conn, t0) = authenticating();
        let ok = AuthOutcome::Ok { user: "u".into() };
        input(&mut conn, Input::Authenticated(ok), t0);
        feed(&mut conn, &[open(4)], t0);
        input(&mut conn, Input::VhostOpened(true), t0);
        assert!(conn.is_open());
        assert_eq!((conn.frame_max(), conn.heartbeat()), (1_048_576, 0));
    }

    #[test]
    fn broker_answers_out_of_phase_are_ignored() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(config(), t0);
        let ok = AuthOutcome::Ok { user: "u".into() };
        assert!(input(&mut conn, Input::Authenticated(ok), t0).is_empty());
        assert!(input(&mut conn, Input::VhostOpened(true), t0).is_empty());
        assert!(!conn.is_open());
    }

    #[test]
    fn frame_max_is_negotiated_as_rabbitmq_does() {
        assert_eq!(negotiate_frame_max(0, 1000), 1000);
        assert_eq!(negotiate_frame_max(500, 0), 500);
        assert_eq!(negotiate_frame_max(0, 0), 0);
        assert_eq!(negotiate_frame_max(500, 1000), 500);
        assert_eq!(negotiate_frame_max(2000, 1000), 1000);
    }
}
