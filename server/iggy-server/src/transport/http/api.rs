//! Route → command: each handler turns the JSON request into the command's binary request, runs
//! it through `service::dispatch` like a binary transport would, and turns the binary reply into
//! the JSON the official client reads. Refusals are `{"id","code","reason","field"}` with the
//! status the client maps: 404 for a missing resource (`get_*` → None), 401, 403, 504 for a write
//! that may have committed (never resent), 503 for one that was not executed (resent), else 400.

use super::json::{self, OutgoingMessage};
use super::jwt::bind_proof_hash;
use super::session::{GateKey, HttpState};
use super::{Request, Response};
use crate::runtime::body_budget::BodyPermit;
use crate::runtime::connection::{Bound, Connection};
use crate::runtime::node::Node;
use crate::runtime::shared::PartitionKey;
use crate::service::auth::bind_secret_hash;
use crate::service::dispatch::{Dispatched, dispatch_within};
use crate::service::frame;
use base64ct::{Base64, Encoding};
use iggy_generated::commands::{self, CommandInfo};
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{Command, EvictionHeader, Operation, ReplyHeader, RequestHeader};
use iggy_generated::http::{ROUTES, Route};
use iggy_generated::payloads as wire;
use iggy_generated::protocol;
use iggy_wire::{WireDecode, WireEncode};
use serde::{Deserialize, Serialize};
use std::rc::Rc;

/// The error body upstream servers and the official client's tests use.
#[derive(Serialize)]
pub struct Refusal {
    id: u32,
    code: String,
    reason: String,
    field: Option<String>,
}

fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

pub fn refusal(error: ErrorCode) -> Refusal {
    refusal_on(error, "", &[])
}

/// `refusal` for a request to the route `path` (its template) with path parameters `params`:
/// the reason names the resources the path gave.
fn refusal_on(error: ErrorCode, path: &str, params: &[String]) -> Refusal {
    Refusal {
        id: error.code(),
        code: snake(error.name()),
        reason: reason(error.message(), path, params),
        field: None,
    }
}

/// The error's message with its `{n}` placeholders filled from the path: a placeholder
/// labelled as an id or a name ("... ID: {0}", "... name: {0}") stands for the last resource
/// word before it ("Topic with ID: {0} for stream with ID: {1}"), and a route's `{stream_id}`
/// gives the stream. A placeholder the path does not give is cut with its label ("Stream with
/// name: {0} already exists." → "Stream already exists."), and so is the name an "already
/// exists" refusal was asked for: only the binary reply's code is machine-readable, and a
/// half-filled text misleads. A sentence after the first whose placeholders all go unfilled
/// goes whole ("Max topic size: {0} < segment size: {1}." names figures, never the path's).
fn reason(message: &str, path: &str, params: &[String]) -> String {
    let mut out = String::with_capacity(message.len() + 16);
    for (i, sentence) in message.split_inclusive(". ").enumerate() {
        let (filled, placeholders, values) = fill(sentence, path, params);
        if i == 0 || placeholders == 0 || values > 0 {
            out.push_str(&filled);
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// One sentence of [`reason`]: its text, how many placeholders it has, how many were filled.
fn fill(message: &str, path: &str, params: &[String]) -> (String, usize, usize) {
    const KINDS: [(&str, &str); 6] = [
        ("stream", "{stream_id}"),
        ("topic", "{topic_id}"),
        ("partition", "{partition_id}"),
        ("group", "{group_id}"),
        ("user", "{user_id}"),
        ("client", "{client_id}"),
    ];
    let templates = path.split('/').filter(|segment| segment.starts_with('{'));
    let given: Vec<(&str, &str)> = templates
        .zip(params)
        .map(|(t, v)| (t, v.as_str()))
        .collect();
    let (mut placeholders, mut values) = (0, 0);
    let mut out = String::with_capacity(message.len() + 16);
    let mut rest = message;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            break;
        };
        placeholders += 1;
        let before = &rest[..open];
        // Only an id or a name is a resource's; "Max topic size: {0}" is a figure.
        let labelled = before.ends_with("ID: ") || before.ends_with("name: ");
        let lowered = before.to_ascii_lowercase();
        let kind = KINDS
            .iter()
            .filter_map(|(word, template)| lowered.rfind(word).map(|at| (at, *template)))
            .max_by_key(|(at, _)| *at)
            .map(|(_, template)| template)
            .filter(|_| labelled);
        // "<Resource> with name: {0} already exists" names the name the request asked for
        // (a rename's is in the body), never the path's resource.
        let asked_for = message.contains("already exists") && before.ends_with("with name: ");
        let value = kind
            .filter(|_| !asked_for)
            .and_then(|t| given.iter().find(|(g, _)| *g == t).map(|(_, v)| *v));
        match value {
            Some(value) => {
                values += 1;
                out.push_str(before);
                out.push_str(value);
            }
            None => {
                let label = before.rfind(" with ").or_else(|| before.rfind(':'));
                out.push_str(before[..label.unwrap_or(before.len())].trim_end());
            }
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    (out, placeholders, values)
}

/// A refusal of the HTTP layer itself (no Iggy error code fits: 404 route, 413, 411).
pub fn refusal_text(id: u32, code: &str, reason: &str) -> Refusal {
    Refusal {
        id,
        code: code.to_string(),
        reason: reason.to_string(),
        field: None,
    }
}

/// The status the official client maps `error` to. 401 only for a request without a valid
/// token, as upstream: the client reads 401 as "not signed in" (Unauthenticated, 40), so a
/// wrong password (a login's, or a password change's current one) or an expired personal
/// access token is 400 with its code in the body, as the binary transports answer it.
fn status_of(error: ErrorCode) -> u16 {
    use ErrorCode as E;
    match error {
        E::Unauthenticated
        | E::AccessTokenMissing
        | E::InvalidAccessToken
        | E::InvalidPersonalAccessToken => 401,
        E::Unauthorized => 403,
        // May have been executed: a 5xx the client neither resends nor reads as refused.
        E::TransientNotCommitted => 504,
        // Not executed: the client resends it.
        E::TransientNotAccepted => 503,
        // The partition exists; its files on this node are damaged or unreadable.
        E::CannotOpenPartitionLogFile => 500,
        e if iggy_metadata::permissions::is_not_found(e) => 404,
        _ => 400,
    }
}

/// The answer to a request that arrives while the node stops: not executed (503, retried).
pub fn stopping_response() -> Response {
    fail(ErrorCode::TransientNotAccepted)
}

fn fail(error: ErrorCode) -> Response {
    fail_on(error, "", &[])
}

/// `fail` for a request to route `path` with path parameters `params` (see `reason`).
fn fail_on(error: ErrorCode, path: &str, params: &[String]) -> Response {
    let mut response = Response::error(status_of(error), &refusal_on(error, path, params));
    if response.status == 503 {
        response.headers.push(("retry-after", "1".into()));
    }
    response
}

/// A send's list of typed user headers that the official client would not map back: 400 with
/// the code iggy_common's header decoding fails with for the same fault, and the fault in words.
fn unreadable_headers(fault: iggy_storage::batch::HeaderFault) -> Response {
    use iggy_storage::batch::{HeaderPart, HeaderProblem};
    let error = match (fault.problem, fault.part) {
        (HeaderProblem::UnknownKind(_), _) => ErrorCode::InvalidHeaderKind,
        (_, HeaderPart::Key) => ErrorCode::InvalidHeaderKey,
        (_, HeaderPart::Value) => ErrorCode::InvalidHeaderValue,
    };
    Response::error(
        400,
        &Refusal {
            id: error.code(),
            code: snake(error.name()),
            reason: format!("invalid request: {fault}"),
            field: None,
        },
    )
}

fn bad_json(reason: impl std::fmt::Display) -> Response {
    Response::error(
        400,
        &Refusal {
            id: ErrorCode::InvalidFormat.code(),
            code: "invalid_format".into(),
            reason: format!("invalid request: {reason}"),
            field: None,
        },
    )
}

/// A request built from the client's JSON, encoded: a string too long for its length prefix
/// (a 256-byte name behind a u8 length) is refused with 400 naming the field, never written with
/// a wrapped length.
trait CheckedBytes: WireEncode {
    fn checked_bytes(&self) -> Result<Vec<u8>, Response> {
        self.try_to_wire_bytes().map_err(bad_json)
    }
}

impl<T: WireEncode> CheckedBytes for T {}

fn ok_json(status: u16, value: &impl Serialize) -> Response {
    Response::json(status, serde_json::to_vec(value).expect("reply serializes"))
}

/// Percent-decodes one path segment. A `%` not followed by two hex digits is kept as it is:
/// the official HTTP client writes names into paths unencoded, so a user or token named
/// `50%off` arrives as `/users/50%off` (such a segment used to match no route at all).
fn decode_segment(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .filter(|hex| bytes[i] == b'%' && hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The route `method path` matches, and its path parameters; `Err(true)` when the path exists
/// with other methods.
fn find_route(method: &str, path: &str) -> Result<(&'static Route, Vec<String>), bool> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut path_known = false;
    for route in ROUTES {
        let template: Vec<&str> = route.path.split('/').collect();
        if template.len() != segments.len() {
            continue;
        }
        let mut params = Vec::new();
        let matched = template.iter().zip(&segments).all(|(t, s)| {
            if t.starts_with('{') {
                match decode_segment(s) {
                    Some(value) if !value.is_empty() => {
                        params.push(value);
                        true
                    }
                    _ => false,
                }
            } else {
                t == s
            }
        });
        if matched {
            if route.method == method {
                return Ok((route, params));
            }
            path_known = true;
        }
    }
    Err(path_known)
}

/// A required numeric query parameter: 400 saying whether it is missing or not a number.
fn required_number<T: std::str::FromStr>(
    query: &[(String, String)],
    name: &str,
) -> Result<T, Response> {
    let value = query_param(query, name).ok_or_else(|| bad_json(format!("{name} is required")))?;
    value
        .parse()
        .map_err(|_| bad_json(format!("{name} is a number, not `{value}`")))
}

fn query_param<'q>(query: &'q [(String, String)], name: &str) -> Option<&'q str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| decode_segment(&s.replace('+', " ")).unwrap_or_default();
            (decode(k), decode(v))
        })
        .collect()
}

/// An identifier from its text as the SDK's `Identifier::from_str` reads it: what parses as a
/// u32 is a numeric id, anything else a name (digits past u32, `4294967296`, name a stream
/// created with that name).
fn identifier(text: &str) -> Result<(u8, Vec<u8>), ErrorCode> {
    if let Ok(id) = text.parse::<u32>() {
        Ok((1, id.to_le_bytes().to_vec()))
    } else if (1..=255).contains(&text.len()) {
        Ok((2, text.as_bytes().to_vec()))
    } else {
        Err(ErrorCode::InvalidIdentifier)
    }
}

fn wire_id(id: &(u8, Vec<u8>)) -> wire::Identifier<'_> {
    wire::Identifier {
        kind: id.0,
        value: &id.1,
    }
}

