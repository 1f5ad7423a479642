//! The write-ahead journal of one consensus group: a file of `[PrepareHeader][body]` records
//! (the generated 256-byte `PrepareHeader`), one per prepared op, in op order.
//!
//! Recovery reads the valid prefix: the first record that is torn, fails its checksum or breaks
//! the op sequence ends the journal, and the file is cut there (logged), so a crash in the
//! middle of an append loses only the unacknowledged tail.
//!
//! After a checkpoint the journal starts again at position 0 over its old records instead of
//! being truncated: overwriting pages already in the page cache is cheaper than allocating new
//! ones, and an overwrite does not change the file size, so a `fdatasync` has no metadata to
//! write. The old records beyond the new end carry ops at or below the checkpoint, so they end
//! the recovery walk as out of sequence (the file never holds more than one checkpoint's worth
//! of journal plus one record).
//!
//! A failed write, truncation or fsync of the journal stops the process (see
//! `iggy_storage::fail_stop`): an op whose record may not be on disk is never acknowledged, and
//! the group does not go on accepting over a journal it cannot trust.

use crate::consensus::group::Journal;
use bytes::Bytes;
use compio::fs::{File, OpenOptions};
use compio::io::AsyncWriteAtExt;
use iggy_generated::frames::{Command, Operation, PrepareHeader};
use iggy_storage::fail_stop::OrStop;
use iggy_storage::verify::Severity;
use iggy_vsr::Entry;
use std::path::{Path, PathBuf};

const HEADER_SIZE: usize = PrepareHeader::SIZE;

/// A group's journal file, open for appends.
pub struct FileJournal {
    file: File,
    path: PathBuf,
    /// The op before the first record: the checkpoint the journal continues from.
    base: u64,
    /// File position of each op's record: `positions[op - base - 1]`.
    positions: Vec<u64>,
    len: u64,
}

/// One record of a journal as recovered.
#[derive(Debug, PartialEq)]
pub enum JournalEntry {
    /// The op with its body.
    Whole(Entry),
    /// The op whose record holds a stand-in (`entry.body`) for a body the group's state
    /// machine wrote to its own files first (see `StateMachine::stow`); its checksum covers
    /// the real body.
    Stowed(Entry),
}

/// `checksum_body` of a record holding a stand-in: never zero (zero marks a whole body).
fn stand_in_checksum(stand_in: &[u8]) -> u128 {
    (1u128 << 64) | u128::from(twox_hash::XxHash3_64::oneshot(stand_in))
}

fn encode_header(entry: &Entry, stand_in: Option<&Bytes>) -> Option<[u8; HEADER_SIZE]> {
    let mut header = PrepareHeader::default();
    header.checksum = u128::from(entry.checksum);
    let body_len = stand_in.map_or(entry.body.len(), |stand_in| stand_in.len());
    header.size = u32::try_from(HEADER_SIZE + body_len).ok()?;
    header.checksum_body = stand_in.map_or(0, |stand_in| stand_in_checksum(stand_in));
    header.view = entry.view;
    header.command = Command::Prepare;
    header.client = entry.client;
    header.op = entry.op;
    header.request = entry.request;
    header.operation = Operation::from_repr(entry.operation)?;
    Some(header.to_bytes())
}

/// Decodes the record at the start of `bytes` if it is whole and valid and carries `op` (any
/// op for the first record).
fn decode_record(bytes: &Bytes, op: Option<u64>) -> Result<(JournalEntry, usize), &'static str> {
    if bytes.len() < HEADER_SIZE {
        return Err("torn header");
    }
    let header =
        PrepareHeader::decode_fixed(&bytes[..HEADER_SIZE]).map_err(|_| "undecodable header")?;
    if header.command != Command::Prepare {
        return Err("not a prepare record");
    }
    let size = header.size as usize;
    if size < HEADER_SIZE {
        return Err("record size below the header");
    }
    if size > bytes.len() {
        return Err("torn body");
    }
    if op.is_some_and(|op| header.op != op) || header.op == 0 {
        return Err("op out of sequence");
    }
    let entry = Entry {
        op: header.op,
        view: header.view,
        client: header.client,
        request: header.request,
        operation: header.operation.to_repr(),
        body: bytes.slice(HEADER_SIZE..size),
        checksum: header.checksum as u64,
    };
    if header.checksum >> 64 != 0 {
        return Err("checksum mismatch");
    }
    if header.checksum_body != 0 {
        if header.checksum_body != stand_in_checksum(&entry.body) {
            return Err("stand-in checksum mismatch");
        }
        return Ok((JournalEntry::Stowed(entry), size));
    }
    if !entry.is_valid() {
        return Err("checksum mismatch");
    }
    Ok((JournalEntry::Whole(entry), size))
}

