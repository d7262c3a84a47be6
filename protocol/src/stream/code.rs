//! The stream protocol's response codes, numbered as its specification
//! (rabbitmq-server `deps/rabbitmq_stream/docs/PROTOCOL.adoc`, "Response Codes")
//! and RabbitMQ's `rabbit_stream.hrl` number them.
//!
//! A response code travels as a `uint16` in every response, in publish errors,
//! in metadata entries and updates, and as the closing code of a close.

use std::fmt;

/// A stream protocol response code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ResponseCode {
    /// 0x01: the request succeeded.
    Ok = 0x01,
    /// 0x02: the stream named in the request does not exist.
    StreamDoesNotExist = 0x02,
    /// 0x03: the subscription id is already in use on this connection.
    SubscriptionIdAlreadyExists = 0x03,
    /// 0x04: no subscription with this id on this connection.
    SubscriptionIdDoesNotExist = 0x04,
    /// 0x05: a stream with this name already exists.
    StreamAlreadyExists = 0x05,
    /// 0x06: the stream exists but has no available leader or member now.
    StreamNotAvailable = 0x06,
    /// 0x07: the SASL mechanism asked for is not offered.
    SaslMechanismNotSupported = 0x07,
    /// 0x08: wrong credentials.
    AuthenticationFailure = 0x08,
    /// 0x09: the SASL exchange itself went wrong.
    SaslError = 0x09,
    /// 0x0a: the server sends a SASL challenge.
    SaslChallenge = 0x0a,
    /// 0x0b: the user may only connect from localhost.
    SaslAuthenticationFailureLoopback = 0x0b,
    /// 0x0c: the user may not use this virtual host.
    VirtualHostAccessFailure = 0x0c,
    /// 0x0d: the frame could not be understood.
    UnknownFrame = 0x0d,
    /// 0x0e: the frame is larger than the negotiated frame_max.
    FrameTooLarge = 0x0e,
    /// 0x0f: the server failed for a reason of its own.
    InternalError = 0x0f,
    /// 0x10: the user lacks the permission the request needs.
    AccessRefused = 0x10,
    /// 0x11: the request contradicts the current state (e.g. a stream declared
    /// again with other arguments).
    PreconditionFailed = 0x11,
    /// 0x12: no publisher with this id on this connection.
    PublisherDoesNotExist = 0x12,
    /// 0x13: no offset is stored for this reference and stream.
    NoOffset = 0x13,
}

impl ResponseCode {
    /// Every code, in numeric order.
    pub const ALL: [ResponseCode; 19] = [
        ResponseCode::Ok,
        ResponseCode::StreamDoesNotExist,
        ResponseCode::SubscriptionIdAlreadyExists,
        ResponseCode::SubscriptionIdDoesNotExist,
        ResponseCode::StreamAlreadyExists,
        ResponseCode::StreamNotAvailable,
        ResponseCode::SaslMechanismNotSupported,
        ResponseCode::AuthenticationFailure,
        ResponseCode::SaslError,
        ResponseCode::SaslChallenge,
        ResponseCode::SaslAuthenticationFailureLoopback,
        ResponseCode::VirtualHostAccessFailure,
        ResponseCode::UnknownFrame,
        ResponseCode::FrameTooLarge,
        ResponseCode::InternalError,
        ResponseCode::AccessRefused,
        ResponseCode::PreconditionFailed,
        ResponseCode::PublisherDoesNotExist,
        ResponseCode::NoOffset,
    ];

    /// The code as it goes on the wire.
    pub fn as_u16(self) -> u16 {
        self as u16
    }

    /// The code for a wire value, if the specification defines one.
    pub fn from_u16(value: u16) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_u16() == value)
    }

    /// The short text RabbitMQ's documentation gives the code.
    pub fn description(self) -> &'static str {
        match self {
            ResponseCode::Ok => "OK",
            ResponseCode::StreamDoesNotExist => "stream does not exist",
            ResponseCode::SubscriptionIdAlreadyExists => "subscription ID already exists",
            ResponseCode::SubscriptionIdDoesNotExist => "subscription ID does not exist",
            ResponseCode::StreamAlreadyExists => "stream already exists",
            ResponseCode::StreamNotAvailable => "stream not available",
            ResponseCode::SaslMechanismNotSupported => "SASL mechanism not supported",
            ResponseCode::AuthenticationFailure => "authentication failure",
            ResponseCode::SaslError => "SASL error",
            ResponseCode::SaslChallenge => "SASL challenge",
            ResponseCode::SaslAuthenticationFailureLoopback => {
                "SASL authentication failure loopback"
            }
            ResponseCode::VirtualHostAccessFailure => "virtual host access failure",
            ResponseCode::UnknownFrame => "unknown frame",
            ResponseCode::FrameTooLarge => "frame too large",
            ResponseCode::InternalError => "internal error",
            ResponseCode::AccessRefused => "access refused",
            ResponseCode::PreconditionFailed => "precondition failed",
            ResponseCode::PublisherDoesNotExist => "publisher does not exist",
            ResponseCode::NoOffset => "no offset",
        }
    }
}

impl fmt::Display for ResponseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:02x})", self.description(), self.as_u16())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_specifications_numbers() {
        // PROTOCOL.adoc's table, in order: 0x01 OK ... 0x13 no offset.
        for (i, code) in ResponseCode::ALL.iter().enumerate() {
            assert_eq!(code.as_u16(), i as u16 + 1);
            assert_eq!(ResponseCode::from_u16(code.as_u16()), Some(*code));
        }
        assert_eq!(ResponseCode::FrameTooLarge.as_u16(), 0x0e);
        assert_eq!(ResponseCode::PublisherDoesNotExist.as_u16(), 0x12);
        assert_eq!(ResponseCode::from_u16(0), None);
        assert_eq!(ResponseCode::from_u16(0x14), None);
    }
}
