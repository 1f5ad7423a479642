//! Checked u64 records (`[u64 value][u64 xxh3(value)]`): created.revision and
//! retirement.fence, written atomically (temp file, fsync, rename, directory fsync) with compio.

use std::path::Path;

use twox_hash::XxHash3_64;

use crate::StorageError;
use crate::layout::{checked_u64, read_u64, write_u64};

fn io_error(path: &Path, error: std::io::Error) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Writes `value` to `path` atomically (see [`crate::fail_stop::write_atomically`]); a failed
/// write or fsync stops the process.
pub async fn write_checked_u64(path: &Path, value: u64) {
    let mut record = vec![0u8; checked_u64::SIZE];
    write_u64(&mut record, checked_u64::VALUE, value);
    write_u64(
        &mut record,
        checked_u64::CHECKSUM,
        XxHash3_64::oneshot(&value.to_le_bytes()),
    );
    crate::fail_stop::write_atomically(path, record).await;
}

/// Reads a checked u64 record; `Ok(None)` when the file does not exist.
pub async fn read_checked_u64(path: &Path) -> Result<Option<u64>, StorageError> {
    let bytes = match compio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error(path, error)),
    };
    if bytes.len() != checked_u64::SIZE {
        return Err(StorageError::ChecksumMismatch("checked u64 record size"));
    }
    let value = read_u64(&bytes, checked_u64::VALUE);
    if XxHash3_64::oneshot(&value.to_le_bytes()) != read_u64(&bytes, checked_u64::CHECKSUM) {
        return Err(StorageError::ChecksumMismatch("checked u64 record"));
    }
    Ok(Some(value))
}
