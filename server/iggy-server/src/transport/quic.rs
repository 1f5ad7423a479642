//! QUIC transport: one bidirectional stream per request carrying the TCP frame (256-byte header
//! and body), one reply frame back on the same stream, then FIN. A connection's streams are
//! served concurrently; they share the connection's session binding.

use super::connection_loop::{self, FrameIo, ReadFailure};
use super::tls;
use crate::config::Quic;
use crate::runtime::body_budget::UNCOUNTED_BODY_MAX;
use crate::runtime::connection::{Bound, Connection};
use crate::runtime::node::{ConnectionGuard, Node};
use crate::service::frame::HEADER_SIZE;
use compio::BufResult;
use compio::buf::IoBuf;
use compio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use compio::quic::{
    ConnectionId, ConnectionIdGenerator, Endpoint, EndpointConfig, IdleTimeout, RecvStream,
    SendStream, ServerConfig, TransportConfig, VarInt,
};
use iggy_generated::frames::EvictionReason;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A client's handshake must complete within this.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(10);

/// Builds the server configuration (certificate, transport parameters; a stream carries one
/// request of at most `max_frame` bytes) and binds the UDP endpoint, its stateless resets
/// derived from `reset_key` (the data directory keeps it, so the next process resets this
/// one's connections when their clients send again).
pub async fn bind(config: &Quic, max_frame: u32, reset_key: &[u8]) -> Result<Endpoint, String> {
    let server = server_config(config, max_frame)?;
    let socket = compio::net::UdpSocket::bind(config.address.as_str())
        .await
        .map_err(|error| error.to_string())?;
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let mut endpoint = EndpointConfig::new(Arc::new(reset_key));
    endpoint.cid_generator(|| Box::new(ResettableConnectionIds));
    Endpoint::new(socket, endpoint, Some(server), None).map_err(|error| error.to_string())
}

/// Random 8-byte connection ids, any of which a later process answers with a stateless reset.
/// Quinn's default generator signs its ids with a key of its own process, so the next process
/// would drop the packets of this one's clients unanswered. (Resets stay rate-limited, and
/// never larger than the packet that incited them.)
struct ResettableConnectionIds;

impl ConnectionIdGenerator for ResettableConnectionIds {
    fn generate_cid(&mut self) -> ConnectionId {
        ConnectionId::new(&rand::random::<[u8; 8]>())
    }

    fn cid_len(&self) -> usize {
        8
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The official client's QUIC mode that skips certificate validation (its default) offers
/// only the ECDSA P-256 SHA-256 signature scheme: with another key (RSA, P-384) its handshakes
/// all fail, and it retries for ever. Said at start; a client that validates certificates
/// connects.
fn warn_unless_the_sdk_can_verify(certificate: &tls::Certificate) {
    let Ok(key) = rustls::crypto::ring::sign::any_supported_type(&certificate.key) else {
        return;
    };
    let p256 = [rustls::SignatureScheme::ECDSA_NISTP256_SHA256];
    if key.choose_scheme(&p256).is_none() {
        tracing::warn!(
            "quic.certificate: the key ({:?}) does not sign with ECDSA P-256 SHA-256, the only \
             scheme the official SDK's QUIC client offers in its default mode (no certificate \
             validation): such clients cannot connect (one that validates certificates can); \
             use an ECDSA P-256 key, as the generated certificate does",
            key.algorithm()
        );
    }
}

fn server_config(config: &Quic, max_frame: u32) -> Result<ServerConfig, String> {
    let certificate = &config.certificate;
    let certificate = tls::Certificate::load_or_generate(
        "quic.certificate",
        certificate.self_signed,
        &certificate.cert_file,
        &certificate.key_file,
    )?;
    warn_unless_the_sdk_can_verify(&certificate);
    let crypto = tls::server_config(certificate, &[&rustls::version::TLS13])?;
    let crypto = compio::quic::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|error| format!("quic crypto: {error}"))?;
    let varint = |key: &str, value: u64| {
        VarInt::from_u64(value).map_err(|_| format!("quic.{key} = {value} is too large"))
    };
    // Checked here, granted once a session is bound (`grant_configured`).
    let streams = varint(
        "max_concurrent_bidi_streams",
        config.max_concurrent_bidi_streams,
    )?;
    let window = varint("receive_window", config.receive_window)?;
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(streams.min(VarInt::from_u32(UNBOUND_STREAMS)))
        // Clients open no unidirectional streams.
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .initial_mtu(config.initial_mtu)
        .send_window(config.send_window)
        .receive_window(window.min(VarInt::from_u32(UNBOUND_RECEIVE_WINDOW)))
        // The connection's window bounds what it holds unread (see `ReceiveWindow`); a stream's
        // admits its whole request, so a reserved body arrives within one round of credit.
        .stream_receive_window(window.max(VarInt::from_u32(max_frame)))
        .datagram_send_buffer_size(config.datagram_send_buffer_size as usize)
        .keep_alive_interval(
            (config.keep_alive_interval_ms > 0)
                .then(|| Duration::from_millis(config.keep_alive_interval_ms)),
        );
    let idle = match config.max_idle_timeout_ms {
        0 => None,
        ms => Some(
            IdleTimeout::try_from(Duration::from_millis(ms))
                .map_err(|_| format!("quic.max_idle_timeout_ms = {ms} is too large"))?,
        ),
    };
    transport.max_idle_timeout(idle);
    let mut server = ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport));
    Ok(server)
}

