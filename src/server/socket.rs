//! A client's socket as the connection and proxy tasks take it: plain TCP or
//! TLS over TCP, with the addresses and TLS session they report.

use crate::tls::TlsInfo;
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A stream that splits into a read half and a write half, each owned by
/// one side of a connection task's loop.
pub(crate) trait IntoHalves: Send + 'static {
    /// The read half.
    type Read: AsyncRead + Unpin + Send + 'static;
    /// The write half.
    type Write: AsyncWrite + Unpin + Send + 'static;
    /// Whether a write may leave bytes behind that only a flush sends (a
    /// TLS session's records); TCP's flush does nothing.
    const FLUSHES: bool;
    /// Split.
    fn into_halves(self) -> (Self::Read, Self::Write);
}

/// TCP splits without a lock between the halves.
impl IntoHalves for TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;
    const FLUSHES: bool = false;
    fn into_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
}

/// A TLS session is one state for both directions, so its halves share it.
impl IntoHalves for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;
    const FLUSHES: bool = true;
    fn into_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// Write all of `bytes` to a client's write half and flush them: a TLS
/// session may keep the last records of a write that filled the socket
/// until the next write, which may never come (TCP's flush does nothing).
pub(crate) async fn write_out<W: AsyncWrite + Unpin>(
    wr: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    wr.write_all(bytes).await?;
    wr.flush().await
}

/// An accepted client, ready for the AMQP handshake.
pub(crate) struct ClientSocket<S> {
    /// The byte stream.
    pub(crate) stream: S,
    /// The client's address.
    pub(crate) peer: SocketAddr,
    /// The address it connected to.
    pub(crate) local: Option<SocketAddr>,
    /// The TLS session, on AMQPS.
    pub(crate) tls: Option<TlsInfo>,
}

impl ClientSocket<TcpStream> {
    /// A plain TCP client.
    pub(crate) fn plain(stream: TcpStream, peer: SocketAddr) -> Self {
        let local = stream.local_addr().ok();
        ClientSocket {
            stream,
            peer,
            local,
            tls: None,
        }
    }
}
