//! From an admitted request to its reply: session checks, the version gate, body decoding with
//! the generated codec, permission checks, and routing to the metadata group, a partition group
//! or a read. Transport-independent: TCP, QUIC and WebSocket all call [`dispatch`].

use crate::consensus::group::{NOT_PREPARED, Outcome};
use crate::runtime::body_budget::UNCOUNTED_BODY_MAX;
use crate::runtime::connection::{Bound, Connection, Routing};
use crate::runtime::node::Node;
use crate::runtime::partition::{PartitionHandle, RetirementPlan};
use crate::runtime::shared::PartitionKey;
use crate::service::frame::{self, Admitted, ReplyMeta};
use crate::service::replies;
use crate::service::routing::{self, BindVerdict, CatchUp, WritePath};
use bytes::Bytes;
use iggy_generated::commands::{self, CommandInfo};
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{EvictionReason, Operation, RequestHeader};
use iggy_generated::payloads::{
    BindSessionRequest, ClientVersionInfo, ConsumerGroupIdRequest, DeleteConsumerOffsetRequest,
    DeleteSegmentsRequest, GetConsumerOffsetRequest, GetPartitionRouteRequest,
    LoginRegisterRequest, LoginRegisterWithPatRequest, PollMessagesRequest, SendMessagesRequest,
    StoreConsumerOffsetRequest, StreamIdRequest, TopicIdRequest,
};
use iggy_generated::protocol;
use iggy_metadata::machine::{decode, envelope, ident, session_record};
use iggy_metadata::model::{ConsumerGroup, Metadata, Topic};
use iggy_metadata::replies::{self as model_replies, Codec};
use iggy_metadata::{Ident, Need};
use iggy_partition::{NO_OFFSET_HOLD, OffsetOwner, PartitionWrite, StartAt, WriteResult};
use iggy_wire::{WireDecode, WireError};
use std::rc::Rc;

/// What the transport does with the outcome.
pub enum Dispatched {
    Reply(Vec<u8>),
    /// A reply whose bytes the node's budget (`runtime::body_budget`) holds until it is
    /// written: a poll's messages.
    HeldReply(Vec<u8>, crate::runtime::body_budget::BodyPermit),
    /// Send these bytes (an eviction), then close.
    Close(Vec<u8>),
}

struct Request<'a> {
    header: &'a RequestHeader,
    operation: Operation,
    /// When `dispatch_within` answers for a request still pending.
    answer_by: std::time::Instant,
    /// The whole time the request was given (`limits.request_timeout_ms`).
    deadline: std::time::Duration,
}

impl Request<'_> {
    fn ok(&self, operation: Operation, commit: u64, body: &[u8]) -> Dispatched {
        Dispatched::Reply(frame::reply(
            self.header,
            operation,
            ReplyMeta {
                commit,
                status: 0,
                committed: false,
            },
            body,
        ))
    }

    /// The committed result of a replicated op at `op`.
    fn committed(&self, operation: Operation, op: u64, body: &[u8]) -> Dispatched {
        let meta = ReplyMeta {
            commit: op,
            status: 0,
            committed: true,
        };
        Dispatched::Reply(frame::reply(self.header, operation, meta, body))
    }

    fn reply(&self, body: &[u8]) -> Dispatched {
        self.ok(self.operation, 0, body)
    }

    fn fail(&self, error: ErrorCode) -> Dispatched {
        Dispatched::Reply(frame::error_reply(self.header, self.operation, error))
    }

    fn evict(&self, reason: EvictionReason) -> Dispatched {
        Dispatched::Close(frame::eviction(self.header.client, reason))
    }
}

/// Handles one request, answering within `deadline` whatever it waits on: a request still
/// pending then gets TransientNotCommitted (57) when it may commit (the SDK replays it with the
/// same id and gets the committed reply) or TransientNotAccepted (58) for a read, and the log
/// says what it waited on. A client is never left waiting for a reply that will not come.
pub async fn dispatch_within(
    node: &Rc<Node>,
    connection: &mut Connection,
    admitted: Admitted,
    body: Vec<u8>,
    deadline: std::time::Duration,
) -> Dispatched {
    let (header, operation) = (admitted.header, admitted.operation);
    let code = admitted.non_replicated_code();
    // Disabled metrics cost nothing: no clock read, command lookup or map update.
    let started = metrics_recorded(node).then(std::time::Instant::now);
    let answer_by = std::time::Instant::now() + deadline;
    let dispatched = answer_within(
        deadline,
        &header,
        operation,
        code,
        dispatch(node, connection, admitted, body, answer_by, deadline),
    )
    .await;
    if let Some(started) = started {
        record(node, operation, code, &dispatched, started.elapsed());
    }
    dispatched
}

/// Whether requests are counted: only the HTTP listener serves the metrics, so with it or the
/// endpoint off nobody could read them.
fn metrics_recorded(node: &Node) -> bool {
    let http = &node.shared.config.http;
    http.enabled && http.metrics.enabled
}

/// Counts an answered request in the node's metrics under its command's name.
fn record(
    node: &Node,
    operation: Operation,
    code: u32,
    dispatched: &Dispatched,
    elapsed: std::time::Duration,
) {
    use crate::runtime::metrics::Outcome;
    let command = match operation {
        Operation::NonReplicated => commands::COMMANDS.iter().find(|c| c.code == code),
        _ => command_for(operation),
    };
    let result_framed = command.is_some_and(|c| c.result_framed);
    let outcome = match dispatched {
        Dispatched::Reply(reply) | Dispatched::HeldReply(reply, _) => {
            Outcome::Status(frame::answered_status(reply, result_framed).unwrap_or(u32::MAX))
        }
        Dispatched::Close(_) => Outcome::Evicted,
    };
    node.metrics
        .record(command.map_or("unknown", |c| c.name), outcome, elapsed);
}

async fn answer_within(
    deadline: std::time::Duration,
    header: &RequestHeader,
    operation: Operation,
    code: u32,
    handling: impl Future<Output = Dispatched>,
) -> Dispatched {
    if let Ok(dispatched) = compio::time::timeout(deadline, handling).await {
        return dispatched;
    }
    // A read is simply not answered yet; anything else may still commit.
    let (error, waited_on) = match command_for(operation).map(|command| command.class) {
        _ if operation == Operation::NonReplicated => (ErrorCode::TransientNotAccepted, "a read"),
        Some("partition") => (ErrorCode::TransientNotCommitted, "the partition's group"),
        _ => (ErrorCode::TransientNotCommitted, "the metadata group"),
    };
    tracing::warn!(
        client = format_args!("{:032x}", header.client),
        session = header.session,
        request = header.request,
        "{operation:?} (code {code}) still pending after {deadline:?}, waiting on {waited_on}; answered {error:?}"
    );
    Dispatched::Reply(frame::error_reply(header, operation, error))
}

/// Handles one request; `answer_by` is when its pending reply is answered for it, `deadline`
/// after it arrived.
async fn dispatch(
    node: &Rc<Node>,
    connection: &mut Connection,
    admitted: Admitted,
    body: Vec<u8>,
    answer_by: std::time::Instant,
    deadline: std::time::Duration,
) -> Dispatched {
    let header = admitted.header;
    let mut body = Some(body);
    // A batch is stamped in the buffer it arrived in, then journaled and applied from it.
    let send = match admitted.operation {
        Operation::SendMessages => body.take(),
        _ => None,
    };
    let body = Bytes::from(body.unwrap_or_default());
    let request = Request {
        header: &header,
        operation: admitted.operation,
        answer_by,
        deadline,
    };
    // Register and BindSession (15) judge their bodies themselves (a malformed one evicts),
    // and a send's body is decoded exactly by `prepare_send` (its batch runs to the end).
    let code = match admitted.operation {
        Operation::Register | Operation::SendMessages => None,
        Operation::NonReplicated => Some(admitted.non_replicated_code()).filter(|&code| code != 15),
        operation => command_for(operation).map(|command| command.code),
    };
    if let Some(code) = code {
        let version = connection
            .bound
            .map_or(protocol::CURRENT.packed(), |b| b.protocol);
        // An operation of a command the session's protocol does not have (0.11.1's UpdateStream
        // from a 0.12.0 client, UpdateResource from a 0.11.1 one) is unknown to it, as its code
        // would be.
        if commands::lookup(code, version).is_none() {
            return request.fail(ErrorCode::InvalidCommand);
        }
        if let Err(error) = check_request_body(code, version, &body) {
            return request.fail(error);
        }
    }
    match admitted.operation {
        Operation::Register => register(node, connection, &request, &body).await,
        Operation::NonReplicated => {
            let code = admitted.non_replicated_code();
            match non_replicated(node, connection, &request, code, &body).await {
                Ok(done) => done,
                Err(error) => request.fail(error),
            }
        }
        operation => {
            let Some(bound) = authenticated(node, connection, &header) else {
                return request.fail(ErrorCode::Unauthenticated);
            };
            if let Err(error) = take_request(node, &header) {
                return request.fail(error);
            }
            if operation != Operation::Logout {
                lease_regained(node, &request).await;
            }
            let routing = connection.routing;
            let result = match operation {
                Operation::Logout => logout(node, connection, &request, bound).await,
                Operation::SendMessages => {
                    let prepared = session_metadata_reached(node, routing, &header)
                        .await
                        .and_then(|()| {
                            prepare_send(node, routing, bound, send.unwrap_or_default())
                        });
                    match prepared {
                        Ok(write) => partition_write(node, &request, routing, bound, write).await,
                        Err(error) => Err(error),
                    }
                }
                Operation::StoreConsumerOffset | Operation::DeleteConsumerOffset => {
                    let prepared = session_metadata_reached(node, routing, &header)
                        .await
                        .and_then(|()| prepare_offset_write(node, &request, routing, bound, &body));
                    match prepared {
                        Ok(write) => partition_write(node, &request, routing, bound, write).await,
                        Err(error) => Err(error),
                    }
                }
                Operation::DeleteSegments => {
                    delete_segments(node, &request, routing, bound, &body).await
                }
                _ => metadata_write(node, &request, routing, bound, &body).await,
            };
            result.unwrap_or_else(|error| request.fail(error))
        }
    }
}

/// The connection's session, if the request belongs to it and the session has not ended
/// (logout elsewhere, lease expiry, or its user deactivated or deleted).
fn authenticated(node: &Node, connection: &Connection, header: &RequestHeader) -> Option<Bound> {
    let bound = connection.bound?;
    let live = node
        .shared
        .metadata
        .borrow()
        .sessions
        .get(bound.client)
        .is_some_and(|s| s.session == bound.session);
    if !live {
        return None;
    }
    (bound.client == header.client && (header.session == 0 || header.session == bound.session))
        .then_some(bound)
}

