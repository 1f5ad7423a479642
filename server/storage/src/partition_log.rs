//! The append-only log of one partition: segments of batch records plus their `.index` files.
//!
//! A segment is `{start_offset:020}.log` (stamped batch records back to back, exactly as they
//! arrive on the wire) and `{start_offset:020}.index` (one 24-byte
//! `[u64 offset][u64 base_timestamp][u64 position]` entry per batch). The active (last) segment
//! takes appends; it is rolled as soon as it reaches `segment_size`, so every other segment is
//! closed and full.
//!
//! Every segment keeps an in-memory vector of its batches (offset, base timestamp, position,
//! length, message count and the running maximum base timestamp), so reads, timestamp lookups
//! and retention never rescan a file.
//!
//! Only the active segment's two files stay open. A closed segment's `.log` is opened for a
//! read and kept among at most [`CLOSED_LOGS_OPEN_MAX`] open ones, the least recently read
//! closed first, so a partition's descriptors do not grow with its segment count; its `.index`
//! is never read (the entries are in memory) and stays closed.
//!
//! Recovery ([`PartitionLog::open`]) walks and verifies every record of every segment. A torn
//! or corrupt tail of the last segment is truncated with a warning; a corrupt record anywhere
//! else is an error naming the file, because a message that fails its checksum must never be
//! served. The `.index` files are rewritten from the `.log` walk whenever they differ from it.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::fs::{File, OpenOptions};
use compio::io::{AsyncReadAtExt, AsyncWriteAtExt};

use crate::StorageError;
use crate::batch;
use crate::fail_stop::{OrStop, Synced, count_fsync};
use crate::layout::{self, frame, index_entry, read_u32, read_u64, segment, write_u32, write_u64};
use crate::small_write::SMALL_WRITE_MAX;
use crate::stall::{Op, watch, watch_path};
use crate::verify::Finding;

/// Bytes read at a time while walking a segment during recovery.
const SCAN_CHUNK: usize = 1 << 20;

/// Why a log whose first segment starts at `first` (`None`: no segment) lost messages, given
/// the offset it is retained from.
fn oldest_segments_lost(retained_from: Option<u64>, first: Option<u64>) -> Option<String> {
    match (retained_from, first) {
        (Some(from), Some(first)) if first > from => Some(format!(
            "the log starts at offset {first}, but it is retained from offset {from} \
             ({RETAINED_FROM}): its oldest segments were removed behind the node's back, not \
             by a committed retirement"
        )),
        (Some(from), None) if from > 0 => Some(format!(
            "every segment is gone, but the log is retained from offset {from} ({RETAINED_FROM})"
        )),
        _ => None,
    }
}

/// What a standalone node does with a partition whose files lost acknowledged history, and the
/// operator's first way out; each refusal goes on with what may be lost and its second way out
/// (accepting the loss): "… or, if those messages may be lost, start once with …".
pub const NOT_SERVED_UNTIL_RESTORED: &str = "a standalone node has no peer that holds them, so \
     the partition is not served and its files are left as they are. Restore the data directory \
     from a verified backup (README \"Backup and restore\"); or, if those";

/// A partition directory's checked u64 (spec `CheckedU64`): the offset its log is retained
/// from, written when the log is first opened (a directory of a build before it adopts its
/// first segment's) and durably before a retirement removes segments. A log whose first
/// segment starts past it lost its oldest segments behind the node's back, which no committed
/// retirement did.
pub const RETAINED_FROM: &str = "retained.from";

/// How a partition log rolls segments. (Retention is decided by the caller from the topic's
/// limits, [`PartitionLog::retention_point`], and carried out by a committed op,
/// [`PartitionLog::retire_below`], so every replica deletes the same segments.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment when the active `.log` reaches this many bytes.
    pub segment_size: u64,
    /// Start the kernel's writeback of the active `.log` each time this many bytes were appended
    /// since the last start (0: never, leave it to the kernel). Without it a partition written
    /// faster than the kernel's background writeback fills the page cache to the kernel's dirty
    /// limit, and then every write waits while the kernel throttles the writer; started early,
    /// the disk writes as the log grows, and a later fsync finds little left to write.
    pub writeback_bytes: u64,
    /// Refuse the log, instead of cutting it, when the last segment holds a whole record that
    /// fails verification (not a record cut short, which is what a crash leaves): cut, the
    /// acknowledged messages from it on are lost, which a standalone node has no peer to bring
    /// back.
    pub refuse_corrupt_tail: bool,
}

/// Writeback starts that returned success so far, in this process (see
/// [`LogConfig::writeback_bytes`]).
pub fn writebacks_started() -> u64 {
    WRITEBACKS_STARTED.load(Ordering::Relaxed)
}

static WRITEBACKS_STARTED: AtomicU64 = AtomicU64::new(0);

/// Writeback starts and ends on this boundary (the page size).
const WRITEBACK_ALIGN: u64 = 4096;

/// Writeback of a segment's `.log` started ahead of the kernel's own.
#[derive(Debug, Default)]
struct Writeback {
    /// The `.log` position up to which writeback was started.
    started_to: u64,
    /// A start has not returned yet (it may wait for the device's queue): the next one waits
    /// for it and covers more, so a slow disk never piles up blocking calls.
    in_flight: Arc<AtomicBool>,
}

/// Whole batch records read from the log, sliced to the requested messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBatches {
    /// Batch records back to back.
    pub bytes: Vec<u8>,
    /// Messages in `bytes`.
    pub messages: u32,
    /// Offset of the last message in `bytes`; `None` when nothing was read.
    pub last_offset: Option<u64>,
}

/// One batch record of a segment, in memory.
#[derive(Debug, Clone, Copy)]
struct BatchEntry {
    offset: u64,
    timestamp: u64,
    position: u64,
    length: u64,
    count: u32,
    /// Maximum base timestamp of this and every earlier batch of the segment.
    max_timestamp: u64,
}

/// What the log knows of one segment, active or closed; the files are held apart (see
/// [`ActiveFiles`] and [`ClosedLogs`]), so a log of many segments does not hold a descriptor
/// for each of them.
struct Segment {
    start_offset: u64,
    /// The offset after the segment's last message.
    end_offset: u64,
    log_path: PathBuf,
    index_path: PathBuf,
    log_size: u64,
    entries: Vec<BatchEntry>,
}

impl Segment {
    fn messages(&self) -> u64 {
        self.end_offset - self.start_offset
    }

    /// Base timestamp of the newest batch; 0 when empty.
    fn max_timestamp(&self) -> u64 {
        self.entries.last().map_or(0, |entry| entry.max_timestamp)
    }

    fn index_size(&self) -> u64 {
        self.entries.len() as u64 * index_entry::SIZE as u64
    }
}

/// The active segment's files, open for as long as it is active: appends, fsyncs and reads of
/// the newest messages never wait for an open.
struct ActiveFiles {
    log: File,
    index: File,
    /// Written to since the last fsync.
    unsynced: bool,
    /// The `.log` file written to since its last fsync (the `.index` can be rebuilt from it).
    records_unsynced: bool,
    writeback: Writeback,
}

impl ActiveFiles {
    /// The files of a segment that is complete on disk and fsynced (a closed one, or one
    /// recovery just walked), opened for appends.
    async fn open(segment: &Segment) -> Result<ActiveFiles, StorageError> {
        Ok(ActiveFiles {
            log: open_read_write(&segment.log_path).await?,
            index: open_read_write(&segment.index_path).await?,
            unsynced: false,
            records_unsynced: false,
            writeback: Writeback {
                started_to: segment.log_size,
                ..Writeback::default()
            },
        })
    }
}

/// Closed segments' `.log` files a partition keeps open at most (reads only: a closed
/// segment's `.index` is never read, its entries are in memory). A read of a closed segment
/// opens its `.log` unless it is among them, and opening one more closes the least recently
/// read, so a partition holds at most this many plus its active segment's two files however
/// many segments it keeps. Two: a consumer reading history keeps its segment open across
/// polls (a poll crossing into the next segment moves it on), and so does a second one
/// elsewhere in the log.
pub const CLOSED_LOGS_OPEN_MAX: usize = 2;

