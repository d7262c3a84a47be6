//! The clocks: the handshake timeout, the wait for a close's answer, and
//! heartbeats; and a close the broker asks for.
//!
//! Heartbeats follow rabbit_heartbeat as the stream reader starts it (both
//! intervals the tuned heartbeat): a heartbeat frame goes out when nothing was
//! sent for an interval, and the connection is dropped (no close frame) when
//! nothing was received for two. RabbitMQ times each handshake step
//! separately (`connection_negotiation_step_timeout`, 10 s each); this machine
//! times the whole handshake, from the connection's start to open.

use std::time::{Duration, Instant};

use super::{CloseReason, Phase, StreamConnection};
use crate::stream::code::ResponseCode;
use crate::stream::server::ServerMessage;

impl StreamConnection {
    pub(super) fn on_tick(&mut self, now: Instant) {
        match self.phase {
            Phase::Closed => {}
            Phase::CloseSent { code, deadline } => {
                if now >= deadline {
                    self.close_now(CloseReason::ServerClosed {
                        code,
                        answered: false,
                    });
                }
            }
            Phase::Open => {
                let Some(interval) = self.heartbeat_interval() else {
                    return;
                };
                if !self.reading_paused
                    && now.saturating_duration_since(self.last_received) >= interval * 2
                {
                    self.close_now(CloseReason::HeartbeatTimeout);
                } else if now.saturating_duration_since(self.last_sent) >= interval {
                    self.send(&ServerMessage::Heartbeat, now);
                }
            }
            _ => {
                if now >= self.started + self.config.handshake_timeout {
                    self.close_now(CloseReason::HandshakeTimeout);
                }
            }
        }
    }

