//! One partition's consensus group: its state machine (the partition log and its consumer
//! offsets) and the handle the dispatcher talks to. Writes are journaled and committed through
//! the group's VSR replica; reads are queued behind the writes already accepted, so a poll
//! sees every acknowledged send.

use crate::consensus::group::{
    Checkpointing, Durability, Group, GroupHandle, Journal, Outcome, StateMachine, load_checkpoint,
};
use crate::consensus::wal::{Anchor, FileJournal, JournalEntry};
use bytes::Bytes;
use futures_channel::oneshot;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::Operation;
use iggy_generated::storage::{
    DeleteGroupOffsetsOp, DeleteOffsetOp, DeleteOffsetOpV0, GroupDeletion, OffsetOwnerKind,
    OffsetOwnerRecord, PartitionCheckpointState, PartitionCheckpointStateV0, RetireSegmentsOp,
    StoreOffsetOp, StoreOffsetOpV0, StoredOffset, WriteAppended, WriteStatus,
};
use iggy_storage::partition_log::{LogConfig, PartitionLog, ReadBatches};
use iggy_storage::{StorageError, batch};
use iggy_vsr::Entry;
use iggy_wire::{WireDecode, WireEncode};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Who an offset belongs to, journaled and checkpointed as the wire's consumer kind byte and a
/// u32: a plain consumer (1), a consumer group (2), or an external group (3): the offsets an
/// Iggy consumer group keeps for a membership managed outside Iggy (a Kafka group, say). A
/// group's kind-2 and kind-3 offsets are separate slots and never overwrite each other; a
/// kind-3 offset is never polled and holds no segment back, and both go with the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OffsetOwner {
    Consumer(u32),
    Group(u32),
    External(u32),
}

impl OffsetOwner {
    fn record(self) -> OffsetOwnerRecord {
        let (kind, id) = match self {
            OffsetOwner::Consumer(id) => (OffsetOwnerKind::Consumer, id),
            OffsetOwner::Group(id) => (OffsetOwnerKind::ConsumerGroup, id),
            OffsetOwner::External(id) => (OffsetOwnerKind::ExternalGroup, id),
        };
        OffsetOwnerRecord { kind, id }
    }

    fn of(record: OffsetOwnerRecord) -> OffsetOwner {
        match record.kind {
            OffsetOwnerKind::Consumer => OffsetOwner::Consumer(record.id),
            OffsetOwnerKind::ConsumerGroup => OffsetOwner::Group(record.id),
            OffsetOwnerKind::ExternalGroup => OffsetOwner::External(record.id),
        }
    }
}

/// The body of a partition op as journaled: the primary's decisions plus the client's bytes.
/// Internal to this server (the journal is ours); the wire batch inside is the spec's layout.
pub enum PartitionWrite {
    /// The validated record as the producer sent it, `base_timestamp` stamped by the primary.
    Send { batch: Bytes },
    /// `resolved_at`: the metadata op the owner was resolved at (a group's offsets: the group
    /// existed then). Refused if the owner's group was deleted by a later op, so a request in
    /// flight across a group's deletion leaves nothing a later group with that id would find.
    /// A record journaled before the field existed reads as `u64::MAX` (never refused).
    StoreOffset {
        owner: OffsetOwner,
        offset: u64,
        resolved_at: u64,
    },
    DeleteOffset {
        owner: OffsetOwner,
        resolved_at: u64,
    },
    /// DeleteSegments: every closed segment whose messages all lie below `keep_from`, as the
    /// primary planned it from the request. Applying it twice deletes nothing more.
    RetireSegments { keep_from: u64 },
    /// The consumer group `group` was deleted by metadata op `metadata_op`: its offsets (kind 2
    /// and kind 3) go, so a group created later with the same id starts with none. Applied
    /// only when `metadata_op` is above the latest deletion of `group` the partition applied
    /// and above the op that created the partition, so a deletion submitted again (a restart
    /// finishing one a crash interrupted) never removes a later group's offsets.
    DeleteGroupOffsets { group: u32, metadata_op: u64 },
}

impl PartitionWrite {
    pub fn operation(&self) -> u8 {
        match self {
            PartitionWrite::Send { .. } => Operation::SendMessages.to_repr(),
            PartitionWrite::StoreOffset { .. } => Operation::StoreConsumerOffset.to_repr(),
            PartitionWrite::DeleteOffset { .. } => Operation::DeleteConsumerOffset.to_repr(),
            PartitionWrite::RetireSegments { .. } => Operation::DeleteSegments.to_repr(),
            PartitionWrite::DeleteGroupOffsets { .. } => Operation::DeleteConsumerGroup.to_repr(),
        }
    }