/// The open `.log` files of closed segments, least recently read first (see
/// [`CLOSED_LOGS_OPEN_MAX`]).
struct ClosedLogs {
    /// `(start_offset, file)`.
    open: Vec<(u64, File)>,
}

impl ClosedLogs {
    fn new() -> ClosedLogs {
        ClosedLogs {
            open: Vec::with_capacity(CLOSED_LOGS_OPEN_MAX),
        }
    }

    /// `segment`'s `.log`, now the most recently read: the one kept open, or opened now (the
    /// least recently read one closed first when as many as allowed are open).
    async fn get(&mut self, segment: &Segment) -> Result<&File, StorageError> {
        let start = segment.start_offset;
        match self.open.iter().position(|(open, _)| *open == start) {
            Some(at) => self.open[at..].rotate_left(1),
            None => {
                let file = open_read_only(&segment.log_path).await?;
                self.keep(start, file);
            }
        }
        Ok(&self
            .open
            .last()
            .expect("the segment's file was just placed")
            .1)
    }

    /// Keeps the `.log` of the closed segment starting at `start` open, as the most recently
    /// read; closes the least recently read one when as many as allowed are open.
    fn keep(&mut self, start: u64, file: File) {
        debug_assert!(self.open.iter().all(|(open, _)| *open != start));
        if self.open.len() == CLOSED_LOGS_OPEN_MAX {
            self.open.remove(0);
        }
        self.open.push((start, file));
    }

    /// Closes the `.log` of the segment starting at `start`, if open: it is removed, or about
    /// to be written as the active segment again.
    fn close(&mut self, start: u64) {
        self.open.retain(|(open, _)| *open != start);
    }
}

/// The files a log holds open.
struct OpenFiles {
    active: ActiveFiles,
    closed: ClosedLogs,
}

impl OpenFiles {
    /// The `.log` of `segments[index]` for reading: the active segment's own, a closed one's
    /// from those kept open.
    async fn readable_log(
        &mut self,
        segments: &[Segment],
        index: usize,
    ) -> Result<&File, StorageError> {
        if index + 1 == segments.len() {
            return Ok(&self.active.log);
        }
        self.closed.get(&segments[index]).await
    }
}

/// The append-only log of one partition.
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// Oldest first; never empty; the last one is active.
    segments: Vec<Segment>,
    files: OpenFiles,
    size_bytes: u64,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PartitionLog")
            .field("dir", &self.dir)
            .field("first_offset", &self.first_offset())
            .field("next_offset", &self.next_offset())
            .field("segments", &self.segments.len())
            .field("size_bytes", &self.size_bytes)
            .finish()
    }
}

fn io_error(path: &Path, error: io::Error) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn corrupt(path: &Path, message: String) -> StorageError {
    io_error(path, io::Error::new(io::ErrorKind::InvalidData, message))
}

fn segment_paths(dir: &Path, start_offset: u64) -> (PathBuf, PathBuf) {
    let width = segment::NAME_DIGITS;
    (
        dir.join(format!("{start_offset:0width$}.{}", segment::LOG_EXTENSION)),
        dir.join(format!(
            "{start_offset:0width$}.{}",
            segment::INDEX_EXTENSION
        )),
    )
}

/// The start offset of a segment file named `{start_offset:020}.{extension}`.
fn parse_segment_name(name: &str, extension: &str) -> Option<u64> {
    let stem = name.strip_suffix(extension)?.strip_suffix('.')?;
    if stem.len() != segment::NAME_DIGITS || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Reads `length` bytes at `position` and appends them to `out`. On error `out` keeps its
/// previous contents.
async fn read_append(
    file: &File,
    path: &Path,
    mut out: Vec<u8>,
    position: u64,
    length: usize,
) -> (Result<(), StorageError>, Vec<u8>) {
    let start = out.len();
    out.reserve(length);
    let BufResult(result, slice) = file
        .read_exact_at(out.slice(start..start + length), position)
        .await;
    let mut out = slice.into_inner();
    match result {
        Ok(()) => (Ok(()), out),
        Err(error) => {
            out.truncate(start);
            (Err(io_error(path, error)), out)
        }
    }
}

async fn read_vec(
    file: &File,
    path: &Path,
    position: u64,
    length: usize,
) -> Result<Vec<u8>, StorageError> {
    let (result, bytes) = read_append(file, path, Vec::new(), position, length).await;
    result.map(|()| bytes)
}

/// Checks that `bytes`, records read back to back, are the batches `entries` name (each
/// header's base offset and length): a file changed behind the log's back (cut short, then
/// written past, so it reads zeros where batches were) would otherwise be served as messages.
fn check_read(path: &Path, bytes: &[u8], entries: &[BatchEntry]) -> Result<(), StorageError> {
    let mut at = 0usize;
    for entry in entries {
        let holds = bytes
            .get(at..at + layout::batch::HEADER_SIZE)
            .is_some_and(|header| {
                read_u64(header, layout::batch::BASE_OFFSET) == entry.offset
                    && read_u64(header, layout::batch::BATCH_LENGTH) == entry.length
            });
        if !holds {
            return Err(corrupt(
                path,
                format!(
                    "byte {} does not hold the batch of offset {} ({} bytes) the node wrote \
                     there: the file was changed behind the node's back",
                    entry.position, entry.offset, entry.length
                ),
            ));
        }
        at += entry.length as usize;
    }
    Ok(())
}

/// fstat(2) of `file`'s descriptor, on this thread (the inode is in memory: no I/O).
fn descriptor_metadata(file: &File) -> io::Result<std::fs::Metadata> {
    crate::small_write::borrowed_std(file).metadata()
}

/// Writes the first `length` bytes of `file`, whose path was removed (unlinked while open), to a
/// new file at `path`, durably (the file and its directory fsynced). Refuses to replace anything
/// found at `path` meanwhile; a copy that fails midway is removed. Blocking: the node stops
/// right after.
fn write_back_removed(file: &File, path: &Path, length: u64) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let source = crate::small_write::borrowed_std(file);
    // Watched as every durable write is (`stall`): a disk that hangs here stops the node too.
    let _watch = watch_path(Op::Create, Synced::Segment, path);
    let mut target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    let copied = (|| {
        let mut buffer = vec![0u8; 1 << 20];
        let mut position = 0;
        while position < length {
            let want = usize::try_from(length - position)
                .map_or(buffer.len(), |left| left.min(buffer.len()));
            let read = source.read_at(&mut buffer[..want], position)?;
            if read == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the open file ends at {position} of {length} bytes"),
                ));
            }
            target.write_all(&buffer[..read])?;
            position += read as u64;
        }
        target.sync_all()?;
        let parent = path.parent().unwrap_or(Path::new("."));
        std::fs::File::open(parent)?.sync_all()
    })();
    if copied.is_err() {
        let _ = std::fs::remove_file(path);
    }
    copied
}

// Writes, fsyncs, truncations, creations and removals of segment files stop the process when
// they fail (see `fail_stop`); reads return errors (a poll's caller stops on one showing the file
// no longer holds what was written, see `check_read`).

async fn write_all(file: &mut File, path: &Path, bytes: impl IoBuf, position: u64) {
    let _watch = watch(Op::Write, Synced::Segment, file.as_raw_fd());
    let BufResult(result, _) = file.write_all_at(bytes, position).await;
    result.or_stop("write", path);
}

async fn sync_data(file: &File, path: &Path, kind: Synced) {
    let _watch = watch(Op::Fsync, kind, file.as_raw_fd());
    file.sync_data().await.or_stop("fsync", path);
    count_fsync(kind);
}

async fn set_len(file: &File, path: &Path, length: u64) {
    let _watch = watch(Op::Truncate, Synced::Segment, file.as_raw_fd());
    file.set_len(length).await.or_stop("truncate", path);
}

/// Opens an existing segment file for reading and writing.
async fn open_read_write(path: &Path) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .await
        .map_err(|error| io_error(path, error))
}

/// Opens an existing segment file for reading.
async fn open_read_only(path: &Path) -> Result<File, StorageError> {
    OpenOptions::new()
        .read(true)
        .open(path)
        .await
        .map_err(|error| io_error(path, error))
}

