//! The one connection loop every binary transport runs: read a request frame, admit its
//! header, dispatch it, write the reply; evict on a bad frame; apply the idle and request
//! timeouts. A transport supplies only how frames are carried ([`FrameIo`]): a TCP (or TLS)
//! byte stream, a QUIC stream, WebSocket messages.

use crate::runtime::body_budget::{BodyPermit, UNCOUNTED_BODY_MAX};
use crate::runtime::connection::Connection;
use crate::runtime::node::Node;
use crate::service::dispatch::Dispatched;
use crate::service::frame::{self, HEADER_SIZE};
use iggy_generated::commands;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{EvictionHeader, EvictionReason, Operation};
use iggy_generated::protocol;
use std::rc::Rc;
use std::time::Duration;

/// Why a request frame could not be read.
#[derive(Debug)]
pub enum ReadFailure {
    /// The link failed or timed out; it closes without an answer.
    Io(std::io::Error),
    /// The transport's container does not hold one whole frame (a message shorter than a
    /// header, or whose length is not the header's size): evicted with this reason.
    Malformed(EvictionReason),
    /// A byte stream's header stopped `received` bytes in (its first ones in `head`) and the
    /// rest did not come `within` the request timeout: closed without an answer, and logged
    /// (`Node::log_header_cut_short`), since a client of another framing waits there.
    HeaderCutShort {
        received: usize,
        head: [u8; 8],
        within: Duration,
    },
}

impl From<std::io::Error> for ReadFailure {
    fn from(error: std::io::Error) -> Self {
        Self::Io(error)
    }
}

/// How one transport carries request and reply frames.
#[allow(async_fn_in_trait)] // Single-threaded runtime: the futures need not be Send.
pub trait FrameIo {
    /// Whether the `len` body bytes of the request whose header was just read are read without
    /// a reservation from the node's budget of request bodies: a small body on a link that
    /// serves one request at a time (see `runtime::body_budget::UNCOUNTED_BODY_MAX`).
    fn uncounted(&mut self, len: usize) -> bool {
        len <= UNCOUNTED_BODY_MAX
    }

    /// The reservation from the node's budget already held for the body of the request whose
    /// header was just read: a transport that must reserve before it reads a frame header
    /// (WebSocket, whose library reads a whole message first) hands it over here.
    fn reserved(&mut self) -> Option<BodyPermit> {
        None
    }

    /// The next request's header, waiting at most `idle` for it; `None` when the peer closed
    /// (or, for a one-request link, its request was answered).
    async fn read_header(
        &mut self,
        idle: Duration,
    ) -> Result<Option<[u8; HEADER_SIZE]>, ReadFailure>;

    /// The `len` body bytes of the request whose header was just read, within `within`.
    async fn read_body(&mut self, len: usize, within: Duration) -> Result<Vec<u8>, ReadFailure>;

    /// Reads past the `len` body bytes of the request whose header was just read, within
    /// `within`, keeping none of them.
    async fn discard_body(&mut self, len: usize, within: Duration) -> Result<(), ReadFailure>;

    /// Writes one reply (or eviction) frame.
    async fn write_frame(&mut self, frame: Vec<u8>) -> std::io::Result<()>;

    /// The request just served bound a session to the connection (`bound`) or ended it; called
    /// before its reply is written. A transport whose limits depend on it adjusts them here.
    async fn session_changed(&mut self, bound: bool) {
        let _ = bound;
    }
}

