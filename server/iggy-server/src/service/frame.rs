//! Client frames: request header admission and reply/eviction encoding, on the generated
//! 256-byte layouts. Pure functions; the transports only move the bytes.

use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{
    Command, EvictionHeader, EvictionReason, Operation, ReplyHeader, RequestHeader,
};
use iggy_generated::protocol;

pub const HEADER_SIZE: usize = RequestHeader::SIZE;

/// Why a request header is refused before its body is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a 256-byte request header (wrong command byte or undecodable).
    NotARequest,
    /// `size` below the header.
    BadSize(u32),
    /// `size` above the configured maximum, the header otherwise sound: the connection reads
    /// past the body and answers [`ErrorCode::TooBigMessagePayload`] (the client can tell
    /// nothing was done, which an eviction would not let it).
    OverLimit(Box<Admitted>),
    /// Client id 0.
    NoClient,
    /// Reserved, internal or unknown operation.
    BadOperation(u8),
}

impl HeaderError {
    /// The eviction that closes the connection for this error.
    pub fn eviction_reason(&self) -> EvictionReason {
        match self {
            HeaderError::NotARequest | HeaderError::NoClient => EvictionReason::InvalidRequestBody,
            HeaderError::BadSize(_) | HeaderError::OverLimit(_) => {
                EvictionReason::InvalidRequestBodySize
            }
            HeaderError::BadOperation(_) => EvictionReason::InvalidRequestOperation,
        }
    }
}

/// A decoded, admitted request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub header: RequestHeader,
    pub operation: Operation,
    pub body_len: usize,
}

impl Admitted {
    /// Command code carried in `reserved` by NonReplicated requests.
    pub fn non_replicated_code(&self) -> u32 {
        u32::from_le_bytes(self.header.reserved)
    }
}

/// Client-allowed operations: not Reserved and not the replica-internal ranges.
fn client_operation(operation: Operation) -> bool {
    let value = operation.to_repr();
    !(value == 0 || (64..=75).contains(&value) || (166..=169).contains(&value))
}

/// Checks a request header. The client checksums, cluster, view, release and replica are
/// ignored: the SDK sends zeros there.
pub fn admit_header(bytes: &[u8; HEADER_SIZE], max_frame: u32) -> Result<Admitted, HeaderError> {
    if bytes[RequestHeader::COMMAND_OFFSET] != Command::Request.to_repr() {
        return Err(HeaderError::NotARequest);
    }
    let header = RequestHeader::decode_fixed(bytes).map_err(|_| HeaderError::NotARequest)?;
    if (header.size as usize) < HEADER_SIZE {
        return Err(HeaderError::BadSize(header.size));
    }
    if header.client == 0 {
        return Err(HeaderError::NoClient);
    }
    let operation = Operation::from_repr(header.operation)
        .filter(|op| client_operation(*op))
        .ok_or(HeaderError::BadOperation(header.operation))?;
    let admitted = Admitted {
        header,
        operation,
        body_len: header.size as usize - HEADER_SIZE,
    };
    if header.size > max_frame {
        return Err(HeaderError::OverLimit(Box::new(admitted)));
    }
    Ok(admitted)
}

/// What a reply says besides its body.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplyMeta {
    /// The metadata commit op reported to the client (raises its watermark).
    pub commit: u64,
    /// 0 = success; otherwise the error code, and the body is empty.
    pub status: u32,
    /// A committed result of a replicated op: the reply carries the committed marker and
    /// `op == commit`, which is what lets a client resolve a request it had to replay.
    pub committed: bool,
}

/// Byte of `ReplyHeader::reserved` that marks a final committed result.
const COMMITTED_MARKER: usize = 0;

/// Encodes a reply to `request` as header + body, echoing `operation`.
pub fn reply(
    request: &RequestHeader,
    operation: Operation,
    meta: ReplyMeta,
    body: &[u8],
) -> Vec<u8> {
    let header = reply_header(request, operation, meta, HEADER_SIZE + body.len());
    let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(body);
    out
}

