//! created.revision and retirement.fence rules for a partition incarnation.

use std::path::Path;

use crate::StorageError;
use crate::records::{read_checked_u64, write_checked_u64};

/// File name of the revision record in a partition dir and in its initialization namespace.
pub const CREATED_REVISION: &str = "created.revision";
/// File name of the retirement fence in the initialization namespace.
pub const RETIREMENT_FENCE: &str = "retirement.fence";

/// What [`prepare_partition_dir`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionDirState {
    /// No directory (or an empty one): created fresh for `revision`.
    Created,
    /// The directory already belongs to `revision`.
    Existing,
    /// The directory named an older revision; it was deleted and starts empty.
    ReplacedOlder { older: u64 },
    /// A nonempty directory without created.revision was adopted (logged as a warning).
    AdoptedLegacy,
}

fn io_error(path: &Path, error: std::io::Error) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Applies the created.revision rules to `partition_dir` for `revision`, refusing when the
/// namespace's retirement.fence names this revision, then publishes
/// `{namespace_dir}/created.revision`.
pub async fn prepare_partition_dir(
    partition_dir: &Path,
    namespace_dir: &Path,
    revision: u64,
) -> Result<PartitionDirState, StorageError> {
    assert!(revision > 0, "revisions are non-zero");
    if read_checked_u64(&namespace_dir.join(RETIREMENT_FENCE)).await? == Some(revision) {
        return Err(StorageError::Refused(format!(
            "partition incarnation {revision} is fenced by {}",
            namespace_dir.join(RETIREMENT_FENCE).display()
        )));
    }
    let record = partition_dir.join(CREATED_REVISION);
    let nonempty = std::fs::read_dir(partition_dir)
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    let state = match read_checked_u64(&record).await? {
        Some(found) if found == revision => PartitionDirState::Existing,
        Some(found) if found < revision => {
            tracing::warn!(dir = %partition_dir.display(), older = found, revision,
                "deleting partition directory of an older revision");
            std::fs::remove_dir_all(partition_dir).map_err(|e| io_error(partition_dir, e))?;
            PartitionDirState::ReplacedOlder { older: found }
        }
        Some(found) => {
            return Err(StorageError::Refused(format!(
                "{} names revision {found}, newer than the expected {revision}",
                record.display()
            )));
        }
        None if nonempty => {
            tracing::warn!(dir = %partition_dir.display(), revision,
                "adopting a nonempty partition directory without created.revision");
            PartitionDirState::AdoptedLegacy
        }
        None => PartitionDirState::Created,
    };
    if state != PartitionDirState::Existing {
        std::fs::create_dir_all(partition_dir).map_err(|e| io_error(partition_dir, e))?;
        write_checked_u64(&record, revision).await?;
    }
    std::fs::create_dir_all(namespace_dir).map_err(|e| io_error(namespace_dir, e))?;
    write_checked_u64(&namespace_dir.join(CREATED_REVISION), revision).await?;
    Ok(state)
}

/// Writes the retirement fence naming `revision` in `namespace_dir`.
pub async fn write_retirement_fence(
    namespace_dir: &Path,
    revision: u64,
) -> Result<(), StorageError> {
    std::fs::create_dir_all(namespace_dir).map_err(|e| io_error(namespace_dir, e))?;
    write_checked_u64(&namespace_dir.join(RETIREMENT_FENCE), revision).await
}