/// Serves requests from `link` until the peer closes, a frame is refused (evicted) or the link
/// fails.
pub async fn serve_frames(
    link: &mut impl FrameIo,
    node: &Rc<Node>,
    connection: &mut Connection,
) -> std::io::Result<()> {
    let limits = &node.shared.config.limits;
    let (idle, request_timeout) = (limits.idle_timeout(), limits.request_timeout());
    loop {
        let header = match link.read_header(idle).await {
            Ok(Some(header)) => header,
            Ok(None) => return Ok(()),
            Err(ReadFailure::Io(error)) => return Err(error),
            Err(ReadFailure::HeaderCutShort {
                received,
                head,
                within,
            }) => {
                node.log_header_cut_short(connection.id, received, head, within);
                return Ok(());
            }
            Err(ReadFailure::Malformed(reason)) => {
                // No whole header: no client to name.
                evict(idle, link, node, connection, frame::eviction(0, reason)).await;
                return Ok(());
            }
        };
        // A connection without a session can only register, bind or ping: anything larger
        // than those is refused unread, so anonymous peers cannot make the node hold bodies of
        // up to limits.max_frame_size each until the request timeout.
        let max_frame = match connection.bound {
            Some(_) => limits.max_frame_size,
            None => limits.max_frame_size.min(UNBOUND_FRAME_MAX),
        };
        let admitted = match frame::admit_header(&header, max_frame) {
            Ok(admitted) => admitted,
            Err(frame::HeaderError::OverLimit(over)) => {
                let refused = if over.header.size <= limits.max_frame_size && !registers(&over) {
                    tracing::debug!(
                        "request of {} bytes without a session refused unread",
                        over.header.size
                    );
                    ErrorCode::Unauthenticated
                } else {
                    tracing::debug!(
                        "request of {} bytes over limits.max_frame_size refused",
                        over.header.size
                    );
                    ErrorCode::TooBigMessagePayload
                };
                // Answered before the body is read past: a client that sends no body (or one
                // of gigabytes) learns why at once; the link goes on once the body is passed.
                write_within(
                    idle,
                    link,
                    frame::error_reply(&over.header, over.operation, refused),
                )
                .await?;
                match link.discard_body(over.body_len, request_timeout).await {
                    Ok(()) => {}
                    Err(ReadFailure::Io(error)) => return Err(error),
                    Err(ReadFailure::HeaderCutShort { .. }) => return Err(timed_out()),
                    Err(ReadFailure::Malformed(reason)) => {
                        let eviction = frame::eviction(over.header.client, reason);
                        evict(idle, link, node, connection, eviction).await;
                        return Ok(());
                    }
                }
                continue;
            }
            Err(error) => {
                tracing::debug!("refused request header: {error:?}");
                let client = frame::client_of(&header);
                let eviction = frame::eviction(client, error.eviction_reason());
                evict(idle, link, node, connection, eviction).await;
                return Ok(());
            }
        };
        // Within the node's budget of request bodies (`runtime::body_budget`): a body waits
        // unread until its bytes fit; the wait is not part of its read's deadline.
        let permit = match link.reserved() {
            Some(permit) => Some(permit),
            None if link.uncounted(admitted.body_len) => None,
            None => Some(node.body_budget.reserve(admitted.body_len as u64).await),
        };
        let body = match link.read_body(admitted.body_len, request_timeout).await {
            Ok(body) => body,
            // Refused unexecuted, so the client may send it again (a QUIC stream left without
            // an answer waits out the client's deadline as an unknown outcome); the link
            // closes, since the rest of a byte stream's body may still come.
            Err(ReadFailure::Io(error)) if error.kind() == std::io::ErrorKind::TimedOut => {
                tracing::warn!(
                    "connection {}: a request body of {} bytes did not arrive within \
                     limits.request_timeout_ms ({} ms): refused unexecuted (58) and the link \
                     closed; raise limits.request_timeout_ms for clients this slow",
                    connection.id,
                    admitted.body_len,
                    request_timeout.as_millis()
                );
                refuse_unexecuted(idle, link, &admitted).await;
                return Err(error);
            }
            Err(ReadFailure::Io(error)) => return Err(error),
            // Only a header read says that; a body cut short times out.
            Err(ReadFailure::HeaderCutShort { .. }) => return Err(timed_out()),
            Err(ReadFailure::Malformed(reason)) => {
                let eviction = frame::eviction(admitted.header.client, reason);
                evict(idle, link, node, connection, eviction).await;
                return Ok(());
            }
        };
        let trace = tracing::enabled!(tracing::Level::DEBUG)
            .then(|| RequestTrace::begin(connection, &admitted, &body));
        // In flight until its reply is written: the drain at shutdown waits for the reply, not
        // only the execution (a committed request whose reply was lost is an uncertain outcome
        // the client resends). Once the node stops, refused unexecuted and the link closed.
        let Some(_in_flight) = node.client_request_started() else {
            refuse_unexecuted(idle, link, &admitted).await;
            return Ok(());
        };
        let was_bound = connection.bound.is_some();
        let dispatched = crate::service::dispatch::dispatch_within(
            node,
            connection,
            admitted,
            body,
            request_timeout,
        )
        .await;
        // The body was handed off and its request answered.
        drop(permit);
        if let Some(trace) = trace {
            trace.end(connection, &dispatched);
        }
        if connection.bound.is_some() != was_bound {
            link.session_changed(connection.bound.is_some()).await;
        }
        match dispatched {
            Dispatched::Reply(bytes) => write_within(idle, link, bytes).await?,
            Dispatched::HeldReply(bytes, held) => {
                write_within(idle, link, bytes).await?;
                drop(held);
            }
            Dispatched::Close(bytes) => {
                evict(idle, link, node, connection, bytes).await;
                return Ok(());
            }
        }
    }
}

