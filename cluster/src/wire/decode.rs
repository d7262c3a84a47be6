//! Reading frames: split a whole frame off the read buffer, then decode it
//! with a [`Reader`] that checks every length against the bytes present
//! before allocating, and slices payloads out of the frame without copying.

use bytes::{Buf, Bytes, BytesMut};

use super::*;
use crate::position::{Entry, LogPosition};
use crate::replication::{Append, RejectReason, SnapshotChunk};

/// [`decode_copies`] for a reader that wants one envelope per frame: of a
/// frame for both services, only the store's copy.
pub fn decode(buf: &mut BytesMut, max_frame: usize) -> Result<Option<Envelope>, WireError> {
    Ok(decode_copies(buf, max_frame)?.map(|(env, _)| env))
}

/// Take one whole frame off the front of `buf` and decode it: its envelope,
/// and for a frame to both services of a node ([`encode_for_both`]) the
/// broker's copy too (the first is then the store's). `Ok(None)` means "not
/// all of it has arrived yet" (nothing is consumed); read more and call again.
///
/// The frame is split off and frozen, so its payloads are slices of the read
/// buffer: decoding copies no payload byte, and the second copy shares them.
pub fn decode_copies(
    buf: &mut BytesMut,
    max_frame: usize,
) -> Result<Option<(Envelope, Option<Envelope>)>, WireError> {
    let Some(prefix) = buf.get(..LEN_BYTES) else {
        return Ok(None);
    };
    let mut len_bytes = [0u8; LEN_BYTES];
    len_bytes.copy_from_slice(prefix);
    let len = usize::try_from(u32::from_be_bytes(len_bytes)).unwrap_or(usize::MAX);
    if len > max_frame {
        return Err(WireError::FrameTooLarge {
            len,
            max: max_frame,
        });
    }
    if buf.len() - LEN_BYTES < len {
        // Make room for the rest now, so the socket reads straight into place.
        buf.reserve(len + LEN_BYTES - buf.len());
        return Ok(None);
    }
    buf.advance(LEN_BYTES);
    let frame = buf.split_to(len).freeze();
    decode_frame_copies(frame).map(Some)
}

/// Decode one frame without its length prefix (version byte first); of a
/// frame for both services, the store's copy.
pub fn decode_frame(frame: Bytes) -> Result<Envelope, WireError> {
    Ok(decode_frame_copies(frame)?.0)
}

fn decode_frame_copies(frame: Bytes) -> Result<(Envelope, Option<Envelope>), WireError> {
    let mut r = Reader(frame);
    let version = r.u8("version")?;
    if version != WIRE_VERSION {
        return Err(WireError::Version { got: version });
    }
    let from = r.endpoint()?;
    let node = r.u64("endpoint")?;
    let (service, both) = match r.u8("endpoint")? {
        SERVICE_BOTH => (Service::Store, true),
        tag => (service_of(tag)?, false),
    };
    let to = Endpoint { node, service };
    let msg = r.message()?;
    if r.0.has_remaining() {
        return Err(WireError::TrailingBytes(r.0.remaining()));
    }
    let broker = both.then(|| Envelope {
        from,
        to: Endpoint::broker(node),
        msg: msg.clone(),
    });
    Ok((Envelope { from, to, msg }, broker))
}

