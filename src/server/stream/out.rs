//! What a stream connection owes its socket: small frames copied together
//! into one buffer, chunks kept as the bridge packed them, and all of it
//! written with vectored writes, so a delivered chunk is not copied again
//! on its way to the kernel (it was a fifth of a 1 KB read's user-space
//! copying: the page read, the packing, this, and the kernel's).

use bytes::{Bytes, BytesMut};
use std::io::IoSlice;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A chunk at least this long goes out as it is; a shorter one is copied
/// into the buffer with its neighbours (an iovec costs more than a copy of
/// a few hundred bytes).
const KEEP_BYTES: usize = 4096;

/// Slices per `writev`: well under the kernel's `IOV_MAX` (1024).
const SLICES: usize = 64;

/// Bytes waiting for the socket, in order.
#[derive(Debug)]
pub(super) struct Out {
    /// Whole pieces before `tail`, oldest first.
    pieces: Vec<Bytes>,
    /// Small writes since the last piece.
    tail: BytesMut,
    /// Bytes in `pieces` and `tail`.
    len: usize,
}

impl Out {
    /// Empty, with `capacity` bytes for small writes.
    pub(super) fn with_capacity(capacity: usize) -> Out {
        Out {
            pieces: Vec::new(),
            tail: BytesMut::with_capacity(capacity),
            len: 0,
        }
    }

    /// Nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Queue a copy of `b`.
    pub(super) fn extend_from_slice(&mut self, b: &[u8]) {
        self.tail.extend_from_slice(b);
        self.len += b.len();
    }

    /// Queue `b`, without a copy if it is long.
    pub(super) fn push(&mut self, b: &Bytes) {
        if b.len() < KEEP_BYTES {
            return self.extend_from_slice(b);
        }
        if !self.tail.is_empty() {
            self.pieces.push(self.tail.split().freeze());
        }
        self.pieces.push(b.clone());
        self.len += b.len();
    }

    /// Write everything (and flush: a TLS session may hold its last
    /// records), then start empty again; the small-write buffer is kept.
    pub(super) async fn write_to<W: AsyncWrite + Unpin>(
        &mut self,
        wr: &mut W,
    ) -> std::io::Result<()> {
        if self.pieces.is_empty() {
            super::super::socket::write_out(wr, &self.tail).await?;
        } else {
            if !self.tail.is_empty() {
                self.pieces.push(self.tail.split().freeze());
            }
            write_all_vectored(wr, &mut self.pieces).await?;
            wr.flush().await?;
            self.pieces.clear();
        }
        self.tail.clear();
        self.len = 0;
        Ok(())
    }
}

/// Write every byte of `pieces` with `writev`s, consuming them as written.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    wr: &mut W,
    pieces: &mut [Bytes],
) -> std::io::Result<()> {
    let mut first = 0;
    while first < pieces.len() {
        let mut n = {
            let slices: Vec<IoSlice<'_>> = pieces[first..]
                .iter()
                .take(SLICES)
                .map(|p| IoSlice::new(p))
                .collect();
            wr.write_vectored(&slices).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let p = &mut pieces[first];
            if n >= p.len() {
                n -= p.len();
                first += 1;
            } else {
                let _ = p.split_to(n);
                n = 0;
            }
        }
        while pieces.get(first).is_some_and(|p| p.is_empty()) {
            first += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small writes and long chunks come out in order, whole, however the
    /// writer splits them (a pipe of 1,000 bytes written at a time).
    #[tokio::test]
    async fn everything_comes_out_in_order_whatever_the_writes_take() {
        let mut out = Out::with_capacity(16);
        let mut want = Vec::new();
        for i in 0..40u32 {
            let small = i.to_be_bytes();
            out.extend_from_slice(&small);
            want.extend_from_slice(&small);
            // Every fourth chunk is short: copied in with the small writes.
            let len = if i % 4 == 0 {
                1000
            } else {
                KEEP_BYTES + 100 * i as usize
            };
            let chunk = Bytes::from(vec![i as u8; len]);
            out.push(&chunk);
            want.extend_from_slice(&chunk);
        }
        assert_eq!(out.len(), want.len());
        let kept = out.pieces.iter().filter(|p| p.len() >= KEEP_BYTES).count();
        assert_eq!(kept, 30, "the long chunks are kept as pieces");
        let (mut wr, mut rd) = tokio::io::duplex(1000);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut rd, &mut got)
                .await
                .unwrap();
            got
        });
        out.write_to(&mut wr).await.unwrap();
        assert!(out.is_empty());
        out.extend_from_slice(b"end");
        want.extend_from_slice(b"end");
        out.write_to(&mut wr).await.unwrap();
        drop(wr);
        assert_eq!(reader.await.unwrap(), want);
    }
}