/// What a recovery walk found in a journal's bytes.
struct Walk {
    /// The valid records from the start of the file, in op order.
    entries: Vec<JournalEntry>,
    /// File position of each of `entries`.
    positions: Vec<u64>,
    /// Where the valid records end.
    end: usize,
    /// Position and reason of the torn or corrupt record that ended the walk; `None` when it
    /// ended at the end of the file or at the records of an earlier cycle (overwritten by
    /// later appends, see the module note).
    damage: Option<(usize, &'static str)>,
}

/// Walks the valid prefix of a journal whose group checkpointed at `checkpoint`.
fn walk(bytes: &Bytes, checkpoint: u64) -> Walk {
    let mut entries: Vec<JournalEntry> = Vec::new();
    let mut positions = Vec::new();
    let mut position = 0usize;
    let damage = loop {
        if position >= bytes.len() {
            break None;
        }
        let expected = entries
            .first()
            .map(|first| first.entry().op + entries.len() as u64);
        match decode_record(&bytes.slice(position..), expected) {
            Ok((entry, size)) => {
                positions.push(position as u64);
                entries.push(entry);
                position += size;
            }
            Err(_)
                if expected
                    .is_some_and(|expected| stale(bytes, position, expected, checkpoint)) =>
            {
                break None;
            }
            Err(why) => break Some((position, why)),
        }
    };
    Walk {
        entries,
        positions,
        end: position,
        damage,
    }
}

/// Whether a whole record of an earlier cycle (an op the checkpoint covers, below `expected`)
/// starts at `position`.
fn stale(bytes: &Bytes, position: usize, expected: u64, checkpoint: u64) -> bool {
    decode_record(&bytes.slice(position..), None)
        .is_ok_and(|(old, _)| old.entry().op < expected && old.entry().op <= checkpoint)
}

fn gap(first_op: u64, checkpoint: u64) -> String {
    format!("starts at op {first_op}, after its checkpoint at op {checkpoint}: ops are missing")
}

/// The verifier's reading of a journal: the records recovery keeps, and what is wrong.
#[derive(Debug, Default)]
pub struct JournalCheck {
    /// The records above the checkpoint that recovery replays, with their file positions.
    pub entries: Vec<(u64, JournalEntry)>,
    /// `(severity, byte position, message)` of each problem.
    pub problems: Vec<(Severity, Option<u64>, String)>,
}

/// Checks the bytes of a journal whose group checkpointed at `checkpoint`, as
/// [`FileJournal::open`] would recover it but without cutting anything.
///
/// The record that ends the walk is a *torn tail* (a warning: recovery cuts it, and it held no
/// acknowledged op) when it runs past the end of the file, or when it is whole but nothing
/// after it continues the op sequence (an append over an earlier cycle's records that a crash
/// cut short looks like that). It is *corruption* (an error) when a valid record of the same
/// cycle follows it: recovery would drop that acknowledged op and every one after it.
pub fn check(bytes: &Bytes, checkpoint: u64) -> JournalCheck {
    let Walk {
        entries,
        positions,
        damage,
        ..
    } = walk(bytes, checkpoint);
    let mut problems = Vec::new();
    if let Some((at, why)) = damage {
        let expected = entries
            .last()
            .map_or(checkpoint + 1, |last| last.entry().op + 1);
        let left = bytes.len() - at;
        match continuation(bytes, at, expected, checkpoint) {
            Some((next_at, op)) => problems.push((
                Severity::Error,
                Some(at as u64),
                format!(
                    "corrupt record ({why}) in the middle: op {op} follows at byte {next_at}; \
                     recovery would drop op {expected} and every op after it"
                ),
            )),
            None => problems.push((
                Severity::Warning,
                Some(at as u64),
                format!(
                    "torn tail ({left} bytes, {why}): an append a crash cut short; recovery \
                     cuts it"
                ),
            )),
        }
    }
    for (position, record) in positions.iter().zip(&entries) {
        if !header_as_written(bytes, *position as usize, record) {
            problems.push((
                Severity::Error,
                Some(*position),
                format!(
                    "op {}: header bytes outside its checksum differ from what the server \
                     writes (damage recovery does not detect)",
                    record.entry().op
                ),
            ));
        }
    }
    let first_op = entries
        .first()
        .map_or(checkpoint + 1, |entry| entry.entry().op);
    if first_op > checkpoint + 1 {
        problems.push((Severity::Error, Some(0), gap(first_op, checkpoint)));
    }
    let skipped = (checkpoint + 1).saturating_sub(first_op) as usize;
    JournalCheck {
        entries: positions.into_iter().zip(entries).skip(skipped).collect(),
        problems,
    }
}

/// Whether the header at `position` is byte for byte the one `append` writes for `record`:
/// the op's checksum does not cover every header byte.
fn header_as_written(bytes: &Bytes, position: usize, record: &JournalEntry) -> bool {
    let written = match record {
        JournalEntry::Whole(entry) => encode_header(entry, None),
        JournalEntry::Stowed(entry) => encode_header(entry, Some(&entry.body)),
    };
    written.is_some_and(|header| bytes.get(position..position + HEADER_SIZE) == Some(&header[..]))
}

/// The first whole record after the damaged one at `damaged` that belongs to the current
/// cycle (op at or above `expected` and above the checkpoint): its position and op. The
/// damaged record's size is followed when its header holds one that lands on such a record;
/// otherwise every later position is tried.
fn continuation(
    bytes: &Bytes,
    damaged: usize,
    expected: u64,
    checkpoint: u64,
) -> Option<(usize, u64)> {
    let current = |at: usize| {
        decode_record(&bytes.slice(at..), None)
            .ok()
            .map(|(entry, _)| entry.entry().op)
            .filter(|op| *op >= expected && *op > checkpoint)
            .map(|op| (at, op))
    };
    let declared = PrepareHeader::decode_fixed(bytes.get(damaged..damaged + HEADER_SIZE)?)
        .ok()
        .map(|header| damaged + header.size as usize)
        .filter(|next| *next > damaged + HEADER_SIZE && *next < bytes.len());
    if let Some(found) = declared.and_then(current) {
        return Some(found);
    }
    (damaged + 1..=bytes.len().saturating_sub(HEADER_SIZE)).find_map(current)
}

impl JournalEntry {
    pub fn entry(&self) -> &Entry {
        match self {
            JournalEntry::Whole(entry) | JournalEntry::Stowed(entry) => entry,
        }
    }
}

impl FileJournal {
    /// Opens (or creates) the journal at `path` and returns it with its valid entries above
    /// `checkpoint` (ops at or below it are covered by a checkpoint: a crash between writing the
    /// checkpoint and emptying the journal leaves them behind, and they are skipped).
    pub async fn open(
        path: &Path,
        checkpoint: u64,
    ) -> std::io::Result<(FileJournal, Vec<JournalEntry>)> {
        let (bytes, created) = match compio::fs::read(path).await {
            Ok(bytes) => (Bytes::from(bytes), false),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => (Bytes::new(), true),
            Err(error) => return Err(error),
        };
        let Walk {
            mut entries,
            positions,
            end: position,
            damage,
        } = walk(&bytes, checkpoint);
        if let Some((at, why)) = damage {
            tracing::warn!(
                "journal {}: dropping {} bytes from position {at}: {why}",
                path.display(),
                bytes.len() - at
            );
        }
        let damaged = damage.is_some();
        let first_op = entries.first().map(|entry| entry.entry().op);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .read(true)
            .open(path)
            .await
            .or_stop("open", path);
        if created {
            iggy_storage::fail_stop::sync_parent(path);
        }
        let first_op = first_op.unwrap_or(checkpoint + 1);
        if first_op > checkpoint + 1 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("journal {}: {}", path.display(), gap(first_op, checkpoint)),
            ));
        }
        if damaged {
            file.set_len(position as u64)
                .await
                .or_stop("truncate", path);
            file.sync_all().await.or_stop("fsync", path);
        }
        let skipped = (checkpoint + 1 - first_op) as usize;
        let kept = entries.split_off(skipped.min(entries.len()));
        if kept.is_empty() {
            // Every record is covered by the checkpoint: start over at position 0.
            let journal = FileJournal {
                file,
                path: path.to_path_buf(),
                base: checkpoint,
                positions: Vec::new(),
                len: 0,
            };
            return Ok((journal, kept));
        }
        let journal = FileJournal {
            file,
            path: path.to_path_buf(),
            base: first_op - 1,
            positions,
            len: position as u64,
        };
        Ok((journal, kept))
    }
}

