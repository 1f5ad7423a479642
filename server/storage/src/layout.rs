//! Byte layouts of every on-disk record, in one place.
//!
//! Every offset and size here is taken from the code generated from `spec/storage.spec` and
//! `spec/frames.spec` (`iggy_generated::storage`, `iggy_generated::frames`): no byte position is
//! written by hand. Every other module of the crate goes through these names.

use iggy_generated::frames::{BatchHeader, MessageFrameHeader};
use iggy_generated::storage::{self as spec, CheckedU64, IndexEntry, SnapshotHeader};

/// Batch header, 256 bytes; the same record on the wire, in the journal and in `.log` files.
pub mod batch {
    use super::BatchHeader as H;
    pub const HEADER_SIZE: usize = H::SIZE;
    pub const PARTITION_ID: usize = H::PARTITION_ID_OFFSET;
    pub const BASE_OFFSET: usize = H::BASE_OFFSET_OFFSET;
    pub const BASE_TIMESTAMP: usize = H::BASE_TIMESTAMP_OFFSET;
    pub const ORIGIN_TIMESTAMP: usize = H::ORIGIN_TIMESTAMP_OFFSET;
    pub const BATCH_LENGTH: usize = H::BATCH_LENGTH_OFFSET;
    pub const BATCH_CHECKSUM: usize = H::BATCH_CHECKSUM_OFFSET;
    pub const MESSAGE_COUNT: usize = H::MESSAGE_COUNT_OFFSET;
    pub const RESERVED: usize = H::RESERVED_OFFSET;
    pub const RESERVED_SIZE: usize = H::RESERVED_SIZE;
}

/// Message frame header, 48 bytes, followed by the payload and then the user headers.
pub mod frame {
    use super::MessageFrameHeader as H;
    pub const HEADER_SIZE: usize = H::SIZE;
    pub const CHECKSUM: usize = H::CHECKSUM_OFFSET;
    pub const ID: usize = H::ID_OFFSET;
    pub const OFFSET_DELTA: usize = H::OFFSET_DELTA_OFFSET;
    pub const TIMESTAMP_DELTA: usize = H::TIMESTAMP_DELTA_OFFSET;
    pub const USER_HEADERS_LENGTH: usize = H::USER_HEADERS_LENGTH_OFFSET;
    pub const PAYLOAD_LENGTH: usize = H::PAYLOAD_LENGTH_OFFSET;
    pub const RESERVED: usize = H::RESERVED_OFFSET;
}

/// `.index` entry: `[u64 offset][u64 timestamp][u64 position]`.
pub mod index_entry {
    use super::IndexEntry as E;
    pub const SIZE: usize = E::SIZE;
    pub const OFFSET: usize = E::OFFSET_OFFSET;
    pub const TIMESTAMP: usize = E::TIMESTAMP_OFFSET;
    pub const POSITION: usize = E::POSITION_OFFSET;
}

/// Segment files of a partition log: `{start_offset:020}.log` holds batch records back to back,
/// `{start_offset:020}.index` one [`index_entry`] per batch.
pub mod segment {
    use super::spec;
    pub const LOG_EXTENSION: &str = spec::SEGMENT_LOG_EXTENSION;
    pub const INDEX_EXTENSION: &str = spec::SEGMENT_INDEX_EXTENSION;
    /// Digits of the zero-padded start offset in a segment file name.
    pub const NAME_DIGITS: usize = spec::SEGMENT_NAME_DIGITS as usize;
}

/// Checked u64 record: `[u64 value][u64 xxh3(value)]`. Consumer offsets, created.revision and
/// retirement.fence all use it.
pub mod checked_u64 {
    use super::CheckedU64 as R;
    pub const SIZE: usize = R::SIZE;
    pub const VALUE: usize = R::VALUE_OFFSET;
    pub const CHECKSUM: usize = R::CHECKSUM_OFFSET;
}

/// Metadata snapshot header, 64 bytes, followed by `body_length` body bytes.
pub mod snapshot_header {
    use super::SnapshotHeader as H;
    pub const SIZE: usize = H::SIZE;
    pub const MAGIC: usize = H::MAGIC_OFFSET;
    pub const FORMAT: usize = H::FORMAT_OFFSET;
    pub const RESERVED: usize = H::RESERVED_OFFSET;
    pub const OP: usize = H::OP_OFFSET;
    pub const BODY_LENGTH: usize = H::BODY_LENGTH_OFFSET;
    pub const BODY_CHECKSUM: usize = H::BODY_CHECKSUM_OFFSET;
    pub const HEADER_CHECKSUM: usize = H::HEADER_CHECKSUM_OFFSET;
    pub const RESERVED_TAIL: usize = H::RESERVED_TAIL_OFFSET;
    pub const MAGIC_VALUE: u64 = u64::from_le_bytes(super::spec::SNAPSHOT_MAGIC);
    pub const FORMAT_VALUE: u32 = iggy_generated::protocol::SNAPSHOT_FORMAT;
}

/// Storage-format marker written at the root of a data directory.
pub mod marker {
    use super::spec;
    pub const FILE_NAME: &str = spec::STORAGE_MARKER_FILE;
    pub const VALUE: &str = iggy_generated::protocol::STORAGE_MARKER;
    /// A marker file longer than this is not ours; it is refused without reading further.
    pub const SIZE_MAX: u64 = spec::STORAGE_MARKER_SIZE_MAX;
}

#[inline]
pub fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
pub fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
pub fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[inline]
pub fn write_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}
