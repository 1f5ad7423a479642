//! TCP transport, plain or TLS: frames are a 256-byte request header then `size - 256` body
//! bytes on the byte stream. The transport only moves bytes; the shared connection loop admits
//! and dispatches.

use super::connection_loop::{self, FrameIo, ReadFailure};
use crate::runtime::node::Node;
use crate::service::frame::HEADER_SIZE;
use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use compio::tls::TlsAcceptor;
use std::rc::Rc;
use std::time::Duration;

/// Accepts connections until the listener fails; each connection runs on its own task. With
/// `tls`, each connection first completes a TLS handshake (within the request timeout).
pub async fn serve(listener: TcpListener, node: Rc<Node>, tls: Option<TlsAcceptor>) {
    let transport = if tls.is_some() { "tcp+tls" } else { "tcp" };
    loop {
        let (stream, peer, guard) = super::accept(&listener, &node, transport).await;
        let Some(guard) = guard else {
            // A TLS client would need a handshake to read the refusal: it is closed instead.
            if tls.is_none() {
                refuse_at_capacity(stream, &node);
            }
            continue;
        };
        let node = node.clone();
        let tls = tls.clone();
        compio::runtime::spawn(async move {
            let _guard = guard;
            let within = node.shared.config.limits.request_timeout();
            let result = match tls {
                None => connection(ByteStream::new(stream, within), peer, node).await,
                Some(acceptor) => {
                    match compio::time::timeout(within, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            connection(ByteStream::new(stream, within), peer, node).await
                        }
                        Ok(Err(error)) => {
                            node.log_tls_handshake_failed(transport, peer, &error);
                            Err(error)
                        }
                        Err(_) => Err(connection_loop::timed_out()),
                    }
                }
            };
            if let Err(error) = result {
                tracing::debug!("{transport} {peer}: closed: {error}");
            }
        })
        .detach();
    }
}

/// Answers a connection above `limits.max_connections` ([`super::capacity_reply`]), then closes
/// it. At most a few such answers run at once; beyond them the connection is closed at once.
fn refuse_at_capacity(mut stream: TcpStream, node: &Rc<Node>) {
    let Some(slot) = super::refusal_slot(node) else {
        return;
    };
    compio::runtime::spawn(async move {
        let _slot = slot;
        let wait = std::time::Duration::from_secs(2);
        let header = [0u8; HEADER_SIZE];
        if let Ok(BufResult(Ok(()), header)) =
            compio::time::timeout(wait, stream.read_exact(header)).await
        {
            let _ = stream.write_all(super::capacity_reply(&header)).await;
            // Let the client read the answer before the close.
            compio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .detach();
}

async fn connection(
    mut link: impl FrameIo,
    peer: std::net::SocketAddr,
    node: Rc<Node>,
) -> std::io::Result<()> {
    // Clients see TLS connections as TCP ones (the client list has no TLS kind).
    let mut connection = node.open_connection(peer.to_string(), "tcp");
    let result = connection_loop::serve_frames(&mut link, &node, &mut connection).await;
    node.close_connection(&connection);
    result
}

/// How much a connection reads at a time when it waits for a request.
const READ_CHUNK: usize = 64 * 1024;

/// Frames on a byte stream (TCP, or TLS over TCP).
pub struct ByteStream<S> {
    stream: S,
    /// Bytes received but not yet consumed: one read usually brings a whole small request (or
    /// several pipelined ones), so a request costs one read, not one for its header and one
    /// for its body.
    pending: Vec<u8>,
    /// How long the rest of a header may take once its first bytes came (`limits.
    /// request_timeout_ms`, as for the rest of a body).
    header_within: Duration,
}

impl<S> ByteStream<S> {
    pub fn new(stream: S, header_within: Duration) -> Self {
        Self {
            stream,
            pending: Vec::with_capacity(READ_CHUNK),
            header_within,
        }
    }
}

impl<S: AsyncRead + AsyncWrite> FrameIo for ByteStream<S> {
    async fn read_header(
        &mut self,
        idle: Duration,
    ) -> Result<Option<[u8; HEADER_SIZE]>, ReadFailure> {
        // The first bytes of a header may take the idle timeout; the rest must follow within
        // `header_within` (a slow-loris header is cut, and a client that sent a request of
        // another framing and waits for its answer learns at once that none comes).
        let mut header_begun: Option<std::time::Instant> = None;
        while self.pending.len() < HEADER_SIZE {
            let wait = match header_begun {
                Some(begun) => self.header_within.saturating_sub(begun.elapsed()),
                None if self.pending.is_empty() => idle,
                // Bytes of this header came with the previous request's read.
                None => self.header_within,
            };
            let mut pending = std::mem::take(&mut self.pending);
            pending.reserve(READ_CHUNK);
            let have = pending.len();
            // What a log line about a header cut short shows of it (the buffer goes with a
            // read that times out).
            let mut head = [0u8; 8];
            head[..have.min(8)].copy_from_slice(&pending[..have.min(8)]);
            // Appended after what is already pending.
            let read = compio::time::timeout(wait, self.stream.read(pending.slice(have..))).await;
            let BufResult(read, buffer) = match read {
                Ok(read) => read,
                Err(_) if have > 0 => {
                    return Err(ReadFailure::HeaderCutShort {
                        received: have,
                        head,
                        within: self.header_within,
                    });
                }
                Err(_) => return Err(connection_loop::timed_out().into()),
            };
            self.pending = buffer.into_inner();
            header_begun.get_or_insert_with(std::time::Instant::now);
            if read? == 0 {
                // The peer closed; a partial header is dropped with the connection.
                return Ok(None);
            }
        }
        let header = self.pending[..HEADER_SIZE]
            .try_into()
            .expect("a whole header");
        Ok(Some(header))
    }

    async fn read_body(&mut self, len: usize, within: Duration) -> Result<Vec<u8>, ReadFailure> {
        let frame_len = HEADER_SIZE + len;
        if self.pending.len() >= frame_len {
            let body = self.pending[HEADER_SIZE..frame_len].to_vec();
            self.pending.drain(..frame_len);
            return Ok(body);
        }
        // The rest of a large body is read straight into it.
        let mut body = Vec::with_capacity(len);
        body.extend_from_slice(&self.pending[HEADER_SIZE..]);
        self.pending.clear();
        let have = body.len();
        let BufResult(read, filled) =
            compio::time::timeout(within, self.stream.read_exact(body.slice(have..)))
                .await
                .map_err(|_| connection_loop::timed_out())?;
        read?;
        Ok(filled.into_inner())
    }

    async fn discard_body(&mut self, len: usize, within: Duration) -> Result<(), ReadFailure> {
        let frame_len = HEADER_SIZE + len;
        if self.pending.len() >= frame_len {
            self.pending.drain(..frame_len);
            return Ok(());
        }
        let left = frame_len - self.pending.len();
        self.pending.clear();
        compio::time::timeout(within, connection_loop::discard(&mut self.stream, left))
            .await
            .map_err(|_| connection_loop::timed_out())?
    }

    async fn write_frame(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        let BufResult(written, _) = self.stream.write_all(frame).await;
        written?;
        // A TLS stream buffers records until flushed.
        self.stream.flush().await
    }
}
