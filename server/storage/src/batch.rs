//! Batch record helpers: validation, stamping and the XxHash3-64 batch checksum.

use std::hash::Hasher;

use twox_hash::XxHash3_64;

use iggy_generated::frames::{
    CLIENT_ENCRYPTION_OVERHEAD, MESSAGE_PAYLOAD_SIZE_MAX, USER_HEADERS_SIZE_MAX,
};
use iggy_generated::payloads::{HEADER_FIELD_LENGTH_MAX, HeaderField, HeaderKind};
use iggy_wire::WireDecode;

use crate::StorageError;
use crate::layout::{batch, frame, read_u32, read_u64, write_u64};

/// A batch whose frames were checked to tile it exactly ([`validate_layout`]), with its
/// message count: later steps need not walk the frames again to trust the layout.
#[derive(Debug, Clone)]
pub struct ValidBatch {
    bytes: bytes::Bytes,
    count: u32,
}

impl ValidBatch {
    pub fn check(bytes: bytes::Bytes) -> Result<ValidBatch, StorageError> {
        let count = validate_layout(&bytes)?;
        Ok(ValidBatch { bytes, count })
    }

    pub fn bytes(&self) -> &bytes::Bytes {
        &self.bytes
    }

    pub fn count(&self) -> u32 {
        self.count
    }
}

/// Checks that the frames tile `message_count` exactly and returns that count.
pub fn validate_layout(record: &[u8]) -> Result<u32, StorageError> {
    if record.len() < batch::HEADER_SIZE {
        return Err(StorageError::InvalidBatch(
            "shorter than the 256-byte header",
        ));
    }
    if read_u64(record, batch::BATCH_LENGTH) != record.len() as u64 {
        return Err(StorageError::InvalidBatch(
            "batch_length differs from the record size",
        ));
    }
    let reserved = &record[batch::RESERVED..batch::RESERVED + batch::RESERVED_SIZE];
    if reserved.iter().any(|byte| *byte != 0) {
        return Err(StorageError::InvalidBatch(
            "reserved header bytes are not zero",
        ));
    }
    let count = read_u32(record, batch::MESSAGE_COUNT);
    let mut position = batch::HEADER_SIZE;
    for _ in 0..count {
        let end = frame_end(record, position)?;
        position = end;
    }
    if position != record.len() {
        return Err(StorageError::InvalidBatch("frames do not fill the batch"));
    }
    Ok(count)
}

fn frame_end(record: &[u8], start: usize) -> Result<usize, StorageError> {
    if record.len() - start < frame::HEADER_SIZE {
        return Err(StorageError::InvalidBatch("truncated message frame header"));
    }
    let headers = read_u32(record, start + frame::USER_HEADERS_LENGTH) as usize;
    let payload = read_u32(record, start + frame::PAYLOAD_LENGTH) as usize;
    let end = start + frame::HEADER_SIZE + payload + headers;
    if end > record.len() {
        return Err(StorageError::InvalidBatch(
            "message frame overruns the batch",
        ));
    }
    Ok(end)
}

/// Computes the batch checksum: header fields, then each frame's checksum field.
/// The record must have passed [`validate_layout`].
pub fn compute_checksum(record: &[u8]) -> u64 {
    checksum_under_header(&record[..batch::HEADER_SIZE], record)
}

/// The checksum `record` would have with `header` in place of its own header.
fn checksum_under_header(header: &[u8], record: &[u8]) -> u64 {
    let mut hasher = XxHash3_64::new();
    for field in [
        batch::PARTITION_ID,
        batch::BASE_OFFSET,
        batch::BASE_TIMESTAMP,
        batch::ORIGIN_TIMESTAMP,
        batch::BATCH_LENGTH,
    ] {
        hasher.write(&header[field..field + 8]);
    }
    hasher.write(&header[batch::MESSAGE_COUNT..batch::MESSAGE_COUNT + 4]);
    let count = read_u32(record, batch::MESSAGE_COUNT);
    let mut position = batch::HEADER_SIZE;
    for _ in 0..count {
        let end = frame_end(record, position).expect("validated layout");
        hasher.write(&record[position..position + 8]);
        position = end;
    }
    hasher.finish()
}

/// Verifies layout, every per-message checksum and the batch checksum.
pub fn verify(record: &[u8]) -> Result<u32, StorageError> {
    verify_frames(record, |_, _, _, _| Ok(()))
}

/// The largest payload an arriving message may carry: the official builder's limit, encrypted.
pub const ARRIVING_PAYLOAD_MAX: usize =
    (MESSAGE_PAYLOAD_SIZE_MAX + CLIENT_ENCRYPTION_OVERHEAD) as usize;
/// The most user-header bytes an arriving message may carry: the builder's limit, encrypted.
pub const ARRIVING_HEADERS_MAX: usize =
    (USER_HEADERS_SIZE_MAX + CLIENT_ENCRYPTION_OVERHEAD) as usize;