/// Writes an eviction, the connection's last frame, once the node logged it.
async fn evict(
    idle: Duration,
    link: &mut impl FrameIo,
    node: &Node,
    connection: &Connection,
    eviction: Vec<u8>,
) {
    node.log_eviction(connection.id, &eviction);
    let _ = write_within(idle, link, eviction).await;
}

/// The largest request a connection without a session may send, header included: its
/// Register, BindSession and Ping take a few hundred bytes (a login's client context is a short
/// name), far below this.
pub const UNBOUND_FRAME_MAX: u32 = 64 * 1024;

/// A login or session bind, whose refusal for its size says so (the other requests of a
/// connection without a session would be answered Unauthenticated whatever their size).
fn registers(admitted: &frame::Admitted) -> bool {
    const BIND_SESSION_CODE: u32 = 15;
    admitted.operation == Operation::Register
        || (admitted.operation == Operation::NonReplicated
            && admitted.non_replicated_code() == BIND_SESSION_CODE)
}

/// Writes `frame` to `link` within `idle` (see [`taken_within`]).
/// Answers `admitted` TransientNotAccepted (58): nothing of it ran, so the client may send it
/// again.
async fn refuse_unexecuted(idle: Duration, link: &mut impl FrameIo, admitted: &frame::Admitted) {
    let reply = frame::error_reply(
        &admitted.header,
        admitted.operation,
        ErrorCode::TransientNotAccepted,
    );
    let _ = write_within(idle, link, reply).await;
}

async fn write_within(
    idle: Duration,
    link: &mut impl FrameIo,
    frame: Vec<u8>,
) -> std::io::Result<()> {
    taken_within(idle, "reply", link.write_frame(frame)).await
}

/// Runs `write`, the write of a `what` (reply, response) to a client, failing with TimedOut
/// when the client has not taken all of it within `idle` (`limits.idle_timeout_secs`): a
/// client that stops reading would otherwise keep its connection and what it asked for (up to
/// a whole poll) in memory for good.
pub async fn taken_within(
    idle: Duration,
    what: &str,
    write: impl std::future::Future<Output = std::io::Result<()>>,
) -> std::io::Result<()> {
    match compio::time::timeout(idle, write).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "{what} not taken within {}s (limits.idle_timeout_secs)",
                idle.as_secs()
            ),
        )),
    }
}

/// A timeout as the loop reports it.
pub fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no request in time")
}

/// The debug line of one request: what it is, taken before dispatch (the body moves into it),
/// then its status and duration once answered.
struct RequestTrace {
    started: std::time::Instant,
    session: Option<u64>,
    command: String,
    /// Whether a committed reply carries its result in the body (`frame::answered_status`).
    result_framed: bool,
    partition: Option<u32>,
}