impl FileJournal {
    /// [`FileJournal::open`] after the checkpoint a group starts from. When a checkpoint file
    /// was found `damaged`, the one loaded may be older than the newest written, and it is
    /// usable only while the journal still holds every op after it (the fallback rule of
    /// `iggy_storage::checkpoint`): otherwise the start is refused naming the damaged file.
    pub async fn open_after_checkpoint(
        path: &Path,
        checkpoint: u64,
        damaged: &[(PathBuf, String)],
    ) -> std::io::Result<(FileJournal, Vec<JournalEntry>)> {
        let opened = FileJournal::open(path, checkpoint).await;
        if damaged.is_empty() {
            return opened;
        }
        let damaged: Vec<String> = damaged
            .iter()
            .map(|(file, why)| format!("{} ({why})", file.display()))
            .collect();
        match opened {
            Ok(opened) => {
                tracing::warn!(
                    "journal {}: continues from the checkpoint at op {checkpoint}; damaged: {}",
                    path.display(),
                    damaged.join(", ")
                );
                Ok(opened)
            }
            Err(error) => Err(std::io::Error::new(
                error.kind(),
                format!(
                    "{error}; the checkpoint that covered them is damaged: {}",
                    damaged.join(", ")
                ),
            )),
        }
    }
}

impl Journal for FileJournal {
    async fn append(&mut self, entry: &Entry, stand_in: Option<&Bytes>) -> std::io::Result<()> {
        let header = encode_header(entry, stand_in).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "entry not encodable as a prepare",
            )
        })?;
        let position = self.len;
        let body = stand_in.unwrap_or(&entry.body);
        if body.len() <= iggy_storage::small_write::SMALL_WRITE_MAX {
            // Small records are copied into the page cache in place (see small_write).
            iggy_storage::small_write::write_all_vectored_at(
                &self.file,
                &[&header, body],
                position,
            )
            .or_stop("write", &self.path);
        } else {
            // The body is written from the received buffer, behind its header, in one write.
            let mut file = &self.file;
            let parts = [Bytes::copy_from_slice(&header), body.clone()];
            file.write_vectored_all_at(parts, position)
                .await
                .0
                .or_stop("write", &self.path);
        }
        self.positions.truncate((entry.op - self.base) as usize - 1);
        self.positions.push(position);
        self.len = position + (HEADER_SIZE + body.len()) as u64;
        Ok(())
    }

    async fn sync(&mut self) {
        self.file.sync_data().await.or_stop("fsync", &self.path);
    }

    fn reset_after_checkpoint(&mut self, op: u64) {
        FileJournal::reset_after_checkpoint(self, op)
    }

    fn len_bytes(&self) -> u64 {
        self.len
    }

    async fn truncate_after(&mut self, op: u64) {
        let index = op.saturating_sub(self.base) as usize;
        if let Some(&position) = self.positions.get(index) {
            self.positions.truncate(index);
            self.len = position;
            self.file
                .set_len(position)
                .await
                .or_stop("truncate", &self.path);
        }
    }
}

