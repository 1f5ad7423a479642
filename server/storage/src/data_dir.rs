//! The storage-format gate for a data directory.

use std::path::{Path, PathBuf};

use crate::StorageError;
use crate::layout::marker;
use iggy_generated::storage as spec;

/// The folder of the partitions' initialization namespaces, beside `streams/`.
pub const PARTITION_INITIALIZATION: &str = "partition-initialization";

/// `{root}/streams/{stream}/topics/{topic}/partitions/{partition}`, for readers of a directory
/// not opened as a [`DataDir`] (`verify`).
pub fn partition_dir_under(root: &Path, stream: u32, topic: u32, partition: u32) -> PathBuf {
    root.join("streams")
        .join(stream.to_string())
        .join("topics")
        .join(topic.to_string())
        .join("partitions")
        .join(partition.to_string())
}

/// `<stream>-<topic>-<partition>`: the name of a partition's `partition-initialization`
/// namespace.
pub fn partition_namespace(stream: u32, topic: u32, partition: u32) -> String {
    format!("{stream}-{topic}-{partition}")
}

/// An opened data directory whose format marker is ours.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// The data directory root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{root}/streams/{stream}/topics/{topic}/partitions/{partition}`.
    pub fn partition_dir(&self, stream: u32, topic: u32, partition: u32) -> PathBuf {
        partition_dir_under(&self.root, stream, topic, partition)
    }

    /// Removes the directories a deleted `topic` left, once they hold nothing: its
    /// `partitions` and topic directories, then, with `stream_gone`, the stream's `topics` and
    /// stream directories. A directory with anything in it stops the walk and is kept (a live
    /// partition's, or files nobody explained). Not synced: a crash leaves an empty directory,
    /// which the next start prunes again. The caller guarantees that no partition of the topic
    /// (of the stream, with `stream_gone`) is being opened meanwhile.
    pub fn prune_deleted(
        &self,
        stream: u32,
        topic: Option<u32>,
        stream_gone: bool,
    ) -> Result<(), StorageError> {
        let stream_dir = self.root.join("streams").join(stream.to_string());
        let mut emptied = Vec::new();
        if let Some(topic) = topic {
            let topic_dir = stream_dir.join("topics").join(topic.to_string());
            emptied.extend([topic_dir.join("partitions"), topic_dir]);
        }
        if stream_gone {
            emptied.extend([stream_dir.join("topics"), stream_dir]);
        }
        for dir in emptied {
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) if error.kind() == std::io::ErrorKind::DirectoryNotEmpty => break,
                Err(error) => return Err(io_error(&dir, error)),
            }
        }
        Ok(())
    }

    /// Every `streams/<s>/topics/<t>` directory, and every stream directory without topics
    /// (`None`), in order.
    pub fn topic_dirs_on_disk(&self) -> Vec<(u32, Option<u32>)> {
        let mut found = Vec::new();
        for (stream, stream_dir) in numbered_subdirs(&self.root.join("streams")) {
            let topics = numbered_subdirs(&stream_dir.join("topics"));
            if topics.is_empty() {
                found.push((stream, None));
            }
            found.extend(topics.into_iter().map(|(topic, _)| (stream, Some(topic))));
        }
        found
    }

    /// Every `streams/<s>/topics/<t>/partitions/<p>` directory with its ids, in order.
    pub fn partition_dirs_on_disk(&self) -> Vec<((u32, u32, u32), PathBuf)> {
        let mut found = Vec::new();
        for (stream, stream_dir) in numbered_subdirs(&self.root.join("streams")) {
            for (topic, topic_dir) in numbered_subdirs(&stream_dir.join("topics")) {
                for (partition, dir) in numbered_subdirs(&topic_dir.join("partitions")) {
                    found.push(((stream, topic, partition), dir));
                }
            }
        }
        found
    }

    /// `{root}/discarded-partitions`: where a partition directory is moved, atomically, before
    /// it is removed (see [`crate::revision::discard_partition_dir`]).
    pub fn discarded_partitions_dir(&self) -> PathBuf {
        self.root.join("discarded-partitions")
    }

    /// `{root}/partition-initialization`: every partition's initialization namespace.
    pub fn partition_initialization_root(&self) -> PathBuf {
        self.root.join(PARTITION_INITIALIZATION)
    }

    /// `{root}/partition-initialization/{namespace}`.
    pub fn partition_initialization_dir(&self, namespace: &str) -> PathBuf {
        self.partition_initialization_root().join(namespace)
    }

    /// The key the QUIC endpoint derives its stateless reset tokens from (the spec's
    /// `QUIC_RESET_KEY_FILE`): the one kept here, or a new random one written atomically when
    /// there is none or the file is not a key (another length). Kept across restarts, it lets a
    /// restarted server reset the connections of the process before it.
    pub async fn quic_reset_key(&self) -> Vec<u8> {
        let path = self.root.join(spec::QUIC_RESET_KEY_FILE);
        let size = spec::QUIC_RESET_KEY_SIZE as usize;
        match std::fs::read(&path) {
            Ok(key) if key.len() == size => return key,
            Ok(other) => tracing::warn!(
                "{} holds {} bytes, not a {size}-byte key: replaced by a new key (QUIC clients of \
                 an earlier process wait out their idle timeout once)",
                path.display(),
                other.len()
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!("{}: {error}: replaced by a new key", path.display()),
        }
        let mut key = vec![0; size];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
        crate::fail_stop::write_atomically(&path, key.clone()).await;
        // Whoever reads it can forge resets of this node's QUIC connections: owner only.
        use std::os::unix::fs::PermissionsExt;
        if let Err(error) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        {
            tracing::warn!("{}: cannot make it owner-only: {error}", path.display());
        }
        key
    }
}