/// Creates (or empties) a segment file; the caller fsyncs the directory.
async fn create_file(path: &Path) -> File {
    let _watch = watch_path(Op::Create, Synced::Segment, path);
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .await
        .or_stop("create", path)
}

async fn remove_file(path: &Path) {
    let _watch = watch_path(Op::Remove, Synced::Segment, path);
    match compio::fs::remove_file(path).await {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        removed => removed.or_stop("remove", path),
    }
}

async fn file_len(file: &File, path: &Path) -> Result<u64, StorageError> {
    Ok(file
        .metadata()
        .await
        .map_err(|error| io_error(path, error))?
        .len())
}

/// Byte position, within `record`, of frame number `frames` (the end of the record when
/// `frames` equals its message count). The record has passed [`batch::verify`].
fn frame_boundary(record: &[u8], frames: u32) -> usize {
    let mut position = layout::batch::HEADER_SIZE;
    for _ in 0..frames {
        position += frame_length(record, position);
    }
    position
}

/// The length of the frame at `position` of `record`: its header, payload and user headers.
fn frame_length(record: &[u8], position: usize) -> usize {
    let headers = read_u32(record, position + frame::USER_HEADERS_LENGTH) as usize;
    let payload = read_u32(record, position + frame::PAYLOAD_LENGTH) as usize;
    frame::HEADER_SIZE + payload + headers
}

/// How many of the first `frames` frames of `record` end within `bytes` of its start, at least
/// one.
fn frames_within(record: &[u8], frames: u32, bytes: usize) -> u32 {
    let mut position = layout::batch::HEADER_SIZE;
    for fit in 0..frames {
        position += frame_length(record, position);
        if position > bytes {
            return fit.max(1);
        }
    }
    frames
}

/// Rewrites `message_count`, `batch_length` and the batch checksum of a sliced record.
fn rewrite_sliced_header(record: &mut [u8], count: u32) {
    write_u32(record, layout::batch::MESSAGE_COUNT, count);
    write_u64(record, layout::batch::BATCH_LENGTH, record.len() as u64);
    let checksum = batch::compute_checksum(record);
    write_u64(record, layout::batch::BATCH_CHECKSUM, checksum);
}

fn index_bytes(entry: &BatchEntry) -> [u8; index_entry::SIZE] {
    let mut bytes = [0u8; index_entry::SIZE];
    write_u64(&mut bytes, index_entry::OFFSET, entry.offset);
    write_u64(&mut bytes, index_entry::TIMESTAMP, entry.timestamp);
    write_u64(&mut bytes, index_entry::POSITION, entry.position);
    bytes
}

/// Buffered positional reader used by the recovery walk.
struct Scanner<'a> {
    file: &'a File,
    path: &'a Path,
    file_len: u64,
    buffer: Vec<u8>,
    buffer_start: u64,
}

impl Scanner<'_> {
    /// The bytes `[position, position + length)`; the range lies within the file.
    async fn fetch(&mut self, position: u64, length: usize) -> Result<&[u8], StorageError> {
        let buffer_end = self.buffer_start + self.buffer.len() as u64;
        if position < self.buffer_start || position + length as u64 > buffer_end {
            let want = (length.max(SCAN_CHUNK) as u64).min(self.file_len - position) as usize;
            let mut buffer = std::mem::take(&mut self.buffer);
            buffer.clear();
            let (result, buffer) = read_append(self.file, self.path, buffer, position, want).await;
            self.buffer = buffer;
            self.buffer_start = position;
            result?;
        }
        let at = (position - self.buffer_start) as usize;
        Ok(&self.buffer[at..at + length])
    }
}

/// The start offsets of the `.log` files (sorted) and of the `.index` files in `dir`.
fn list_segments(dir: &Path) -> Result<(Vec<u64>, Vec<u64>), StorageError> {
    let mut log_starts = Vec::new();
    let mut index_starts = Vec::new();
    // compio is built without `fs-dir`; listing a directory once at open is fine blocking.
    for entry in std::fs::read_dir(dir).map_err(|error| io_error(dir, error))? {
        let entry = entry.map_err(|error| io_error(dir, error))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(start) = parse_segment_name(&name, segment::LOG_EXTENSION) {
            log_starts.push(start);
        } else if let Some(start) = parse_segment_name(&name, segment::INDEX_EXTENSION) {
            index_starts.push(start);
        }
    }
    log_starts.sort_unstable();
    Ok((log_starts, index_starts))
}

/// The `.index` bytes a segment walk implies.
fn expected_index(entries: &[BatchEntry]) -> Vec<u8> {
    let mut expected = Vec::with_capacity(entries.len() * index_entry::SIZE);
    for entry in entries {
        expected.extend_from_slice(&index_bytes(entry));
    }
    expected
}

/// What the recovery walk found in one `.log`.
struct Scan {
    entries: Vec<BatchEntry>,
    end_offset: u64,
    valid_len: u64,
    /// Byte position and reason of the first record that is torn or fails verification.
    failure: Option<(u64, String)>,
    /// The failing record runs past the end of the file: an append a crash cut short, as
    /// opposed to a whole record that fails verification.
    torn: bool,
}

async fn scan_segment(
    file: &File,
    path: &Path,
    start_offset: u64,
) -> Result<(Scan, u64), StorageError> {
    let file_len = file_len(file, path).await?;
    let mut scanner = Scanner {
        file,
        path,
        file_len,
        buffer: Vec::new(),
        buffer_start: 0,
    };
    let mut entries = Vec::new();
    let mut position = 0u64;
    let mut expected = start_offset;
    let mut max_timestamp = 0u64;
    let header_size = layout::batch::HEADER_SIZE as u64;
    let mut torn = false;
    let failure = loop {
        if position == file_len {
            break None;
        }
        if file_len - position < header_size {
            torn = true;
            break Some((
                position,
                format!("torn batch header ({} bytes)", file_len - position),
            ));
        }
        let header = scanner.fetch(position, layout::batch::HEADER_SIZE).await?;
        let length = read_u64(header, layout::batch::BATCH_LENGTH);
        if length < header_size {
            break Some((
                position,
                format!("batch_length {length} is shorter than the header"),
            ));
        }
        if length > file_len - position {
            torn = true;
            break Some((
                position,
                format!(
                    "torn record: batch_length {length}, {} bytes left in the file",
                    file_len - position
                ),
            ));
        }
        let record = scanner.fetch(position, length as usize).await?;
        let count = match batch::verify(record) {
            Ok(count) => count,
            Err(error) => break Some((position, error.to_string())),
        };
        if count == 0 {
            break Some((position, "batch holds no messages".to_string()));
        }
        let base_offset = read_u64(record, layout::batch::BASE_OFFSET);
        if base_offset != expected {
            break Some((
                position,
                format!("base_offset {base_offset} where {expected} was expected"),
            ));
        }
        let timestamp = read_u64(record, layout::batch::BASE_TIMESTAMP);
        max_timestamp = max_timestamp.max(timestamp);
        entries.push(BatchEntry {
            offset: base_offset,
            timestamp,
            position,
            length,
            count,
            max_timestamp,
        });
        expected += u64::from(count);
        position += length;
    };
    Ok((
        Scan {
            entries,
            end_offset: expected,
            valid_len: position,
            failure,
            torn,
        },
        file_len,
    ))
}

/// Creates the files of an empty segment starting at `start_offset` and fsyncs the directory
/// (a segment rolls at most once per `segment_size`, so the directory fsync costs little).
async fn new_segment(dir: &Path, start_offset: u64) -> (Segment, ActiveFiles) {
    let (log_path, index_path) = segment_paths(dir, start_offset);
    let log = create_file(&log_path).await;
    let index = create_file(&index_path).await;
    crate::fail_stop::sync_dir_async(dir).await;
    let segment = Segment {
        start_offset,
        end_offset: start_offset,
        log_path,
        index_path,
        log_size: 0,
        entries: Vec::new(),
    };
    let files = ActiveFiles {
        log,
        index,
        unsynced: true,
        records_unsynced: true,
        writeback: Writeback::default(),
    };
    (segment, files)
}