impl RequestTrace {
    fn begin(connection: &Connection, admitted: &frame::Admitted, body: &[u8]) -> Self {
        let command = command_of(connection, admitted);
        let name = match (command, admitted.operation) {
            (Some(command), _) => command.name.to_string(),
            (None, Operation::NonReplicated) => {
                format!("unknown command {}", admitted.non_replicated_code())
            }
            (None, operation) => format!("{operation:?}"),
        };
        Self {
            started: std::time::Instant::now(),
            session: connection.bound.map(|bound| bound.session),
            command: name,
            result_framed: command.is_some_and(|command| command.result_framed),
            partition: command.and_then(|command| partition_of(command, body)),
        }
    }

    /// `status` is the reply's status code (0 = success) with `error` naming a failure; an
    /// eviction has `evicted` with its reason instead.
    fn end(self, connection: &Connection, dispatched: &Dispatched) {
        let (status, evicted) = match dispatched {
            Dispatched::Reply(bytes) | Dispatched::HeldReply(bytes, _) => {
                (frame::answered_status(bytes, self.result_framed), None)
            }
            Dispatched::Close(bytes) => {
                let reason = bytes
                    .get(EvictionHeader::REASON_OFFSET)
                    .and_then(|reason| EvictionReason::from_repr(*reason));
                (None, Some(format!("{reason:?}")))
            }
        };
        let error = status
            .filter(|status| *status != 0)
            .and_then(ErrorCode::from_code)
            .map(ErrorCode::name);
        tracing::debug!(
            connection = connection.id,
            // A register's session is the one it bound.
            session = self
                .session
                .or(connection.bound.map(|bound| bound.session)),
            command = %self.command,
            partition = self.partition,
            status,
            error,
            evicted,
            duration = ?self.started.elapsed(),
            "request"
        );
    }
}

/// The command row of a request: by its code for NonReplicated (in the session's protocol),
/// else by its operation when the operation names one command.
fn command_of(
    connection: &Connection,
    admitted: &frame::Admitted,
) -> Option<&'static commands::CommandInfo> {
    if admitted.operation == Operation::NonReplicated {
        let version = connection
            .bound
            .map_or(protocol::CURRENT.packed(), |bound| bound.protocol);
        return commands::lookup(admitted.non_replicated_code(), version);
    }
    let operation = format!("{:?}", admitted.operation);
    let mut rows = commands::COMMANDS
        .iter()
        .filter(|command| command.operation == operation);
    let first = rows.next()?;
    rows.all(|command| command.name == first.name)
        .then_some(first)
}

/// The partition a request names, if it names one.
fn partition_of(command: &commands::CommandInfo, body: &[u8]) -> Option<u32> {
    use iggy_generated::payloads::{
        DeleteConsumerOffsetRequest, GetConsumerOffsetRequest, GetPartitionRouteRequest,
        OptionalPartitionId, PollMessagesRequest, SendMessagesRequest, StoreConsumerOffsetRequest,
    };
    use iggy_wire::WireDecode;
    let optional = |id: OptionalPartitionId| (id.has == 1).then_some(id.partition_id);
    match command.request {
        "SendMessagesRequest" => {
            let partitioning = SendMessagesRequest::decode_exact(body).ok()?.partitioning;
            let value: [u8; 4] = partitioning.value.try_into().ok()?;
            (partitioning.kind == 2).then_some(u32::from_le_bytes(value))
        }
        "PollMessagesRequest" => {
            optional(PollMessagesRequest::decode_exact(body).ok()?.partition_id)
        }
        "GetConsumerOffsetRequest" => optional(
            GetConsumerOffsetRequest::decode_exact(body)
                .ok()?
                .partition_id,
        ),
        "StoreConsumerOffsetRequest" => optional(
            StoreConsumerOffsetRequest::decode_exact(body)
                .ok()?
                .partition_id,
        ),
        "DeleteConsumerOffsetRequest" => optional(
            DeleteConsumerOffsetRequest::decode_exact(body)
                .ok()?
                .partition_id,
        ),
        "GetPartitionRouteRequest" => Some(
            GetPartitionRouteRequest::decode_exact(body)
                .ok()?
                .partition_id,
        ),
        _ => None,
    }
}

