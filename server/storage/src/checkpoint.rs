//! A consensus group's checkpoint file, kept in two alternating slots.
//!
//! A slot is `checkpoint.0` or `checkpoint.1` in the group's directory, holding the spec's
//! `CheckpointSlot` (spec/storage.spec): the replica's checkpoint, the state machine's, then the
//! XxHash3-64 of every byte before it (the replica's and the state machine's bytes are opaque
//! here).
//!
//! **Writing.** Each checkpoint overwrites, in place, the slot that does not hold the newest
//! valid checkpoint, then fsyncs it (the directory too, the first time a slot file is written
//! by this process). A crash or a damaged write hits only that slot; the other still holds the
//! previous checkpoint.
//!
//! **Loading.** Both slots are read (and `checkpoint`, the single file earlier builds wrote,
//! read only). The valid one with the highest op is used; a damaged one (a crash in the middle
//! of its write tears it) is logged as a warning naming the file. When no file is valid the
//! group starts from op 0, as before its first checkpoint.
//!
//! **The fallback rule.** A group empties its journal after each durable checkpoint and then
//! overwrites it from the start, so when the newest slot is damaged the older checkpoint (or,
//! with no valid slot, op 0) is usable only while the journal still holds every op after it.
//! That is the case after a crash during (or just after) the checkpoint write, before new ops
//! overwrote the journal. The caller opens the journal from the op loaded, and a journal that
//! starts after that op is refused ("ops are missing"), naming the damaged slots: never a
//! silent gap.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

use compio::io::AsyncWriteAtExt;

use iggy_generated::storage::CheckpointSlot;
use iggy_wire::{WireDecode, WireEncode};

use crate::StorageError;
use crate::fail_stop::{OrStop, Synced, sync_dir_async};
use crate::stall::{Op, watch, watch_path};
use std::os::fd::AsRawFd;

/// The two slot files, in a group's directory.
pub const SLOT_FILE_NAMES: [&str; 2] = ["checkpoint.0", "checkpoint.1"];
/// The single checkpoint file of earlier builds, read at start and never written.
pub const EARLIER_FILE_NAME: &str = "checkpoint";

/// The bytes of a slot holding `replica` and `state`.
pub fn encode(replica: &[u8], state: &[u8]) -> Vec<u8> {
    let mut slot = CheckpointSlot {
        replica,
        state,
        checksum: 0,
    };
    // The checksum covers every byte before it: encode once to learn them, then for good.
    let bytes = slot.to_wire_bytes();
    slot.checksum = checksum(&bytes[..bytes.len() - CHECKSUM_SIZE]);
    slot.to_wire_bytes()
}

/// The size of the trailing checksum, which covers every byte before it.
const CHECKSUM_SIZE: usize = 8;

fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = twox_hash::XxHash3_64::new();
    hasher.write(bytes);
    hasher.finish()
}

/// The replica's and the state machine's bytes of a slot, or why the slot is damaged.
pub fn decode(bytes: &[u8]) -> Result<(&[u8], &[u8]), &'static str> {
    let covered = bytes.len().checked_sub(CHECKSUM_SIZE).ok_or("truncated")?;
    let slot = CheckpointSlot::decode_exact(bytes).map_err(|_| "truncated or malformed")?;
    if checksum(&bytes[..covered]) != slot.checksum {
        return Err("checksum mismatch");
    }
    Ok((slot.replica, slot.state))
}

/// Where the next checkpoint of a group goes.
#[derive(Debug)]
pub struct CheckpointSlots {
    dir: PathBuf,
    next: usize,
    /// Whether the directory was fsynced after this process first wrote each slot file.
    dir_synced: [bool; 2],
}

