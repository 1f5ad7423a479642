//! One partition's consensus group, the I/O shell around [`iggy_partition::Partition`]: the
//! core decides what each committed op does (offsets, group deletions, the offsets a send
//! takes, which segments a retirement keeps) from the facts the log reports, and this shell
//! carries it out on the partition's files through [`PartitionLog`]. Writes are journaled and
//! committed through the group's VSR replica; reads are queued behind the writes already
//! accepted, so a poll sees every acknowledged send.

use crate::consensus::group::{
    Checkpointing, Durability, Group, GroupHandle, Journal, Outcome, StateMachine, load_checkpoint,
};
use crate::consensus::wal::{Anchor, FileJournal, JournalEntry, MiddleDamage};
use bytes::Bytes;
use futures_channel::oneshot;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::payloads::SessionIdentity;
use iggy_partition::{
    Applied, NO_OFFSET_HOLD, OffsetOwner, Partition, PartitionWrite, StartAt, WriteResult,
};
use iggy_storage::partition_log::{
    LogConfig, NOT_SERVED_UNTIL_RESTORED, PartitionLog, ReadBatches,
};
use iggy_storage::{StorageError, batch};
use iggy_vsr::group::JournalBound;
use iggy_vsr::{Entry, ReadBack};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Between two sends of a relayed write that found no primary, or whose verdict never came.
const RELAY_REPLAY_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Reads served by the partition's task.
pub enum PartitionRead {
    Messages {
        start: StartAt,
        count: u32,
        /// The reply's records stop before the batch that would take them past this.
        bytes_max: usize,
        done: oneshot::Sender<Result<Polled, ErrorCode>>,
    },
    /// The current offset and `owner`'s stored one (see `iggy_partition::Partition::offset`).
    Offset {
        owner: OffsetOwner,
        owner_created_at_op: u64,
        done: oneshot::Sender<(u64, Option<u64>)>,
    },
    /// Makes the log durable (shutdown).
    Sync { done: oneshot::Sender<()> },
    /// Checks the active segment's file is still the one the log writes, and stops the node
    /// when it was removed or cut short behind its back (`PartitionLog::check_active_file`).
    CheckFiles,
    /// Where the topic's retention limits as of `now` (microseconds) keep the log from, if
    /// anything is due (see `PartitionLog::retention_point`).
    PlanRetention {
        now: u64,
        message_expiry_us: Option<u64>,
        max_size: Option<u64>,
        done: oneshot::Sender<Option<u64>>,
    },
    /// The deletions that remove group offsets no live group owns (see
    /// `iggy_partition::Partition::orphaned_group_offsets`).
    OrphanedGroupOffsets {
        live_groups: std::collections::BTreeMap<u32, u64>,
        metadata_op: u64,
        done: oneshot::Sender<Vec<(u32, u64)>>,
    },
    /// Where a deletion of up to `count` of the oldest segments keeps the log from: segments
    /// holding messages a consumer has not committed yet stay (the consumers and the groups
    /// live in the metadata model as of `metadata_op`, see
    /// `iggy_partition::Partition::retirement_floor`).
    PlanSegmentRetirement {
        count: u32,
        live_groups: std::collections::BTreeMap<u32, u64>,
        metadata_op: u64,
        done: oneshot::Sender<RetirementPlan>,
    },
}

/// A segment deletion's plan: where it would keep the log from, where the group's bound
/// (`Partition::retirable_below`) lets it, at or below that, and the last op applied to the
/// state it was planned from (offsets stored later hold it back when it is applied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetirementPlan {
    pub planned: u64,
    pub keep_from: u64,
    pub planned_at: u64,
}

/// Bytes kept free in front of polled records for the reply header and the poll prefix, so the
/// records travel from the segment to the socket in one buffer.
pub const POLL_REPLY_HEADROOM: usize =
    iggy_generated::frames::ReplyHeader::SIZE + iggy_generated::payloads::PollPrefix::SIZE;

/// Polled records; `batches.bytes` starts with [`POLL_REPLY_HEADROOM`] free bytes.
pub struct Polled {
    pub batches: ReadBatches,
    /// Last offset in the partition (0 when empty).
    pub current_offset: u64,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionInfo {
    pub messages: u64,
    pub size_bytes: u64,
    pub segments: u32,
    pub next_offset: u64,
}

/// A partition's figures as its owning shard publishes them, readable from any shard without a
/// lock (each figure is exact; a reader may see them from two neighbouring moments).
#[derive(Debug, Default)]
pub struct PartitionFigures {
    messages: AtomicU64,
    size_bytes: AtomicU64,
    segments: AtomicU64,
    next_offset: AtomicU64,
    /// Messages and bytes of the sends this process committed (journal replays left out).
    messages_in: AtomicU64,
    bytes_in: AtomicU64,
    /// Messages and record bytes this process served to polls.
    messages_out: AtomicU64,
    bytes_out: AtomicU64,
}

/// Messages and bytes sent to and polled from partitions since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
}

impl std::ops::AddAssign for Traffic {
    fn add_assign(&mut self, other: Traffic) {
        self.messages_in += other.messages_in;
        self.bytes_in += other.bytes_in;
        self.messages_out += other.messages_out;
        self.bytes_out += other.bytes_out;
    }
}

impl PartitionFigures {
    fn set(&self, info: PartitionInfo) {
        self.messages.store(info.messages, Ordering::Relaxed);
        self.size_bytes.store(info.size_bytes, Ordering::Relaxed);
        self.segments
            .store(u64::from(info.segments), Ordering::Relaxed);
        self.next_offset.store(info.next_offset, Ordering::Relaxed);
    }

