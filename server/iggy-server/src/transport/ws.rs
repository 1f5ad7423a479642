//! WebSocket transport (plain or over TLS): each request is one binary message holding one
//! frame (256-byte header and body, the TCP bytes), each reply goes out as binary messages.
//! Any request path is accepted and no subprotocol is offered. A message that is not a frame
//! gets a close frame that says why. A signed-in client's message over 64 KiB is read only once
//! its bytes fit in the node's budget of request bodies (`ws_gate`).

use super::connection_loop::{self, FrameIo, ReadFailure, UNBOUND_FRAME_MAX};
use super::ws_gate::{Gate, Lease};
use crate::config::WebSocket;
use crate::runtime::body_budget::BodyPermit;
use crate::runtime::node::Node;
use crate::service::frame::HEADER_SIZE;
use bytes::Bytes;
use compio::buf::IntoInner;
use compio::net::{TcpListener, TcpStream};
use compio::tls::{MaybeTlsStream, TlsAcceptor};
use compio::ws::tungstenite;
use compio::ws::tungstenite::Message;
use compio::ws::tungstenite::protocol::frame::CloseFrame;
use compio::ws::tungstenite::protocol::frame::coding::CloseCode;
use compio::ws::tungstenite::protocol::{Role, WebSocketConfig};
use futures_util::StreamExt;
use iggy_generated::frames::{Command, EvictionReason, ReplyHeader};
use std::cell::RefCell;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// The WebSocket over the gated stream (plain or TLS): compio's WebSocket is this library's
/// stream over the connection's, which leaves no room for the gate between them.
type WebSocketStream = async_tungstenite::WebSocketStream<Gate<MaybeTlsStream<TcpStream>>>;

/// The official client drops a link on a frame over 16 MiB (tungstenite's default), so longer
/// replies go out as several messages; the client joins messages into one byte stream.
pub const REPLY_MESSAGE_MAX: usize = 16 * 1024 * 1024;

/// Bytes a connection without a session may leave queued beyond the write buffer: its replies
/// (a login's, an error) take a few hundred.
const UNBOUND_WRITE_QUEUE_MAX: usize = 1024 * 1024;

/// The tungstenite limits `[websocket]` sets, for a connection with a session bound (`bound`)
/// or without. The library reads a whole message before the server sees its frame header, so a
/// connection without a session gets messages of at most what such a connection may send
/// (`connection_loop::UNBOUND_FRAME_MAX`: a login, a session bind, a ping); a larger one is
/// refused at its WebSocket frame header, unread, and closes the connection (1009).
///
/// The bytes queued for a peer that does not read are bounded too, and tighter without a
/// session: the library answers each Ping with a Pong, so a peer that sends Pings and never
/// reads grew the queue at the speed of the network (a node's memory gone in seconds).
pub fn websocket_config(config: &WebSocket, bound: bool) -> WebSocketConfig {
    let unlimited = |size: usize| if size == 0 { usize::MAX } else { size };
    let limit = |size: usize| match bound {
        true => size,
        false => size.min(UNBOUND_FRAME_MAX as usize),
    };
    let queued = match bound {
        true => unlimited(config.max_write_buffer_size),
        false => unlimited(config.max_write_buffer_size)
            .min(config.write_buffer_size + UNBOUND_WRITE_QUEUE_MAX),
    };
    WebSocketConfig::default()
        .read_buffer_size(config.read_buffer_size)
        .write_buffer_size(config.write_buffer_size)
        .max_write_buffer_size(queued)
        .max_message_size(Some(limit(config.max_message_size)))
        .max_frame_size(Some(limit(config.max_frame_size)))
        .accept_unmasked_frames(config.accept_unmasked_frames)
}