/// The reply header for a frame of `size` bytes answering `request`.
fn reply_header(
    request: &RequestHeader,
    operation: Operation,
    meta: ReplyMeta,
    size: usize,
) -> ReplyHeader {
    let mut header = ReplyHeader {
        size: size as u32,
        command: Command::Reply,
        cluster: request.cluster,
        request_checksum: request.request_checksum,
        client: request.client,
        commit: meta.commit,
        request: request.request,
        operation,
        status: meta.status,
        partition_incarnation: request.partition_incarnation,
        ..ReplyHeader::default()
    };
    if meta.committed && meta.status == 0 {
        header.op = meta.commit;
        header.reserved[COMMITTED_MARKER] = 1;
    }
    header
}

/// Encodes the reply header into the first `HEADER_SIZE` bytes of `frame`, whose rest is the
/// body already in place.
pub fn reply_in_place(
    request: &RequestHeader,
    operation: Operation,
    meta: ReplyMeta,
    frame: &mut [u8],
) {
    reply_header(request, operation, meta, frame.len()).encode_fixed(&mut frame[..HEADER_SIZE]);
}

/// The status a client reads in `reply` (0 = success): the header's, or, in a committed reply
/// of a result-framed command (status 0 and the committed marker), the result its body
/// carries: a metadata op the model refused when it applied it (a name taken) commits with
/// that refusal. `None` for bytes too short to be a reply.
pub fn answered_status(reply: &[u8], result_framed: bool) -> Option<u32> {
    let at = ReplyHeader::STATUS_OFFSET;
    let status = u32::from_le_bytes(reply.get(at..at + 4)?.try_into().expect("4 bytes"));
    let marker = ReplyHeader::RESERVED_OFFSET + COMMITTED_MARKER;
    if status != 0 || !result_framed || reply.get(marker) != Some(&1) {
        return Some(status);
    }
    let body = reply.get(HEADER_SIZE..).unwrap_or_default();
    Some(iggy_metadata::replies::rejection_of(body).map_or(0, ErrorCode::code))
}

/// Encodes a failed reply: status set, empty body.
pub fn error_reply(request: &RequestHeader, operation: Operation, error: ErrorCode) -> Vec<u8> {
    reply(
        request,
        operation,
        ReplyMeta {
            commit: 0,
            status: error.code(),
            committed: false,
        },
        &[],
    )
}

/// A session-terminal eviction frame, carrying the admission window.
/// The client id of a request header that failed admission (so it cannot be decoded whole):
/// read at the generated `RequestHeader` position, for the eviction that answers it.
pub fn client_of(bytes: &[u8; HEADER_SIZE]) -> u128 {
    let at = RequestHeader::CLIENT_OFFSET;
    let client: [u8; RequestHeader::CLIENT_SIZE] = bytes[at..at + RequestHeader::CLIENT_SIZE]
        .try_into()
        .expect("inside the header");
    u128::from_le_bytes(client)
}