impl FileJournal {
    /// Empties the journal after a checkpoint at `op` made every entry redundant: the next
    /// append overwrites the first record (see the module note).
    pub fn reset_after_checkpoint(&mut self, op: u64) {
        self.base = op;
        self.positions.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replicas_own_operations_are_declared_operations_so_records_carry_them() {
        for operation in [
            iggy_vsr::OPERATION_REGISTER,
            iggy_vsr::OPERATION_NOMINATE_LIMITS,
        ] {
            let entry = Entry::new(1, 0, 0, 0, operation, Bytes::from_static(b"\x10\0\0\0"));
            let header = encode_header(&entry, None).expect("a declared operation");
            let mut record = header.to_vec();
            record.extend_from_slice(&entry.body);
            let (decoded, _) = decode_record(&Bytes::from(record), Some(1)).unwrap();
            assert_eq!(decoded.entry(), &entry);
        }
        assert_eq!(
            Operation::NominateLimits.to_repr(),
            iggy_vsr::OPERATION_NOMINATE_LIMITS
        );
    }

    /// Opens the journal and expects only whole records.
    async fn open_whole(
        path: &Path,
        checkpoint: u64,
    ) -> std::io::Result<(FileJournal, Vec<Entry>)> {
        let (journal, entries) = FileJournal::open(path, checkpoint).await?;
        let whole = entries
            .into_iter()
            .map(|entry| match entry {
                JournalEntry::Whole(entry) => entry,
                JournalEntry::Stowed(entry) => panic!("op {} is stowed", entry.op),
            })
            .collect();
        Ok((journal, whole))
    }

    fn entry(op: u64, body: &'static [u8]) -> Entry {
        Entry::new(
            op,
            0,
            7,
            op,
            Operation::CreateStream.to_repr(),
            Bytes::from_static(body),
        )
    }

    #[compio::test]
    async fn appended_entries_survive_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, entries) = open_whole(&path, 0).await.unwrap();
        assert!(entries.is_empty());
        for op in 1..=3 {
            journal.append(&entry(op, b"hello"), None).await.unwrap();
        }
        journal.sync().await;
        drop(journal);
        let full = std::fs::metadata(&path).unwrap().len();
        // Tear the last record in the middle of its body.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(full - 2)
            .unwrap();
        let (_, entries) = open_whole(&path, 0).await.unwrap();
        assert_eq!(entries, vec![entry(1, b"hello"), entry(2, b"hello")]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * (HEADER_SIZE as u64 + 5)
        );
    }

    #[compio::test]
    async fn ops_covered_by_the_checkpoint_are_skipped_and_a_gap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        for op in 1..=4 {
            journal.append(&entry(op, b"x"), None).await.unwrap();
        }
        drop(journal);
        let (mut journal, entries) = open_whole(&path, 2).await.unwrap();
        assert_eq!(entries, vec![entry(3, b"x"), entry(4, b"x")]);
        journal.reset_after_checkpoint(4);
        journal.append(&entry(5, b"y"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, 4).await.unwrap();
        assert_eq!(entries, vec![entry(5, b"y")]);
        assert!(
            FileJournal::open(&path, 2).await.is_err(),
            "ops 3 and 4 are missing"
        );
    }

    #[compio::test]
    async fn after_a_checkpoint_records_are_overwritten_in_place_and_old_ones_end_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        for op in 1..=5 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        let full = std::fs::metadata(&path).unwrap().len();
        journal.reset_after_checkpoint(5);
        for op in 6..=7 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            full,
            "overwritten, not grown"
        );
        let (mut journal, entries) = open_whole(&path, 5).await.unwrap();
        assert_eq!(entries, vec![entry(6, b"abcd"), entry(7, b"abcd")]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            full,
            "old records are not a damaged tail"
        );
        // Appends continue after op 7, over the old op 3.
        journal.append(&entry(8, b"abcd"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, 5).await.unwrap();
        assert_eq!(entries.last(), Some(&entry(8, b"abcd")));
        assert_eq!(entries.len(), 3);
        // A checkpoint past every record: the journal starts over at position 0.
        let (mut journal, entries) = open_whole(&path, 8).await.unwrap();
        assert!(entries.is_empty());
        journal.append(&entry(9, b"abcd"), None).await.unwrap();
        drop(journal);
        let (_, entries) = open_whole(&path, 8).await.unwrap();
        assert_eq!(entries, vec![entry(9, b"abcd")]);
    }

    #[compio::test]
    async fn a_stowed_record_keeps_the_ops_checksum_and_its_stand_in_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        let stowed = entry(1, b"the body, kept elsewhere");
        let stand_in = Bytes::from_static(b"where");
        journal.append(&stowed, Some(&stand_in)).await.unwrap();
        journal.append(&entry(2, b"whole"), None).await.unwrap();
        drop(journal);
        let written = std::fs::metadata(&path).unwrap().len();
        assert_eq!(
            written,
            2 * HEADER_SIZE as u64 + 5 + 5,
            "the stand-in, not the body"
        );
        let (_, entries) = FileJournal::open(&path, 0).await.unwrap();
        let recovered = Entry {
            body: stand_in,
            ..stowed.clone()
        };
        assert_eq!(
            recovered.checksum, stowed.checksum,
            "the op's checksum is kept"
        );
        assert_eq!(
            entries,
            vec![
                JournalEntry::Stowed(recovered),
                JournalEntry::Whole(entry(2, b"whole"))
            ]
        );
        // A damaged stand-in ends the journal before its op.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_SIZE + 2] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (_, entries) = FileJournal::open(&path, 0).await.unwrap();
        assert!(entries.is_empty());
    }

    /// A group's checkpoint at `op`, written as `maybe_checkpoint` does: into the next slot,
    /// then the journal emptied.
    async fn checkpoint_at(
        slots: &mut iggy_storage::checkpoint::CheckpointSlots,
        journal: &mut FileJournal,
        op: u64,
    ) -> std::path::PathBuf {
        let replica = iggy_vsr::Checkpoint {
            op,
            view: 0,
            checksum: 0,
            clients: Vec::new(),
            clients_max: None,
        };
        let slot = slots.write(&replica.encode(), b"state").await;
        journal.reset_after_checkpoint(op);
        slot
    }

    fn damage(path: &Path) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[3] ^= 1;
        std::fs::write(path, bytes).unwrap();
    }

    /// The start after a damaged newest checkpoint: the older slot is used while the journal
    /// still holds the ops after it (a crash right after the checkpoint write), and refused,
    /// naming the damaged slot, once later ops overwrote them.
    #[compio::test]
    async fn a_damaged_newest_checkpoint_falls_back_only_while_the_journal_covers_the_older_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let mut slots = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap()
            .slots;
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        checkpoint_at(&mut slots, &mut journal, 3).await;
        for op in 4..=6 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        let newest = checkpoint_at(&mut slots, &mut journal, 6).await;
        drop(journal);
        damage(&newest);

        let start = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap();
        assert!(start.checkpoint.is_some(), "the older slot is valid");
        assert_eq!(start.op(), 3, "the start uses the older checkpoint");
        assert_eq!(start.damaged[0].0, newest);
        let (mut journal, entries) =
            FileJournal::open_after_checkpoint(&path, start.op(), &start.damaged)
                .await
                .unwrap();
        let ops: Vec<u64> = entries.iter().map(|entry| entry.entry().op).collect();
        assert_eq!(
            ops,
            vec![4, 5, 6],
            "the journal still holds every op after it"
        );

        // The group went on: checkpoint 6 rewritten, op 7 over the journal's first record.
        let mut slots = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap()
            .slots;
        let rewritten = checkpoint_at(&mut slots, &mut journal, 6).await;
        assert_eq!(rewritten, newest, "the damaged slot is the one rewritten");
        journal.append(&entry(7, b"abcd"), None).await.unwrap();
        drop(journal);
        damage(&rewritten);
        let start = crate::consensus::group::load_checkpoint(dir.path())
            .await
            .unwrap();
        assert_eq!(start.op(), 3);
        let refused = FileJournal::open_after_checkpoint(&path, start.op(), &start.damaged)
            .await
            .err()
            .expect("ops 4 to 6 are gone from the journal");
        let message = refused.to_string();
        assert!(message.contains("ops are missing"), "{message}");
        assert!(message.contains(&newest.display().to_string()), "{message}");
    }

    #[compio::test]
    async fn a_flipped_bit_ends_the_journal_at_that_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abc"), None).await.unwrap();
        }
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_SIZE + 3 + HEADER_SIZE + 1] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (_, entries) = open_whole(&path, 0).await.unwrap();
        assert_eq!(entries, vec![entry(1, b"abc")]);
    }

    /// `check` (the verifier) reads a journal as `open` recovers it, without cutting: a
    /// record running past the end, or a damaged last record, is a torn tail (warning); a
    /// damaged record that live ops follow is corruption (error); an earlier cycle's records
    /// after a checkpoint are no problem; a journal starting after its checkpoint's next op is
    /// an error.
    #[compio::test]
    async fn check_tells_a_torn_tail_from_corruption_in_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        for op in 1..=4 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        let record = HEADER_SIZE + 4;
        let whole = Bytes::from(std::fs::read(&path).unwrap());
        let clean = check(&whole, 0);
        assert!(clean.problems.is_empty(), "{:?}", clean.problems);
        let positions: Vec<u64> = clean.entries.iter().map(|(at, _)| *at).collect();
        assert_eq!(positions, vec![0, 260, 520, 780]);
        assert_eq!(
            check(&whole, 2).entries.len(),
            2,
            "ops above the checkpoint"
        );

        let torn = check(&whole.slice(..whole.len() - 3), 0);
        assert_eq!(torn.entries.len(), 3);
        assert_eq!(torn.problems.len(), 1);
        let (severity, at, message) = &torn.problems[0];
        assert_eq!(
            (*severity, *at),
            (Severity::Warning, Some(3 * record as u64))
        );
        assert!(
            message.starts_with("torn tail (257 bytes, torn body)"),
            "{message}"
        );

        let flipped = |at: usize| {
            let mut bytes = whole.to_vec();
            bytes[at] ^= 1;
            Bytes::from(bytes)
        };
        let last = check(&flipped(3 * record + HEADER_SIZE + 1), 0);
        assert_eq!(last.problems[0].0, Severity::Warning, "{:?}", last.problems);
        // In the body, in the op number, in the size: recovery would stop at op 2.
        let (op_field, size_field) = (PrepareHeader::OP_OFFSET, PrepareHeader::SIZE_OFFSET);
        for at in [
            record + HEADER_SIZE + 1,
            record + op_field,
            record + size_field,
        ] {
            let middle = check(&flipped(at), 0);
            assert_eq!(middle.entries.len(), 1, "byte {at}");
            let (severity, position, message) = &middle.problems[0];
            assert_eq!(
                (*severity, *position),
                (Severity::Error, Some(record as u64)),
                "byte {at}"
            );
            assert!(
                message.contains("in the middle: op 3 follows at byte 520"),
                "{message}"
            );
        }
        // A header byte no checksum covers (the cluster id): recovery replays the op anyway.
        let unchecked = check(&flipped(record + 40), 0);
        assert_eq!(unchecked.entries.len(), 4);
        assert_eq!(unchecked.problems.len(), 1, "{:?}", unchecked.problems);
        let (severity, position, message) = &unchecked.problems[0];
        assert_eq!(
            (*severity, *position),
            (Severity::Error, Some(record as u64))
        );
        assert!(
            message.contains("op 2: header bytes outside its checksum"),
            "{message}"
        );

        // A checkpoint at op 4, then ops 5 and 6 over the old ops 1 and 2: ops 3 and 4 behind
        // them are an earlier cycle, not damage.
        let (mut journal, _) = FileJournal::open(&path, 4).await.unwrap();
        for op in 5..=6 {
            journal.append(&entry(op, b"abcd"), None).await.unwrap();
        }
        drop(journal);
        let cycled = Bytes::from(std::fs::read(&path).unwrap());
        let after = check(&cycled, 4);
        assert!(after.problems.is_empty(), "{:?}", after.problems);
        assert_eq!(after.entries.len(), 2);
        let gap = check(&cycled, 2);
        assert!(
            gap.problems.iter().any(|(severity, at, message)| {
                *severity == Severity::Error
                    && *at == Some(0)
                    && message.contains("ops are missing")
            }),
            "{:?}",
            gap.problems
        );
    }
}