impl PartitionLog {
    /// Opens or creates the log in `dir` (segments `{start_offset:020}.log` + `.index`).
    ///
    /// Recovery walks and verifies every record of every segment. The tail of the last segment
    /// from its first torn or corrupt record on is truncated away, with a `tracing::warn!`
    /// naming the file, the byte position and the reason. A torn or corrupt record in any other
    /// segment, or a gap between segments, is an error naming the file. An `.index` that differs
    /// from the walk (missing, short, stale) is rewritten. `.index` files without a `.log` are
    /// removed. An empty directory gets a first segment starting at offset 0.
    pub async fn open(dir: &Path, config: LogConfig) -> Result<PartitionLog, StorageError> {
        crate::fail_stop::create_dir_all(dir);
        let (log_starts, index_starts) = list_segments(dir)?;
        // Judged before anything here changes: a refused log is left as it is.
        let retained_path = dir.join(RETAINED_FROM);
        let (retained_from, damaged) = match crate::records::read_checked_u64(&retained_path).await
        {
            Ok(from) => (from, false),
            Err(error) if !config.refuse_corrupt_tail => {
                tracing::warn!("{}: {error}; written again", retained_path.display());
                (None, true)
            }
            Err(error) => return Err(error),
        };
        let first = log_starts.first().copied();
        let lost = oldest_segments_lost(retained_from, first);
        if let Some(lost) = &lost
            && config.refuse_corrupt_tail
        {
            return Err(StorageError::Refused(format!(
                "{}: {lost}; {NOT_SERVED_UNTIL_RESTORED} messages may be lost, start once with \
                 --cut-damaged-journals",
                dir.display()
            )));
        }
        // Retained from the first segment on: said when it was lost (accepted, or a cluster
        // node's, whose peers hold the messages); written by a new log, and adopted by a
        // directory of a build before the record.
        if let Some(lost) = &lost {
            tracing::warn!("{}: {lost}; serving what is left", dir.display());
        }
        if lost.is_some() || damaged || retained_from.is_none() {
            crate::records::write_checked_u64(&retained_path, first.unwrap_or(0)).await;
        }
        let mut removed = false;
        for start in index_starts {
            if log_starts.binary_search(&start).is_err() {
                let (_, index_path) = segment_paths(dir, start);
                tracing::warn!("{}: removing an index without a log", index_path.display());
                remove_file(&index_path).await;
                removed = true;
            }
        }
        if removed {
            crate::fail_stop::sync_dir_async(dir).await;
        }

        let mut closed = ClosedLogs::new();
        let Some(last) = log_starts.len().checked_sub(1) else {
            let (segment, active_files) = new_segment(dir, 0).await;
            return Ok(PartitionLog {
                dir: dir.to_path_buf(),
                config,
                segments: vec![segment],
                files: OpenFiles {
                    active: active_files,
                    closed,
                },
                size_bytes: 0,
            });
        };
        let mut segments: Vec<Segment> = Vec::with_capacity(log_starts.len());
        let mut active_files = None;
        let mut size_bytes = 0;
        for (number, start_offset) in log_starts.into_iter().enumerate() {
            let (log_path, index_path) = segment_paths(dir, start_offset);
            if let Some(previous) = segments.last()
                && previous.end_offset != start_offset
            {
                return Err(corrupt(
                    &log_path,
                    format!(
                        "segment starts at offset {start_offset} but the previous one ends at {}",
                        previous.end_offset
                    ),
                ));
            }
            // Only the last segment is written to (its tail cut, then appended to).
            let is_active = number == last;
            let log_file = if is_active {
                open_read_write(&log_path).await?
            } else {
                open_read_only(&log_path).await?
            };
            let (scan, log_len) = scan_segment(&log_file, &log_path, start_offset).await?;
            if let Some((position, reason)) = &scan.failure {
                if !is_active {
                    return Err(corrupt(
                        &log_path,
                        format!("corrupt record at byte {position}: {reason}"),
                    ));
                }
                if !scan.torn && config.refuse_corrupt_tail {
                    return Err(corrupt(
                        &log_path,
                        format!(
                            "corrupt record at byte {position}: {reason}; cutting the log there \
                             would lose {} bytes of acknowledged messages; \
                             {NOT_SERVED_UNTIL_RESTORED} messages may be lost, start once with \
                             --cut-damaged-journals",
                            log_len - position
                        ),
                    ));
                }
                tracing::warn!(
                    "{}: dropping the tail from byte {position} ({} bytes): {reason}",
                    log_path.display(),
                    log_len - position,
                );
                set_len(&log_file, &log_path, scan.valid_len).await;
            }
            let mut index_file = if index_path.exists() {
                open_read_write(&index_path).await?
            } else {
                let index_file = create_file(&index_path).await;
                crate::fail_stop::sync_dir_async(dir).await;
                index_file
            };
            let expected = expected_index(&scan.entries);
            let index_len = file_len(&index_file, &index_path).await?;
            let matches = index_len == expected.len() as u64
                && (expected.is_empty()
                    || read_vec(&index_file, &index_path, 0, expected.len()).await? == expected);
            if !matches {
                tracing::warn!(
                    "{}: rebuilding the index from the log ({index_len} bytes found, {} expected)",
                    index_path.display(),
                    expected.len(),
                );
                if !expected.is_empty() {
                    write_all(&mut index_file, &index_path, expected, 0).await;
                }
                set_len(
                    &index_file,
                    &index_path,
                    (scan.entries.len() * index_entry::SIZE) as u64,
                )
                .await;
                if !is_active {
                    // A closed segment's files are closed now and never fsynced later.
                    sync_data(&index_file, &index_path, Synced::Index).await;
                }
            }
            size_bytes += scan.valid_len;
            segments.push(Segment {
                start_offset,
                end_offset: scan.end_offset,
                log_path,
                index_path,
                log_size: scan.valid_len,
                entries: scan.entries,
            });
            if is_active {
                active_files = Some(ActiveFiles {
                    log: log_file,
                    index: index_file,
                    unsynced: scan.failure.is_some() || !matches,
                    records_unsynced: scan.failure.is_some(),
                    writeback: Writeback {
                        started_to: scan.valid_len,
                        ..Writeback::default()
                    },
                });
            } else {
                // The newest closed segments stay open, the likeliest to be read first.
                closed.keep(start_offset, log_file);
            }
        }
        let mut log = PartitionLog {
            dir: dir.to_path_buf(),
            config,
            segments,
            files: OpenFiles {
                active: active_files.expect("the last segment is the active one"),
                closed,
            },
            size_bytes,
        };
        log.maybe_roll().await;
        Ok(log)
    }

    /// The offset the next appended message gets (0 when the log was never written).
    pub fn next_offset(&self) -> u64 {
        self.active().end_offset
    }

    /// The first retained offset (equal to [`Self::next_offset`] when the log is empty).
    /// How many batch records start at or after `offset`.
    pub fn batches_from(&self, offset: u64) -> usize {
        self.segments
            .iter()
            .filter(|segment| segment.end_offset > offset)
            .map(|segment| {
                segment
                    .entries
                    .iter()
                    .filter(|entry| entry.offset >= offset)
                    .count()
            })
            .sum()
    }

    pub fn first_offset(&self) -> u64 {
        self.segments[0].start_offset
    }

    /// The partition directory the log lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The newest server timestamp the log holds (its newest batch's), 0 when it holds none.
    pub fn newest_timestamp(&self) -> u64 {
        let mut segments = self.segments.iter().rev();
        segments
            .find(|segment| !segment.entries.is_empty())
            .map_or(0, Segment::max_timestamp)
    }