impl CheckpointSlots {
    /// Slots in `dir`; the first checkpoint goes to the slot other than `loaded` (the slot the
    /// group started from, which holds its newest valid checkpoint).
    pub fn new(dir: &Path, loaded: Option<usize>) -> CheckpointSlots {
        CheckpointSlots {
            dir: dir.to_path_buf(),
            next: loaded.map_or(0, |slot| 1 - slot),
            dir_synced: [false; 2],
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a checkpoint into the next slot, durably (a failed write or fsync stops the
    /// process), and returns the slot's path.
    pub async fn write(&mut self, replica: &[u8], state: &[u8]) -> PathBuf {
        let slot = self.next;
        let path = self.dir.join(SLOT_FILE_NAMES[slot]);
        let bytes = encode(replica, state);
        let length = bytes.len() as u64;
        let watched = watch_path(Op::Open, Synced::Checkpoint, &path);
        let mut file = compio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .open(&path)
            .await
            .or_stop("open", &path);
        drop(watched);
        let watched = watch(Op::Write, Synced::Checkpoint, file.as_raw_fd());
        let compio::BufResult(written, _) = file.write_all_at(bytes, 0).await;
        written.or_stop("write", &path);
        file.set_len(length).await.or_stop("truncate", &path);
        drop(watched);
        let watched = watch(Op::Fsync, Synced::Checkpoint, file.as_raw_fd());
        file.sync_all().await.or_stop("fsync", &path);
        crate::fail_stop::count_fsync(Synced::Checkpoint);
        drop(watched);
        if !self.dir_synced[slot] {
            sync_dir_async(&self.dir).await;
            self.dir_synced[slot] = true;
        }
        self.next = 1 - slot;
        path
    }
}

/// The newest valid checkpoint of a group.
#[derive(Debug)]
pub struct Loaded<T> {
    /// The replica's checkpoint, as the caller decoded it.
    pub replica: T,
    pub state: Vec<u8>,
    pub op: u64,
    pub path: PathBuf,
}

/// What a group starts from: [`load`]'s answer.
#[derive(Debug)]
pub struct Start<T> {
    /// The valid checkpoint with the highest op; `None`: start from op 0.
    pub checkpoint: Option<Loaded<T>>,
    /// Checkpoint files found damaged, with why: when there is one, the start may be older than
    /// the newest checkpoint written (see the module's fallback rule).
    pub damaged: Vec<(PathBuf, String)>,
    /// Where the group's next checkpoints go.
    pub slots: CheckpointSlots,
}

impl<T> Start<T> {
    /// The op the group's journal must continue from.
    pub fn op(&self) -> u64 {
        self.checkpoint.as_ref().map_or(0, |loaded| loaded.op)
    }
}

/// Reads the checkpoint files in `dir`. `decode_replica` decodes the replica's bytes and
/// returns the checkpoint's op. An error is a file that cannot be read.
pub async fn load<T>(
    dir: &Path,
    decode_replica: impl Fn(&[u8]) -> Result<(T, u64), String>,
) -> Result<Start<T>, StorageError> {
    let candidates = [
        (Some(0), SLOT_FILE_NAMES[0]),
        (Some(1), SLOT_FILE_NAMES[1]),
        (None, EARLIER_FILE_NAME),
    ];
    let mut best: Option<(Option<usize>, Loaded<T>)> = None;
    let mut damaged = Vec::new();
    for (slot, name) in candidates {
        let path = dir.join(name);
        let bytes = match compio::fs::read(&path).await {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(StorageError::Io { path, error }),
        };
        let decoded = decode(&bytes)
            .map_err(str::to_string)
            .and_then(|(replica, state)| Ok((decode_replica(replica)?, state.to_vec())));
        let ((replica, op), state) = match decoded {
            Ok(decoded) => decoded,
            Err(why) => {
                tracing::warn!("checkpoint {}: damaged ({why}); not used", path.display());
                damaged.push((path, why));
                continue;
            }
        };
        if best.as_ref().is_none_or(|(_, loaded)| op > loaded.op) {
            let loaded = Loaded {
                replica,
                state,
                op,
                path,
            };
            best = Some((slot, loaded));
        }
    }
    let (slot, checkpoint) = match best {
        Some((slot, loaded)) => (slot, Some(loaded)),
        None => (None, None),
    };
    Ok(Start {
        checkpoint,
        damaged,
        slots: CheckpointSlots::new(dir, slot),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_the_layout_earlier_builds_wrote_so_their_checkpoints_still_read() {
        // `[u32 length][replica][u32 length][state][u64 XxHash3-64 of every byte before]`.
        let mut expected = vec![2, 0, 0, 0, b'a', b'b', 1, 0, 0, 0, b'c'];
        let sum = twox_hash::XxHash3_64::oneshot(&expected);
        expected.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(encode(b"ab", b"c"), expected);
        assert_eq!(decode(&expected), Ok((&b"ab"[..], &b"c"[..])));
        let mut flipped = expected.clone();
        flipped[4] ^= 1;
        assert_eq!(decode(&flipped), Err("checksum mismatch"));
        assert!(decode(&expected[..expected.len() - 1]).is_err());
    }

    fn block_on(test: impl Future<Output = ()>) {
        compio::runtime::Runtime::new().unwrap().block_on(test);
    }

    /// The replica bytes of these tests are just the op.
    fn decode_op(bytes: &[u8]) -> Result<(u64, u64), String> {
        let op = u64::from_le_bytes(bytes.try_into().map_err(|_| "not an op".to_string())?);
        Ok((op, op))
    }

    async fn load_ops(dir: &Path) -> Start<u64> {
        load(dir, decode_op).await.unwrap()
    }

    fn flip_a_bit(path: &Path) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[5] ^= 1;
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn checkpoints_alternate_and_the_newest_valid_one_is_loaded() {
        block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut start = load_ops(dir.path()).await;
            assert!(start.checkpoint.is_none() && start.damaged.is_empty());
            let first = start.slots.write(&5u64.to_le_bytes(), b"five").await;
            let second = start.slots.write(&9u64.to_le_bytes(), b"nine").await;
            assert_ne!(
                first, second,
                "the second checkpoint goes to the other slot"
            );
            let mut start = load_ops(dir.path()).await;
            assert!(start.damaged.is_empty());
            let loaded = start.checkpoint.as_ref().unwrap();
            assert_eq!((loaded.op, loaded.state.as_slice()), (9, &b"nine"[..]));
            // The next checkpoint replaces the older one (op 5), never the one loaded.
            let third = start.slots.write(&12u64.to_le_bytes(), b"twelve").await;
            assert_eq!(third, first);
            assert_eq!(load_ops(dir.path()).await.op(), 12);
        });
    }

    #[test]
    fn a_damaged_newest_slot_falls_back_to_the_older_one_which_is_kept() {
        block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut start = load_ops(dir.path()).await;
            let older = start.slots.write(&5u64.to_le_bytes(), b"five").await;
            let newest = start.slots.write(&9u64.to_le_bytes(), b"nine").await;
            flip_a_bit(&newest);
            let mut start = load_ops(dir.path()).await;
            let loaded = start.checkpoint.as_ref().unwrap();
            assert_eq!((loaded.op, loaded.path.as_path()), (5, older.as_path()));
            assert_eq!(start.damaged.len(), 1);
            assert_eq!(start.damaged[0].0, newest);
            // The next checkpoint overwrites the damaged slot, not the one the start used.
            let next = start.slots.write(&10u64.to_le_bytes(), b"ten").await;
            assert_eq!(next, newest);
            assert_eq!(load_ops(dir.path()).await.op(), 10);
        });
    }

    #[test]
    fn a_torn_slot_write_leaves_the_other_slot_in_use() {
        block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut start = load_ops(dir.path()).await;
            start.slots.write(&5u64.to_le_bytes(), b"five").await;
            let newest = start.slots.write(&9u64.to_le_bytes(), b"nine").await;
            // A longer checkpoint torn halfway over the older slot's bytes.
            let mut start = load_ops(dir.path()).await;
            let torn = start.slots.write(&13u64.to_le_bytes(), &[7; 64]).await;
            let length = std::fs::metadata(&torn).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&torn)
                .unwrap()
                .set_len(length / 2)
                .unwrap();
            let start = load_ops(dir.path()).await;
            let loaded = start.checkpoint.unwrap();
            assert_eq!((loaded.op, loaded.path), (9, newest));
            assert_eq!(start.damaged[0].0, torn);
        });
    }

    /// No valid file: the start goes back to op 0 (a crash tore the first checkpoint), naming
    /// the damaged files for the journal check to refuse with when ops are missing.
    #[test]
    fn with_every_checkpoint_damaged_the_start_is_op_0_naming_them() {
        block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let mut start = load_ops(dir.path()).await;
            let first = start.slots.write(&5u64.to_le_bytes(), b"five").await;
            let second = start.slots.write(&9u64.to_le_bytes(), b"nine").await;
            flip_a_bit(&first);
            flip_a_bit(&second);
            let start = load_ops(dir.path()).await;
            assert!(start.checkpoint.is_none());
            assert_eq!(start.op(), 0);
            let named: Vec<&Path> = start
                .damaged
                .iter()
                .map(|(path, _)| path.as_path())
                .collect();
            assert_eq!(named, vec![first.as_path(), second.as_path()]);
        });
    }

    #[test]
    fn the_file_of_earlier_builds_is_read_and_newer_slots_win() {
        block_on(async {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join(EARLIER_FILE_NAME),
                encode(&3u64.to_le_bytes(), b"three"),
            )
            .unwrap();
            let mut start = load_ops(dir.path()).await;
            assert_eq!(start.op(), 3);
            start.slots.write(&4u64.to_le_bytes(), b"four").await;
            assert_eq!(load_ops(dir.path()).await.op(), 4);
        });
    }
}
