//! The HTTP REST API: HTTP/1.1 with keep-alive on a compio listener, JSON in and out. Routes come
//! from the generated table (spec/http.spec); each runs its command through the same service
//! layer as the binary transports (`api`), translating JSON to the command's binary request and
//! its binary reply back to JSON. Access tokens ride on VSR sessions (`session`).
//!
//! Bodies are read by `content-length` only (the official client always sends one); a chunked
//! body is refused with 411. A request whose head and body exceed `http.max_request_size` gets
//! 413 and the connection closes.

mod api;
mod json;
pub mod jwt;
#[cfg(test)]
mod openapi_tests;
pub mod session;

use crate::runtime::body_budget::UNCOUNTED_BODY_MAX;
use crate::runtime::connection::Routing;
use crate::runtime::node::Node;
use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::TcpListener;
use compio::tls::TlsAcceptor;
use std::rc::Rc;
use std::time::Duration;

/// Accepts connections until the listener fails; each connection runs on its own task. With
/// `tls` (HTTPS), each connection first completes a TLS handshake within the request timeout.
pub async fn serve(
    listener: TcpListener,
    node: Rc<Node>,
    api: Rc<session::HttpState>,
    tls: Option<TlsAcceptor>,
) {
    let transport = if tls.is_some() { "https" } else { "http" };
    // Sessions whose tokens all expired are let go even when no request comes.
    let (sweeper_node, sweeper) = (node.clone(), api.clone());
    compio::runtime::spawn(async move {
        loop {
            compio::time::sleep(std::time::Duration::from_secs(1)).await;
            sweeper.sweep(&sweeper_node.shared);
        }
    })
    .detach();
    loop {
        let (stream, peer, guard) = crate::transport::accept(&listener, &node, transport).await;
        let Some(guard) = guard else {
            // A TLS client would need a handshake to read the refusal: it is closed instead.
            if tls.is_some() {
                continue;
            }
            let mut stream = stream;
            let idle = node.shared.config.limits.idle_timeout();
            let reply = Response::error(
                503,
                &api::refusal(iggy_generated::errors::ErrorCode::CannotEstablishConnection),
            );
            compio::runtime::spawn(async move {
                let _ = send(idle, &mut stream, reply.encode(None, &[], true)).await;
            })
            .detach();
            continue;
        };
        let (node, api, tls) = (node.clone(), api.clone(), tls.clone());
        compio::runtime::spawn(async move {
            let _guard = guard;
            let mut connection = node.open_connection(peer.to_string(), transport);
            // The HTTP client talks to this node only: it cannot follow a NotPrimary.
            connection.routing = Routing::ByServer;
            let result = match tls {
                None => serve_connection(stream, &node, &api, &mut connection).await,
                Some(acceptor) => {
                    let within = node.shared.config.limits.request_timeout();
                    match compio::time::timeout(within, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, &node, &api, &mut connection).await
                        }
                        Ok(Err(error)) => {
                            node.log_tls_handshake_failed(transport, peer, &error);
                            Err(error)
                        }
                        Err(_) => Err(crate::transport::connection_loop::timed_out()),
                    }
                }
            };
            if let Err(error) = result {
                tracing::debug!("{transport} {peer}: closed: {error}");
            }
            connection.bound = None;
            node.close_connection(&connection);
        })
        .detach();
    }
}

/// One parsed request.
pub struct Request {
    pub method: String,
    /// The path without its query, still percent-encoded.
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One response: status, extra headers, body.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    /// The node's budget (`runtime::body_budget`) held for this body until it is written: a
    /// poll's, whose reply was built within it, as over the binary transports.
    pub held: Option<crate::runtime::body_budget::BodyPermit>,
}

impl Response {
    pub fn json(status: u16, body: Vec<u8>) -> Self {
        Self {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
            held: None,
        }
    }

    pub fn empty(status: u16) -> Self {
        Self::json(status, Vec::new())
    }

    pub fn error(status: u16, body: &impl serde::Serialize) -> Self {
        Self::json(
            status,
            serde_json::to_vec(body).expect("error body serializes"),
        )
    }

