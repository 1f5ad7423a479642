//! TCP transport: frames are a 256-byte request header then `size - 256` body bytes. The
//! transport only moves bytes; admission and dispatch live in `frame` and `dispatch`.

use crate::dispatch::{Connection, Dispatched};
use crate::frame::{self, HEADER_SIZE};
use crate::node::Node;
use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use std::rc::Rc;

/// Accepts connections until the listener fails; each connection runs on its own task.
pub async fn serve(listener: TcpListener, node: Rc<Node>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!("tcp accept failed: {error}");
                continue;
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!("tcp {peer}: cannot set TCP_NODELAY: {error}");
        }
        let Some(guard) = node.admit() else {
            tracing::warn!("tcp {peer}: refused, connection limit reached");
            refuse_at_capacity(stream, &node);
            continue;
        };
        let node = node.clone();
        compio::runtime::spawn(async move {
            let _guard = guard;
            if let Err(error) = connection(stream, peer, node).await {
                tracing::debug!("tcp {peer}: closed: {error}");
            }
        })
        .detach();
    }
}

/// Answers a connection above `limits.max_connections`: its first request gets the status
/// CannotEstablishConnection (the SDK reports it from `connect`, instead of redialing a silent
/// close), then the connection closes. At most a few such answers run at once; beyond them the
/// connection is closed at once.
fn refuse_at_capacity(mut stream: TcpStream, node: &Rc<Node>) {
    const REFUSALS_MAX: usize = 64;
    if node.refusals.get() >= REFUSALS_MAX {
        return;
    }
    node.refusals.set(node.refusals.get() + 1);
    let node = node.clone();
    compio::runtime::spawn(async move {
        let wait = std::time::Duration::from_secs(2);
        let header = [0u8; HEADER_SIZE];
        if let Ok(BufResult(Ok(()), header)) =
            compio::time::timeout(wait, stream.read_exact(header)).await
        {
            let reply = match frame::admit_header(&header, u32::MAX) {
                Ok(admitted) => frame::error_reply(
                    &admitted.header,
                    admitted.operation,
                    iggy_generated::errors::ErrorCode::CannotEstablishConnection,
                ),
                Err(error) => {
                    let client = u128::from_le_bytes(header[128..144].try_into().unwrap());
                    frame::eviction(client, error.eviction_reason())
                }
            };
            let _ = stream.write_all(reply).await;
            // Let the client read the answer before the close.
            compio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        node.refusals.set(node.refusals.get() - 1);
    })
    .detach();
}

async fn connection(
    mut stream: TcpStream,
    peer: std::net::SocketAddr,
    node: Rc<Node>,
) -> std::io::Result<()> {
    let mut connection = node.open_connection(peer.to_string(), "tcp");
    let result = serve_connection(&mut stream, &node, &mut connection).await;
    node.close_connection(&connection);
    result
}

/// How much a connection reads at a time when it waits for a request.
const READ_CHUNK: usize = 64 * 1024;

async fn serve_connection(
    stream: &mut TcpStream,
    node: &Rc<Node>,
    connection: &mut Connection,
) -> std::io::Result<()> {
    let limits = &node.shared.config.limits;
    let idle = std::time::Duration::from_secs(limits.idle_timeout_secs.max(1));
    let request_timeout = std::time::Duration::from_millis(limits.request_timeout_ms.max(1));
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "no request in time");
    // Bytes received but not yet consumed: one read usually brings a whole small request (or
    // several pipelined ones), so a request costs one read, not one for its header and one for
    // its body.
    let mut pending: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        // A header must arrive whole within the idle timeout from its first byte (a slow-loris
        // header is cut), a body within the request timeout.
        let mut header_begun: Option<std::time::Instant> = None;
        while pending.len() < HEADER_SIZE {
            let wait = match header_begun {
                Some(begun) => idle.saturating_sub(begun.elapsed()),
                None => idle,
            };
            pending.reserve(READ_CHUNK);
            let have = pending.len();
            // Appended after what is already pending.
            let BufResult(read, buffer) =
                compio::time::timeout(wait, stream.read(pending.slice(have..)))
                    .await
                    .map_err(|_| timed_out())?;
            pending = buffer.into_inner();
            header_begun.get_or_insert_with(std::time::Instant::now);
            if read? == 0 {
                // The peer closed; a partial header is dropped with the connection.
                return Ok(());
            }
        }
        let header: [u8; HEADER_SIZE] = pending[..HEADER_SIZE].try_into().expect("a whole header");
        let admitted = match frame::admit_header(&header, node.shared.config.limits.max_frame_size)
        {
            Ok(admitted) => admitted,
            Err(error) => {
                tracing::debug!("refused request header: {error:?}");
                let client = u128::from_le_bytes(header[128..144].try_into().unwrap());
                let eviction = frame::eviction(client, error.eviction_reason());
                let _ = stream.write_all(eviction).await;
                return Ok(());
            }
        };
        let frame_len = HEADER_SIZE + admitted.body_len;
        let body = if pending.len() >= frame_len {
            let body = pending[HEADER_SIZE..frame_len].to_vec();
            pending.drain(..frame_len);
            body
        } else {
            // The rest of a large body is read straight into it.
            let mut body = Vec::with_capacity(admitted.body_len);
            body.extend_from_slice(&pending[HEADER_SIZE..]);
            pending.clear();
            let have = body.len();
            let BufResult(read, filled) =
                compio::time::timeout(request_timeout, stream.read_exact(body.slice(have..)))
                    .await
                    .map_err(|_| timed_out())?;
            read?;
            filled.into_inner()
        };
        node.in_flight.set(node.in_flight.get() + 1);
        let dispatched =
            crate::dispatch::dispatch_within(node, connection, admitted, body, request_timeout)
                .await;
        node.in_flight.set(node.in_flight.get() - 1);
        match dispatched {
            Dispatched::Reply(bytes) => {
                let BufResult(written, _) = stream.write_all(bytes).await;
                written?;
            }
            Dispatched::Close(bytes) => {
                let _ = stream.write_all(bytes).await;
                return Ok(());
            }
        }
    }
}
