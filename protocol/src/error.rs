//! Why a frame could not be decoded, and what the broker must tell the client.
//!
//! Every fault here is a connection-level (hard) error: once the byte stream is
//! not a well-formed frame sequence the broker has lost sync with the client, so
//! RabbitMQ answers with `connection.close` and stops reading. The reply code and
//! text follow RabbitMQ (rabbitmq-server, `deps/rabbit/src/rabbit_reader.erl`,
//! `deps/rabbit_common/src/rabbit_command_assembler.erl`, `rabbit_misc.erl`,
//! `rabbit_framing_amqp_0_9_1.erl`) so that client libraries and their users see
//! the error messages they already know.

use std::fmt;

use crate::nesting::MAX_TABLE_DEPTH;

/// 501: RabbitMQ's answer to anything it cannot split into frames or decode.
const FRAME_ERROR: u16 = 501;
/// 505: a frame that is well formed but not allowed where it appears.
const UNEXPECTED_FRAME: u16 = 505;
/// 540: the peer asked for something this server does not implement.
const NOT_IMPLEMENTED: u16 = 540;

/// How much of an offending payload goes into the reply text; RabbitMQ quotes the
/// first 16 octets (`payload_snippet/1` in `rabbit_reader.erl`).
const SNIPPET_LEN: usize = 16;

/// The longest reply text that fits in a `shortstr`; RabbitMQ cuts at the same
/// length (`amqp_exception_explanation/2`, `chars_limit` 255).
const REPLY_TEXT_MAX: usize = 255;

/// The start of an offending payload, kept so the reply text can quote it the way
/// RabbitMQ does without holding on to a whole (possibly huge) frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// At most [`SNIPPET_LEN`] leading octets.
    bytes: Vec<u8>,
    /// Whether the payload was longer than `bytes`; changes the wording RabbitMQ uses.
    truncated: bool,
}

impl Snippet {
    pub(crate) fn of(payload: &[u8]) -> Self {
        let shown = payload.len().min(SNIPPET_LEN);
        Self {
            bytes: payload[..shown].to_vec(),
            truncated: payload.len() > SNIPPET_LEN,
        }
    }

    /// The quoted octets, for logs and tests.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Erlang binary syntax, because that is what RabbitMQ's `~p` prints.
    fn erlang_binary(&self) -> String {
        let items: Vec<String> = self.bytes.iter().map(u8::to_string).collect();
        let ellipsis = if self.truncated { ",..." } else { "" };
        format!("<<{}{}>>", items.join(","), ellipsis)
    }
}

impl fmt::Display for Snippet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = if self.truncated { "first 16" } else { "all" };
        write!(f, "{scope} octets = {}", self.erlang_binary())
    }
}

