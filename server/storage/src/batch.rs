//! Batch record helpers: validation, stamping and the XxHash3-64 batch checksum.

use std::hash::Hasher;

use twox_hash::XxHash3_64;

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
    let count = validate_layout(record)?;
    let mut position = batch::HEADER_SIZE;
    for _ in 0..count {
        let end = frame_end(record, position)?;
        let stored = read_u64(record, position + frame::CHECKSUM);
        if XxHash3_64::oneshot(&record[position + 8..end]) != stored {
            return Err(StorageError::ChecksumMismatch("message checksum"));
        }
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
