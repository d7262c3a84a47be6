//! Osiris chunks: the unit a stream is stored, replicated and delivered in.
//!
//! A deliver frame carries one chunk as RabbitMQ's Osiris log stores it
//! (rabbitmq/osiris `src/osiris_log.erl`, "Chunk format"): a 48-byte header,
//! then the data entries. The header holds a magic and version nibble pair
//! (0x5, 0x0), the chunk type (0 user, 1 tracking delta, 2 tracking snapshot),
//! the entry and record counts, a timestamp (ms), the epoch, the chunk id (the
//! offset of its first record), a CRC-32 of the data, the data and trailer
//! lengths, the bloom filter size and 3 reserved bytes.
//!
//! On disk a bloom filter (RabbitMQ 3.13+ filtering) follows the header and a
//! trailer (tracking entries) follows the data; a stream-protocol consumer gets
//! neither (Osiris sends the header unchanged, then only the data), so the
//! lengths in a delivered header describe the stored chunk, not the frame.
//!
//! Each data entry is simple (high bit 0: a 31-bit length, then one record)
//! or a sub-batch (high bit 1: 3-bit compression, 4 reserved bits, a 16-bit
//! record count, 32-bit uncompressed and stored lengths, then the body, whose
//! records are each a 32-bit length and bytes once uncompressed).

use bytes::{BufMut, Bytes, BytesMut};

use super::wire::{self, PResult, Slicer};

/// The size of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 48;
/// The magic nibble that starts every chunk.
pub const CHUNK_MAGIC: u8 = 0x5;
/// The chunk format version this codec reads and writes.
pub const CHUNK_VERSION: u8 = 0x0;

/// Chunk type: user messages.
pub const CHUNK_TYPE_USER: u8 = 0;
/// Chunk type: a tracking delta (publisher sequences, consumer offsets).
pub const CHUNK_TYPE_TRACKING_DELTA: u8 = 1;
/// Chunk type: a tracking snapshot.
pub const CHUNK_TYPE_TRACKING_SNAPSHOT: u8 = 2;

/// Why a chunk could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The bytes end before the header or an entry does.
    #[error("chunk is truncated")]
    Truncated,
    /// The first byte is not the chunk magic and version 0x50.
    #[error("not a chunk: magic and version byte 0x{0:02x}")]
    BadMagic(u8),
    /// The data does not match the header's CRC.
    #[error("chunk data CRC 0x{actual:08x} does not match the header's 0x{expected:08x}")]
    CrcMismatch {
        /// The CRC in the header.
        expected: u32,
        /// The CRC of the data.
        actual: u32,
    },
    /// The entries do not add up to the header's counts or length.
    #[error("chunk entries do not match the header: {0}")]
    Inconsistent(&'static str),
}

/// A chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// 0 user, 1 tracking delta, 2 tracking snapshot.
    pub chunk_type: u8,
    /// Data entries (a sub-batch is one entry).
    pub num_entries: u16,
    /// Records (messages): one per simple entry, a sub-batch's count for each sub-batch.
    pub num_records: u32,
    /// When the chunk was written, in milliseconds since the epoch.
    pub timestamp: i64,
    /// The leader epoch it was written in.
    pub epoch: u64,
    /// The chunk id: the offset of its first record.
    pub chunk_id: u64,
    /// CRC-32 (IEEE) of the data entries.
    pub crc: u32,
    /// Length of the data entries.
    pub data_length: u32,
    /// Length of the trailer (as stored).
    pub trailer_length: u32,
    /// Size of the bloom filter (as stored; never sent to stream clients).
    pub bloom_size: u8,
    /// The 3 reserved bytes, kept as read.
    pub reserved: [u8; 3],
}