    /// One committed batch (counted once, whatever its message count).
    fn count_in(&self, messages: u32, bytes: usize) {
        self.messages_in
            .fetch_add(u64::from(messages), Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// One served poll.
    fn count_out(&self, messages: u32, bytes: usize) {
        self.messages_out
            .fetch_add(u64::from(messages), Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn traffic(&self) -> Traffic {
        Traffic {
            messages_in: self.messages_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }

    pub fn get(&self) -> PartitionInfo {
        PartitionInfo {
            messages: self.messages.load(Ordering::Relaxed),
            size_bytes: self.size_bytes.load(Ordering::Relaxed),
            segments: self.segments.load(Ordering::Relaxed) as u32,
            next_offset: self.next_offset.load(Ordering::Relaxed),
        }
    }
}

/// The partition's state machine: the sans-IO core and the log it drives.
pub struct PartitionMachine {
    partition_id: u32,
    /// The partition's figures, published after every change for replies that list them.
    stats: Arc<PartitionFigures>,
    /// The topic's policies: fsync sends / offset stores before acknowledging them.
    persist_messages: bool,
    persist_offsets: bool,
    /// Whether a checkpoint must fsync the segments first (any persisted policy).
    sync_on_checkpoint: bool,
    /// Whether the journal replay is over: replayed sends are not new traffic.
    live: bool,
    /// The metadata op that created this incarnation (a fresh core after a state transfer).
    created_at_op: u64,
    /// What start-up does with log batches the journal does not account for (see
    /// `replayed`): a cluster's peers hold them, a standalone node refuses more than a crash
    /// leaves unless the loss is accepted.
    middle_damage: MiddleDamage,
    log: PartitionLog,
    core: Partition,
    /// The time a batch is stamped with as this replica, primary, prepares it.
    clock: crate::runtime::clock::StampClock,
}

/// The facts the core reads from the log, and its record layout check.
struct LogFacts<'a>(&'a PartitionLog);

impl iggy_partition::Log for LogFacts<'_> {
    type Batch = batch::ValidBatch;

    fn next_offset(&self) -> u64 {
        self.0.next_offset()
    }

    fn first_offset(&self) -> u64 {
        self.0.first_offset()
    }

    fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64> {
        self.0.offset_at_timestamp(timestamp)
    }

    fn check(&self, batch: Bytes) -> Option<(batch::ValidBatch, u32)> {
        let batch = batch::ValidBatch::check(batch).ok()?;
        let count = batch.count();
        Some((batch, count))
    }
}

impl PartitionMachine {
    fn publish(&self) {
        self.stats.set(PartitionInfo {
            messages: self.log.messages_count(),
            size_bytes: self.log.size_bytes(),
            segments: self.log.segments_count(),
            next_offset: self.log.next_offset(),
        });
    }

    /// Restores the checkpoint `state` over the log. A log that ends before the offset the
    /// checkpoint counts lost messages: only a machine crash under the replicated policy, which
    /// does not promise them, loses segment pages a checkpoint counted (the log is then what is
    /// left); where the checkpoint fsynced the segments first, files were cut or removed
    /// behind the node's back, and a standalone node, which has no peer to bring them back,
    /// refuses (unless the loss was accepted with --cut-damaged-journals). Whether the log was
    /// short of it.
    fn restore(&mut self, state: &[u8]) -> Result<bool, Refusal> {
        let next = self.log.next_offset();
        let Some(counted) = self.core.restore(state, next).map_err(Refusal::Invalid)? else {
            return Ok(false);
        };
        let why = match self.middle_damage {
            MiddleDamage::Refuse if self.sync_on_checkpoint => {
                return Err(Refusal::Damaged(format!(
                    "its checkpoint counts messages up to offset {counted}, fsynced before it \
                     was taken, but the log ends at {next}: segment files were cut or removed \
                     (by hand, or a damaged disk); {NOT_SERVED_UNTIL_RESTORED} messages may be \
                     lost, start once with --cut-damaged-journals"
                )));
            }
            MiddleDamage::CutAccepted if self.sync_on_checkpoint => {
                "accepted with --cut-damaged-journals"
            }
            _ => "messages lost with the machine",
        };
        tracing::warn!(
            "partition {}: checkpoint names offset {counted} but the log ends at {next}: {why}",
            self.log.dir().display(),
        );
        Ok(true)
    }

    /// The op `entry` as journaled, its body read back from the log where `stow` put it;
    /// `None` when the log does not hold that batch (lost with the machine, or damaged).
    async fn unstow(&mut self, entry: &Entry) -> Option<Entry> {
        let stand_in = iggy_generated::storage::StowedBatch::decode_fixed(&entry.body).ok()?;
        let mut record = match self
            .log
            .record_at(stand_in.base_offset, stand_in.length)
            .await
        {
            Ok(record) => record?,
            Err(error) => {
                tracing::error!("partition {}: {error}", self.log.dir().display());
                return None;
            }
        };
        batch::unstamp(
            &mut record,
            stand_in.received_partition_id,
            stand_in.received_base_offset,
            stand_in.received_checksum,
        );
        let entry = Entry {
            body: record.into(),
            ..entry.clone()
        };
        entry.is_valid().then_some(entry)
    }

    /// A planned retirement (the offset it keeps the log from) kept to what the group allows
    /// (see `Partition::retirable_below`): a backup catching up by repair still finds the
    /// batches it lacks.
    fn bounded_retirement(&self, planned: u64) -> RetirementPlan {
        RetirementPlan {
            planned,
            keep_from: planned.min(self.core.retirable_below()),
            planned_at: self.core.applied(),
        }
    }

    fn current_offset(&self) -> u64 {
        self.core.current_offset(self.log.next_offset())
    }

    async fn poll(
        &mut self,
        start: StartAt,
        count: u32,
        bytes_max: usize,
    ) -> Result<Polled, ErrorCode> {
        let range = self.core.poll_range(start, count, &LogFacts(&self.log));
        let current_offset = range.current_offset;
        if range.count == 0 {
            let batches = ReadBatches {
                bytes: vec![0; POLL_REPLY_HEADROOM],
                messages: 0,
                last_offset: None,
            };
            return Ok(Polled {
                batches,
                current_offset,
            });
        }
        let batches = self
            .log
            .read_from_with_headroom(range.start, range.count, POLL_REPLY_HEADROOM, bytes_max)
            .await
            .map_err(|error| {
                // A segment that does not hold what the node wrote and indexed (cut short,
                // removed, zeros where batches were) is a storage failure: the next start's
                // recovery drops what it lost (a replica then catches up from its peers),
                // where answering on would fail every poll of it, or serve zeros, for good.
                if let iggy_storage::StorageError::Io { path, error } = &error
                    && matches!(
                        error.kind(),
                        std::io::ErrorKind::InvalidData
                            | std::io::ErrorKind::UnexpectedEof
                            | std::io::ErrorKind::NotFound
                    )
                {
                    iggy_storage::fail_stop::fail_stop("read", path, error);
                }
                tracing::error!(
                    "partition {}: read failed: {error}",
                    self.log.dir().display()
                );
                ErrorCode::CannotReadMessage
            })?;
        Ok(Polled {
            batches,
            current_offset,
        })
    }
}

impl StateMachine for PartitionMachine {
    /// A send's batch takes its `base_timestamp` as it is prepared, so the partition's times
    /// follow its offsets whatever the order its sends arrived in.
    const PREPARE_STAMP: Option<(u8, usize)> = Some((
        iggy_generated::frames::Operation::SendMessages as u8,
        iggy_generated::frames::BatchHeader::BASE_TIMESTAMP_OFFSET,
    ));

    /// Never below the newest batch the log holds (stowed ones too): a node restarted with its
    /// clock set back, or a new primary whose clock is a little behind its predecessor's,
    /// stamped messages before those at lower offsets (a poll by timestamp then skipped them).
    fn stamp_clock(&self) -> u64 {
        self.clock.now_micros().max(self.log.newest_timestamp())
    }

    type Read = PartitionRead;

    /// A stored offset past the log's end is refused where the write is prepared
    /// (`Partition::admits`), whichever node the client reached.
    const JUDGES_ADMISSION: bool = true;

    fn admits(&self, _: u128, operation: u8, body: &[u8], committed: u64) -> Result<(), Bytes> {
        self.core
            .admits(operation, body, committed, self.log.next_offset())
            .map_err(|code| WriteResult::Failed(code).encode())
    }

    async fn apply(&mut self, op: u64, _client: u128, operation: u8, body: Bytes) -> Bytes {
        let applied = self.core.apply(op, operation, &body, &LogFacts(&self.log));
        let result = match applied {
            Applied::Reply(result) => result,
            Applied::Append {
                batch,
                base_offset,
                base_timestamp,
            } => {
                let appended = self
                    .log
                    .append_batch(
                        &batch,
                        u64::from(self.partition_id),
                        base_offset,
                        base_timestamp,
                    )
                    .await;
                match appended {
                    Ok(()) => self.core.appended(base_offset, batch.count()),
                    Err(error) => {
                        tracing::error!(
                            "partition {}: append failed: {error}",
                            self.log.dir().display()
                        );
                        WriteResult::Failed(ErrorCode::CannotAppendMessage)
                    }
                }
            }
            Applied::Retire { keep_from } => {
                let deleted = self.log.retire_below(keep_from).await;
                if deleted > 0 {
                    tracing::info!(
                        "partition {}: deleted {deleted} segments below offset {keep_from}",
                        self.log.dir().display()
                    );
                }
                WriteResult::Done
            }
        };
        // A committed send, counted once per batch; a retry answered from the client table
        // never reaches the apply.
        if let WriteResult::Appended { count, .. } = result
            && self.live
            && operation == Operation::SendMessages.to_repr()
        {
            self.stats.count_in(count, body.len());
        }
        self.publish();
        result.encode()
    }

    fn registered(&mut self, _op: u64, _client: u128, _body: &Bytes) {}

    fn take_retired(&mut self) -> Vec<u128> {
        self.core.take_retired()
    }

    /// A send's batch goes to the log now, where the core placed it, and the journal keeps
    /// the core's stand-in: the batch is written once. Its apply then finds it in the log.
    async fn stow(&mut self, entry: &Entry) -> std::io::Result<Option<Bytes>> {
        let Some(stow) = self
            .core
            .stow(entry.operation, &entry.body, &LogFacts(&self.log))
        else {
            return Ok(None);
        };
        self.log
            .append_batch(
                &stow.batch,
                u64::from(self.partition_id),
                stow.base_offset,
                stow.base_timestamp,
            )
            .await
            .map_err(std::io::Error::other)?;
        self.core.stowed(entry.op, stow.base_offset, stow.count);
        Ok(Some(stow.stand_in))
    }

    async fn sync_stowed(&mut self) -> std::io::Result<()> {
        self.log.sync_records().await;
        Ok(())
    }

    async fn unstow_after(&mut self, op: u64) -> std::io::Result<()> {
        let Some(from) = self.core.unstow_after(op) else {
            return Ok(());
        };
        self.log
            .truncate_from(from)
            .await
            .map_err(std::io::Error::other)
    }

    fn may_retire_through(&mut self, op: u64) {
        self.core.may_retire_through(op);
    }

    async fn read_stowed(&mut self, stand_in: &Entry) -> ReadBack {
        // Retirements delete whole segments from the front: a batch below the first offset the
        // log keeps was retired on purpose, one at or above it that does not read is damaged.
        let retired = iggy_generated::storage::StowedBatch::decode_fixed(&stand_in.body)
            .is_ok_and(|batch| batch.base_offset < self.log.first_offset());
        if retired {
            return ReadBack::Retired;
        }
        self.unstow(stand_in)
            .await
            .map_or(ReadBack::Unreadable, ReadBack::Read)
    }

    fn transfers_state(&self) -> bool {
        true
    }

    /// Only committed records: a stowed batch above them may still be dropped.
    async fn transfer_records(&mut self, offset: u64, max_bytes: u32) -> (u64, Bytes) {
        let end = self.core.committed_next_offset(self.log.next_offset());
        match self
            .log
            .records_from(offset, u64::from(max_bytes), end)
            .await
        {
            Ok(Some(records)) => (offset, records.into()),
            Ok(None) => (self.log.first_offset(), Bytes::new()),
            Err(error) => {
                tracing::error!(
                    "partition {}: transfer read: {error}",
                    self.log.dir().display()
                );
                (offset, Bytes::new())
            }
        }
    }

    async fn transfer_begin(&mut self, state: &[u8]) -> Result<(u64, u64), String> {
        let until = iggy_partition::checkpoint::CheckpointState::decode(state)?.next_offset;
        // Batches stowed for ops this replica never committed: the peer's log decides them.
        let _ = self.core.unstow_after(0);
        let from = self.core.transfer_continues_from(
            self.log.first_offset(),
            self.log.next_offset(),
            until,
        )?;
        self.log
            .truncate_from(from)
            .await
            .map_err(|error| error.to_string())?;
        Ok((self.log.next_offset(), until))
    }

    fn transfer_log_start(&self) -> u64 {
        self.log.first_offset()
    }

    async fn transfer_retire_below(&mut self, offset: u64) -> Result<(), String> {
        let deleted = self.log.retire_below(offset).await;
        tracing::info!(
            "partition {}: deleted {deleted} segments below offset {offset} (retired by the group)",
            self.log.dir().display()
        );
        self.publish();
        Ok(())
    }

    /// The old records are not served meanwhile: a poll reads from the log's first offset up
    /// to the state's committed end, which lies below it until the install.
    async fn transfer_restart_at(&mut self, offset: u64) -> Result<(), String> {
        let next = self.log.next_offset();
        if offset < next {
            return Err(format!(
                "a restart at offset {offset} would drop offsets up to {next} the peers hold"
            ));
        }
        self.log.restart_at(offset).await;
        self.publish();
        Ok(())
    }

    async fn transfer_append(&mut self, records: Bytes) -> Result<u64, String> {
        let mut position = 0;
        while position < records.len() {
            let length = iggy_storage::layout::read_u64(
                &records[position..],
                iggy_storage::layout::batch::BATCH_LENGTH,
            ) as usize;
            let record = records[position..position + length].to_vec();
            self.log
                .append(record)
                .await
                .map_err(|error| error.to_string())?;
            position += length;
        }
        Ok(self.log.next_offset())
    }

    async fn transfer_install(&mut self, op: u64, state: &[u8]) -> Result<(), String> {
        // Made durable before the journal that accounted for the old log is gone for good.
        self.log.sync().await;
        self.core = Partition::new(self.created_at_op);
        // Only a group of more than one transfers state.
        self.core.bound_retirement_by_replicas();
        self.restore(state).map_err(Refusal::into_message)?;
        self.core.restored_at(op);
        self.publish();
        Ok(())
    }

    async fn checkpoint(&mut self) -> std::io::Result<Vec<u8>> {
        // Under the persisted policy the journal being emptied is the fsynced copy: the segments
        // must be durable first. Under the replicated policy acknowledged writes only have to
        // survive a process crash, which the page cache does, so no fsync stalls the partition.
        if self.sync_on_checkpoint {
            self.log.sync().await;
        }
        Ok(self.core.encode_state())
    }

    async fn replayed(&mut self) -> Result<(), String> {
        if let Some(from) = self.core.unaccounted_from(self.log.next_offset()) {
            let next = self.log.next_offset();
            // Each op's batch is appended to the log before its journal record, one op at a
            // time: a crash leaves at most one batch unaccounted. More is journal history lost
            // (a journal or checkpoint gone or cut short), which a standalone node has no peer
            // to bring back.
            let batches = self.log.batches_from(from);
            if self.middle_damage == MiddleDamage::Refuse && batches > 1 {
                return Err(unaccounted(from, next, batches));
            }
            let accepted = match self.middle_damage {
                MiddleDamage::CutAccepted if batches > 1 => {
                    " (accepted with --cut-damaged-journals)"
                }
                _ => "",
            };
            tracing::warn!(
                "partition {}: dropping offsets {from}..{next} that no journaled op accounts \
                 for{accepted}",
                self.partition_id,
            );
            if let Err(error) = self.log.truncate_from(from).await {
                tracing::error!(
                    "partition {}: cannot truncate: {error}",
                    self.log.dir().display()
                );
            }
        }
        self.live = true;
        self.publish();
        Ok(())
    }

    fn persisted(&self, operation: u8) -> bool {
        match Operation::from_repr(operation) {
            Some(Operation::SendMessages) => self.persist_messages,
            Some(
                Operation::StoreConsumerOffset
                | Operation::DeleteConsumerOffset
                | Operation::DeleteConsumerGroup,
            ) => self.persist_offsets,
            _ => false,
        }
    }

    async fn read(&mut self, read: PartitionRead) {
        match read {
            PartitionRead::Messages {
                start,
                count,
                bytes_max,
                done,
            } => {
                let polled = self.poll(start, count, bytes_max).await;
                if let Ok(polled) = &polled {
                    let records = polled.batches.bytes.len() - POLL_REPLY_HEADROOM;
                    self.stats.count_out(polled.batches.messages, records);
                }
                let _ = done.send(polled);
            }
            PartitionRead::Offset {
                owner,
                owner_created_at_op,
                done,
            } => {
                let stored = self.core.offset(owner, owner_created_at_op);
                let _ = done.send((self.current_offset(), stored));
            }
            PartitionRead::PlanRetention {
                now,
                message_expiry_us,
                max_size,
                done,
            } => {
                let planned = self.log.retention_point(now, message_expiry_us, max_size);
                let plan = planned.map(|planned| self.bounded_retirement(planned));
                if let Some(plan) = plan {
                    plan.log_hold(self.partition_id);
                }
                let keep_from = plan.map(|plan| plan.keep_from);
                let due = keep_from.filter(|&keep_from| keep_from > self.log.first_offset());
                let _ = done.send(due);
            }
            PartitionRead::Sync { done } => {
                self.log.sync().await;
                let _ = done.send(());
            }
            PartitionRead::CheckFiles => {
                // The recovery of the next start drops what the file lost (and a replica then
                // catches up from its peers); serving on would hand out zeros for messages and
                // lose at the next start what the node acknowledged.
                if let Err(iggy_storage::StorageError::Io { path, error }) =
                    self.log.check_active_file()
                {
                    iggy_storage::fail_stop::fail_stop("check", &path, &error);
                }
            }
            PartitionRead::OrphanedGroupOffsets {
                live_groups,
                metadata_op,
                done,
            } => {
                let _ = done.send(self.core.orphaned_group_offsets(&live_groups, metadata_op));
            }
            PartitionRead::PlanSegmentRetirement {
                count,
                live_groups,
                metadata_op,
                done,
            } => {
                let holder = self.core.retirement_holder(&live_groups, metadata_op);
                let keep_after = holder.map_or(u64::MAX, |(_, offset)| offset);
                let planned = self.log.retire_point(count, keep_after);
                // The command succeeds either way: say why it deleted less than asked.
                let asked = self.log.retire_point(count, u64::MAX);
                if let Some((owner, offset)) = holder.filter(|_| planned < asked) {
                    tracing::info!(
                        "partition {}: segment deletion keeps the log from offset {planned} \
                         (asked up to {asked}): {} stored offset {offset}, and the messages after \
                         it are not consumed yet",
                        self.partition_id,
                        owner_name(owner),
                    );
                }
                let _ = done.send(self.bounded_retirement(planned));
            }
        }
    }
}

/// An offset's owner as an operator names it.
fn owner_name(owner: iggy_partition::OffsetOwner) -> String {
    use iggy_partition::OffsetOwner;
    match owner {
        OffsetOwner::Consumer(id) => format!("consumer {id}"),
        OffsetOwner::Group(id) => format!("consumer group {id}"),
        OffsetOwner::External(id) => format!("external group {id}"),
    }
}

impl RetirementPlan {
    /// Logs that the bound holds the plan back, if it does.
    pub fn log_hold(&self, partition_id: u32) {
        if self.keep_from < self.planned {
            tracing::info!(
                "partition {partition_id}: retirement held at offset {} (planned up to {}): a replica that can still catch up by repair lacks the later batches",
                self.keep_from,
                self.planned,
            );
        }
    }
}

/// Why a partition's checkpoint was not restored.
#[derive(Debug)]
enum Refusal {
    /// The state does not decode.
    Invalid(String),
    /// The files lost what the checkpoint counted, and the node may not cut it away.
    Damaged(String),
}

impl Refusal {
    fn into_message(self) -> String {
        match self {
            Refusal::Invalid(why) | Refusal::Damaged(why) => why,
        }
    }
}

/// Why a standalone partition whose log holds more than a crash leaves unaccounted for is not
/// served, and what the operator can do.
fn unaccounted(from: u64, next: u64, batches: usize) -> String {
    format!(
        "offsets {from}..{next} ({batches} batches) are in the log, but neither the journal nor \
         a checkpoint accounts for them (a crash leaves at most one such batch): the journal's \
         history is lost; {NOT_SERVED_UNTIL_RESTORED} messages may be lost, start once with \
         --cut-damaged-journals"
    )
}

/// Why a standalone partition whose journal is gone is not served, and what the operator can
/// do (the seed: missing files alone are not evidence that discarding the data is safe).
fn missing_journal(journal_path: &Path, next_offset: u64) -> String {
    format!(
        "{} is missing, but the partition was written (offsets up to {next_offset}): the \
         history it held is lost; {NOT_SERVED_UNTIL_RESTORED} messages may be lost, delete the \
         partition and create it again",
        journal_path.display()
    )
}

/// The node's own client that proposes retention retirements on every partition group (apart
/// from the system client, whose partition requests are numbered by metadata ops).
pub const RETENTION_CLIENT: u128 = u128::MAX - 1;

/// A running partition: its group handle and its identity.
#[derive(Clone)]
pub struct PartitionHandle {
    pub group: GroupHandle<PartitionRead>,
    pub stats: Arc<PartitionFigures>,
}

impl PartitionHandle {
    /// Opens the partition's log and journal in `dir`, replays the journal and starts its task.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        dir: &Path,
        partition_id: u32,
        (namespace_dir, discarded_root, incarnation): (PathBuf, PathBuf, u64),
        config: LogConfig,
        vsr: iggy_vsr::Config,
        durability: Durability,
        (persist_messages, persist_offsets): (bool, bool),
        (journal_bytes, journal_ops, laggard_bound): (u64, usize, JournalBound),
        (peers, middle_damage): (Option<crate::consensus::plane::Peers>, MiddleDamage),
        clock: crate::runtime::clock::StampClock,
    ) -> Result<PartitionHandle, StorageError> {
        // The incarnation's records: a directory left by an older incarnation of the same ids is
        // discarded, a fenced incarnation is refused, and the incarnation is published outside
        // the partition directory before the partition serves.
        let state = iggy_storage::revision::prepare_partition_dir(
            dir,
            &namespace_dir,
            &discarded_root,
            incarnation,
        )
        .await?;
        let mut peers = peers;
        let mut vsr = vsr;
        if let Some(peers) = peers.as_mut() {
            let replicas = vsr.replica_count;
            let created_view =
                crate::consensus::plane::created_view(incarnation, partition_id, replicas);
            // The primary of its creation view leads it whenever it is up and caught up, so
            // the partitions' primaries stay spread over the nodes after restarts.
            vsr.preferred_primary = Some((created_view % u32::from(replicas)) as u8);
            if state != iggy_storage::revision::PartitionDirState::Existing {
                peers.created_view = Some(created_view);
            }
        }
        if state != iggy_storage::revision::PartitionDirState::Existing {
            tracing::info!(
                "partition {}: directory {:?} for incarnation {incarnation}",
                dir.display(),
                state
            );
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| StorageError::Io { path, error }
        };
        let journal_path = dir.join("journal.wal");
        // The log's open repairs segments: a journal of another cluster is refused first.
        FileJournal::refuse_foreign(&journal_path, crate::consensus::cluster::node_cluster())
            .map_err(io(&journal_path))?;
        let journal_existed = journal_path.try_exists().map_err(io(&journal_path))?;
        let log = PartitionLog::open(dir, config).await?;
        let mut start = load_checkpoint(dir).await?;
        // The journal accounts for every message after the checkpoint; once the partition
        // holds any, a missing journal is lost history (the seed's missing WAL frontier), and
        // a standalone node has no peer to bring it back: replaying nothing would drop them.
        if peers.is_none()
            && !journal_existed
            && (log.next_offset() > 0 || start.checkpoint.is_some())
        {
            return Err(StorageError::Refused(missing_journal(
                &journal_path,
                log.next_offset(),
            )));
        }
        let stats = Arc::new(PartitionFigures::default());
        let mut machine = PartitionMachine {
            partition_id,
            stats: stats.clone(),
            persist_messages,
            persist_offsets,
            sync_on_checkpoint: persist_messages
                || persist_offsets
                || durability == Durability::Persisted,
            live: false,
            created_at_op: incarnation >> 20,
            middle_damage,
            log,
            core: Partition::new(incarnation >> 20),
            clock,
        };
        if vsr.replica_count > 1 {
            machine.core.bound_retirement_by_replicas();
        }
        let checkpoint = match start.checkpoint {
            Some(loaded) => {
                let short = machine
                    .restore(&loaded.state)
                    .map_err(|refusal| match refusal {
                        Refusal::Invalid(why) => io(&loaded.path)(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            why,
                        )),
                        Refusal::Damaged(why) => StorageError::Refused(why),
                    })?;
                // An accepted loss is recorded at once, so the next start finds the checkpoint
                // and the log agreeing and does not ask again: into both slots, since a start
                // takes the first of two at the same op.
                if short && middle_damage == MiddleDamage::CutAccepted {
                    let (replica, state) = (loaded.replica.encode(), machine.core.encode_state());
                    for _ in 0..2 {
                        start.slots.write(&replica, &state).await;
                    }
                }
                machine.core.restored_at(loaded.replica.op);
                Some(loaded.replica)
            }
            None => None,
        };
        let (mut journal, recovered) = FileJournal::open_after_checkpoint(
            &journal_path,
            Anchor::after(checkpoint.as_ref()),
            &start.damaged,
            middle_damage,
        )
        .await
        .map_err(io(&journal_path))?;
        let mut entries = Vec::with_capacity(recovered.len());
        let journaled = recovered.len();
        for (index, record) in recovered.into_iter().enumerate() {
            let entry = match record {
                JournalEntry::Whole(entry) => entry,
                JournalEntry::Stowed(stand_in)
                    if machine.core.retire_if_deleted(
                        stand_in.op,
                        &stand_in.body,
                        machine.log.first_offset(),
                    ) =>
                {
                    stand_in
                }
                JournalEntry::Stowed(stand_in) => match machine.unstow(&stand_in).await {
                    // A replica of a larger group commits its journal only once it rejoined:
                    // until then the journal accounts for the batches in the log.
                    Some(entry) if peers.is_some() => {
                        if let Ok(stowed) =
                            iggy_generated::storage::StowedBatch::decode_fixed(&stand_in.body)
                        {
                            machine
                                .core
                                .stowed(entry.op, stowed.base_offset, stowed.message_count);
                        }
                        entry
                    }
                    Some(entry) => entry,
                    None => {
                        // Written to the log before its journal record, so only a machine crash
                        // under the replicated policy (which may lose acknowledged writes) or
                        // damage leaves a record without its batch: the journal ends there. A
                        // standalone node drops acknowledged ops after it only when told to.
                        let after = journaled - index - 1;
                        if after > 0 && middle_damage == MiddleDamage::Refuse {
                            return Err(StorageError::Refused(format!(
                                "journal op {} names a batch the log does not hold, and {after} \
                                 journaled ops follow it: cutting the journal there would lose \
                                 them; {NOT_SERVED_UNTIL_RESTORED} ops may be lost, start once \
                                 with --cut-damaged-journals",
                                stand_in.op
                            )));
                        }
                        tracing::warn!(
                            "partition {}: journal op {} names a batch the log does not hold; dropping it and the {} journaled ops after it (the journal ends before it)",
                            dir.display(),
                            stand_in.op,
                            journaled - index - 1
                        );
                        journal.truncate_after(stand_in.op - 1).await;
                        break;
                    }
                },
            };
            entries.push(entry);
        }
        // With no checkpoint and no journaled op, the group would start afresh (journaling its
        // first op) before `replayed` could refuse a log that holds more than a crash leaves.
        // (The index walk that counts the batches only then, not at every partition's open.)
        if middle_damage == MiddleDamage::Refuse && checkpoint.is_none() && entries.is_empty() {
            let (first, next) = (machine.log.first_offset(), machine.log.next_offset());
            let batches = machine.log.batches_from(first);
            if batches > 1 {
                return Err(StorageError::Refused(unaccounted(first, next, batches)));
            }
        }
        let checkpointing = Checkpointing {
            kind: crate::consensus::figures::GroupKind::Partition,
            slots: start.slots,
            journal_bytes,
            journal_ops,
            // A replica left behind copies the partition from a peer (state transfer).
            past_laggards: Some(laggard_bound),
        };
        let group = Group::open(
            vsr,
            journal,
            checkpoint,
            entries,
            machine,
            durability,
            true,
            Some(checkpointing),
            "limits.dedup_clients_max",
            peers,
        )
        .await
        .map_err(StorageError::Refused)?;
        Ok(PartitionHandle {
            group: group.spawn(),
            stats,
        })
    }

    pub async fn write(
        &self,
        client: u128,
        request: u64,
        write: PartitionWrite,
    ) -> Result<(u64, WriteResult), ErrorCode> {
        // The write goes with its body: a batch stays its buffer's only holder, stamped in place.
        let operation = write.operation();
        let outcome = self
            .group
            .submit(client, request, operation, write.into_encoded())
            .await;
        written(outcome)
    }

    /// [`Self::write`], relayed to the partition's primary when this node does not lead it
    /// (a DeleteSegments that reached the metadata primary, any write of an HTTP client).
    /// Until `replay_until`, a write not executed (no primary known, or the one asked lost the
    /// lead) or whose verdict never came (its primary died, or the view changed under it) is
    /// sent again under the same number to the view's primary, which answers a committed one
    /// from its client table and prepares a lost one once: a client of a node whose partition
    /// primary was killed gets the write's outcome, not an uncertain answer. Past it, a relay
    /// that may have committed is TransientNotCommitted (the client replays it under its
    /// number), one never executed the refusal (the client may send it again).
    pub async fn write_anywhere(
        &self,
        client: u128,
        request: u64,
        write: PartitionWrite,
        replay_until: std::time::Instant,
    ) -> Result<(u64, WriteResult), ErrorCode> {
        use iggy_vsr::Refusal;
        let (operation, body) = (write.operation(), write.encode());
        let mut may_have_committed = false;
        loop {
            let outcome = self
                .group
                .submit_anywhere(client, request, operation, body.clone())
                .await;
            let again = std::time::Instant::now() + RELAY_REPLAY_PAUSE < replay_until;
            match outcome {
                // Its group stopped (the partition deleted, the node stopping): no send again
                // reaches anyone.
                Outcome::Failed if self.group.stopped() => {
                    return Err(ErrorCode::TransientNotCommitted);
                }
                Outcome::Failed => may_have_committed = true,
                Outcome::Refused(
                    Refusal::Busy | Refusal::NotReady | Refusal::NotPrimary { .. },
                ) => {
                    if !again && !may_have_committed {
                        return written(outcome);
                    }
                }
                // A later request of the client committed meanwhile: whether this one did
                // before it, the client table no longer says.
                Outcome::Refused(Refusal::RequestTooOld) if may_have_committed => {
                    return Err(ErrorCode::TransientNotCommitted);
                }
                outcome => return written(outcome),
            }
            // Out of time after a send whose verdict never came.
            if !again {
                return Err(ErrorCode::TransientNotCommitted);
            }
            compio::time::sleep(RELAY_REPLAY_PAUSE).await;
        }
    }

    /// `count` messages from `start`, fewer when they would take more than `bytes_max`
    /// bytes of records (at least one batch).
    pub async fn poll(
        &self,
        start: StartAt,
        count: u32,
        bytes_max: usize,
    ) -> Result<Polled, ErrorCode> {
        let (done, wait) = oneshot::channel();
        if !self.group.read(PartitionRead::Messages {
            start,
            count,
            bytes_max,
            done,
        }) {
            return Err(ErrorCode::PartitionNotFound);
        }
        wait.await.unwrap_or(Err(ErrorCode::PartitionNotFound))
    }

    /// The current offset and the offset stored for `owner`, created by the metadata op
    /// `owner_created_at_op` (0 for a consumer).
    pub async fn offset(
        &self,
        owner: OffsetOwner,
        owner_created_at_op: u64,
    ) -> Option<(u64, Option<u64>)> {
        let (done, wait) = oneshot::channel();
        let read = PartitionRead::Offset {
            owner,
            owner_created_at_op,
            done,
        };
        if !self.group.read(read) {
            return None;
        }
        wait.await.ok()
    }

    /// Has the partition's task check its active segment's file (the maintenance pass, every
    /// interval): it stops the node if the file was removed or cut short behind its back.
    pub fn check_files(&self) {
        self.group.read(PartitionRead::CheckFiles);
    }

    /// Fsyncs the partition's log and journal behind its queued writes.
    pub async fn sync(&self) {
        let (done, wait) = oneshot::channel();
        if self.group.read(PartitionRead::Sync { done }) {
            let _ = wait.await;
        }
        self.group.sync_journal().await;
    }

    /// Retention: the primary plans, with its clock and the topic's limits, where the log is
    /// kept from, then proposes that retirement as a committed op of the node's retention
    /// client, so every replica (and every replay of the journal) deletes the same segments.
    /// The offset the log is kept from afterwards, or `None` when nothing was due.
    pub async fn retention(
        &self,
        now: u64,
        message_expiry_us: Option<u64>,
        max_size: Option<u64>,
    ) -> Result<Option<u64>, ErrorCode> {
        let (done, wait) = oneshot::channel();
        let planned = self.group.read(PartitionRead::PlanRetention {
            now,
            message_expiry_us,
            max_size,
            done,
        });
        if !planned {
            return Err(ErrorCode::PartitionNotFound);
        }
        let Some(keep_from) = wait.await.map_err(|_| ErrorCode::PartitionNotFound)? else {
            return Ok(None);
        };
        // Retention deletes by age and size whatever consumers have read.
        let write = PartitionWrite::RetireSegments {
            keep_from,
            planned_at: NO_OFFSET_HOLD,
        };
        match self
            .group
            .submit_next(RETENTION_CLIENT, write.operation(), write.encode())
            .await
        {
            Outcome::Committed { reply, .. } => match WriteResult::decode(&reply) {
                WriteResult::Failed(code) => Err(code),
                _ => Ok(Some(keep_from)),
            },
            Outcome::Refused(refusal) => Err(crate::consensus::group::refusal_error(&refusal)),
            Outcome::Failed => Err(ErrorCode::CannotDeleteFile),
        }
    }

    /// The writers in this partition's client table, with their sessions in it.
    pub async fn writers(&self) -> Vec<(u128, u64)> {
        self.group.clients().await
    }

    /// Retires the writer slots of `sessions` (ended in the metadata group) through a committed
    /// op of the node's own client.
    pub async fn retire_sessions(&self, sessions: Vec<SessionIdentity>) -> Result<(), ErrorCode> {
        self.commit_own(PartitionWrite::RetireSessions { sessions })
            .await
    }

    /// Commits `write` as the node's own client (numbered by the group), its reply unread.
    async fn commit_own(&self, write: PartitionWrite) -> Result<(), ErrorCode> {
        match self
            .group
            .submit_next(RETENTION_CLIENT, write.operation(), write.encode())
            .await
        {
            Outcome::Committed { .. } => Ok(()),
            Outcome::Refused(refusal) => Err(crate::consensus::group::refusal_error(&refusal)),
            Outcome::Failed => Err(ErrorCode::TransientNotCommitted),
        }
    }

    /// The group offsets no live group owns, as the deletions that remove them: `live_groups`
    /// maps the topic's consumer groups, as of metadata op `metadata_op`, to their creation op
    /// (0 when unknown).
    pub async fn orphaned_group_offsets(
        &self,
        live_groups: std::collections::BTreeMap<u32, u64>,
        metadata_op: u64,
    ) -> Result<Vec<(u32, u64)>, ErrorCode> {
        let (done, wait) = oneshot::channel();
        let read = PartitionRead::OrphanedGroupOffsets {
            live_groups,
            metadata_op,
            done,
        };
        if !self.group.read(read) {
            return Err(ErrorCode::PartitionNotFound);
        }
        wait.await.map_err(|_| ErrorCode::PartitionNotFound)
    }

    /// Deletes the offsets of `group` resolved before metadata op `metadata_op` through a
    /// committed op of the node's own client, as the partition's primary: a sweep's
    /// [`PartitionWrite::DeleteGroupOffsets`].
    pub async fn delete_orphaned_group_offsets(
        &self,
        group: u32,
        metadata_op: u64,
    ) -> Result<(), ErrorCode> {
        self.commit_own(PartitionWrite::DeleteGroupOffsets { group, metadata_op })
            .await
    }

    /// Where a deletion of up to `count` of the oldest segments keeps the log from, the topic's
    /// consumer groups being `live_groups` as of `metadata_op`.
    pub async fn plan_segment_retirement(
        &self,
        count: u32,
        live_groups: std::collections::BTreeMap<u32, u64>,
        metadata_op: u64,
    ) -> Result<RetirementPlan, ErrorCode> {
        let (done, wait) = oneshot::channel();
        let plan = PartitionRead::PlanSegmentRetirement {
            count,
            live_groups,
            metadata_op,
            done,
        };
        if !self.group.read(plan) {
            return Err(ErrorCode::PartitionNotFound);
        }
        wait.await.map_err(|_| ErrorCode::PartitionNotFound)
    }
}

/// A partition write's outcome as the client sees it: the committed op and result, or the
/// refusal's error.
fn written(outcome: Outcome) -> Result<(u64, WriteResult), ErrorCode> {
    match outcome {
        Outcome::Committed { op, reply } => Ok((op, WriteResult::decode(&reply))),
        Outcome::Refused(refusal) => {
            if refusal == iggy_vsr::Refusal::ClientsTableFull {
                writer_table_full();
            }
            Err(crate::consensus::group::refusal_error(&refusal))
        }
        // No verdict (the group stopped, or its primary lost the lead with the write in its
        // pipeline): it may still commit, which the SDK resolves by resending the request
        // under its number (OperationUncertain).
        Outcome::Failed => Err(ErrorCode::TransientNotCommitted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_storage::layout::{frame, write_u64};

    async fn machine(dir: &Path) -> PartitionMachine {
        machine_rolling_at(dir, 1 << 20).await
    }

    async fn machine_rolling_at(dir: &Path, segment_size: u64) -> PartitionMachine {
        let config = LogConfig {
            segment_size,
            writeback_bytes: 0,
            refuse_corrupt_tail: false,
        };
        PartitionMachine {
            partition_id: 0,
            stats: Arc::new(PartitionFigures::default()),
            persist_messages: false,
            persist_offsets: false,
            sync_on_checkpoint: false,
            live: true,
            created_at_op: 0,
            middle_damage: MiddleDamage::Refuse,
            log: PartitionLog::open(dir, config).await.unwrap(),
            core: Partition::new(0),
            clock: Default::default(),
        }
    }

    /// A batch of `count` empty messages, as a producer sends it.
    fn batch(count: u32) -> Bytes {
        let header_size = iggy_generated::frames::BatchHeader::SIZE;
        let length = header_size + count as usize * frame::HEADER_SIZE;
        let header = iggy_generated::frames::BatchHeader {
            partition_id: 0,
            base_offset: 0,
            base_timestamp: 5,
            origin_timestamp: 0,
            batch_length: length as u64,
            batch_checksum: 0,
            message_count: count,
        };
        let mut record = header.to_bytes().to_vec();
        record.resize(length, 0);
        // Recovery checks every frame's checksum (over the frame after the field).
        for start in (header_size..length).step_by(frame::HEADER_SIZE) {
            let end = start + frame::HEADER_SIZE;
            let checksum = twox_hash::XxHash3_64::oneshot(&record[start + 8..end]);
            write_u64(&mut record, start + frame::CHECKSUM, checksum);
        }
        record.into()
    }

    fn send(op: u64, count: u32) -> Entry {
        Entry::new(
            op,
            0,
            1,
            op,
            Operation::SendMessages.to_repr(),
            batch(count),
        )
    }

    async fn apply(machine: &mut PartitionMachine, entry: &Entry) -> WriteResult {
        let reply = machine
            .apply(entry.op, 1, entry.operation, entry.body.clone())
            .await;
        WriteResult::decode(&reply)
    }

    async fn polled(machine: &mut PartitionMachine) -> u32 {
        machine
            .poll(StartAt::First, 100, usize::MAX)
            .await
            .unwrap()
            .batches
            .messages
    }

    #[compio::test]
    async fn traffic_counts_each_committed_batch_and_served_poll_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut machine = machine(dir.path()).await;
        // A journal replay is not traffic of this process.
        machine.live = false;
        apply(&mut machine, &send(1, 4)).await;
        assert_eq!(machine.stats.traffic(), Traffic::default());
        machine.replayed().await.expect("replayed");
        apply(&mut machine, &send(2, 2)).await;
        let stowed = send(3, 3);
        machine.stow(&stowed).await.unwrap().unwrap();
        // Stowed, not committed yet: not counted until its apply.
        assert_eq!(machine.stats.traffic().messages_in, 2);
        apply(&mut machine, &stowed).await;
        let sent = (batch(2).len() + batch(3).len()) as u64;
        let (done, answer) = oneshot::channel();
        machine
            .read(PartitionRead::Messages {
                start: StartAt::First,
                count: 100,
                bytes_max: usize::MAX,
                done,
            })
            .await;
        let polled = answer.await.unwrap().unwrap();
        assert_eq!(polled.batches.messages, 9);
        assert_eq!(
            machine.stats.traffic(),
            Traffic {
                messages_in: 5,
                bytes_in: sent,
                messages_out: 9,
                bytes_out: (polled.batches.bytes.len() - POLL_REPLY_HEADROOM) as u64,
            }
        );
    }

    #[compio::test]
    async fn the_shell_writes_what_the_core_decides_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut machine = machine(dir.path()).await;
        // Journaled whole: appended by its apply.
        assert_eq!(
            apply(&mut machine, &send(1, 2)).await,
            WriteResult::Appended {
                base_offset: 0,
                count: 2
            }
        );
        assert_eq!(machine.log.next_offset(), 2);
        assert_eq!(machine.stats.get().next_offset, 2);
        // Stowed as it is prepared: in the log at once, served once applied.
        let stand_in = machine.stow(&send(2, 3)).await.unwrap().unwrap();
        assert_eq!(stand_in.len(), iggy_generated::storage::StowedBatch::SIZE);
        assert_eq!(machine.log.next_offset(), 5);
        assert_eq!(polled(&mut machine).await, 2);
        assert_eq!(
            apply(&mut machine, &send(2, 3)).await,
            WriteResult::Appended {
                base_offset: 2,
                count: 3
            }
        );
        assert_eq!(polled(&mut machine).await, 5);
        // A stowed batch whose op the journal drops leaves the log again.
        machine.stow(&send(3, 1)).await.unwrap().unwrap();
        assert_eq!(machine.log.next_offset(), 6);
        machine.unstow_after(2).await.unwrap();
        assert_eq!(machine.log.next_offset(), 5);
        // The checkpoint's state restores over the log on the next start.
        let state = machine.checkpoint().await.unwrap();
        drop(machine);
        let mut restarted = self::machine(dir.path()).await;
        restarted.restore(&state).unwrap();
        assert_eq!(restarted.current_offset(), 4);
        restarted.replayed().await.expect("replayed");
        assert_eq!(restarted.log.next_offset(), 5);
        assert_eq!(polled(&mut restarted).await, 5);
    }

    /// The `.log` files of a machine's directory, by name.
    fn segment_logs(dir: &Path) -> Vec<(std::ffi::OsString, Vec<u8>)> {
        let mut logs: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
            .map(|path| {
                (
                    path.file_name().unwrap().to_owned(),
                    std::fs::read(&path).unwrap(),
                )
            })
            .collect();
        logs.sort();
        logs
    }

    #[compio::test]
    async fn a_transfer_replaces_what_the_laggard_never_committed_with_the_peers_committed_log() {
        let (source_dir, laggard_dir) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut source = machine(source_dir.path()).await;
        let mut laggard = machine(laggard_dir.path()).await;
        for machine in [&mut source, &mut laggard] {
            apply(machine, &send(1, 2)).await;
        }
        // The laggard stowed a batch for an op its group later replaced.
        laggard.stow(&send(2, 7)).await.unwrap().unwrap();
        apply(&mut source, &send(2, 3)).await;
        apply(&mut source, &send(3, 4)).await;
        let state = source.checkpoint().await.unwrap();
        // The source goes on: a stowed batch of an op not committed yet is not served.
        source.stow(&send(4, 1)).await.unwrap().unwrap();
        let (from, until) = laggard.transfer_begin(&state).await.unwrap();
        assert_eq!((from, until), (2, 9), "its own committed offsets stay");
        let mut next = from;
        while next < until {
            let (offset, records) = source.transfer_records(next, 1).await;
            assert_eq!(offset, next);
            assert!(!records.is_empty());
            next = laggard.transfer_append(records).await.unwrap();
        }
        assert_eq!(next, 9);
        let (_, nothing) = source.transfer_records(9, 1 << 20).await;
        assert!(
            nothing.is_empty(),
            "the uncommitted batch at 9 is not served"
        );
        laggard.transfer_install(0, &state).await.unwrap();
        assert_eq!(laggard.current_offset(), 8);
        assert_eq!(polled(&mut laggard).await, 9);
        source.unstow_after(3).await.unwrap();
        source.log.sync().await;
        assert_eq!(
            segment_logs(laggard_dir.path()),
            segment_logs(source_dir.path())
        );
        // Offsets the source does not hold as a batch start answer with where it holds from.
        let (offset, records) = source.transfer_records(1, 1 << 20).await;
        assert_eq!((offset, records.len()), (0, 0));
    }

    /// The group retired (by committed ops) every offset the laggard holds and more: the peer
    /// answers the laggard's first chunk request with its first retained offset, the laggard
    /// restarts its log empty there and copies on to segments byte-identical to the peer's. A
    /// crash before the install leaves a log the old checkpoint reopens over, and the transfer
    /// goes the same way again.
    /// A replica that applied a retirement, restarted (its committed end back at its
    /// checkpoint's, below its log's first offset, until it rejoins) and then catches up by
    /// state transfer from a peer whose bound kept those offsets: the copy continues from its
    /// log's first offset, so the retired messages stay deleted (they came back from the peer:
    /// the node simulator's `SIM_SEED=1988005`, 5 nodes).
    #[compio::test]
    async fn a_transfer_after_a_restart_keeps_the_retirement_the_log_applied() {
        let (source_dir, laggard_dir) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut source = machine_rolling_at(source_dir.path(), 1).await;
        let mut laggard = machine_rolling_at(laggard_dir.path(), 1).await;
        for op in 1..=6 {
            apply(&mut source, &send(op, 2)).await;
            apply(&mut laggard, &send(op, 2)).await;
            if op == 2 {
                laggard.checkpoint().await.unwrap();
            }
        }
        let retire = PartitionWrite::RetireSegments {
            keep_from: 8,
            planned_at: 6,
        };
        let retire = Entry::new(7, 0, 1, 7, retire.operation(), retire.encode());
        assert_eq!(apply(&mut laggard, &retire).await, WriteResult::Done);
        assert_eq!(laggard.log.first_offset(), 8);
        let laggard_checkpoint = {
            let dir = laggard_dir.path().to_path_buf();
            drop(laggard);
            dir
        };
        let state = source.checkpoint().await.unwrap();
        let mut laggard = machine_rolling_at(&laggard_checkpoint, 1).await;
        assert_eq!(
            (laggard.log.first_offset(), laggard.log.next_offset()),
            (8, 12)
        );
        let (next, until) = laggard.transfer_begin(&state).await.unwrap();
        assert_eq!((next, until), (8, 12), "continues from its first offset");
        assert_eq!(
            laggard.log.first_offset(),
            8,
            "the retired offsets stay deleted"
        );
        let (offset, records) = source.transfer_records(next, 1 << 20).await;
        assert_eq!(offset, 8);
        assert_eq!(laggard.transfer_append(records).await.unwrap(), 12);
        assert_eq!(laggard.log.first_offset(), 8);
    }

    /// A laggard whose log holds offsets the group retired by ops the offered checkpoint carries
    /// deletes them (the probe of `Fetch::begin` found the peer's first offset above its own),
    /// also when that is where its log ends (a full segment rolls at once, so its last one is
    /// closed here too).
    #[compio::test]
    async fn a_transfer_retires_below_the_peers_first_offset_what_the_laggard_still_holds() {
        for keep_from in [8, 12] {
            let (source_dir, laggard_dir) =
                (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            // Every batch fills a segment of its own.
            let mut source = machine_rolling_at(source_dir.path(), 1).await;
            let mut laggard = machine_rolling_at(laggard_dir.path(), 1).await;
            for op in 1..=6 {
                apply(&mut source, &send(op, 2)).await;
                apply(&mut laggard, &send(op, 2)).await;
            }
            apply(&mut source, &send(7, 2)).await;
            let retire = PartitionWrite::RetireSegments {
                keep_from,
                planned_at: 7,
            };
            let retire = Entry::new(8, 0, 1, 8, retire.operation(), retire.encode());
            apply(&mut source, &retire).await;
            let state = source.checkpoint().await.unwrap();
            laggard.checkpoint().await.unwrap();
            let (next, until) = laggard.transfer_begin(&state).await.unwrap();
            assert_eq!((next, until), (12, 14));
            assert_eq!(laggard.transfer_log_start(), 0);
            let (held_from, records) = source.transfer_records(0, 1).await;
            assert_eq!(
                (held_from, records.len()),
                (keep_from, 0),
                "the probe's answer"
            );
            laggard.transfer_retire_below(held_from).await.unwrap();
            assert_eq!(
                laggard.log.first_offset(),
                keep_from,
                "keep from {keep_from}"
            );
            let (offset, records) = source.transfer_records(next, 1 << 20).await;
            assert_eq!(offset, 12);
            assert_eq!(laggard.transfer_append(records).await.unwrap(), 14);
            assert_eq!(
                laggard.log.first_offset(),
                keep_from,
                "keep from {keep_from}"
            );
        }
    }

    #[compio::test]
    async fn a_transfer_across_retired_offsets_restarts_the_laggards_log_at_the_peers_first_offset()
    {
        let (source_dir, laggard_dir) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // Every batch fills a segment of its own.
        let mut source = machine_rolling_at(source_dir.path(), 1).await;
        let mut laggard = machine_rolling_at(laggard_dir.path(), 1).await;
        for machine in [&mut source, &mut laggard] {
            apply(machine, &send(1, 2)).await;
            apply(machine, &send(2, 2)).await;
        }
        let laggard_checkpoint = laggard.checkpoint().await.unwrap();
        for op in 3..=6 {
            apply(&mut source, &send(op, 2)).await;
        }
        let retire = PartitionWrite::RetireSegments {
            keep_from: 8,
            planned_at: 6,
        };
        let retire = Entry::new(7, 0, 1, 7, retire.operation(), retire.encode());
        assert_eq!(apply(&mut source, &retire).await, WriteResult::Done);
        assert_eq!(source.log.first_offset(), 8);
        let state = source.checkpoint().await.unwrap();

        // Copies from where the laggard's log continues; returns the offsets it restarted at.
        async fn copy(
            source: &mut PartitionMachine,
            laggard: &mut PartitionMachine,
            state: &[u8],
            stop_at: u64,
        ) -> Vec<u64> {
            let (mut next, until) = laggard.transfer_begin(state).await.unwrap();
            assert_eq!((next, until), (4, 12));
            let mut restarts = Vec::new();
            while next < stop_at {
                let (offset, records) = source.transfer_records(next, 1).await;
                if records.is_empty() {
                    assert!(offset > next && offset <= until, "retired below {offset}");
                    laggard.transfer_restart_at(offset).await.unwrap();
                    restarts.push(offset);
                    next = offset;
                    continue;
                }
                next = laggard.transfer_append(records).await.unwrap();
            }
            restarts
        }
        assert_eq!(copy(&mut source, &mut laggard, &state, 10).await, vec![8]);
        assert_eq!(
            (laggard.log.first_offset(), laggard.log.next_offset()),
            (8, 10)
        );
        assert!(
            laggard.transfer_restart_at(9).await.is_err(),
            "a restart never drops offsets the log holds"
        );
        // Not served until the install: the state's committed offsets end below them.
        assert_eq!(polled(&mut laggard).await, 0);

        // A crash before the install: the old checkpoint reopens over the restarted log, whose
        // records no journaled op accounts for.
        drop(laggard);
        let mut laggard = machine_rolling_at(laggard_dir.path(), 1).await;
        laggard.restore(&laggard_checkpoint).unwrap();
        laggard.replayed().await.expect("replayed");
        assert_eq!(polled(&mut laggard).await, 0);
        assert_eq!(copy(&mut source, &mut laggard, &state, 12).await, vec![8]);
        laggard.transfer_install(7, &state).await.unwrap();
        assert_eq!(laggard.current_offset(), 11);
        assert_eq!(polled(&mut laggard).await, 4, "offsets 8..12");
        source.log.sync().await;
        assert_eq!(
            segment_logs(laggard_dir.path()),
            segment_logs(source_dir.path())
        );
        assert_eq!(segment_logs(laggard_dir.path()).len(), 3, "8, 10 and 12");
    }
}

/// At most one "writer table full" warning this often (per shard).
const WRITER_TABLE_FULL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

thread_local! {
    static WRITER_TABLE_FULL: crate::consensus::log_limit::Throttled =
        crate::consensus::log_limit::Throttled::new(
            WRITER_TABLE_FULL_INTERVAL,
        );
}

/// Says why a new writer is refused while every writer slot of a partition is taken: the
/// client only sees a transient refusal, which it retries. Live writers are never evicted.
fn writer_table_full() {
    let due = WRITER_TABLE_FULL.with(|limit| limit.due(std::time::Instant::now()));
    let Some(held_back) = due else {
        return;
    };
    tracing::warn!(
        "a write of a new writer refused: every writer slot of its partition is held by a live \
         session (limits.dedup_clients_max, as committed with the partition group's first op); \
         a slot is freed once its session ended and was retired ({held_back} more refusals since \
         the last warning)"
    );
}
