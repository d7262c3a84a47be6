//! Stream protocol frames: splitting a byte stream into frames, and the frame
//! header every command starts with.
//!
//! A frame is a `uint32` size (not counting itself) and that many bytes: a
//! `uint16` key (high bit set in responses), a `uint16` version, and the
//! command's fields. [`split_frame`] checks the size against frame_max before
//! waiting for the rest, so an oversized frame is refused from its first four
//! bytes; partial input is "need more", never an error.

use bytes::{Buf, Bytes, BytesMut};

use super::command::{Command, RESPONSE_FLAG};
use super::error::StreamFrameError;
use super::wire::{PResult, WireError};

/// RabbitMQ's default frame_max for the stream protocol (1 MiB), which its Tune offers.
pub const DEFAULT_FRAME_MAX: u32 = 1_048_576;

/// The frame_max RabbitMQ (4.x) enforces before open completes, whatever tune says.
pub const INITIAL_FRAME_MAX: u32 = 8192;

/// Splits the first whole frame off `buf` and returns it without its size
/// field (key, version, fields). `Ok(None)`: `buf` holds no whole frame yet.
///
/// `frame_max` bounds the size field (0: no limit), as RabbitMQ compares it:
/// a frame of `frame_max` bytes after the size field is allowed.
pub fn split_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Bytes>, StreamFrameError> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let size = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if frame_max != 0 && size > frame_max {
        return Err(StreamFrameError::FrameTooLarge {
            size,
            max: frame_max,
        });
    }
    if size < 4 {
        return Err(StreamFrameError::TooShort { size });
    }
    let total = 4 + size as usize;
    if buf.len() < total {
        // The caller's reads fill the buffer; reserving `total` here would let
        // a peer make us allocate up to frame_max (4 GiB with no limit) up front.
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size as usize).freeze()))
}

/// A frame's key and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The key as received, response bit included.
    pub key: u16,
    /// The command version.
    pub version: u16,
}

impl FrameHeader {
    /// Reads the header of a frame (as [`split_frame`] returns it).
    pub fn read(frame: &[u8]) -> Result<FrameHeader, StreamFrameError> {
        match frame {
            [k0, k1, v0, v1, ..] => Ok(FrameHeader {
                key: u16::from_be_bytes([*k0, *k1]),
                version: u16::from_be_bytes([*v0, *v1]),
            }),
            _ => Err(StreamFrameError::TooShort {
                size: frame.len() as u32,
            }),
        }
    }

    /// Whether the key has the response bit.
    pub fn is_response(&self) -> bool {
        self.key & RESPONSE_FLAG != 0
    }

    /// The command the key names, the version checked against what this codec speaks.
    pub fn command(&self) -> Result<Command, StreamFrameError> {
        let command =
            Command::from_key(self.key).ok_or(StreamFrameError::UnknownKey { key: self.key })?;
        let (min, max) = command.versions();
        if self.version < min || self.version > max {
            return Err(StreamFrameError::UnsupportedVersion {
                command,
                version: self.version,
            });
        }
        Ok(command)
    }
}

/// Turns a parser's result over a whole frame body into the value or a typed
/// fault: the body must be consumed exactly.
pub(crate) fn finish<T>(command: Command, result: PResult<'_, T>) -> Result<T, StreamFrameError> {
    match result {
        Ok(([], value)) => Ok(value),
        Ok((rest, _)) => Err(StreamFrameError::TrailingBytes {
            command,
            extra: rest.len(),
        }),
        Err(nom::Err::Error(e) | nom::Err::Failure(e)) => Err(match e {
            WireError::Truncated => StreamFrameError::Truncated { command },
            WireError::Malformed(reason) => StreamFrameError::Malformed { command, reason },
        }),
        Err(nom::Err::Incomplete(_)) => Err(StreamFrameError::Truncated { command }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_waits_for_a_whole_frame_and_checks_the_size_first() {
        let mut buf = BytesMut::from(&[0u8, 0, 0][..]);
        assert_eq!(split_frame(&mut buf, 100), Ok(None));
        buf.extend_from_slice(&[6, 0, 0x17, 0, 1]);
        assert_eq!(split_frame(&mut buf, 100), Ok(None));
        buf.extend_from_slice(&[0xaa, 0, 0, 0, 0, 4, 0, 0x17, 0, 1]);
        let frame = split_frame(&mut buf, 100).unwrap().unwrap();
        assert_eq!(&frame[..], &[0, 0x17, 0, 1, 0xaa, 0]);
        assert_eq!(split_frame(&mut buf, 100).unwrap().unwrap().len(), 4);
        assert!(buf.is_empty());

        // The limit is judged from the size field alone, before the body arrives.
        let mut big = BytesMut::from(&[0u8, 0, 0, 101][..]);
        assert_eq!(
            split_frame(&mut big, 100),
            Err(StreamFrameError::FrameTooLarge {
                size: 101,
                max: 100
            })
        );
        // A frame of exactly frame_max bytes is allowed; 0 means no limit.
        let mut exact = BytesMut::from(&[0u8, 0, 0, 100][..]);
        exact.extend_from_slice(&[0; 100]);
        assert!(split_frame(&mut exact.clone(), 100).unwrap().is_some());
        assert!(split_frame(&mut exact, 0).unwrap().is_some());
        let mut tiny = BytesMut::from(&[0u8, 0, 0, 2, 0, 0x17][..]);
        assert_eq!(
            split_frame(&mut tiny, 0),
            Err(StreamFrameError::TooShort { size: 2 })
        );
    }

    #[test]
    fn header_names_the_command_and_checks_the_version() {
        let h = FrameHeader::read(&[0x80, 0x07, 0, 1]).unwrap();
        assert!(h.is_response());
        assert_eq!(h.command(), Ok(Command::Subscribe));
        let v2 = FrameHeader::read(&[0, 0x02, 0, 2]).unwrap();
        assert_eq!(v2.command(), Ok(Command::Publish));
        let v3 = FrameHeader::read(&[0, 0x02, 0, 3]).unwrap();
        assert_eq!(
            v3.command(),
            Err(StreamFrameError::UnsupportedVersion {
                command: Command::Publish,
                version: 3
            })
        );
        let unknown = FrameHeader::read(&[0, 0x63, 0, 1]).unwrap();
        assert_eq!(
            unknown.command(),
            Err(StreamFrameError::UnknownKey { key: 0x63 })
        );
        assert!(FrameHeader::read(&[0, 1, 0]).is_err());
    }
}
