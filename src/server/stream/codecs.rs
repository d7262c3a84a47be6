//! The compression codecs of the stream protocol's sub-entry batches: a
//! client may pack many records into one published entry and compress them
//! (the protocol's compression codes: 0 none, 1 gzip, 2 snappy, 3 lz4,
//! 4 zstd). RabbitMQ stores such a batch as it came and leaves the
//! uncompressing to the consumers; StableMQ stores each record as an entry
//! of its own (one offset each, as Osiris counts them), so it uncompresses
//! the batch first, with the codec the client named.
//!
//! The formats are the ones the RabbitMQ clients write: gzip (every client
//! that compresses), and for the others the standard framed formats the Java
//! client's codecs write (xerial's `SnappyFramedOutputStream`, lz4-java's
//! `LZ4FrameOutputStream`, zstd-jni's `ZstdOutputStream`, or commons-compress's
//! framed streams, which write the same), as the Go client's do: the Snappy
//! framing format (`sNaPpY` stream identifier, checksummed chunks), the LZ4
//! frame format (magic `0x184D2204`), and zstd frames. Each decoder is a
//! library made for it, in pure Rust: flate2 (rust backend), snap, lz4_flex
//! and ruzstd.
//!
//! What this is not: a compressor (the broker never compresses), nor a
//! check of a codec's optional content checksums beyond what its library
//! checks.

use bytes::Bytes;
use std::io::Read;

/// A sub-batch this large once uncompressed is refused: the records are
/// kept in memory while they are published.
pub(super) const MAX_UNCOMPRESSED: u32 = 64 << 20;

/// Why a sub-batch's body could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum CodecError {
    /// A compression code the protocol does not define (5..=7).
    #[error("unknown compression code {0}")]
    UnknownCodec(u8),
    /// The declared uncompressed size is over [`MAX_UNCOMPRESSED`].
    #[error("uncompressed size {0} over the limit")]
    TooLarge(u32),
    /// The body is not data of its codec.
    #[error("the body is not {0} data")]
    Corrupt(&'static str),
    /// The body uncompressed to another size than the batch declared.
    #[error("the body uncompressed to {got} bytes, the batch says {declared}")]
    WrongLength { got: usize, declared: u32 },
}

/// The name of compression code `code`, as the clients call it.
pub(super) fn codec_name(code: u8) -> Option<&'static str> {
    Some(match code {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => return None,
    })
}

/// `body` uncompressed with codec `code`; it must come to exactly
/// `length` bytes, the size the batch declared.
pub(super) fn uncompress(code: u8, body: Bytes, length: u32) -> Result<Bytes, CodecError> {
    let name = codec_name(code).ok_or(CodecError::UnknownCodec(code))?;
    if code == 0 {
        // Taken as it is, as Osiris takes it: the records' own sizes say
        // where each ends.
        return Ok(body);
    }
    if length > MAX_UNCOMPRESSED {
        return Err(CodecError::TooLarge(length));
    }
    let mut out = Vec::with_capacity(length as usize);
    // One byte past the declared length, to see a body that says less,
    // and never more than that (a small body may expand a long way).
    let limit = u64::from(length) + 1;
    let read = match code {
        1 => flate2::read::GzDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out),
        2 => snap::read::FrameDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out),
        3 => lz4_flex::frame::FrameDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out),
        _ => read_zstd(&body, limit, &mut out),
    };
    read.map_err(|_| CodecError::Corrupt(name))?;
    check_length(Bytes::from(out), length)
}

fn check_length(body: Bytes, length: u32) -> Result<Bytes, CodecError> {
    if body.len() == length as usize {
        Ok(body)
    } else {
        Err(CodecError::WrongLength {
            got: body.len(),
            declared: length,
        })
    }
}

/// Every zstd frame of `body` (a stream writer that flushed wrote more than
/// one), at most `limit` bytes of them.
fn read_zstd(body: &[u8], limit: u64, out: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut input = body;
    let mut total = 0;
    while !input.is_empty() && (total as u64) < limit {
        let decoder = ruzstd::decoding::StreamingDecoder::new(&mut input)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        total += decoder.take(limit - total as u64).read_to_end(out)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Two records as a sub-batch's body: each a 32-bit size and its bytes.
    fn plain() -> Vec<u8> {
        let mut plain = Vec::new();
        for r in [&b"a"[..], &[7u8; 3000][..]] {
            plain.extend_from_slice(&(r.len() as u32).to_be_bytes());
            plain.extend_from_slice(r);
        }
        plain
    }

    fn compressed(code: u8, data: &[u8]) -> Vec<u8> {
        match code {
            1 => {
                let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                w.write_all(data).expect("into memory");
                w.finish().expect("into memory")
            }
            2 => {
                let mut w = snap::write::FrameEncoder::new(Vec::new());
                w.write_all(data).expect("into memory");
                w.into_inner().expect("into memory")
            }
            3 => {
                let mut w = lz4_flex::frame::FrameEncoder::new(Vec::new());
                w.write_all(data).expect("into memory");
                w.finish().expect("into memory")
            }
            4 => {
                ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
            }
            _ => data.to_vec(),
        }
    }

    #[test]
    fn every_codec_uncompresses_to_the_declared_records() {
        let plain = plain();
        let len = plain.len() as u32;
        for code in 0..=4u8 {
            let body = Bytes::from(compressed(code, &plain));
            assert_eq!(
                uncompress(code, body, len),
                Ok(Bytes::from(plain.clone())),
                "codec {code}"
            );
        }
    }

    #[test]
    fn two_zstd_frames_are_one_body() {
        let plain = plain();
        let (a, b) = plain.split_at(10);
        let mut body = compressed(4, a);
        body.extend(compressed(4, b));
        assert_eq!(
            uncompress(4, Bytes::from(body), plain.len() as u32),
            Ok(Bytes::from(plain))
        );
    }

    #[test]
    fn a_wrong_length_garbage_or_an_unknown_code_is_refused() {
        let plain = plain();
        let len = plain.len() as u32;
        for code in 1..=4u8 {
            let body = Bytes::from(compressed(code, &plain));
            for declared in [len - 1, len + 1] {
                assert!(
                    matches!(
                        uncompress(code, body.clone(), declared),
                        Err(CodecError::WrongLength { .. })
                    ),
                    "codec {code}, declared {declared}"
                );
            }
        }
        for code in 1..=4u8 {
            let garbage = Bytes::from_static(b"\x00\x01 not compressed data at all \xff\xfe");
            assert!(
                matches!(uncompress(code, garbage, 10), Err(CodecError::Corrupt(_))),
                "codec {code}"
            );
        }
        assert_eq!(
            uncompress(5, Bytes::new(), 0),
            Err(CodecError::UnknownCodec(5))
        );
        assert_eq!(
            uncompress(4, Bytes::new(), MAX_UNCOMPRESSED + 1),
            Err(CodecError::TooLarge(MAX_UNCOMPRESSED + 1))
        );
    }

    #[test]
    fn a_small_body_that_expands_past_its_declared_size_stops_there() {
        // 16 MiB of zeros compress to a few KiB; declared as 1 KiB, the
        // decoder reads 1 KiB + 1 and gives up, not 16 MiB.
        let zeros = vec![0u8; 16 << 20];
        for code in 1..=4u8 {
            let body = Bytes::from(compressed(code, &zeros));
            assert!(body.len() < 1 << 20, "codec {code}: {} bytes", body.len());
            assert_eq!(
                uncompress(code, body, 1024),
                Err(CodecError::WrongLength {
                    got: 1025,
                    declared: 1024
                }),
                "codec {code}"
            );
        }
    }
}
