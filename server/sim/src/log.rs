//! An in-memory partition log with the fault model of segment files behind a page cache:
//! writes (appends, truncations) change what the log holds at once, become durable only at a
//! sync, and a crash keeps the durable image plus an in-order prefix of the writes made since
//! (the cache flushed some of them on its own), as the server's segment files do.
//!
//! The log rolls to a new segment once the active one holds [`SEGMENT_SIZE`] record bytes
//! (the server's `maybe_roll`, at a size small enough that a run fills a dozen segments), and
//! [`SimLog::retire_below`] deletes every closed segment whose messages all lie below
//! `keep_from` (the server's `PartitionLog::retire_below`): never the active one, so the next
//! offset stays, and the first retained offset is a segment's start at or below `keep_from`.
//!
//! A retirement is durable at once and never undone by a crash: the server removes a segment's
//! files and fsyncs the directory before the op's apply returns (`remove_segment`). Here the
//! log syncs the writes before the deletion as well, so a crash keeps them too. That is one of
//! the states a server crash may leave (its page cache may have flushed them), not all: the
//! server may lose an unsynced tail below a deletion it kept, which the sim does not model.

use bytes::Bytes;
use iggy_generated::frames::{BatchHeader, MessageFrameHeader};
use iggy_vsr::message::Fnv;
use iggy_vsr::sim::Rng;

/// A batch checked against the record layout: its frames tile it exactly.
#[derive(Clone, Debug)]
pub struct CheckedBatch {
    pub bytes: Bytes,
    pub count: u32,
}

/// A batch as the log stores it: stamped with its partition, base offset and time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StoredBatch {
    base_offset: u64,
    count: u32,
    base_timestamp: u64,
    record: Bytes,
}

impl StoredBatch {
    fn end(&self) -> u64 {
        self.base_offset + u64::from(self.count)
    }
}

/// Roll to a new segment once the active one holds this many record bytes (a batch of the
/// workload is 300 to 900 bytes, so a segment holds two or three).
pub const SEGMENT_SIZE: usize = 1_200;

/// What the log holds: segments, and batches at dense offsets from the first one's start.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Image {
    /// The start offset of each segment, oldest first; never empty; the last is active. Every
    /// closed segment holds a batch (a segment rolls only once it is full).
    segment_starts: Vec<u64>,
    batches: Vec<StoredBatch>,
}

impl Default for Image {
    fn default() -> Self {
        Image {
            segment_starts: vec![0],
            batches: Vec::new(),
        }
    }
}

/// One write, in the order it was made.
#[derive(Clone, Debug)]
enum LogWrite {
    Append(StoredBatch),
    TruncateFrom(u64),
    RetireBelow(u64),
    /// Every segment goes; the log restarts empty at this offset (a state transfer's).
    RestartAt(u64),
}

impl Image {
    fn first_offset(&self) -> u64 {
        self.segment_starts[0]
    }

    fn next_offset(&self) -> u64 {
        self.batches
            .last()
            .map_or(self.first_offset(), StoredBatch::end)
    }

    fn active_start(&self) -> u64 {
        *self.segment_starts.last().expect("a log has a segment")
    }

    fn perform(&mut self, write: &LogWrite) {
        match write {
            LogWrite::Append(batch) => {
                assert_eq!(batch.base_offset, self.next_offset(), "appends are dense");
                self.batches.push(batch.clone());
                self.maybe_roll();
            }
            LogWrite::TruncateFrom(from) => self.truncate_from(*from),
            LogWrite::RetireBelow(keep_from) => {
                while self.segment_starts.len() > 1 && self.segment_starts[1] <= *keep_from {
                    self.segment_starts.remove(0);
                }
                let first = self.first_offset();
                let retired = self.batches.partition_point(|b| b.base_offset < first);
                self.batches.drain(..retired);
            }
            LogWrite::RestartAt(offset) => {
                self.segment_starts = vec![*offset];
                self.batches.clear();
            }
        }
        assert!(
            self.batches
                .first()
                .is_none_or(|b| b.base_offset == self.first_offset()),
            "the log holds messages from its first segment's start"
        );
    }

