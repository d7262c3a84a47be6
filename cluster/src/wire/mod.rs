//! Node-to-node wire encoding: length-prefixed binary frames of
//! [`replication::Message`](crate::replication::Message)s.
//!
//! A frame is
//!
//! ```text
//! u32 len (big-endian, bytes after itself) | u8 WIRE_VERSION | from | to | u8 tag | fields
//! ```
//!
//! `from` and `to` are endpoints (`u64` node, `u8` service). Both travel in every
//! frame so a co-located node can route a frame to its store or its broker. A
//! `to` service of "both" ([`encode_for_both`]) carries one message for the
//! node's store and its broker at once: the master sends each Append to every
//! store and every slave, and in the co-located layout a node is both, so
//! without it every entry crossed each connection twice (see
//! [`decode_copies`]). Integers are big-endian and fixed width:
//! the bulk of a frame is payload bytes, so varints would save little and cost a
//! branch per field. An entry is `u64 epoch | u64 index | u32 len | payload`.
//!
//! Hand-written rather than derived (postcard/serde) for two reasons: decoding
//! slices every payload out of the frame's [`Bytes`] without copying it (the
//! socket read is the only copy), and the format is pinned here, byte for byte,
//! instead of following a serializer's defaults across upgrades.
//!
//! Decoding never panics and never trusts a length: every count is checked
//! against the bytes actually present before anything is allocated, the frame
//! size is capped ([`MAX_FRAME_DEFAULT`]), and trailing bytes are an error, so a
//! frame decodes exactly one way.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::position::{Entry, LogPosition};
use crate::replication::{Endpoint, Message, RejectReason, Service, WIRE_VERSION};

/// Default cap on one frame (after the length prefix). An Append carries at most
/// `batch_entries_max` entries, so this bounds the payload size the cluster can
/// replicate per batch; a reader refuses anything larger rather than allocate it.
pub const MAX_FRAME_DEFAULT: usize = 64 * 1024 * 1024;

/// Bytes of the length prefix.
const LEN_BYTES: usize = 4;
/// Smallest encoded entry: epoch, index and payload length.
const ENTRY_MIN_BYTES: usize = 8 + 8 + 4;

const TAG_APPEND: u8 = 1;
const TAG_APPEND_ACK: u8 = 2;
const TAG_APPEND_REJECT: u8 = 3;
const TAG_FENCE: u8 = 4;
const TAG_PROMISE: u8 = 5;
const TAG_FENCE_REFUSED: u8 = 6;
const TAG_FETCH: u8 = 7;
const TAG_ENTRIES: u8 = 8;
const TAG_CATCH_UP: u8 = 9;
const TAG_STABLE_ENTRIES: u8 = 10;
const TAG_SNAPSHOT_CHUNK: u8 = 11;
const TAG_SNAPSHOT_REQUEST: u8 = 12;
const TAG_PRE_VOTE: u8 = 13;
const TAG_PRE_VOTE_REPLY: u8 = 14;
const TAG_JOIN_PROBE: u8 = 15;
const TAG_JOIN_INFO: u8 = 16;
/// Smallest encoding of one state pair: two empty byte strings.
const PAIR_MIN_BYTES: usize = 4 + 4;

const REASON_FENCED: u8 = 0;
const REASON_MISMATCH: u8 = 1;

const SERVICE_STORE: u8 = 0;
const SERVICE_BROKER: u8 = 1;
/// A `to` service only: the same message for the node's store and broker.
const SERVICE_BOTH: u8 = 2;

/// One message with its addresses: the unit the transport moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The sender.
    pub from: Endpoint,
    /// The receiver (a node checks that `to.node` is itself).
    pub to: Endpoint,
    /// The message.
    pub msg: Message,
}

/// Why a frame could not be encoded or decoded. Every variant means "drop the
/// connection": after a bad frame the byte stream cannot be trusted to be in
/// sync any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame is larger than the cap (on decode: as announced by its prefix).
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The peer speaks another version of this encoding.
    #[error("wire version {got}, expected {WIRE_VERSION}")]
    Version {
        /// The version byte received.
        got: u8,
    },
    /// The frame ended inside a field (its length prefix lied, or a count did).
    #[error("frame truncated while reading {0}")]
    Truncated(&'static str),
    /// A tag byte names nothing.
    #[error("unknown {what} tag {tag}")]
    UnknownTag {
        /// Which tag (message, reason, service).
        what: &'static str,
        /// Its value.
        tag: u8,
    },
    /// Bytes remained after the message: the frame does not decode one way.
    #[error("{0} bytes after the end of the message")]
    TrailingBytes(usize),
    /// A payload longer than a `u32` can say (only on encode).
    #[error("payload of {0} bytes cannot be encoded")]
    PayloadTooLarge(usize),
}