/// Streams a connection without a session may have open at once: its login, a session bind,
/// a ping. Each stream is a request whose body the server reads, so the configured
/// `quic.max_concurrent_bidi_streams` (10,000) would let one anonymous connection make the node
/// hold that many bodies.
const UNBOUND_STREAMS: u32 = 8;
/// The bytes a connection without a session may have in flight unread, all streams together.
const UNBOUND_RECEIVE_WINDOW: u32 = 1 << 20;

/// Bytes of small request bodies a connection's streams read at once without a reservation
/// from the node's budget: the SDK's concurrent polls, stores and heartbeats (a few hundred
/// bytes each) never wait behind large sends, and a connection holds little beside its
/// receive window.
const UNCOUNTED_PER_CONNECTION: usize = 1 << 20;

/// Raises a connection's stream and receive-window grants to the configured ones, once a
/// session is bound on it.
fn grant_configured(quic: &compio::quic::Connection, window: &ReceiveWindow, config: &Quic) {
    if let Ok(streams) = VarInt::from_u64(config.max_concurrent_bidi_streams) {
        quic.set_max_concurrent_bi_streams(streams);
    }
    window.set_base(config.receive_window);
}

/// A connection's receive window, the bytes its client may have sent that the server has not
/// read: a base (`quic.receive_window` once a session is bound, [`UNBOUND_RECEIVE_WINDOW`]
/// before) and the bytes of the bodies its streams reserved from the node's budget and are
/// reading. A body waiting for its reservation waits in the base, so a connection holds at most
/// its base beside the budget, and a reserved body still arrives whole without waiting for
/// credit. Before, a signed-in connection was granted the whole configured window (64 MiB),
/// which its stalled bodies could fill beside the budget.
struct ReceiveWindow {
    quic: compio::quic::Connection,
    base: Cell<u64>,
    reserved: Cell<u64>,
}

impl ReceiveWindow {
    /// The window of a connection without a session, as its transport config granted it.
    fn new(quic: compio::quic::Connection, config: &Quic) -> Self {
        let base = config.receive_window.min(u64::from(UNBOUND_RECEIVE_WINDOW));
        Self {
            quic,
            base: Cell::new(base),
            reserved: Cell::new(0),
        }
    }

    fn set_base(&self, base: u64) {
        self.base.set(base);
        self.grant();
    }

    /// Widens the window by the `bytes` of a reserved body until the returned guard is dropped
    /// (the body read, or its read given up).
    fn widen(self: &Rc<Self>, bytes: u64) -> Widened {
        self.reserved.set(self.reserved.get() + bytes);
        self.grant();
        Widened {
            window: self.clone(),
            bytes,
        }
    }

    /// Tells quinn the window: a larger one is credited at once; a smaller one withholds
    /// credit as the server reads, until it is paid back (credit given is never taken back).
    fn grant(&self) {
        let bytes = self.base.get().saturating_add(self.reserved.get());
        self.quic
            .set_receive_window(VarInt::from_u64(bytes).unwrap_or(VarInt::MAX));
    }
}

/// A reserved body's widening of its connection's window.
struct Widened {
    window: Rc<ReceiveWindow>,
    bytes: u64,
}

impl Drop for Widened {
    fn drop(&mut self) {
        let reserved = &self.window.reserved;
        reserved.set(reserved.get() - self.bytes);
        self.window.grant();
    }
}

/// Accepts connections until the endpoint closes; each connection runs on its own task.
pub async fn serve(endpoint: Endpoint, node: Rc<Node>) {
    while let Some(incoming) = endpoint.wait_incoming().await {
        let peer = incoming.remote_address();
        let Some(guard) = node.admit() else {
            super::connection_refused(&node, "quic", peer);
            refuse_at_capacity(incoming, &node);
            continue;
        };
        let node = node.clone();
        compio::runtime::spawn(async move {
            let connecting = match incoming.accept() {
                Ok(connecting) => connecting,
                Err(error) => {
                    node.log_tls_handshake_failed("quic", peer, &error);
                    return;
                }
            };
            let connection = match compio::time::timeout(HANDSHAKE_WITHIN, connecting).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(error)) => {
                    node.log_tls_handshake_failed("quic", peer, &error);
                    return;
                }
                Err(_) => {
                    tracing::debug!("quic {peer}: handshake timed out");
                    return;
                }
            };
            serve_connection(connection, peer, node, guard).await;
        })
        .detach();
    }
}