fn command(name: &str) -> &'static CommandInfo {
    commands::COMMANDS
        .iter()
        .find(|c| c.name == name)
        .expect("routes name commands of the table (checked by codegen)")
}

fn operation_of(command: &CommandInfo) -> Operation {
    (0..=u8::MAX)
        .filter_map(Operation::from_repr)
        .find(|op| format!("{op:?}") == command.operation)
        .expect("a command's operation exists")
}

/// What a call through the service layer needs besides the body.
#[derive(Default, Clone, Copy)]
struct Header {
    partition_incarnation: u64,
    owner_generation: u64,
    minimum_metadata_op: u64,
    /// The partition the request reads or writes, by numeric ids: its session's requests to it
    /// run one at a time (the partition gate).
    partition: Option<PartitionKey>,
    /// A read that writes (a poll with auto-commit stores an offset under its request number).
    writes: bool,
}

/// Why a call did not run or what it was refused with.
enum Refused {
    Error(ErrorCode),
    /// An in-flight limit: 429 for the session's, 503 for the node's; never executed.
    Busy(u16),
}

impl From<ErrorCode> for Refused {
    fn from(error: ErrorCode) -> Self {
        Refused::Error(error)
    }
}

/// A call admitted to run: its gate and permit held, its request number taken.
struct Admitted {
    command: &'static CommandInfo,
    operation: Operation,
    bound: Bound,
    request: u64,
    _gate: Option<futures_util::lock::OwnedMutexGuard<()>>,
    _permit: Permit,
}

struct Call<'a> {
    node: &'a Rc<Node>,
    state: &'a Rc<HttpState>,
    connection: &'a mut Connection,
    bound: Option<Bound>,
}

impl Call<'_> {
    /// Runs `name` with `body` and returns its reply payload (after the result section of a
    /// result-framed reply), or the error it was refused with.
    async fn run(&mut self, name: &str, body: Vec<u8>, header: Header) -> Result<Vec<u8>, Refused> {
        Ok(self.run_held(name, body, header).await?.0)
    }

    /// [`Self::run`], with the node's budget a poll's reply was built within, held on for as
    /// long as the caller keeps it.
    async fn run_held(
        &mut self,
        name: &str,
        body: Vec<u8>,
        header: Header,
    ) -> Result<(Vec<u8>, Option<BodyPermit>), Refused> {
        let Some(bound) = self.bound else {
            let command = command(name);
            let client = self.state.anonymous_client;
            let operation = operation_of(command);
            return Ok(dispatch_call(
                self.node,
                self.connection,
                command,
                operation,
                (client, 0, 0),
                body,
                header,
            )
            .await?);
        };
        let admitted = self.admit(name, bound, header).await?;
        self.connection.bound = Some(bound);
        let identity = (bound.client, bound.session, admitted.request);
        Ok(dispatch_call(
            self.node,
            self.connection,
            admitted.command,
            admitted.operation,
            identity,
            body,
            header,
        )
        .await?)
    }

    /// The partition gate (a write of the metadata group takes the session's metadata gate),
    /// then an in-flight permit, then the request number: a waiter holds no permit, and a
    /// session's writes to one group reach its client table in number order.
    async fn admit(&self, name: &str, bound: Bound, header: Header) -> Result<Admitted, Refused> {
        let command = command(name);
        let operation = operation_of(command);
        let writes = operation != Operation::NonReplicated || header.writes;
        let gate_key = match (header.partition, writes) {
            (Some(partition), _) => Some(Some(partition)),
            (None, true) => Some(None),
            (None, false) => None,
        };
        let gate = match gate_key {
            Some(key) => {
                let gate = self
                    .state
                    .gate(bound.client, key)
                    .ok_or(ErrorCode::Unauthenticated)?;
                Some(gate.lock_owned().await)
            }
            None => None,
        };
        let permit = Permit::take(self.state, bound.client).map_err(Refused::Busy)?;
        let held = self.held_request(bound.client, gate_key, writes).await?;
        let request = self
            .state
            .next_request(bound.client, held, self.node.shared.stamp_now())
            .ok_or(ErrorCode::Unauthenticated)?;
        // The token's user, for the client list (an HTTP connection binds per request).
        self.node
            .connection_user(self.connection.id, bound.client, bound.user_id);
        Ok(Admitted {
            command,
            operation,
            bound,
            request,
            _gate: gate,
            _permit: permit,
        })
    }

    /// The highest request number of `client` this node's replicas hold where the session's
    /// next number must exceed it (see `session::request_number`): in every group the first
    /// time this node numbers the session (a restarted process's clock may be behind the
    /// numbers its previous one committed), then in the group a write goes to (another node's
    /// clock may be ahead of this one's).
    async fn held_request(
        &self,
        client: u128,
        gate_key: Option<GateKey>,
        writes: bool,
    ) -> Result<u64, Refused> {
        let numbered = self
            .state
            .numbered(client)
            .ok_or(ErrorCode::Unauthenticated)?;
        let node = self.node;
        Ok(match gate_key {
            _ if !numbered => node.latest_request(client, true).await,
            // A read: its number reaches no client table.
            _ if !writes => 0,
            Some(Some(key)) => match node.shared.partition(key) {
                Some(partition) => partition.group.latest_request(client).await,
                None => 0,
            },
            Some(None) => node.latest_request(client, false).await,
            None => 0,
        })
    }

    /// `?ack=none`: admits the call (gate, permit, request number), then lets it run on its own
    /// while the caller answers 202. It keeps the partition gate until it settles (its reply or
    /// its deadline), so the session's next request to the partition waits for it.
    async fn run_detached(
        &mut self,
        name: &str,
        body: Vec<u8>,
        header: Header,
    ) -> Result<(), Refused> {
        let bound = self.bound.ok_or(ErrorCode::Unauthenticated)?;
        let admitted = self.admit(name, bound, header).await?;
        let node = self.node.clone();
        let mut connection = Connection {
            id: self.connection.id,
            bound: Some(bound),
            routing: self.connection.routing,
            reply_max: self.connection.reply_max,
        };
        // Counted for the drain at shutdown until it settles.
        let in_flight = node.request_started();
        compio::runtime::spawn(async move {
            let identity = (
                admitted.bound.client,
                admitted.bound.session,
                admitted.request,
            );
            let result = dispatch_call(
                &node,
                &mut connection,
                admitted.command,
                admitted.operation,
                identity,
                body,
                header,
            )
            .await;
            if let Err(error) = result {
                tracing::debug!(
                    "http: unacknowledged {} refused: {error:?}",
                    admitted.command.name
                );
            }
            drop(admitted);
            drop(in_flight);
        })
        .detach();
        Ok(())
    }

    /// A register (login): a new client id, and the session it binds.
    async fn register(&mut self, name: &str, body: Vec<u8>) -> Result<Bound, ErrorCode> {
        let command = command(name);
        let client = crate::runtime::shared::new_http_client_id();
        self.connection.bound = None;
        dispatch_call(
            self.node,
            self.connection,
            command,
            Operation::Register,
            (client, 0, 0),
            body,
            Header::default(),
        )
        .await?;
        self.connection
            .bound
            .take()
            .ok_or(ErrorCode::Unauthenticated)
    }
}

/// An in-flight request of a session: counted against `http.max_in_flight_per_session` and the
/// node's `http.max_in_flight` until dropped.
struct Permit {
    state: Rc<HttpState>,
    client: u128,
}