/// [`verify`] for a batch a producer sends, whose messages must also be as the official client
/// builds them: a payload of 1 to [`ARRIVING_PAYLOAD_MAX`] bytes, at most
/// [`ARRIVING_HEADERS_MAX`] bytes of user headers, the frame's reserved bytes zero (the official
/// decoder refuses a frame otherwise: such a message, once stored, would fail every consumer's
/// poll of its partition) and `offset_delta` the message's index in the batch (its offset is
/// the base offset plus that delta, so any other value would repeat or skip offsets). The
/// headers are stored as they arrive, not read: the client's encryptor sends them as one opaque
/// blob (spec/payloads.spec, user headers). Records already stored (recovery, state transfer)
/// are only [`verify`]ed.
pub fn verify_arriving(record: &[u8]) -> Result<u32, StorageError> {
    verify_frames(record, |index, frame_header, payload_length, headers| {
        let fault = |fault| Err(StorageError::ArrivingMessage(fault));
        if frame_header[frame::RESERVED..frame::RESERVED + 8] != [0; 8] {
            return fault(MessageFault::ReservedNotZero { index });
        }
        let delta = read_u32(frame_header, frame::OFFSET_DELTA);
        if delta != index {
            return fault(MessageFault::OffsetDelta { index, delta });
        }
        if payload_length == 0 {
            return fault(MessageFault::EmptyPayload);
        }
        if payload_length > ARRIVING_PAYLOAD_MAX {
            return fault(MessageFault::PayloadOver(payload_length));
        }
        if headers.len() > ARRIVING_HEADERS_MAX {
            return fault(MessageFault::HeadersOver(headers.len()));
        }
        Ok(())
    })
}

/// What makes an arriving message one the official client would not have sent
/// ([`verify_arriving`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFault {
    EmptyPayload,
    /// The payload's length, over [`ARRIVING_PAYLOAD_MAX`].
    PayloadOver(usize),
    /// The user headers' length, over [`ARRIVING_HEADERS_MAX`].
    HeadersOver(usize),
    /// The frame header's reserved bytes of the message at `index` are not zero.
    ReservedNotZero {
        index: u32,
    },
    /// The message at `index` carries another `offset_delta`.
    OffsetDelta {
        index: u32,
        delta: u32,
    },
}

impl std::fmt::Display for MessageFault {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessageFault::EmptyPayload => write!(formatter, "a message has an empty payload"),
            MessageFault::PayloadOver(length) => write!(
                formatter,
                "a message payload is {length} bytes, over the {ARRIVING_PAYLOAD_MAX} allowed"
            ),
            MessageFault::HeadersOver(length) => write!(
                formatter,
                "a message's user headers are {length} bytes, over the {ARRIVING_HEADERS_MAX} \
                 allowed"
            ),
            MessageFault::ReservedNotZero { index } => write!(
                formatter,
                "message {index} of the batch has reserved frame bytes that are not zero"
            ),
            MessageFault::OffsetDelta { index, delta } => write!(
                formatter,
                "message {index} of the batch has offset_delta {delta}, not its index {index}"
            ),
        }
    }
}

/// Verifies layout and checksums, passing each message's index, frame header, payload length
/// and user headers to `check_message` in the same walk.
fn verify_frames(
    record: &[u8],
    check_message: impl Fn(u32, &[u8], usize, &[u8]) -> Result<(), StorageError>,
) -> Result<u32, StorageError> {
    let count = validate_layout(record)?;
    let mut position = batch::HEADER_SIZE;
    for index in 0..count {
        let end = frame_end(record, position)?;
        let stored = read_u64(record, position + frame::CHECKSUM);
        if XxHash3_64::oneshot(&record[position + 8..end]) != stored {
            return Err(StorageError::ChecksumMismatch("message checksum"));
        }
        let payload_length = read_u32(record, position + frame::PAYLOAD_LENGTH) as usize;
        let headers = read_u32(record, position + frame::USER_HEADERS_LENGTH) as usize;
        check_message(
            index,
            &record[position..position + frame::HEADER_SIZE],
            payload_length,
            &record[end - headers..end],
        )?;
        position = end;
    }
    if compute_checksum(record) != read_u64(record, batch::BATCH_CHECKSUM) {
        return Err(StorageError::ChecksumMismatch("batch checksum"));
    }
    Ok(count)
}

/// The header of `record` with the server-owned fields stamped and the batch checksum
/// recomputed, leaving `record` untouched: the frames are then stored straight from the
/// received buffer. The record must have passed [`validate_layout`].
pub fn stamped_header(
    record: &[u8],
    partition_id: u64,
    base_offset: u64,
    base_timestamp: u64,
) -> [u8; batch::HEADER_SIZE] {
    let mut header: [u8; batch::HEADER_SIZE] = record[..batch::HEADER_SIZE]
        .try_into()
        .expect("a validated record holds a whole header");
    write_u64(&mut header, batch::PARTITION_ID, partition_id);
    write_u64(&mut header, batch::BASE_OFFSET, base_offset);
    write_u64(&mut header, batch::BASE_TIMESTAMP, base_timestamp);
    let checksum = checksum_under_header(&header, record);
    write_u64(&mut header, batch::BATCH_CHECKSUM, checksum);
    header
}