    /// The journaled body: the client's batch, or the spec's record of the op
    /// (spec/storage.spec: `StoreOffsetOp`, `DeleteOffsetOp`, `RetireSegmentsOp`,
    /// `DeleteGroupOffsetsOp`).
    pub fn encode(&self) -> Bytes {
        match *self {
            PartitionWrite::Send { ref batch } => batch.clone(),
            PartitionWrite::StoreOffset {
                owner,
                offset,
                resolved_at,
            } => (StoreOffsetOp {
                owner: owner.record(),
                offset,
                resolved_at,
            })
            .to_wire_bytes()
            .into(),
            PartitionWrite::DeleteOffset { owner, resolved_at } => (DeleteOffsetOp {
                owner: owner.record(),
                resolved_at,
            })
            .to_wire_bytes()
            .into(),
            PartitionWrite::RetireSegments { keep_from } => {
                (RetireSegmentsOp { keep_from }).to_wire_bytes().into()
            }
            PartitionWrite::DeleteGroupOffsets { group, metadata_op } => {
                (DeleteGroupOffsetsOp { group, metadata_op })
                    .to_wire_bytes()
                    .into()
            }
        }
    }

    fn decode(operation: u8, body: &Bytes) -> Option<PartitionWrite> {
        // Records journaled before `resolved_at` existed (the `V0` layouts) read as resolved
        // at `u64::MAX`: never refused.
        match Operation::from_repr(operation)? {
            Operation::SendMessages => Some(PartitionWrite::Send {
                batch: body.clone(),
            }),
            Operation::StoreConsumerOffset => match StoreOffsetOp::decode_exact(body) {
                Ok(op) => Some(PartitionWrite::StoreOffset {
                    owner: OffsetOwner::of(op.owner),
                    offset: op.offset,
                    resolved_at: op.resolved_at,
                }),
                Err(_) => {
                    let op = StoreOffsetOpV0::decode_exact(body).ok()?;
                    Some(PartitionWrite::StoreOffset {
                        owner: OffsetOwner::of(op.owner),
                        offset: op.offset,
                        resolved_at: u64::MAX,
                    })
                }
            },
            Operation::DeleteConsumerOffset => match DeleteOffsetOp::decode_exact(body) {
                Ok(op) => Some(PartitionWrite::DeleteOffset {
                    owner: OffsetOwner::of(op.owner),
                    resolved_at: op.resolved_at,
                }),
                Err(_) => Some(PartitionWrite::DeleteOffset {
                    owner: OffsetOwner::of(DeleteOffsetOpV0::decode_exact(body).ok()?.owner),
                    resolved_at: u64::MAX,
                }),
            },
            Operation::DeleteSegments => Some(PartitionWrite::RetireSegments {
                keep_from: RetireSegmentsOp::decode_exact(body).ok()?.keep_from,
            }),
            Operation::DeleteConsumerGroup => {
                let op = DeleteGroupOffsetsOp::decode_exact(body).ok()?;
                Some(PartitionWrite::DeleteGroupOffsets {
                    group: op.group,
                    metadata_op: op.metadata_op,
                })
            }
            _ => None,
        }
    }
}

/// A committed partition write's result, as cached in the client table and replayed to retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteResult {
    Appended { base_offset: u64, count: u32 },
    Done,
    Failed(ErrorCode),
}

impl WriteResult {
    /// The spec's `WriteAppended` or `WriteStatus` record.
    fn encode(self) -> Bytes {
        match self {
            WriteResult::Appended { base_offset, count } => (WriteAppended {
                status: 0,
                base_offset,
                count,
            })
            .to_wire_bytes()
            .into(),
            WriteResult::Done => (WriteStatus { status: 0 }).to_wire_bytes().into(),
            WriteResult::Failed(code) => (WriteStatus {
                status: code.code(),
            })
            .to_wire_bytes()
            .into(),
        }
    }

    pub fn decode(bytes: &[u8]) -> WriteResult {
        let status = WriteStatus::decode_fixed(bytes.get(..WriteStatus::SIZE).unwrap_or(&[]))
            .map_or(1, |record| record.status);
        if status != 0 {
            return WriteResult::Failed(ErrorCode::from_code(status).unwrap_or(ErrorCode::Error));
        }
        match WriteAppended::decode_exact(bytes) {
            Ok(appended) => WriteResult::Appended {
                base_offset: appended.base_offset,
                count: appended.count,
            },
            Err(_) => WriteResult::Done,
        }
    }
}

/// Reads served by the partition's task.
pub enum PartitionRead {
    Messages {
        start: StartAt,
        count: u32,
        done: oneshot::Sender<Result<Polled, ErrorCode>>,
    },
    Offset {
        owner: OffsetOwner,
        done: oneshot::Sender<(u64, Option<u64>)>,
    },
    /// Makes the log durable (shutdown).
    Sync { done: oneshot::Sender<()> },
    /// Where the topic's retention limits as of `now` (microseconds) keep the log from, if
    /// anything is due (see `PartitionLog::retention_point`).
    PlanRetention {
        now: u64,
        message_expiry_us: Option<u64>,
        max_size: Option<u64>,
        done: oneshot::Sender<Option<u64>>,
    },
    /// Where a deletion of up to `count` of the oldest segments keeps the log from: segments
    /// holding messages a consumer has not committed yet stay.
    PlanSegmentRetirement {
        count: u32,
        done: oneshot::Sender<u64>,
    },
}