impl Permit {
    /// A permit, or the status that refuses the request unexecuted (429 session, 503 node).
    fn take(state: &Rc<HttpState>, client: u128) -> Result<Self, u16> {
        state.acquire(client)?;
        Ok(Self {
            state: state.clone(),
            client,
        })
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.state.release(self.client);
    }
}

/// Runs one command through `service::dispatch` as client `(client, session, request)`.
async fn dispatch_call(
    node: &Rc<Node>,
    connection: &mut Connection,
    command: &CommandInfo,
    operation: Operation,
    (client, session, request): (u128, u64, u64),
    body: Vec<u8>,
    extra: Header,
) -> Result<(Vec<u8>, Option<BodyPermit>), ErrorCode> {
    let header = RequestHeader {
        command: Command::Request,
        size: (frame::HEADER_SIZE + body.len()) as u32,
        client,
        session,
        request,
        operation: operation.to_repr(),
        reserved: if operation == Operation::NonReplicated {
            command.code.to_le_bytes()
        } else {
            [0; 4]
        },
        partition_incarnation: extra.partition_incarnation,
        owner_generation: extra.owner_generation,
        minimum_metadata_op: extra.minimum_metadata_op,
        ..Default::default()
    };
    let limits = &node.shared.config.limits;
    let admitted =
        frame::admit_header(&header.to_bytes(), u32::MAX).map_err(|_| ErrorCode::InvalidFormat)?;
    let deadline = limits.request_timeout();
    // A poll's reply stays within the node's budget until its answer is written.
    let (reply, held) = match dispatch_within(node, connection, admitted, body, deadline).await {
        Dispatched::Reply(reply) => (reply, None),
        Dispatched::HeldReply(reply, held) => (reply, Some(held)),
        Dispatched::Close(eviction) => {
            let reason = EvictionHeader::decode_fixed(&eviction).map(|e| e.reason);
            tracing::debug!("http: {} refused with eviction {reason:?}", command.name);
            return Err(ErrorCode::InvalidFormat);
        }
    };
    let head =
        ReplyHeader::decode_fixed(&reply[..frame::HEADER_SIZE]).map_err(|_| ErrorCode::Error)?;
    if head.status != 0 {
        return Err(ErrorCode::from_code(head.status).unwrap_or(ErrorCode::Error));
    }
    let payload = &reply[frame::HEADER_SIZE..];
    if command.result_framed && !payload.is_empty() {
        if let Some(error) = iggy_metadata::replies::rejection_of(payload) {
            return Err(error);
        }
        let mut rest = payload;
        wire::ReplyResultSection::decode_from(&mut rest).map_err(|_| ErrorCode::Error)?;
        return Ok((rest.to_vec(), held));
    }
    Ok((payload.to_vec(), held))
}

/// Decodes a JSON body into `T`, or the 400 that says why not.
fn body<'de, T: Deserialize<'de>>(request: &'de Request) -> Result<T, Response> {
    serde_json::from_slice(&request.body).map_err(bad_json)
}

fn decode<'a, T: WireDecode<'a>>(bytes: &'a [u8]) -> Result<T, ErrorCode> {
    T::decode_exact(bytes).map_err(|_| ErrorCode::Error)
}

/// The node's metrics as Prometheus text.
fn prometheus(node: &Node) -> Response {
    Response {
        status: 200,
        content_type: "text/plain; version=0.0.4",
        headers: Vec::new(),
        body: node.render_metrics().into_bytes(),
        held: None,
    }
}

/// The largest body a request may carry without a valid token: a login's takes a few hundred
/// bytes.
pub const ANONYMOUS_BODY_MAX: usize = 64 * 1024;

/// The answer to a request whose body is larger than [`ANONYMOUS_BODY_MAX`] when it carries no
/// token this node signed and that is valid now (or its route is public, where it needs none):
/// given before the body is read, so peers without a login cannot make the node hold bodies
/// of up to `http.max_request_size` each. `None`: read the body and handle the request.
pub fn refused_unread(state: &HttpState, request: &Request) -> Option<Response> {
    let public = find_route(&request.method, &request.path).map_or(true, |(route, _)| route.public);
    if public {
        return Some(Response::error(
            413,
            &refusal_text(
                413,
                "request_too_large",
                "a request without a login takes at most 64 KiB",
            ),
        ));
    }
    match state.verify(bearer_token(request)) {
        Ok(_) => None,
        Err(error) => Some(fail(error)),
    }
}

/// The access token of an `Authorization: Bearer …` header; empty when there is none.
fn bearer_token(request: &Request) -> &str {
    request
        .header("authorization")
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .unwrap_or("")
        .trim()
}

/// Handles one request.
pub async fn handle(
    node: &Rc<Node>,
    state: &Rc<HttpState>,
    connection: &mut Connection,
    request: &Request,
) -> Response {
    if request.method == "OPTIONS" {
        let private = request
            .header("access-control-request-private-network")
            .is_some();
        let mut response = Response::empty(204);
        response.headers = state.preflight_headers(private);
        return response;
    }
    // HEAD: a load balancer's or an orchestrator's probe of a public GET (ping, the metrics),
    // answered as the GET is (the transport leaves the body out). Not of the others: a poll's
    // GET may commit an offset.
    let head = request.method == "HEAD";
    let method = if head { "GET" } else { request.method.as_str() };
    let metrics = &state.config.metrics;
    if metrics.enabled && method == "GET" && request.path == metrics.endpoint {
        return prometheus(node);
    }
    let (route, params) = match find_route(method, &request.path) {
        Ok((route, _)) if head && !route.public => {
            return Response::error(
                405,
                &refusal_text(
                    405,
                    "method_not_allowed",
                    "HEAD is answered on public paths only",
                ),
            );
        }
        Ok(found) => found,
        Err(true) => {
            return Response::error(
                405,
                &refusal_text(405, "method_not_allowed", "method not allowed on this path"),
            );
        }
        Err(false) => {
            return Response::error(404, &refusal_text(404, "not_found", "no such route"));
        }
    };
    let bound = if route.public {
        None
    } else {
        match state.authenticate(node, bearer_token(request)).await {
            Ok((bound, _)) => Some(bound),
            Err(error) => return fail(error),
        }
    };
    // Handlers resolve names against this replica's model before their command runs: on a
    // backup it must hold what the client wrote through this node first. A ping reads no model:
    // a load balancer's probe is answered while the metadata group changes primaries (it was
    // held a heartbeat timeout and answered 503 on every live node, marking them all down).
    let reads_metadata = route.command != "ping";
    if reads_metadata
        && let Err(error) = crate::service::dispatch::relayed_metadata_reached(node).await
    {
        return fail_on(error, route.path, &params);
    }
    let mut call = Call {
        node,
        state,
        connection,
        bound,
    };
    let query = parse_query(&request.query);
    match route_handler(&mut call, route, &params, &query, request).await {
        Ok(response) => response,
        Err(Failure::Refused(error)) => fail_on(error, route.path, &params),
        Err(Failure::Response(response)) => response,
    }
}

enum Failure {
    Refused(ErrorCode),
    Response(Response),
}

impl From<ErrorCode> for Failure {
    fn from(error: ErrorCode) -> Self {
        Failure::Refused(error)
    }
}

/// An option refused before the request runs: the reason names its key (`{0}` of "Invalid
/// option value for key: {0}"), and so does `field`.
impl From<json::OptionRefused> for Failure {
    fn from(refused: json::OptionRefused) -> Self {
        let json::OptionRefused { error, key } = refused;
        let reason = error.message().replace("{0}", &key);
        let refusal = Refusal {
            reason: if reason.contains(&key) {
                reason
            } else {
                format!("{} (option `{key}`)", reason.trim_end_matches('.'))
            },
            field: Some(key),
            ..refusal(error)
        };
        Failure::Response(Response::error(status_of(error), &refusal))
    }
}

impl From<Refused> for Failure {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Error(error) => Failure::Refused(error),
            Refused::Busy(status) => {
                let (code, reason) = if status == 429 {
                    (
                        "too_many_requests",
                        "the session's in-flight limit is reached; not executed",
                    )
                } else {
                    (
                        "server_busy",
                        "the node's in-flight limit is reached; not executed",
                    )
                };
                let mut response =
                    Response::error(status, &refusal_text(status as u32, code, reason));
                response.headers.push(("retry-after", "1".into()));
                Failure::Response(response)
            }
        }
    }
}

impl From<Response> for Failure {
    fn from(response: Response) -> Self {
        Failure::Response(response)
    }
}

#[derive(Deserialize)]
struct Login {
    username: String,
    password: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    context: Option<String>,
}

#[derive(Deserialize)]
struct TokenBody {
    token: String,
}

#[derive(Serialize)]
struct IdentityInfo {
    user_id: u32,
    access_token: Option<TokenInfo>,
}

#[derive(Serialize)]
struct TokenInfo {
    token: String,
    expiry: u64,
}