    /// The server's `maybe_roll`: a new segment once the active one is full.
    fn maybe_roll(&mut self) {
        let active = self.active_start();
        let active_bytes: usize = self
            .batches
            .iter()
            .rev()
            .take_while(|b| b.base_offset >= active)
            .map(|b| b.record.len())
            .sum();
        if active_bytes >= SEGMENT_SIZE {
            self.segment_starts.push(self.next_offset());
        }
    }

    /// The server's `truncate_from`: later segments go, the one holding `from` is cut, and a
    /// `from` below the first retained offset empties the log, which restarts there.
    fn truncate_from(&mut self, from: u64) {
        if from >= self.next_offset() {
            return;
        }
        if from < self.first_offset() {
            self.segment_starts = vec![from];
            self.batches.clear();
            return;
        }
        let kept_segments = self.segment_starts.partition_point(|start| *start <= from);
        self.segment_starts.truncate(kept_segments);
        let keep = self.batches.partition_point(|b| b.base_offset < from);
        assert!(
            self.batches[..keep].last().is_none_or(|b| b.end() == from),
            "a truncation falls on a batch boundary"
        );
        self.batches.truncate(keep);
        self.maybe_roll();
    }
}

/// What one retirement deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retired {
    pub segments: u64,
    pub messages: u64,
}

/// The partition log of one replica.
#[derive(Debug, Default)]
pub struct SimLog {
    /// What a crash keeps for sure.
    durable: Image,
    /// What the log holds now.
    current: Image,
    /// Writes made since the last sync, in order.
    unsynced: Vec<LogWrite>,
}

/// The partition id the log stamps into every batch.
const PARTITION_ID: u64 = 1;

impl SimLog {
    /// `batch`'s frames checked against the record layout (the spec's 256-byte header whose
    /// `batch_length` is the record size, then `message_count` frames of a 48-byte header,
    /// payload and user headers that fill the rest); `None` when they do not tile it.
    pub fn check(batch: Bytes) -> Option<CheckedBatch> {
        let header = BatchHeader::decode_fixed(batch.get(..BatchHeader::SIZE)?).ok()?;
        if header.batch_length != batch.len() as u64 {
            return None;
        }
        let mut position = BatchHeader::SIZE;
        for _ in 0..header.message_count {
            position = frame_end(&batch, position)?;
        }
        (position == batch.len()).then_some(CheckedBatch {
            bytes: batch,
            count: header.message_count,
        })
    }

    /// The offset after the last message held.
    pub fn next_offset(&self) -> u64 {
        self.current.next_offset()
    }

    /// The first offset held: the start of the oldest segment not retired.
    pub fn first_offset(&self) -> u64 {
        self.current.first_offset()
    }

    /// How many segments the log has (the last is active).
    pub fn segment_count(&self) -> usize {
        self.current.segment_starts.len()
    }

    /// The base offset of the first batch stamped at or after `timestamp`.
    pub fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64> {
        self.current
            .batches
            .iter()
            .find(|batch| batch.base_timestamp >= timestamp)
            .map(|batch| batch.base_offset)
    }

    /// Appends `batch` at `base_offset` (the log's end), stamping the server-owned header
    /// fields as the server's log does.
    pub fn append(&mut self, batch: &CheckedBatch, base_offset: u64, base_timestamp: u64) {
        assert_eq!(
            base_offset,
            self.next_offset(),
            "the core appends at the end"
        );
        let mut record = batch.bytes.to_vec();
        write_u64(&mut record, BatchHeader::PARTITION_ID_OFFSET, PARTITION_ID);
        write_u64(&mut record, BatchHeader::BASE_OFFSET_OFFSET, base_offset);
        write_u64(
            &mut record,
            BatchHeader::BASE_TIMESTAMP_OFFSET,
            base_timestamp,
        );
        write_u64(&mut record, BatchHeader::BATCH_CHECKSUM_OFFSET, 0);
        let checksum = Fnv::oneshot(&record);
        write_u64(&mut record, BatchHeader::BATCH_CHECKSUM_OFFSET, checksum);
        self.write(LogWrite::Append(StoredBatch {
            base_offset,
            count: batch.count,
            base_timestamp,
            record: record.into(),
        }));
    }