/// Append one frame for `env` to `out`. On error `out` is left as it was.
pub fn encode(env: &Envelope, out: &mut BytesMut, max_frame: usize) -> Result<(), WireError> {
    encode_to(env, service_tag(env.to.service), out, max_frame)
}

/// Append one frame carrying `env.msg` to both services of node `env.to.node`
/// (its store and its broker): [`decode_copies`] gives it back as two
/// envelopes, one per service. On error `out` is left as it was.
pub fn encode_for_both(
    env: &Envelope,
    out: &mut BytesMut,
    max_frame: usize,
) -> Result<(), WireError> {
    encode_to(env, SERVICE_BOTH, out, max_frame)
}

fn encode_to(
    env: &Envelope,
    to_service: u8,
    out: &mut BytesMut,
    max_frame: usize,
) -> Result<(), WireError> {
    let start = out.len();
    out.put_u32(0); // patched below, once the length is known
    out.put_u8(WIRE_VERSION);
    put_endpoint(out, env.from);
    out.put_u64(env.to.node);
    out.put_u8(to_service);
    if let Err(err) = put_message(out, &env.msg) {
        out.truncate(start);
        return Err(err);
    }
    let len = out.len() - start - LEN_BYTES;
    let len32 = match u32::try_from(len) {
        Ok(len32) if len <= max_frame => len32,
        _ => {
            out.truncate(start);
            return Err(WireError::FrameTooLarge {
                len,
                max: max_frame,
            });
        }
    };
    out[start..start + LEN_BYTES].copy_from_slice(&len32.to_be_bytes());
    Ok(())
}

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

fn service_tag(service: Service) -> u8 {
    match service {
        Service::Store => SERVICE_STORE,
        Service::Broker => SERVICE_BROKER,
    }
}

fn service_of(tag: u8) -> Result<Service, WireError> {
    match tag {
        SERVICE_STORE => Ok(Service::Store),
        SERVICE_BROKER => Ok(Service::Broker),
        tag => Err(WireError::UnknownTag {
            what: "service",
            tag,
        }),
    }
}

fn put_endpoint(out: &mut BytesMut, ep: Endpoint) {
    out.put_u64(ep.node);
    out.put_u8(service_tag(ep.service));
}

fn put_pos(out: &mut BytesMut, pos: LogPosition) {
    out.put_u64(pos.epoch);
    out.put_u64(pos.index);
}

fn put_entries(out: &mut BytesMut, entries: &[Entry]) -> Result<(), WireError> {
    let count = u32::try_from(entries.len()).map_err(|_| WireError::FrameTooLarge {
        len: entries.len(),
        max: u32::MAX as usize,
    })?;
    out.put_u32(count);
    for entry in entries {
        let len = u32::try_from(entry.payload.len())
            .map_err(|_| WireError::PayloadTooLarge(entry.payload.len()))?;
        put_pos(out, entry.pos);
        out.put_u32(len);
        out.put_slice(&entry.payload);
    }
    Ok(())
}