/// A token for `bound`, whose bind secret `bind_proof` is the hash of.
/// The reply to a login: the new session's token, or 429 when its user already holds
/// `http.max_sessions_per_user` sessions on this node (see the option); the refused login's
/// session is logged out again at once (or, if that fails, left to its lease).
async fn signed_in(call: &mut Call<'_>, bound: Bound, bind_secret: &[u8; 32]) -> Response {
    let proof = bind_proof_hash(&bind_secret_hash(bind_secret));
    let max = call.state.config.max_sessions_per_user;
    let held = call.state.sessions_of(bound.user_id, &call.node.shared);
    if max == 0 || held < max {
        return identity(call.state, bound, &proof);
    }
    // Held here only so that the logout gets a permit and a request number.
    call.state.issue(bound, &proof);
    call.bound = Some(bound);
    match call.run("user.logout", Vec::new(), Header::default()).await {
        Ok(_) => call.state.forget(bound.client),
        Err(_) => call.state.unbind(bound.client, &call.node.shared),
    }
    let due = call.state.capped_logins.due(std::time::Instant::now());
    if let Some(held_back) = due {
        tracing::warn!(
            "http: login of user {} refused: it holds {held} sessions on this node for \
             unexpired access tokens, the most http.max_sessions_per_user allows (a client \
             should log out a session it no longer uses, or keep using its token; {held_back} \
             more refusals since the last warning)",
            bound.user_id
        );
    }
    Response::error(
        429,
        &refusal_text(
            429,
            "too_many_sessions",
            &format!(
                "user {} holds {held} sessions through unexpired access tokens, the most \
                 http.max_sessions_per_user allows: log out sessions no longer used",
                bound.user_id
            ),
        ),
    )
}

fn identity(state: &HttpState, bound: Bound, bind_proof: &str) -> Response {
    let (token, expiry) = state.issue(bound, bind_proof);
    ok_json(
        200,
        &IdentityInfo {
            user_id: bound.user_id,
            access_token: Some(TokenInfo { token, expiry }),
        },
    )
}

fn version_info(sdk_version: &str) -> wire::ClientVersionInfo<'_> {
    wire::ClientVersionInfo {
        protocol_version: protocol::CURRENT.packed(),
        sdk_name: "http",
        sdk_version,
    }
}