    fn reason(status: u16) -> &'static str {
        match status {
            200 => "OK",
            201 => "Created",
            202 => "Accepted",
            204 => "No Content",
            400 => "Bad Request",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            411 => "Length Required",
            413 => "Payload Too Large",
            429 => "Too Many Requests",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "",
        }
    }

    /// The response bytes; `cors` adds the CORS headers for a request from that origin.
    fn encode(
        &self,
        origin: Option<&str>,
        cors: &[(&'static str, String)],
        close: bool,
    ) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, Self::reason(self.status));
        if self.status != 204 {
            head.push_str(&format!(
                "content-type: {}\r\ncontent-length: {}\r\n",
                self.content_type,
                self.body.len()
            ));
        }
        for (name, value) in self
            .headers
            .iter()
            .chain(if origin.is_some() { cors } else { &[] })
        {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if close {
            head.push_str("connection: close\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if self.status != 204 {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

const HEADERS_MAX: usize = 64;
const READ_CHUNK: usize = 16 * 1024;

enum Head {
    /// A whole head of `len` bytes.
    Complete(Request, usize, usize),
    Partial,
}

fn parse_head(buffer: &[u8]) -> Result<Head, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buffer) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Head::Partial),
        Err(_) => return Err("malformed request head"),
    };
    let target = request.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let parsed = Request {
        method: request.method.unwrap_or("").to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: Vec::new(),
    };
    // Repeats must agree: with two lengths a proxy in front could end the body elsewhere and
    // read the rest as another request.
    let mut content_length = None;
    for (_, value) in parsed
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("content-length"))
    {
        let length = value
            .trim()
            .parse::<usize>()
            .map_err(|_| "bad content-length")?;
        if content_length.is_some_and(|first| first != length) {
            return Err("conflicting content-length headers");
        }
        content_length = Some(length);
    }
    let content_length = content_length.unwrap_or(0);
    if parsed
        .header("transfer-encoding")
        .is_some_and(|te| !te.trim().eq_ignore_ascii_case("identity"))
    {
        return Err(CHUNKED_REFUSED);
    }
    Ok(Head::Complete(parsed, len, content_length))
}

/// Why a request whose body is sent in chunks is refused (411): bodies are read by their
/// Content-Length, which the official clients always send.
const CHUNKED_REFUSED: &str =
    "a chunked request body is not accepted: send the body with a Content-Length";

/// The most of a refused body [`linger`] takes before closing.
const LINGER_BYTES_MAX: usize = 64 << 20;

/// After a request refused unread, takes and drops what its client still sends of the body,
/// up to `left` bytes within `within`, before the connection closes: closed at once, the body
/// still arriving made the kernel reset the connection, which often destroyed the refusal
/// before the client read it (the official client then reported an outcome unknown, 57, for
/// a request nothing ran).
async fn linger<S: AsyncRead>(stream: &mut S, left: usize, within: Duration) {
    let drain = crate::transport::connection_loop::discard(stream, left);
    // A close or an error ends it as the timeout does: the connection closes next.
    let _ = compio::time::timeout(within, drain).await;
}

/// Writes `bytes` and flushes them (a TLS stream buffers records until flushed), within `idle`
/// (see `connection_loop::taken_within`).
async fn send<S: AsyncWrite>(
    idle: Duration,
    stream: &mut S,
    bytes: Vec<u8>,
) -> std::io::Result<()> {
    let written = async {
        let BufResult(written, _) = stream.write_all(bytes).await;
        written?;
        stream.flush().await
    };
    crate::transport::connection_loop::taken_within(idle, "response", written).await
}