/// A fault in the incoming byte stream. All variants are hard errors: the broker
/// sends `connection.close` with [`FrameError::reply_code`],
/// [`FrameError::reply_text`] and [`FrameError::class_method`], then stops reading.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum FrameError {
    /// The frame header declares a payload larger than the negotiated `frame_max`
    /// allows. Reported as soon as the 7-byte header is read so a hostile peer cannot
    /// make the broker buffer a huge payload first.
    ///
    /// RabbitMQ: 501 FRAME_ERROR, `{frame_too_large, Size, FrameMax - 8}`
    /// (`rabbit_reader:handle_input(frame_header, ...)`). RabbitMQ tolerates up to 8
    /// octets over the limit (`FRAME_SIZE_FUDGE`); this crate does not (see
    /// [`crate::decode_frame`]).
    #[error("frame type {frame_type} on channel {channel} declares a {size}-octet payload, frame_max {frame_max} allows {}", .frame_max.saturating_sub(8))]
    TooLarge {
        /// The frame's type octet.
        frame_type: u8,
        /// The channel the frame was sent on.
        channel: u16,
        /// The payload size the frame header declares.
        size: u32,
        /// The connection's negotiated `frame_max`.
        frame_max: u32,
    },

    /// The octet after the payload is not 0xCE, so the length was wrong or the
    /// stream is corrupt.
    ///
    /// RabbitMQ: 501 FRAME_ERROR, `{invalid_frame_end_marker, Octet}`.
    #[error("frame type {frame_type} on channel {channel} ends with octet {found}, not 206")]
    BadFrameEnd {
        /// The frame's type octet.
        frame_type: u8,
        /// The channel the frame was sent on.
        channel: u16,
        /// The octet found where 0xCE belongs.
        found: u8,
        /// The start of the payload, quoted in the reply text.
        payload: Snippet,
    },

    /// A frame type other than method (1), header (2), body (3) or heartbeat (8).
    ///
    /// RabbitMQ: 501 FRAME_ERROR, `unknown_frame`
    /// (`rabbit_command_assembler:analyze_frame/2` returns `error`).
    #[error("unknown frame type {frame_type} on channel {channel}")]
    UnknownFrameType {
        /// The frame's type octet.
        frame_type: u8,
        /// The channel the frame was sent on.
        channel: u16,
        /// The start of the payload, quoted in the reply text.
        payload: Snippet,
    },

    /// A payload whose length is impossible for its type: a method frame under 4
    /// octets, a content header under 14, a heartbeat that is not empty.
    ///
    /// RabbitMQ: 501 FRAME_ERROR, `unknown_frame` (`analyze_frame/2` cannot match it).
    #[error(
        "frame type {frame_type} on channel {channel} has a payload length impossible for its type"
    )]
    BadPayloadLength {
        /// The frame's type octet.
        frame_type: u8,
        /// The channel the frame was sent on.
        channel: u16,
        /// The start of the payload, quoted in the reply text.
        payload: Snippet,
    },

    /// A method frame whose class/method id pair is not in AMQP 0-9-1 (with
    /// RabbitMQ's extensions).
    ///
    /// RabbitMQ sends no `connection.close` here: `lookup_method_name/1` exits with
    /// `{unknown_method_id, Id}`, the reader process crashes and the socket is
    /// dropped. We choose 540 NOT_IMPLEMENTED (the spec's code for functionality
    /// the server lacks) so the client learns why.
    #[error("unknown method {class_id}.{method_id} on channel {channel}")]
    UnknownMethod {
        /// The channel the frame was sent on.
        channel: u16,
        /// The class id of the method or content.
        class_id: u16,
        /// The method id within the class.
        method_id: u16,
    },

    /// basic.qos with a non-zero prefetch_size. amq-protocol drops the field, so the
    /// frame layer is the only place that sees it.
    ///
    /// RabbitMQ: `rabbit_misc:protocol_error(not_implemented, "prefetch_size!=0 (~w)")`,
    /// a connection close with 540.
    #[error("basic.qos prefetch_size {prefetch_size} on channel {channel}")]
    PrefetchSizeNotSupported {
        /// The channel the frame was sent on.
        channel: u16,
        /// The prefetch_size the client asked for.
        prefetch_size: u32,
    },

    /// A known method whose arguments do not decode: truncated, trailing octets, a
    /// malformed field table, a `shortstr` that is not UTF-8.
    ///
    /// RabbitMQ: 501 FRAME_ERROR, "cannot decode ~w" with the method's ids
    /// (`rabbit_misc:frame_error/2`, reached from the catch-all clause of
    /// `rabbit_framing_amqp_0_9_1:decode_method_fields/2`). Not 502 SYNTAX_ERROR.
    #[error("cannot decode arguments of method {class_id}.{method_id} on channel {channel}")]
    BadMethodArguments {
        /// The channel the frame was sent on.
        channel: u16,
        /// The class id of the method or content.
        class_id: u16,
        /// The method id within the class.
        method_id: u16,
        /// The start of the method's arguments, quoted in the reply text.
        args: Snippet,
    },

    /// A content header whose property list does not decode.
    ///
    /// RabbitMQ decodes properties lazily and crashes the channel on a bad list
    /// (541 INTERNAL_ERROR, by accident rather than design). We treat it like an
    /// undecodable method: 501 FRAME_ERROR.
    #[error("cannot decode content header properties for class {class_id} on channel {channel}")]
    BadContentHeader {
        /// The channel the frame was sent on.
        channel: u16,
        /// The class id of the method or content.
        class_id: u16,
        /// The start of the property list, quoted in the reply text.
        properties: Snippet,
    },

    /// A content header whose weight field is not 0, which the spec requires.
    ///
    /// RabbitMQ: 505 UNEXPECTED_FRAME (`rabbit_command_assembler:process/2` only
    /// matches weight 0, so the header counts as "non content header frame").
    #[error("content header for class {class_id} on channel {channel} has weight {weight}, not 0")]
    NonZeroWeight {
        /// The channel the frame was sent on.
        channel: u16,
        /// The class id of the method or content.
        class_id: u16,
        /// The weight field as sent.
        weight: u16,
    },

    /// Field tables or arrays nested deeper than [`MAX_TABLE_DEPTH`]. amq-protocol
    /// decodes them recursively, so without this limit a frame of a few hundred KiB
    /// could overflow the stack and abort the whole broker.
    ///
    /// RabbitMQ has no such limit (Erlang stacks grow); we answer 501 FRAME_ERROR,
    /// as for any other undecodable frame.
    #[error(
        "field tables nested deeper than {MAX_TABLE_DEPTH} in frame type {frame_type} on channel {channel}"
    )]
    TooDeeplyNested {
        /// The channel the frame was sent on.
        channel: u16,
        /// The frame's type octet.
        frame_type: u8,
        /// The class id of the method or content.
        class_id: u16,
        /// The method id within the class.
        method_id: u16,
    },
}