    /// The next instant at which `tick` has something to check.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Closed => None,
            Phase::CloseSent { deadline, .. } => Some(deadline),
            Phase::Open => {
                let interval = self.heartbeat_interval()?;
                let send = self.last_sent + interval;
                Some(match self.reading_paused {
                    true => send,
                    false => send.min(self.last_received + interval * 2),
                })
            }
            _ => Some(self.started + self.config.handshake_timeout),
        }
    }

    fn heartbeat_interval(&self) -> Option<Duration> {
        (self.heartbeat > 0).then(|| Duration::from_secs(u64::from(self.heartbeat)))
    }

    /// The broker closes the connection: after open with a close frame and
    /// its answer awaited; before open (or already closing) at once.
    pub(super) fn on_close_input(&mut self, code: ResponseCode, reason: String, now: Instant) {
        match self.phase {
            Phase::Open => self.send_close(code, &reason, now),
            Phase::CloseSent { .. } | Phase::Closed => {}
            _ => self.close_now(CloseReason::ServerClosed {
                code,
                answered: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Action, Input, StreamConnectionConfig};
    use super::*;
    use crate::stream::client::ClientMessage;

    fn tick(conn: &mut StreamConnection, now: Instant) -> Vec<Seen> {
        conn.tick(now);
        seen(conn.take_actions())
    }

    #[test]
    fn a_quiet_connection_gets_heartbeats_and_a_silent_one_is_dropped() {
        let (mut conn, t0) = opened();
        assert_eq!(conn.next_deadline(), Some(t0 + secs(60)));
        assert!(tick(&mut conn, t0 + secs(59)).is_empty());
        assert_eq!(
            tick(&mut conn, t0 + secs(60)),
            vec![Seen::Sent(ServerMessage::Heartbeat)]
        );
        // Sent at 60: the next one is due at 120, as is the receive timeout.
        assert!(tick(&mut conn, t0 + secs(100)).is_empty());
        // The client's heartbeat resets the receive clock.
        feed(&mut conn, &[ClientMessage::Heartbeat], t0 + secs(110));
        assert_eq!(
            tick(&mut conn, t0 + secs(120)),
            vec![Seen::Sent(ServerMessage::Heartbeat)]
        );
        assert!(tick(&mut conn, t0 + secs(229)).len() == 1);
        assert_eq!(
            tick(&mut conn, t0 + secs(230)),
            vec![Seen::Do(Action::Closed(CloseReason::HeartbeatTimeout))]
        );
        assert_eq!(conn.next_deadline(), None);
    }

    #[test]
    fn while_the_broker_does_not_read_the_clients_silence_is_not_a_timeout() {
        let (mut conn, t0) = opened();
        conn.handle(Input::ReadingPaused(true), t0 + secs(10));
        // Heartbeats still go out; the receive timeout (120 s) does not fire.
        for at in [60, 120, 180, 240, 300] {
            assert_eq!(
                tick(&mut conn, t0 + secs(at)),
                vec![Seen::Sent(ServerMessage::Heartbeat)],
                "at {at} s"
            );
        }
        assert_eq!(conn.next_deadline(), Some(t0 + secs(360)));
        // Resumed at 305: two intervals from there.
        conn.handle(Input::ReadingPaused(false), t0 + secs(305));
        assert_eq!(
            tick(&mut conn, t0 + secs(360)),
            vec![Seen::Sent(ServerMessage::Heartbeat)]
        );
        assert_eq!(
            tick(&mut conn, t0 + secs(425)),
            vec![Seen::Do(Action::Closed(CloseReason::HeartbeatTimeout))]
        );
    }

    #[test]
    fn frames_sent_put_the_heartbeat_off() {
        let (mut conn, t0) = opened();
        let metadata = ClientMessage::Metadata {
            correlation_id: 5,
            streams: vec![],
        };
        feed(&mut conn, &[metadata], t0 + secs(50));
        let reply = super::super::Reply::Metadata {
            brokers: vec![],
            streams: vec![],
        };
        input(
            &mut conn,
            Input::Reply {
                correlation_id: 5,
                reply,
            },
            t0 + secs(50),
        );
        assert!(tick(&mut conn, t0 + secs(60)).is_empty());
        assert_eq!(
            tick(&mut conn, t0 + secs(110)),
            vec![Seen::Sent(ServerMessage::Heartbeat)]
        );
    }

    #[test]
    fn heartbeat_zero_means_none() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(StreamConnectionConfig::default(), t0);
        let msgs = [
            peer_properties(),
            ClientMessage::SaslHandshake { correlation_id: 2 },
            sasl_plain(3),
        ];
        feed(&mut conn, &msgs, t0);
        let ok = super::super::AuthOutcome::Ok { user: "u".into() };
        input(&mut conn, Input::Authenticated(ok), t0);
        feed(&mut conn, &[tune(0, 0), open(4)], t0);
        input(&mut conn, Input::VhostOpened(true), t0);
        assert_eq!(conn.next_deadline(), None);
        assert!(tick(&mut conn, t0 + secs(100_000)).is_empty());
    }

    #[test]
    fn a_handshake_that_does_not_reach_open_in_time_is_dropped() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(StreamConnectionConfig::default(), t0);
        feed(&mut conn, &[peer_properties()], t0 + secs(1));
        assert_eq!(conn.next_deadline(), Some(t0 + secs(10)));
        assert!(tick(&mut conn, t0 + secs(9)).is_empty());
        assert_eq!(
            tick(&mut conn, t0 + secs(10)),
            vec![Seen::Do(Action::Closed(CloseReason::HandshakeTimeout))]
        );
        assert!(conn.is_closed());
    }

    #[test]
    fn an_unanswered_close_times_out() {
        let (mut conn, t0) = opened();
        let close = Input::Close {
            code: ResponseCode::InternalError,
            reason: "x".into(),
        };
        input(&mut conn, close, t0);
        assert_eq!(conn.next_deadline(), Some(t0 + secs(10)));
        assert!(tick(&mut conn, t0 + secs(9)).is_empty());
        assert_eq!(
            tick(&mut conn, t0 + secs(10)),
            vec![Seen::Do(Action::Closed(CloseReason::ServerClosed {
                code: ResponseCode::InternalError,
                answered: false,
            }))]
        );
    }

    #[test]
    fn the_broker_closing_before_open_drops_the_connection() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(StreamConnectionConfig::default(), t0);
        let close = Input::Close {
            code: ResponseCode::InternalError,
            reason: "x".into(),
        };
        assert_eq!(
            input(&mut conn, close, t0),
            vec![Seen::Do(Action::Closed(CloseReason::ServerClosed {
                code: ResponseCode::InternalError,
                answered: false,
            }))]
        );
    }
}