/// Checked reads over a frame. `Buf`'s own getters panic on short input, so
/// every read checks what remains first.
struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize, what: &'static str) -> Result<(), WireError> {
        if self.0.remaining() < n {
            return Err(WireError::Truncated(what));
        }
        Ok(())
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        self.need(1, what)?;
        Ok(self.0.get_u8())
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        self.need(4, what)?;
        Ok(self.0.get_u32())
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        self.need(8, what)?;
        Ok(self.0.get_u64())
    }

    fn pos(&mut self, what: &'static str) -> Result<LogPosition, WireError> {
        Ok(LogPosition::new(self.u64(what)?, self.u64(what)?))
    }

    fn endpoint(&mut self) -> Result<Endpoint, WireError> {
        let node = self.u64("endpoint")?;
        let service = service_of(self.u8("endpoint")?)?;
        Ok(Endpoint { node, service })
    }

    fn entries(&mut self) -> Result<Vec<Entry>, WireError> {
        let count = usize::try_from(self.u32("entry count")?).unwrap_or(usize::MAX);
        // A lying count must not allocate: each entry takes at least this much.
        if count > self.0.remaining() / ENTRY_MIN_BYTES {
            return Err(WireError::Truncated("entries"));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let pos = self.pos("entry position")?;
            let len = usize::try_from(self.u32("payload length")?).unwrap_or(usize::MAX);
            self.need(len, "payload")?;
            // A slice of the frame: no copy.
            let payload = self.0.split_to(len);
            entries.push(Entry { pos, payload });
        }
        Ok(entries)
    }

    fn bytes(&mut self, what: &'static str) -> Result<Bytes, WireError> {
        let len = usize::try_from(self.u32(what)?).unwrap_or(usize::MAX);
        self.need(len, what)?;
        Ok(self.0.split_to(len))
    }

    fn opt_bytes(&mut self, what: &'static str) -> Result<Option<Bytes>, WireError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(self.bytes(what)?)),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    fn pairs(&mut self) -> Result<Vec<(Bytes, Bytes)>, WireError> {
        let count = usize::try_from(self.u32("pair count")?).unwrap_or(usize::MAX);
        if count > self.0.remaining() / PAIR_MIN_BYTES {
            return Err(WireError::Truncated("pairs"));
        }
        let mut pairs = Vec::with_capacity(count);
        for _ in 0..count {
            let key = self.bytes("key")?;
            let value = self.bytes("value")?;
            pairs.push((key, value));
        }
        Ok(pairs)
    }

    /// A flag: u8 0 (false) or 1 (true).
    fn flag(&mut self, what: &'static str) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(WireError::UnknownTag { what, tag }),
        }
    }

    /// An AppendReject's reason: its tag, then a mismatch's fields.
    fn reject_reason(&mut self) -> Result<RejectReason, WireError> {
        match self.u8("reason tag")? {
            REASON_FENCED => Ok(RejectReason::Fenced),
            REASON_MISMATCH => Ok(RejectReason::Mismatch {
                prev: self.pos("prev")?,
                hint: self.u64("hint")?,
                incarnation: self.u64("incarnation")?,
            }),
            tag => Err(WireError::UnknownTag {
                what: "reason",
                tag,
            }),
        }
    }

    /// One message: its tag, then its fields in wire order.
    fn message(&mut self) -> Result<Message, WireError> {
        let msg = match self.u8("message tag")? {
            TAG_APPEND => Message::Append(Append {
                epoch: self.u64("epoch")?,
                prev: self.pos("prev")?,
                stable: self.u64("stable")?,
                floor: self.u64("floor")?,
                entries: self.entries()?,
            }),
            TAG_APPEND_ACK => Message::AppendAck {
                epoch: self.u64("epoch")?,
                incarnation: self.u64("incarnation")?,
                last: self.pos("last")?,
            },
            TAG_JOIN_PROBE => Message::JoinProbe {
                incarnation: self.u64("incarnation")?,
            },
            TAG_JOIN_INFO => Message::JoinInfo {
                promised: self.u64("promised")?,
                last: self.pos("last")?,
                stable: self.u64("stable")?,
            },
            TAG_APPEND_REJECT => Message::AppendReject {
                epoch: self.u64("epoch")?,
                reason: self.reject_reason()?,
            },
            TAG_FENCE => Message::Fence {
                epoch: self.u64("epoch")?,
                nonce: self.u64("nonce")?,
            },
            TAG_PROMISE => Message::Promise {
                epoch: self.u64("epoch")?,
                last: self.pos("last")?,
                stable: self.u64("stable")?,
            },
            TAG_FENCE_REFUSED => Message::FenceRefused {
                promised: self.u64("promised")?,
            },
            TAG_FETCH => Message::Fetch {
                epoch: self.u64("epoch")?,
                from: self.u64("from")?,
                to: self.u64("to")?,
            },
            TAG_ENTRIES => Message::Entries {
                epoch: self.u64("epoch")?,
                entries: self.entries()?,
            },
            TAG_CATCH_UP => Message::CatchUp {
                epoch: self.u64("epoch")?,
                from: self.u64("from")?,
                to: self.u64("to")?,
            },
            TAG_STABLE_ENTRIES => Message::StableEntries {
                epoch: self.u64("epoch")?,
                entries: self.entries()?,
            },
            TAG_SNAPSHOT_CHUNK => Message::SnapshotChunk(SnapshotChunk {
                base: self.pos("base")?,
                after: self.opt_bytes("after")?,
                done: self.flag("done")?,
                pairs: self.pairs()?,
            }),
            TAG_SNAPSHOT_REQUEST => Message::SnapshotRequest {
                base: self.pos("base")?,
                after: self.opt_bytes("after")?,
            },
            TAG_PRE_VOTE => Message::PreVote {
                epoch: self.u64("epoch")?,
            },
            TAG_PRE_VOTE_REPLY => Message::PreVoteReply {
                epoch: self.u64("epoch")?,
                granted: self.flag("granted")?,
                promised: self.u64("promised")?,
            },
            tag => {
                return Err(WireError::UnknownTag {
                    what: "message",
                    tag,
                });
            }
        };
        Ok(msg)
    }
}