impl FrameError {
    /// The channel the offending frame was sent on. The close still goes out on
    /// channel 0 (all these errors are hard errors) but logs want the channel.
    pub fn channel(&self) -> u16 {
        match *self {
            Self::TooLarge { channel, .. }
            | Self::BadFrameEnd { channel, .. }
            | Self::UnknownFrameType { channel, .. }
            | Self::BadPayloadLength { channel, .. }
            | Self::UnknownMethod { channel, .. }
            | Self::BadMethodArguments { channel, .. }
            | Self::BadContentHeader { channel, .. }
            | Self::NonZeroWeight { channel, .. }
            | Self::TooDeeplyNested { channel, .. }
            | Self::PrefetchSizeNotSupported { channel, .. } => channel,
        }
    }

    /// The AMQP reply code for `connection.close`; see each variant for the
    /// RabbitMQ source it follows.
    pub fn reply_code(&self) -> u16 {
        match self {
            Self::TooLarge { .. }
            | Self::BadFrameEnd { .. }
            | Self::UnknownFrameType { .. }
            | Self::BadPayloadLength { .. }
            | Self::BadMethodArguments { .. }
            | Self::BadContentHeader { .. }
            | Self::TooDeeplyNested { .. } => FRAME_ERROR,
            Self::NonZeroWeight { .. } => UNEXPECTED_FRAME,
            Self::UnknownMethod { .. } | Self::PrefetchSizeNotSupported { .. } => NOT_IMPLEMENTED,
        }
    }

    /// RabbitMQ-style reply text: the reply-code name, " - ", then the explanation,
    /// at most 255 octets so it always fits the `shortstr` of `connection.close`.
    pub fn reply_text(&self) -> String {
        let text = match self {
            Self::TooLarge {
                frame_type,
                size,
                frame_max,
                ..
            } => format!(
                "FRAME_ERROR - type {frame_type}, all octets = <<>>: {{frame_too_large,{size},{}}}",
                frame_max.saturating_sub(8)
            ),
            Self::BadFrameEnd {
                frame_type,
                found,
                payload,
                ..
            } => format!(
                "FRAME_ERROR - type {frame_type}, {payload}: {{invalid_frame_end_marker,{found}}}"
            ),
            Self::UnknownFrameType {
                frame_type,
                payload,
                ..
            }
            | Self::BadPayloadLength {
                frame_type,
                payload,
                ..
            } => {
                format!("FRAME_ERROR - type {frame_type}, {payload}: unknown_frame")
            }
            Self::UnknownMethod {
                class_id,
                method_id,
                ..
            } => {
                format!("NOT_IMPLEMENTED - unknown method class {class_id} method {method_id}")
            }
            Self::PrefetchSizeNotSupported { prefetch_size, .. } => {
                format!("NOT_IMPLEMENTED - prefetch_size!=0 ({prefetch_size})")
            }
            Self::BadMethodArguments { args, .. } => {
                format!("FRAME_ERROR - cannot decode {}", args.erlang_binary())
            }
            Self::BadContentHeader { properties, .. } => format!(
                "FRAME_ERROR - cannot decode content header properties {}",
                properties.erlang_binary()
            ),
            Self::NonZeroWeight {
                class_id, weight, ..
            } => format!(
                "UNEXPECTED_FRAME - content header for class {class_id} has weight {weight}, expected 0"
            ),
            Self::TooDeeplyNested { .. } => format!(
                "FRAME_ERROR - cannot decode: field tables nested deeper than {MAX_TABLE_DEPTH}"
            ),
        };
        truncate_to_shortstr(text)
    }

