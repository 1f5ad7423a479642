//! The real partition state machine ([`Partition`]) over a [`SimLog`], driven the way the
//! server's shell drives it (`iggy-server`'s `runtime/partition.rs` and the group's steps in
//! `consensus/group.rs`): a send's batch is stowed in the log as it is journaled, with the
//! 48-byte stand-in in the journal; a journal truncation drops stowed batches again; a restart
//! restores the checkpoint state over the log, reads stowed bodies back from the log (the
//! journal ends at the first it cannot find), and drops log messages no journaled op accounts
//! for. A committed `DeleteSegments` deletes the log's closed segments below its `keep_from`; a
//! restart finds the journaled sends whose batch such a deletion removed by their stand-ins
//! naming offsets below the log's first ([`Partition::retire_if_deleted`]), and their apply
//! only accounts for the offsets they took.
//!
//! Unlike the server's shell, a retirement here deletes only messages of ops the group lets it
//! delete when it applies (`GroupCore::retirable_through`: `checkpoint_safe`, or in a group
//! that checkpoints past laggards also the replica's own checkpoint op;
//! [`Machine::may_retire_through`]): below that, `keep_from` is obeyed; above it, the segments
//! stay. Without a bound a backup lagging behind
//! the retirement asks for prepares whose batches every other replica deleted and never catches
//! up (`SIM_SEED=11` without it). The server bounds the same way where the retirement is
//! planned (`Partition::retirable_below`, applied to retention and DeleteSegments plans), so
//! its committed `keep_from` is obeyed whole; the workload here draws `keep_from` at random,
//! which is why this shell bounds it when it applies.
//!
//! A replica left behind by its group's checkpoints (the node simulation's groups checkpoint
//! past laggards) catches up by state transfer as the server's shell does
//! ([`Machine::transfer`]): its log continues from a peer's committed records, byte for byte,
//! up to the end of the peer's checkpoint state, restarting empty at the peer's first offset
//! when the group retired everything it held, and the state is restored over it.

use crate::log::{CheckedBatch, SimLog, unstamp};
use bytes::Bytes;
use iggy_generated::storage::StowedBatch;
use iggy_partition::{Applied, CheckpointState, Partition, PollRange, StartAt, WriteResult};
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::machine::{self, Journaled, Machine};
use iggy_vsr::{Entry, ReadBack};
use std::collections::VecDeque;

impl iggy_partition::Log for SimLog {
    type Batch = CheckedBatch;

    fn next_offset(&self) -> u64 {
        SimLog::next_offset(self)
    }

    fn first_offset(&self) -> u64 {
        SimLog::first_offset(self)
    }

    fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64> {
        SimLog::offset_at_timestamp(self, timestamp)
    }

    fn check(&self, batch: Bytes) -> Option<(CheckedBatch, u32)> {
        let batch = SimLog::check(batch)?;
        let count = batch.count;
        Some((batch, count))
    }
}

/// What one replica's log and restarts went through.
#[derive(Clone, Copy, Debug, Default)]
pub struct MachineFigures {
    /// Applied segment retirements that deleted a segment, and the segments and messages they
    /// deleted.
    pub retirements: u64,
    /// Applied retirements whose `keep_from` lay past the ops every replica holds: bounded.
    pub retirements_bounded: u64,
    pub segments_retired: u64,
    pub messages_retired: u64,
    /// Sends whose body a restart read back from the log through the journal's stand-in.
    pub stowed_restored: u64,
    /// Journaled sends a restart found below the log's first offset: retired after the op.
    pub stowed_retired: u64,
    /// Restarts whose journal ended early: a stand-in named a batch the crash took.
    pub journals_cut: u64,
    /// Restarts that dropped log messages no journaled op accounted for.
    pub unaccounted_dropped: u64,
    /// State transfers installed, of them those whose log restarted at the peer's first
    /// offset (the group retired every offset this log held), and the batches they copied.
    pub transfers: u64,
    pub transfer_log_restarts: u64,
    pub transfer_batches_copied: u64,
    /// Transfers refused: the peer retired past the offered state's end.
    pub transfers_overtaken: u64,
}