/// Accepts connections until the listener fails; each connection runs on its own task. With
/// `tls`, the TLS handshake comes before the WebSocket one; both must finish within the
/// request timeout.
pub async fn serve(listener: TcpListener, node: Rc<Node>, tls: Option<TlsAcceptor>) {
    let transport = if tls.is_some() { "wss" } else { "ws" };
    loop {
        let (stream, peer, guard) = super::accept(&listener, &node, transport).await;
        let Some(guard) = guard else {
            // As on TCP, a TLS client would need a handshake to read the refusal: it is closed.
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
            let handshake = compio::time::timeout(within, handshake(stream, tls, &node)).await;
            let link = match handshake {
                Ok(Ok(link)) => link,
                Ok(Err(error)) => {
                    match error.strip_prefix("tls: ") {
                        Some(tls) => node.log_tls_handshake_failed(transport, peer, &tls),
                        None => tracing::debug!("{transport} {peer}: handshake failed: {error}"),
                    }
                    return;
                }
                Err(_) => {
                    tracing::debug!("{transport} {peer}: handshake timed out");
                    return;
                }
            };
            let lease = Rc::new(RefCell::new(Lease::default()));
            let gated = Gate::new(link, node.body_budget.clone(), lease.clone());
            let config = websocket_config(&node.shared.config.websocket, false);
            let ws = WebSocketStream::from_raw_socket(gated, Role::Server, Some(config)).await;
            let mut link = MessageLink {
                ws: Some(ws),
                settings: node.shared.config.websocket.clone(),
                request_timeout: within,
                lease,
                message: Bytes::new(),
                permit: None,
                close: None,
            };
            let mut connection = node.open_connection(peer.to_string(), "websocket");
            let result = connection_loop::serve_frames(&mut link, &node, &mut connection).await;
            node.close_connection(&connection);
            if let Err(error) = &result {
                tracing::debug!("{transport} {peer}: closed: {error}");
            }
            link.close().await;
        })
        .detach();
    }
}

/// Answers a WebSocket connection above `limits.max_connections` on its first message
/// ([`super::capacity_reply`]), then closes it. At most a few such answers run at once; beyond
/// them the connection is closed at once.
fn refuse_at_capacity(stream: TcpStream, node: &Rc<Node>) {
    let Some(slot) = super::refusal_slot(node) else {
        return;
    };
    let config = websocket_config(&node.shared.config.websocket, false);
    compio::runtime::spawn(async move {
        let _slot = slot;
        let answer = async {
            let mut ws = compio::ws::accept_async_with_config(stream, Some(config))
                .await
                .ok()?;
            let message = loop {
                match ws.next().await?.ok()? {
                    Message::Binary(message) => break message,
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
                    _ => return None,
                }
            };
            let header: [u8; HEADER_SIZE] = message.get(..HEADER_SIZE)?.try_into().ok()?;
            let reply = super::capacity_reply(&header);
            ws.send(Message::Binary(reply.into())).await.ok()?;
            let _ = ws.close(None).await;
            Some(())
        };
        let _ = compio::time::timeout(Duration::from_secs(2), answer).await;
    })
    .detach();
}

/// The WebSocket handshake (after TLS's, with `tls`): the stream, whose next byte begins a
/// frame. The client sends none before the handshake's answer (RFC 6455 4.1), so the library
/// that read the handshake holds none of them.
async fn handshake(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    node: &Node,
) -> Result<MaybeTlsStream<TcpStream>, String> {
    // No session yet: a connection's first messages are small.
    let config = websocket_config(&node.shared.config.websocket, false);
    let result = match tls {
        None => {
            // The library drops a request that is not a WebSocket handshake (curl or a browser
            // pointed at the port) unanswered; a clone of the socket answers it.
            let answer_on = stream.clone();
            let result = compio::ws::accept_async_with_config(stream, Some(config)).await;
            if let Err(error) = &result {
                answer_not_a_handshake(answer_on, error).await;
            }
            result
        }
        Some(acceptor) => {
            let stream = acceptor
                .accept(stream)
                .await
                .map_err(|error| format!("tls: {error}"))?;
            compio::ws::accept_async_with_config(stream, Some(config)).await
        }
    };
    let ws: compio::ws::WebSocketStream<TcpStream> = result.map_err(|error| error.to_string())?;
    Ok(ws.into_inner())
}