    /// Bytes of all `.log` files (the `.index` files are not counted).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn segments_count(&self) -> u32 {
        self.segments.len() as u32
    }

    pub fn messages_count(&self) -> u64 {
        self.segments.iter().map(Segment::messages).sum()
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a log always has an active segment")
    }

    /// Whether the active segment's `.log` still is the file this log writes, at least as long
    /// as what it wrote there: one removed or cut short behind the node's back (an operator, a
    /// cleanup script) would have the node acknowledge, serve and replicate what it no longer
    /// holds, and lose it at its next start. `Err` names the file and what happened to it.
    /// An fstat(2) of the open descriptor: no I/O.
    pub fn check_active_file(&self) -> Result<(), StorageError> {
        use std::os::unix::fs::MetadataExt;
        let segment = self.active();
        let path = &segment.log_path;
        let metadata =
            descriptor_metadata(&self.files.active.log).map_err(|e| io_error(path, e))?;
        if metadata.nlink() == 0 {
            // The open descriptor still holds every byte: written back to the path, they are
            // what the next start recovers (a single node has no peer to catch up from). The
            // index beside it too when it went the same way (the start rebuilds a missing or
            // short one from the log).
            let written_back = write_back_removed(&self.files.active.log, path, segment.log_size);
            if let Ok(index) = descriptor_metadata(&self.files.active.index)
                && index.nlink() == 0
                && written_back.is_ok()
            {
                let _ =
                    write_back_removed(&self.files.active.index, &segment.index_path, index.len());
            }
            let outcome = match written_back {
                Ok(()) => format!(
                    "its {} bytes were written back to it from the open file, for the restart",
                    segment.log_size
                ),
                Err(error) => format!("writing its bytes back from the open file failed: {error}"),
            };
            return Err(io_error(
                path,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "the file was removed behind the node's back (the node still held it \
                         open); {outcome}"
                    ),
                ),
            ));
        }
        if metadata.len() < segment.log_size {
            return Err(corrupt(
                path,
                format!(
                    "the file was cut to {} bytes behind the node's back (the node wrote {})",
                    metadata.len(),
                    segment.log_size
                ),
            ));
        }
        Ok(())
    }

    /// Creates the segment starting at `start_offset` as the active one, and returns the files
    /// of the one it replaces. See [`new_segment`].
    async fn create_segment(&mut self, start_offset: u64) -> ActiveFiles {
        let (segment, files) = new_segment(&self.dir, start_offset).await;
        self.segments.push(segment);
        std::mem::replace(&mut self.files.active, files)
    }

    /// Rolls to a new segment when the active one holds records and reached `segment_size`.
    /// The full segment's files are fsynced first: a machine crash must not leave a later
    /// segment behind a torn one (recovery truncates only the last segment, and refuses a log
    /// with a damaged earlier one), and a closed segment is never fsynced again. Two fsyncs
    /// per `segment_size` cost little.
    async fn maybe_roll(&mut self) {
        let active = self.active();
        if !active.entries.is_empty() && active.log_size >= self.config.segment_size {
            let (closing, start) = (active.start_offset, active.end_offset);
            self.sync().await;
            let full = self.create_segment(start).await;
            // Its index is closed; its log stays open among the closed ones, the likeliest to
            // be read next (by a consumer just behind the newest messages).
            self.files.closed.keep(closing, full.log);
        }
    }

    /// Appends one stamped record whose `base_offset` is [`Self::next_offset`]. Buffered (page
    /// cache); [`Self::sync`] makes it durable.
    pub async fn append(&mut self, record: Vec<u8>) -> Result<(), StorageError> {
        let record = Bytes::from(record);
        let count = batch::validate_layout(&record)?;
        let header = record[..layout::batch::HEADER_SIZE]
            .try_into()
            .expect("a validated record holds a whole header");
        self.append_with_header(header, &record, count).await
    }

    /// Appends `batch` as the producer sent it with the server-owned fields stamped: the
    /// partition id, `base_offset` (which must be [`Self::next_offset`]) and the base timestamp.
    /// The frames are written from `batch` itself; only the 256-byte header is rebuilt.
    pub async fn append_batch(
        &mut self,
        batch: &batch::ValidBatch,
        partition_id: u64,
        base_offset: u64,
        base_timestamp: u64,
    ) -> Result<(), StorageError> {
        let header =
            batch::stamped_header(batch.bytes(), partition_id, base_offset, base_timestamp);
        self.append_with_header(header, batch.bytes(), batch.count())
            .await
    }

    /// Appends `record` (whose layout holds `count` messages) with `header` in place of its
    /// own: one vectored write of header and frames to the active `.log`, one 24-byte entry to
    /// its `.index`, then a roll if the segment is full.
    async fn append_with_header(
        &mut self,
        header: [u8; layout::batch::HEADER_SIZE],
        record: &Bytes,
        count: u32,
    ) -> Result<(), StorageError> {
        if count == 0 {
            return Err(StorageError::InvalidBatch("batch holds no messages"));
        }
        let length = record.len() as u64;
        let offset = read_u64(&header, layout::batch::BASE_OFFSET);
        if offset != self.next_offset() {
            return Err(StorageError::InvalidBatch(
                "base_offset is not the log's next offset",
            ));
        }
        let timestamp = read_u64(&header, layout::batch::BASE_TIMESTAMP);
        let active = self
            .segments
            .last_mut()
            .expect("a log always has an active segment");
        let files = &mut self.files.active;
        let entry = BatchEntry {
            offset,
            timestamp,
            position: active.log_size,
            length,
            count,
            max_timestamp: active.max_timestamp().max(timestamp),
        };
        files.unsynced = true;
        files.records_unsynced = true;
        let index_position = active.index_size();
        let frames = record.slice(layout::batch::HEADER_SIZE..);
        // Until the record and its index entry are written: on a hung disk the in-place writes
        // block this thread in the kernel, and only the stall detector sees it.
        let _watch = watch(Op::Write, Synced::Segment, files.log.as_raw_fd());
        if record.len() <= SMALL_WRITE_MAX {
            // A small record goes to the page cache at once: an io_uring buffered write is
            // punted to a kernel worker, whose round trip costs more than the copy itself.
            crate::small_write::write_all_vectored_at(
                &files.log,
                &[&header, &frames],
                entry.position,
            )
            .or_stop("write", &active.log_path);
            crate::small_write::write_all_at(&files.index, &index_bytes(&entry), index_position)
                .or_stop("write", &active.index_path);
        } else {
            // A large record goes through io_uring; its 24-byte index entry is copied in place,
            // not punted to a kernel worker of its own.
            let mut log = &files.log;
            log.write_vectored_all_at([Bytes::copy_from_slice(&header), frames], entry.position)
                .await
                .0
                .or_stop("write", &active.log_path);
            crate::small_write::write_all_at(&files.index, &index_bytes(&entry), index_position)
                .or_stop("write", &active.index_path);
        }
        active.entries.push(entry);
        active.log_size += length;
        active.end_offset += u64::from(count);
        self.size_bytes += length;
        self.start_writeback();
        self.maybe_roll().await;
        Ok(())
    }

    /// Starts the writeback of the active `.log`'s bytes appended since the last start once
    /// there are `writeback_bytes` of them, on a blocking thread (the call may wait for the
    /// device's queue) and without waiting for it: it only starts writing pages already dirty,
    /// durability is still the fsyncs' (a failed start is logged; the pages stay dirty).
    fn start_writeback(&mut self) {
        let every = self.config.writeback_bytes;
        let active = self
            .segments
            .last()
            .expect("a log always has an active segment");
        let writeback = &mut self.files.active.writeback;
        // Whole pages only: the last one is still being appended to, and written back now it
        // would be written again.
        let to = active.log_size & !(WRITEBACK_ALIGN - 1);
        let from = writeback.started_to;
        let pending = to.saturating_sub(from);
        if every == 0 || pending < every || writeback.in_flight.load(Ordering::Acquire) {
            return;
        }
        writeback.started_to = to;
        writeback.in_flight.store(true, Ordering::Release);
        let in_flight = writeback.in_flight.clone();
        let path = active.log_path.clone();
        // A descriptor of its own for the other thread (the file handle is this thread's).
        let file = match self.files.active.log.as_fd().try_clone_to_owned() {
            Ok(file) => file,
            Err(error) => {
                in_flight.store(false, Ordering::Release);
                tracing::warn!("{}: no writeback started: {error}", path.display());
                return;
            }
        };
        compio::runtime::spawn_blocking(move || {
            let _watch = watch(Op::Writeback, Synced::Segment, file.as_raw_fd());
            // SAFETY: `file` owns the open descriptor; the call reads no memory of ours.
            let started = unsafe {
                libc::sync_file_range(
                    file.as_raw_fd(),
                    from as libc::off64_t,
                    pending as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            in_flight.store(false, Ordering::Release);
            match started {
                0 => {
                    WRITEBACKS_STARTED.fetch_add(1, Ordering::Relaxed);
                }
                _ => tracing::warn!(
                    "{}: starting the writeback of {pending} bytes at {from} failed: {}",
                    path.display(),
                    io::Error::last_os_error()
                ),
            }
        })
        .detach();
    }

    /// Fsyncs the active segment's files if written since the last sync (a segment is fsynced
    /// whole as it closes). The directory needs none here: it is fsynced whenever a segment file
    /// is created or removed.
    pub async fn sync(&mut self) {
        self.sync_records().await;
        if self.files.active.unsynced {
            let path = &self.active().index_path;
            sync_data(&self.files.active.index, path, Synced::Index).await;
            self.files.active.unsynced = false;
        }
    }

    /// Fsyncs the active `.log` if written since its last fsync, not the `.index`: enough for
    /// every appended record to survive a machine crash, since recovery rebuilds an index from
    /// its log.
    pub async fn sync_records(&mut self) {
        if self.files.active.records_unsynced {
            let path = &self.active().log_path;
            sync_data(&self.files.active.log, path, Synced::Segment).await;
            self.files.active.records_unsynced = false;
        }
    }

    /// The whole record whose first message is `base_offset`, if the log holds one of `length`
    /// bytes there (a journal's stand-in names a record this way).
    pub async fn record_at(
        &mut self,
        base_offset: u64,
        length: u64,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(segment_index) = self
            .segments
            .iter()
            .rposition(|segment| segment.start_offset <= base_offset)
        else {
            return Ok(None);
        };
        let segment = &self.segments[segment_index];
        let Ok(index) = segment
            .entries
            .binary_search_by_key(&base_offset, |entry| entry.offset)
        else {
            return Ok(None);
        };
        let entry = segment.entries[index];
        if entry.length != length {
            return Ok(None);
        }
        let file = self
            .files
            .readable_log(&self.segments, segment_index)
            .await?;
        let record = read_vec(
            file,
            &segment.log_path,
            entry.position,
            entry.length as usize,
        )
        .await?;
        check_read(&segment.log_path, &record, &[entry])?;
        Ok(Some(record))
    }

    /// Whole stamped records, back to back, from the batch whose base offset is `base_offset`
    /// on, up to `max_bytes` (at least one record, however long), never crossing `end`: what a
    /// replica copies into its own log with [`Self::append`] (state transfer), so no batch is
    /// sliced and both logs stay byte-identical. Empty at or past `end` or the log's end; `None`
    /// when the log holds no batch starting at `base_offset` (retired, or inside a batch).
    pub async fn records_from(
        &mut self,
        base_offset: u64,
        max_bytes: u64,
        end: u64,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let end = end.min(self.next_offset());
        if base_offset >= end {
            return Ok(Some(Vec::new()));
        }
        if base_offset < self.first_offset() {
            return Ok(None);
        }
        let mut segment_index = self
            .segments
            .partition_point(|segment| segment.start_offset <= base_offset)
            - 1;
        let Ok(mut entry_index) = self.segments[segment_index]
            .entries
            .binary_search_by_key(&base_offset, |entry| entry.offset)
        else {
            return Ok(None);
        };
        let mut out = Vec::new();
        while segment_index < self.segments.len() {
            let segment = &self.segments[segment_index];
            let entries = &segment.entries[entry_index..];
            // Records of this segment that fit (always the first of the whole read).
            let mut taken = 0;
            let mut bytes = 0u64;
            for entry in entries {
                let first = out.is_empty() && taken == 0;
                if entry.offset >= end
                    || (!first && out.len() as u64 + bytes + entry.length > max_bytes)
                {
                    break;
                }
                bytes += entry.length;
                taken += 1;
            }
            if taken > 0 {
                let file = self
                    .files
                    .readable_log(&self.segments, segment_index)
                    .await?;
                let at = out.len();
                let (result, read) = read_append(
                    file,
                    &segment.log_path,
                    out,
                    entries[0].position,
                    bytes as usize,
                )
                .await;
                out = read;
                result?;
                check_read(&segment.log_path, &out[at..], &entries[..taken])?;
            }
            if taken < entries.len() {
                break;
            }
            segment_index += 1;
            entry_index = 0;
        }
        Ok(Some(out))
    }

    /// Records covering messages `[start, start + max_messages)`, read from the `.log` files.
    /// A `start` below [`Self::first_offset`] reads from the first retained message. The first
    /// and last batch are sliced when needed by dropping frames and rewriting `message_count`,
    /// `batch_length` and the batch checksum (`base_offset` and the offset deltas are kept, so
    /// `base_offset + offset_delta` still gives each message's offset). Frames are never
    /// re-encoded.
    pub async fn read_from(
        &mut self,
        start: u64,
        max_messages: u32,
    ) -> Result<ReadBatches, StorageError> {
        self.read_from_with_headroom(start, max_messages, 0, usize::MAX)
            .await
    }

    /// [`read_from`](Self::read_from), with `headroom` zero bytes in front of the records in
    /// `ReadBatches::bytes`: room for the reply's headers, so the records are copied only once
    /// on their way to the socket. The records stop before the batch that would take them past
    /// `max_bytes`; a first batch over it alone is cut after the messages that fit (at least
    /// one, whatever its size), so fewer messages than `max_messages` may come back.
    pub async fn read_from_with_headroom(
        &mut self,
        start: u64,
        max_messages: u32,
        headroom: usize,
        max_bytes: usize,
    ) -> Result<ReadBatches, StorageError> {
        let mut out = vec![0u8; headroom];
        let start = start.max(self.first_offset());
        if max_messages == 0 || start >= self.next_offset() {
            return Ok(ReadBatches {
                bytes: out,
                messages: 0,
                last_offset: None,
            });
        }
        let mut remaining = max_messages;
        let mut last_offset = start;
        // (position in `out`, frames present, frames wanted) of the last batch copied.
        let mut last_batch: Option<(usize, u32, u32)> = None;
        let mut sliced_first: Option<usize> = None;
        let mut segment_index = self
            .segments
            .partition_point(|segment| segment.start_offset <= start)
            - 1;
        let mut first = true;
        let mut full = false;
        while remaining > 0 && segment_index < self.segments.len() && !full {
            let segment = &self.segments[segment_index];
            // Every segment visited is read from (a closed one is never empty).
            let file = self
                .files
                .readable_log(&self.segments, segment_index)
                .await?;
            segment_index += 1;
            let entries = &segment.entries;
            let mut from = 0;
            if first {
                first = false;
                from = entries.partition_point(|entry| entry.offset <= start) - 1;
                let entry = entries[from];
                let skip = (start - entry.offset) as u32;
                if skip > 0 {
                    let record = read_vec(
                        file,
                        &segment.log_path,
                        entry.position,
                        entry.length as usize,
                    )
                    .await?;
                    check_read(&segment.log_path, &record, &[entry])?;
                    let cut = frame_boundary(&record, skip);
                    let at = out.len();
                    out.reserve(layout::batch::HEADER_SIZE + record.len() - cut);
                    out.extend_from_slice(&record[..layout::batch::HEADER_SIZE]);
                    out.extend_from_slice(&record[cut..]);
                    let present = entry.count - skip;
                    write_u32(&mut out[at..], layout::batch::MESSAGE_COUNT, present);
                    let sliced_length = (out.len() - at) as u64;
                    write_u64(&mut out[at..], layout::batch::BATCH_LENGTH, sliced_length);
                    let take = present.min(remaining);
                    remaining -= take;
                    last_offset = start + u64::from(take) - 1;
                    last_batch = Some((at, present, take));
                    sliced_first = Some(at);
                    from += 1;
                }
            }
            let mut to = from;
            let mut bytes = 0usize;
            while to < entries.len() && remaining > 0 {
                let entry = &entries[to];
                let records = out.len() - headroom + bytes;
                if records > 0 && records.saturating_add(entry.length as usize) > max_bytes {
                    full = true;
                    break;
                }
                let take = entry.count.min(remaining);
                last_batch = Some((out.len() + bytes, entry.count, take));
                bytes += entry.length as usize;
                remaining -= take;
                last_offset = entry.offset + u64::from(take) - 1;
                to += 1;
            }
            if to > from {
                let at = out.len();
                let (result, bytes_read) =
                    read_append(file, &segment.log_path, out, entries[from].position, bytes).await;
                out = bytes_read;
                result?;
                check_read(&segment.log_path, &out[at..], &entries[from..to])?;
            }
        }
        // The first batch is taken whatever its size: one over `max_bytes` alone (a client that
        // reads at most that many bytes, a QUIC reply buffer) is cut after the messages that
        // fit, at least one, and served in parts over several polls. Only then are its frames
        // walked: whatever was read within the bound needs no cut.
        if let Some((at, present, take)) = last_batch
            && take > 1
            && out.len() - headroom > max_bytes
        {
            let fit = frames_within(&out[at..], take, max_bytes);
            remaining += take - fit;
            last_offset -= u64::from(take - fit);
            last_batch = Some((at, present, fit));
        }
        if let Some((at, present, take)) = last_batch {
            if take < present {
                let cut = frame_boundary(&out[at..], take);
                out.truncate(at + cut);
                rewrite_sliced_header(&mut out[at..], take);
            }
            if let Some(first_at) = sliced_first
                && (first_at != at || take == present)
            {
                let end =
                    first_at + read_u64(&out[first_at..], layout::batch::BATCH_LENGTH) as usize;
                let count = read_u32(&out[first_at..], layout::batch::MESSAGE_COUNT);
                rewrite_sliced_header(&mut out[first_at..end], count);
            }
        }
        Ok(ReadBatches {
            bytes: out,
            messages: max_messages - remaining,
            last_offset: Some(last_offset),
        })
    }

    /// The first offset whose batch `base_timestamp` is at or after `timestamp_us`, if any
    /// (the batch's base offset; every message of a batch carries its base timestamp).
    pub fn offset_at_timestamp(&self, timestamp_us: u64) -> Option<u64> {
        let segment = self.segments.iter().find(|segment| {
            !segment.entries.is_empty() && segment.max_timestamp() >= timestamp_us
        })?;
        let index = segment
            .entries
            .partition_point(|entry| entry.max_timestamp < timestamp_us);
        Some(segment.entries[index].offset)
    }

    /// Drops every message at or above `offset`: truncates the segment holding it (slicing its
    /// batch in place when `offset` falls inside one) and removes every later segment. An
    /// `offset` below [`Self::first_offset`] empties the log, which then restarts at `offset`.
    /// Buffered; call [`Self::sync`] to make it durable.
    pub async fn truncate_from(&mut self, offset: u64) -> Result<(), StorageError> {
        if offset >= self.next_offset() {
            return Ok(());
        }
        if offset < self.first_offset() {
            while !self.segments.is_empty() {
                self.remove_segment(self.segments.len() - 1).await;
            }
            // The removed active segment's files close as the new one's replace them.
            self.create_segment(offset).await;
            return Ok(());
        }
        let keep = self
            .segments
            .partition_point(|segment| segment.start_offset <= offset);
        if keep < self.segments.len() {
            // The closed segment holding `offset` is written again: it becomes the active one,
            // opened before anything is removed (a failed open changes nothing).
            let reopened = &self.segments[keep - 1];
            self.files.closed.close(reopened.start_offset);
            self.files.active = ActiveFiles::open(reopened).await?;
            while self.segments.len() > keep {
                self.remove_segment(self.segments.len() - 1).await;
            }
        }
        let segment = self
            .segments
            .last_mut()
            .expect("offset lies in a retained segment");
        let files = &mut self.files.active;
        let index = segment
            .entries
            .partition_point(|entry| entry.offset < offset);
        // Entries from `index` on start at or after `offset`; the one before may straddle it.
        let mut new_size = segment
            .entries
            .get(index)
            .map_or(segment.log_size, |entry| entry.position);
        segment.entries.truncate(index);
        if let Some(entry) = segment.entries.last_mut()
            && entry.offset + u64::from(entry.count) > offset
        {
            let keep_frames = (offset - entry.offset) as u32;
            let mut record = read_vec(
                &files.log,
                &segment.log_path,
                entry.position,
                entry.length as usize,
            )
            .await?;
            let cut = frame_boundary(&record, keep_frames);
            record.truncate(cut);
            rewrite_sliced_header(&mut record, keep_frames);
            record.truncate(layout::batch::HEADER_SIZE);
            write_all(&mut files.log, &segment.log_path, record, entry.position).await;
            entry.count = keep_frames;
            entry.length = cut as u64;
            new_size = entry.position + entry.length;
        }
        set_len(&files.log, &segment.log_path, new_size).await;
        set_len(&files.index, &segment.index_path, segment.index_size()).await;
        self.size_bytes -= segment.log_size - new_size;
        segment.log_size = new_size;
        files.writeback.started_to = files.writeback.started_to.min(new_size);
        segment.end_offset = offset;
        files.unsynced = true;
        files.records_unsynced = true;
        self.maybe_roll().await;
        Ok(())
    }

    /// Discards every record and restarts the log empty at `offset`, at or past its end: a
    /// replica copying a peer's log (state transfer) from the peer's first retained offset,
    /// because committed retirements removed everything this log holds, and more, from the
    /// peer. The new segment starts where the peer's does, so the copy rolls at the same
    /// offsets and stays byte-identical. Durable when it returns.
    ///
    /// Every crash leaves a log [`Self::open`] takes: the older segments go oldest first (each
    /// step a retirement), then the last one is renamed to start at `offset` and emptied; its
    /// records, still there after a crash between the two, do not start at its new name, and
    /// recovery drops them as a torn tail (an index left under the old name goes as one without
    /// a log).
    pub async fn restart_at(&mut self, offset: u64) {
        assert!(
            offset >= self.next_offset(),
            "a log restarts only past its end"
        );
        self.retain_from(offset).await;
        while self.segments.len() > 1 {
            self.remove_segment(0).await;
        }
        let (log_path, index_path) = segment_paths(&self.dir, offset);
        let segment = self
            .segments
            .last_mut()
            .expect("a log always has an active segment");
        let files = &mut self.files.active;
        if segment.start_offset != offset {
            for (from, to) in [
                (&segment.log_path, &log_path),
                (&segment.index_path, &index_path),
            ] {
                let _watch = watch_path(Op::Rename, Synced::Segment, to);
                compio::fs::rename(from, to).await.or_stop("rename to", to);
            }
            crate::fail_stop::sync_dir_async(&self.dir).await;
            segment.log_path = log_path;
            segment.index_path = index_path;
        }
        set_len(&files.log, &segment.log_path, 0).await;
        set_len(&files.index, &segment.index_path, 0).await;
        sync_data(&files.log, &segment.log_path, Synced::Segment).await;
        sync_data(&files.index, &segment.index_path, Synced::Index).await;
        self.size_bytes -= segment.log_size;
        segment.start_offset = offset;
        segment.end_offset = offset;
        segment.log_size = 0;
        files.writeback.started_to = 0;
        segment.entries.clear();
        files.unsynced = false;
        files.records_unsynced = false;
    }

    /// Records, durably and before the oldest segments go, that the log is retained from
    /// `offset` ([`RETAINED_FROM`]): a crash in between leaves files below it, which a later
    /// retirement removes, never a log that looks cut.
    async fn retain_from(&self, offset: u64) {
        crate::records::write_checked_u64(&self.dir.join(RETAINED_FROM), offset).await;
    }

    /// Closes a segment's files and removes them, then fsyncs the directory (segments go
    /// rarely, and a removal undone by a machine crash would bring back messages a committed
    /// deletion retired). The active segment's files stay open until the caller replaces them.
    async fn remove_segment(&mut self, index: usize) {
        let segment = self.segments.remove(index);
        self.size_bytes -= segment.log_size;
        self.files.closed.close(segment.start_offset);
        remove_file(&segment.log_path).await;
        remove_file(&segment.index_path).await;
        crate::fail_stop::sync_dir_async(&self.dir).await;
    }

    /// Deletes the oldest `count` closed segments (never the active one); returns how many
    /// were deleted.
    pub async fn delete_oldest_segments(&mut self, count: u32) -> u32 {
        self.delete_oldest_segments_through(count, u64::MAX).await
    }

    /// Deletes up to `count` of the oldest closed segments, stopping at the first one that
    /// holds a message above `keep_after` (the lowest offset a consumer has committed: later
    /// messages are still to be read). Returns how many were deleted.
    pub async fn delete_oldest_segments_through(&mut self, count: u32, keep_after: u64) -> u32 {
        let keep_from = self.retire_point(count, keep_after);
        self.retire_below(keep_from).await
    }

    /// The offset from which a deletion of up to `count` of the oldest closed segments keeps
    /// the log, stopping at the first segment holding a message above `keep_after`: the start
    /// of the first segment kept. [`Self::retire_below`] that offset performs the deletion.
    pub fn retire_point(&self, count: u32, keep_after: u64) -> u64 {
        let mut kept = 0;
        while kept < count as usize
            && kept + 1 < self.segments.len()
            && self.segments[kept].end_offset.saturating_sub(1) <= keep_after
        {
            kept += 1;
        }
        self.segments[kept].start_offset
    }

    /// Deletes every closed segment whose messages all lie below `keep_from`. Idempotent: a
    /// second call (a journal replay of the same op) deletes nothing more. Returns how many
    /// segments were deleted.
    pub async fn retire_below(&mut self, keep_from: u64) -> u32 {
        let mut retired = 0;
        while retired + 1 < self.segments.len() && self.segments[retired].end_offset <= keep_from {
            retired += 1;
        }
        if retired > 0 {
            self.retain_from(self.segments[retired].start_offset).await;
        }
        for _ in 0..retired {
            self.remove_segment(0).await;
        }
        retired as u32
    }

    /// Where retention as of `now_us` keeps the log from: past the oldest closed segments whose
    /// newest message is older than `now_us - message_expiry_us`, then past the oldest closed
    /// segments while the closed ones hold more than `max_size` bytes (the active segment, which
    /// stays whatever its size, does not count: counted, it would delete closed segments that
    /// fit), keeping the newest closed segment whatever its size, as the official client
    /// documents a maximum below one sealed segment (a segment closes past its size by its last
    /// batch, so a maximum of one segment's size kept none). Always from the oldest segment, so
    /// the retained offsets stay contiguous. `None` when nothing is due.
    /// Pure: the primary decides with its clock, and [`Self::retire_below`] applies the
    /// decision the same way on every replica.
    pub fn retention_point(
        &self,
        now_us: u64,
        message_expiry_us: Option<u64>,
        max_size: Option<u64>,
    ) -> Option<u64> {
        let closed = self.segments.len() - 1;
        let mut retired = 0;
        if let Some(expiry) = message_expiry_us {
            let cutoff = now_us.saturating_sub(expiry);
            while retired < closed && self.segments[retired].max_timestamp() < cutoff {
                retired += 1;
            }
        }
        if let Some(max_size) = max_size {
            let mut size: u64 = self.segments[retired..closed]
                .iter()
                .map(|segment| segment.log_size)
                .sum();
            while retired + 1 < closed && size > max_size {
                size -= self.segments[retired].log_size;
                retired += 1;
            }
        }
        (retired > 0).then(|| self.segments[retired - 1].end_offset)
    }
}

/// What [`check`] found in one partition's segments, reading only.
#[derive(Debug, Default)]
pub struct LogCheck {
    pub findings: Vec<Finding>,
    /// `(base_offset, length)` of every batch recovery keeps, oldest first.
    pub batches: Vec<(u64, u64)>,
    /// The offset of the oldest retained message (0 for a log never written).
    pub first_offset: u64,
    /// The offset after the newest message recovery keeps.
    pub next_offset: u64,
}

impl LogCheck {
    /// Whether the log holds the batch record at `base_offset` of `length` bytes.
    pub fn holds(&self, base_offset: u64, length: u64) -> bool {
        self.batches
            .binary_search_by_key(&base_offset, |(offset, _)| *offset)
            .is_ok_and(|at| self.batches[at].1 == length)
    }
}

/// Runs the recovery walk of [`PartitionLog::open`] over the segments in `dir` without
/// changing a byte: every file is opened read-only. A torn tail of the last segment (a record
/// running past the end of the file) is what open cuts after a crash, reported as a warning;
/// a whole record that fails verification, a record in the middle of the log, and a gap between
/// segments are errors (open refuses the partition, or drops acknowledged messages). An
/// `.index` that differs from its `.log` is a warning: open rebuilds it from the log.
pub async fn check(dir: &Path) -> Result<LogCheck, StorageError> {
    let (log_starts, index_starts) = list_segments(dir)?;
    let mut found = LogCheck {
        first_offset: log_starts.first().copied().unwrap_or(0),
        ..LogCheck::default()
    };
    let retained_path = dir.join(RETAINED_FROM);
    match crate::records::read_checked_u64(&retained_path).await {
        Ok(retained_from) => {
            if let Some(lost) = oldest_segments_lost(retained_from, log_starts.first().copied()) {
                let message = format!(
                    "{lost}; a standalone node refuses the partition (a cluster node serves \
                     what is left, its peers hold the rest)"
                );
                found
                    .findings
                    .push(Finding::error(&retained_path, None, message));
            }
        }
        Err(error) => {
            let message = format!("{error}; a standalone node refuses the partition");
            found
                .findings
                .push(Finding::error(&retained_path, None, message));
        }
    }
    for start in index_starts {
        if log_starts.binary_search(&start).is_err() {
            let (_, index_path) = segment_paths(dir, start);
            let message = "an index without a log (removed at start)";
            found
                .findings
                .push(Finding::warning(&index_path, None, message));
        }
    }
    let last = log_starts.len().saturating_sub(1);
    let mut previous_end = None;
    for (number, start_offset) in log_starts.into_iter().enumerate() {
        let (log_path, index_path) = segment_paths(dir, start_offset);
        // After a segment whose walk failed, where it should have ended is unknown.
        if let Some(end) = previous_end
            && end != start_offset
        {
            let message = format!(
                "segment starts at offset {start_offset} but the previous one ends at {end}; \
                 recovery refuses the partition"
            );
            found
                .findings
                .push(Finding::error(&log_path, None, message));
        }
        let log_file = open_read_only(&log_path).await?;
        let (scan, log_len) = scan_segment(&log_file, &log_path, start_offset).await?;
        if let Some((position, reason)) = &scan.failure {
            let finding = if number != last {
                let message = format!("corrupt record: {reason}; recovery refuses the partition");
                Finding::error(&log_path, Some(*position), message)
            } else if scan.torn {
                let message = format!(
                    "torn tail ({} bytes): {reason}; recovery cuts it (an append a crash \
                     interrupted)",
                    log_len - position
                );
                Finding::warning(&log_path, Some(*position), message)
            } else {
                let message = format!(
                    "corrupt record: {reason}; recovery would cut the log here ({} bytes, \
                     acknowledged messages among them)",
                    log_len - position
                );
                Finding::error(&log_path, Some(*position), message)
            };
            found.findings.push(finding);
        }
        let expected = expected_index(&scan.entries);
        let index = match compio::fs::read(&index_path).await {
            Ok(index) => index,
            Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(io_error(&index_path, error)),
        };
        // An index is only compared with a log that verified: open rebuilds it either way.
        if scan.failure.is_none() && index != expected {
            let differs_at = index
                .iter()
                .zip(&expected)
                .position(|(stored, walked)| stored != walked)
                .unwrap_or(index.len().min(expected.len()));
            let message = format!(
                "differs from its log from byte {differs_at} ({} bytes, {} expected); \
                 rebuilt from the log at start",
                index.len(),
                expected.len()
            );
            found.findings.push(Finding::warning(
                &index_path,
                Some(differs_at as u64),
                message,
            ));
        }
        found.batches.extend(
            scan.entries
                .iter()
                .map(|entry| (entry.offset, entry.length)),
        );
        found.next_offset = scan.end_offset;
        previous_end = scan.failure.is_none().then_some(scan.end_offset);
    }
    Ok(found)
}