/// One replica's partition: the sans-IO core and its log.
#[derive(Debug)]
pub struct PartitionMachine {
    /// A group of one replays its journal at once; a larger one commits it after rejoining,
    /// so its stowed batches are accounted for until then.
    replica_count: u8,
    /// The metadata op that created the partition (a group deletion before it never applies).
    created_at_op: u64,
    core: Partition,
    log: SimLog,
    /// The latest op applied (or restored from a checkpoint).
    applied_op: u64,
    /// Applied ops not yet known to be held by every replica, with the committed next offset
    /// after each, oldest first.
    next_after_applied: VecDeque<(u64, u64)>,
    /// Every message below this offset belongs to an op every replica holds: a retirement may
    /// delete it without leaving a peer unable to catch up.
    retirable_below: u64,
    figures: MachineFigures,
}

impl PartitionMachine {
    /// An empty partition of a group of `replica_count`.
    pub fn new(replica_count: u8) -> Self {
        PartitionMachine {
            replica_count,
            created_at_op: 0,
            core: Partition::new(0),
            log: SimLog::default(),
            applied_op: 0,
            next_after_applied: VecDeque::new(),
            retirable_below: 0,
            figures: MachineFigures::default(),
        }
    }

    /// The same partition, created by metadata op `op`.
    pub fn created_at_op(mut self, op: u64) -> Self {
        self.created_at_op = op;
        self.core = Partition::new(op);
        self
    }

    /// The partition core.
    pub fn core(&self) -> &Partition {
        &self.core
    }

    /// The offset after the last committed message.
    pub fn committed_next_offset(&self) -> u64 {
        self.core.committed_next_offset(self.log.next_offset())
    }

    /// A poll as a consumer's request does it: the core resolves the range, the log reads it.
    pub fn poll(&self, start: StartAt, count: u32) -> (PollRange, Vec<(u64, Bytes)>) {
        let range = self.core.poll_range(start, count, &self.log);
        let messages = match range.count {
            0 => Vec::new(),
            count => self.log.read(range.start, count),
        };
        (range, messages)
    }

    /// What this replica's log and restarts went through.
    pub fn figures(&self) -> MachineFigures {
        self.figures
    }

    /// The first offset the log holds (below it, segments were retired).
    pub fn first_offset(&self) -> u64 {
        self.log.first_offset()
    }

    /// The log.
    pub fn log(&self) -> &SimLog {
        &self.log
    }

    /// The log, for a test that damages it.
    pub fn log_mut(&mut self) -> &mut SimLog {
        &mut self.log
    }

    /// The op `record` as journaled, its body read back from the log where it was stowed;
    /// `None` when the log does not hold that batch (lost with unsynced writes, or replaced).
    fn unstow(&mut self, record: &Entry) -> Option<Entry> {
        let (entry, stand_in) = self.read_stowed(record)?;
        if self.replica_count > 1 {
            self.core
                .stowed(entry.op, stand_in.base_offset, stand_in.message_count);
        }
        self.figures.stowed_restored += 1;
        Some(entry)
    }
}

impl PartitionMachine {
    /// The entry a stand-in journals, with the batch the log holds at its offsets (the stamped
    /// header fields put back as received); `None` when the log does not hold it whole.
    fn read_stowed(&self, record: &Entry) -> Option<(Entry, StowedBatch)> {
        let stand_in = StowedBatch::decode_fixed(&record.body).ok()?;
        let stored = self.log.record_at(stand_in.base_offset, stand_in.length)?;
        let body = unstamp(
            &stored,
            stand_in.received_partition_id,
            stand_in.received_base_offset,
            stand_in.received_checksum,
        );
        let entry = Entry {
            body,
            ..record.clone()
        };
        entry.is_valid().then_some((entry, stand_in))
    }
}