impl ChunkHeader {
    /// Parses a header (nom).
    pub(crate) fn parse(i: &[u8]) -> PResult<'_, ChunkHeader> {
        let (i, magic_version) = wire::u8(i)?;
        if magic_version != (CHUNK_MAGIC << 4 | CHUNK_VERSION) {
            return wire::malformed("not a chunk (magic and version are not 0x50)");
        }
        let (i, chunk_type) = wire::u8(i)?;
        let (i, num_entries) = wire::u16(i)?;
        let (i, num_records) = wire::u32(i)?;
        let (i, timestamp) = wire::i64(i)?;
        let (i, epoch) = wire::u64(i)?;
        let (i, chunk_id) = wire::u64(i)?;
        let (i, crc) = wire::u32(i)?;
        let (i, data_length) = wire::u32(i)?;
        let (i, trailer_length) = wire::u32(i)?;
        let (i, bloom_size) = wire::u8(i)?;
        let (i, r) = wire::take(3)(i)?;
        let reserved = [r[0], r[1], r[2]];
        let header = ChunkHeader {
            chunk_type,
            num_entries,
            num_records,
            timestamp,
            epoch,
            chunk_id,
            crc,
            data_length,
            trailer_length,
            bloom_size,
            reserved,
        };
        Ok((i, header))
    }

    /// Reads a header from the start of `bytes`.
    pub fn read(bytes: &[u8]) -> Result<ChunkHeader, ChunkError> {
        match Self::parse(bytes) {
            Ok((_, h)) => Ok(h),
            Err(nom::Err::Error(wire::WireError::Malformed(_))) => {
                Err(ChunkError::BadMagic(bytes.first().copied().unwrap_or(0)))
            }
            Err(_) => Err(ChunkError::Truncated),
        }
    }

    /// Whether `len` bytes (header included) can be this chunk as delivered:
    /// header and data, and the trailer or nothing after them.
    pub fn fits(&self, len: usize) -> bool {
        let base = CHUNK_HEADER_LEN + self.data_length as usize;
        len == base || len == base + self.trailer_length as usize
    }

    /// Appends the header.
    pub fn put(&self, buf: &mut BytesMut) {
        buf.put_u8(CHUNK_MAGIC << 4 | CHUNK_VERSION);
        buf.put_u8(self.chunk_type);
        buf.put_u16(self.num_entries);
        buf.put_u32(self.num_records);
        buf.put_i64(self.timestamp);
        buf.put_u64(self.epoch);
        buf.put_u64(self.chunk_id);
        buf.put_u32(self.crc);
        buf.put_u32(self.data_length);
        buf.put_u32(self.trailer_length);
        buf.put_u8(self.bloom_size);
        buf.put_slice(&self.reserved);
    }
}

/// A delivered chunk: its header, its data entries and the trailer if sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The header.
    pub header: ChunkHeader,
    /// The data entries, a slice of the frame.
    pub data: Bytes,
    /// The trailer, if it was sent (empty for user-data consumers).
    pub trailer: Bytes,
}

/// One data entry of a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// One record.
    Simple(Bytes),
    /// Several records, maybe compressed (the client's compression codes:
    /// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    SubBatch {
        /// The compression code.
        compression: u8,
        /// How many records the body holds.
        num_records: u16,
        /// The body's length once uncompressed.
        uncompressed_length: u32,
        /// The body as stored.
        body: Bytes,
    },
}

impl Chunk {
    /// Splits a delivered chunk (as [`ServerMessage::Deliver`](super::ServerMessage) holds it).
    pub fn parse(chunk: &Bytes) -> Result<Chunk, ChunkError> {
        let header = ChunkHeader::read(chunk)?;
        if !header.fits(chunk.len()) {
            return Err(ChunkError::Truncated);
        }
        let data_end = CHUNK_HEADER_LEN + header.data_length as usize;
        Ok(Chunk {
            header,
            data: chunk.slice(CHUNK_HEADER_LEN..data_end),
            trailer: chunk.slice(data_end..),
        })
    }