#[derive(Deserialize)]
struct CreateStream {
    name: String,
    #[serde(default)]
    options: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct CreateTopic {
    #[serde(default = "one")]
    partitions_count: u32,
    name: String,
    #[serde(default)]
    options: serde_json::Map<String, serde_json::Value>,
    /// Protocol 0.11's typed settings beside `options` (apache-iggy 0.9.0 sends them, and
    /// nothing for them in `options`): folded into the options by [`CreateTopic::options`].
    compression_algorithm: Option<String>,
    message_expiry: Option<u64>,
    max_topic_size: Option<u64>,
}

impl CreateTopic {
    /// The options the topic is created with: `options`, plus each typed setting of protocol
    /// 0.11 the client gave and `options` does not, unless it is the default ("none", or 0:
    /// the server default), which an explicit option would pin.
    fn options(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut options = self.options.clone();
        let typed = [
            (
                "compression_algorithm",
                self.compression_algorithm
                    .as_ref()
                    .filter(|c| c.as_str() != "none")
                    .map(|c| serde_json::Value::from(c.as_str())),
            ),
            (
                "message_expiry",
                self.message_expiry
                    .filter(|&e| e != 0)
                    .map(serde_json::Value::from),
            ),
            (
                "max_topic_size",
                self.max_topic_size
                    .filter(|&m| m != 0)
                    .map(serde_json::Value::from),
            ),
        ];
        for (key, value) in typed {
            if let Some(value) = value {
                options.entry(key).or_insert(value);
            }
        }
        options
    }
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
struct PartitionsCount {
    partitions_count: u32,
}

#[derive(Deserialize)]
struct Name {
    name: String,
}

#[derive(Deserialize)]
struct CreatePat {
    name: String,
    #[serde(default)]
    expiry: u64,
}

#[derive(Deserialize)]
struct CreateUser {
    username: String,
    password: String,
    #[serde(default = "active")]
    status: String,
    #[serde(default)]
    permissions: Option<json::Permissions>,
}

fn active() -> String {
    "active".into()
}

#[derive(Deserialize)]
struct UpdatePermissions {
    #[serde(default)]
    permissions: Option<json::Permissions>,
}

#[derive(Deserialize)]
struct ChangePassword {
    current_password: String,
    new_password: String,
}

#[derive(Deserialize)]
struct Partitioning {
    kind: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct SendMessages {
    partitioning: Partitioning,
    messages: Vec<serde_json::Value>,
    #[serde(default)]
    context: Option<json::PartitionContext>,
}

#[derive(Deserialize)]
struct StoreOffset {
    #[serde(default = "consumer")]
    consumer_kind: String,
    #[serde(default)]
    consumer_id: Option<serde_json::Value>,
    #[serde(default)]
    partition_id: Option<u32>,
    offset: u64,
    #[serde(default)]
    context: Option<json::PartitionContext>,
}

fn consumer() -> String {
    "consumer".into()
}

fn consumer_kind(kind: &str) -> Result<u8, ErrorCode> {
    match kind {
        "consumer" => Ok(1),
        "consumer_group" => Ok(2),
        "external_group" => Ok(3),
        _ => Err(ErrorCode::InvalidFormat),
    }
}

/// A consumer id as the client sends it: a string (or number) of an Identifier's text.
fn consumer_id_text(value: Option<&serde_json::Value>) -> Result<String, ErrorCode> {
    match value {
        None => Ok("1".into()),
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
        Some(_) => Err(ErrorCode::InvalidFormat),
    }
}

fn optional_partition(partition: Option<u32>) -> wire::OptionalPartitionId {
    wire::OptionalPartitionId {
        has: partition.is_some() as u8,
        partition_id: partition.unwrap_or(0),
    }
}

fn message_id(value: Option<&serde_json::Value>) -> Result<u128, String> {
    match value {
        None => Ok(0),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .map(u128::from)
            .ok_or_else(|| "id must be a non-negative integer".into()),
        Some(serde_json::Value::String(s)) => {
            if let Ok(id) = s.parse::<u128>() {
                return Ok(id);
            }
            let hex = s.replace('-', "");
            if hex.len() == 32 {
                u128::from_str_radix(&hex, 16).map_err(|e| e.to_string())
            } else {
                Err(format!("invalid id `{s}`"))
            }
        }
        Some(_) => Err("id must be a number or a string".into()),
    }
}

fn outgoing(values: &[serde_json::Value]) -> Result<Vec<OutgoingMessage>, Response> {
    values
        .iter()
        .map(|value| {
            let object = value
                .as_object()
                .ok_or_else(|| bad_json("a message is an object"))?;
            let id = message_id(object.get("id")).map_err(bad_json)?;
            let payload = object
                .get("payload")
                .and_then(|p| p.as_str())
                .ok_or_else(|| bad_json("a message needs a base64 `payload`"))?;
            let payload =
                Base64::decode_vec(payload).map_err(|_| bad_json("payload is not base64"))?;
            let user_headers = match object.get("user_headers") {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::String(raw)) => {
                    // Raw headers, stored as they are (an encrypting client's opaque blob).
                    Base64::decode_vec(raw).map_err(|_| bad_json("user_headers is not base64"))?
                }
                Some(serde_json::Value::Array(entries)) => {
                    json::user_headers(entries).map_err(|refused| match refused {
                        json::HeadersRefused::Json(reason) => bad_json(reason),
                        json::HeadersRefused::Unreadable(fault) => unreadable_headers(fault),
                    })?
                }
                Some(_) => return Err(bad_json("user_headers is a list or base64 text")),
            };
            Ok(OutgoingMessage {
                id,
                payload,
                user_headers,
            })
        })
        .collect()
}

/// The current incarnation of a partition, for a request that names none (the binary client
/// sends the one it read; a JSON client may omit it): 0 for a topic that is missing, whose
/// command then answers as the binary one does (41 to a user without the grant, whether or not
/// it exists: `dispatch::judged_miss`).
fn incarnation_now(
    node: &Node,
    stream: &(u8, Vec<u8>),
    topic: &(u8, Vec<u8>),
    partition: u32,
) -> Result<(u64, u32), ErrorCode> {
    let metadata = node.shared.metadata.borrow();
    let found = metadata.topic(
        &iggy_metadata::machine::ident(&wire_id(stream))?,
        &iggy_metadata::machine::ident(&wire_id(topic))?,
    );
    let t = match found {
        Ok((_, t)) => t,
        Err(missing) if iggy_metadata::permissions::is_not_found(missing) => return Ok((0, 0)),
        Err(error) => return Err(error),
    };
    let count = t.partitions.len() as u32;
    Ok((
        t.partitions.get(&partition).map_or(0, |p| p.incarnation),
        count,
    ))
}

/// The numeric stream and topic ids of a topic, and its partition ids in order.
fn topic_key(
    node: &Node,
    stream: &(u8, Vec<u8>),
    topic: &(u8, Vec<u8>),
) -> Result<(u32, u32, Vec<u32>), ErrorCode> {
    let metadata = node.shared.metadata.borrow();
    let (s, t) = metadata.topic(
        &iggy_metadata::machine::ident(&wire_id(stream))?,
        &iggy_metadata::machine::ident(&wire_id(topic))?,
    )?;
    Ok((s.id, t.id, t.partitions.keys().copied().collect()))
}

/// The partition a request names, by numeric ids, when its topic exists (the command reports
/// a missing one).
fn partition_key(
    node: &Node,
    stream: &(u8, Vec<u8>),
    topic: &(u8, Vec<u8>),
    partition: u32,
) -> Option<PartitionKey> {
    topic_key(node, stream, topic)
        .ok()
        .map(|(s, t, _)| (s, t, partition))
}

thread_local! {
    /// Balanced sends go round-robin over a topic's partitions.
    static ROUND_ROBIN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

async fn route_handler(
    call: &mut Call<'_>,
    route: &Route,
    params: &[String],
    query: &[(String, String)],
    request: &Request,
) -> Result<Response, Failure> {
    let status = route.status;
    let param = |i: usize| identifier(&params[i]);
    let none = Header::default();
    let node = call.node;
    Ok(match route.command {
        "http.openapi" => {
            Response::json(200, iggy_generated::http::OPENAPI_JSON.as_bytes().to_vec())
        }
        "ping" => {
            call.run("ping", Vec::new(), none).await?;
            ok_json(status, &"pong")
        }
        "user.login_register" => {
            let login: Login = body(request)?;
            let version = login.version.unwrap_or_default();
            let bind_secret = rand::random();
            let register = wire::LoginRegisterRequest {
                version_info: version_info(&version),
                bind_secret,
                username: &login.username,
                password: &login.password,
                client_context: login.context.as_deref().unwrap_or(""),
            };
            let bound = call
                .register("user.login_register", register.checked_bytes()?)
                .await?;
            signed_in(call, bound, &bind_secret).await
        }
        "user.login_register_with_pat" => {
            let login: TokenBody = body(request)?;
            let bind_secret = rand::random();
            let register = wire::LoginRegisterWithPatRequest {
                version_info: version_info(""),
                bind_secret,
                token: &login.token,
                client_context: "",
            };
            let bound = call
                .register("user.login_register_with_pat", register.checked_bytes()?)
                .await?;
            signed_in(call, bound, &bind_secret).await
        }
        "http.refresh_token" => {
            let refresh: TokenBody = body(request)?;
            let (bound, claims) = call.state.authenticate(node, &refresh.token).await?;
            identity(call.state, bound, &claims.bph)
        }
        "user.logout" => {
            let client = call.bound.map(|b| b.client);
            call.run("user.logout", Vec::new(), none).await?;
            if let Some(client) = client {
                call.state.forget(client);
            }
            Response::empty(status)
        }
        "stream.list" => {
            let reply = call.run("stream.list", Vec::new(), none).await?;
            let list: wire::GetStreamsResponse = decode(&reply)?;
            ok_json(
                status,
                &list
                    .streams
                    .iter()
                    .map(|s| json::Stream::of(s, None))
                    .collect::<Vec<_>>(),
            )
        }
        "stream.get" => {
            let stream = param(0)?;
            let reply = call
                .run(
                    "stream.get",
                    wire::StreamIdRequest {
                        stream_id: wire_id(&stream),
                    }
                    .checked_bytes()?,
                    none,
                )
                .await?;
            if reply.is_empty() {
                return Err(ErrorCode::StreamIdNotFound.into());
            }
            let details: wire::GetStreamResponse = decode(&reply)?;
            ok_json(
                status,
                &json::Stream::of(&details.stream, Some(&details.topics)),
            )
        }
        "stream.create" => {
            let create: CreateStream = body(request)?;
            let key = iggy_metadata::options::STREAM_KEY;
            if create.options.contains_key(key) {
                let error = ErrorCode::StreamEncryptionUnavailable;
                let key = key.to_string();
                Err(json::OptionRefused { error, key })?;
            }
            let options = json::options_block(
                &create.options,
                iggy_metadata::options::STREAM_OPTIONS,
                true,
            )?;
            let body = wire::CreateStreamRequest {
                name: &create.name,
                options: &options,
            }
            .checked_bytes()?;
            let reply = call.run("stream.create", body, none).await?;
            let details: wire::GetStreamResponse = decode(&reply)?;
            ok_json(
                status,
                &json::Stream::of(&details.stream, Some(&details.topics)),
            )
        }
        "stream.delete" => {
            let stream = param(0)?;
            call.run(
                "stream.delete",
                wire::StreamIdRequest {
                    stream_id: wire_id(&stream),
                }
                .checked_bytes()?,
                none,
            )
            .await?;
            Response::empty(status)
        }
        "topic.list" => {
            let stream = param(0)?;
            let reply = call
                .run(
                    "topic.list",
                    wire::StreamIdRequest {
                        stream_id: wire_id(&stream),
                    }
                    .checked_bytes()?,
                    none,
                )
                .await?;
            let list: wire::GetTopicsResponse = decode(&reply)?;
            ok_json(
                status,
                &list
                    .topics
                    .iter()
                    .map(|t| json::Topic::of(t, None))
                    .collect::<Vec<_>>(),
            )
        }
        "topic.get" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let body = wire::TopicIdRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
            }
            .checked_bytes()?;
            let reply = call.run("topic.get", body, none).await?;
            if reply.is_empty() {
                // The command answers a miss with nothing (the binary client's `None`); say
                // which part of the path is missing, as every other route does.
                let missing = topic_key(node, &stream, &topic).err();
                return Err(missing.unwrap_or(ErrorCode::TopicIdNotFound).into());
            }
            let details: wire::GetTopicResponse = decode(&reply)?;
            ok_json(
                status,
                &json::Topic::of(&details.topic, Some(&details.partitions)),
            )
        }
        "topic.create" => {
            let stream = param(0)?;
            let create: CreateTopic = body(request)?;
            let options = json::options_block(
                &create.options(),
                iggy_metadata::options::TOPIC_OPTIONS,
                true,
            )?;
            let body = wire::CreateTopicRequest {
                stream_id: wire_id(&stream),
                partitions_count: create.partitions_count,
                name: &create.name,
                options: &options,
            }
            .checked_bytes()?;
            let reply = call.run("topic.create", body, none).await?;
            let details: wire::GetTopicResponse = decode(&reply)?;
            ok_json(
                status,
                &json::Topic::of(&details.topic, Some(&details.partitions)),
            )
        }
        "topic.delete" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let body = wire::TopicIdRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
            }
            .checked_bytes()?;
            call.run("topic.delete", body, none).await?;
            Response::empty(status)
        }
        "partition.create" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let create: PartitionsCount = body(request)?;
            let body = wire::CreatePartitionsRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partitions_count: create.partitions_count,
            }
            .checked_bytes()?;
            call.run("partition.create", body, none).await?;
            Response::empty(status)
        }
        "partition.delete" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let count = required_number(query, "partitions_count")?;
            let body = wire::DeletePartitionsRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partitions_count: count,
            }
            .checked_bytes()?;
            call.run("partition.delete", body, none).await?;
            Response::empty(status)
        }
        "segment.delete" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let partition: u32 = params[2]
                .parse()
                .map_err(|_| bad_json("partition_id is a number"))?;
            let count = required_number(query, "segments_count")?;
            let body = wire::DeleteSegmentsRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partition_id: partition,
                segments_count: count,
            }
            .checked_bytes()?;
            let header = Header {
                partition: partition_key(node, &stream, &topic, partition),
                ..none
            };
            call.run("segment.delete", body, header).await?;
            Response::empty(status)
        }
        "consumer_group.list" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let body = wire::TopicIdRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
            }
            .checked_bytes()?;
            let reply = call.run("consumer_group.list", body, none).await?;
            let list: wire::GetConsumerGroupsResponse = decode(&reply)?;
            ok_json(
                status,
                &list
                    .groups
                    .iter()
                    .map(|g| json::ConsumerGroup::of(g, None))
                    .collect::<Vec<_>>(),
            )
        }
        "consumer_group.get" => {
            let (stream, topic, group) = (param(0)?, param(1)?, param(2)?);
            let body = wire::ConsumerGroupIdRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                group_id: wire_id(&group),
            }
            .checked_bytes()?;
            let reply = call.run("consumer_group.get", body, none).await?;
            if reply.is_empty() {
                return Err(ErrorCode::ConsumerGroupIdNotFound.into());
            }
            let details: wire::ConsumerGroupDetailsResponse = decode(&reply)?;
            ok_json(
                status,
                &json::ConsumerGroup::of(&details.group, Some(&details.members)),
            )
        }
        "consumer_group.create" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let create: Name = body(request)?;
            let body = wire::CreateConsumerGroupRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                name: &create.name,
            }
            .checked_bytes()?;
            let reply = call.run("consumer_group.create", body, none).await?;
            let details: wire::ConsumerGroupDetailsResponse = decode(&reply)?;
            ok_json(
                status,
                &json::ConsumerGroup::of(&details.group, Some(&details.members)),
            )
        }
        "consumer_group.delete" => {
            let (stream, topic, group) = (param(0)?, param(1)?, param(2)?);
            let body = wire::ConsumerGroupIdRequest {
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                group_id: wire_id(&group),
            }
            .checked_bytes()?;
            call.run("consumer_group.delete", body, none).await?;
            Response::empty(status)
        }
        "message.send" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let send: SendMessages = body(request)?;
            let messages = outgoing(&send.messages)?;
            if messages.is_empty() {
                return Err(ErrorCode::InvalidMessagesCount.into());
            }
            let value = Base64::decode_vec(&send.partitioning.value)
                .map_err(|_| bad_json("partitioning value is not base64"))?;
            // As iggy_common's SendMessages::validate: the binary form's length is one byte,
            // and only a balanced send may leave it empty.
            let balanced = send.partitioning.kind == "balanced";
            if value.len() > 255 || (value.is_empty() && !balanced) {
                return Err(ErrorCode::InvalidKeyValueLength.into());
            }
            // The binary protocol names the partition; balanced and keyed sends pick it here.
            let user = call.bound.ok_or(ErrorCode::Unauthenticated)?.user_id;
            let (stream_key, topic_key_id, ids) =
                topic_key(node, &stream, &topic).map_err(|missing| {
                    let sends = (user, crate::service::dispatch::SENDS);
                    let (s, t) = (wire_id(&stream), wire_id(&topic));
                    crate::service::dispatch::judged_miss(node, sends, &s, &t, missing)
                })?;
            if ids.is_empty() {
                return Err(ErrorCode::PartitionNotFound.into());
            }
            let partition = match send.partitioning.kind.as_str() {
                "partition_id" => u32::from_le_bytes(
                    value
                        .as_slice()
                        .try_into()
                        .map_err(|_| bad_json("partition_id value is 4 bytes"))?,
                ),
                "balanced" => ROUND_ROBIN.with(|n| {
                    n.set(n.get().wrapping_add(1));
                    ids[(n.get() % ids.len() as u64) as usize]
                }),
                // The binary SDK picks a keyed send's partition itself (XXH32, seed 0, modulo
                // the partition count): a key lands on one partition whatever the transport.
                "messages_key" => {
                    let hash = twox_hash::XxHash32::oneshot(0, &value);
                    ids[(hash % ids.len() as u32) as usize]
                }
                other => {
                    return Err(bad_json(format!("unknown partitioning kind `{other}`")).into());
                }
            };
            if !ids.contains(&partition) {
                return Err(ErrorCode::PartitionNotFound.into());
            }
            let (incarnation, _) = incarnation_now(node, &stream, &topic, partition)?;
            let context = send.context.unwrap_or(json::PartitionContext {
                incarnation,
                ..Default::default()
            });
            // A fire-and-forget send to another incarnation than this node's would be answered
            // 202 and then dropped (87 after the reply): refused now, as its send would be.
            let fire_and_forget = query_param(query, "ack") == Some("none");
            if fire_and_forget && context.incarnation != incarnation {
                return Err(ErrorCode::HistoryUnavailable.into());
            }
            let origin = node.shared.stamp_now();
            let batch = json::batch(&messages, origin);
            if fire_and_forget {
                // Answered 202 before it runs: what its send would refuse is refused now (it
                // was dropped after the 202, and the client never learned).
                let need = iggy_metadata::Need::SendMessages(stream_key, topic_key_id);
                node.shared.judge(user, need)?;
                let count = iggy_storage::batch::verify_arriving(&batch)
                    .map_err(crate::service::replies::batch_error)?;
                if count as usize != messages.len() {
                    return Err(ErrorCode::InvalidMessagesCount.into());
                }
            }
            let partition_bytes = partition.to_le_bytes();
            let send_request = wire::SendMessagesRequest {
                metadata_length: 0,
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partitioning: wire::Partitioning {
                    kind: 2,
                    value: &partition_bytes,
                },
                messages_count: messages.len() as u32,
                batch: &batch,
            };
            let mut bytes = send_request.checked_bytes()?;
            let metadata_length = (bytes.len() - 4 - batch.len()) as u32;
            bytes[..4].copy_from_slice(&metadata_length.to_le_bytes());
            let header = Header {
                partition_incarnation: context.incarnation,
                owner_generation: context.owner_generation,
                minimum_metadata_op: 0,
                partition: Some((stream_key, topic_key_id, partition)),
                writes: false,
            };
            match query_param(query, "ack") {
                None | Some("replicated") => {}
                Some("none") => {
                    call.run_detached("message.send", bytes, header).await?;
                    return Ok(Response::empty(202));
                }
                Some(other) => {
                    return Err(
                        bad_json(format!("ack is none or replicated, not `{other}`")).into(),
                    );
                }
            }
            let reply = call.run("message.send", bytes, header).await?;
            let confirmations: wire::SendMessagesResponse = decode(&reply)?;
            #[derive(Serialize)]
            struct Confirmation {
                stream_id: u32,
                topic_id: u32,
                partition_id: u32,
                base_offset: u64,
            }
            #[derive(Serialize)]
            struct Confirmations {
                confirmations: Vec<Confirmation>,
            }
            let mut response = ok_json(
                status,
                &Confirmations {
                    confirmations: confirmations
                        .confirmations
                        .iter()
                        .map(|c| Confirmation {
                            stream_id: c.stream_id,
                            topic_id: c.topic_id,
                            partition_id: c.partition_id,
                            base_offset: c.base_offset,
                        })
                        .collect(),
                },
            );
            response.headers.push((
                "iggy-durability",
                node.shared.config.system.durability.clone(),
            ));
            response
        }
        "message.poll" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let kind = consumer_kind(query_param(query, "consumer_kind").unwrap_or("consumer"))?;
            let consumer = identifier(query_param(query, "consumer_id").unwrap_or("1"))?;
            let partition: Option<u32> = match query_param(query, "partition_id") {
                Some(p) => Some(
                    p.parse()
                        .map_err(|_| bad_json("partition_id is a number"))?,
                ),
                None => None,
            };
            let strategy = match query_param(query, "kind").unwrap_or("offset") {
                "offset" | "o" => 1,
                "timestamp" | "t" => 2,
                "first" | "f" => 3,
                "last" | "l" => 4,
                "next" | "n" => 5,
                other => return Err(bad_json(format!("unknown polling kind `{other}`")).into()),
            };
            let number = |name: &str, default: u64| -> Result<u64, Response> {
                query_param(query, name).map_or(Ok(default), |v| {
                    v.parse()
                        .map_err(|_| bad_json(format!("{name} is a number")))
                })
            };
            let value = number("value", 0)?;
            let count = u32::try_from(number("count", 10)?)
                .map_err(|_| bad_json("count is a number of at most 4294967295"))?;
            let auto_commit = match query_param(query, "auto_commit") {
                None | Some("false") => false,
                Some("true") => true,
                Some(_) => return Err(bad_json("auto_commit is true or false").into()),
            };
            let context: Option<json::PartitionContext> = match query_param(query, "context") {
                Some(text) => Some(serde_json::from_str(text).map_err(bad_json)?),
                None => None,
            };
            let context = match context {
                Some(context) => context,
                None => {
                    let (incarnation, _) =
                        incarnation_now(node, &stream, &topic, partition.unwrap_or(0))?;
                    json::PartitionContext {
                        incarnation,
                        ..Default::default()
                    }
                }
            };
            let body = wire::PollMessagesRequest {
                consumer: wire::Consumer {
                    kind,
                    id: wire_id(&consumer),
                },
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partition_id: optional_partition(partition),
                strategy: wire::PollingStrategy {
                    kind: strategy,
                    value,
                },
                count,
                auto_commit,
            }
            .checked_bytes()?;
            let header = Header {
                partition_incarnation: context.incarnation,
                owner_generation: context.owner_generation,
                minimum_metadata_op: 0,
                partition: partition_key(node, &stream, &topic, partition.unwrap_or(0)),
                writes: auto_commit,
            };
            let (reply, held) = call.run_held("message.poll", body, header).await?;
            let polled: wire::PollMessagesResponse = decode(&reply)?;
            let mut response = ok_json(status, &json::polled(&polled)?);
            response.held = held;
            response
        }
        "consumer_offset.get" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let kind = consumer_kind(query_param(query, "consumer_kind").unwrap_or("consumer"))?;
            let consumer = identifier(query_param(query, "consumer_id").unwrap_or("1"))?;
            let partition: Option<u32> = match query_param(query, "partition_id") {
                Some(p) => Some(
                    p.parse()
                        .map_err(|_| bad_json("partition_id is a number"))?,
                ),
                None => None,
            };
            let body = wire::GetConsumerOffsetRequest {
                consumer: wire::Consumer {
                    kind,
                    id: wire_id(&consumer),
                },
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partition_id: optional_partition(partition),
            }
            .checked_bytes()?;
            let reply = call.run("consumer_offset.get", body, none).await?;
            if reply.is_empty() {
                return Err(ErrorCode::ConsumerOffsetNotFound.into());
            }
            let offset: wire::ConsumerOffsetResponse = decode(&reply)?;
            #[derive(Serialize)]
            struct ConsumerOffsetInfo {
                partition_id: u32,
                current_offset: u64,
                stored_offset: u64,
            }
            ok_json(
                status,
                &ConsumerOffsetInfo {
                    partition_id: offset.partition_id,
                    current_offset: offset.current_offset,
                    stored_offset: offset.stored_offset,
                },
            )
        }
        "consumer_offset.store" => {
            let (stream, topic) = (param(0)?, param(1)?);
            let store: StoreOffset = body(request)?;
            let kind = consumer_kind(&store.consumer_kind)?;
            let consumer = identifier(&consumer_id_text(store.consumer_id.as_ref())?)?;
            let context = match store.context {
                Some(context) => context,
                None => {
                    let (incarnation, _) =
                        incarnation_now(node, &stream, &topic, store.partition_id.unwrap_or(0))?;
                    json::PartitionContext {
                        incarnation,
                        ..Default::default()
                    }
                }
            };
            let body = wire::StoreConsumerOffsetRequest {
                consumer: wire::Consumer {
                    kind,
                    id: wire_id(&consumer),
                },
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partition_id: optional_partition(store.partition_id),
                offset: store.offset,
                ack: wire::AckLevel::Quorum,
            }
            .checked_bytes()?;
            let header = Header {
                partition_incarnation: context.incarnation,
                owner_generation: context.owner_generation,
                minimum_metadata_op: 0,
                partition: partition_key(node, &stream, &topic, store.partition_id.unwrap_or(0)),
                writes: false,
            };
            call.run("consumer_offset.store", body, header).await?;
            Response::empty(status)
        }
        "consumer_offset.delete" => {
            let (stream, topic, consumer) = (param(0)?, param(1)?, param(2)?);
            let kind = consumer_kind(query_param(query, "consumer_kind").unwrap_or("consumer"))?;
            let partition: Option<u32> = match query_param(query, "partition_id") {
                Some(p) => Some(
                    p.parse()
                        .map_err(|_| bad_json("partition_id is a number"))?,
                ),
                None => None,
            };
            let (incarnation, _) = incarnation_now(node, &stream, &topic, partition.unwrap_or(0))?;
            let body = wire::DeleteConsumerOffsetRequest {
                consumer: wire::Consumer {
                    kind,
                    id: wire_id(&consumer),
                },
                stream_id: wire_id(&stream),
                topic_id: wire_id(&topic),
                partition_id: optional_partition(partition),
                ack: wire::AckLevel::Quorum,
            }
            .checked_bytes()?;
            let header = Header {
                partition_incarnation: incarnation,
                partition: partition_key(node, &stream, &topic, partition.unwrap_or(0)),
                ..none
            };
            call.run("consumer_offset.delete", body, header).await?;
            Response::empty(status)
        }
        "personal_access_token.list" => {
            let reply = call
                .run("personal_access_token.list", Vec::new(), none)
                .await?;
            let list: wire::GetPersonalAccessTokensResponse = decode(&reply)?;
            #[derive(Serialize)]
            struct PersonalAccessTokenInfo {
                name: String,
                expiry_at: Option<u64>,
            }
            ok_json(
                status,
                &list
                    .tokens
                    .iter()
                    .map(|t| PersonalAccessTokenInfo {
                        name: t.name.to_string(),
                        expiry_at: (t.expiry_at != 0 && t.expiry_at != u64::MAX)
                            .then_some(t.expiry_at),
                    })
                    .collect::<Vec<_>>(),
            )
        }
        "personal_access_token.create" => {
            let create: CreatePat = body(request)?;
            let body = wire::CreatePersonalAccessTokenRequest {
                name: &create.name,
                expiry: create.expiry,
            }
            .checked_bytes()?;
            let reply = call.run("personal_access_token.create", body, none).await?;
            let raw: wire::RawPersonalAccessTokenResponse = decode(&reply)?;
            ok_json(status, &serde_json::json!({ "token": raw.token }))
        }
        "personal_access_token.delete" => {
            let body =
                wire::DeletePersonalAccessTokenRequest { name: &params[0] }.checked_bytes()?;
            call.run("personal_access_token.delete", body, none).await?;
            Response::empty(status)
        }
        "user.list" => {
            let reply = call.run("user.list", Vec::new(), none).await?;
            let list: wire::GetUsersResponse = decode(&reply)?;
            ok_json(
                status,
                &list
                    .users
                    .iter()
                    .map(|u| json::User::of(u, None))
                    .collect::<Vec<_>>(),
            )
        }
        "user.get" => {
            let user = param(0)?;
            let reply = call
                .run(
                    "user.get",
                    wire::GetUserRequest {
                        user_id: wire_id(&user),
                    }
                    .checked_bytes()?,
                    none,
                )
                .await?;
            if reply.is_empty() {
                return Err(ErrorCode::ResourceNotFound.into());
            }
            let details: wire::UserDetailsResponse = decode(&reply)?;
            let permissions = details.permissions.as_ref().map(json::Permissions::of);
            ok_json(status, &json::User::of(&details.user, Some(permissions)))
        }
        "user.create" => {
            let create: CreateUser = body(request)?;
            let status_code = match create.status.as_str() {
                "active" => 1,
                "inactive" => 2,
                _ => return Err(bad_json("status is active or inactive").into()),
            };
            let permissions = create.permissions.as_ref().map(json::Permissions::to_wire);
            let body = wire::CreateUserRequest {
                username: &create.username,
                password: &create.password,
                status: status_code,
                permissions,
                options: &[],
            }
            .checked_bytes()?;
            let reply = call.run("user.create", body, none).await?;
            let details: wire::UserDetailsResponse = decode(&reply)?;
            let permissions = details.permissions.as_ref().map(json::Permissions::of);
            ok_json(status, &json::User::of(&details.user, Some(permissions)))
        }
        "user.delete" => {
            let user = param(0)?;
            call.run(
                "user.delete",
                wire::DeleteUserRequest {
                    user_id: wire_id(&user),
                }
                .checked_bytes()?,
                none,
            )
            .await?;
            Response::empty(status)
        }
        "user.permissions" => {
            let user = param(0)?;
            let update: UpdatePermissions = body(request)?;
            let body = wire::UpdatePermissionsRequest {
                user_id: wire_id(&user),
                permissions: update.permissions.as_ref().map(json::Permissions::to_wire),
            }
            .checked_bytes()?;
            call.run("user.permissions", body, none).await?;
            Response::empty(status)
        }
        "user.password" => {
            let user = param(0)?;
            let change: ChangePassword = body(request)?;
            let body = wire::ChangePasswordRequest {
                user_id: wire_id(&user),
                current_password: &change.current_password,
                new_password: &change.new_password,
            }
            .checked_bytes()?;
            call.run("user.password", body, none).await?;
            Response::empty(status)
        }
        "cluster.metadata" => {
            let reply = call.run("cluster.metadata", Vec::new(), none).await?;
            let metadata: wire::ClusterMetadataResponse = decode(&reply)?;
            let nodes: Vec<serde_json::Value> = metadata
                .nodes
                .iter()
                .map(|n| {
                    serde_json::json!({
                        "replica_id": n.replica_id,
                        "name": n.name,
                        "ip": n.ip,
                        "endpoints": {
                            "tcp": n.tcp_port,
                            "quic": n.quic_port,
                            "http": n.http_port,
                            "websocket": n.websocket_port,
                        },
                        "role": format!("{:?}", n.role).to_lowercase(),
                        "status": format!("{:?}", n.status).to_lowercase(),
                    })
                })
                .collect();
            ok_json(
                status,
                &serde_json::json!({ "name": metadata.name, "nodes": nodes }),
            )
        }
        "stats" => {
            let reply = call.run("stats", Vec::new(), none).await?;
            let stats: wire::StatsResponse = decode(&reply)?;
            ok_json(status, &json::Stats::of(&stats))
        }
        "client.list" => {
            let reply = call.run("client.list", Vec::new(), none).await?;
            let list: wire::GetClientsResponse = decode(&reply)?;
            ok_json(
                status,
                &list
                    .clients
                    .iter()
                    .map(|c| json::Client::of(c, None))
                    .collect::<Vec<_>>(),
            )
        }
        "client.get" => {
            let client: u32 = params[0].parse().map_err(|_| ErrorCode::ClientNotFound)?;
            let reply = call
                .run(
                    "client.get",
                    wire::GetClientRequest { client_id: client }.checked_bytes()?,
                    none,
                )
                .await?;
            if reply.is_empty() {
                return Err(ErrorCode::ClientNotFound.into());
            }
            let details: wire::ClientDetailsResponse = decode(&reply)?;
            ok_json(
                status,
                &json::Client::of(&details.client, Some(&details.consumer_groups)),
            )
        }
        "options.describe" => {
            let scope = match params[0].as_str() {
                "topic" => wire::OptionsScope::Topic,
                "stream" => wire::OptionsScope::Stream,
                "user" => wire::OptionsScope::User,
                _ => return Err(bad_json("scope is topic, stream or user").into()),
            };
            let reply = call
                .run(
                    "options.describe",
                    wire::DescribeOptionsRequest { scope }.checked_bytes()?,
                    none,
                )
                .await?;
            let described: wire::DescribeOptionsResponse = decode(&reply)?;
            ok_json(
                status,
                &described
                    .entries
                    .iter()
                    .map(json::OptionSpec::of)
                    .collect::<Vec<_>>(),
            )
        }
        "snapshot" => {
            #[derive(Deserialize)]
            struct Snapshot {
                #[serde(default)]
                compression: Option<String>,
                #[serde(default)]
                snapshot_types: Vec<String>,
            }
            let snapshot: Snapshot = body(request)?;
            let compression = match snapshot.compression.as_deref().unwrap_or("Deflated") {
                "Stored" => 1,
                "Deflated" => 2,
                "Bzip2" => 3,
                "Zstd" => 4,
                "Lzma" => 5,
                "Xz" => 6,
                other => return Err(bad_json(format!("unknown compression `{other}`")).into()),
            };
            let types = snapshot
                .snapshot_types
                .iter()
                .map(|t| match t.as_str() {
                    "FilesystemOverview" => Ok(1),
                    "ProcessList" => Ok(2),
                    "ResourceUsage" => Ok(3),
                    "Test" => Ok(4),
                    "ServerLogs" => Ok(5),
                    "ServerConfig" => Ok(6),
                    "All" => Ok(100),
                    other => Err(bad_json(format!("unknown snapshot type `{other}`"))),
                })
                .collect::<Result<Vec<u8>, Response>>()?;
            let body = wire::GetSnapshotRequest {
                compression,
                snapshot_types: &types,
            }
            .checked_bytes()?;
            let reply = call.run("snapshot", body, none).await?;
            Response {
                status,
                content_type: "application/zip",
                headers: Vec::new(),
                body: reply,
                held: None,
            }
        }
        "resource.update" => {
            let update: serde_json::Map<String, serde_json::Value> = body(request)?;
            let (scope, catalog) = match params.len() {
                2 => (
                    wire::OptionsScope::Topic,
                    iggy_metadata::options::TOPIC_OPTIONS,
                ),
                _ if route.path.starts_with("/users") => (
                    wire::OptionsScope::User,
                    iggy_metadata::options::USER_OPTIONS,
                ),
                _ => (
                    wire::OptionsScope::Stream,
                    iggy_metadata::options::STREAM_OPTIONS,
                ),
            };
            let mut set = update.clone();
            let reset: Vec<String> = match set.remove("reset") {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::Array(keys)) => keys
                    .into_iter()
                    .map(|k| {
                        k.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad_json("reset lists option keys"))
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(bad_json("reset lists option keys").into()),
            };
            // Protocol 0.11's clients (apache-iggy 0.9.0) send the typed fields at the top and
            // the other options nested under `options`: `{"name": "n", "options": {}}`.
            match set.remove("options") {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::Object(nested)) => {
                    for (key, value) in nested {
                        set.entry(key).or_insert(value);
                    }
                }
                Some(_) => return Err(bad_json("options is an object of option keys").into()),
            }
            // null changes nothing (serializers write unset fields as null).
            set.retain(|_, v| !v.is_null());
            let options = json::options_block(&set, catalog, false)?;
            let reset: Vec<&str> = reset.iter().map(String::as_str).collect();
            let first = param(0)?;
            let patch = match scope {
                wire::OptionsScope::Topic => {
                    let topic = param(1)?;
                    wire::TopicResourcePatch {
                        stream_id: wire_id(&first),
                        topic_id: wire_id(&topic),
                        reset,
                        options: &options,
                    }
                    .checked_bytes()?
                }
                wire::OptionsScope::Stream => wire::StreamResourcePatch {
                    stream_id: wire_id(&first),
                    reset,
                    options: &options,
                }
                .checked_bytes()?,
                wire::OptionsScope::User => wire::UserResourcePatch {
                    user_id: wire_id(&first),
                    reset,
                    options: &options,
                }
                .checked_bytes()?,
            };
            let body = wire::UpdateResourceRequest {
                scope,
                patch: &patch,
            }
            .checked_bytes()?;
            call.run("resource.update", body, none).await?;
            Response::empty(status)
        }
        // Declared, not yet translated: refused before anything runs.
        _ => return Err(ErrorCode::FeatureUnavailable.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    /// Escapes decode; a `%` that starts none (the official client writes names unencoded) is
    /// kept as it is.
    #[test]
    fn a_segment_decodes_its_escapes_and_keeps_a_stray_percent() {
        assert_eq!(
            decode_segment("fr%20ed%2F%C3%BC").as_deref(),
            Some("fr ed/ü")
        );
        assert_eq!(decode_segment("50%off").as_deref(), Some("50%off"));
        assert_eq!(decode_segment("100%").as_deref(), Some("100%"));
        assert_eq!(decode_segment("a%2").as_deref(), Some("a%2"));
        assert_eq!(decode_segment("%+1").as_deref(), Some("%+1"));
        assert_eq!(decode_segment("%FF"), None, "not UTF-8");
    }

    #[test]
    fn reasons_name_what_the_path_gave_and_cut_what_it_did_not() {
        let topic_path = "/streams/{stream_id}/topics/{topic_id}";
        let cases = [
            (
                ErrorCode::StreamIdNotFound,
                "/streams/{stream_id}",
                params(&["7"]),
                "Stream with ID: 7 was not found.",
            ),
            (
                ErrorCode::TopicIdNotFound,
                topic_path,
                params(&["3", "9"]),
                "Topic with ID: 9 for stream with ID: 3 was not found.",
            ),
            (
                ErrorCode::StreamNameAlreadyExists,
                "/streams",
                params(&[]),
                "Stream already exists.",
            ),
            (
                ErrorCode::TopicNameAlreadyExists,
                "/streams/{stream_id}/topics",
                params(&["orders"]),
                "Topic for stream with ID: orders already exists.",
            ),
            // A rename: the path names the renamed resource, not the one holding the name.
            (
                ErrorCode::StreamNameAlreadyExists,
                "/streams/{stream_id}",
                params(&["renamed"]),
                "Stream already exists.",
            ),
            (
                ErrorCode::TopicNameAlreadyExists,
                topic_path,
                params(&["orders", "renamed"]),
                "Topic for stream with ID: orders already exists.",
            ),
            (ErrorCode::InvalidOffset, "", params(&[]), "Invalid offset"),
            (
                ErrorCode::Unauthenticated,
                "",
                params(&[]),
                ErrorCode::Unauthenticated.message(),
            ),
        ];
        for (error, path, given, expected) in cases {
            let refusal = refusal_on(error, path, &given);
            assert_eq!(refusal.reason, expected, "{error:?}");
            assert!(!refusal.reason.contains('{'), "{}", refusal.reason);
        }
    }

    /// A placeholder that stands for a figure, not a resource's id or name, is never filled
    /// from the path: a topic update under the segment size through `/streams/ops/topics/h`
    /// answered "Max topic size: h < segment size." (the word "topic" before `{0}`). A later
    /// sentence whose figures the path cannot give goes whole.
    #[test]
    fn a_reason_fills_only_placeholders_that_name_a_resource() {
        let topic_path = "/streams/{stream_id}/topics/{topic_id}";
        let refusal = refusal_on(
            ErrorCode::InvalidTopicSize,
            topic_path,
            &params(&["ops", "h"]),
        );
        assert_eq!(
            refusal.reason,
            "Max topic size cannot be lower than segment size."
        );
    }

    /// The official HTTP client reads these refusals by their `id` (a producer never resends
    /// RequestTooOld, 85) from a non-success status other than 401, 403 and 404, and resends
    /// nothing but a 503.
    #[test]
    fn refusals_the_official_client_acts_on_keep_their_code_and_status() {
        let cases = [
            (ErrorCode::RequestTooOld, 85, "request_too_old", 400),
            (
                ErrorCode::HistoryUnavailable,
                87,
                "history_unavailable",
                400,
            ),
            (ErrorCode::LifecycleBusy, 88, "lifecycle_busy", 400),
            (
                ErrorCode::TransientNotAccepted,
                58,
                "transient_not_accepted",
                503,
            ),
        ];
        for (error, id, code, status) in cases {
            let response = fail_on(
                error,
                "/streams/{stream_id}/topics/{topic_id}/messages",
                &[],
            );
            assert_eq!(response.status, status, "{error:?}");
            let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
            assert_eq!(body["id"], id, "{error:?}");
            assert_eq!(body["code"], code, "{error:?}");
        }
    }

    #[test]
    fn no_error_message_keeps_a_placeholder() {
        for &error in ErrorCode::ALL {
            let reason = reason(error.message(), "", &[]);
            assert!(
                !reason.contains("{0}") && !reason.contains("{1}"),
                "{error:?}: {reason}"
            );
        }
    }

    #[test]
    fn a_0_11_create_topic_body_gives_its_typed_settings_as_options_unless_default_or_given() {
        let create: CreateTopic = serde_json::from_str(
            r#"{"partitions_count":2,"compression_algorithm":"gzip","message_expiry":0,
                "max_topic_size":1048576,"name":"t","options":{"durability":"replicated"}}"#,
        )
        .unwrap();
        let options = serde_json::Value::Object(create.options());
        assert_eq!(
            options,
            serde_json::json!({"durability": "replicated", "compression_algorithm": "gzip",
                               "max_topic_size": 1048576})
        );
        let pinned: CreateTopic = serde_json::from_str(
            r#"{"name":"t","compression_algorithm":"none","message_expiry":5,
                "options":{"message_expiry":7}}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::Value::Object(pinned.options()),
            serde_json::json!({"message_expiry": 7})
        );
    }
}