impl Machine for PartitionMachine {
    fn read_back(&mut self, record: &Journaled) -> ReadBack {
        if !record.stowed {
            return ReadBack::Read(record.entry.clone());
        }
        if let Some((entry, _)) = self.read_stowed(&record.entry) {
            return ReadBack::Read(entry);
        }
        // Retirements delete whole segments from the front: a batch below the first offset
        // the log keeps was retired on purpose, one at or above it is damaged or lost.
        match StowedBatch::decode_fixed(&record.entry.body) {
            Ok(stand_in) if stand_in.base_offset < self.log.first_offset() => ReadBack::Retired,
            _ => ReadBack::Unreadable,
        }
    }

    fn journal(&mut self, entry: &Entry) -> Option<Bytes> {
        let stow = self.core.stow(entry.operation, &entry.body, &self.log)?;
        self.log
            .append(&stow.batch, stow.base_offset, stow.base_timestamp);
        self.core.stowed(entry.op, stow.base_offset, stow.count);
        Some(stow.stand_in)
    }

    fn sync(&mut self) {
        self.log.sync();
    }

    fn may_retire_through(&mut self, op: u64) {
        while let Some(&(applied, next)) = self.next_after_applied.front()
            && applied <= op
        {
            self.retirable_below = next;
            self.next_after_applied.pop_front();
        }
    }

    fn truncate(&mut self, after_op: u64) {
        if let Some(from) = self.core.unstow_after(after_op) {
            self.log.truncate_from(from);
        }
    }

    fn apply(&mut self, op: u64, _client: u128, operation: u8, body: &Bytes) -> machine::Applied {
        // Registers are not applied here, so ops may skip.
        assert!(op > self.applied_op, "ops are applied in order");
        self.applied_op = op;
        let result = match self.core.apply(op, operation, body, &self.log) {
            Applied::Reply(result) => result,
            Applied::Append {
                batch,
                base_offset,
                base_timestamp,
            } => {
                self.log.append(&batch, base_offset, base_timestamp);
                self.core.appended(base_offset, batch.count)
            }
            Applied::Retire { keep_from } => {
                self.figures.retirements_bounded += u64::from(keep_from > self.retirable_below);
                let retired = self.log.retire_below(keep_from.min(self.retirable_below));
                if retired.segments > 0 {
                    self.figures.retirements += 1;
                    self.figures.segments_retired += retired.segments;
                    self.figures.messages_retired += retired.messages;
                }
                WriteResult::Done
            }
        };
        self.next_after_applied
            .push_back((op, self.committed_next_offset()));
        machine::Applied {
            reply: result.encode(),
            retired: self.core.take_retired(),
        }
    }

    /// As the server: the state now, taken only when it is the state as of `op`, with the log
    /// synced first (the journal being emptied held the only other copy of the sends).
    fn checkpoint(&mut self, op: u64) -> Option<Vec<u8>> {
        if op != self.applied_op {
            return None;
        }
        self.log.sync();
        Some(self.core.encode_state())
    }

    fn crash(&mut self, rng: &mut Rng) {
        self.log.crash(rng);
    }

    fn restart(&mut self, checkpoint: Option<(u64, &[u8])>, records: Vec<Journaled>) -> Vec<Entry> {
        self.core = Partition::new(self.created_at_op);
        self.applied_op = 0;
        self.next_after_applied.clear();
        self.retirable_below = 0;
        if let Some((op, state)) = checkpoint {
            let lost = self
                .core
                .restore(state, self.log.next_offset())
                .expect("a checkpoint state the core wrote");
            // The checkpoint synced the log first, so the log holds every offset it counted.
            assert_eq!(lost, None, "the log lost offsets a checkpoint counted");
            self.applied_op = op;
            // A checkpoint is taken only at an op every replica holds.
            self.retirable_below = self.committed_next_offset();
        }
        let mut entries = Vec::with_capacity(records.len());
        for record in records {
            // A stand-in whose batch lies below the log's first offset was retired, not lost
            // (the partition accounts for its offsets without the body).
            let retired = record.stowed
                && self.core.retire_if_deleted(
                    record.entry.op,
                    &record.entry.body,
                    self.log.first_offset(),
                );
            self.figures.stowed_retired += u64::from(retired);
            let entry = if !record.stowed || retired {
                record.entry
            } else {
                match self.unstow(&record.entry) {
                    Some(entry) => entry,
                    // Written to the log before its journal record and synced with it, so
                    // only unsynced writes lost at the crash (never acknowledged) end here.
                    None => {
                        self.figures.journals_cut += 1;
                        break;
                    }
                }
            };
            entries.push(entry);
        }
        entries
    }

