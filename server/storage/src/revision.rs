//! created.revision and retirement.fence rules for a partition incarnation.

use std::path::Path;

use crate::StorageError;
use crate::fail_stop;
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
    /// The directory named an older revision; it was discarded and starts empty.
    ReplacedOlder { older: u64 },
    /// A nonempty directory without created.revision was adopted (logged as a warning).
    AdoptedLegacy,
}

/// What [`discard_partition_dir`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discarded {
    /// The directory belonged to the revision and is gone.
    Removed,
    /// There was no directory.
    Absent,
    /// The directory belongs to another revision (`found`), or names none: left untouched.
    Kept { found: Option<u64> },
}

fn io_error(path: &Path, error: std::io::Error) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Reads the record at `path`; a damaged one (wrong size or checksum) is refused with an error
/// naming the file and what the operator can do, since what it said cannot be known.
async fn read_record(path: &Path) -> Result<Option<u64>, StorageError> {
    read_checked_u64(path).await.map_err(|error| match error {
        StorageError::ChecksumMismatch(what) => StorageError::Refused(format!(
            "{}: damaged ({what} mismatch); nothing was modified: restore the file from a \
             backup",
            path.display()
        )),
        error => error,
    })
}

/// Applies the created.revision rules to `partition_dir` for `revision`, refusing when the
/// namespace's retirement.fence names this revision, then publishes
/// `{namespace_dir}/created.revision`. An older revision's directory is discarded through
/// `discarded_root` (see [`discard_partition_dir`]).
///
/// A missing directory whose namespace already publishes `revision` is refused: the partition
/// served once and its files are gone, and missing files are not evidence that its data may be
/// discarded (the operator restores a backup, or deletes and recreates the partition). So is a
/// missing directory whose namespace publishes a newer revision: `revision` was deleted here
/// (ids are reused only after a delete), and a restart that replays the metadata from before
/// that delete must not start the deleted incarnation over empty, with another history.
///
/// A damaged record is never read as an absent one (which adopts the directory): the
/// directory's is written again only when its namespace publishes `revision`, which proves
/// the directory is that incarnation's; otherwise, and for a damaged namespace record or
/// fence, the partition is refused naming the file, before anything is modified.
pub async fn prepare_partition_dir(
    partition_dir: &Path,
    namespace_dir: &Path,
    discarded_root: &Path,
    revision: u64,
) -> Result<PartitionDirState, StorageError> {
    assert!(revision > 0, "revisions are non-zero");
    if read_record(&namespace_dir.join(RETIREMENT_FENCE)).await? == Some(revision) {
        return Err(StorageError::Refused(format!(
            "partition incarnation {revision} is fenced by {}",
            namespace_dir.join(RETIREMENT_FENCE).display()
        )));
    }
    let record = partition_dir.join(CREATED_REVISION);
    let entries = match std::fs::read_dir(partition_dir) {
        Ok(entries) => Some(entries),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(io_error(partition_dir, error)),
    };
    let exists = entries.is_some();
    let nonempty = entries.is_some_and(|mut entries| entries.next().is_some());
    let published = read_record(&namespace_dir.join(CREATED_REVISION)).await?;
    if let Some(published) = published.filter(|published| !exists && *published >= revision) {
        return Err(StorageError::PartitionDirMissing(format!(
            "{} is missing, but {} says incarnation {published} was initialized there, \
             not older than {revision}; restore its files from a backup, or delete and \
             recreate the partition",
            partition_dir.display(),
            namespace_dir.join(CREATED_REVISION).display()
        )));
    }
    let found = match read_checked_u64(&record).await {
        Ok(found) => found,
        Err(StorageError::ChecksumMismatch(what)) => {
            let namespace_record = namespace_dir.join(CREATED_REVISION);
            if published != Some(revision) {
                return Err(damaged_and_unproven(
                    &record,
                    what,
                    &namespace_record,
                    published,
                    revision,
                ));
            }
            // The namespace publishes only after the directory's record was written (each
            // atomically), and a later incarnation of these ids would publish itself before it
            // served: the directory is this incarnation's, so its record is written again.
            tracing::warn!(file = %record.display(), revision,
                "damaged ({what} mismatch); {} publishes incarnation {revision}, the one opened \
                 here, so the directory is that incarnation's: its record is written again",
                namespace_record.display());
            write_checked_u64(&record, revision).await;
            Some(revision)
        }
        Err(error) => return Err(error),
    };
    let state = match found {
        Some(found) if found == revision => PartitionDirState::Existing,
        // The namespace publishes an incarnation only after its directory's record was
        // written: the one published here wrote its own, so a directory naming an older one is
        // not the directory initialized there (damaged, or put back from elsewhere), and
        // discarding it could drop the published incarnation's acknowledged messages.
        Some(found) if found < revision && published.is_some_and(|p| found < p) => {
            return Err(StorageError::Refused(format!(
                "{} names incarnation {found}, but {} publishes {}, initialized there since: \
                 the directory is not the one initialized there; nothing was modified: restore \
                 the partition's files from a backup, or delete and recreate the partition",
                record.display(),
                namespace_dir.join(CREATED_REVISION).display(),
                published.unwrap_or_default(),
            )));
        }
        Some(found) if found < revision => {
            tracing::warn!(dir = %partition_dir.display(), older = found, revision,
                "discarding partition directory of an older revision");
            discard_partition_dir(partition_dir, discarded_root, found).await?;
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
        fail_stop::create_dir_all(partition_dir);
        write_checked_u64(&record, revision).await;
    }
    // A restart finds its partitions already published: writing nothing then lets a node
    // whose disk is full start and serve reads.
    if published != Some(revision) {
        fail_stop::create_dir_all(namespace_dir);
        write_checked_u64(&namespace_dir.join(CREATED_REVISION), revision).await;
    }
    Ok(state)
}

/// The refusal of a partition directory whose `record` is damaged when nothing else proves
/// which incarnation it holds: its namespace publishes another one or none (a directory of a
/// release before the namespace records, or a publication a crash cut short).
fn damaged_and_unproven(
    record: &Path,
    what: &str,
    namespace_record: &Path,
    published: Option<u64>,
    revision: u64,
) -> StorageError {
    let published = match published {
        Some(published) => format!("publishes incarnation {published}"),
        None => "is absent".to_string(),
    };
    StorageError::Refused(format!(
        "{}: damaged ({what} mismatch), and nothing proves the directory holds incarnation \
         {revision} ({} {published}); the partition is not served and its files are left as \
         they are: restore the record from a backup, or, if the directory is known to hold this \
         partition's data, remove the damaged record and the next start adopts the directory as \
         incarnation {revision}",
        record.display(),
        namespace_record.display(),
    ))
}

/// Removes `partition_dir` only if its created.revision names `revision`; a directory of any
/// other revision, or without the record, is kept. The directory is first renamed into
/// `discarded_root` (atomic, and the rename is fsynced), so the partition path is either
/// whole or free, never half removed; then the moved tree is removed. A crash in between
/// leaves the tree in `discarded_root`, which [`finish_discards`] empties at the next start.
///
/// The caller stops every task that writes into the directory first: a checkpoint renamed into
/// it afterwards would land in whatever incarnation holds the path next.
pub async fn discard_partition_dir(
    partition_dir: &Path,
    discarded_root: &Path,
    revision: u64,
) -> Result<Discarded, StorageError> {
    if !partition_dir.exists() {
        return Ok(Discarded::Absent);
    }
    let found = read_record(&partition_dir.join(CREATED_REVISION)).await?;
    if found != Some(revision) {
        return Ok(Discarded::Kept { found });
    }
    fail_stop::create_dir_all(discarded_root);
    let mut target = discarded_root.join(revision.to_string());
    let mut attempt = 0;
    while target.exists() {
        attempt += 1;
        target = discarded_root.join(format!("{revision}.{attempt}"));
    }
    fail_stop::rename(partition_dir, &target);
    fail_stop::remove_dir_all(&target);
    Ok(Discarded::Removed)
}

/// Removes every tree left in `discarded_root` by a discard a crash interrupted. Everything
/// there was renamed in by [`discard_partition_dir`] after its revision was checked.
pub fn finish_discards(discarded_root: &Path) -> Result<usize, StorageError> {
    let entries = match std::fs::read_dir(discarded_root) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(io_error(discarded_root, error)),
    };
    let mut finished = 0;
    for entry in entries {
        let path = entry.map_err(|e| io_error(discarded_root, e))?.path();
        fail_stop::remove_dir_all(&path);
        finished += 1;
    }
    Ok(finished)
}

/// Writes the retirement fence naming `revision` in `namespace_dir`.
pub async fn write_retirement_fence(namespace_dir: &Path, revision: u64) {
    fail_stop::create_dir_all(namespace_dir);
    write_checked_u64(&namespace_dir.join(RETIREMENT_FENCE), revision).await;
}