/// Answers a request the handshake refused with an HTTP status saying why: 426 Upgrade
/// Required for a plain HTTP request, 400 for a malformed handshake. Nothing is answered when
/// the client left or the socket failed.
async fn answer_not_a_handshake(mut stream: TcpStream, error: &tungstenite::Error) {
    use tungstenite::error::ProtocolError;
    let (status, extra) = match error {
        tungstenite::Error::Protocol(
            ProtocolError::MissingConnectionUpgradeHeader
            | ProtocolError::MissingUpgradeWebSocketHeader,
        ) => ("426 Upgrade Required", "Upgrade: websocket\r\n"),
        tungstenite::Error::Protocol(ProtocolError::MissingSecWebSocketVersionHeader) => {
            ("400 Bad Request", "Sec-WebSocket-Version: 13\r\n")
        }
        tungstenite::Error::Protocol(ProtocolError::HandshakeIncomplete) => return,
        tungstenite::Error::Protocol(_) | tungstenite::Error::Capacity(_) => {
            ("400 Bad Request", "")
        }
        _ => return,
    };
    let body = format!("this port serves Iggy over WebSocket: {error}\n");
    let answer = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = compio::io::AsyncWriteExt::write_all(&mut stream, answer.into_bytes()).await;
    let _ = compio::io::AsyncWrite::shutdown(&mut stream).await;
}

/// Frames in WebSocket messages.
struct MessageLink {
    /// Always present; taken only while [`FrameIo::session_changed`] rebuilds it.
    ws: Option<WebSocketStream>,
    /// `[websocket]`, whose limits apply once a session is bound.
    settings: WebSocket,
    /// `limits.request_timeout_ms`: a message whose bytes are reserved must arrive within it.
    request_timeout: Duration,
    /// The reservations of the messages the gate below the library lets through.
    lease: Rc<RefCell<Lease>>,
    /// The message whose header was just read.
    message: Bytes,
    /// Its reservation from the node's budget, when it needed one.
    permit: Option<BodyPermit>,
    /// Why the server ends the connection, sent in its close frame.
    close: Option<(CloseCode, &'static str)>,
}

impl MessageLink {
    /// Ends the WebSocket: a close frame with the reason when the server ends it.
    async fn close(mut self) {
        let server_ends = self.close.is_some();
        let frame = self.close.map(|(code, reason)| CloseFrame {
            code,
            reason: reason.into(),
        });
        let _ = compio::time::timeout(Duration::from_secs(2), self.ws().close(frame)).await;
        if server_ends {
            // The peer may still be sending (the rest of an oversized message). Closing the
            // socket with unread bytes makes the kernel answer with a reset, which can reach
            // the peer before it reads the close frame; what it sends is read out first, for
            // a bounded time.
            let drain = connection_loop::discard(self.ws().get_mut().get_mut(), usize::MAX);
            let _ = compio::time::timeout(Duration::from_secs(1), drain).await;
        }
    }

    /// The message whose header was just read, if it is exactly that frame of `len` body bytes.
    fn take_message(&mut self, len: usize) -> Result<Bytes, ReadFailure> {
        let message = std::mem::take(&mut self.message);
        if message.len() != HEADER_SIZE + len {
            return Err(self.malformed("message length is not the frame's size"));
        }
        Ok(message)
    }

    fn ws(&mut self) -> &mut WebSocketStream {
        self.ws.as_mut().expect("the WebSocket is rebuilt in place")
    }

    /// The next message (`None` once the stream ended), within the deadline the lease gives
    /// (see [`Lease::deadline`]), which changes while the message is read: when it does, the
    /// read goes on under the new one.
    async fn next_message(
        &mut self,
        idle: Duration,
    ) -> Result<Option<Result<Message, tungstenite::Error>>, ReadFailure> {
        let idle_deadline = Instant::now() + idle;
        let (lease, request_timeout) = (self.lease.clone(), self.request_timeout);
        let deadline = || lease.borrow().deadline(idle_deadline, request_timeout);
        let mut next = std::pin::pin!(self.ws().next());
        loop {
            let current = deadline();
            // The gate changes the lease only while the library reads, inside the read's poll.
            let read_or_changed = std::future::poll_fn(|context| {
                if let Poll::Ready(item) = next.as_mut().poll(context) {
                    return Poll::Ready(Some(item));
                }
                match deadline() == current {
                    true => Poll::Pending,
                    false => Poll::Ready(None),
                }
            });
            // Without a deadline (waiting for the budget) the wait is looked at again anyway.
            let wait = current.map_or(idle, |at| at.saturating_duration_since(Instant::now()));
            match compio::time::timeout(wait, read_or_changed).await {
                Ok(Some(item)) => return Ok(item),
                Ok(None) => continue,
                Err(_) if current.is_some_and(|at| Instant::now() >= at) => {
                    return Err(connection_loop::timed_out().into());
                }
                Err(_) => continue,
            }
        }
    }