    /// Drops every batch from `from` (a batch boundary) on; a `from` below the first offset
    /// empties the log, which restarts at `from`.
    pub fn truncate_from(&mut self, from: u64) {
        self.write(LogWrite::TruncateFrom(from));
    }

    /// Deletes every closed segment whose messages all lie below `keep_from`, durably at once
    /// (see the module doc). Idempotent: a replay deletes nothing more.
    pub fn retire_below(&mut self, keep_from: u64) -> Retired {
        let (segments, first) = (self.segment_count(), self.first_offset());
        self.write(LogWrite::RetireBelow(keep_from));
        self.sync();
        Retired {
            segments: (segments - self.segment_count()) as u64,
            messages: self.first_offset() - first,
        }
    }

    /// The server's `PartitionLog::restart_at`, for a state transfer whose peers retired every
    /// offset this log holds and those up to `offset`: the log is emptied and continues at
    /// `offset` (a segment start of the peer's), durably at once (the server fsyncs it).
    pub fn restart_at(&mut self, offset: u64) {
        assert!(
            offset >= self.next_offset(),
            "a restart drops no offset the log holds past {offset}"
        );
        self.write(LogWrite::RestartAt(offset));
        self.sync();
    }

    /// The stamped records of the batches from `from` (a batch base offset) up to `until`, as
    /// the server serves a state transfer's chunks: whole records, never a sliced batch;
    /// `None` when the log does not hold `from` (retired, or not reached).
    pub fn records_from(&self, from: u64, until: u64) -> Option<Vec<Bytes>> {
        let batches = &self.current.batches;
        let start = batches.partition_point(|b| b.base_offset < from);
        let held = batches.get(start).is_some_and(|b| b.base_offset == from)
            || (from == self.next_offset() && from >= self.first_offset());
        if !held {
            return None;
        }
        let records = batches[start..]
            .iter()
            .take_while(|b| b.base_offset < until)
            .map(|b| b.record.clone())
            .collect();
        Some(records)
    }

    /// Appends a peer's stamped `record` as it is (a state transfer's copy), so the replicas'
    /// segments stay byte-identical; `None` when it is no batch record of the log's end.
    pub fn append_record(&mut self, record: Bytes) -> Option<()> {
        let header = BatchHeader::decode_fixed(record.get(..BatchHeader::SIZE)?).ok()?;
        if header.base_offset != self.next_offset() || header.batch_length != record.len() as u64 {
            return None;
        }
        self.write(LogWrite::Append(StoredBatch {
            base_offset: header.base_offset,
            count: header.message_count,
            base_timestamp: header.base_timestamp,
            record,
        }));
        Some(())
    }

    /// Each batch's base offset and stamped record, below offset `until`.
    pub fn records_below(&self, until: u64) -> Vec<(u64, Bytes)> {
        self.current
            .batches
            .iter()
            .take_while(|b| b.base_offset < until)
            .map(|b| (b.base_offset, b.record.clone()))
            .collect()
    }

    fn write(&mut self, write: LogWrite) {
        self.current.perform(&write);
        self.unsynced.push(write);
    }

    /// The stamped record of the batch at `base_offset` if it is `length` bytes long.
    pub fn record_at(&self, base_offset: u64, length: u64) -> Option<Bytes> {
        let index = self
            .current
            .batches
            .binary_search_by_key(&base_offset, |batch| batch.base_offset)
            .ok()?;
        let record = &self.current.batches[index].record;
        (record.len() as u64 == length).then(|| record.clone())
    }

