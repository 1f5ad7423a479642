//! TCP transport: frames are a 256-byte request header then `size - 256` body bytes. The
//! transport only moves bytes; admission and dispatch live in `frame` and `dispatch`.

use crate::runtime::connection::Connection;
use crate::runtime::node::Node;
use crate::service::dispatch::Dispatched;
use crate::service::frame::{self, HEADER_SIZE};
use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use iggy_generated::commands;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{EvictionHeader, EvictionReason, Operation, ReplyHeader};
use iggy_generated::protocol;
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
                    let client = frame::client_of(&header);
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
                let client = frame::client_of(&header);
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
        let trace = tracing::enabled!(tracing::Level::DEBUG)
            .then(|| RequestTrace::begin(connection, &admitted, &body));
        node.in_flight.set(node.in_flight.get() + 1);
        let dispatched = crate::service::dispatch::dispatch_within(
            node,
            connection,
            admitted,
            body,
            request_timeout,
        )
        .await;
        node.in_flight.set(node.in_flight.get() - 1);
        if let Some(trace) = trace {
            trace.end(connection, &dispatched);
        }
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

/// The debug line of one request: what it is, taken before dispatch (the body moves into it),
/// then its status and duration once answered.
struct RequestTrace {
    started: std::time::Instant,
    session: Option<u64>,
    command: String,
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
            partition: command.and_then(|command| partition_of(command, body)),
        }
    }

    /// `status` is the reply's status code (0 = success) with `error` naming a failure; an
    /// eviction has `evicted` with its reason instead.
    fn end(self, connection: &Connection, dispatched: &Dispatched) {
        let (status, evicted) = match dispatched {
            Dispatched::Reply(bytes) => (reply_status(bytes), None),
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

/// A reply's status code, from its header.
fn reply_status(reply: &[u8]) -> Option<u32> {
    let at = ReplyHeader::STATUS_OFFSET;
    let status = reply.get(at..at + 4)?;
    Some(u32::from_le_bytes(status.try_into().expect("4 bytes")))
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

    #[test]
    fn reply_status_is_read_from_the_header() {
        let request = admitted(Operation::NonReplicated, 1).header;
        let ok = frame::reply(
            &request,
            Operation::NonReplicated,
            frame::ReplyMeta::default(),
            b"",
        );
        assert_eq!(reply_status(&ok), Some(0));
        let failed = frame::error_reply(
            &request,
            Operation::NonReplicated,
            ErrorCode::InvalidCommand,
        );
        assert_eq!(
            reply_status(&failed),
            Some(ErrorCode::InvalidCommand.code())
        );
        assert_eq!(reply_status(&failed[..100]), None);
    }
}