pub fn eviction(client: u128, reason: EvictionReason) -> Vec<u8> {
    let (min, max) = protocol::admission_window();
    let header = EvictionHeader {
        size: EvictionHeader::SIZE as u32,
        command: Command::Eviction,
        client,
        server_protocol_version: max.packed(),
        server_protocol_version_min: min.packed(),
        reason,
        ..EvictionHeader::default()
    };
    header.to_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A metadata op the model refused as it applied it (a stream name taken) is a committed
    /// reply whose body carries the refusal: metrics and the request log once counted it as
    /// a success (status 0) while the client was told 1012.
    #[test]
    fn the_answered_status_is_the_headers_or_a_committed_results() {
        let request =
            RequestHeader::decode_fixed(&request(Operation::CreateStream.to_repr(), 256)).unwrap();
        let (operation, committed) = (
            Operation::CreateStream,
            ReplyMeta {
                commit: 5,
                status: 0,
                committed: true,
            },
        );
        let taken = iggy_metadata::replies::result_rejection(ErrorCode::StreamNameAlreadyExists);
        let refused = reply(&request, operation, committed, &taken);
        assert_eq!(
            answered_status(&refused, true),
            Some(ErrorCode::StreamNameAlreadyExists.code())
        );
        // A command whose committed replies are not result-framed keeps its header's status.
        assert_eq!(answered_status(&refused, false), Some(0));
        let done = reply(&request, operation, committed, &[0, 0, 0, 0, 7, 7]);
        assert_eq!(answered_status(&done, true), Some(0));
        assert_eq!(
            answered_status(&reply(&request, operation, committed, &[]), true),
            Some(0)
        );
        let failed = error_reply(
            &request,
            Operation::NonReplicated,
            ErrorCode::InvalidCommand,
        );
        assert_eq!(
            answered_status(&failed, false),
            Some(ErrorCode::InvalidCommand.code())
        );
        assert_eq!(answered_status(&failed[..100], false), None);
    }

    fn request(operation: u8, size: u32) -> [u8; HEADER_SIZE] {
        let header = RequestHeader {
            command: Command::Request,
            size,
            client: 42,
            operation,
            request: 3,
            reserved: 1u32.to_le_bytes(),
            ..RequestHeader::default()
        };
        header.to_bytes()
    }

    #[test]
    fn admits_a_ping_and_reads_its_code() {
        let admitted = admit_header(&request(2, 256), 1 << 20).unwrap();
        assert_eq!(admitted.operation, Operation::NonReplicated);
        assert_eq!((admitted.body_len, admitted.non_replicated_code()), (0, 1));
    }

    #[test]
    fn refuses_bad_sizes_operations_and_commands() {
        assert_eq!(
            admit_header(&request(2, 255), 1024).unwrap_err(),
            HeaderError::BadSize(255)
        );
        // Over the limit, the header is otherwise sound: answered, not evicted.
        let over = admit_header(&request(2, 2048), 1024).unwrap_err();
        let HeaderError::OverLimit(admitted) = over else {
            panic!("{over:?}");
        };
        assert_eq!(
            (admitted.body_len, admitted.header.request),
            (2048 - 256, 3)
        );
        // A bad operation is evicted whatever its size.
        assert_eq!(
            admit_header(&request(0, 2048), 1024).unwrap_err(),
            HeaderError::BadOperation(0)
        );
        assert_eq!(
            admit_header(&request(0, 256), 1024).unwrap_err(),
            HeaderError::BadOperation(0)
        );
        assert_eq!(
            admit_header(&request(64, 256), 1024).unwrap_err(),
            HeaderError::BadOperation(64)
        );
        let mut not_request = request(2, 256);
        not_request[RequestHeader::COMMAND_OFFSET] = 8;
        assert_eq!(
            admit_header(&not_request, 1024).unwrap_err(),
            HeaderError::NotARequest
        );
    }

    #[test]
    fn reply_echoes_request_identity() {
        let header = admit_header(&request(2, 256), 1024).unwrap().header;
        let bytes = reply(
            &header,
            Operation::NonReplicated,
            ReplyMeta {
                commit: 9,
                status: 0,
                committed: false,
            },
            b"xy",
        );
        let decoded = ReplyHeader::decode_fixed(&bytes).unwrap();
        assert_eq!((decoded.size, decoded.request, decoded.commit), (258, 3, 9));
        assert_eq!(
            (decoded.command, decoded.operation),
            (Command::Reply, Operation::NonReplicated)
        );
        assert_eq!(&bytes[HEADER_SIZE..], b"xy");
    }

    #[test]
    fn eviction_carries_the_window() {
        let bytes = eviction(5, EvictionReason::IncompatibleProtocol);
        let decoded = EvictionHeader::decode_fixed(&bytes).unwrap();
        assert_eq!(decoded.reason, EvictionReason::IncompatibleProtocol);
        assert!(decoded.server_protocol_version_min <= decoded.server_protocol_version);
        assert_eq!(decoded.server_protocol_version, protocol::CURRENT.packed());
    }
}