/// Where a poll starts.
#[derive(Debug, Clone, Copy)]
pub enum StartAt {
    Offset(u64),
    Timestamp(u64),
    First,
    /// The last `count` messages.
    Last,
    /// After the owner's stored offset (or the first message).
    Next(OffsetOwner),
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
}

impl PartitionFigures {
    fn set(&self, info: PartitionInfo) {
        self.messages.store(info.messages, Ordering::Relaxed);
        self.size_bytes.store(info.size_bytes, Ordering::Relaxed);
        self.segments
            .store(u64::from(info.segments), Ordering::Relaxed);
        self.next_offset.store(info.next_offset, Ordering::Relaxed);
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

/// The partition's replicated state.
pub struct PartitionMachine {
    partition_id: u32,
    /// The partition's figures, published after every change for replies that list them.
    stats: Arc<PartitionFigures>,
    /// The topic's policies: fsync sends / offset stores before acknowledging them.
    persist_messages: bool,
    persist_offsets: bool,
    /// Whether a checkpoint must fsync the segments first (any persisted policy).
    sync_on_checkpoint: bool,
    log: PartitionLog,
    offsets: BTreeMap<OffsetOwner, u64>,
    /// The metadata op that created this incarnation of the partition: no group deleted
    /// before it has offsets here.
    created_at_op: u64,
    /// Per consumer group id, the metadata op of its latest deletion applied here: a
    /// [`PartitionWrite::DeleteGroupOffsets`] at or below it changes nothing, and an offset
    /// write for that id resolved before it is refused.
    group_deletions: BTreeMap<u32, u64>,
    /// The partition's next offset as the replay of the journal reaches it; ops whose messages
    /// are already in the log (written before a restart) are not appended again.
    replay_next_offset: u64,
    /// Sends whose batch went to the log before their journal record (`stow`) and that are not
    /// applied yet: (op, base offset), so a journal truncation can take them back.
    stowed: VecDeque<(u64, u64)>,
    /// Journaled sends found at recovery whose batch a later segment deletion (DeleteSegments
    /// or retention) removed: op → (base offset, message count). Their apply only accounts
    /// for the offsets they took.
    retired: HashMap<u64, (u64, u32)>,
}

/// The state a partition checkpoint keeps (see `PartitionMachine::encode_state`).
#[derive(Debug, Default, PartialEq)]
pub struct CheckpointState {
    /// The offset after the last applied send.
    pub next_offset: u64,
    pub offsets: BTreeMap<OffsetOwner, u64>,
    /// Deleted group id and the metadata op that deleted it.
    pub group_deletions: BTreeMap<u32, u64>,
}

impl CheckpointState {
    /// Decodes the spec's `PartitionCheckpointState`, or the older
    /// `PartitionCheckpointStateV0` (no group deletions).
    pub fn decode(state: &[u8]) -> Result<CheckpointState, String> {
        let bad = |_| "partition checkpoint state is malformed".to_string();
        let (next_offset, offsets, group_deletions) =
            match PartitionCheckpointState::decode_exact(state) {
                Ok(state) => (state.next_offset, state.offsets, state.group_deletions),
                Err(_) => {
                    let state = PartitionCheckpointStateV0::decode_exact(state).map_err(bad)?;
                    (state.next_offset, state.offsets, Vec::new())
                }
            };
        Ok(CheckpointState {
            next_offset,
            offsets: offsets
                .into_iter()
                .map(|stored| (OffsetOwner::of(stored.owner), stored.offset))
                .collect(),
            group_deletions: group_deletions
                .into_iter()
                .map(|deletion| (deletion.group, deletion.metadata_op))
                .collect(),
        })
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

    /// The state a checkpoint keeps besides the log itself (the spec's
    /// `PartitionCheckpointState`): the next offset, the consumer offsets and the group
    /// deletions applied. A checkpoint written before the group deletions were kept
    /// (`PartitionCheckpointStateV0`) restores none.
    fn encode_state(&self) -> Vec<u8> {
        let state = PartitionCheckpointState {
            next_offset: self.replay_next_offset,
            offsets: self
                .offsets
                .iter()
                .map(|(owner, offset)| StoredOffset {
                    owner: owner.record(),
                    offset: *offset,
                })
                .collect(),
            group_deletions: self
                .group_deletions
                .iter()
                .map(|(group, op)| GroupDeletion {
                    group: *group,
                    metadata_op: *op,
                })
                .collect(),
        };
        state.to_wire_bytes()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let CheckpointState {
            next_offset: next,
            offsets,
            group_deletions,
        } = CheckpointState::decode(state)?;
        self.offsets.extend(offsets);
        self.group_deletions.extend(group_deletions);
        if next > self.log.next_offset() {
            // Only a machine crash under the replicated policy loses segment pages the
            // checkpoint counted; that policy does not promise them, and the log is what is left.
            tracing::warn!(
                "partition {}: checkpoint names offset {next} but the log ends at {}: messages lost with the machine",
                self.partition_id,
                self.log.next_offset()
            );
        }
        self.replay_next_offset = next.min(self.log.next_offset());
        Ok(())
    }

    /// Whether the stand-in `entry` names a batch below the log's first retained offset: its
    /// segment was deleted after the op (DeleteSegments or retention), so the batch is not lost
    /// but retired, and the op is recorded in `retired` to be accounted for when it replays.
    fn retire_if_deleted(&mut self, entry: &Entry) -> bool {
        let Ok(stand_in) = iggy_generated::storage::StowedBatch::decode_fixed(&entry.body) else {
            return false;
        };
        if stand_in.base_offset >= self.log.first_offset() {
            return false;
        }
        self.retired
            .insert(entry.op, (stand_in.base_offset, stand_in.message_count));
        true
    }

    /// The op `entry` as journaled, its body read back from the log where `stow` put it;
    /// `None` when the log does not hold that batch (lost with the machine, or damaged).
    async fn unstow(&self, entry: &Entry) -> Option<Entry> {
        let stand_in = iggy_generated::storage::StowedBatch::decode_fixed(&entry.body).ok()?;
        let mut record = match self
            .log
            .record_at(stand_in.base_offset, stand_in.length)
            .await
        {
            Ok(record) => record?,
            Err(error) => {
                tracing::error!("partition {}: {error}", self.partition_id);
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

    /// Whether `owner` is a group (kind 2 or 3) deleted after the metadata op `resolved_at`
    /// its offset write was resolved at.
    fn group_deleted_after(&self, owner: OffsetOwner, resolved_at: u64) -> bool {
        let group = match owner {
            OffsetOwner::Consumer(_) => return false,
            OffsetOwner::Group(group) | OffsetOwner::External(group) => group,
        };
        self.group_deletions
            .get(&group)
            .is_some_and(|deleted| *deleted > resolved_at)
    }

    /// The offset after the last applied send: a stowed batch is in the log before its op
    /// commits, and is not served until then.
    fn committed_next_offset(&self) -> u64 {
        self.replay_next_offset.min(self.log.next_offset())
    }

    fn current_offset(&self) -> u64 {
        self.committed_next_offset().saturating_sub(1)
    }

    /// Applies a send; `stowed` when its batch went to the log as the op was prepared.
    async fn send(&mut self, batch: &Bytes, stowed: bool) -> WriteResult {
        let Ok(header) = iggy_generated::frames::BatchHeader::decode_fixed(batch) else {
            return WriteResult::Failed(ErrorCode::InvalidMessagesSize);
        };
        let base_offset = self.replay_next_offset;
        if stowed {
            // Written to the log when it was prepared, its layout checked then.
            let count = header.message_count;
            self.replay_next_offset += u64::from(count);
            return WriteResult::Appended { base_offset, count };
        }
        let Ok(batch) = batch::ValidBatch::check(batch.clone()) else {
            return WriteResult::Failed(ErrorCode::InvalidMessagesSize);
        };
        let count = batch.count();
        if base_offset < self.log.next_offset() {
            // A journal replay of a batch that reached the log before the restart.
            self.replay_next_offset += u64::from(count);
            return WriteResult::Appended { base_offset, count };
        }
        // Stored from the received buffer: only the stamped header is new. The primary
        // stamped the time before journaling the batch.
        let appended = self
            .log
            .append_batch(
                &batch,
                u64::from(self.partition_id),
                base_offset,
                header.base_timestamp,
            )
            .await;
        match appended {
            Ok(()) => {
                self.replay_next_offset += u64::from(count);
                WriteResult::Appended { base_offset, count }
            }
            Err(error) => {
                tracing::error!("partition {}: append failed: {error}", self.partition_id);
                WriteResult::Failed(ErrorCode::CannotAppendMessage)
            }
        }
    }

    async fn poll(&mut self, start: StartAt, count: u32) -> Result<Polled, ErrorCode> {
        let next = self.committed_next_offset();
        let first = self.log.first_offset();
        let start = match start {
            StartAt::Offset(offset) => offset,
            StartAt::Timestamp(timestamp) => {
                self.log.offset_at_timestamp(timestamp).unwrap_or(next)
            }
            StartAt::First => first,
            StartAt::Last => next.saturating_sub(u64::from(count)).max(first),
            StartAt::Next(owner) => self.offsets.get(&owner).map_or(first, |stored| stored + 1),
        };
        let current_offset = self.current_offset();
        if start >= next || count == 0 {
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
        let start = start.max(first);
        let count = count.min(u32::try_from(next - start).unwrap_or(u32::MAX));
        let batches = self
            .log
            .read_from_with_headroom(start, count, POLL_REPLY_HEADROOM)
            .await
            .map_err(|error| {
                tracing::error!("partition {}: read failed: {error}", self.partition_id);
                ErrorCode::CannotReadMessage
            })?;
        Ok(Polled {
            batches,
            current_offset,
        })
    }
}

impl StateMachine for PartitionMachine {
    type Read = PartitionRead;

    async fn apply(&mut self, op: u64, _client: u128, operation: u8, body: Bytes) -> Bytes {
        let mut stowed = false;
        while let Some(&(stowed_op, _)) = self.stowed.front()
            && stowed_op <= op
        {
            stowed |= stowed_op == op;
            self.stowed.pop_front();
        }
        if let Some((base_offset, count)) = self.retired.remove(&op) {
            // Accounted for, not appended: its segment is gone. A record from before the
            // stand-in carried the count knows only that the batch lies below the log.
            let next = match count {
                0 => self.log.first_offset(),
                count => base_offset + u64::from(count),
            };
            self.replay_next_offset = self.replay_next_offset.max(next);
            self.publish();
            return WriteResult::Appended { base_offset, count }.encode();
        }
        let result = match PartitionWrite::decode(operation, &body) {
            Some(PartitionWrite::Send { batch }) => self.send(&batch, stowed).await,
            Some(PartitionWrite::StoreOffset {
                owner,
                offset,
                resolved_at,
            }) => {
                if self.group_deleted_after(owner, resolved_at) {
                    WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
                } else {
                    self.offsets.insert(owner, offset);
                    WriteResult::Done
                }
            }
            Some(PartitionWrite::DeleteOffset { owner, resolved_at }) => {
                if self.group_deleted_after(owner, resolved_at) {
                    WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
                } else if self.offsets.remove(&owner).is_some() {
                    WriteResult::Done
                } else {
                    WriteResult::Failed(ErrorCode::ConsumerOffsetNotFound)
                }
            }
            Some(PartitionWrite::DeleteGroupOffsets { group, metadata_op }) => {
                let latest = self.group_deletions.get(&group).copied().unwrap_or(0);
                if metadata_op > self.created_at_op && metadata_op > latest {
                    self.group_deletions.insert(group, metadata_op);
                    self.offsets.remove(&OffsetOwner::Group(group));
                    self.offsets.remove(&OffsetOwner::External(group));
                }
                WriteResult::Done
            }
            Some(PartitionWrite::RetireSegments { keep_from }) => {
                let deleted = self.log.retire_below(keep_from).await;
                if deleted > 0 {
                    tracing::info!(
                        "partition {}: deleted {deleted} segments below offset {keep_from}",
                        self.partition_id
                    );
                }
                WriteResult::Done
            }
            None => WriteResult::Failed(ErrorCode::InvalidCommand),
        };
        self.publish();
        result.encode()
    }

    fn registered(&mut self, _op: u64, _client: u128, _body: &Bytes) {}

    /// A send's batch goes to the log now, stamped with the offsets it takes (ops are prepared
    /// in order, so those are the offsets its apply assigns), and the journal keeps a 48-byte
    /// stand-in: the batch is written once. Its apply then finds it in the log.
    async fn stow(&mut self, entry: &Entry) -> std::io::Result<Option<Bytes>> {
        if Operation::from_repr(entry.operation) != Some(Operation::SendMessages) {
            return Ok(None);
        }
        // A batch the apply refuses is journaled as it came.
        let batch = batch::ValidBatch::check(entry.body.clone());
        let header = iggy_generated::frames::BatchHeader::decode_fixed(&entry.body);
        let (Ok(batch), Ok(header)) = (batch, header) else {
            return Ok(None);
        };
        if batch.count() == 0 {
            return Ok(None);
        }
        let base_offset = self.log.next_offset();
        self.log
            .append_batch(
                &batch,
                u64::from(self.partition_id),
                base_offset,
                header.base_timestamp,
            )
            .await
            .map_err(std::io::Error::other)?;
        self.stowed.push_back((entry.op, base_offset));
        let stand_in = iggy_generated::storage::StowedBatch {
            base_offset,
            length: entry.body.len() as u64,
            received_partition_id: header.partition_id,
            received_base_offset: header.base_offset,
            received_checksum: header.batch_checksum,
            message_count: batch.count(),
            ..Default::default()
        };
        Ok(Some(Bytes::copy_from_slice(&stand_in.to_bytes())))
    }

    async fn sync_stowed(&mut self) -> std::io::Result<()> {
        self.log.sync_records().await;
        Ok(())
    }

    async fn unstow_after(&mut self, op: u64) -> std::io::Result<()> {
        let Some(first) = self.stowed.iter().position(|(stowed, _)| *stowed > op) else {
            return Ok(());
        };
        let from = self.stowed[first].1;
        self.stowed.truncate(first);
        self.log
            .truncate_from(from)
            .await
            .map_err(std::io::Error::other)
    }

    async fn checkpoint(&mut self) -> std::io::Result<Vec<u8>> {
        // Under the persisted policy the journal being emptied is the fsynced copy: the segments
        // must be durable first. Under the replicated policy acknowledged writes only have to
        // survive a process crash, which the page cache does, so no fsync stalls the partition.
        if self.sync_on_checkpoint {
            self.log.sync().await;
        }
        Ok(self.encode_state())
    }

    async fn replayed(&mut self) {
        self.publish();
        // Messages in the log that no journaled op accounts for were never acknowledged (their
        // journal write was lost with the machine): drop them so offsets and the client table
        // agree.
        if self.log.next_offset() > self.replay_next_offset {
            tracing::warn!(
                "partition {}: dropping offsets {}..{} that no journaled op accounts for",
                self.partition_id,
                self.replay_next_offset,
                self.log.next_offset()
            );
            if let Err(error) = self.log.truncate_from(self.replay_next_offset).await {
                tracing::error!("partition {}: cannot truncate: {error}", self.partition_id);
            }
        }
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
            PartitionRead::Messages { start, count, done } => {
                let _ = done.send(self.poll(start, count).await);
            }
            PartitionRead::Offset { owner, done } => {
                let _ = done.send((self.current_offset(), self.offsets.get(&owner).copied()));
            }
            PartitionRead::PlanRetention {
                now,
                message_expiry_us,
                max_size,
                done,
            } => {
                let _ = done.send(self.log.retention_point(now, message_expiry_us, max_size));
            }
            PartitionRead::Sync { done } => {
                self.log.sync().await;
                let _ = done.send(());
            }
            PartitionRead::PlanSegmentRetirement { count, done } => {
                // External groups' offsets hold nothing back: Iggy does not manage their
                // consumers, and their offsets may lie anywhere.
                let keep_after = self
                    .offsets
                    .iter()
                    .filter(|(owner, _)| !matches!(owner, OffsetOwner::External(_)))
                    .map(|(_, offset)| *offset)
                    .min()
                    .unwrap_or(u64::MAX);
                let _ = done.send(self.log.retire_point(count, keep_after));
            }
        }
    }
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
        (journal_bytes, journal_ops): (u64, usize),
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
        let log = PartitionLog::open(dir, config).await?;
        let start = load_checkpoint(dir).await?;
        let stats = Arc::new(PartitionFigures::default());
        let mut machine = PartitionMachine {
            partition_id,
            stats: stats.clone(),
            persist_messages,
            persist_offsets,
            sync_on_checkpoint: persist_messages
                || persist_offsets
                || durability == Durability::Persisted,
            log,
            offsets: BTreeMap::new(),
            created_at_op: incarnation >> 20,
            group_deletions: BTreeMap::new(),
            replay_next_offset: 0,
            stowed: VecDeque::new(),
            retired: HashMap::new(),
        };
        let checkpoint = match start.checkpoint {
            Some(loaded) => {
                machine.restore(&loaded.state).map_err(|why| {
                    io(&loaded.path)(std::io::Error::new(std::io::ErrorKind::InvalidData, why))
                })?;
                Some(loaded.replica)
            }
            None => None,
        };
        let (mut journal, recovered) = FileJournal::open_after_checkpoint(
            &journal_path,
            Anchor::after(checkpoint.as_ref()),
            &start.damaged,
        )
        .await
        .map_err(io(&journal_path))?;
        let mut entries = Vec::with_capacity(recovered.len());
        for record in recovered {
            let entry = match record {
                JournalEntry::Whole(entry) => entry,
                JournalEntry::Stowed(stand_in) if machine.retire_if_deleted(&stand_in) => stand_in,
                JournalEntry::Stowed(stand_in) => match machine.unstow(&stand_in).await {
                    Some(entry) => entry,
                    None => {
                        // Written to the log before its journal record, so only a machine crash
                        // under the replicated policy (which may lose acknowledged writes) or
                        // damage leaves a record without its batch: the journal ends there.
                        tracing::warn!(
                            "partition {}: journal op {} names a batch the log does not hold; the journal ends before it",
                            dir.display(),
                            stand_in.op
                        );
                        journal.truncate_after(stand_in.op - 1).await;
                        break;
                    }
                },
            };
            entries.push(entry);
        }
        let checkpointing = Checkpointing {
            slots: start.slots,
            journal_bytes,
            journal_ops,
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
        )
        .await;
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
        match self
            .group
            .submit(client, request, write.operation(), write.encode())
            .await
        {
            Outcome::Committed { op, reply } => Ok((op, WriteResult::decode(&reply))),
            Outcome::Refused(refusal) => Err(crate::consensus::group::refusal_error(&refusal)),
            Outcome::Failed => Err(ErrorCode::CannotAppendMessage),
        }
    }

    pub async fn poll(&self, start: StartAt, count: u32) -> Result<Polled, ErrorCode> {
        let (done, wait) = oneshot::channel();
        if !self
            .group
            .read(PartitionRead::Messages { start, count, done })
        {
            return Err(ErrorCode::PartitionNotFound);
        }
        wait.await.unwrap_or(Err(ErrorCode::PartitionNotFound))
    }

    pub async fn offset(&self, owner: OffsetOwner) -> Option<(u64, Option<u64>)> {
        let (done, wait) = oneshot::channel();
        if !self.group.read(PartitionRead::Offset { owner, done }) {
            return None;
        }
        wait.await.ok()
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
        let write = PartitionWrite::RetireSegments { keep_from };
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

    /// The offset a deletion of up to `count` of the oldest segments keeps the log from.
    pub async fn plan_segment_retirement(&self, count: u32) -> Result<u64, ErrorCode> {
        let (done, wait) = oneshot::channel();
        if !self
            .group
            .read(PartitionRead::PlanSegmentRetirement { count, done })
        {
            return Err(ErrorCode::PartitionNotFound);
        }
        wait.await.map_err(|_| ErrorCode::PartitionNotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn machine(dir: &Path, created_at_op: u64) -> PartitionMachine {
        let config = LogConfig {
            segment_size: 1 << 20,
        };
        PartitionMachine {
            partition_id: 0,
            stats: Arc::new(PartitionFigures::default()),
            persist_messages: false,
            persist_offsets: false,
            sync_on_checkpoint: false,
            log: PartitionLog::open(dir, config).await.unwrap(),
            offsets: BTreeMap::new(),
            created_at_op,
            group_deletions: BTreeMap::new(),
            replay_next_offset: 0,
            stowed: VecDeque::new(),
            retired: HashMap::new(),
        }
    }

    async fn apply(machine: &mut PartitionMachine, op: u64, write: PartitionWrite) -> WriteResult {
        let reply = machine
            .apply(op, 1, write.operation(), write.encode())
            .await;
        WriteResult::decode(&reply)
    }

    /// A store whose owner was resolved at metadata op `resolved_at`.
    fn store(owner: OffsetOwner, offset: u64, resolved_at: u64) -> PartitionWrite {
        PartitionWrite::StoreOffset {
            owner,
            offset,
            resolved_at,
        }
    }

    fn delete_group(group: u32, metadata_op: u64) -> PartitionWrite {
        PartitionWrite::DeleteGroupOffsets { group, metadata_op }
    }

    #[test]
    fn offset_owner_kinds_1_and_2_keep_their_encoding_and_kind_3_is_its_own() {
        let id = 0x0102_0304u32;
        for (owner, kind) in [
            (OffsetOwner::Consumer(id), 1u8),
            (OffsetOwner::Group(id), 2),
            (OffsetOwner::External(id), 3),
        ] {
            let bytes = owner.record().to_wire_bytes();
            assert_eq!(bytes[..], [kind, 4, 3, 2, 1]);
            let record = OffsetOwnerRecord::decode_fixed(&bytes).unwrap();
            assert_eq!(OffsetOwner::of(record), owner);
        }
        assert!(OffsetOwnerRecord::decode_fixed(&[4, 0, 0, 0, 0]).is_err());
        let write = delete_group(7, 1 << 40);
        let decoded = PartitionWrite::decode(write.operation(), &write.encode());
        assert!(matches!(
            decoded,
            Some(PartitionWrite::DeleteGroupOffsets { group: 7, metadata_op }) if metadata_op == 1 << 40
        ));
    }

    #[test]
    fn offset_writes_journaled_before_resolved_at_existed_still_decode() {
        let operation = Operation::StoreConsumerOffset.to_repr();
        let old = Bytes::from_static(&[3, 9, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(
            PartitionWrite::decode(operation, &old),
            Some(PartitionWrite::StoreOffset {
                owner: OffsetOwner::External(9),
                offset: 42,
                resolved_at: u64::MAX
            })
        ));
        let new = store(OffsetOwner::Group(9), 42, 77);
        assert!(matches!(
            PartitionWrite::decode(operation, &new.encode()),
            Some(PartitionWrite::StoreOffset {
                owner: OffsetOwner::Group(9),
                offset: 42,
                resolved_at: 77
            })
        ));
        let operation = Operation::DeleteConsumerOffset.to_repr();
        let old = Bytes::from_static(&[2, 9, 0, 0, 0]);
        assert!(matches!(
            PartitionWrite::decode(operation, &old),
            Some(PartitionWrite::DeleteOffset {
                owner: OffsetOwner::Group(9),
                resolved_at: u64::MAX
            })
        ));
    }

    #[compio::test]
    async fn a_group_deletion_removes_both_slots_once_and_never_a_later_groups_offsets() {
        let dir = tempfile::tempdir().unwrap();
        // The partition was created by metadata op 3.
        let mut machine = machine(dir.path(), 3).await;
        apply(&mut machine, 1, store(OffsetOwner::Group(0), 4, 5)).await;
        apply(&mut machine, 2, store(OffsetOwner::External(0), 900, 5)).await;
        apply(&mut machine, 3, store(OffsetOwner::External(1), 5, 5)).await;
        assert_eq!(
            machine.offsets.len(),
            3,
            "kind 2 and kind 3 are separate slots"
        );
        // Older than the partition: nothing of it can be here.
        apply(&mut machine, 4, delete_group(0, 2)).await;
        assert_eq!(machine.offsets.len(), 3);
        apply(&mut machine, 5, delete_group(0, 10)).await;
        assert_eq!(
            machine.offsets.keys().copied().collect::<Vec<_>>(),
            vec![OffsetOwner::External(1)],
            "group 0's kind-2 and kind-3 offsets went, group 1's stayed"
        );
        // A write resolved before the deletion (in flight across it) is refused.
        assert_eq!(
            apply(&mut machine, 6, store(OffsetOwner::Group(0), 7, 9)).await,
            WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
        );
        let delete = PartitionWrite::DeleteOffset {
            owner: OffsetOwner::External(0),
            resolved_at: 9,
        };
        assert_eq!(
            apply(&mut machine, 7, delete).await,
            WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
        );
        assert_eq!(machine.offsets.get(&OffsetOwner::Group(0)), None);
        // A group created later with id 0 stores again; the same deletion submitted again (a
        // restart finishing it) and an older one change nothing.
        apply(&mut machine, 8, store(OffsetOwner::External(0), 12, 11)).await;
        apply(&mut machine, 9, delete_group(0, 10)).await;
        apply(&mut machine, 10, delete_group(0, 9)).await;
        assert_eq!(machine.offsets.get(&OffsetOwner::External(0)), Some(&12));
        // Group 1's deletion is its own.
        apply(&mut machine, 11, delete_group(1, 8)).await;
        assert_eq!(machine.offsets.get(&OffsetOwner::External(1)), None);
        assert_eq!(machine.offsets.get(&OffsetOwner::External(0)), Some(&12));
        apply(&mut machine, 12, delete_group(0, 12)).await;
        assert_eq!(machine.offsets.get(&OffsetOwner::External(0)), None);
        // Plain consumers are never refused.
        assert_eq!(
            apply(&mut machine, 13, store(OffsetOwner::Consumer(0), 1, 0)).await,
            WriteResult::Done
        );
    }

    #[compio::test]
    async fn checkpoint_state_keeps_kind_3_and_the_group_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let mut machine = machine(dir.path(), 0).await;
        apply(&mut machine, 1, store(OffsetOwner::Group(0), 4, 1)).await;
        apply(
            &mut machine,
            2,
            store(OffsetOwner::External(0), u64::MAX, 1),
        )
        .await;
        apply(&mut machine, 3, store(OffsetOwner::Consumer(9), 1, 1)).await;
        apply(&mut machine, 4, delete_group(5, 40)).await;
        apply(&mut machine, 5, delete_group(6, 41)).await;
        let state = machine.encode_state();

        let other = tempfile::tempdir().unwrap();
        let mut restored = self::machine(other.path(), 0).await;
        restored.restore(&state).unwrap();
        assert_eq!(restored.offsets, machine.offsets);
        assert_eq!(restored.group_deletions, machine.group_deletions);
        apply(&mut restored, 6, store(OffsetOwner::External(5), 1, 45)).await;
        apply(&mut restored, 7, delete_group(5, 40)).await;
        assert_eq!(restored.offsets.get(&OffsetOwner::External(5)), Some(&1));

        // A checkpoint written before the group deletions were kept.
        let old = &state[..state.len() - 4 - 2 * 12];
        let third = tempfile::tempdir().unwrap();
        let mut restored = self::machine(third.path(), 0).await;
        restored.restore(old).unwrap();
        assert_eq!(restored.offsets, machine.offsets);
        assert!(restored.group_deletions.is_empty());
        // A truncated deletion record is refused.
        let mut torn = state.clone();
        torn.truncate(state.len() - 1);
        let fourth = tempfile::tempdir().unwrap();
        assert!(
            self::machine(fourth.path(), 0)
                .await
                .restore(&torn)
                .is_err()
        );
    }
}