async fn serve_connection<S: AsyncRead + AsyncWrite>(
    mut stream: S,
    node: &Rc<Node>,
    api: &Rc<session::HttpState>,
    connection: &mut crate::runtime::connection::Connection,
) -> std::io::Result<()> {
    let limits = &node.shared.config.limits;
    let (idle, body_timeout) = (limits.idle_timeout(), limits.request_timeout());
    let max = node.shared.config.http.max_request_size as usize;
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "no request in time");
    let mut pending: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        // A head must arrive whole within the request timeout (or the idle timeout, if
        // shorter) from its first byte, as a binary frame's header must on TCP: a slow-loris
        // head holds its connection no longer (the idle timeout alone, 12 times as long by
        // default, held it).
        let mut head_begun: Option<std::time::Instant> =
            (!pending.is_empty()).then(std::time::Instant::now);
        let (request, head_len, body_len) = loop {
            match parse_head(&pending) {
                Ok(Head::Complete(request, head_len, body_len)) => {
                    break (request, head_len, body_len);
                }
                Ok(Head::Partial) if pending.len() > max => {
                    let reply = Response::error(
                        413,
                        &api::refusal_text(
                            413,
                            "request_too_large",
                            "request head exceeds http.max_request_size",
                        ),
                    );
                    let _ = send(idle, &mut stream, reply.encode(None, &[], true)).await;
                    return Ok(());
                }
                Ok(Head::Partial) => {}
                Err(why) => {
                    let (status, code) = match why {
                        CHUNKED_REFUSED => (411, "length_required"),
                        _ => (400, "bad_request"),
                    };
                    let reply =
                        Response::error(status, &api::refusal_text(status as u32, code, why));
                    let _ = send(idle, &mut stream, reply.encode(None, &[], true)).await;
                    return Ok(());
                }
            }
            pending.reserve(READ_CHUNK);
            let have = pending.len();
            let wait = head_begun.map_or(idle, |begun| {
                body_timeout.min(idle).saturating_sub(begun.elapsed())
            });
            let BufResult(read, buffer) =
                compio::time::timeout(wait, stream.read(pending.slice(have..)))
                    .await
                    .map_err(|_| timed_out())?;
            pending = buffer.into_inner();
            head_begun.get_or_insert_with(std::time::Instant::now);
            if read? == 0 {
                return Ok(());
            }
        };
        let origin = request.header("origin").map(str::to_string);
        let cors = api.cors_headers(origin.as_deref());
        // Refused unread: the body may be large (over http.max_request_size, or over what a
        // request without a login may send); the client is told why, then the connection closes.
        let unread = if head_len + body_len > max {
            Some(Response::error(
                413,
                &api::refusal_text(
                    413,
                    "request_too_large",
                    "request exceeds http.max_request_size",
                ),
            ))
        } else if body_len > api::ANONYMOUS_BODY_MAX {
            api::refused_unread(api, &request)
        } else {
            None
        };
        if let Some(reply) = unread {
            let _ = send(
                idle,
                &mut stream,
                reply.encode(origin.as_deref(), &cors, true),
            )
            .await;
            let unsent = body_len.saturating_sub(pending.len().saturating_sub(head_len));
            linger(&mut stream, unsent.min(LINGER_BYTES_MAX), body_timeout).await;
            return Ok(());
        }
        // Within the node's budget of request bodies, as on the binary transports: a large
        // body waits unread (and unasked for, under `expect: 100-continue`) until it fits.
        let permit = match body_len > UNCOUNTED_BODY_MAX {
            true => Some(node.body_budget.reserve(body_len as u64).await),
            false => None,
        };
        let mut request = request;
        let frame_len = head_len + body_len;
        if pending.len() >= frame_len {
            request.body = pending[head_len..frame_len].to_vec();
            pending.drain(..frame_len);
        } else {
            // curl and browsers may wait for this before a large body.
            if request
                .header("expect")
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("100-continue"))
            {
                send(idle, &mut stream, b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()).await?;
            }
            let mut body = Vec::with_capacity(body_len);
            body.extend_from_slice(&pending[head_len..]);
            pending.clear();
            let have = body.len();
            let BufResult(read, filled) =
                compio::time::timeout(body_timeout, stream.read_exact(body.slice(have..)))
                    .await
                    .map_err(|_| timed_out())?;
            read?;
            request.body = filled.into_inner();
        }
        let close = request
            .header("connection")
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("close"));
        // Counted for the drain at shutdown, like a TCP request, until its response is written;
        // once the node stops, refused unexecuted (503, which the client resends).
        let Some(in_flight) = node.client_request_started() else {
            let stopping = api::stopping_response();
            let _ = send(
                idle,
                &mut stream,
                stopping.encode(origin.as_deref(), &cors, true),
            )
            .await;
            return Ok(());
        };
        let started = std::time::Instant::now();
        let mut response = api::handle(node, api, connection, &request).await;
        // The body is freed with its reservation, not once the response is taken.
        drop(std::mem::take(&mut request.body));
        drop(permit);
        // As a binary request's line; the path without its query.
        tracing::debug!(
            connection = connection.id,
            session = connection.bound.map(|bound| bound.session),
            method = %request.method,
            path = %request.path,
            status = response.status,
            duration = ?started.elapsed(),
            "http request"
        );
        // A token's session is bound for the request only; the connection keeps none.
        connection.bound = None;
        let mut bytes = response.encode(origin.as_deref(), &cors, close);
        if request.method == "HEAD" && response.status != 204 {
            // The GET's head, its Content-Length included, without the body (RFC 9110 9.3.2).
            bytes.truncate(bytes.len() - response.body.len());
        }
        // Only the encoded copy waits on a slow reader, within what the budget holds for it.
        let mut held = response.held.take();
        drop(response);
        if let Some(held) = held.as_mut() {
            held.resize(bytes.len() as u64);
        }
        send(idle, &mut stream, bytes).await?;
        drop(held);
        drop(in_flight);
        if close {
            return Ok(());
        }
    }
}