    /// The messages at offsets `start..start + count` (fewer if the log ends first): each
    /// message's frame as stored (its header, payload and user headers).
    pub fn read(&self, start: u64, count: u32) -> Vec<(u64, Bytes)> {
        let end = start + u64::from(count);
        let first = self.current.batches.partition_point(|b| b.end() <= start);
        let mut messages = Vec::new();
        for batch in &self.current.batches[first..] {
            if batch.base_offset >= end {
                break;
            }
            let mut position = BatchHeader::SIZE;
            for index in 0..batch.count {
                let frame_end = frame_end(&batch.record, position).expect("a checked batch");
                let offset = batch.base_offset + u64::from(index);
                if (start..end).contains(&offset) {
                    messages.push((offset, batch.record.slice(position..frame_end)));
                }
                position = frame_end;
            }
        }
        messages
    }

    /// Makes every write so far durable.
    pub fn sync(&mut self) {
        for write in self.unsynced.drain(..) {
            self.durable.perform(&write);
        }
        debug_assert_eq!(self.durable, self.current);
    }

    /// A crash: the durable image and a seeded in-order prefix of the unsynced writes remain.
    pub fn crash(&mut self, rng: &mut Rng) {
        let kept = rng.below(self.unsynced.len() as u64 + 1) as usize;
        for write in &self.unsynced[..kept] {
            self.durable.perform(write);
        }
        self.unsynced.clear();
        self.current = self.durable.clone();
    }

    /// Deletes the oldest segment, the active one too, whatever retirement asked for (a bug the
    /// checkers must catch).
    pub fn drop_oldest_segment(&mut self) {
        let image = &mut self.current;
        let end = image
            .segment_starts
            .get(1)
            .copied()
            .unwrap_or(image.next_offset());
        image.batches.retain(|b| b.base_offset >= end);
        match image.segment_starts.len() {
            1 => image.segment_starts[0] = end,
            _ => drop(image.segment_starts.remove(0)),
        }
    }

    /// Flips one byte of the stored message at `offset` (a bit rot the checkers must catch).
    pub fn corrupt(&mut self, offset: u64) {
        let index = self.current.batches.partition_point(|b| b.end() <= offset);
        let batch = &mut self.current.batches[index];
        let mut record = batch.record.to_vec();
        let mut position = BatchHeader::SIZE;
        for _ in batch.base_offset..offset {
            position = frame_end(&record, position).expect("a checked batch");
        }
        let last = frame_end(&record, position).expect("a checked batch") - 1;
        record[last] ^= 0x5a;
        batch.record = record.into();
    }
}

/// Where the frame starting at `start` ends; `None` when it overruns `record`.
pub(crate) fn frame_end(record: &[u8], start: usize) -> Option<usize> {
    let header = record.get(start..start + MessageFrameHeader::SIZE)?;
    let header = MessageFrameHeader::decode_fixed(header).ok()?;
    let end = start
        + MessageFrameHeader::SIZE
        + header.payload_length as usize
        + header.user_headers_length as usize;
    (end <= record.len()).then_some(end)
}