/// Waits, while this cluster node may not judge grants because the grant lease it held ran out
/// moments ago (`consensus::grant_lease`, `regained_by`), for the next metadata primary's
/// grant, within a quarter of the request's time before its deadline; then the request goes
/// on, answered 58 where it needs a judgement still. A metadata primary that went silent is
/// succeeded about when its leases run out: answered 58 in that gap, the official client asks
/// the next node in id order for the partition's route, which may be the silent one, and
/// waits on it until it runs again or the client's 30 s deadline (every partition's writes
/// stalled for the whole of a 20 s SIGSTOP of the metadata primary).
async fn lease_regained(node: &Node, request: &Request<'_>) {
    let Some(plane) = &node.shared.plane else {
        return;
    };
    let leases = plane.leases();
    let now = std::time::Instant::now();
    if leases.may_judge(now) {
        return;
    }
    let Some(regained_by) = leases.regained_by(now) else {
        return;
    };
    let until = regained_by.min(request.answer_by - request.deadline / 4);
    while std::time::Instant::now() < until && !leases.may_judge(std::time::Instant::now()) {
        compio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A replicated request names its session and a request number above the register's 0 (the
/// official header validation refuses one that does not; the connection's session is not
/// assumed), and never a number this node took for a different request: the client table
/// would answer it with that request's cached reply, unexecuted. InvalidCommand, the
/// connection kept.
fn take_request(node: &Node, header: &RequestHeader) -> Result<(), ErrorCode> {
    if header.session == 0 || header.request == 0 {
        return Err(ErrorCode::InvalidCommand);
    }
    let identity = crate::runtime::shared::RequestIdentity {
        request: header.request,
        checksum: header.request_checksum,
        operation: header.operation,
    };
    node.shared
        .sessions_here
        .borrow_mut()
        .take_request(header.client, identity)
        .map_err(|()| ErrorCode::InvalidCommand)
}

/// Judges a request body against its command's declared request (spec/commands.spec, through
/// the generated `decode_request`) before anything reads it. Bytes after the request (any
/// body at all for a command that takes none) are InvalidCommand, upstream's answer to a body
/// of the wrong length; the SDK never sends them. A request that does not decode is
/// InvalidFormat, as for every other decode. A code `version` does not know is refused before.
fn check_request_body(code: u32, version: u32, body: &[u8]) -> Result<(), ErrorCode> {
    if commands::lookup(code, version).is_none() {
        return Ok(());
    }
    match commands::decode_request(code, version, body) {
        Ok(_) => Ok(()),
        Err(WireError::TrailingBytes { .. }) => Err(ErrorCode::InvalidCommand),
        Err(_) => Err(ErrorCode::InvalidFormat),
    }
}

/// The command an operation carries (the first row naming it), from a table built once: every
/// request asks, and matching names per request would format one each time.
fn command_for(operation: Operation) -> Option<&'static CommandInfo> {
    static BY_OPERATION: std::sync::OnceLock<[Option<&'static CommandInfo>; 256]> =
        std::sync::OnceLock::new();
    BY_OPERATION.get_or_init(|| {
        let mut table = [None; 256];
        for &operation in Operation::ALL {
            let name = format!("{operation:?}");
            table[usize::from(operation.to_repr())] =
                commands::COMMANDS.iter().find(|c| c.operation == name);
        }
        table
    })[usize::from(operation.to_repr())]
}

// ----- which replica serves -----

/// Whether other replicas hold the groups too, so one of them can be further ahead than this
/// one (a standalone node, or a cluster of one, is always as far as it gets).
fn replicated(node: &Node) -> bool {
    node.shared.replica_count() > 1
}

/// How a write of the metadata group is carried out here: for a client that routes, refused on
/// any replica but the primary (89 from a Normal backup, 58 while the group changes views or
/// recovers), checked before anything that reads the local model: a backup's model may lag,
/// and the SDK takes a metadata-plane namespace miss as final. A client that cannot route has
/// its write relayed; its checks read this replica's model, which serves in touch and has
/// applied every metadata write relayed through this node and what it knew committed
/// ([`relayed_metadata_reached`], waited for before the request).
fn metadata_write_path(node: &Node, routing: Routing) -> Result<WritePath, ErrorCode> {
    let role = node.metadata.figures().role();
    match routing::write_path(routing, role, node.shared.replica_id) {
        WritePath::Refuse(error) => Err(error),
        path => Ok(path),
    }
}

/// For a client that cannot route (HTTP): waits, within [`routing::READ_WAIT`], until this
/// replica's metadata serves in touch and applied every metadata write relayed through this
/// node and what the metadata primary knew committed when asked now
/// (`routing::relayed_metadata_catch_up`), so a client reads here what it wrote through any
/// node before (behind a load balancer too) and permissions are judged on a current model (the
/// HTTP layer resolves names and checks them before its command runs); 58 when it does not get
/// there in time. On a backup that costs a round trip to the primary.
pub async fn relayed_metadata_reached(node: &Node) -> Result<(), ErrorCode> {
    if !replicated(node) {
        return Ok(());
    }
    let figures = node.metadata.figures();
    let known_committed = node
        .metadata
        .primary_commit()
        .await
        .ok_or(ErrorCode::TransientNotAccepted)?;
    let relayed = node.metadata.relayed_watermark();
    caught_up(|waited| {
        let applied = node.shared.metadata.borrow().commit;
        routing::relayed_metadata_catch_up(
            figures.role(),
            applied,
            relayed,
            known_committed,
            waited,
            routing::READ_WAIT,
        )
    })
    .await
}

/// The error for a metadata request the group refused.
fn metadata_refused(node: &Node, refusal: &iggy_vsr::Refusal) -> ErrorCode {
    routing::refused(
        refusal,
        node.metadata.figures().role(),
        node.shared.replica_id,
    )
}

/// Refuses a request that needs partition `key`'s primary on any other replica. A partition
/// the model knows but this node has not opened is not served yet in a cluster (58; its
/// primary may have); a standalone node lets the request on, to wait for the open
/// ([`opened_partition`]).
fn partition_primary(node: &Node, key: PartitionKey) -> Result<(), ErrorCode> {
    partition_primary_by(node, key, routing::refusal_for)
}

/// [`partition_primary`] judged by `rule` (`routing::read_refusal_for` for a routed read).
fn partition_primary_by(
    node: &Node,
    key: PartitionKey,
    rule: fn(crate::consensus::figures::GroupRole, u8) -> Option<ErrorCode>,
) -> Result<(), ErrorCode> {
    match node.shared.partition(key) {
        Some(partition) => {
            let role = partition.group.figures().role();
            rule(role, node.shared.replica_id).map_or(Ok(()), Err)
        }
        None if replicated(node) => Err(ErrorCode::TransientNotAccepted),
        None => Ok(()),
    }
}

/// [`partition_primary`] for a client that routes; nothing to refuse for one that cannot (its
/// writes are relayed, its reads wait for [`current_partition`]).
fn partition_primary_for(
    node: &Node,
    key: PartitionKey,
    routing: Routing,
) -> Result<(), ErrorCode> {
    match routing {
        Routing::ByClient => partition_primary(node, key),
        Routing::ByServer => Ok(()),
    }
}

/// Partition `key`'s handle, once this node opened it: a partition a metadata op just created
/// is opened by the effects of that op's apply, a moment after the model shows it (on a
/// standalone node too: another client sees the topic before its creator is answered). Waits
/// within `budget` from `started` (then 58). A standalone node answers at once for a partition
/// its model does not hold live (PartitionNotFound) or whose copy could not open here
/// (CannotOpenPartitionLogFile: it exists, its files are damaged or unreadable); a cluster node
/// waits for those too (its model may lag the client's).
async fn opened_partition(
    node: &Node,
    key: PartitionKey,
    started: std::time::Instant,
    budget: std::time::Duration,
) -> Result<PartitionHandle, ErrorCode> {
    loop {
        if let Some(partition) = node.shared.partition(key) {
            return Ok(partition);
        }
        if !replicated(node) && !node.shared.opening(key) {
            return Err(unserved(node, key));
        }
        if started.elapsed() >= budget {
            return Err(ErrorCode::TransientNotAccepted);
        }
        compio::time::sleep(CATCH_UP_POLL).await;
    }
}

/// The partition a write of a client over `routing` goes to (see [`opened_partition`]; a
/// client that routes was refused before if this node had not opened it).
async fn writable_partition(
    node: &Node,
    key: PartitionKey,
    routing: Routing,
) -> Result<PartitionHandle, ErrorCode> {
    // A cluster refused a client that routes before, where the partition was not open: one
    // missing now went away since. A standalone node has no other replica to send it to.
    let refused_before = routing == Routing::ByClient && replicated(node);
    let budget = match refused_before {
        true => std::time::Duration::ZERO,
        false => routing::READ_WAIT,
    };
    match opened_partition(node, key, std::time::Instant::now(), budget).await {
        Err(ErrorCode::TransientNotAccepted) if refused_before => Err(ErrorCode::PartitionNotFound),
        found => found,
    }
}

/// Partition `key`, once this replica may serve a read of a client that cannot route from its
/// own committed copy: serving in touch with its primary (the primary, or a backup following
/// it) and applied past [`routing::read_watermark`] of what the partition's primary knew
/// committed when asked now (on a backup, a round trip), so a read sees every write
/// acknowledged before it through any node. Waits within [`routing::READ_WAIT`], then
/// 58 (the HTTP client resends a 503). A replica only ever applies committed ops, and a poll
/// serves applied sends only, so nothing uncommitted is served.
async fn current_partition(node: &Node, key: PartitionKey) -> Result<PartitionHandle, ErrorCode> {
    let started = std::time::Instant::now();
    let budget = routing::READ_WAIT;
    let partition = opened_partition(node, key, started, budget).await?;
    if !replicated(node) {
        return Ok(partition);
    }
    partition_caught_up(&partition, started).await?;
    Ok(partition)
}

/// Waits, within [`routing::READ_WAIT`] from `started`, until this replica of `partition` serves
/// in touch with its primary and applied past [`routing::read_watermark`] of what the primary
/// knew committed when asked now (on a backup, a round trip); 58 when it does not get there.
async fn partition_caught_up(
    partition: &PartitionHandle,
    started: std::time::Instant,
) -> Result<(), ErrorCode> {
    let figures = partition.group.figures();
    let known_committed = partition
        .group
        .primary_commit()
        .await
        .ok_or(ErrorCode::TransientNotAccepted)?;
    let wanted = routing::read_watermark(partition.group.relayed_watermark(), known_committed);
    // The budget counts from the start, the partition's opening included.
    let (opened_after, budget) = (started.elapsed(), routing::READ_WAIT);
    caught_up(|waited| {
        let (role, applied) = (figures.role(), figures.applied());
        routing::in_touch_catch_up(role, applied, wanted, opened_after + waited, budget)
    })
    .await
}

/// Before a read that reports partition figures (stats, streams, topics), whichever client
/// sends it: brings this node's copy of each partition `scope` takes up to date as a poll's
/// ([`partition_caught_up`], all at once), so the figures count every write acknowledged
/// before the read through any node. A backup learns a commit a tick after its primary
/// acknowledged it, and the SDK reads topics from the metadata primary, which leads few of
/// them. A copy that does not get there within [`routing::READ_WAIT`] (no primary in touch, a
/// view change, a primary that died and does not answer) is reported as it is: a late figure
/// is not worth refusing the read.
async fn figures_current(node: &Node, scope: impl Fn(PartitionKey) -> bool) {
    if !replicated(node) {
        return;
    }
    let partitions: Vec<PartitionHandle> = node
        .shared
        .partitions
        .borrow()
        .iter()
        .filter(|(key, _)| scope(**key))
        .map(|(_, entry)| entry.handle.clone())
        .collect();
    let started = std::time::Instant::now();
    let waits = partitions.iter().map(|partition| {
        compio::time::timeout(routing::READ_WAIT, partition_caught_up(partition, started))
    });
    futures_util::future::join_all(waits).await;
}

/// Where a read of partition `key` is served for a client over `routing`: a client that
/// routes is refused on any replica but the primary (`None`: the primary's copy, looked up
/// when read); one that cannot is served from this replica once current (its handle).
async fn read_position(
    node: &Node,
    key: PartitionKey,
    routing: Routing,
) -> Result<Option<PartitionHandle>, ErrorCode> {
    match routing {
        Routing::ByClient if replicated(node) => {
            partition_primary_by(node, key, routing::read_refusal_for).map(|()| None)
        }
        // A standalone node is every partition's primary: it serves once it opened it.
        _ => current_partition(node, key).await.map(Some),
    }
}

/// The handle a read is served from: the one [`read_position`] returned, else the primary's
/// own copy, looked up now.
fn served_partition(
    node: &Node,
    key: PartitionKey,
    served: Option<PartitionHandle>,
) -> Result<PartitionHandle, ErrorCode> {
    match served {
        Some(partition) => Ok(partition),
        None => node
            .shared
            .partition(key)
            .ok_or_else(|| unserved(node, key)),
    }
}

/// Why this node serves no copy of partition `key`: the model holds no such partition, or its
/// copy here could not open.
fn unserved(node: &Node, key: PartitionKey) -> ErrorCode {
    match node.shared.live_incarnation(key) {
        Some(live) if node.shared.unopenable(key, live) => ErrorCode::CannotOpenPartitionLogFile,
        _ => ErrorCode::PartitionNotFound,
    }
}

/// The view and primary of partition `key`'s group as this replica knows them, for a client's
/// route lookup (105, and 0.11.1's 103/123): 58 while that group is not Normal here.
fn route_position(node: &Node, key: PartitionKey) -> Result<(u32, u8), ErrorCode> {
    match node.shared.partition(key) {
        Some(partition) => {
            let figures = partition.group.figures();
            routing::route_position(figures.role(), figures.view(), node.shared.replica_count())
        }
        // Not opened here yet: a cluster replica knows no view to name; a standalone node
        // names itself, as it always did.
        None if replicated(node) => Err(ErrorCode::TransientNotAccepted),
        None => Ok((0, node.shared.replica_id)),
    }
}

/// The error for a partition write the group refused: `PartitionHandle::write` reports any
/// NotPrimary refusal as 89, which only a Normal backup may answer.
fn partition_refused(node: &Node, key: PartitionKey, error: ErrorCode) -> ErrorCode {
    match (error, node.shared.partition(key)) {
        (ErrorCode::NotPrimary, Some(partition)) => {
            routing::not_primary(partition.group.figures().role(), node.shared.replica_id)
        }
        (ErrorCode::NotPrimary, None) => ErrorCode::TransientNotAccepted,
        (error, _) => error,
    }
}

/// How often a replica behind a client's metadata watermark looks at its applied commit again.
const CATCH_UP_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// A read, or a partition op that resolves names and groups here, must see what the session
/// saw: a replica behind the client's metadata watermark (`minimum_metadata_op`, which the SDK
/// sends on reads and partition ops) waits a little for its metadata (a standalone node, the
/// only copy, does not), then answers 58 and the client asks again or elsewhere. A client that
/// cannot route sees what was written through this node, too.
async fn session_metadata_reached(
    node: &Node,
    routing: Routing,
    header: &RequestHeader,
) -> Result<(), ErrorCode> {
    let budget = match replicated(node) {
        true => routing::READ_WAIT,
        false => std::time::Duration::ZERO,
    };
    let wanted = match routing {
        Routing::ByClient => header.minimum_metadata_op,
        Routing::ByServer => header
            .minimum_metadata_op
            .max(node.metadata.relayed_watermark()),
    };
    metadata_reached(node, wanted, budget).await
}

/// Waits, within `budget`, until this replica applied the metadata op `wanted` (else 58).
async fn metadata_reached(
    node: &Node,
    wanted: u64,
    budget: std::time::Duration,
) -> Result<(), ErrorCode> {
    caught_up(|waited| {
        let applied = node.shared.metadata.borrow().commit;
        routing::catch_up(applied, wanted, waited, budget)
    })
    .await
}

/// Asks `verdict` (given the time waited so far) every [`CATCH_UP_POLL`] until it says this
/// replica reached what it waits for (Ok) or will not in time (58: the client asks again).
async fn caught_up(
    mut verdict: impl FnMut(std::time::Duration) -> CatchUp,
) -> Result<(), ErrorCode> {
    let started = std::time::Instant::now();
    loop {
        match verdict(started.elapsed()) {
            CatchUp::Reached => return Ok(()),
            CatchUp::Wait => compio::time::sleep(CATCH_UP_POLL).await,
            CatchUp::Behind => return Err(ErrorCode::TransientNotAccepted),
        }
    }
}

// ----- sessions -----

enum Login<'a> {
    Password {
        username: &'a str,
        password: &'a str,
    },
    Token(&'a str),
}

/// Whether a login (40, 45) or BindSession (15) body opens with a readable version prefix
/// naming a protocol outside the admitted window. Such a client is told so (14, which carries
/// the window) whatever follows the prefix: another protocol's body need not parse as ours
/// (apache-iggy 0.9.0, protocol 0.11.0, sends a login with no bind secret), and 15 would only
/// tell its SDK "Invalid format".
fn version_refused(body: &[u8]) -> bool {
    let mut input = body;
    ClientVersionInfo::decode_from(&mut input)
        .is_ok_and(|info| protocol::admit(info.protocol_version).is_none())
}

async fn register(
    node: &Rc<Node>,
    connection: &mut Connection,
    request: &Request<'_>,
    body: &[u8],
) -> Dispatched {
    if version_refused(body) {
        return request.evict(EvictionReason::IncompatibleProtocol);
    }
    // A Register names no session and no request number yet (the official header validation
    // refuses one that does): a client that sets them is not following the protocol.
    if request.header.session != 0 || request.header.request != 0 {
        return request.evict(EvictionReason::MalformedLogin);
    }
    // 40 and 45 share the Register operation; the body tells them apart.
    let (version, secret, login) = if let Ok(r) = LoginRegisterRequest::decode_exact(body) {
        (
            r.version_info.protocol_version,
            r.bind_secret,
            Login::Password {
                username: r.username,
                password: r.password,
            },
        )
    } else if let Ok(r) = LoginRegisterWithPatRequest::decode_exact(body) {
        (
            r.version_info.protocol_version,
            r.bind_secret,
            Login::Token(r.token),
        )
    } else {
        return request.evict(EvictionReason::MalformedLogin);
    };
    // The session speaks the codec its version is served with: a 0.11 patch, 0.11.1's.
    let Some(codec) = protocol::admit(version) else {
        return request.evict(EvictionReason::IncompatibleProtocol);
    };
    let version = codec.packed();
    let user_id = match login_verdict(node, &login).await {
        Ok(user_id) => user_id,
        Err(error) => {
            sign_in_refused(node, connection, &login, error);
            return request.fail(error);
        }
    };
    let client = request.header.client;
    let existing = node.shared.metadata.borrow().sessions.get(client).copied();
    if let Some(existing) = existing {
        if existing.user_id != user_id {
            return request.evict(EvictionReason::SessionError);
        }
        return bind(
            node,
            connection,
            request,
            client,
            existing.session,
            user_id,
            version,
        );
    }
    if let Err(error) = room_for_a_session_of(node, user_id) {
        return request.fail(error);
    }
    // A new session is a replicated op of the metadata primary: a backup forwards it there.
    let record = session_record(
        user_id,
        version,
        crate::service::auth::bind_secret_hash(&secret),
    );
    match node.metadata.register(client, user_id, record).await {
        Outcome::Committed { op, .. } => {
            // A register forwarded to the metadata primary is committed there first: the
            // session serves here once this replica has applied it too.
            match session_applied(node, client, op).await {
                SessionApplied::Live => {
                    bind(node, connection, request, client, op, user_id, version)
                }
                // Judged again on the model that refused it, which names why.
                SessionApplied::Refused => match verify_login(node, &login).await {
                    Err(error) => request.fail(error),
                    Ok(_) => request.fail(ErrorCode::TransientNotAccepted),
                },
                SessionApplied::NotYet => request.fail(ErrorCode::TransientNotAccepted),
            }
        }
        Outcome::Refused(refusal) => {
            if refusal == iggy_vsr::Refusal::ClientsTableFull {
                session_table_full(node, user_id);
            }
            request.fail(metadata_refused(node, &refusal))
        }
        Outcome::Failed => request.fail(ErrorCode::TransientNotCommitted),
    }
}

/// A sign-in refused for its credentials (not a transient refusal), for an operator watching
/// for password guessing: at most one line per user name per interval, with the count held
/// back. The password is never logged; a token only as "a personal access token".
fn sign_in_refused(node: &Node, connection: &Connection, login: &Login<'_>, error: ErrorCode) {
    if matches!(
        error,
        ErrorCode::TransientNotAccepted | ErrorCode::TransientNotCommitted
    ) {
        return;
    }
    let who = match *login {
        Login::Password { username, .. } => format!("user name {username:?}"),
        Login::Token(_) => "a personal access token".to_string(),
    };
    let source = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        who.hash(&mut hasher);
        hasher.finish()
    };
    let verdict = node
        .refused_sign_ins
        .borrow_mut()
        .line(std::time::Instant::now(), source);
    if let crate::consensus::log_limit::Verdict::Write { held_back, .. } = verdict {
        tracing::info!(
            "sign-in refused on connection {} for {who}: {error:?} ({held_back} more held back \
             since the last line)",
            connection.id
        );
    }
}

/// How many of the session table's slots only root's logins take: however many sessions other
/// users leave open (a script that logs in and never out, over any transport), root can still
/// sign in and end them (deleting or deactivating their user ends its sessions).
fn root_reserve(clients_table_max: usize) -> usize {
    (clients_table_max / 64).clamp(1, 64)
}

/// Refuses a new session of a user other than root that would take one of the slots kept for
/// root ([`root_reserve`]), counted on this replica's model of the live sessions (the table
/// itself refuses a register beyond its capacity). The capacity is the one the metadata group
/// committed, which this node's configuration may differ from (a node configured with fewer
/// slots refused every sign-in, and as metadata primary locked the whole cluster out).
fn room_for_a_session_of(node: &Node, user_id: u32) -> Result<(), ErrorCode> {
    if user_id == iggy_metadata::ROOT_USER_ID {
        return Ok(());
    }
    let capacity = match node.metadata.figures().clients_max() {
        0 => node.shared.config.limits.clients_table_max,
        committed => committed,
    };
    let reserve = root_reserve(capacity);
    let live = node.shared.metadata.borrow().sessions.len();
    if live + reserve < capacity {
        return Ok(());
    }
    if let Some(held_back) = node.session_table_full.due(std::time::Instant::now()) {
        tracing::warn!(
            "login of user {user_id} refused: {live} sessions are live and the session table's \
             last {reserve} slots are kept for root (limits.clients_table_max {capacity}); a \
             session ends at logout, {}s after its last connection closed \
             (system.session_lease_secs) or, over HTTP, once its access tokens expired; root can \
             end a user's sessions by deactivating it ({held_back} more refusals since the \
             last warning)",
            node.shared.config.system.session_lease_secs
        );
    }
    Err(ErrorCode::TransientNotAccepted)
}

/// Says why logins are refused while every slot of the session table is taken: the client only
/// sees a transient refusal, which it retries. Live sessions are never evicted.
fn session_table_full(node: &Node, user_id: u32) {
    let due = node.session_table_full.due(std::time::Instant::now());
    let Some(held_back) = due else {
        return;
    };
    tracing::warn!(
        "login of user {user_id} refused: every slot of the session table is taken by a live \
         session (limits.clients_table_max, as committed with the metadata group's first op); a \
         session ends at logout, {}s after its last connection closed \
         (system.session_lease_secs) or, over HTTP, once its access tokens expired ({held_back} \
         more refusals since the last warning)",
        node.shared.config.system.session_lease_secs
    );
}

async fn verify_login(node: &Node, login: &Login<'_>) -> Result<u32, ErrorCode> {
    match *login {
        Login::Password { username, password } => {
            crate::service::auth::verify_password(&node.shared, username, password).await
        }
        Login::Token(token) => {
            crate::service::auth::verify_token(&node.shared, token, node.shared.stamp_now())
        }
    }
}

/// The user `login` signs in as, judged only once this replica applied what the
/// metadata primary knew committed when asked: a user, token or password change acknowledged a
/// moment ago through the primary may not have reached a backup's model yet, which would then
/// refuse fresh credentials (a client cannot tell that from a wrong password) or accept
/// replaced ones. A login costs one question to the primary on a backup, none on the primary
/// itself or on a single node; a replica that cannot get there within [`routing::READ_WAIT`]
/// answers 58 (the client asks again).
async fn login_verdict(node: &Node, login: &Login<'_>) -> Result<u32, ErrorCode> {
    if replicated(node) {
        let wanted = node
            .metadata
            .primary_commit()
            .await
            .ok_or(ErrorCode::TransientNotAccepted)?;
        let figures = node.metadata.figures();
        caught_up(|waited| {
            let applied = node.shared.metadata.borrow().commit;
            routing::in_touch_catch_up(figures.role(), applied, wanted, waited, routing::READ_WAIT)
        })
        .await?;
    }
    // A new cluster's root user exists once its first metadata primary created it: until then
    // every login is early, not wrong (the client retries a transient refusal).
    if !crate::service::auth::root_exists(node) {
        return Err(ErrorCode::TransientNotAccepted);
    }
    verify_login(node, login).await
}

/// Whether a committed register's session serves here.
enum SessionApplied {
    Live,
    /// The register applied without a live session: its user was deleted or deactivated
    /// between the verdict and the commit.
    Refused,
    /// This replica has not applied the register within a few seconds.
    NotYet,
}

/// Waits (at most a few seconds) until this replica's metadata applied the register `session`
/// of `client`; at once on the replica that committed it.
async fn session_applied(node: &Rc<Node>, client: u128, session: u64) -> SessionApplied {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (live, applied) = {
            let metadata = node.shared.metadata.borrow();
            let live = metadata.sessions.get(client).copied();
            (live, metadata.commit)
        };
        if live.is_some_and(|live| live.session >= session) {
            return SessionApplied::Live;
        }
        if applied >= session {
            return SessionApplied::Refused;
        }
        if std::time::Instant::now() >= deadline {
            return SessionApplied::NotYet;
        }
        compio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

fn bind(
    node: &Rc<Node>,
    connection: &mut Connection,
    request: &Request<'_>,
    client: u128,
    session: u64,
    user_id: u32,
    protocol: u32,
) -> Dispatched {
    if let Some(previous) = connection.bound {
        node.shared.session_unbound(previous.client);
    }
    node.shared.session_bound(client, Some(connection.id));
    connection.bound = Some(Bound {
        client,
        session,
        user_id,
        protocol,
    });
    node.connection_user(connection.id, client, user_id);
    tracing::info!(
        "session {session} of client {client:032x} (user {user_id}) bound to connection {}",
        connection.id
    );
    let commit = node.shared.metadata.borrow().commit;
    let body = model_replies::login_response(user_id, session);
    // A plain LoginRegisterResponse under NonReplicated: the SDK accepts it for 40, 45 and 15.
    request.ok(Operation::NonReplicated, commit.max(session), &body)
}

async fn logout(
    node: &Rc<Node>,
    connection: &mut Connection,
    request: &Request<'_>,
    bound: Bound,
) -> Result<Dispatched, ErrorCode> {
    // The session is cluster-wide: a backup forwards its client's Logout to the metadata
    // primary (ForwardLogout), as the client's own request, so a retry is answered from the
    // client table.
    let body = envelope(node.shared.stamp_now(), bound.user_id, &[]);
    let outcome = node
        .metadata
        .logout(bound.client, request.header.request, bound.session, body)
        .await;
    match outcome {
        Outcome::Committed { op, .. } => {
            // Committed on the metadata primary first: the connection is unbound once this
            // replica applied it too, so a request it serves next sees the session gone.
            metadata_reached(node, op, routing::READ_WAIT).await?;
            // And answered once no node serves the session's other connections by a copy
            // that still holds it.
            fenced(node, op).await;
            connection.bound = None;
            node.shared.session_unbound(bound.client);
            tracing::info!(
                "session {} of client {:032x} ended by logout",
                bound.session,
                bound.client
            );
            Ok(request.committed(Operation::Logout, op, &[]))
        }
        Outcome::Refused(refusal) => Err(metadata_refused(node, &refusal)),
        Outcome::Failed => Err(ErrorCode::TransientNotCommitted),
    }
}

// ----- replicated metadata ops -----

/// Leaving needs no grant (a member whose poll grant was revoked gives its partitions back),
/// so a missing stream, topic or group is judged by who could read the group were it there:
/// one who could not is answered as any non-member is (5006), learning nothing of what exists
/// (it was told which was missing); one who could is told.
fn leave_target(node: &Node, user: u32, body: &[u8]) -> Result<(), ErrorCode> {
    let r: ConsumerGroupIdRequest = decode(body)?;
    let found = (node.shared.metadata.borrow())
        .group(
            &ident(&r.stream_id)?,
            &ident(&r.topic_id)?,
            &ident(&r.group_id)?,
        )
        .map(|_| ());
    let Err(missing) = found else {
        return Ok(());
    };
    match judged_miss(
        node,
        (user, GROUP_READERS),
        &r.stream_id,
        &r.topic_id,
        missing,
    ) {
        ErrorCode::Unauthorized => Err(ErrorCode::ConsumerGroupMemberNotFound),
        answer => Err(answer),
    }
}

/// What metadata op `operation` of `user` needs, resolved against the current state. One naming
/// a stream, topic or user that is missing is judged first as if it existed (where the copy
/// is the latest word, [`copy_is_latest`]): a user without the grant is refused (41) whether or
/// not the target exists, so a write learns nothing the reads hide; one with it is told what is
/// missing.
fn metadata_need(
    node: &Node,
    operation: Operation,
    user: u32,
    body: &[u8],
) -> Result<Need, ErrorCode> {
    use iggy_metadata::permissions::{need_of, need_whatever_the_target};
    if operation == Operation::LeaveConsumerGroup {
        leave_target(node, user, body)?;
    }
    let need = {
        let metadata = node.shared.metadata.borrow();
        need_of(&metadata, operation, user, body)
    };
    match need {
        Ok(need) => need.ok_or(ErrorCode::FeatureUnavailable),
        Err(missing) if copy_is_latest(node) => {
            let metadata = node.shared.metadata.borrow();
            if let Ok(Some(need)) = need_whatever_the_target(&metadata, operation, user, body) {
                drop(metadata);
                node.shared.judge(user, need)?;
            }
            Err(missing)
        }
        Err(missing) => Err(missing),
    }
}

/// Whether this node's metadata copy is the history's latest word, so that a name it lacks is
/// missing: a standalone node's, or the metadata primary's leading its view. A backup's copy
/// may lag (a topic created a moment ago); a name it lacks is answered missing, which the
/// official client asks elsewhere about, never refused for a grant the copy may not hold yet
/// (41, final).
fn copy_is_latest(node: &Node) -> bool {
    if node.shared.plane.is_none() {
        return true;
    }
    let role = node.metadata.figures().role();
    role.is_primary(node.shared.replica_id) && role.in_touch && role.applied_view_log
}

async fn metadata_write(
    node: &Rc<Node>,
    request: &Request<'_>,
    routing: Routing,
    bound: Bound,
    body: &[u8],
) -> Result<Dispatched, ErrorCode> {
    let operation = request.operation;
    let Some(command) = command_for(operation) else {
        return Err(ErrorCode::InvalidCommand);
    };
    if command.class != "metadata" {
        return Err(ErrorCode::InvalidCommand);
    }
    let path = metadata_write_path(node, routing)?;
    // A retry of a committed request is answered from the client table: the checks below judge
    // today's state (a stream the first attempt deleted is gone now) and must not refuse it.
    let retry = node
        .metadata
        .already_committed(bound.client, request.header.request)
        .await;
    let prepared = if retry {
        crate::service::auth::Prepared {
            body: None,
            // A token is shown once; a retry of its creation gets it again while this process
            // remembers it.
            token: node.shown_token(bound.client, request.header.request),
        }
    } else {
        let need = metadata_need(node, operation, bound.user_id, body)?;
        node.shared.judge(bound.user_id, need)?;
        // Secrets are turned into hashes before they reach the journal.
        crate::service::user_commands::prepare(&node.shared, operation, bound.user_id, body).await?
    };
    let journaled = envelope(
        node.shared.stamp_now(),
        bound.user_id,
        prepared.body.as_deref().unwrap_or(body),
    );
    let (client, request_number) = (bound.client, request.header.request);
    let outcome = match path {
        WritePath::Relay => {
            node.metadata
                .submit_anywhere(client, request_number, operation.to_repr(), journaled)
                .await
        }
        _ => {
            let operation = operation.to_repr();
            node.metadata
                .submit(client, request_number, operation, journaled)
                .await
        }
    };
    if let Outcome::Committed { op, reply } = &outcome {
        // Judged again by the primary behind an op that took grants away, and refused there.
        if *op == NOT_PREPARED {
            return Err(model_replies::rejection_of(reply).unwrap_or(ErrorCode::Unauthorized));
        }
        if path == WritePath::Relay {
            node.metadata.note_relayed(*op);
            // Committed on the primary first: answered once applied here too, so the
            // client's next request finds it (else that request waits for it).
            let _ = metadata_reached(node, *op, routing::READ_WAIT).await;
        }
    }
    match outcome {
        Outcome::Committed { op, reply } => {
            // The model's verdict, read once (revealing a token does not change it).
            let rejection = model_replies::rejection_of(&reply);
            if iggy_metadata::permissions::takes_grants_away(operation) && rejection.is_none() {
                fenced(node, op).await;
            }
            // An audit line per change of streams, topics, users, tokens and groups (the node
            // that took the request logs it), which `info` otherwise had none of.
            if !retry && rejection.is_none() {
                tracing::info!(
                    "{} by user {} (session {}) committed as metadata op {op}",
                    command.name,
                    bound.user_id,
                    bound.session
                );
            }
            if operation == Operation::CreatePersonalAccessToken && rejection.is_none() {
                match &prepared.token {
                    Some(token) if !retry => {
                        node.remember_token(bound.client, request.header.request, token)
                    }
                    Some(_) => {}
                    // Created before a restart (or long ago): the token exists, but its secret
                    // is only ever kept as a hash, so it cannot be shown again.
                    None => return Err(ErrorCode::PersonalAccessTokenAlreadyExists),
                }
            }
            let reply = prepared.reveal(reply);
            if !command.result_framed {
                // Not result-framed (138): a rejection travels in the status.
                if let Some(code) = rejection {
                    return Err(code);
                }
                return Ok(request.committed(operation, op, &[]));
            }
            Ok(request.committed(operation, op, &reply))
        }
        Outcome::Refused(refusal) if path == WritePath::Relay => {
            Err(routing::relayed_error(metadata_refused(node, &refusal)))
        }
        Outcome::Refused(refusal) => Err(metadata_refused(node, &refusal)),
        Outcome::Failed => Err(ErrorCode::TransientNotCommitted),
    }
}

/// Waits until a change that took something away from clients (grants, a session), committed
/// at `op`, may be answered: until no node can judge requests by a metadata copy without it
/// (`consensus::grant_lease`), so the client that revoked a grant or logged out never sees the
/// revoked user or the ended session served after its answer. A retry waits again (its
/// commit was learned only now). Bounded: should the lease book never clear it (primaries
/// changing again and again), the answer goes after `NodeLeases::fence_longest` with a
/// warning.
async fn fenced(node: &Node, op: u64) {
    let Some(plane) = &node.shared.plane else {
        return;
    };
    let leases = plane.leases();
    let learned_at = std::time::Instant::now();
    let give_up = learned_at + leases.fence_longest();
    loop {
        let now = std::time::Instant::now();
        if leases.fence_clear(op, learned_at, now) {
            return;
        }
        if now >= give_up {
            tracing::warn!(
                "metadata op {op} took grants or a session away, and not every node confirmed \
                 applying it within {:?} nor could be shown to hold no lease from before it: \
                 answered anyway",
                leases.fence_longest()
            );
            return;
        }
        compio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

// ----- partition plane -----

/// Resolves stream, topic and partition ids to a partition the node serves.
fn resolve_partition(
    node: &Node,
    stream: &iggy_generated::payloads::Identifier<'_>,
    topic: &iggy_generated::payloads::Identifier<'_>,
    partition: Option<u32>,
) -> Result<PartitionKey, ErrorCode> {
    let metadata = node.shared.metadata.borrow();
    let (s, t) = metadata.topic(&ident(stream)?, &ident(topic)?)?;
    let partition = partition.unwrap_or(0);
    if !t.partitions.contains_key(&partition) {
        return Err(ErrorCode::PartitionNotFound);
    }
    Ok((s.id, t.id, partition))
}

/// [`resolve_partition`] for `user`, whose request needs any of `needs` on the topic: a
/// missing stream, topic or partition is judged first as if it existed (see `metadata_need`,
/// and where [`copy_is_latest`]), so a user who may not make the request learns nothing of what
/// exists (41 either way).
fn resolve_partition_for(
    node: &Node,
    (user, needs): (u32, Needs),
    stream: &iggy_generated::payloads::Identifier<'_>,
    topic: &iggy_generated::payloads::Identifier<'_>,
    partition: Option<u32>,
) -> Result<PartitionKey, ErrorCode> {
    resolve_partition(node, stream, topic, partition)
        .map_err(|missing| judged_miss(node, (user, needs), stream, topic, missing))
}

/// The answer to a request of `user` needing any of `needs` on a stream or topic that is
/// missing (`missing` says which): judged first as if it existed, where this copy is the latest
/// word ([`copy_is_latest`]), so a user who could not make the request were it there is refused
/// (41) and learns nothing of what exists; one who could is told what is missing. The HTTP
/// routes that resolve a topic themselves answer the same way.
pub(crate) fn judged_miss(
    node: &Node,
    (user, needs): (u32, Needs),
    stream: &iggy_generated::payloads::Identifier<'_>,
    topic: &iggy_generated::payloads::Identifier<'_>,
    missing: ErrorCode,
) -> ErrorCode {
    if !copy_is_latest(node) {
        return missing;
    }
    let assumed = iggy_metadata::permissions::topic_whatever_exists(
        &node.shared.metadata.borrow(),
        stream,
        topic,
    );
    if let Ok((stream, topic)) = assumed {
        let needs: Vec<Need> = needs.iter().map(|need| need(stream, topic)).collect();
        if let Err(refused) = node.shared.judge_any(user, &needs) {
            return refused;
        }
    }
    missing
}

/// The grants a partition request may be made under, as a function of the stream and topic.
pub(crate) type Needs = &'static [fn(u32, u32) -> Need];

/// Whoever may poll there (offsets, polls, 0.11.1's lookups).
pub(crate) const POLLS: Needs = &[Need::PollMessages];

/// Whoever may send there.
pub(crate) const SENDS: Needs = &[Need::SendMessages];

/// Whoever may read the topic (its consumer groups).
const READS_TOPIC: Needs = &[Need::ReadTopic];

/// Whoever may read a consumer group: its topic's readers and pollers.
const GROUP_READERS: Needs = &[Need::ReadTopic, Need::PollMessages];

fn incarnation_of(node: &Node, key: PartitionKey) -> u64 {
    node.shared.live_incarnation(key).unwrap_or(0)
}

/// The partition context a client sends must name the partition's current history.
/// A 0.11.1 header has no `partition_incarnation` (those bytes are reserved, zero, in its
/// layout): its sessions name a partition by ids alone, as that protocol did.
fn check_incarnation(
    node: &Node,
    bound: Bound,
    header: &RequestHeader,
    key: PartitionKey,
) -> Result<(), ErrorCode> {
    if Codec::of(bound.protocol) == Codec::V0_11_1 {
        return Ok(());
    }
    if header.partition_incarnation != incarnation_of(node, key) {
        return Err(ErrorCode::HistoryUnavailable);
    }
    Ok(())
}

/// The owner generation a poll or offset write captured (its header's, from the poll that
/// delivered the position; 0: none) must still hold, as the protocol has it: a plain
/// consumer's request captures none, and a group's acts only for the partition's current
/// owner under one of the group's generations (`ConsumerGroup::admits_captured_owner`); else
/// ConsumerGroupPartitionNotOwned (5009), which the SDK documents for a lost owner. An
/// external group's offsets have no Iggy owner; a 0.11.1 header has no such field.
fn check_captured_owner(
    node: &Node,
    bound: Bound,
    header: &RequestHeader,
    owner: OffsetOwner,
    key: PartitionKey,
) -> Result<(), ErrorCode> {
    if Codec::of(bound.protocol) == Codec::V0_11_1 {
        return Ok(());
    }
    if header.owner_generation == 0 {
        return uncaptured_group_owner(node, bound, owner, key);
    }
    let admitted = match owner {
        OffsetOwner::Consumer(_) => false,
        OffsetOwner::External(_) => true,
        OffsetOwner::Group(group) => {
            let metadata = node.shared.metadata.borrow();
            let (topic, group) = group_now(&metadata, key, group)?;
            group.admits_captured_owner(
                header.owner_generation,
                bound.client,
                key.2,
                &topic.partition_ids(),
            )
        }
    };
    match admitted {
        true => Ok(()),
        false => Err(ErrorCode::ConsumerGroupPartitionNotOwned),
    }
}

/// A group poll or group offset write that captured no owner (owner generation 0) is bound to
/// the caller's installed owner, or refused (the SDK's header contract): from a client outside
/// the group ConsumerGroupMemberNotFound (5006, as its poll), from a member that does not own
/// the partition ConsumerGroupPartitionNotOwned (5009), so neither moves the owner's offset.
/// A group with no members takes it from anyone allowed: an operator setting an idle group's
/// offset (the CLI's `consumer-offset set --kind consumer-group`).
fn uncaptured_group_owner(
    node: &Node,
    bound: Bound,
    owner: OffsetOwner,
    key: PartitionKey,
) -> Result<(), ErrorCode> {
    let OffsetOwner::Group(group) = owner else {
        return Ok(());
    };
    let metadata = node.shared.metadata.borrow();
    let (topic, group) = group_now(&metadata, key, group)?;
    match group.members.is_empty() {
        true => Ok(()),
        false => owned_by(group, topic, bound.client, key.2),
    }
}

/// The topic of `key` as the model holds it now, or what is missing: a request resolved `key`
/// before it waited (for its partition, its replica, a client table), and a delete may have
/// committed meanwhile.
fn topic_now(metadata: &Metadata, key: PartitionKey) -> Result<&Topic, ErrorCode> {
    let found = metadata.topic(&Ident::Id(key.0), &Ident::Id(key.1));
    found.map(|(_, topic)| topic)
}

/// [`topic_now`], with its consumer group `group`.
fn group_now(
    metadata: &Metadata,
    key: PartitionKey,
    group: u32,
) -> Result<(&Topic, &ConsumerGroup), ErrorCode> {
    let topic = topic_now(metadata, key)?;
    let group = topic.consumer_groups.get(&group);
    Ok((topic, group.ok_or(ErrorCode::ConsumerGroupIdNotFound)?))
}

/// Whether `client` owns `partition` of `topic` in `group`: a client outside the group is told
/// so (5006), to join again; a member is fenced from a partition another member owns (5009).
fn owned_by(
    group: &iggy_metadata::model::ConsumerGroup,
    topic: &iggy_metadata::model::Topic,
    client: u128,
    partition: u32,
) -> Result<(), ErrorCode> {
    if !group.members.contains(&client) {
        return Err(ErrorCode::ConsumerGroupMemberNotFound);
    }
    if group.owner_of(partition, &topic.partition_ids()) != Some(client) {
        return Err(ErrorCode::ConsumerGroupPartitionNotOwned);
    }
    Ok(())
}

/// Who an offset belongs to, for a consumer of `kind` (1 consumer, 2 group, 3 external group).
///
/// Kind 3 (`Consumer::external_group`) names an existing Iggy consumer group of the topic,
/// whose membership is managed outside Iggy: its offsets have their own slot
/// ([`OffsetOwner::External`], apart from the group's kind-2 offsets), are stored with no
/// membership and no range check, are never polled, and go when the group is deleted. For
/// either kind the group must exist: a store, get, delete or poll naming a missing group fails
/// with ConsumerGroupIdNotFound (5000) for a numeric id and ConsumerGroupNameNotFound (5003)
/// for a name, as upstream answers and the SDK documents; a get answers "no offset" only when
/// the group resolves. (Offsets for a group that does not exist would have no owner whose
/// deletion removes them.)
///
/// With the owner comes the metadata op that created it (a group's; 0 for a consumer): a read
/// of the owner's offset passes it on, so an offset an earlier group with the same id left
/// behind (its deletion has not reached the partition yet) is never served as this group's,
/// and so does an offset write, so a deleted group's late store never replaces a later
/// group's offset and a delete removes only the group's own.
fn offset_owner(
    node: &Node,
    consumer: &iggy_generated::payloads::Consumer<'_>,
    key: PartitionKey,
) -> Result<(OffsetOwner, u64), ErrorCode> {
    let id = ident(&consumer.id)?;
    match consumer.kind {
        1 => match id {
            Ident::Id(id) => Ok((OffsetOwner::Consumer(id), 0)),
            Ident::Name(name) => Ok((OffsetOwner::Consumer(name_hash(&name)), 0)),
        },
        2 | 3 => {
            let metadata = node.shared.metadata.borrow();
            let topic = topic_now(&metadata, key)?;
            let group = match &id {
                Ident::Id(id) => topic.consumer_groups.get(id),
                Ident::Name(name) => topic.consumer_groups.values().find(|g| &g.name == name),
            };
            match (group, consumer.kind) {
                (Some(group), 2) => Ok((OffsetOwner::Group(group.id), group.created_at_op)),
                (Some(group), _) => Ok((OffsetOwner::External(group.id), group.created_at_op)),
                (None, _) => Err(match id {
                    Ident::Id(_) => ErrorCode::ConsumerGroupIdNotFound,
                    Ident::Name(_) => ErrorCode::ConsumerGroupNameNotFound,
                }),
            }
        }
        _ => Err(ErrorCode::InvalidFormat),
    }
}

/// Whether a group poll (consumer kind 2) comes from a member of its group, told only to a user
/// who may poll the topic.
fn member_of_polled_group(node: &Node, bound: Bound, poll: &PollMessagesRequest<'_>) -> bool {
    if poll.consumer.kind != 2 {
        return false;
    }
    let (Ok(stream), Ok(topic), Ok(group)) = (
        ident(&poll.stream_id),
        ident(&poll.topic_id),
        ident(&poll.consumer.id),
    ) else {
        return false;
    };
    let metadata = node.shared.metadata.borrow();
    let Ok((s, t, group)) = metadata.group(&stream, &topic, &group) else {
        return false;
    };
    node.shared
        .user_allows(bound.user_id, Need::PollMessages(s.id, t.id))
        && group.members.contains(&bound.client)
}

/// Consumers named by string keep their offsets under a stable 32-bit key.
fn name_hash(name: &str) -> u32 {
    use std::hash::Hasher;
    let mut hasher = twox_hash::XxHash32::with_seed(0);
    hasher.write(name.as_bytes());
    hasher.finish() as u32 | 0x8000_0000
}

fn partition_arg(partition: &iggy_generated::payloads::OptionalPartitionId) -> Option<u32> {
    (partition.has == 1).then_some(partition.partition_id)
}

/// Checks a send; its batch is a zero-copy slice of the received buffer, the buffer's only
/// holder, so the partition's primary stamps its `base_timestamp` in place as it prepares it
/// (`StateMachine::PREPARE_STAMP`), journaled with the batch.
fn prepare_send(
    node: &Rc<Node>,
    routing: Routing,
    bound: Bound,
    body: Vec<u8>,
) -> Result<(PartitionKey, PartitionWrite), ErrorCode> {
    let (key, offset) = {
        let send: SendMessagesRequest = decode(&body)?;
        if send.partitioning.kind != 2 || send.partitioning.value.len() != 4 {
            return Err(ErrorCode::InvalidFormat);
        }
        let partition = u32::from_le_bytes(send.partitioning.value.try_into().expect("4 bytes"));
        let key = resolve_partition_for(
            node,
            (bound.user_id, SENDS),
            &send.stream_id,
            &send.topic_id,
            Some(partition),
        )?;
        partition_primary_for(node, key, routing)?;
        node.shared
            .judge(bound.user_id, Need::SendMessages(key.0, key.1))?;
        // metadata_length counts stream id through messages count.
        if send.metadata_length as usize != body.len() - 4 - send.batch.len() {
            return Err(ErrorCode::InvalidFormat);
        }
        let count =
            iggy_storage::batch::verify_arriving(send.batch).map_err(replies::batch_error)?;
        if count == 0 || count != send.messages_count {
            return Err(ErrorCode::InvalidMessagesCount);
        }
        (key, body.len() - send.batch.len())
    };
    let body = Bytes::from(body);
    Ok((
        key,
        PartitionWrite::Send {
            batch: body.slice(offset..),
        },
    ))
}

fn prepare_offset_write(
    node: &Rc<Node>,
    request: &Request<'_>,
    routing: Routing,
    bound: Bound,
    body: &Bytes,
) -> Result<(PartitionKey, PartitionWrite), ErrorCode> {
    Ok(match request.operation {
        Operation::StoreConsumerOffset => {
            let store: StoreConsumerOffsetRequest = decode(body)?;
            let key = resolve_partition_for(
                node,
                (bound.user_id, POLLS),
                &store.stream_id,
                &store.topic_id,
                partition_arg(&store.partition_id),
            )?;
            partition_primary_for(node, key, routing)?;
            node.shared
                .judge(bound.user_id, Need::PollMessages(key.0, key.1))?;
            // An offset past the log's end is refused by the partition's primary as it
            // prepares the write (`Partition::admits`), wherever the client sent it.
            let (owner, owner_created_at) = offset_owner(node, &store.consumer, key)?;
            (
                key,
                PartitionWrite::StoreOffset {
                    owner,
                    offset: store.offset,
                    resolved_at: node.shared.metadata.borrow().commit,
                    owner_created_at,
                    keys_max: node.shared.config.partition.consumer_offsets_max,
                },
            )
        }
        Operation::DeleteConsumerOffset => {
            let delete: DeleteConsumerOffsetRequest = decode(body)?;
            let key = resolve_partition_for(
                node,
                (bound.user_id, POLLS),
                &delete.stream_id,
                &delete.topic_id,
                partition_arg(&delete.partition_id),
            )?;
            partition_primary_for(node, key, routing)?;
            node.shared
                .judge(bound.user_id, Need::PollMessages(key.0, key.1))?;
            // The group's creation op goes with the delete: a stored offset another group with
            // the same id left (its deletion not yet swept from the partition) is not this
            // group's, and the partition answers ConsumerOffsetNotFound for it.
            let (owner, owner_created_at) = offset_owner(node, &delete.consumer, key)?;
            (
                key,
                PartitionWrite::DeleteOffset {
                    owner,
                    resolved_at: node.shared.metadata.borrow().commit,
                    owner_created_at,
                },
            )
        }
        _ => return Err(ErrorCode::InvalidCommand),
    })
}

async fn partition_write(
    node: &Rc<Node>,
    request: &Request<'_>,
    routing: Routing,
    bound: Bound,
    (key, write): (PartitionKey, PartitionWrite),
) -> Result<Dispatched, ErrorCode> {
    let header = request.header;
    check_incarnation(node, bound, header, key)?;
    let partition = writable_partition(node, key, routing).await?;
    // A committed retry is answered from the client table: the captured owner is judged
    // against today's membership, which may have moved the partition since it committed.
    if let PartitionWrite::StoreOffset { owner, .. } | PartitionWrite::DeleteOffset { owner, .. } =
        write
        && (header.owner_generation != 0 || matches!(owner, OffsetOwner::Group(_)))
        && !partition
            .group
            .already_committed(bound.client, header.request)
            .await
    {
        check_captured_owner(node, bound, header, owner, key)?;
    }
    let incarnation = node.shared.live_incarnation(key);
    let written = match routing {
        Routing::ByClient => partition
            .write(bound.client, header.request, write)
            .await
            .map_err(|error| partition_refused(node, key, error)),
        Routing::ByServer => {
            relayed_partition_write(&partition, bound, header.request, write, request.answer_by)
                .await
        }
    };
    let (op, result) = written.map_err(|error| deleted_meanwhile(node, key, incarnation, error))?;
    // Refused by the primary as it was about to prepare it (`Partition::admits`): never
    // committed, so the refusal is the reply's status, as one judged here.
    if let (NOT_PREPARED, WriteResult::Failed(code)) = (op, &result) {
        return Err(*code);
    }
    let operation = request.operation;
    match (operation, result) {
        (Operation::SendMessages, WriteResult::Appended { base_offset, .. }) => {
            Ok(request.committed(operation, op, &replies::send_confirmation(key, base_offset)))
        }
        (Operation::SendMessages, WriteResult::Failed(code)) => Err(code),
        (_, WriteResult::Failed(code)) => {
            Ok(request.committed(operation, op, &model_replies::result_rejection(code)))
        }
        _ => Ok(request.committed(operation, op, &model_replies::RESULT_OK)),
    }
}

/// A write whose verdict never came (57) because its partition was deleted meanwhile (a
/// committed delete of it, its topic or its stream tore its group down): whatever it wrote went
/// with the partition, so it is answered as a write to what is missing, which is definite,
/// rather than as one whose outcome is unknown (the SDK keeps such an op and reports it
/// uncertain, although nothing of it can ever appear).
/// `incarnation` is the one the model held as the write went out: none when its delete had
/// applied already and only the group's teardown was still to come.
fn deleted_meanwhile(
    node: &Node,
    key: PartitionKey,
    incarnation: Option<u64>,
    error: ErrorCode,
) -> ErrorCode {
    let deleted = incarnation.is_none() || node.shared.live_incarnation(key) != incarnation;
    match error {
        // What is missing now: its stream, its topic, or the partition (or its incarnation).
        ErrorCode::TransientNotCommitted if deleted => {
            let metadata = node.shared.metadata.borrow();
            topic_now(&metadata, key)
                .err()
                .unwrap_or(ErrorCode::PartitionNotFound)
        }
        error => error,
    }
}

/// A write of a client that cannot route, committed by the partition's primary wherever that
/// is; the op it was acknowledged at is recorded for this node's reads of it.
async fn relayed_partition_write(
    partition: &PartitionHandle,
    bound: Bound,
    request: u64,
    write: PartitionWrite,
    answer_by: std::time::Instant,
) -> Result<(u64, WriteResult), ErrorCode> {
    let (op, result) = partition
        .write_anywhere(bound.client, request, write, replay_until(answer_by))
        .await
        .map_err(routing::relayed_error)?;
    partition.group.note_relayed(op);
    Ok((op, result))
}

/// How long before its request is answered for a relayed write stops being sent again.
const RELAY_REPLY_MARGIN: std::time::Duration = std::time::Duration::from_millis(250);

/// Until when a relayed write is sent again (`PartitionHandle::write_anywhere`): shortly
/// before the request is answered for, so its own verdict says whether it may have committed.
fn replay_until(answer_by: std::time::Instant) -> std::time::Instant {
    answer_by
        .checked_sub(RELAY_REPLY_MARGIN)
        .unwrap_or(answer_by)
}

/// DeleteSegments (503) is a committed op of the partition's group: the primary turns "the
/// oldest `count` segments" into "every segment below offset X" now, so a retry whose reply was
/// lost replays that reply from the client table and a journal replay deletes nothing more.
async fn delete_segments(
    node: &Rc<Node>,
    request: &Request<'_>,
    routing: Routing,
    bound: Bound,
    body: &[u8],
) -> Result<Dispatched, ErrorCode> {
    // The SDK sends 503 to the metadata primary, and its permission check reads the model.
    metadata_write_path(node, routing)?;
    let need = metadata_need(node, request.operation, bound.user_id, body)?;
    node.shared.judge(bound.user_id, need)?;
    let delete: DeleteSegmentsRequest = decode(body)?;
    let key = resolve_partition(
        node,
        &delete.stream_id,
        &delete.topic_id,
        Some(delete.partition_id),
    )?;
    // The op is the partition group's: a metadata primary that does not lead the partition
    // relays it to the partition's primary (`write_anywhere`); it plans from its own replica
    // of the log, and the client table the op is committed through answers a retry.
    let partition = writable_partition(node, key, routing).await?;
    let request_number = request.header.request;
    // A committed retry is answered from the client table whatever its body says.
    let write = if partition
        .group
        .already_committed(bound.client, request_number)
        .await
    {
        PartitionWrite::RetireSegments {
            keep_from: 0,
            planned_at: NO_OFFSET_HOLD,
        }
    } else {
        let plan = plan_within_bound(node, &partition, key, delete.segments_count).await?;
        PartitionWrite::RetireSegments {
            keep_from: plan.keep_from,
            planned_at: plan.planned_at,
        }
    };
    let incarnation = node.shared.live_incarnation(key);
    let written = partition
        .write_anywhere(
            bound.client,
            request_number,
            write,
            replay_until(request.answer_by),
        )
        .await;
    // Refused as not primary: the partition's view moved meanwhile.
    let written = written.map_err(|error| match error {
        ErrorCode::NotPrimary => ErrorCode::TransientNotAccepted,
        error => deleted_meanwhile(node, key, incarnation, error),
    });
    let (op, result) = written?;
    if routing == Routing::ByServer {
        partition.group.note_relayed(op);
    }
    match (op, result) {
        (_, WriteResult::Failed(code)) => Err(code),
        // Not result-framed: the reply is the status alone. The SDK files 503 under the
        // metadata plane and keeps the reply's commit as its metadata watermark (sent back as
        // `minimum_metadata_op` on reads), so the commit is the metadata group's, not the
        // partition op's.
        (_, _) => {
            let commit = node.shared.metadata.borrow().commit;
            Ok(request.committed(request.operation, commit, &[]))
        }
    }
}

/// How long a segment deletion waits for its group's bound to reach its plan: this replica
/// (the metadata primary's, which plans it) learns what every replica holds from the partition
/// primary's Commit heartbeats, a few ticks behind the sends just acknowledged.
const RETIREMENT_BOUND_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a deletion of up to `count` of the oldest segments of `partition` keeps the log from
/// (and the op it was planned at: this replica may not have applied the latest offset stores,
/// which then hold it back as every replica applies it), kept to the group's bound (never
/// past what a replica that can still catch up by repair lacks). A plan the bound holds back is planned again until the bound reaches it or
/// [`RETIREMENT_BOUND_WAIT`] passes; a plan held back whole commits a retirement that deletes
/// nothing, and the command succeeds like one asking for more segments than the log has.
async fn plan_within_bound(
    node: &Node,
    partition: &PartitionHandle,
    key: PartitionKey,
    count: u32,
) -> Result<RetirementPlan, ErrorCode> {
    let deadline = std::time::Instant::now() + RETIREMENT_BOUND_WAIT;
    loop {
        // The groups as of now: a group created while the plan waits holds its offsets back.
        let (live_groups, metadata_op) = {
            let metadata = node.shared.metadata.borrow();
            let topic = metadata
                .streams
                .get(&key.0)
                .and_then(|stream| stream.topics.get(&key.1))
                .ok_or(ErrorCode::PartitionNotFound)?;
            (topic.live_groups(), metadata.commit)
        };
        let plan = partition
            .plan_segment_retirement(count, live_groups, metadata_op)
            .await?;
        if plan.keep_from == plan.planned || std::time::Instant::now() >= deadline {
            plan.log_hold(key.2);
            return Ok(plan);
        }
        compio::time::sleep(crate::consensus::plane::TICK).await;
    }
}

// ----- non-replicated requests -----

async fn non_replicated(
    node: &Rc<Node>,
    connection: &mut Connection,
    request: &Request<'_>,
    code: u32,
    body: &[u8],
) -> Result<Dispatched, ErrorCode> {
    let header = request.header;
    let version = connection
        .bound
        .map_or(protocol::CURRENT.packed(), |b| b.protocol);
    let command = commands::lookup(code, version).ok_or(ErrorCode::InvalidCommand)?;
    if command.operation != "NonReplicated" {
        return Err(ErrorCode::InvalidCommand);
    }
    match code {
        1 => return Ok(request.reply(&[])),
        15 => return Ok(bind_session(node, connection, request, body).await),
        _ => {}
    }
    let Some(bound) = authenticated(node, connection, header) else {
        return Err(ErrorCode::Unauthenticated);
    };
    session_metadata_reached(node, connection.routing, header).await?;
    // The roster is what a client asks to find where to go: never held back.
    if code != 12 {
        lease_regained(node, request).await;
    }
    let routing = connection.routing;
    let commit = node.shared.metadata.borrow().commit;
    let user = bound.user_id;
    let codec = Codec::of(bound.protocol);
    let judge = |need: Need| node.shared.judge(user, need);
    let metadata_read = |need: Need, body: Option<Vec<u8>>| -> Result<Dispatched, ErrorCode> {
        judge(need)?;
        Ok(request.reply(&body.unwrap_or_default()))
    };
    match code {
        12 => {
            let metadata = node.metadata.figures().role();
            Ok(request.reply(&replies::cluster_metadata(&node.shared, codec, metadata)))
        }
        200 => {
            let r: StreamIdRequest = decode(body)?;
            let named = ident(&r.stream_id)?;
            let id = node
                .shared
                .metadata
                .borrow()
                .stream(&named)
                .map(|s| s.id)
                .ok();
            match id {
                Some(id) => {
                    figures_current(node, |(stream, _, _)| stream == id).await;
                    // A user whose grants in the stream are some topics' learns of those only.
                    let visible = |topic| {
                        node.shared.user_allows(user, Need::ReadTopics(id))
                            || node
                                .shared
                                .user_allows(user, Need::DescribeTopic(id, topic))
                    };
                    // Resolved again: a delete may have committed during the wait.
                    let reply = {
                        let metadata = node.shared.metadata.borrow();
                        let stream = metadata.stream(&named).ok().filter(|s| s.id == id);
                        stream.map(|stream| {
                            model_replies::stream_details_for(&*node.shared, stream, codec, visible)
                        })
                    };
                    metadata_read(Need::DescribeStream(id), reply)
                }
                None => metadata_read(Need::ReadStreams, None),
            }
        }
        201 => {
            figures_current(node, |_| true).await;
            metadata_read(
                Need::ReadStreams,
                Some(model_replies::stream_list(
                    &node.shared.metadata.borrow(),
                    &*node.shared,
                    codec,
                )),
            )
        }
        300 => {
            let r: TopicIdRequest = decode(body)?;
            let named = (ident(&r.stream_id)?, ident(&r.topic_id)?);
            let found = node
                .shared
                .metadata
                .borrow()
                .topic(&named.0, &named.1)
                .map(|(s, t)| (s.id, t.id))
                .ok();
            match found {
                Some((s, t)) => {
                    figures_current(node, |(stream, topic, _)| (stream, topic) == (s, t)).await;
                    // Resolved again: a delete may have committed during the wait.
                    let reply = {
                        let metadata = node.shared.metadata.borrow();
                        let topic = metadata.topic(&named.0, &named.1).ok();
                        topic
                            .filter(|(stream, topic)| (stream.id, topic.id) == (s, t))
                            .map(|(_, topic)| {
                                model_replies::topic_details(&*node.shared, s, topic, codec)
                            })
                    };
                    metadata_read(Need::DescribeTopic(s, t), reply)
                }
                // Judged as if it existed: a user who may read the stream's topics is told it
                // is missing (it was refused 41 unless it could read every stream).
                None => {
                    let assumed = iggy_metadata::permissions::topic_whatever_exists(
                        &node.shared.metadata.borrow(),
                        &r.stream_id,
                        &r.topic_id,
                    )?;
                    metadata_read(Need::DescribeTopic(assumed.0, assumed.1), None)
                }
            }
        }
        301 => {
            let r: StreamIdRequest = decode(body)?;
            let named = ident(&r.stream_id)?;
            let found = (node.shared.metadata.borrow()).stream(&named).map(|s| s.id);
            // A missing stream is judged first as if it existed (see `judged_miss`).
            let stream = found.map_err(|missing| match copy_is_latest(node) {
                true => judge(Need::ReadTopics(iggy_metadata::permissions::NO_SUCH_ID))
                    .err()
                    .unwrap_or(missing),
                false => missing,
            })?;
            figures_current(node, |(s, _, _)| s == stream).await;
            // Resolved again: a delete may have committed during the wait.
            let listed = {
                let metadata = node.shared.metadata.borrow();
                match metadata.stream(&named) {
                    Ok(again) if again.id == stream => Ok(model_replies::topic_list(
                        &metadata,
                        &*node.shared,
                        stream,
                        codec,
                    )),
                    Ok(_) => Err(ErrorCode::StreamIdNotFound),
                    Err(missing) => Err(missing),
                }
            };
            match listed {
                Ok(reply) => metadata_read(Need::ReadTopics(stream), Some(reply)),
                Err(missing) => {
                    judge(Need::ReadTopics(stream))?;
                    Err(missing)
                }
            }
        }
        105 => {
            let r: GetPartitionRouteRequest = decode(body)?;
            // The SDK asks the route before every partition call: whoever may poll (which
            // read_topic implies) or send there may learn it.
            let may_learn: Needs = &[Need::PollMessages, Need::SendMessages];
            let key = resolve_partition_for(
                node,
                (user, may_learn),
                &r.stream_id,
                &r.topic_id,
                Some(r.partition_id),
            )?;
            let needs = [
                Need::PollMessages(key.0, key.1),
                Need::SendMessages(key.0, key.1),
            ];
            node.shared.judge_any(user, &needs)?;
            let position = route_position(node, key)?;
            Ok(request.reply(&replies::partition_route(&node.shared, key, position)))
        }
        // 104 is 0.11.1's poll on the primary: this node is the primary of every partition.
        100 | 104 => poll(node, request, routing, bound, connection.reply_max, body).await,
        // 0.11.1's routing lookups (poll, consumer offset): the node that serves the partition's
        // polls and offsets, its group's primary, which the client then asks with 104 or 120.
        103 | 123 => {
            let (stream, topic, partition) = match code {
                103 => {
                    let r: PollMessagesRequest = decode(body)?;
                    (r.stream_id, r.topic_id, partition_arg(&r.partition_id))
                }
                _ => {
                    let r: GetConsumerOffsetRequest = decode(body)?;
                    (r.stream_id, r.topic_id, partition_arg(&r.partition_id))
                }
            };
            let key = resolve_partition_for(node, (user, POLLS), &stream, &topic, partition)?;
            judge(Need::PollMessages(key.0, key.1))?;
            let (_, primary) = route_position(node, key)?;
            let session = iggy_generated::payloads::SessionIdentity {
                client_id: header.client,
                session: bound.session,
                metadata_watermark: commit,
            };
            let metadata = node.metadata.figures().role();
            Ok(request.reply(&replies::poll_routing(
                &node.shared,
                session,
                primary,
                metadata,
            )))
        }
        120 => {
            let r: GetConsumerOffsetRequest = decode(body)?;
            let key = resolve_partition_for(
                node,
                (user, POLLS),
                &r.stream_id,
                &r.topic_id,
                partition_arg(&r.partition_id),
            )?;
            let served = read_position(node, key, routing).await?;
            judge(Need::PollMessages(key.0, key.1))?;
            let (owner, owner_created_at_op) = offset_owner(node, &r.consumer, key)?;
            let partition = served_partition(node, key, served)?;
            match partition.offset(owner, owner_created_at_op).await {
                Some((current, Some(stored))) => {
                    Ok(request.reply(&replies::consumer_offset(key.2, current, stored)))
                }
                _ => Ok(request.reply(&[])),
            }
        }
        600 | 606 => {
            let r: ConsumerGroupIdRequest = decode(body)?;
            let metadata = node.shared.metadata.borrow();
            let (s, t) = match metadata.topic(&ident(&r.stream_id)?, &ident(&r.topic_id)?) {
                Ok(found) => found,
                Err(missing) => {
                    drop(metadata);
                    // Judged first as if it existed (`judged_miss`): 41 to a user who could not
                    // read the group were it there; one who could is told it is not found.
                    let needs = (user, GROUP_READERS);
                    let answer = judged_miss(node, needs, &r.stream_id, &r.topic_id, missing);
                    return match answer == missing && code == 600 {
                        true => Ok(request.reply(&[])),
                        false => Err(answer),
                    };
                }
            };
            node.shared.judge_any(
                user,
                &[Need::ReadTopic(s.id, t.id), Need::PollMessages(s.id, t.id)],
            )?;
            let Ok((_, topic, group)) = metadata.group(
                &ident(&r.stream_id)?,
                &ident(&r.topic_id)?,
                &ident(&r.group_id)?,
            ) else {
                return Ok(request.reply(&[]));
            };
            let reply = if code == 600 {
                model_replies::group_details(&*node.shared, topic, group)
            } else {
                model_replies::group_sync(topic, group, bound.client)
            };
            Ok(request.reply(&reply))
        }
        601 => {
            let r: TopicIdRequest = decode(body)?;
            let metadata = node.shared.metadata.borrow();
            let (s, t) = match metadata.topic(&ident(&r.stream_id)?, &ident(&r.topic_id)?) {
                Ok(found) => found,
                Err(missing) => {
                    drop(metadata);
                    let needs = (bound.user_id, READS_TOPIC);
                    return Err(judged_miss(node, needs, &r.stream_id, &r.topic_id, missing));
                }
            };
            judge(Need::ReadTopic(s.id, t.id))?;
            Ok(request.reply(&model_replies::group_list(t)))
        }
        _ => {
            if code == 10 {
                // The stats sum every partition's figures.
                figures_current(node, |_| true).await;
            }
            crate::service::user_commands::read(node, connection, code, body)
                .await
                .map(|reply| request.reply(&reply))
        }
    }
}

/// BindSession (15): any replica serves it, from the replicated session table, once its
/// metadata reached the client's watermark and the session's own Register (the session may
/// have been registered on another replica a moment ago, or this replica restarted and has not
/// applied its journal again yet). 40 only when the session is gone as of metadata at least
/// that new; 58 when this replica did not get there within [`routing::BIND_WAIT`], so the
/// client binds later instead of registering a second session.
async fn bind_session(
    node: &Rc<Node>,
    connection: &mut Connection,
    request: &Request<'_>,
    body: &[u8],
) -> Dispatched {
    if version_refused(body) {
        return request.evict(EvictionReason::IncompatibleProtocol);
    }
    let Ok(bind_request) = BindSessionRequest::decode_exact(body) else {
        return request.evict(EvictionReason::MalformedLogin);
    };
    if protocol::admit(bind_request.version_info.protocol_version).is_none() {
        return request.evict(EvictionReason::IncompatibleProtocol);
    }
    let identity = bind_request.identity;
    if identity.client_id != request.header.client {
        return request.fail(ErrorCode::Unauthenticated);
    }
    let presented = crate::service::auth::bind_secret_hash(&bind_request.bind_secret);
    // The session number is its Register's op: metadata short of it cannot say the session is
    // gone. The SDK's watermark alone can be lower (it rises only on metadata writes' replies),
    // and a replica that restarted with the whole cluster applies its journaled ops again only
    // once the new view commits them, while Normal and in touch.
    let watermark = identity.metadata_watermark.max(identity.session);
    let found = session_at_watermark(node, watermark, |sessions| {
        sessions
            .bind(identity.client_id, identity.session, &presented)
            .ok()
    })
    .await;
    match found {
        Ok(session) => bind(
            node,
            connection,
            request,
            identity.client_id,
            session.session,
            session.user_id,
            session.protocol,
        ),
        // Ended by its own Logout a moment ago, whose answer a fence may still hold back: the
        // client, binding another link meanwhile, is told to come back (58) rather than that
        // its session is gone (40), on which the official client signs in again (a session
        // nobody ends) and fails the logout it waits on as an unknown outcome.
        Err(ErrorCode::Unauthenticated)
            if logging_out(node, identity.client_id, identity.session) =>
        {
            request.fail(ErrorCode::TransientNotAccepted)
        }
        Err(error) => request.fail(error),
    }
}

/// Whether `client`'s `session` ended by a Logout this node applied within a fence's longest
/// wait (a cluster's only).
fn logging_out(node: &Node, client: u128, session: u64) -> bool {
    let Some(plane) = &node.shared.plane else {
        return false;
    };
    let kept = plane.leases().fence_longest();
    node.shared
        .sessions_here
        .borrow()
        .logging_out(client, session, std::time::Instant::now(), kept)
}

/// The logical session `find` picks from the replicated session table, judged as a bind is
/// (BindSession here, an HTTP access token on first sight in the transport): once this
/// replica's metadata reached `watermark` (the session may have been registered on another
/// replica a moment ago). Unauthenticated (40) only when the session is gone as of metadata at
/// least that new; TransientNotAccepted (58) when this replica did not get there within
/// [`routing::BIND_WAIT`], so the client binds later instead of registering a second session.
pub async fn session_at_watermark(
    node: &Node,
    watermark: u64,
    find: impl Fn(&iggy_metadata::session::Sessions) -> Option<iggy_metadata::session::Session>,
) -> Result<iggy_metadata::session::Session, ErrorCode> {
    // A standalone node is the only copy of its sessions: nothing to wait for.
    let (watermark, budget) = match replicated(node) {
        true => (watermark, routing::BIND_WAIT),
        false => (0, std::time::Duration::ZERO),
    };
    let started = std::time::Instant::now();
    loop {
        let (found, applied) = {
            let metadata = node.shared.metadata.borrow();
            (find(&metadata.sessions), metadata.commit)
        };
        // A replica not serving in touch with its metadata primary (recovering, changing
        // views, cut off) judges no bind: it answers 58 once its wait runs out, never 40, on
        // which the SDK would register again there, on a replica that may not hold the user.
        let metadata = node.metadata.figures().role();
        let reached =
            routing::in_touch_catch_up(metadata, applied, watermark, started.elapsed(), budget);
        match routing::bind_verdict(found, reached) {
            BindVerdict::Bind(session) => return Ok(session),
            BindVerdict::Gone => return Err(ErrorCode::Unauthenticated),
            BindVerdict::Behind => return Err(ErrorCode::TransientNotAccepted),
            BindVerdict::Wait => compio::time::sleep(CATCH_UP_POLL).await,
        }
    }
}

async fn poll(
    node: &Rc<Node>,
    request: &Request<'_>,
    routing: Routing,
    bound: Bound,
    client_reply_max: Option<usize>,
    body: &[u8],
) -> Result<Dispatched, ErrorCode> {
    let header = request.header;
    let poll: PollMessagesRequest = decode(body)?;
    if poll.consumer.kind == 3 {
        // An external group's offsets are kept for a consumer Iggy does not manage: never
        // polled (`Consumer::external_group`), whatever the stream, topic or group.
        return Err(ErrorCode::FeatureUnavailable);
    }
    let key = match resolve_partition_for(
        node,
        (bound.user_id, POLLS),
        &poll.stream_id,
        &poll.topic_id,
        partition_arg(&poll.partition_id),
    ) {
        // A member's cached assignment may still name a partition deleted since: it owns it no
        // more, so it is fenced as for any partition it does not own, and the SDK re-syncs.
        Err(ErrorCode::PartitionNotFound) if member_of_polled_group(node, bound, &poll) => {
            return Err(ErrorCode::ConsumerGroupPartitionNotOwned);
        }
        resolved => resolved?,
    };
    // For a client that routes, served by the partition's primary only: a backup's log may lag
    // what the client wrote there, and the auto-commit below is a write. For one that cannot,
    // served here once this replica is current, with the auto-commit relayed.
    let served = read_position(node, key, routing).await?;
    node.shared
        .judge(bound.user_id, Need::PollMessages(key.0, key.1))?;
    check_incarnation(node, bound, header, key)?;
    let (owner, owner_created_at_op) = offset_owner(node, &poll.consumer, key)?;
    // The auto-commit below follows an await: a group deleted meanwhile refuses it.
    let resolved_at = node.shared.metadata.borrow().commit;
    let owner_generation = match owner {
        OffsetOwner::Group(group) if poll.consumer.kind == 2 => {
            let metadata = node.shared.metadata.borrow();
            let (topic, group) = group_now(&metadata, key, group)?;
            owned_by(group, topic, bound.client, key.2)?;
            group.generation
        }
        _ => 0,
    };
    // A group poll that captured no owner was bound to the caller's just above.
    if header.owner_generation != 0 {
        check_captured_owner(node, bound, header, owner, key)?;
    }
    let start = match poll.strategy.kind {
        1 => StartAt::Offset(poll.strategy.value),
        2 => StartAt::Timestamp(poll.strategy.value),
        3 => StartAt::First,
        4 => StartAt::Last,
        5 => StartAt::Next {
            owner,
            owner_created_at_op,
        },
        _ => return Err(ErrorCode::InvalidFormat),
    };
    let partition = served_partition(node, key, served)?;
    // A reply holds at most a frame's worth of records (or what the client reads, a QUIC
    // reply buffer; at least one message): a count of millions over a large partition is
    // served in several polls, not built whole.
    let reply_max = (node.shared.config.limits.max_frame_size as usize)
        .min(client_reply_max.unwrap_or(usize::MAX));
    let bytes_max = reply_max.saturating_sub(crate::runtime::partition::POLL_REPLY_HEADROOM);
    // Within the node's budget (`runtime::body_budget`), beside the request bodies it holds:
    // many consumers polling large replies at once get smaller ones (down to 64 KiB of
    // messages, whole batches, at least one) and poll on, instead of the node holding each
    // reply whole.
    let mut held = node
        .body_budget
        .lease(bytes_max as u64, UNCOUNTED_BODY_MAX as u64);
    let polled = partition
        .poll(start, poll.count, held.bytes() as usize)
        .await?;
    if let Some(client_max) = client_reply_max
        && polled.batches.bytes.len() > client_max
    {
        // One message larger than the client reads: sent, it would fail there (the SDK retries
        // a reply it cannot read until its deadline). Said here, naming the knob.
        if let Some(held_back) = node.reply_too_large.due(std::time::Instant::now()) {
            tracing::warn!(
                "a poll of partition {}/{}/{} at offset {} is refused: its message takes {} \
                 bytes, over quic.max_reply_size ({client_max}), the most a QUIC client reads \
                 (the SDK's response_buffer_size); raise both, or poll it over TCP ({held_back} \
                 more held back)",
                key.0,
                key.1,
                key.2,
                polled.batches.last_offset.unwrap_or_default(),
                polled.batches.bytes.len() - crate::runtime::partition::POLL_REPLY_HEADROOM,
            );
        }
        return Err(ErrorCode::TooBigMessagePayload);
    }
    if poll.auto_commit
        && let Some(last) = polled.batches.last_offset
    {
        let store = PartitionWrite::StoreOffset {
            owner,
            offset: last,
            resolved_at,
            owner_created_at: owner_created_at_op,
            keys_max: node.shared.config.partition.consumer_offsets_max,
        };
        // Best effort: the messages are served even if the commit is refused (a concurrent
        // request of the same client with a higher number already committed), and whatever
        // its verdict, which is waited for only until shortly before the request's deadline;
        // except at the partition's offset-key limit (see `AutoCommit`).
        let committed = async {
            let written = match routing {
                Routing::ByClient => partition.write(bound.client, header.request, store).await,
                Routing::ByServer => {
                    relayed_partition_write(
                        &partition,
                        bound,
                        header.request,
                        store,
                        request.answer_by,
                    )
                    .await
                }
            };
            // A committed refusal (the op applied, nothing stored) is a refusal too.
            match written? {
                (_, WriteResult::Failed(code)) => Err(code),
                _ => Ok(()),
            }
        };
        let wait = auto_commit_wait(
            std::time::Instant::now(),
            request.answer_by,
            request.deadline,
        );
        match settle_auto_commit(committed, wait).await {
            AutoCommit::Stored => {}
            AutoCommit::Skipped => tracing::debug!(
                "auto-commit skipped: no time left before the request's deadline; the offset \
                 stays where it was and the messages are served"
            ),
            AutoCommit::Refused(ErrorCode::TooManyConsumerOffsets) => {
                return Err(ErrorCode::TooManyConsumerOffsets);
            }
            AutoCommit::Refused(error) => tracing::debug!("auto-commit refused: {error:?}"),
            AutoCommit::Unknown => tracing::warn!(
                client = format_args!("{:032x}", bound.client),
                request = header.request,
                "auto-commit of offset {last} still without a verdict; the polled messages are \
                 served (the offset may or may not be stored)"
            ),
        }
    }
    let commit = node.shared.metadata.borrow().commit;
    let context = iggy_generated::payloads::PartitionContext {
        incarnation: incarnation_of(node, key),
        owner_generation,
        metadata_op: commit,
    };
    let mut frame = replies::polled(key.2, polled, context);
    frame::reply_in_place(
        header,
        request.operation,
        ReplyMeta {
            commit: 0,
            status: 0,
            committed: false,
        },
        &mut frame,
    );
    held.resize(frame.len() as u64);
    Ok(Dispatched::HeldReply(frame, held))
}

/// What became of a poll's auto-commit. Whichever it is, the poll answers its messages: the
/// commit can store the offset only for a poll whose messages the client is given (at least
/// once), never move it past messages the client was answered an error for. 58 would be that
/// error: the SDK resends a poll refused with it, and a `Next` after a stored offset skips.
/// The one exception is a commit refused because the partition keeps as many offset keys as
/// its limit allows and this consumer has none there: the poll fails with that refusal
/// (TooManyConsumerOffsets, 3024, no messages), as the SDK documents. The verdict is final
/// (committed, nothing stored), so no offset moved past them, and it would hold for every
/// poll until a key is freed: served anyway, a `Next` consumer would get the same messages
/// forever with no sign why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AutoCommit {
    Stored,
    /// Refused, or no verdict (57: the op may still commit).
    Refused(ErrorCode),
    /// No verdict by the time the reply had to go: the op may still commit.
    Unknown,
    /// Not proposed: no time was left to wait for it. The offset stays, so the next `Next`
    /// polls the same messages again (delivered twice, never skipped).
    Skipped,
}

/// Left between the end of an auto-commit's wait and the request's deadline, for the reply
/// to be built and sent before `answer_within` answers in its place: at most this, and a
/// quarter of a shorter request timeout (a fixed margin would take all of it, and no
/// auto-commit would ever be proposed), but never less than [`AUTO_COMMIT_REPLY_MARGIN_MIN`].
const AUTO_COMMIT_REPLY_MARGIN: std::time::Duration = std::time::Duration::from_millis(250);

/// The least margin: below it the two timers may fire in the same turn, and the request be
/// answered 58 while its auto-commit stores the offset (the messages then skipped).
const AUTO_COMMIT_REPLY_MARGIN_MIN: std::time::Duration = std::time::Duration::from_millis(5);

/// How long a poll's auto-commit may wait for its verdict at `now`, for a request given
/// `deadline` and answered for at `answer_by`; `None` when no time is left to propose it.
fn auto_commit_wait(
    now: std::time::Instant,
    answer_by: std::time::Instant,
    deadline: std::time::Duration,
) -> Option<std::time::Duration> {
    let margin = (deadline / 4).clamp(AUTO_COMMIT_REPLY_MARGIN_MIN, AUTO_COMMIT_REPLY_MARGIN);
    let wait = answer_by
        .saturating_duration_since(now)
        .checked_sub(margin)?;
    (!wait.is_zero()).then_some(wait)
}

/// Runs a poll's auto-commit `committed`, waiting at most `wait` for its verdict (see
/// [`auto_commit_wait`]; `None`: not proposed at all).
async fn settle_auto_commit(
    committed: impl Future<Output = Result<(), ErrorCode>>,
    wait: Option<std::time::Duration>,
) -> AutoCommit {
    let Some(wait) = wait else {
        return AutoCommit::Skipped;
    };
    match compio::time::timeout(wait, committed).await {
        Ok(Ok(())) => AutoCommit::Stored,
        Ok(Err(error)) => AutoCommit::Refused(error),
        Err(_) => AutoCommit::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_finds_the_first_command_that_names_it() {
        for &operation in Operation::ALL {
            let name = format!("{operation:?}");
            let first = commands::COMMANDS.iter().find(|c| c.operation == name);
            assert_eq!(
                command_for(operation).map(|c| c.code),
                first.map(|c| c.code),
                "{name}"
            );
        }
        assert_eq!(
            command_for(Operation::SendMessages).map(|c| c.name),
            Some("message.send")
        );
    }

    #[test]
    fn a_body_is_judged_against_its_commands_declared_request_in_every_version() {
        let versions = [protocol::CURRENT.packed(), protocol::V0_11_1.packed()];
        for version in versions {
            for command in commands::COMMANDS.iter().filter(|c| c.request == "Empty") {
                if commands::lookup(command.code, version).is_none() {
                    continue;
                }
                assert_eq!(check_request_body(command.code, version, &[]), Ok(()));
                assert_eq!(
                    check_request_body(command.code, version, &[0]),
                    Err(ErrorCode::InvalidCommand),
                    "{} in {version:#x}",
                    command.name
                );
            }
            // GetClient (21) is a u32: one byte more is refused, one byte less does not decode.
            assert_eq!(check_request_body(21, version, &[1, 0, 0, 0]), Ok(()));
            let longer = check_request_body(21, version, &[1, 0, 0, 0, 0]);
            assert_eq!(longer, Err(ErrorCode::InvalidCommand));
            let shorter = check_request_body(21, version, &[1, 0, 0]);
            assert_eq!(shorter, Err(ErrorCode::InvalidFormat));
            // A code the version does not know is left to the command's own refusal.
            assert_eq!(check_request_body(14, version, &[0]), Ok(()));
        }
    }

    fn header(operation: Operation) -> RequestHeader {
        RequestHeader {
            command: iggy_generated::frames::Command::Request,
            size: 256,
            client: 7,
            session: 3,
            request: 11,
            operation: operation.to_repr(),
            ..Default::default()
        }
    }

    fn status(dispatched: Dispatched) -> u32 {
        let Dispatched::Reply(bytes) = dispatched else {
            panic!("a reply, not a close");
        };
        let reply = iggy_generated::frames::ReplyHeader::decode_fixed(&bytes[..256]).unwrap();
        assert_eq!(
            (reply.client, reply.request),
            (7, 11),
            "the reply answers the request"
        );
        reply.status
    }

    #[test]
    fn a_request_pending_at_its_deadline_is_answered() {
        compio::runtime::Runtime::new().unwrap().block_on(async {
            let deadline = std::time::Duration::from_millis(5);
            let never = std::future::pending::<Dispatched>();
            let write = header(Operation::StoreConsumerOffset);
            let answered =
                answer_within(deadline, &write, Operation::StoreConsumerOffset, 0, never);
            assert_eq!(
                status(answered.await),
                ErrorCode::TransientNotCommitted.code()
            );
            let read = header(Operation::NonReplicated);
            let never = std::future::pending::<Dispatched>();
            let answered = answer_within(deadline, &read, Operation::NonReplicated, 100, never);
            assert_eq!(
                status(answered.await),
                ErrorCode::TransientNotAccepted.code()
            );
            // A request handled in time gets its own reply.
            let done = async { Dispatched::Close(vec![1]) };
            let answered = answer_within(deadline, &read, Operation::NonReplicated, 1, done).await;
            assert!(matches!(answered, Dispatched::Close(bytes) if bytes == [1]));
        });
    }

    #[test]
    fn an_auto_commit_waits_until_shortly_before_the_deadline_or_is_not_proposed() {
        let now = std::time::Instant::now();
        let second = std::time::Duration::from_secs(1);
        assert_eq!(
            auto_commit_wait(now, now + 10 * second, 10 * second),
            Some(10 * second - AUTO_COMMIT_REPLY_MARGIN)
        );
        for answer_by in [now + AUTO_COMMIT_REPLY_MARGIN, now, now - second] {
            assert_eq!(auto_commit_wait(now, answer_by, 10 * second), None);
        }
    }

    /// `limits.request_timeout_ms` accepts any value from 1 ms: a short one (from a few
    /// milliseconds) still leaves a poll's auto-commit time to be proposed and waited for. Never proposed, a consumer
    /// polling `Next` with auto-commit would be served the same messages forever.
    #[test]
    fn a_short_request_timeout_still_lets_a_poll_auto_commit() {
        let now = std::time::Instant::now();
        for millis in [20, 100, 200, 250, 1000] {
            let deadline = std::time::Duration::from_millis(millis);
            let wait = auto_commit_wait(now, now + deadline, deadline);
            assert!(
                wait.is_some_and(|wait| wait >= deadline / 2 && wait < deadline),
                "request timeout {millis} ms: {wait:?}"
            );
        }
    }

    /// The review's case: a poll's auto-commit proposed, its verdict lost (the primary lost its
    /// lead, a relay unanswered). Answered 58, the SDK would poll `Next` again and skip the
    /// messages if the commit landed; the poll answers its messages instead.
    #[test]
    fn a_poll_whose_auto_commit_gets_no_verdict_is_answered_with_its_messages() {
        compio::runtime::Runtime::new().unwrap().block_on(async {
            let deadline = 2 * AUTO_COMMIT_REPLY_MARGIN;
            let read = header(Operation::NonReplicated);
            let answer_by = std::time::Instant::now() + deadline;
            let polled = async {
                let no_verdict = std::future::pending::<Result<(), ErrorCode>>();
                let wait = auto_commit_wait(std::time::Instant::now(), answer_by, deadline);
                let verdict = settle_auto_commit(no_verdict, wait).await;
                assert_eq!(verdict, AutoCommit::Unknown);
                let request = Request {
                    header: &read,
                    operation: Operation::NonReplicated,
                    answer_by,
                    deadline,
                };
                request.reply(b"the polled messages")
            };
            let answered = answer_within(deadline, &read, Operation::NonReplicated, 100, polled);
            assert_eq!(status(answered.await), 0, "the messages, not 58");
            // Verdicts that come are passed on; none is proposed without time to wait.
            let refused = async { Err(ErrorCode::TransientNotCommitted) };
            let wait = Some(deadline);
            assert_eq!(
                settle_auto_commit(refused, wait).await,
                AutoCommit::Refused(ErrorCode::TransientNotCommitted)
            );
            assert_eq!(
                settle_auto_commit(async { Ok(()) }, wait).await,
                AutoCommit::Stored
            );
            let proposed = std::cell::Cell::new(false);
            let never_run = async {
                proposed.set(true);
                Ok(())
            };
            assert_eq!(
                settle_auto_commit(never_run, None).await,
                AutoCommit::Skipped
            );
            assert!(!proposed.get());
        });
    }
}