    /// Checks the CRC, then that the entries fill the data exactly and add up
    /// to the header's entry and record counts.
    pub fn verify(&self) -> Result<(), ChunkError> {
        let actual = crc32fast::hash(&self.data);
        if actual != self.header.crc {
            return Err(ChunkError::CrcMismatch {
                expected: self.header.crc,
                actual,
            });
        }
        let (mut entries, mut records) = (0u32, 0u64);
        for entry in self.entries() {
            entries += 1;
            records += u64::from(entry?.records());
        }
        if entries != u32::from(self.header.num_entries) {
            return Err(ChunkError::Inconsistent("entry count"));
        }
        if records != u64::from(self.header.num_records) {
            return Err(ChunkError::Inconsistent("record count"));
        }
        Ok(())
    }

    /// The data entries, in order; stops at the header's entry count or the
    /// first malformed entry (then yields its error).
    pub fn entries(&self) -> Entries {
        Entries {
            data: self.data.clone(),
            pos: 0,
            left: self.header.num_entries,
            failed: false,
        }
    }
}

/// An iterator over a chunk's data entries.
pub struct Entries {
    data: Bytes,
    pos: usize,
    left: u16,
    failed: bool,
}

impl Entry {
    /// Parses one entry (nom); its bytes become slices of the frame.
    pub(crate) fn parse<'a>(i: &'a [u8], s: &Slicer<'_>) -> PResult<'a, Entry> {
        let (_, first) = wire::u8(i)?;
        if first & 0x80 == 0 {
            let (i, len) = wire::u32(i)?;
            let (i, record) = wire::take((len & 0x7fff_ffff) as usize)(i)?;
            return Ok((i, Entry::Simple(s.bytes(record))));
        }
        let (i, _) = wire::u8(i)?;
        let (i, num_records) = wire::u16(i)?;
        let (i, uncompressed_length) = wire::u32(i)?;
        let (i, len) = wire::u32(i)?;
        let (i, body) = wire::take(len as usize)(i)?;
        let compression = (first >> 4) & 0x7;
        let body = s.bytes(body);
        Ok((
            i,
            Entry::SubBatch {
                compression,
                num_records,
                uncompressed_length,
                body,
            },
        ))
    }

    /// How many records the entry holds.
    pub fn records(&self) -> u32 {
        match self {
            Entry::Simple(_) => 1,
            Entry::SubBatch { num_records, .. } => u32::from(*num_records),
        }
    }

    /// Appends the entry as Osiris stores it (and as a publish carries it).
    pub fn put(&self, buf: &mut BytesMut) {
        match self {
            Entry::Simple(record) => {
                buf.put_u32(record.len() as u32 & 0x7fff_ffff);
                buf.put_slice(record);
            }
            Entry::SubBatch {
                compression,
                num_records,
                uncompressed_length,
                body,
            } => {
                buf.put_u8(0x80 | (compression & 0x7) << 4);
                buf.put_u16(*num_records);
                buf.put_u32(*uncompressed_length);
                buf.put_u32(body.len() as u32);
                buf.put_slice(body);
            }
        }
    }
}

impl Entries {
    fn next_entry(&mut self) -> Result<Entry, ChunkError> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        match Entry::parse(rest, &Slicer(&self.data)) {
            Ok((left, entry)) => {
                self.pos = self.data.len() - left.len();
                Ok(entry)
            }
            Err(_) => Err(ChunkError::Truncated),
        }
    }
}

impl Iterator for Entries {
    type Item = Result<Entry, ChunkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.pos != self.data.len() {
                self.failed = true;
                return Some(Err(ChunkError::Inconsistent("bytes after the last entry")));
            }
            return None;
        }
        self.left -= 1;
        let entry = self.next_entry();
        self.failed = entry.is_err();
        Some(entry)
    }
}

