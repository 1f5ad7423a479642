//! iggy-storage: the on-disk formats and the storage-format gate.
//!
//! API for the server:
//! - [`open_data_dir`] gates a data directory on the `IGGY-OWNERSHIP-HISTORY-5` marker,
//!   initializing a missing or empty directory (or one holding only the temporary marker of
//!   an interrupted first start) and refusing anything else unmodified.
//! - [`batch::validate_layout`], [`batch::verify`], [`batch::stamp`] validate a batch record,
//!   verify its checksums and stamp `partition_id`/`base_offset`/`base_timestamp` in place
//!   (recomputing the XxHash3-64 batch checksum); [`batch::verify_arriving`] also checks each
//!   message a producer sends is one the official client builds (sizes, frame), never stored data.
//!
//! - [`fail_stop`]: a failed write, fsync, create, rename or remove of a durable file logs
//!   `storage failure: <op> <file>: <error>; stopping` and exits with [`fail_stop::EXIT_CODE`]
//!   (74); the directory helpers fsync a directory after an entry in it changed, and
//!   [`fail_stop::write_atomically`] writes a file whole (temp, fsync, rename, directory fsync).
//!
//! - [`stall`]: every durable write, fsync, truncation, creation, rename and removal is
//!   watched while in flight ([`stall::watch`], a thread-local slot and two relaxed stores);
//!   a detector thread ([`stall::start`], `system.max_disk_stall`) stops the process the same
//!   way (one `storage failure:` line naming the operation, file and thread; exit 74) once one
//!   has been in flight past the limit, its sockets shut down first.
//!
//! - [`records::write_checked_u64`] / [`records::read_checked_u64`]: the 16-byte
//!   `[u64 value][u64 xxh3]` record (created.revision, retirement.fence), written atomically.
//!
//! - [`checkpoint`]: a consensus group's checkpoint in two alternating slots
//!   (`checkpoint.0`, `checkpoint.1`), the newest valid one loaded, the older one a fallback
//!   while the journal still covers it.
//!
//! - [`revision::prepare_partition_dir`]: created.revision rules (older revision discarded,
//!   legacy dir adopted with a warning, newer refused, a published incarnation whose directory
//!   is missing refused, a damaged record written again only when the namespace publishes the
//!   incarnation, refused naming the file otherwise), retirement.fence refusal, and the
//!   `partition-initialization/<namespace>/created.revision` publication;
//!   [`revision::discard_partition_dir`] removes a directory only when it names the given
//!   revision (renamed into `discarded-partitions/` first, so a crash never leaves half of it
//!   at the partition's path; [`revision::finish_discards`] completes such a removal at start);
//!   [`revision::write_retirement_fence`].
//!
//! - [`partition_log::PartitionLog`]: the append-only log of one partition. Segments
//!   `{start_offset:020}.log` + `.index` (24-byte `[offset][base_timestamp][position]` per
//!   batch), one write per appended batch, roll at `segment_size`, reads sliced to the
//!   requested messages, timestamp lookup, `truncate_from`, segment deletion and retention by
//!   size and expiry; only the active segment's files and the logs of the closed segments read
//!   last stay open ([`partition_log::CLOSED_LOGS_OPEN_MAX`]). Open verifies every record: a torn or corrupt tail of the last segment is
//!   truncated with a warning, corruption elsewhere is an error naming the file, and `.index`
//!   files are rebuilt from the `.log`.
//!
//! - [`verify`] and [`partition_log::check`]: the read-only checks of the offline verifier
//!   (`iggy-server verify`): the format marker, segments and indexes, `created.revision`,
//!   `partition-initialization` records and fences, each reported as a [`verify::Finding`].
//!
//! Work in progress:
//! NOT YET BUILT: consumer offset file paths, metadata snapshot, WAL and superblock, and
//! spec/storage.spec (layouts are local in [`layout`] until then).

pub mod batch;
pub mod checkpoint;
pub mod data_dir;
pub mod fail_stop;
pub mod layout;
pub mod partition_log;
pub mod records;
pub mod revision;
pub mod small_write;
pub mod stall;
pub mod verify;

use std::path::PathBuf;

pub use data_dir::{DataDir, open_data_dir};

/// Everything storage can fail with.
#[derive(Debug)]
pub enum StorageError {
    /// An I/O error on `path`.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The data directory is not ours; nothing was modified.
    Refused(String),
    /// A partition's directory is missing while its initialization namespace published that
    /// incarnation or a later one (its files lost, or, on a replica re-applying ops, deleted
    /// by a later op it already applied); refused like [`StorageError::Refused`].
    PartitionDirMissing(String),
    /// A batch record is malformed.
    InvalidBatch(&'static str),
    /// A stored checksum does not match.
    ChecksumMismatch(&'static str),
    /// An arriving message is not as the official client builds one (its sizes, its frame).
    ArrivingMessage(batch::MessageFault),
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::Io { path, error } => write!(formatter, "{}: {error}", path.display()),
            StorageError::Refused(message) | StorageError::PartitionDirMissing(message) => {
                write!(formatter, "{message}")
            }
            StorageError::InvalidBatch(why) => write!(formatter, "invalid batch: {why}"),
            StorageError::ChecksumMismatch(what) => write!(formatter, "{what} mismatch"),
            StorageError::ArrivingMessage(fault) => write!(formatter, "{fault}"),
        }
    }
}

impl std::error::Error for StorageError {}