fn write_u64(record: &mut [u8], at: usize, value: u64) {
    record[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Puts back the header fields the log stamped, as the stand-in recorded them: the batch as
/// it was journaled.
pub fn unstamp(record: &Bytes, partition_id: u64, base_offset: u64, checksum: u64) -> Bytes {
    let mut record = record.to_vec();
    write_u64(&mut record, BatchHeader::PARTITION_ID_OFFSET, partition_id);
    write_u64(&mut record, BatchHeader::BASE_OFFSET_OFFSET, base_offset);
    write_u64(&mut record, BatchHeader::BATCH_CHECKSUM_OFFSET, checksum);
    record.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(messages: &[&[u8]]) -> CheckedBatch {
        let bytes = crate::workload::encode_batch(7, messages.iter().map(|m| (1, *m)));
        SimLog::check(bytes).expect("a well-formed batch")
    }

    #[test]
    fn unsynced_writes_are_lost_in_order_at_a_crash_and_synced_ones_stay() {
        let mut log = SimLog::default();
        log.append(&batch(&[b"a", b"b"]), 0, 1);
        log.sync();
        log.append(&batch(&[b"c"]), 2, 2);
        log.truncate_from(2);
        log.append(&batch(&[b"d"]), 2, 3);
        assert_eq!(log.next_offset(), 3);
        // Of the three writes since the sync, the seed keeps some prefix: never the truncation
        // without the append before it.
        for seed in 0..20 {
            let mut copy = SimLog {
                durable: log.durable.clone(),
                current: log.current.clone(),
                unsynced: log.unsynced.clone(),
            };
            copy.crash(&mut Rng::new(seed));
            assert!(copy.next_offset() == 2 || copy.next_offset() == 3);
            assert_eq!(copy.read(0, 2).len(), 2, "synced messages survive");
        }
        assert!(SimLog::check(Bytes::from_static(&[0; 10])).is_none());
        let mut torn = batch(&[b"x"]).bytes.to_vec();
        torn.pop();
        assert!(SimLog::check(torn.into()).is_none(), "length differs");
    }

    /// A log of `batches` appends of three messages each, synced.
    fn filled(batches: u64) -> SimLog {
        let mut log = SimLog::default();
        let payload = [7u8; 200];
        for index in 0..batches {
            log.append(&batch(&[&payload, &payload, &payload]), index * 3, index);
        }
        log.sync();
        log
    }

    /// Segments roll as they fill; a retirement deletes only closed segments wholly below
    /// `keep_from`, never the active one, and is idempotent.
    #[test]
    fn a_retirement_deletes_whole_closed_segments_below_keep_from() {
        let mut log = filled(6);
        // 256 + 3 * 248 bytes a batch: a segment rolls after two.
        assert_eq!(log.current.segment_starts, vec![0, 6, 12, 18]);
        assert_eq!(
            log.retire_below(5),
            Retired::default(),
            "no segment lies below 5"
        );
        let retired = log.retire_below(13);
        assert_eq!((retired.segments, retired.messages), (2, 12));
        assert_eq!((log.first_offset(), log.next_offset()), (12, 18));
        assert_eq!(log.read(0, 20).first().map(|(offset, _)| *offset), Some(12));
        assert_eq!(
            log.retire_below(13),
            Retired::default(),
            "a replay deletes nothing"
        );
        let retired = log.retire_below(u64::MAX);
        assert_eq!((retired.segments, retired.messages), (1, 6));
        assert_eq!(log.first_offset(), 18, "the active segment stays");
        assert_eq!(log.next_offset(), 18);
        log.append(&batch(&[b"z"]), 18, 9);
        assert_eq!(log.read(0, 20).len(), 1);
    }

    /// A retirement is never undone by a crash (the server fsyncs the directory), and a
    /// truncation below the first offset empties the log, which restarts there.
    #[test]
    fn a_retirement_survives_a_crash_and_a_truncation_below_it_restarts_the_log() {
        for seed in 0..20 {
            let mut log = filled(4);
            log.append(&batch(&[b"a"]), 12, 9);
            log.append(&batch(&[b"b"]), 13, 10);
            log.retire_below(12);
            log.append(&batch(&[b"c"]), 14, 11);
            log.crash(&mut Rng::new(seed));
            assert_eq!(log.first_offset(), 12, "seed {seed}");
            assert!(
                log.next_offset() >= 14,
                "seed {seed}: synced with the retirement"
            );
        }
        let mut log = filled(4);
        log.append(&batch(&[b"a"]), 12, 9);
        log.retire_below(13);
        assert_eq!(log.first_offset(), 12);
        log.truncate_from(10);
        assert_eq!((log.first_offset(), log.next_offset()), (10, 10));
        log.append(&batch(&[b"d"]), 10, 12);
        assert_eq!(log.read(10, 5).len(), 1);
    }
}
