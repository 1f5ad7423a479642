//! Small positional writes done in place. io_uring punts a buffered file write to a kernel
//! worker thread; for a few kilobytes that round trip costs far more than copying the bytes
//! into the page cache, which is all a buffered write does. Large writes stay on io_uring.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// Writes at most this many bytes in place; larger writes go through io_uring.
pub const SMALL_WRITE_MAX: usize = 64 * 1024;

/// Writes all of `bytes` at `position` of `file` with pwrite(2), on this thread.
pub fn write_all_at(file: &compio::fs::File, bytes: &[u8], position: u64) -> io::Result<()> {
    // SAFETY: the descriptor stays owned by `file`, which outlives this call; ManuallyDrop
    // keeps the borrowed std handle from closing it.
    let std_file = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(file.as_raw_fd()) });
    std_file.write_all_at(bytes, position)
}