/// The records of an uncompressed sub-batch body: each a 32-bit length and bytes.
pub fn sub_batch_records(body: &Bytes) -> Result<Vec<Bytes>, ChunkError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < body.len() {
        let len_bytes = body.get(pos..pos + 4).ok_or(ChunkError::Truncated)?;
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let start = pos + 4;
        let end = start
            .checked_add(len as usize)
            .ok_or(ChunkError::Truncated)?;
        if end > body.len() {
            return Err(ChunkError::Truncated);
        }
        out.push(body.slice(start..end));
        pos = end;
    }
    Ok(out)
}

/// Builds a user chunk the way Osiris writes one (no bloom filter, no trailer),
/// for a broker that stores chunks and for tests.
///
/// The data is written after room for the header, so [`ChunkBuilder::finish`]
/// fills the header in place and hands the buffer over without copying the
/// data again (a chunk's bytes were copied twice per delivery before).
#[derive(Debug)]
pub struct ChunkBuilder {
    /// `CHUNK_HEADER_LEN` bytes for the header, then the data.
    buf: BytesMut,
    entries: u16,
    records: u32,
    trailer_length: u32,
}

impl Default for ChunkBuilder {
    fn default() -> Self {
        let mut buf = BytesMut::new();
        buf.put_bytes(0, CHUNK_HEADER_LEN);
        ChunkBuilder {
            buf,
            entries: 0,
            records: 0,
            trailer_length: 0,
        }
    }
}

impl ChunkBuilder {
    /// An empty chunk.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty chunk with room for `data` bytes of entries.
    pub fn with_capacity(data: usize) -> Self {
        let mut b = Self::default();
        b.buf.reserve(data);
        b
    }

    /// Adds a simple entry (one record of at most 2^31 - 1 bytes).
    pub fn simple(&mut self, record: &[u8]) -> &mut Self {
        self.buf.put_u32(record.len() as u32 & 0x7fff_ffff);
        self.buf.put_slice(record);
        self.entries = self.entries.wrapping_add(1);
        self.records = self.records.wrapping_add(1);
        self
    }

    /// Adds an entry as it came (a published message's entry, say).
    pub fn entry(&mut self, entry: &Entry) -> &mut Self {
        entry.put(&mut self.buf);
        self.entries = self.entries.wrapping_add(1);
        self.records = self.records.wrapping_add(entry.records());
        self
    }

    /// Adds an uncompressed sub-batch of records.
    pub fn sub_batch(&mut self, records: &[&[u8]]) -> &mut Self {
        let body_len: usize = records.iter().map(|r| 4 + r.len()).sum();
        self.buf.put_u8(0x80);
        self.buf.put_u16(records.len() as u16);
        self.buf.put_u32(body_len as u32);
        self.buf.put_u32(body_len as u32);
        for r in records {
            self.buf.put_u32(r.len() as u32);
            self.buf.put_slice(r);
        }
        self.entries = self.entries.wrapping_add(1);
        self.records = self.records.wrapping_add(records.len() as u32);
        self
    }

    /// The trailer length the header states: what Osiris stored after the
    /// data (a deduplicating publisher's tracking entry), which a delivery
    /// to a consumer does not carry but its header counts.
    pub fn trailer_length(&mut self, length: u32) -> &mut Self {
        self.trailer_length = length;
        self
    }

    /// The data written so far, without the header.
    fn data(&self) -> &[u8] {
        &self.buf[CHUNK_HEADER_LEN..]
    }

    fn header(&self, timestamp: i64, epoch: u64, chunk_id: u64) -> ChunkHeader {
        ChunkHeader {
            chunk_type: CHUNK_TYPE_USER,
            num_entries: self.entries,
            num_records: self.records,
            timestamp,
            epoch,
            chunk_id,
            crc: crc32fast::hash(self.data()),
            data_length: self.data().len() as u32,
            trailer_length: self.trailer_length,
            bloom_size: 0,
            reserved: [0; 3],
        }
    }

