//! Why a stream protocol frame could not be split off or decoded, and the
//! response code a server answers each fault with.
//!
//! RabbitMQ (rabbit_stream_reader) answers a frame over frame_max after
//! authentication with a close carrying 0x0e "frame too large", and any frame
//! it cannot parse with a close carrying 0x0d "unknown frame" (before
//! authentication it drops the connection). The broker side decides which; this
//! type only says what went wrong.

use super::code::ResponseCode;
use super::command::Command;

/// A fault in a stream protocol frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamFrameError {
    /// The size prefix announces more than the negotiated frame_max allows.
    #[error("frame of {size} bytes is larger than frame_max {max}")]
    FrameTooLarge {
        /// The size the frame announces (without its 4-byte size field).
        size: u32,
        /// The limit in force.
        max: u32,
    },
    /// The frame is too short to hold a key and a version.
    #[error("frame of {size} bytes cannot hold a key and a version")]
    TooShort {
        /// The size of the frame.
        size: u32,
    },
    /// The key names no command of the protocol.
    #[error("unknown command key 0x{key:04x}")]
    UnknownKey {
        /// The key as received.
        key: u16,
    },
    /// The key names a command that does not travel in this direction (e.g. a
    /// deliver sent by a client).
    #[error("{command:?} (key 0x{key:04x}) is not sent by the {sender}")]
    WrongDirection {
        /// The command.
        command: Command,
        /// The key as received, with its response bit.
        key: u16,
        /// "client" or "server".
        sender: &'static str,
    },
    /// The command's version is one this codec does not speak.
    #[error("version {version} of {command:?} is not supported")]
    UnsupportedVersion {
        /// The command.
        command: Command,
        /// The version as received.
        version: u16,
    },
    /// A field runs past the end of the frame.
    #[error("{command:?} frame is truncated")]
    Truncated {
        /// The command.
        command: Command,
    },
    /// A field holds a value the protocol does not allow.
    #[error("{command:?} frame is malformed: {reason}")]
    Malformed {
        /// The command.
        command: Command,
        /// What is wrong.
        reason: &'static str,
    },
    /// Bytes are left after the command's last field.
    #[error("{command:?} frame has {extra} bytes after its last field")]
    TrailingBytes {
        /// The command.
        command: Command,
        /// How many bytes are left.
        extra: usize,
    },
}

impl StreamFrameError {
    /// The response code a server closes the connection with for this fault.
    pub fn response_code(&self) -> ResponseCode {
        match self {
            StreamFrameError::FrameTooLarge { .. } => ResponseCode::FrameTooLarge,
            _ => ResponseCode::UnknownFrame,
        }
    }
}