/// Reads and drops `len` bytes of `reader` in pieces of at most 64 KiB; an end of stream
/// before them is a body shorter than its header said.
pub async fn discard(
    reader: &mut impl compio::io::AsyncRead,
    len: usize,
) -> Result<(), ReadFailure> {
    use compio::buf::{BufResult, IntoInner, IoBuf};
    const PIECE: usize = 64 * 1024;
    let mut left = len;
    let mut buffer = Vec::with_capacity(PIECE.min(len));
    while left > 0 {
        let want = left.min(PIECE);
        buffer.clear();
        let BufResult(read, returned) = reader.read(buffer.slice(..want)).await;
        buffer = returned.into_inner();
        match read? {
            0 => {
                return Err(ReadFailure::Malformed(
                    EvictionReason::InvalidRequestBodySize,
                ));
            }
            n => left -= n,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_generated::frames::{Command, RequestHeader};

    fn admitted(operation: Operation, code: u32) -> frame::Admitted {
        let header = RequestHeader {
            command: Command::Request,
            size: HEADER_SIZE as u32,
            client: 7,
            operation: operation.to_repr(),
            reserved: code.to_le_bytes(),
            ..Default::default()
        };
        frame::admit_header(&header.to_bytes(), u32::MAX).unwrap()
    }

    #[test]
    fn requests_are_named_by_code_or_operation() {
        let connection = Connection::default();
        let name = |operation, code| {
            command_of(&connection, &admitted(operation, code)).map(|command| command.name)
        };
        assert_eq!(name(Operation::NonReplicated, 1), Some("ping"));
        assert_eq!(name(Operation::NonReplicated, 100), Some("message.poll"));
        assert_eq!(name(Operation::NonReplicated, 9999), None);
        assert_eq!(name(Operation::SendMessages, 0), Some("message.send"));
        assert_eq!(name(Operation::CreateStream, 0), Some("stream.create"));
        // 40 and 45 share the Register operation: the line says Register.
        assert_eq!(name(Operation::Register, 0), None);
        let trace = RequestTrace::begin(&connection, &admitted(Operation::Register, 0), &[]);
        assert_eq!(trace.command, "Register");
        let trace =
            RequestTrace::begin(&connection, &admitted(Operation::NonReplicated, 9999), &[]);
        assert_eq!(trace.command, "unknown command 9999");
    }

    #[test]
    fn the_partition_is_read_from_requests_that_name_one() {
        use iggy_generated::payloads::{
            Consumer, GetConsumerOffsetRequest, GetPartitionRouteRequest, Identifier,
            OptionalPartitionId,
        };
        use iggy_wire::WireEncode;
        let id = |value: &'static [u8]| Identifier { kind: 1, value };
        let command = |code| commands::lookup(code, protocol::CURRENT.packed()).unwrap();
        let offset = |has, partition_id| {
            GetConsumerOffsetRequest {
                consumer: Consumer {
                    kind: 1,
                    id: id(&[1, 0, 0, 0]),
                },
                stream_id: id(&[2, 0, 0, 0]),
                topic_id: id(&[3, 0, 0, 0]),
                partition_id: OptionalPartitionId { has, partition_id },
            }
            .to_wire_bytes()
        };
        assert_eq!(partition_of(command(120), &offset(1, 4)), Some(4));
        assert_eq!(partition_of(command(120), &offset(0, 4)), None);
        let route = GetPartitionRouteRequest {
            stream_id: id(&[2, 0, 0, 0]),
            topic_id: id(&[3, 0, 0, 0]),
            partition_id: 9,
        }
        .to_wire_bytes();
        assert_eq!(partition_of(command(105), &route), Some(9));
        assert_eq!(partition_of(command(1), &[]), None);
        // An undecodable body names no partition (its reply says what was wrong).
        assert_eq!(partition_of(command(120), &[1, 2, 3]), None);
    }
}