    fn replayed(&mut self) {
        if let Some(from) = self.core.unaccounted_from(self.log.next_offset()) {
            self.figures.unaccounted_dropped += 1;
            self.log.truncate_from(from);
        }
    }

    fn transfers_state(&self) -> bool {
        self.replica_count > 1
    }

    /// As the server's shell (`runtime/partition.rs`, `transfer_begin`, `_restart_at`,
    /// `_append`, `_install`, driven by `consensus/transfer.rs`'s `Fetch`): stowed batches of
    /// ops never committed go, the log is cut to its committed end, then continues from the
    /// peer's committed records up to the state's end; when the peer no longer holds the
    /// offset the log continues from, the log restarts empty at the peer's first offset, or,
    /// when that lies past the state's end, the transfer is refused (`Overtaken`: a newer
    /// checkpoint is needed); a log that continues from the state's end copies nothing. The
    /// state is restored over the log once it is durable.
    fn transfer(&mut self, op: u64, state: &[u8], source: &Self) -> Result<(), String> {
        let until = CheckpointState::decode(state)?.next_offset;
        assert!(
            until <= source.committed_next_offset(),
            "a peer's checkpoint counts only offsets it committed"
        );
        // The server's rule (a retirement applied before a restart keeps its deletion).
        let from = self.core.transfer_continues_from(
            self.log.first_offset(),
            self.log.next_offset(),
            until,
        )?;
        let mut next = from;
        // A log that continues from the state's end needs nothing from the peer's.
        let restart = next < until && source.log.records_from(next, until).is_none();
        if restart {
            let held_from = source.log.first_offset();
            assert!(
                held_from > next,
                "the peer holds offset {next} yet no committed batch of its starts there"
            );
            if held_from > until {
                self.figures.transfers_overtaken += 1;
                return Err(format!(
                    "the peer holds offsets from {held_from} on, past the state's end {until} \
                     (this log ends at {next})"
                ));
            }
            next = held_from;
        }
        // Batches stowed for ops this replica never committed: the peer's log decides them.
        let _ = self.core.unstow_after(0);
        self.log.truncate_from(from);
        // The server's probe (`Fetch::begin`): what the peer retired below where this log
        // starts, by ops the checkpoint carries and this replica never applies, goes here too.
        let held_from = source.log.first_offset();
        if !restart && self.log.first_offset() < held_from && held_from <= self.log.next_offset() {
            self.log.retire_below(held_from);
        }
        if restart {
            self.log.restart_at(next);
            self.figures.transfer_log_restarts += 1;
        }
        let records = match next < until {
            true => source
                .log
                .records_from(next, until)
                .expect("held, checked above"),
            false => Vec::new(),
        };
        for record in records {
            self.log
                .append_record(record)
                .expect("a peer's record continues the log");
            self.figures.transfer_batches_copied += 1;
        }
        assert_eq!(
            self.log.next_offset(),
            until,
            "the copy reaches the state's end"
        );
        // Made durable before the journal that accounted for the old log is gone.
        self.log.sync();
        self.core = Partition::new(self.created_at_op);
        let lost = self.core.restore(state, self.log.next_offset())?;
        assert_eq!(lost, None, "the copy holds every offset the state counts");
        self.applied_op = op;
        self.next_after_applied.clear();
        // The group checkpointed at `op`, so a retirement may delete what the state counts.
        self.retirable_below = self.committed_next_offset();
        self.figures.transfers += 1;
        Ok(())
    }
}

/// Whether `reply` says a send appended `count` messages, and where.
pub fn appended(reply: &Bytes) -> Option<(u64, u32)> {
    match WriteResult::decode(reply) {
        WriteResult::Appended { base_offset, count } => Some((base_offset, count)),
        _ => None,
    }
}
