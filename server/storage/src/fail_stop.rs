//! Fail-stop storage: a failed write, fsync, create, rename or remove of a durable file stops
//! the process.
//!
//! After a failed fsync the kernel may have dropped the dirty pages it could not write, and a
//! later fsync can succeed without them, so nothing the process still holds in the page cache
//! can be trusted. A group that kept accepting would acknowledge writes it may not keep; a
//! crash loses nothing acknowledged, and the restart recovers from what is on disk. The stop
//! is immediate: no drain, no further write.
//!
//! Every durable write goes through [`OrStop`] (or [`fail_stop`]) at the place that knows the
//! file, and the directory helpers here fsync a directory after an entry in it was created,
//! renamed or removed. Bad data found at recovery is not a storage failure: the caller refuses
//! it or cuts it with a message, as before.

use crate::stall::{Op, watch, watch_path};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The kind of file an fsync made durable, the label of the node's fsync counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// A consensus group's `journal.wal`.
    Journal,
    /// A segment's `.log`.
    Segment,
    /// A segment's `.index`.
    Index,
    /// A checkpoint slot.
    Checkpoint,
    /// A directory, after an entry in it changed.
    Directory,
    /// A small record written atomically (revision records, the format marker).
    Record,
}

impl Synced {
    pub const ALL: [Synced; 6] = [
        Synced::Journal,
        Synced::Segment,
        Synced::Index,
        Synced::Checkpoint,
        Synced::Directory,
        Synced::Record,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Synced::Journal => "journal",
            Synced::Segment => "segment",
            Synced::Index => "index",
            Synced::Checkpoint => "checkpoint",
            Synced::Directory => "directory",
            Synced::Record => "record",
        }
    }
}

/// Fsyncs done since the process started, by [`Synced`] kind. Process-wide statics keep this
/// crate free of the server's types; an fsync costs far more than the relaxed add.
static FSYNCS: [AtomicU64; Synced::ALL.len()] = [const { AtomicU64::new(0) }; Synced::ALL.len()];

/// Counts one completed fsync of a `file` (every fsync of a durable file passes here).
pub fn count_fsync(file: Synced) {
    FSYNCS[file as usize].fetch_add(1, Ordering::Relaxed);
}

/// The fsyncs of `file` counted since the process started.
pub fn fsyncs(file: Synced) -> u64 {
    FSYNCS[file as usize].load(Ordering::Relaxed)
}

/// The process exit code after a storage failure (sysexits' `EX_IOERR`).
pub const EXIT_CODE: i32 = 74;

/// Set by the first thread that stops the process for a storage failure.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Logs `storage failure: <operation> <path>: <error>; stopping` and exits with [`EXIT_CODE`].
/// Only the first caller does: a full or failed disk fails every shard's writes at about the
/// same time, and each logging its own line and calling exit(3) at once gave the operator a
/// line per shard and raced the exit handlers; the later callers wait for the process to end.
pub fn fail_stop(operation: &str, path: &Path, error: &io::Error) -> ! {
    if STOPPING.swap(true, Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    let message = format!(
        "storage failure: {operation} {}: {error}; stopping",
        path.display()
    );
    if tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!("{message}");
    } else {
        // No subscriber would show it (none installed, or filtered out): the reason for the
        // stop must still reach the operator.
        eprintln!("iggy-server: {message}");
    }
    std::process::exit(EXIT_CODE)
}

/// Stops the process for a disk that stopped answering ([`crate::stall`]): runs `first` (it
/// closes the node's connections), logs `message`, then exits with [`EXIT_CODE`] without
/// running exit handlers (a thread of ours is blocked on the disk; nothing may wait for it).
/// `first` comes before the line: a log written to the hung disk would block the line, and
/// the connections must close regardless. A stop already under way wins: this caller then
/// waits for the process to end.
pub(crate) fn stop_stalled(message: &str, first: impl FnOnce()) -> ! {
    if STOPPING.swap(true, Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    first();
    if tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!("{message}");
    } else {
        eprintln!("iggy-server: {message}");
    }
    // SAFETY: _exit ends the process; it touches no memory of ours.
    unsafe { libc::_exit(EXIT_CODE) }
}

/// `io::Result<T>` → `T`, or [`fail_stop`] naming `operation` and `path`.
pub trait OrStop<T> {
    fn or_stop(self, operation: &str, path: &Path) -> T;
}

