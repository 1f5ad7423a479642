//! The write-ahead journal of one consensus group: a file of `[PrepareHeader][body]` records
//! (the generated 256-byte `PrepareHeader`), one per prepared op, in op order.
//!
//! Recovery reads the valid prefix: the first record that is torn, fails its checksum or breaks
//! the op sequence ends the journal, and the file is cut there (logged), so a crash in the
//! middle of an append loses only the unacknowledged tail.

use crate::group::Journal;
use bytes::Bytes;
use compio::fs::{File, OpenOptions};
use compio::io::AsyncWriteAtExt;
use iggy_generated::frames::{Command, Operation, PrepareHeader};
use iggy_vsr::Entry;
use std::path::Path;

const HEADER_SIZE: usize = PrepareHeader::SIZE;

/// A group's journal file, open for appends.
pub struct FileJournal {
    file: File,
    /// The op before the first record: the checkpoint the journal continues from.
    base: u64,
    /// File position of each op's record: `positions[op - base - 1]`.
    positions: Vec<u64>,
    len: u64,
}

fn encode_header(entry: &Entry) -> Option<[u8; HEADER_SIZE]> {
    let mut header = PrepareHeader::default();
    header.checksum = u128::from(entry.checksum);
    header.size = u32::try_from(HEADER_SIZE + entry.body.len()).ok()?;
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
fn decode_record(bytes: &Bytes, op: Option<u64>) -> Result<(Entry, usize), &'static str> {
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
    if header.checksum >> 64 != 0 || !entry.is_valid() {
        return Err("checksum mismatch");
    }
    Ok((entry, size))
}

impl FileJournal {
    /// Opens (or creates) the journal at `path` and returns it with its valid entries above
    /// `checkpoint` (ops at or below it are covered by a checkpoint: a crash between writing the
    /// checkpoint and emptying the journal leaves them behind, and they are skipped).
    pub async fn open(path: &Path, checkpoint: u64) -> std::io::Result<(FileJournal, Vec<Entry>)> {
        let bytes = match compio::fs::read(path).await {
            Ok(bytes) => Bytes::from(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Bytes::new(),
            Err(error) => return Err(error),
        };
        let mut entries = Vec::new();
        let mut positions = Vec::new();
        let mut position = 0usize;
        let mut first_op = None;
        while position < bytes.len() {
            let expected = first_op.map(|first: u64| first + entries.len() as u64);
            match decode_record(&bytes.slice(position..), expected) {
                Ok((entry, size)) => {
                    first_op.get_or_insert(entry.op);
                    positions.push(position as u64);
                    entries.push(entry);
                    position += size;
                }
                Err(why) => {
                    tracing::warn!(
                        "journal {}: dropping {} bytes from position {position}: {why}",
                        path.display(),
                        bytes.len() - position
                    );
                    break;
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .read(true)
            .open(path)
            .await?;
        let first_op = first_op.unwrap_or(checkpoint + 1);
        if first_op > checkpoint + 1 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "journal {} starts at op {first_op}, after its checkpoint at op {checkpoint}: ops are missing",
                    path.display()
                ),
            ));
        }
        if position < bytes.len() {
            file.set_len(position as u64).await?;
            file.sync_all().await?;
        }
        let skipped = (checkpoint + 1 - first_op) as usize;
        let kept = entries.split_off(skipped.min(entries.len()));
        let journal = FileJournal {
            file,
            base: first_op - 1,
            positions,
            len: position as u64,
        };
        Ok((journal, kept))
    }
}

impl Journal for FileJournal {
    async fn append(&mut self, entry: &Entry) -> std::io::Result<()> {
        let header = encode_header(entry).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "entry not encodable as a prepare",
            )
        })?;
        let position = self.len;
        if entry.body.len() <= iggy_storage::small_write::SMALL_WRITE_MAX {
            // Small records are copied into the page cache in place (see small_write).
            let mut record = Vec::with_capacity(HEADER_SIZE + entry.body.len());
            record.extend_from_slice(&header);
            record.extend_from_slice(&entry.body);
            iggy_storage::small_write::write_all_at(&self.file, &record, position)?;
            self.positions.truncate((entry.op - self.base) as usize - 1);
            self.positions.push(position);
            self.len = position + record.len() as u64;
            return Ok(());
        }
        // Header and body go to the kernel together: two positional writes in flight at once.
        let (mut header_file, mut body_file) = (&self.file, &self.file);
        let body_position = position + HEADER_SIZE as u64;
        let (header_written, body_written) = futures_util::future::join(
            header_file.write_all_at(header.to_vec(), position),
            async {
                if entry.body.is_empty() {
                    return compio::BufResult(Ok(()), entry.body.clone());
                }
                body_file
                    .write_all_at(entry.body.clone(), body_position)
                    .await
            },
        )
        .await;
        header_written.0?;
        body_written.0?;
        self.positions.truncate((entry.op - self.base) as usize - 1);
        self.positions.push(position);
        self.len = position + (HEADER_SIZE + entry.body.len()) as u64;
        Ok(())
    }

    async fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync_data().await
    }

    async fn reset_after_checkpoint(&mut self, op: u64) -> std::io::Result<()> {
        FileJournal::reset_after_checkpoint(self, op).await
    }

    fn len_bytes(&self) -> u64 {
        self.len
    }

    async fn truncate_after(&mut self, op: u64) -> std::io::Result<()> {
        let index = op.saturating_sub(self.base) as usize;
        if let Some(&position) = self.positions.get(index) {
            self.positions.truncate(index);
            self.len = position;
            self.file.set_len(position).await?;
        }
        Ok(())
    }
}

impl FileJournal {
    /// Empties the journal after a checkpoint at `op` made every entry redundant.
    pub async fn reset_after_checkpoint(&mut self, op: u64) -> std::io::Result<()> {
        self.file.set_len(0).await?;
        self.file.sync_all().await?;
        self.base = op;
        self.positions.clear();
        self.len = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (mut journal, entries) = FileJournal::open(&path, 0).await.unwrap();
        assert!(entries.is_empty());
        for op in 1..=3 {
            journal.append(&entry(op, b"hello")).await.unwrap();
        }
        journal.sync().await.unwrap();
        drop(journal);
        let full = std::fs::metadata(&path).unwrap().len();
        // Tear the last record in the middle of its body.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(full - 2)
            .unwrap();
        let (_, entries) = FileJournal::open(&path, 0).await.unwrap();
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
            journal.append(&entry(op, b"x")).await.unwrap();
        }
        drop(journal);
        let (mut journal, entries) = FileJournal::open(&path, 2).await.unwrap();
        assert_eq!(entries, vec![entry(3, b"x"), entry(4, b"x")]);
        journal.reset_after_checkpoint(4).await.unwrap();
        journal.append(&entry(5, b"y")).await.unwrap();
        drop(journal);
        let (_, entries) = FileJournal::open(&path, 4).await.unwrap();
        assert_eq!(entries, vec![entry(5, b"y")]);
        assert!(
            FileJournal::open(&path, 2).await.is_err(),
            "ops 3 and 4 are missing"
        );
    }

    #[compio::test]
    async fn a_flipped_bit_ends_the_journal_at_that_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.wal");
        let (mut journal, _) = FileJournal::open(&path, 0).await.unwrap();
        for op in 1..=3 {
            journal.append(&entry(op, b"abc")).await.unwrap();
        }
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_SIZE + 3 + HEADER_SIZE + 1] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (_, entries) = FileJournal::open(&path, 0).await.unwrap();
        assert_eq!(entries, vec![entry(1, b"abc")]);
    }
}