/// What a QUIC connection's streams share: the node's record of the connection and the session
/// it is bound to. The record closes when the connection and its last stream are done.
struct SharedConnection {
    node: Rc<Node>,
    id: u32,
    bound: Cell<Option<Bound>>,
    /// The configured stream and window grants were given (at the first bound session).
    granted: Cell<bool>,
    /// Bytes of small bodies its streams may still read without a reservation from the node's
    /// budget (see [`StreamLink::uncounted`]).
    uncounted: Rc<Cell<usize>>,
    window: Rc<ReceiveWindow>,
    _guard: ConnectionGuard,
}

impl SharedConnection {
    fn connection(&self) -> Connection {
        Connection {
            id: self.id,
            bound: self.bound.get(),
            reply_max: Some(self.node.shared.config.quic.max_reply_size as usize),
            ..Connection::default()
        }
    }
}

impl Drop for SharedConnection {
    fn drop(&mut self) {
        self.node.close_connection(&self.connection());
    }
}

/// Answers a connection above `limits.max_connections` on its first stream
/// ([`super::capacity_reply`]), then closes it; refused at its handshake when too many such
/// answers already run.
fn refuse_at_capacity(incoming: compio::quic::Incoming, node: &Rc<Node>) {
    let Some(slot) = super::refusal_slot(node) else {
        incoming.refuse();
        return;
    };
    compio::runtime::spawn(async move {
        let _slot = slot;
        let answer = async {
            let quic = incoming.accept().ok()?.await.ok()?;
            let (mut send, mut recv) = quic.accept_bi().await.ok()?;
            let BufResult(read, header) = recv.read_exact(Vec::with_capacity(HEADER_SIZE)).await;
            read.ok()?;
            let header: [u8; HEADER_SIZE] = header.try_into().ok()?;
            let _ = send.write_all(super::capacity_reply(&header)).await;
            let _ = send.finish();
            // Let the client read the answer before the close.
            let _ = compio::time::timeout(Duration::from_millis(500), send.stopped()).await;
            quic.close(VarInt::from_u32(0), b"connection limit reached");
            Some(())
        };
        let _ = compio::time::timeout(Duration::from_secs(2), answer).await;
    })
    .detach();
}

async fn serve_connection(
    quic: compio::quic::Connection,
    peer: std::net::SocketAddr,
    node: Rc<Node>,
    guard: ConnectionGuard,
) {
    let record = node.open_connection(peer.to_string(), "quic");
    let shared = Rc::new(SharedConnection {
        node: node.clone(),
        id: record.id,
        bound: Cell::new(record.bound),
        granted: Cell::new(false),
        uncounted: Rc::new(Cell::new(UNCOUNTED_PER_CONNECTION)),
        window: Rc::new(ReceiveWindow::new(quic.clone(), &node.shared.config.quic)),
        _guard: guard,
    });
    let idle = node.shared.config.limits.idle_timeout();
    loop {
        let (send, recv) = match compio::time::timeout(idle, quic.accept_bi()).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!("quic {peer}: closed: {error}");
                return;
            }
            Err(_) => {
                tracing::debug!("quic {peer}: idle, closed");
                quic.close(VarInt::from_u32(0), b"idle");
                return;
            }
        };
        let (shared, quic) = (shared.clone(), quic.clone());
        compio::runtime::spawn(serve_stream(send, recv, shared, quic)).detach();
    }
}

/// One request on its stream. A request that binds or unbinds the session (register, bind,
/// logout) updates what the connection's later streams see.
async fn serve_stream(
    send: SendStream,
    recv: RecvStream,
    shared: Rc<SharedConnection>,
    quic: compio::quic::Connection,
) {
    let mut connection = shared.connection();
    let bound_before = connection.bound.map(|bound| bound.session);
    let mut link = StreamLink {
        send,
        recv,
        uncounted: shared.uncounted.clone(),
        uncounted_taken: 0,
        window: shared.window.clone(),
        counted: false,
        answered: false,
        closing: false,
        header_within: shared.node.shared.config.limits.request_timeout(),
    };
    let result = connection_loop::serve_frames(&mut link, &shared.node, &mut connection).await;
    if connection.bound.map(|bound| bound.session) != bound_before {
        if bound_before.is_none() && !shared.granted.replace(true) {
            grant_configured(&quic, &shared.window, &shared.node.shared.config.quic);
        }
        shared.bound.set(connection.bound);
    }
    if let Err(error) = result {
        tracing::debug!("quic stream: {error}");
    }
    let _ = link.send.finish();
    if link.closing {
        // An eviction (or refused frame) ends the connection, as on TCP; its frame is let
        // through first.
        let _ = compio::time::timeout(Duration::from_secs(2), link.send.stopped()).await;
        quic.close(VarInt::from_u32(0), b"evicted");
    }
}