fn put_message(out: &mut BytesMut, msg: &Message) -> Result<(), WireError> {
    match msg {
        Message::Append {
            epoch,
            prev,
            entries,
            stable,
            floor,
        } => {
            out.put_u8(TAG_APPEND);
            out.put_u64(*epoch);
            put_pos(out, *prev);
            out.put_u64(*stable);
            out.put_u64(*floor);
            put_entries(out, entries)?;
        }
        Message::AppendAck {
            epoch,
            last,
            incarnation,
        } => {
            out.put_u8(TAG_APPEND_ACK);
            out.put_u64(*epoch);
            out.put_u64(*incarnation);
            put_pos(out, *last);
        }
        Message::AppendReject { epoch, reason } => {
            out.put_u8(TAG_APPEND_REJECT);
            out.put_u64(*epoch);
            match reason {
                RejectReason::Fenced => out.put_u8(REASON_FENCED),
                RejectReason::Mismatch {
                    prev,
                    hint,
                    incarnation,
                } => {
                    out.put_u8(REASON_MISMATCH);
                    put_pos(out, *prev);
                    out.put_u64(*hint);
                    out.put_u64(*incarnation);
                }
            }
        }
        Message::Fence { epoch, nonce } => {
            out.put_u8(TAG_FENCE);
            out.put_u64(*epoch);
            out.put_u64(*nonce);
        }
        Message::Promise {
            epoch,
            last,
            stable,
        } => {
            out.put_u8(TAG_PROMISE);
            out.put_u64(*epoch);
            put_pos(out, *last);
            out.put_u64(*stable);
        }
        Message::FenceRefused { promised } => {
            out.put_u8(TAG_FENCE_REFUSED);
            out.put_u64(*promised);
        }
        Message::Fetch { epoch, from, to } => {
            out.put_u8(TAG_FETCH);
            out.put_u64(*epoch);
            out.put_u64(*from);
            out.put_u64(*to);
        }
        Message::Entries { epoch, entries } => {
            out.put_u8(TAG_ENTRIES);
            out.put_u64(*epoch);
            put_entries(out, entries)?;
        }
        Message::CatchUp { epoch, from, to } => {
            out.put_u8(TAG_CATCH_UP);
            out.put_u64(*epoch);
            out.put_u64(*from);
            out.put_u64(*to);
        }
        Message::StableEntries { epoch, entries } => {
            out.put_u8(TAG_STABLE_ENTRIES);
            out.put_u64(*epoch);
            put_entries(out, entries)?;
        }
        Message::SnapshotChunk {
            base,
            after,
            pairs,
            done,
        } => {
            out.put_u8(TAG_SNAPSHOT_CHUNK);
            put_pos(out, *base);
            put_opt_bytes(out, after.as_ref())?;
            out.put_u8(u8::from(*done));
            let count =
                u32::try_from(pairs.len()).map_err(|_| WireError::PayloadTooLarge(pairs.len()))?;
            out.put_u32(count);
            for (key, value) in pairs {
                put_bytes(out, key)?;
                put_bytes(out, value)?;
            }
        }
        Message::SnapshotRequest { base, after } => {
            out.put_u8(TAG_SNAPSHOT_REQUEST);
            put_pos(out, *base);
            put_opt_bytes(out, after.as_ref())?;
        }
        Message::PreVote { epoch } => {
            out.put_u8(TAG_PRE_VOTE);
            out.put_u64(*epoch);
        }
        Message::PreVoteReply {
            epoch,
            granted,
            promised,
        } => {
            out.put_u8(TAG_PRE_VOTE_REPLY);
            out.put_u64(*epoch);
            out.put_u8(u8::from(*granted));
            out.put_u64(*promised);
        }
        Message::JoinProbe { incarnation } => {
            out.put_u8(TAG_JOIN_PROBE);
            out.put_u64(*incarnation);
        }
        Message::JoinInfo {
            promised,
            last,
            stable,
        } => {
            out.put_u8(TAG_JOIN_INFO);
            out.put_u64(*promised);
            put_pos(out, *last);
            out.put_u64(*stable);
        }
    }
    Ok(())
}

/// A byte string: u32 length, then the bytes.
fn put_bytes(out: &mut BytesMut, bytes: &[u8]) -> Result<(), WireError> {
    let len = u32::try_from(bytes.len()).map_err(|_| WireError::PayloadTooLarge(bytes.len()))?;
    out.put_u32(len);
    out.put_slice(bytes);
    Ok(())
}

/// An optional byte string: u8 0 (none) or 1 and the string.
fn put_opt_bytes(out: &mut BytesMut, bytes: Option<&Bytes>) -> Result<(), WireError> {
    match bytes {
        None => out.put_u8(0),
        Some(b) => {
            out.put_u8(1);
            put_bytes(out, b)?;
        }
    }
    Ok(())
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

    fn message(&mut self) -> Result<Message, WireError> {
        let msg = match self.u8("message tag")? {
            TAG_APPEND => Message::Append {
                epoch: self.u64("epoch")?,
                prev: self.pos("prev")?,
                stable: self.u64("stable")?,
                floor: self.u64("floor")?,
                entries: self.entries()?,
            },
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
            TAG_APPEND_REJECT => {
                let epoch = self.u64("epoch")?;
                let reason = match self.u8("reason tag")? {
                    REASON_FENCED => RejectReason::Fenced,
                    REASON_MISMATCH => RejectReason::Mismatch {
                        prev: self.pos("prev")?,
                        hint: self.u64("hint")?,
                        incarnation: self.u64("incarnation")?,
                    },
                    tag => {
                        return Err(WireError::UnknownTag {
                            what: "reason",
                            tag,
                        });
                    }
                };
                Message::AppendReject { epoch, reason }
            }
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
            TAG_SNAPSHOT_CHUNK => {
                let base = self.pos("base")?;
                let after = self.opt_bytes("after")?;
                let done = match self.u8("done")? {
                    0 => false,
                    1 => true,
                    tag => return Err(WireError::UnknownTag { what: "done", tag }),
                };
                Message::SnapshotChunk {
                    base,
                    after,
                    done,
                    pairs: self.pairs()?,
                }
            }
            TAG_SNAPSHOT_REQUEST => Message::SnapshotRequest {
                base: self.pos("base")?,
                after: self.opt_bytes("after")?,
            },
            TAG_PRE_VOTE => Message::PreVote {
                epoch: self.u64("epoch")?,
            },
            TAG_PRE_VOTE_REPLY => Message::PreVoteReply {
                epoch: self.u64("epoch")?,
                granted: match self.u8("granted")? {
                    0 => false,
                    1 => true,
                    tag => {
                        return Err(WireError::UnknownTag {
                            what: "granted",
                            tag,
                        });
                    }
                },
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

#[cfg(test)]
mod tests;
