//! Positional writes done in place. io_uring punts a buffered file write to a kernel worker
//! thread: a wakeup, two context switches and a completion per write, on top of copying the
//! bytes into the page cache, which is all a buffered write does. Below a megabyte the punt
//! costs more CPU than it saves the shard's thread; larger writes stay on io_uring, so the
//! shard keeps serving while a large record is copied.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// Writes at most this many bytes in place; larger writes go through io_uring. With 64 KiB
/// here, a 3-node cluster's 100 kB batches spent a third of its CPU in io_uring's worker
/// threads. A 1000 × 1000 B batch (1.06 MB) stays on io_uring: copied in place it would hold
/// the shard, and every partition and connection on it, for the whole copy (bench/README.md,
/// 2026-12-04 17:42, measures both).
pub const SMALL_WRITE_MAX: usize = 1024 * 1024;

/// `file`'s descriptor as a std file, for blocking calls on this thread; never closed by it.
pub(crate) fn borrowed_std(file: &compio::fs::File) -> ManuallyDrop<std::fs::File> {
    // SAFETY: the descriptor stays owned by `file`, which outlives the borrow; ManuallyDrop
    // keeps the borrowed std handle from closing it.
    ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(file.as_raw_fd()) })
}

/// Writes all of `bytes` at `position` of `file` with pwrite(2), on this thread.
pub fn write_all_at(file: &compio::fs::File, bytes: &[u8], position: u64) -> io::Result<()> {
    borrowed_std(file).write_all_at(bytes, position)
}

/// Writes `parts` back to back from `position` with one pwritev(2), on this thread: a record
/// assembled from pieces (a new header before received frames) without copying them together.
pub fn write_all_vectored_at(
    file: &compio::fs::File,
    parts: &[&[u8]],
    position: u64,
) -> io::Result<()> {
    let vectors: Vec<libc::iovec> = parts
        .iter()
        .map(|part| libc::iovec {
            iov_base: part.as_ptr() as *mut libc::c_void,
            iov_len: part.len(),
        })
        .collect();
    let total: usize = parts.iter().map(|part| part.len()).sum();
    // SAFETY: every iovec points into a slice borrowed for the duration of the call.
    let written = unsafe {
        libc::pwritev(
            file.as_raw_fd(),
            vectors.as_ptr(),
            vectors.len() as libc::c_int,
            position as libc::off_t,
        )
    };
    let written = usize::try_from(written).map_err(|_| io::Error::last_os_error())?;
    if written == total {
        return Ok(());
    }
    // A short write (rare on a regular file): the rest piece by piece.
    let mut skip = written;
    let mut at = position + written as u64;
    for part in parts {
        let rest = &part[skip.min(part.len())..];
        skip = skip.saturating_sub(part.len());
        write_all_at(file, rest, at)?;
        at += rest.len() as u64;
    }
    Ok(())
}
