//! The storage-format gate for a data directory.

use std::path::{Path, PathBuf};

use crate::StorageError;
use crate::layout::marker;

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
        self.root
            .join("streams")
            .join(stream.to_string())
            .join("topics")
            .join(topic.to_string())
            .join("partitions")
            .join(partition.to_string())
    }

    /// `{root}/discarded-partitions`: where a partition directory is moved, atomically, before
    /// it is removed (see [`crate::revision::discard_partition_dir`]).
    pub fn discarded_partitions_dir(&self) -> PathBuf {
        self.root.join("discarded-partitions")
    }

    /// `{root}/partition-initialization/{namespace}`.
    pub fn partition_initialization_dir(&self, namespace: &str) -> PathBuf {
        self.root.join("partition-initialization").join(namespace)
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
pub fn open_data_dir(path: impl AsRef<Path>) -> Result<DataDir, StorageError> {
    let root = path.as_ref().to_path_buf();
    let marker_path = root.join(marker::FILE_NAME);
    if !root.exists() {
        std::fs::create_dir_all(&root).map_err(|error| io_error(&root, error))?;
    }
    let mut entries = std::fs::read_dir(&root).map_err(|error| io_error(&root, error))?;
    let empty = entries.next().is_none();
    if empty {
        write_marker(&root, &marker_path)?;
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

fn write_marker(root: &Path, marker_path: &Path) -> Result<(), StorageError> {
    let temporary = root.join(format!("{}.tmp", marker::FILE_NAME));
    std::fs::write(&temporary, format!("{}\n", marker::VALUE))
        .map_err(|error| io_error(&temporary, error))?;
    std::fs::File::open(&temporary)
        .and_then(|file| file.sync_all())
        .map_err(|error| io_error(&temporary, error))?;
    std::fs::rename(&temporary, marker_path).map_err(|error| io_error(marker_path, error))
}
