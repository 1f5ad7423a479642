//! Byte layouts of every on-disk record, in one place.
//!
//! Offsets and sizes here mirror `spec/storage.spec` and `spec/frames.spec`. They are the only
//! place the crate names a byte position; every other module goes through these accessors.

/// Batch header, 256 bytes; the same record on the wire, in the journal and in `.log` files.
pub mod batch {
    pub const HEADER_SIZE: usize = 256;
    pub const PARTITION_ID: usize = 0;
    pub const BASE_OFFSET: usize = 8;
    pub const BASE_TIMESTAMP: usize = 16;
    pub const ORIGIN_TIMESTAMP: usize = 24;
    pub const BATCH_LENGTH: usize = 32;
    pub const BATCH_CHECKSUM: usize = 40;
    pub const MESSAGE_COUNT: usize = 48;
    pub const RESERVED: usize = 52;
    pub const RESERVED_SIZE: usize = 204;
}

/// Message frame header, 48 bytes, followed by the payload and then the user headers.
pub mod frame {
    pub const HEADER_SIZE: usize = 48;
    pub const CHECKSUM: usize = 0;
    pub const ID: usize = 8;
    pub const OFFSET_DELTA: usize = 24;
    pub const TIMESTAMP_DELTA: usize = 28;
    pub const USER_HEADERS_LENGTH: usize = 32;
    pub const PAYLOAD_LENGTH: usize = 36;
    pub const RESERVED: usize = 40;
}

/// `.index` entry: `[u64 offset][u64 timestamp][u64 position]`.
pub mod index_entry {
    pub const SIZE: usize = 24;
    pub const OFFSET: usize = 0;
    pub const TIMESTAMP: usize = 8;
    pub const POSITION: usize = 16;
}

/// Segment files of a partition log: `{start_offset:020}.log` holds batch records back to back,
/// `{start_offset:020}.index` one [`index_entry`] per batch.
pub mod segment {
    pub const LOG_EXTENSION: &str = "log";
    pub const INDEX_EXTENSION: &str = "index";
    /// Digits of the zero-padded start offset in a segment file name.
    pub const NAME_DIGITS: usize = 20;
}

/// Checked u64 record: `[u64 value][u64 xxh3(value)]`. Consumer offsets, created.revision and
/// retirement.fence all use it.
pub mod checked_u64 {
    pub const SIZE: usize = 16;
    pub const VALUE: usize = 0;
    pub const CHECKSUM: usize = 8;
}

/// Metadata snapshot header, 64 bytes, followed by `body_length` body bytes.
pub mod snapshot_header {
    pub const SIZE: usize = 64;
    pub const MAGIC: usize = 0;
    pub const FORMAT: usize = 8;
    pub const RESERVED: usize = 12;
    pub const OP: usize = 16;
    pub const BODY_LENGTH: usize = 24;
    pub const BODY_CHECKSUM: usize = 32;
    pub const HEADER_CHECKSUM: usize = 40;
    pub const RESERVED_TAIL: usize = 48;
    pub const MAGIC_VALUE: u64 = u64::from_le_bytes(*b"IGGYMETA");
    pub const FORMAT_VALUE: u32 = 10;
}

/// Storage-format marker written at the root of a data directory.
pub mod marker {
    pub const FILE_NAME: &str = "storage.format";
    pub const VALUE: &str = "IGGY-OWNERSHIP-HISTORY-5";
    /// A marker file longer than this is not ours; it is refused without reading further.
    pub const SIZE_MAX: u64 = 256;
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