    /// Class and method id for `connection.close`: the failing method when the
    /// frame named one, else (0, 0) as RabbitMQ sends for frame-level faults.
    /// Header-frame faults give (0, 0) because the frame layer does not know the
    /// method the content belongs to; the broker may substitute it.
    pub fn class_method(&self) -> (u16, u16) {
        match *self {
            Self::UnknownMethod {
                class_id,
                method_id,
                ..
            }
            | Self::BadMethodArguments {
                class_id,
                method_id,
                ..
            } => (class_id, method_id),
            Self::TooDeeplyNested {
                frame_type,
                class_id,
                method_id,
                ..
            } if frame_type == crate::frame::FRAME_METHOD => (class_id, method_id),
            Self::PrefetchSizeNotSupported { .. } => (60, 10),
            _ => (0, 0),
        }
    }
}

fn truncate_to_shortstr(mut text: String) -> String {
    if text.len() > REPLY_TEXT_MAX {
        let mut cut = REPLY_TEXT_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_quotes_short_payloads_whole_and_long_ones_by_prefix() {
        assert_eq!(
            Snippet::of(&[1, 2, 3]).to_string(),
            "all octets = <<1,2,3>>"
        );
        assert_eq!(Snippet::of(&[]).to_string(), "all octets = <<>>");
        let long: Vec<u8> = (0..40).collect();
        let s = Snippet::of(&long);
        assert_eq!(s.bytes().len(), SNIPPET_LEN);
        assert!(
            s.to_string().starts_with("first 16 octets = <<0,1,2,"),
            "{s}"
        );
    }

    #[test]
    fn too_large_text_matches_rabbitmq_shape() {
        let e = FrameError::TooLarge {
            frame_type: 1,
            channel: 0,
            size: 300_000,
            frame_max: 131_072,
        };
        assert_eq!(e.reply_code(), 501);
        assert_eq!(
            e.reply_text(),
            "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,300000,131064}"
        );
        assert_eq!(e.class_method(), (0, 0));
    }

    #[test]
    fn reply_text_never_exceeds_a_shortstr() {
        let e = FrameError::TooLarge {
            frame_type: u8::MAX,
            channel: u16::MAX,
            size: u32::MAX,
            frame_max: u32::MAX,
        };
        assert!(e.reply_text().len() <= REPLY_TEXT_MAX);
        let long = truncate_to_shortstr("é".repeat(300));
        assert!(long.len() <= REPLY_TEXT_MAX && long.len() >= REPLY_TEXT_MAX - 1);
    }

    #[test]
    fn method_faults_name_the_method() {
        let e = FrameError::BadMethodArguments {
            channel: 3,
            class_id: 50,
            method_id: 10,
            args: Snippet::of(&[0, 0, 9]),
        };
        assert_eq!(
            (e.reply_code(), e.class_method(), e.channel()),
            (501, (50, 10), 3)
        );
        assert_eq!(e.reply_text(), "FRAME_ERROR - cannot decode <<0,0,9>>");
        let e = FrameError::UnknownMethod {
            channel: 1,
            class_id: 70,
            method_id: 10,
        };
        assert_eq!((e.reply_code(), e.class_method()), (540, (70, 10)));
        assert!(e.reply_text().starts_with("NOT_IMPLEMENTED - "));
    }
}