    /// The chunk: header (CRC filled in) and data, copied (the builder
    /// stays usable; [`ChunkBuilder::finish`] does not copy).
    pub fn build(&self, timestamp: i64, epoch: u64, chunk_id: u64) -> Bytes {
        let mut buf = BytesMut::with_capacity(self.buf.len());
        self.header(timestamp, epoch, chunk_id).put(&mut buf);
        buf.put_slice(self.data());
        buf.freeze()
    }

    /// The chunk, as [`ChunkBuilder::build`] makes it, with the header
    /// written into the room kept for it: the data is not copied.
    pub fn finish(mut self, timestamp: i64, epoch: u64, chunk_id: u64) -> Bytes {
        let mut header = BytesMut::with_capacity(CHUNK_HEADER_LEN);
        self.header(timestamp, epoch, chunk_id).put(&mut header);
        self.buf[..CHUNK_HEADER_LEN].copy_from_slice(&header);
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_makes_the_chunk_build_makes() {
        let mut b = ChunkBuilder::with_capacity(4);
        b.simple(b"one").simple(b"").sub_batch(&[b"x", b"yz"]);
        b.trailer_length(12);
        let built = b.build(1_700_000_000_000, 3, 42);
        let finished = b.finish(1_700_000_000_000, 3, 42);
        assert_eq!(built, finished);
        let header = ChunkHeader::read(&finished).expect("a header");
        assert_eq!((header.num_entries, header.num_records), (3, 4));
        assert_eq!(header.trailer_length, 12);
        assert_eq!(
            header.data_length as usize,
            finished.len() - CHUNK_HEADER_LEN
        );
    }

    #[test]
    fn built_chunks_parse_back_entry_by_entry() {
        let chunk = ChunkBuilder::new()
            .simple(b"one")
            .sub_batch(&[b"two", b"three"])
            .simple(b"")
            .build(1_700_000_000_000, 3, 42);
        let parsed = Chunk::parse(&chunk).unwrap();
        parsed.verify().unwrap();
        assert_eq!(parsed.header.num_entries, 3);
        assert_eq!(parsed.header.num_records, 4);
        assert_eq!(parsed.header.chunk_id, 42);
        assert_eq!(parsed.header.epoch, 3);
        assert_eq!(&chunk[..1], &[0x50]);
        let entries: Vec<Entry> = parsed.entries().map(Result::unwrap).collect();
        assert_eq!(entries[0], Entry::Simple(Bytes::from_static(b"one")));
        let Entry::SubBatch {
            compression: 0,
            num_records: 2,
            body,
            ..
        } = &entries[1]
        else {
            panic!("not a sub-batch: {:?}", entries[1]);
        };
        assert_eq!(
            sub_batch_records(body).unwrap(),
            vec![&b"two"[..], &b"three"[..]]
        );
        assert_eq!(entries[2], Entry::Simple(Bytes::new()));
    }

    #[test]
    fn damaged_chunks_are_typed_errors() {
        let chunk = ChunkBuilder::new().simple(b"hello").build(0, 1, 0);
        let mut bad_crc = BytesMut::from(&chunk[..]);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        let parsed = Chunk::parse(&bad_crc.freeze()).unwrap();
        assert!(matches!(
            parsed.verify(),
            Err(ChunkError::CrcMismatch { .. })
        ));
        assert_eq!(
            Chunk::parse(&chunk.slice(..chunk.len() - 1)),
            Err(ChunkError::Truncated)
        );
        assert_eq!(Chunk::parse(&chunk.slice(..10)), Err(ChunkError::Truncated));
        let mut magic = BytesMut::from(&chunk[..]);
        magic[0] = 0x51;
        assert_eq!(
            Chunk::parse(&magic.freeze()),
            Err(ChunkError::BadMagic(0x51))
        );
        // An entry whose length runs past the data.
        let mut long = BytesMut::from(&chunk[..]);
        long[CHUNK_HEADER_LEN + 3] = 0x7f;
        let parsed = Chunk::parse(&long.freeze()).unwrap();
        assert_eq!(parsed.entries().next(), Some(Err(ChunkError::Truncated)));
    }
}