impl<T> OrStop<T> for io::Result<T> {
    fn or_stop(self, operation: &str, path: &Path) -> T {
        self.unwrap_or_else(|error| fail_stop(operation, path, &error))
    }
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Fsyncs `dir`, so an entry created, renamed or removed in it survives a machine crash.
/// Blocking: for start-up and for the rare directory changes of partition lifecycles.
pub fn sync_dir(dir: &Path) {
    let file = std::fs::File::open(dir).or_stop("fsync directory", dir);
    let _watch = watch(Op::Fsync, Synced::Directory, file.as_raw_fd());
    file.sync_all().or_stop("fsync directory", dir);
    count_fsync(Synced::Directory);
}

/// [`sync_dir`] on compio, for the paths a partition's task runs on.
pub async fn sync_dir_async(dir: &Path) {
    let file = compio::fs::File::open(dir)
        .await
        .or_stop("fsync directory", dir);
    let _watch = watch(Op::Fsync, Synced::Directory, file.as_raw_fd());
    file.sync_all().await.or_stop("fsync directory", dir);
    count_fsync(Synced::Directory);
}

/// Fsyncs the directory holding `path` (after `path` was created, renamed or removed).
pub fn sync_parent(path: &Path) {
    sync_dir(parent_of(path));
}

/// Creates `dir` and its missing parents, fsyncing the parent of each one created.
pub fn create_dir_all(dir: &Path) {
    if dir.is_dir() {
        return;
    }
    let parent = parent_of(dir);
    if dir
        .parent()
        .is_some_and(|parent| !parent.as_os_str().is_empty())
    {
        create_dir_all(parent);
    }
    let watched = watch_path(Op::Create, Synced::Directory, dir);
    let created = std::fs::create_dir(dir);
    drop(watched);
    match created {
        Ok(()) => sync_dir(parent),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(error) => fail_stop("create directory", dir, &error),
    }
}

/// Renames `from` to `to` and fsyncs both directories.
pub fn rename(from: &Path, to: &Path) {
    let watched = watch_path(Op::Rename, Synced::Directory, to);
    std::fs::rename(from, to).or_stop("rename to", to);
    drop(watched);
    sync_parent(to);
    if parent_of(from) != parent_of(to) {
        sync_parent(from);
    }
}

/// Removes the tree at `path` and fsyncs the directory that held it.
pub fn remove_dir_all(path: &Path) {
    let watched = watch_path(Op::Remove, Synced::Directory, path);
    std::fs::remove_dir_all(path).or_stop("remove", path);
    drop(watched);
    sync_parent(path);
}

/// The temporary file an atomic write of `path` goes through: `{name}.tmp` beside it.
pub fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces `path` with `bytes` atomically: written to [`temporary_path`], fsynced, renamed
/// over `path`, and the directory fsynced. A crash leaves the old file or the new one, and at
/// most a temporary file beside it.
pub async fn write_atomically(path: &Path, bytes: Vec<u8>) {
    let temporary = temporary_path(path);
    let watched = watch_path(Op::Write, Synced::Record, &temporary);
    let compio::BufResult(written, _) = compio::fs::write(&temporary, bytes).await;
    written.or_stop("write", &temporary);
    drop(watched);
    let file = compio::fs::File::open(&temporary)
        .await
        .or_stop("open", &temporary);
    let watched = watch(Op::Fsync, Synced::Record, file.as_raw_fd());
    file.sync_all().await.or_stop("fsync", &temporary);
    count_fsync(Synced::Record);
    drop(watched);
    drop(file);
    let watched = watch_path(Op::Rename, Synced::Record, path);
    compio::fs::rename(&temporary, path)
        .await
        .or_stop("rename to", path);
    drop(watched);
    sync_dir_async(parent_of(path)).await;
}

/// [`write_atomically`] with blocking std calls, for start-up before any runtime runs.
pub fn write_atomically_blocking(path: &Path, bytes: &[u8]) {
    let temporary = temporary_path(path);
    let watched = watch_path(Op::Write, Synced::Record, &temporary);
    std::fs::write(&temporary, bytes).or_stop("write", &temporary);
    drop(watched);
    let file = std::fs::File::open(&temporary).or_stop("open", &temporary);
    let watched = watch(Op::Fsync, Synced::Record, file.as_raw_fd());
    file.sync_all().or_stop("fsync", &temporary);
    count_fsync(Synced::Record);
    drop(watched);
    drop(file);
    let watched = watch_path(Op::Rename, Synced::Record, path);
    std::fs::rename(&temporary, path).or_stop("rename to", path);
    drop(watched);
    sync_parent(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_path_keeps_the_whole_name() {
        assert_eq!(
            temporary_path(Path::new("/d/created.revision")),
            Path::new("/d/created.revision.tmp")
        );
        assert_eq!(
            temporary_path(Path::new("storage.format")),
            Path::new("storage.format.tmp")
        );
    }

    #[test]
    fn create_dir_all_creates_every_missing_level() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a/b/c");
        create_dir_all(&deep);
        assert!(deep.is_dir());
        create_dir_all(&deep);
    }

    #[test]
    fn every_fsync_here_is_counted_by_its_kind() {
        // The counters are process-wide and other tests fsync too: only growth is asserted.
        let root = tempfile::tempdir().unwrap();
        let (directories, records) = (fsyncs(Synced::Directory), fsyncs(Synced::Record));
        sync_dir(root.path());
        write_atomically_blocking(&root.path().join("marker"), b"x");
        assert!(fsyncs(Synced::Directory) >= directories + 2);
        assert!(fsyncs(Synced::Record) > records);
        let labels: Vec<_> = Synced::ALL.iter().map(|kind| kind.label()).collect();
        assert_eq!(
            labels,
            [
                "journal",
                "segment",
                "index",
                "checkpoint",
                "directory",
                "record"
            ]
        );
    }
}