fn io_error(context: &Path, error: std::io::Error) -> StorageError {
    StorageError::Io {
        path: context.to_path_buf(),
        error,
    }
}

/// Opens `path` as a data directory. A missing or empty directory is initialized with the
/// format marker. Anything else must carry our marker: a directory without it, with another
/// marker, or with foreign files is refused before any other file is read or changed.
///
/// The marker is written atomically (temporary file, fsync, rename, directory fsync), so a
/// crash during the first start leaves the directory empty, marked, or holding only the
/// temporary marker; that last one is an interrupted first start (its bytes are a prefix of
/// ours) and is initialized again instead of being refused forever.
pub fn open_data_dir(path: impl AsRef<Path>) -> Result<DataDir, StorageError> {
    let root = path.as_ref().to_path_buf();
    let marker_path = root.join(marker::FILE_NAME);
    if !root.exists() {
        crate::fail_stop::create_dir_all(&root);
    }
    let entries = std::fs::read_dir(&root)
        .and_then(|entries| entries.collect::<Result<Vec<_>, _>>())
        .map_err(|error| io_error(&root, error))?;
    let temporary = crate::fail_stop::temporary_path(&marker_path);
    let interrupted_first_start = match entries.as_slice() {
        [only] => only.path() == temporary && holds_a_marker_prefix(&temporary),
        _ => false,
    };
    if interrupted_first_start {
        tracing::warn!(
            "data directory {}: finishing a first start interrupted while writing {}",
            root.display(),
            marker::FILE_NAME
        );
    }
    if entries.is_empty() || interrupted_first_start {
        write_marker(&marker_path);
        return Ok(DataDir { root });
    }
    check_marker(&root)?;
    Ok(DataDir { root })
}

/// Checks, reading only the marker file, that the nonempty data directory `root` carries our
/// storage-format marker. The start-up gate and the offline verifier share it.
pub fn check_marker(root: &Path) -> Result<(), StorageError> {
    let marker_path = root.join(marker::FILE_NAME);
    let metadata = match std::fs::metadata(&marker_path) {
        Ok(metadata) => metadata,
        Err(_) => {
            return Err(StorageError::Refused(format!(
                "data directory {} is not empty and has no {} marker; refusing to use it \
                 (expected storage format {})",
                root.display(),
                marker::FILE_NAME,
                marker::VALUE
            )));
        }
    };
    if !metadata.is_file() || metadata.len() > marker::SIZE_MAX {
        return Err(StorageError::Refused(format!(
            "data directory {} has an unrecognized {} marker; expected storage format {}",
            root.display(),
            marker::FILE_NAME,
            marker::VALUE
        )));
    }
    let found = std::fs::read(&marker_path).map_err(|error| io_error(&marker_path, error))?;
    let found = String::from_utf8_lossy(&found);
    if found.trim_end() != marker::VALUE {
        return Err(StorageError::Refused(format!(
            "data directory {} has storage format {:?}, this server needs {}; \
             migrate or restore the data with a validated procedure",
            root.display(),
            found.trim_end(),
            marker::VALUE
        )));
    }
    Ok(())
}