/// One stream: exactly one request frame in, one reply frame out.
struct StreamLink {
    send: SendStream,
    recv: RecvStream,
    /// The connection's allowance of small bodies read without a reservation, and what this
    /// stream's took of it (given back when the stream is done).
    uncounted: Rc<Cell<usize>>,
    uncounted_taken: usize,
    /// The connection's receive window, widened while a reserved body is read.
    window: Rc<ReceiveWindow>,
    /// The body is counted: reserved from the node's budget before it is read.
    counted: bool,
    /// The reply was written: the link has nothing more to read.
    answered: bool,
    /// The written frame was not a reply (an eviction): the connection closes.
    closing: bool,
    /// How long its header may take (`limits.request_timeout_ms`): a stream opens with the
    /// request's first bytes, so a header that stops short is cut then, as on TCP.
    header_within: Duration,
}

impl Drop for StreamLink {
    fn drop(&mut self) {
        let taken = std::mem::take(&mut self.uncounted_taken);
        self.uncounted.set(self.uncounted.get() + taken);
    }
}

/// A stream that ends before its frame does, or goes on after it.
fn short_or_long(error: std::io::Error) -> ReadFailure {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        ReadFailure::Malformed(EvictionReason::InvalidRequestBodySize)
    } else {
        ReadFailure::Io(error)
    }
}

impl FrameIo for StreamLink {
    /// A connection's streams are requests served at once: its small bodies are read without a
    /// reservation only within the connection's allowance, or it could hold as many as it has
    /// streams open (10,000 by default).
    fn uncounted(&mut self, len: usize) -> bool {
        let left = self.uncounted.get();
        if len > UNCOUNTED_BODY_MAX || len > left {
            self.counted = true;
            return false;
        }
        self.uncounted.set(left - len);
        self.uncounted_taken = len;
        true
    }

    async fn read_header(
        &mut self,
        idle: Duration,
    ) -> Result<Option<[u8; HEADER_SIZE]>, ReadFailure> {
        if self.answered {
            return Ok(None);
        }
        let within = idle.min(self.header_within);
        let BufResult(read, header) = compio::time::timeout(
            within,
            self.recv.read_exact(Vec::with_capacity(HEADER_SIZE)),
        )
        .await
        .map_err(|_| connection_loop::timed_out())?;
        read.map_err(short_or_long)?;
        Ok(Some(header.try_into().expect("a whole header")))
    }

    async fn read_body(&mut self, len: usize, within: Duration) -> Result<Vec<u8>, ReadFailure> {
        let _widened = self.counted.then(|| self.window.widen(len as u64));
        let read_all = async {
            let BufResult(read, body) = self.recv.read_exact(Vec::with_capacity(len)).await;
            read.map_err(short_or_long)?;
            // The frame must be the whole stream.
            let BufResult(extra, _) = self.recv.read(Vec::with_capacity(1).slice(..)).await;
            match extra? {
                0 => Ok(body),
                _ => Err(ReadFailure::Malformed(
                    EvictionReason::InvalidRequestBodySize,
                )),
            }
        };
        compio::time::timeout(within, read_all)
            .await
            .map_err(|_| connection_loop::timed_out())?
    }

    async fn discard_body(&mut self, len: usize, within: Duration) -> Result<(), ReadFailure> {
        let read_all = async {
            connection_loop::discard(&mut self.recv, len).await?;
            // The frame must be the whole stream.
            let BufResult(extra, _) = self.recv.read(Vec::with_capacity(1).slice(..)).await;
            match extra? {
                0 => Ok(()),
                _ => Err(ReadFailure::Malformed(
                    EvictionReason::InvalidRequestBodySize,
                )),
            }
        };
        compio::time::timeout(within, read_all)
            .await
            .map_err(|_| connection_loop::timed_out())?
    }

    async fn write_frame(&mut self, frame: Vec<u8>) -> std::io::Result<()> {
        use iggy_generated::frames::Command;
        let command = frame
            .get(iggy_generated::frames::ReplyHeader::COMMAND_OFFSET)
            .copied();
        self.closing = command != Some(Command::Reply.to_repr());
        self.answered = true;
        let BufResult(written, _) = self.send.write_all(frame).await;
        written?;
        Ok(())
    }
}