/// Puts back the header fields a stamp replaced, as they were before it: the inverse of
/// [`stamped_header`] for a header whose `base_timestamp` was already set.
pub fn unstamp(record: &mut [u8], partition_id: u64, base_offset: u64, batch_checksum: u64) {
    write_u64(record, batch::PARTITION_ID, partition_id);
    write_u64(record, batch::BASE_OFFSET, base_offset);
    write_u64(record, batch::BATCH_CHECKSUM, batch_checksum);
}

/// Stamps the server-owned fields in place and recomputes the batch checksum.
pub fn stamp(record: &mut [u8], partition_id: u64, base_offset: u64, base_timestamp: u64) {
    write_u64(record, batch::PARTITION_ID, partition_id);
    write_u64(record, batch::BASE_OFFSET, base_offset);
    write_u64(record, batch::BASE_TIMESTAMP, base_timestamp);
    let checksum = compute_checksum(record);
    write_u64(record, batch::BATCH_CHECKSUM, checksum);
}

/// Which field of a user-header entry a [`HeaderFault`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderPart {
    Key,
    Value,
}

/// What is wrong with a field of a message's user headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderProblem {
    /// The headers end inside the field, or before it (a key without its value).
    Cut,
    /// The field's kind byte is no `HeaderKind`.
    UnknownKind(u8),
    /// The field's length is not one its kind allows.
    Length { kind: HeaderKind, length: usize },
    /// A bool field's byte is neither 0 nor 1 (the official client reads no other).
    Bool(u8),
}

/// Why a message's user headers were refused: the first field the official client could not
/// read, and what is wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderFault {
    pub part: HeaderPart,
    pub problem: HeaderProblem,
}

impl std::fmt::Display for HeaderFault {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let part = match self.part {
            HeaderPart::Key => "key",
            HeaderPart::Value => "value",
        };
        match self.problem {
            HeaderProblem::Cut => write!(formatter, "user headers end inside or before a {part}"),
            HeaderProblem::UnknownKind(kind) => {
                write!(
                    formatter,
                    "a user header {part} has the unknown kind {kind}"
                )
            }
            HeaderProblem::Bool(byte) => {
                write!(
                    formatter,
                    "a user header {part} of kind bool is {byte}, not 0 or 1"
                )
            }
            HeaderProblem::Length { kind, length } => match kind.fixed_size() {
                // The kind as the JSON of a send names it (`uint64`).
                Some(size) => write!(
                    formatter,
                    "a user header {part} of kind {} is {size} bytes, not {length}",
                    kind_name(kind)
                ),
                None => write!(
                    formatter,
                    "a user header {part} of kind {} is 1 to {HEADER_FIELD_LENGTH_MAX} \
                     bytes, not {length}",
                    kind_name(kind)
                ),
            },
        }
    }
}

fn kind_name(kind: HeaderKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// Checks user headers as the official client maps them (spec/payloads.spec, `HeaderField`):
/// key and value fields in pairs to the end, each of a known `HeaderKind` and a length that
/// kind allows. A walk over the bytes, allocating nothing. For headers the server itself builds
/// from typed ones (an HTTP send's list); a binary send's are opaque to it.
pub fn check_user_headers(headers: &[u8]) -> Result<(), HeaderFault> {
    for_each_user_header(headers, |_, _| {})
}

/// [`check_user_headers`], handing each checked key and value to `entry` as it goes (a reader
/// that renders them walks the bytes once); the first fault ends the walk.
pub fn for_each_user_header<'a>(
    mut headers: &'a [u8],
    mut entry: impl FnMut(HeaderField<'a>, HeaderField<'a>),
) -> Result<(), HeaderFault> {
    while !headers.is_empty() {
        let key = check_header_field(&mut headers, HeaderPart::Key)?;
        let value = check_header_field(&mut headers, HeaderPart::Value)?;
        entry(key, value);
    }
    Ok(())
}

fn check_header_field<'a>(
    headers: &mut &'a [u8],
    part: HeaderPart,
) -> Result<HeaderField<'a>, HeaderFault> {
    let fault = |problem| HeaderFault { part, problem };
    let field = HeaderField::decode_from(headers).map_err(|_| fault(HeaderProblem::Cut))?;
    let kind = HeaderKind::from_repr(field.kind)
        .ok_or_else(|| fault(HeaderProblem::UnknownKind(field.kind)))?;
    let length = field.value.len();
    let allowed = match kind.fixed_size() {
        Some(size) => length == size,
        None => (1..=HEADER_FIELD_LENGTH_MAX as usize).contains(&length),
    };
    if !allowed {
        return Err(fault(HeaderProblem::Length { kind, length }));
    }
    if kind == HeaderKind::Bool && field.value[0] > 1 {
        return Err(fault(HeaderProblem::Bool(field.value[0])));
    }
    Ok(field)
}