    fn malformed(&mut self, reason: &'static str) -> ReadFailure {
        self.close = Some((CloseCode::Policy, reason));
        ReadFailure::Malformed(EvictionReason::InvalidRequestBodySize)
    }
}

impl FrameIo for MessageLink {
    async fn read_header(
        &mut self,
        idle: Duration,
    ) -> Result<Option<[u8; HEADER_SIZE]>, ReadFailure> {
        // What the last request did not take (a body refused unread).
        self.permit = None;
        loop {
            let message = match self.next_message(idle).await? {
                None => return Ok(None),
                Some(Ok(Message::Binary(message))) => {
                    // Taken for every data message, so the next is the next message's.
                    self.permit = self.lease.borrow_mut().take_ended();
                    message
                }
                // Answered by tungstenite.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) => return Ok(None),
                Some(Ok(Message::Text(_))) => {
                    drop(self.lease.borrow_mut().take_ended());
                    self.close = Some((CloseCode::Unsupported, "requests are binary messages"));
                    return Ok(None);
                }
                Some(Err(tungstenite::Error::Capacity(error))) => {
                    tracing::debug!("ws message refused: {error}");
                    self.close = Some((CloseCode::Size, "message too big"));
                    return Ok(None);
                }
                Some(Err(
                    tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed,
                )) => {
                    return Ok(None);
                }
                Some(Err(tungstenite::Error::Io(error))) => return Err(ReadFailure::Io(error)),
                Some(Err(error)) => {
                    tracing::debug!("ws protocol error: {error}");
                    self.close = Some((CloseCode::Protocol, "websocket protocol error"));
                    return Ok(None);
                }
            };
            if message.len() < HEADER_SIZE {
                return Err(self.malformed("message shorter than a frame header"));
            }
            let header = message[..HEADER_SIZE].try_into().expect("a whole header");
            self.message = message;
            return Ok(Some(header));
        }
    }

    /// The whole message is in already: a large one's bytes were reserved before the library
    /// read it ([`FrameIo::reserved`]).
    fn uncounted(&mut self, _len: usize) -> bool {
        true
    }

    fn reserved(&mut self) -> Option<BodyPermit> {
        self.permit.take()
    }

    async fn read_body(&mut self, len: usize, _within: Duration) -> Result<Vec<u8>, ReadFailure> {
        Ok(self.take_message(len)?[HEADER_SIZE..].to_vec())
    }

    async fn discard_body(&mut self, len: usize, _within: Duration) -> Result<(), ReadFailure> {
        // The whole message is in already (within websocket.max_message_size).
        self.permit = None;
        self.take_message(len).map(drop)
    }

    /// Rebuilds the WebSocket over the same stream with the limits for a connection with a
    /// session or without (tungstenite fixes them when it is built), and counts large messages
    /// in the budget once a session is bound. The gate lets the library read no further than
    /// the message it returned, so the library holds no byte of the next one (which would be
    /// lost with it), whatever the client sent meanwhile.
    async fn session_changed(&mut self, bound: bool) {
        let Some(ws) = self.ws.take() else {
            return;
        };
        let config = websocket_config(&self.settings, bound);
        self.lease.borrow_mut().set_counted(bound);
        let stream = ws.into_inner();
        self.ws = Some(WebSocketStream::from_raw_socket(stream, Role::Server, Some(config)).await);
    }

    async fn write_frame(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        let command = frame.get(ReplyHeader::COMMAND_OFFSET).copied();
        if command != Some(Command::Reply.to_repr()) && self.close.is_none() {
            self.close = Some((CloseCode::Policy, "evicted"));
        }
        let frame = Bytes::from(frame);
        let mut at = 0;
        while at < frame.len() {
            let end = (at + REPLY_MESSAGE_MAX).min(frame.len());
            self.ws()
                .send(Message::Binary(frame.slice(at..end)))
                .await
                .map_err(std::io::Error::other)?;
            at = end;
        }
        Ok(())
    }
}