/// Whether `path` is a file no longer than the marker whose bytes begin our marker's: what a
/// crash while writing the temporary marker leaves.
fn holds_a_marker_prefix(path: &Path) -> bool {
    let expected = format!("{}\n", marker::VALUE);
    let small = std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.len() <= expected.len() as u64);
    small && std::fs::read(path).is_ok_and(|found| expected.as_bytes().starts_with(&found))
}

fn write_marker(marker_path: &Path) {
    crate::fail_stop::write_atomically_blocking(
        marker_path,
        format!("{}\n", marker::VALUE).as_bytes(),
    );
}

/// The entries of `dir` whose names are numbers, with their paths, sorted; none when it cannot
/// be read.
fn numbered_subdirs(dir: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path())))
        .collect();
    found.sort();
    found
}

/// The restored-node marker in the data directory `root` (`RESTORED_MARKER_FILE`): while it is
/// there, every consensus group of the node opens restored, voting in no view change until it
/// holds a whole view's log from its primary.
pub fn restored_marker(root: &Path) -> PathBuf {
    root.join(spec::RESTORED_MARKER_FILE)
}

/// Writes the restored-node marker durably (the file, then its directory), under the
/// disk-stall watch.
pub fn write_restored_marker(root: &Path) -> std::io::Result<()> {
    let marker = restored_marker(root);
    let _watch = crate::stall::watch_path(
        crate::stall::Op::Create,
        crate::fail_stop::Synced::Record,
        &marker,
    );
    std::fs::File::create(&marker)?.sync_all()?;
    std::fs::File::open(root)?.sync_all()
}

/// Removes the restored-node marker durably (the file, then its directory), under the
/// disk-stall watch.
pub fn remove_restored_marker(root: &Path) -> std::io::Result<()> {
    let marker = restored_marker(root);
    let _watch = crate::stall::watch_path(
        crate::stall::Op::Remove,
        crate::fail_stop::Synced::Record,
        &marker,
    );
    std::fs::remove_file(&marker)?;
    std::fs::File::open(root)?.sync_all()
}

/// A process's hold on its data directory for as long as it lives: an exclusive advisory lock
/// (`flock`) on the directory itself, which writes nothing into it and which the kernel drops
/// when the process ends, however it ends. A second process started on the same directory (a
/// copied unit file, a mistyped `system.path`) is refused before it writes anything there.
#[derive(Debug)]
pub struct DirLock {
    dir: std::fs::File,
}

impl DirLock {
    /// Whether this lock is on the directory at `path` now (`--fresh` replaces it).
    pub fn holds(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.dir.metadata(), std::fs::metadata(path)) {
            (Ok(held), Ok(now)) => (held.dev(), held.ino()) == (now.dev(), now.ino()),
            _ => false,
        }
    }
}

/// What [`lock_data_dir`] found.
#[derive(Debug)]
pub enum DirHold {
    Held(DirLock),
    /// No directory there yet: take the hold once one is made (what else is there is for
    /// [`open_data_dir`] to judge).
    NoDirectory,
    /// The filesystem refuses the lock (an NFS mount without lock support): the start goes
    /// on, unguarded against a second process.
    Unlockable(std::io::Error),
}

/// Takes the hold on the data directory at `path`; an error naming the directory when another
/// process holds it.
pub fn lock_data_dir(path: &Path) -> Result<DirHold, String> {
    let dir = match std::fs::File::open(path) {
        Ok(dir) if dir.metadata().is_ok_and(|m| m.is_dir()) => dir,
        _ => return Ok(DirHold::NoDirectory),
    };
    match dir.try_lock() {
        Ok(()) => Ok(DirHold::Held(DirLock { dir })),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "{} is in use: another iggy-server process holds its lock (stop that process first, \
             or give this one its own system.path); nothing was started",
            path.display()
        )),
        Err(std::fs::TryLockError::Error(error)) => Ok(DirHold::Unlockable(error)),
    }
}
