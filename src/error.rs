//! AMQP faults and their reply codes, in one place.
//!
//! Every refusal the broker makes is one of these values. The connection and channel
//! machinery turn them into `connection.close` or `channel.close` frames; nothing
//! else in the broker picks reply codes, so the mapping to RabbitMQ's codes and
//! message shapes is checked here once.

use std::fmt;

/// The reply codes of AMQP 0-9-1 that StableMQ sends, with RabbitMQ's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ReplyCode {
    /// 200: a normal close.
    ReplySuccess = 200,
    /// 311: content too large (unused for now; kept for the full table).
    ContentTooLarge = 311,
    /// 312: a mandatory message could not be routed.
    NoRoute = 312,
    /// 313: an immediate message had no consumer (unused: immediate is refused).
    NoConsumers = 313,
    /// 320: the broker or an operator closed the connection.
    ConnectionForced = 320,
    /// 402: invalid path (vhost names).
    InvalidPath = 402,
    /// 403: access refused, also for reserved `amq.*` names.
    AccessRefused = 403,
    /// 404: no such exchange or queue.
    NotFound = 404,
    /// 405: an exclusive queue is owned by another connection.
    ResourceLocked = 405,
    /// 406: a precondition failed (mismatched redeclare, unknown delivery tag, ...).
    PreconditionFailed = 406,
    /// 501: a malformed frame.
    FrameError = 501,
    /// 502: undecodable method arguments.
    SyntaxError = 502,
    /// 503: a method that is not valid now.
    CommandInvalid = 503,
    /// 504: a frame on a channel that is not open.
    ChannelError = 504,
    /// 505: a frame that was not expected in this state.
    UnexpectedFrame = 505,
    /// 506: the broker ran out of a resource.
    ResourceError = 506,
    /// 530: not allowed (unknown vhost, ...).
    NotAllowed = 530,
    /// 540: not implemented (`immediate`).
    NotImplemented = 540,
    /// 541: an internal error.
    InternalError = 541,
}

impl ReplyCode {
    /// RabbitMQ's upper-case name, used at the start of every reply text.
    pub fn name(self) -> &'static str {
        match self {
            ReplyCode::ReplySuccess => "OK",
            ReplyCode::ContentTooLarge => "CONTENT_TOO_LARGE",
            ReplyCode::NoRoute => "NO_ROUTE",
            ReplyCode::NoConsumers => "NO_CONSUMERS",
            ReplyCode::ConnectionForced => "CONNECTION_FORCED",
            ReplyCode::InvalidPath => "INVALID_PATH",
            ReplyCode::AccessRefused => "ACCESS_REFUSED",
            ReplyCode::NotFound => "NOT_FOUND",
            ReplyCode::ResourceLocked => "RESOURCE_LOCKED",
            ReplyCode::PreconditionFailed => "PRECONDITION_FAILED",
            ReplyCode::FrameError => "FRAME_ERROR",
            ReplyCode::SyntaxError => "SYNTAX_ERROR",
            ReplyCode::CommandInvalid => "COMMAND_INVALID",
            ReplyCode::ChannelError => "CHANNEL_ERROR",
            ReplyCode::UnexpectedFrame => "UNEXPECTED_FRAME",
            ReplyCode::ResourceError => "RESOURCE_ERROR",
            ReplyCode::NotAllowed => "NOT_ALLOWED",
            ReplyCode::NotImplemented => "NOT_IMPLEMENTED",
            ReplyCode::InternalError => "INTERNAL_ERROR",
        }
    }

    /// Whether AMQP makes this a connection-level (hard) error.
    pub fn is_hard(self) -> bool {
        matches!(
            self,
            ReplyCode::ConnectionForced
                | ReplyCode::InvalidPath
                | ReplyCode::FrameError
                | ReplyCode::SyntaxError
                | ReplyCode::CommandInvalid
                | ReplyCode::ChannelError
                | ReplyCode::UnexpectedFrame
                | ReplyCode::ResourceError
                | ReplyCode::NotAllowed
                | ReplyCode::NotImplemented
                | ReplyCode::InternalError
        )
    }
}

/// A refusal of one AMQP operation: the code, RabbitMQ-shaped text, and the method
/// that caused it (class and method ids go back in the close frame).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct AmqpError {
    /// Which reply code to send.
    pub code: ReplyCode,
    /// Text after the code name, e.g. "no queue 'q' in vhost '/'".
    pub detail: String,
    /// Class id of the offending method (0 when none).
    pub class_id: u16,
    /// Method id of the offending method (0 when none).
    pub method_id: u16,
    /// True when the whole connection must close even though the code is soft
    /// (RabbitMQ closes the connection for some soft codes, e.g. access refused at login).
    pub connection_level: bool,
}

impl AmqpError {
    /// A new error of `code` with RabbitMQ-shaped detail text.
    pub fn new(code: ReplyCode, detail: impl Into<String>) -> Self {
        AmqpError {
            code,
            detail: detail.into(),
            class_id: 0,
            method_id: 0,
            connection_level: code.is_hard(),
        }
    }

    /// Attach the class and method that caused the error.
    pub fn on(mut self, class_id: u16, method_id: u16) -> Self {
        self.class_id = class_id;
        self.method_id = method_id;
        self
    }

    /// Force the error to close the connection.
    pub fn at_connection(mut self) -> Self {
        self.connection_level = true;
        self
    }

    /// The reply text RabbitMQ would send: "NAME - detail".
    pub fn reply_text(&self) -> String {
        let mut s = format!("{} - {}", self.code.name(), self.detail);
        // reply-text is a short string: keep it within 255 bytes on a char boundary.
        if s.len() > 255 {
            let mut cut = 255;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    }

    /// 404 for a missing exchange, in RabbitMQ's words.
    pub fn no_exchange(vhost: &str, name: &str) -> Self {
        Self::new(
            ReplyCode::NotFound,
            format!("no exchange '{name}' in vhost '{vhost}'"),
        )
    }

    /// 404 for a missing queue, in RabbitMQ's words.
    pub fn no_queue(vhost: &str, name: &str) -> Self {
        Self::new(
            ReplyCode::NotFound,
            format!("no queue '{name}' in vhost '{vhost}'"),
        )
    }

    /// 406 for a generic precondition.
    pub fn precondition(detail: impl Into<String>) -> Self {
        Self::new(ReplyCode::PreconditionFailed, detail)
    }

    /// 403 for a refused operation.
    pub fn access_refused(detail: impl Into<String>) -> Self {
        Self::new(ReplyCode::AccessRefused, detail)
    }

    /// 503 for a method that is not valid now.
    pub fn command_invalid(detail: impl Into<String>) -> Self {
        Self::new(ReplyCode::CommandInvalid, detail)
    }
}

impl fmt::Display for AmqpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code as u16, self.reply_text())
    }
}

/// Result of an AMQP operation.
pub type AmqpResult<T> = Result<T, AmqpError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_text_starts_with_code_name_and_fits_short_string() {
        let e = AmqpError::no_queue("/", &"q".repeat(300));
        assert!(e.reply_text().starts_with("NOT_FOUND - no queue 'qqq"));
        assert!(e.reply_text().len() <= 255);
        assert!(!e.connection_level);
        assert!(AmqpError::command_invalid("x").connection_level);
    }
}
