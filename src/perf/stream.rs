//! The load generator's socket: plain TCP, or TLS for `amqps://` URIs.
//!
//! Plain TCP keeps the readiness-then-try path the hot loops were tuned on;
//! a TLS session goes through tokio-rustls's `AsyncRead`/`AsyncWrite`. The
//! broker's certificate is checked against `--tls-ca-file`.

use rustls::pki_types::ServerName;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The largest TLS record's plaintext: what one TLS read can yield.
const TLS_RECORD: usize = 16 * 1024;

/// The TLS client configuration for `amqps://`, set once from the flags.
static CONNECTOR: OnceLock<TlsConnector> = OnceLock::new();

/// Trust the CA certificates in `ca_file` (PEM) for `amqps://` URIs.
pub fn trust_ca_file(ca_file: &Path) -> Result<(), String> {
    let roots = stablemq_cluster::transport::pem::read_roots(ca_file).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let _ = CONNECTOR.set(TlsConnector::from(Arc::new(config)));
    Ok(())
}

/// A connection's byte stream.
pub enum PerfStream {
    /// `amqp://`.
    Plain(TcpStream),
    /// `amqps://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl PerfStream {
    /// Connect to `host:port`, with a TLS handshake first when `tls`.
    pub async fn connect(host: &str, port: u16, tls: bool) -> Result<PerfStream, String> {
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        if !tls {
            return Ok(PerfStream::Plain(tcp));
        }
        let connector = CONNECTOR
            .get()
            .ok_or("amqps:// needs --tls-ca-file (the CA that signed the broker's certificate)")?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        let s = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        Ok(PerfStream::Tls(Box::new(s)))
    }

    /// Write all of `bytes`.
    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            PerfStream::Plain(s) => s.write_all(bytes).await,
            PerfStream::Tls(s) => {
                s.write_all(bytes).await?;
                s.flush().await
            }
        }
    }

    /// Read what the socket has into `buf`'s spare room. `Ready(Ok(0))`
    /// is end of stream.
    pub fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
    ) -> Poll<io::Result<usize>> {
        match self {
            PerfStream::Plain(s) => loop {
                match s.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {}
                }
                match s.try_read_buf(buf) {
                    Ok(n) => return Poll::Ready(Ok(n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            },
            PerfStream::Tls(s) => {
                // One TLS record's worth of zeroed room: no uninitialized
                // memory is handed out.
                let old = buf.len();
                buf.resize(old + TLS_RECORD, 0);
                let mut rb = ReadBuf::new(&mut buf[old..]);
                let r = Pin::new(&mut **s).poll_read(cx, &mut rb);
                let n = rb.filled().len();
                buf.truncate(old + n);
                match r {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(n)),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    /// Write as much of `bytes` as the socket takes now.
    pub fn poll_write_some(
        &mut self,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            PerfStream::Plain(s) => loop {
                match s.poll_write_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Ready(Ok(())) => {}
                }
                match s.try_write(bytes) {
                    Ok(n) => return Poll::Ready(Ok(n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            },
            PerfStream::Tls(s) => {
                let r = Pin::new(&mut **s).poll_write(cx, bytes);
                // Push the records out now; what the socket does not take
                // yet goes with the next write or flush.
                let _ = Pin::new(&mut **s).poll_flush(cx);
                r
            }
        }
    }
}
