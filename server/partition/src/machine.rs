//! The partition's state machine: what a committed op does to the consumer offsets, the group
//! deletions and the offsets the log has handed out, and what it asks of the log. The shell
//! reports the log's facts through [`Log`], carries out what a call returns ([`Applied`],
//! [`Stow`], a truncation point) and reports back where the core needs to know it happened
//! ([`Partition::appended`], [`Partition::stowed`]).

use crate::checkpoint::{CheckpointState, KeptOffset};
use crate::write::{
    CREATED_AT_UNKNOWN, KEYS_UNLIMITED, OffsetOwner, PartitionWrite, RESOLVED_AT_UNKNOWN,
    WriteResult,
};
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{BatchHeader, Operation};
use iggy_generated::storage::StowedBatch;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What the core reads from the partition's log: facts, never I/O.
pub trait Log {
    /// A batch whose frames the log checked against its record layout, in the form its append
    /// takes (so the frames are walked once).
    type Batch;
    /// The offset after the last message the log holds (stowed sends included).
    fn next_offset(&self) -> u64;
    /// The first offset the log still holds (segments below it were retired).
    fn first_offset(&self) -> u64;
    /// The base offset of the first batch stamped at or after `timestamp` (microseconds).
    fn offset_at_timestamp(&self, timestamp: u64) -> Option<u64>;
    /// `batch` checked against the log's record layout, with its message count; `None` when its
    /// frames do not tile it.
    fn check(&self, batch: Bytes) -> Option<(Self::Batch, u32)>;
}

/// What a committed op asks of the log.
#[derive(Debug)]
pub enum Applied<B> {
    /// Nothing: the reply is decided.
    Reply(WriteResult),
    /// A send journaled whole (a replay of an older journal): append `batch` at `base_offset`
    /// with the primary's `base_timestamp`, then report it with [`Partition::appended`], which
    /// gives the reply. A failed append replies `CannotAppendMessage` and changes nothing.
    Append {
        batch: B,
        base_offset: u64,
        base_timestamp: u64,
    },
    /// Retire every closed segment whose messages all lie below `keep_from`; the reply is
    /// [`WriteResult::Done`] whatever it removes, so applying it twice deletes nothing more.
    Retire { keep_from: u64 },
}

/// A send to write to the log as it is prepared, before its journal record: append `batch` at
/// `base_offset`, report it with [`Partition::stowed`], and journal `stand_in` instead of the
/// body.
#[derive(Debug)]
pub struct Stow<B> {
    pub batch: B,
    pub base_offset: u64,
    pub base_timestamp: u64,
    /// Messages in the batch.
    pub count: u32,
    /// The spec's 48-byte `StowedBatch`.
    pub stand_in: Bytes,
}

/// Where a poll starts.
#[derive(Debug, Clone, Copy)]
pub enum StartAt {
    Offset(u64),
    Timestamp(u64),
    First,
    /// The last `count` messages.
    Last,
    /// After the owner's stored offset (or the first message), as [`Partition::offset`] reads
    /// it.
    Next {
        owner: OffsetOwner,
        owner_created_at_op: u64,
    },
}

/// What a poll reads: `count` messages from `start`, or nothing when `count` is 0.
/// `current_offset` is the last committed offset (0 when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollRange {
    pub start: u64,
    pub count: u32,
    pub current_offset: u64,
}

/// The partition's replicated state.
#[derive(Debug)]
pub struct Partition {
    /// The metadata op that created this incarnation of the partition: no group deleted
    /// before it has offsets here.
    created_at_op: u64,
    /// The consumer offsets, the group deletions applied (per group id, the metadata op of its
    /// latest deletion: a [`PartitionWrite::DeleteGroupOffsets`] at or below it changes
    /// nothing, and an offset write for that id resolved before it is refused; so is a store
    /// of a group created before the one whose offset is kept), and the offset after the last
    /// applied send. Ops replayed from the journal whose messages are
    /// already in the log (written before a restart) are not appended again.
    state: CheckpointState,
    /// Sends whose batch went to the log before their journal record (`stow`) and that are not
    /// applied yet: (op, base offset, offset after its last message), so a journal truncation
    /// can take them back.
    stowed: VecDeque<(u64, u64, u64)>,
    /// Journaled sends found at recovery whose batch a later segment deletion (DeleteSegments
    /// or retention) removed: op → (base offset, message count). Their apply only accounts
    /// for the offsets they took.
    retired: HashMap<u64, (u64, u32)>,
    /// The clients the op being applied retires (see [`Partition::take_retired`]).
    retired_sessions: Vec<u128>,
    /// In a group of more than one: how far a retirement may delete (see
    /// [`Partition::retirable_below`]); `None` in a group of one, which deletes what it plans.
    retirable: Option<Retirable>,
    /// The last op applied (or the checkpoint's restored; its effects on the offsets are
    /// complete between applies): a retirement planned now names it.
    applied: u64,
}

/// How far a retirement may delete: offsets below `floor` belong to ops the group lets a
/// retirement delete (see [`Partition::may_retire_through`]), so deleting them leaves no replica
/// that catches up by repair asking for a batch that is gone.
#[derive(Debug, Default)]
struct Retirable {
    floor: u64,
    /// (op, next offset once every op up to it applied), oldest first, above the floor's op.
    ends: VecDeque<(u64, u64)>,
}

impl Partition {
    /// An empty partition created by the metadata op `created_at_op`.
    pub fn new(created_at_op: u64) -> Partition {
        Partition {
            created_at_op,
            state: CheckpointState::default(),
            stowed: VecDeque::new(),
            retired: HashMap::new(),
            retired_sessions: Vec::new(),
            retirable: None,
            applied: 0,
        }
    }

    /// A partition whose group has other replicas: a retirement plan never deletes past what
    /// the group allows (see [`Partition::may_retire_through`]).
    pub fn bound_retirement_by_replicas(&mut self) {
        self.retirable = Some(Retirable::default());
    }

    /// The state was restored from a checkpoint at `op` (a start, or a state transfer): its
    /// offsets are retirable once the group allows `op` (not known yet here).
    pub fn restored_at(&mut self, op: u64) {
        self.applied = op;
        if let Some(retirable) = self.retirable.as_mut() {
            retirable.ends.clear();
            retirable.ends.push_back((op, self.state.next_offset));
        }
    }

    /// A retirement may delete the messages of the ops up to `op` (the group's
    /// `retirable_through`): every replica holds them, or the group checkpointed past those
    /// that do not, which catch up by state transfer (restarting their log at the first kept
    /// segment when the group retired what they lack).
    pub fn may_retire_through(&mut self, op: u64) {
        let Some(retirable) = self.retirable.as_mut() else {
            return;
        };
        while let Some(&(end_op, next)) = retirable.ends.front()
            && end_op <= op
        {
            retirable.floor = retirable.floor.max(next);
            retirable.ends.pop_front();
        }
        if op >= self.applied {
            retirable.floor = retirable.floor.max(self.state.next_offset);
        }
    }

    /// The offset below which a retirement may delete: in a group of more than one, only
    /// batches of the ops the group allows (see [`Partition::may_retire_through`]: a backup
    /// catching up by repair reads the others' copies of the rest); unbounded in a group of one.
    pub fn retirable_below(&self) -> u64 {
        self.retirable
            .as_ref()
            .map_or(u64::MAX, |retirable| retirable.floor)
    }

    /// The clients whose writer slots the op just applied retired (a `RetireSessions`): the
    /// group frees their client-table rows with that op.
    pub fn take_retired(&mut self) -> Vec<u128> {
        std::mem::take(&mut self.retired_sessions)
    }

    /// The offsets stored for consumers and groups.
    pub fn offsets(&self) -> BTreeMap<OffsetOwner, u64> {
        self.state
            .offsets
            .iter()
            .map(|(owner, kept)| (*owner, kept.offset))
            .collect()
    }

    /// The offset stored for `owner`, which the metadata op `owner_created_at_op` created (a
    /// consumer group's creation op; 0 for a consumer, or when unknown). An offset another
    /// instance of the group id stored (see [`of_instance`]: an earlier group with that id
    /// whose deletion has not reached this partition yet, which a sweep removes, or a later
    /// one when the reader resolved a deleted group) is not the owner's, so none is.
    pub fn offset(&self, owner: OffsetOwner, owner_created_at_op: u64) -> Option<u64> {
        let kept = self.state.offsets.get(&owner)?;
        of_instance(kept, owner_created_at_op).then_some(kept.offset)
    }

    /// The group offsets here that belong to no live group of the topic, as the deletions
    /// that remove them: (group id, metadata op to name in its
    /// [`PartitionWrite::DeleteGroupOffsets`]). `live_groups` maps each consumer group of the
    /// topic in the metadata model as of op `metadata_op` to the op that created it (0 when
    /// unknown). Orphaned are the offsets of a group id not live at `metadata_op` (deleted, by
    /// an op whose own deletion never reached this partition), named by `metadata_op`, and
    /// those of a live id stored by a group created before the live one (by the creation op
    /// the offset keeps, or where unknown resolved before the live group's creation: a
    /// deleted group's that a later one with the same id would otherwise inherit), named by
    /// that creation op. Only a deletion that would remove an offset is listed, so a sweep
    /// that finds nothing to do proposes nothing; an offset resolved at an unknown op under a
    /// live group is kept.
    pub fn orphaned_group_offsets(
        &self,
        live_groups: &BTreeMap<u32, u64>,
        metadata_op: u64,
    ) -> Vec<(u32, u64)> {
        let mut deletions: BTreeMap<u32, u64> = BTreeMap::new();
        for (owner, kept) in &self.state.offsets {
            if let Some((group, deletion)) =
                self.orphaned_by(*owner, kept, live_groups, metadata_op)
            {
                deletions.insert(group, deletion);
            }
        }
        deletions.into_iter().collect()
    }

    /// The deletion (group id, metadata op) that removes `kept`, `owner`'s offset, when no
    /// live group owns it (see [`Self::orphaned_group_offsets`]).
    fn orphaned_by(
        &self,
        owner: OffsetOwner,
        kept: &KeptOffset,
        live_groups: &BTreeMap<u32, u64>,
        metadata_op: u64,
    ) -> Option<(u32, u64)> {
        let group = match owner {
            OffsetOwner::Consumer(_) => return None,
            OffsetOwner::Group(group) | OffsetOwner::External(group) => group,
        };
        let deletion = match live_groups.get(&group) {
            None => metadata_op,
            Some(&created_at) if stored_before(kept, created_at) => created_at,
            Some(_) => return None,
        };
        (self.group_deletion_applies(group, deletion) && removed_by(kept, deletion))
            .then_some((group, deletion))
    }

    /// Whether a [`PartitionWrite::DeleteGroupOffsets`] of `group` at `metadata_op` changes
    /// anything: it is later than the partition's creation and than the group's latest
    /// deletion applied here.
    fn group_deletion_applies(&self, group: u32, metadata_op: u64) -> bool {
        let latest = self.state.group_deletions.get(&group).copied();
        metadata_op > self.created_at_op && metadata_op > latest.unwrap_or(0)
    }

    /// The state a checkpoint keeps besides the log itself (the spec's
    /// `PartitionCheckpointState`): the next offset, the consumer offsets and the group
    /// deletions applied.
    pub fn encode_state(&self) -> Vec<u8> {
        self.state.encode()
    }

    /// Restores a checkpoint's `state` over a log ending at `log_next_offset`. `Ok(Some(next))`
    /// when the checkpoint counted offsets up to `next` that the log no longer holds: only a
    /// machine crash under the replicated policy loses segment pages a checkpoint counted; that
    /// policy does not promise them, and the log is what is left.
    pub fn restore(&mut self, state: &[u8], log_next_offset: u64) -> Result<Option<u64>, String> {
        let CheckpointState {
            next_offset,
            offsets,
            group_deletions,
        } = CheckpointState::decode(state)?;
        self.state.offsets.extend(offsets);
        self.state.group_deletions.extend(group_deletions);
        self.state.next_offset = next_offset.min(log_next_offset);
        Ok((next_offset > log_next_offset).then_some(next_offset))
    }

    /// Whether the journal's stand-in for op `op` (`body`) names a batch below the log's first
    /// retained offset: its segment was deleted after the op (DeleteSegments or retention), so
    /// the batch is not lost but retired, and its apply accounts for the offsets it took.
    pub fn retire_if_deleted(&mut self, op: u64, body: &[u8], log_first_offset: u64) -> bool {
        let Ok(stand_in) = StowedBatch::decode_fixed(body) else {
            return false;
        };
        if stand_in.base_offset >= log_first_offset {
            return false;
        }
        self.retired
            .insert(op, (stand_in.base_offset, stand_in.message_count));
        true
    }

    /// Whether the offset kept for `owner` is a later instance's of its group id than the one
    /// the metadata op `owner_created_at` created: that instance was deleted (its deletion
    /// has not reached this partition yet), and its store must not replace the later group's.
    fn superseded(&self, owner: OffsetOwner, owner_created_at: u64) -> bool {
        self.state.offsets.get(&owner).is_some_and(|kept| {
            owner_created_at != CREATED_AT_UNKNOWN && owner_created_at < kept.created_at
        })
    }

    /// Whether `owner` is a group (kind 2 or 3) deleted after the metadata op `resolved_at`
    /// its offset write was resolved at.
    fn group_deleted_after(&self, owner: OffsetOwner, resolved_at: u64) -> bool {
        let group = match owner {
            OffsetOwner::Consumer(_) => return false,
            OffsetOwner::Group(group) | OffsetOwner::External(group) => group,
        };
        self.state
            .group_deletions
            .get(&group)
            .is_some_and(|deleted| *deleted > resolved_at)
    }

    /// The offset after the last applied send: a stowed batch is in the log before its op
    /// commits, and is not served until then.
    pub fn committed_next_offset(&self, log_next_offset: u64) -> u64 {
        self.state.next_offset.min(log_next_offset)
    }

    /// Receiving a state transfer whose state ends at offset `until`, over a log holding
    /// `[first_offset, log_next_offset)`: where the log continues from (the shell truncates it
    /// there, then copies the peer's records up to `until`). That is the committed end, or the
    /// log's first offset when it lies above it: a retirement applied before a restart deleted
    /// the offsets below it, and the committed end known now is the checkpoint's until the
    /// replica rejoins, so the retired messages stay deleted rather than coming back from a
    /// peer that still holds them. A first offset past `until` (a transfer restarted the log
    /// at a peer's first offset, then the replica restarted before installing the state) means
    /// a committed retirement deleted every offset below it: the log restarts empty at `until`
    /// and nothing is copied, rather than bringing those messages back from the peer.
    /// Refused when this replica committed past `until`.
    pub fn transfer_continues_from(
        &self,
        first_offset: u64,
        log_next_offset: u64,
        until: u64,
    ) -> Result<u64, String> {
        let committed = self.committed_next_offset(log_next_offset);
        if committed > until {
            return Err(format!(
                "this replica committed offsets up to {committed}, past the checkpoint's {until}"
            ));
        }
        Ok(match first_offset <= until {
            true => committed.max(first_offset),
            false => until,
        })
    }

    /// Whether the primary prepares a write of `operation` with `body` at all, judged by the
    /// ops committed through `committed` over a log ending at `log_next_offset`: a consumer's
    /// or a consumer group's stored offset names a message the partition holds, as upstream has
    /// it (a partition that never held one takes none: 0 stored there would skip its first
    /// message); an external group's (kind 3) may exceed the range. Judged where the write is
    /// prepared, so a write a backup relays (an HTTP client's, which cannot route) is judged by
    /// the primary's copy, never by the backup's lagging one; and not at apply, so ops
    /// journaled before the rule existed apply as they committed. Committed sends count before
    /// the primary applied them: a backup may have applied and served them already.
    pub fn admits(
        &self,
        operation: u8,
        body: &[u8],
        committed: u64,
        log_next_offset: u64,
    ) -> Result<(), ErrorCode> {
        if operation != Operation::StoreConsumerOffset.to_repr() {
            return Ok(());
        }
        let body = Bytes::copy_from_slice(body);
        match PartitionWrite::decode(operation, &body) {
            Some(PartitionWrite::StoreOffset { owner, offset, .. })
                if !matches!(owner, OffsetOwner::External(_))
                    && offset >= self.committed_end(committed, log_next_offset) =>
            {
                Err(ErrorCode::InvalidOffset)
            }
            _ => Ok(()),
        }
    }

    /// The offset after the last send committed through `committed`: the applied ones', or a
    /// stowed batch's whose op committed and is not applied yet.
    fn committed_end(&self, committed: u64, log_next_offset: u64) -> u64 {
        let stowed = self.stowed.iter().take_while(|(op, ..)| *op <= committed);
        let stowed_end = stowed.map(|(.., end)| *end).max().unwrap_or(0);
        self.state.next_offset.max(stowed_end).min(log_next_offset)
    }

    /// The last committed offset (0 when empty).
    pub fn current_offset(&self, log_next_offset: u64) -> u64 {
        self.committed_next_offset(log_next_offset)
            .saturating_sub(1)
    }

    /// Applies the committed `op` of `operation` with its journaled `body`.
    pub fn apply<L: Log>(
        &mut self,
        op: u64,
        operation: u8,
        body: &Bytes,
        log: &L,
    ) -> Applied<L::Batch> {
        // Ops apply in order: the state now is every op up to `op - 1`.
        self.applied = op;
        if let Some(retirable) = self.retirable.as_mut()
            && retirable
                .ends
                .back()
                .is_none_or(|(_, next)| *next != self.state.next_offset)
        {
            retirable.ends.push_back((op - 1, self.state.next_offset));
        }
        let mut stowed = false;
        while let Some(&(stowed_op, _, _)) = self.stowed.front()
            && stowed_op <= op
        {
            stowed |= stowed_op == op;
            self.stowed.pop_front();
        }
        if let Some((base_offset, count)) = self.retired.remove(&op) {
            // Accounted for, not appended: its segment is gone. A record from before the
            // stand-in carried the count knows only that the batch lies below the log.
            let next = match count {
                0 => log.first_offset(),
                count => base_offset + u64::from(count),
            };
            self.state.next_offset = self.state.next_offset.max(next);
            return Applied::Reply(WriteResult::Appended { base_offset, count });
        }
        let result = match PartitionWrite::decode(operation, body) {
            Some(PartitionWrite::Send { batch }) => return self.send(batch, stowed, log),
            Some(PartitionWrite::StoreOffset {
                owner,
                offset,
                resolved_at,
                owner_created_at,
                keys_max,
            }) => {
                if self.group_deleted_after(owner, resolved_at)
                    || self.superseded(owner, owner_created_at)
                {
                    WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
                } else if self.keys_full(owner, keys_max) {
                    WriteResult::Failed(ErrorCode::TooManyConsumerOffsets)
                } else {
                    let kept = KeptOffset {
                        offset,
                        resolved_at,
                        created_at: owner_created_at,
                        stored_at: op,
                    };
                    self.state.offsets.insert(owner, kept);
                    WriteResult::Done
                }
            }
            Some(PartitionWrite::DeleteOffset {
                owner,
                resolved_at,
                owner_created_at,
            }) => {
                if self.group_deleted_after(owner, resolved_at) {
                    WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
                } else if self
                    .state
                    .offsets
                    .get(&owner)
                    .is_some_and(|kept| of_instance(kept, owner_created_at))
                {
                    // Only the owner's own instance's offset: another's is not found.
                    self.state.offsets.remove(&owner);
                    WriteResult::Done
                } else {
                    WriteResult::Failed(ErrorCode::ConsumerOffsetNotFound)
                }
            }
            Some(PartitionWrite::DeleteGroupOffsets { group, metadata_op }) => {
                if self.group_deletion_applies(group, metadata_op) {
                    self.state.group_deletions.insert(group, metadata_op);
                    // An offset of a group created at or after `metadata_op` (or, where its
                    // creation op is unknown, resolved at or after it) is a later group's (one
                    // created after a sweep's view of the model), and stays.
                    for owner in [OffsetOwner::Group(group), OffsetOwner::External(group)] {
                        if let Some(kept) = self.state.offsets.get(&owner)
                            && removed_by(kept, metadata_op)
                        {
                            self.state.offsets.remove(&owner);
                        }
                    }
                }
                WriteResult::Done
            }
            Some(PartitionWrite::RetireSegments {
                keep_from,
                planned_at,
            }) => {
                let keep_from = keep_from.min(self.held_from(planned_at));
                return Applied::Retire { keep_from };
            }
            Some(PartitionWrite::RetireSessions { sessions }) => {
                self.retired_sessions = sessions.iter().map(|s| s.client_id).collect();
                WriteResult::Done
            }
            None => WriteResult::Failed(ErrorCode::InvalidCommand),
        };
        Applied::Reply(result)
    }

    /// Whether a store of `owner` needs a new key where the partition already keeps `keys_max`
    /// (the limit the store carries, [`KEYS_UNLIMITED`] for none) or more: a key already kept,
    /// of whichever instance of its group, is overwritten, never counted again.
    fn keys_full(&self, owner: OffsetOwner, keys_max: u32) -> bool {
        keys_max != KEYS_UNLIMITED
            && !self.state.offsets.contains_key(&owner)
            && self.state.offsets.len() >= keys_max as usize
    }

    /// A send; `stowed` when its batch went to the log as the op was prepared.
    fn send<L: Log>(&mut self, batch: Bytes, stowed: bool, log: &L) -> Applied<L::Batch> {
        let Ok(header) = BatchHeader::decode_fixed(&batch) else {
            return Applied::Reply(WriteResult::Failed(ErrorCode::InvalidMessagesSize));
        };
        let base_offset = self.state.next_offset;
        if stowed {
            // Written to the log when it was prepared, its layout checked then.
            let count = header.message_count;
            self.state.next_offset += u64::from(count);
            return Applied::Reply(WriteResult::Appended { base_offset, count });
        }
        let Some((batch, count)) = log.check(batch) else {
            return Applied::Reply(WriteResult::Failed(ErrorCode::InvalidMessagesSize));
        };
        if base_offset < log.next_offset() {
            // A journal replay of a batch that reached the log before the restart.
            self.state.next_offset += u64::from(count);
            return Applied::Reply(WriteResult::Appended { base_offset, count });
        }
        // Stored from the received buffer: only the stamped header is new. The primary
        // stamped the time before journaling the batch.
        Applied::Append {
            batch,
            base_offset,
            base_timestamp: header.base_timestamp,
        }
    }

    /// The log appended the `count` messages of [`Applied::Append`] at `base_offset`.
    pub fn appended(&mut self, base_offset: u64, count: u32) -> WriteResult {
        debug_assert_eq!(base_offset, self.state.next_offset);
        self.state.next_offset += u64::from(count);
        WriteResult::Appended { base_offset, count }
    }

    /// Whether op `op` of `operation` is a send to write to the log now, stamped with the
    /// offsets it takes (ops are prepared in order, so those are the offsets its apply
    /// assigns), with a 48-byte stand-in journaled instead: the batch is written once. `None`
    /// journals the body as it came (not a send, or a batch the apply refuses or that holds
    /// nothing).
    pub fn stow<L: Log>(&self, operation: u8, body: &Bytes, log: &L) -> Option<Stow<L::Batch>> {
        if Operation::from_repr(operation) != Some(Operation::SendMessages) {
            return None;
        }
        let header = BatchHeader::decode_fixed(body).ok()?;
        let (batch, count) = log.check(body.clone())?;
        if count == 0 {
            return None;
        }
        let base_offset = log.next_offset();
        let stand_in = StowedBatch {
            base_offset,
            length: body.len() as u64,
            received_partition_id: header.partition_id,
            received_base_offset: header.base_offset,
            received_checksum: header.batch_checksum,
            message_count: count,
        };
        Some(Stow {
            batch,
            base_offset,
            base_timestamp: header.base_timestamp,
            count,
            stand_in: Bytes::copy_from_slice(&stand_in.to_bytes()),
        })
    }

    /// The log holds op `op`'s stowed batch of `count` messages at `base_offset`: when it was
    /// prepared, or, in a group of more than one, found in the journal at a restart (the
    /// replica commits it once it has rejoined its group).
    pub fn stowed(&mut self, op: u64, base_offset: u64, count: u32) {
        self.stowed
            .push_back((op, base_offset, base_offset + u64::from(count)));
    }

    /// The journal dropped every op after `op`: the offset the log must be truncated from to
    /// drop their stowed batches, if any was stowed.
    pub fn unstow_after(&mut self, op: u64) -> Option<u64> {
        let first = self.stowed.iter().position(|(stowed, _, _)| *stowed > op)?;
        let from = self.stowed[first].1;
        self.stowed.truncate(first);
        Some(from)
    }

    /// Every journaled op has been replayed: the offset from which the log holds messages no
    /// journaled op accounts for, if any. They were never acknowledged (their journal write was
    /// lost with the machine), and are dropped so offsets and the client table agree.
    pub fn unaccounted_from(&self, log_next_offset: u64) -> Option<u64> {
        // Stowed batches of ops not committed yet are accounted for by their journal records,
        // and so are the offsets of journaled sends whose segments a retirement deleted (in a
        // group of more than one they are applied only once the replica rejoined).
        let stowed_end = self.stowed.back().map_or(0, |&(_, _, end)| end);
        let mut retired_end = 0;
        for &(base_offset, count) in self.retired.values() {
            if count == 0 {
                // A stand-in from before it carried its count: where its offsets end is
                // unknown, so nothing is dropped.
                return None;
            }
            retired_end = retired_end.max(base_offset + u64::from(count));
        }
        let accounted = self.state.next_offset.max(stowed_end).max(retired_end);
        (log_next_offset > accounted).then_some(accounted)
    }

    /// Where a poll of `count` messages from `start` reads, over a log holding
    /// `[first_offset, next_offset)` of which only committed sends are served.
    pub fn poll_range<L: Log>(&self, start: StartAt, count: u32, log: &L) -> PollRange {
        let next = self.committed_next_offset(log.next_offset());
        let first = log.first_offset();
        let start = match start {
            StartAt::Offset(offset) => offset,
            StartAt::Timestamp(timestamp) => log.offset_at_timestamp(timestamp).unwrap_or(next),
            StartAt::First => first,
            StartAt::Last => next.saturating_sub(u64::from(count)).max(first),
            StartAt::Next {
                owner,
                owner_created_at_op,
            } => self
                .offset(owner, owner_created_at_op)
                .map_or(first, |stored| stored + 1),
        };
        let current_offset = next.saturating_sub(1);
        // The log's first offset may lie past the committed end: a retirement past it removed
        // stowed sends not committed here yet, or a restart rolled the state back behind it.
        let start = start.max(first);
        if start >= next || count == 0 {
            return PollRange {
                start: next,
                count: 0,
                current_offset,
            };
        }
        PollRange {
            start,
            count: count.min(u32::try_from(next - start).unwrap_or(u32::MAX)),
            current_offset,
        }
    }

    /// The last op applied: a retirement planned from this state is planned at it.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Where the offsets stored after the op `planned_at` (which a retirement planned at it
    /// did not see) hold it back to: the first message one of them has not committed. Every
    /// offset that holds segments back ([`Self::holding_offsets`]) stored since counts, a
    /// deleted group's too (a store is judged live when it commits; a retirement held back for
    /// one deletes the rest at the next).
    fn held_from(&self, planned_at: u64) -> u64 {
        self.holding_offsets()
            .filter(|(_, kept)| kept.stored_at > planned_at)
            .map(|(_, kept)| kept.offset.saturating_add(1))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The offset below which a segment retirement may go without dropping messages a
    /// consumer has not committed yet. Nor do the offsets no live group owns as of the metadata
    /// model at `metadata_op` hold it back (`live_groups`, as for
    /// [`Self::orphaned_group_offsets`]): a deleted group's, or one a group that took its id
    /// would otherwise inherit; no one reads them and a sweep removes them.
    pub fn retirement_floor(&self, live_groups: &BTreeMap<u32, u64>, metadata_op: u64) -> u64 {
        self.retirement_holder(live_groups, metadata_op)
            .map_or(u64::MAX, |(_, offset)| offset)
    }

    /// The owner of the offset [`Self::retirement_floor`] is, with that offset (the lowest
    /// owner of the lowest one): `None` when no offset holds a retirement back.
    pub fn retirement_holder(
        &self,
        live_groups: &BTreeMap<u32, u64>,
        metadata_op: u64,
    ) -> Option<(OffsetOwner, u64)> {
        self.holding_offsets()
            .filter(|(owner, kept)| {
                self.orphaned_by(**owner, kept, live_groups, metadata_op)
                    .is_none()
            })
            .map(|(owner, kept)| (*owner, kept.offset))
            .min_by_key(|(owner, offset)| (*offset, *owner))
    }

    /// The offsets that may hold a segment retirement back: consumers' and Iggy groups'.
    /// External groups' hold nothing back: Iggy does not manage their consumers, and their
    /// offsets may lie anywhere.
    fn holding_offsets(&self) -> impl Iterator<Item = (&OffsetOwner, &KeptOffset)> {
        self.state
            .offsets
            .iter()
            .filter(|(owner, _)| !matches!(owner, OffsetOwner::External(_)))
    }
}

/// Whether a deletion of its group at metadata op `metadata_op` removes `kept`: stored by an
/// instance created before it ([`stored_before`]), or resolved at an op not known.
fn removed_by(kept: &KeptOffset, metadata_op: u64) -> bool {
    stored_before(kept, metadata_op) || kept.resolved_at == RESOLVED_AT_UNKNOWN
}

/// Whether `kept` was stored by an instance of its group id created before the metadata op
/// `metadata_op`: by its creation op where known, else by its resolution op (the instance
/// existed then, so was created at or before it).
fn stored_before(kept: &KeptOffset, metadata_op: u64) -> bool {
    match kept.created_at {
        CREATED_AT_UNKNOWN => kept.resolved_at < metadata_op,
        created_at => created_at < metadata_op,
    }
}

/// Whether `kept` is the offset of the instance of its group id that the metadata op
/// `owner_created_at` created: the same creation op where both are known; otherwise (a
/// consumer, a reader or an offset from before creation ops were kept) resolved at or after
/// `owner_created_at`, as an earlier instance's was resolved before it.
fn of_instance(kept: &KeptOffset, owner_created_at: u64) -> bool {
    match (kept.created_at, owner_created_at) {
        (CREATED_AT_UNKNOWN, _) | (_, CREATED_AT_UNKNOWN) => kept.resolved_at >= owner_created_at,
        (created_at, owner_created_at) => created_at == owner_created_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NO_OFFSET_HOLD;

    /// A log that reports what a test sets; a batch is valid when its header's `batch_length`
    /// is its size.
    #[derive(Default)]
    struct FakeLog {
        first_offset: u64,
        next_offset: u64,
    }

    impl Log for FakeLog {
        type Batch = Bytes;
        fn next_offset(&self) -> u64 {
            self.next_offset
        }
        fn first_offset(&self) -> u64 {
            self.first_offset
        }
        fn offset_at_timestamp(&self, _timestamp: u64) -> Option<u64> {
            None
        }
        fn check(&self, batch: Bytes) -> Option<(Bytes, u32)> {
            let header = BatchHeader::decode_fixed(&batch).ok()?;
            (header.batch_length == batch.len() as u64).then_some((batch, header.message_count))
        }
    }

    fn batch(message_count: u32, valid: bool) -> Bytes {
        let header = BatchHeader {
            partition_id: 0,
            base_offset: 0,
            base_timestamp: 17,
            origin_timestamp: 0,
            batch_length: if valid { 256 } else { 255 },
            batch_checksum: 0,
            message_count,
        };
        Bytes::copy_from_slice(&header.to_bytes())
    }

    fn send_operation() -> u8 {
        Operation::SendMessages.to_repr()
    }

    fn apply(partition: &mut Partition, op: u64, write: PartitionWrite) -> WriteResult {
        match partition.apply(op, write.operation(), &write.encode(), &FakeLog::default()) {
            Applied::Reply(result) => result,
            other => panic!("op {op} asked the log for {other:?}"),
        }
    }

    /// A store whose owner was resolved at metadata op `resolved_at`, its creation op unknown.
    fn store(owner: OffsetOwner, offset: u64, resolved_at: u64) -> PartitionWrite {
        store_by(owner, offset, resolved_at, CREATED_AT_UNKNOWN)
    }

    /// A store by the instance of `owner` created at metadata op `owner_created_at`, resolved
    /// at `resolved_at`.
    fn store_by(
        owner: OffsetOwner,
        offset: u64,
        resolved_at: u64,
        owner_created_at: u64,
    ) -> PartitionWrite {
        PartitionWrite::StoreOffset {
            owner,
            offset,
            resolved_at,
            owner_created_at,
            keys_max: KEYS_UNLIMITED,
        }
    }

    /// A consumer's store (resolved at metadata op 1) proposed by a node whose configuration
    /// keeps at most `keys_max` offset keys a partition.
    fn store_capped(owner: OffsetOwner, offset: u64, keys_max: u32) -> PartitionWrite {
        PartitionWrite::StoreOffset {
            owner,
            offset,
            resolved_at: 1,
            owner_created_at: CREATED_AT_UNKNOWN,
            keys_max,
        }
    }

    const TOO_MANY: WriteResult = WriteResult::Failed(ErrorCode::TooManyConsumerOffsets);

    #[test]
    fn a_new_offset_key_at_the_limit_is_refused_and_existing_keys_stay_writable() {
        let mut partition = Partition::new(0);
        // Consumers, consumer groups and external groups share the partition's keys.
        let kept = [
            OffsetOwner::Consumer(1),
            OffsetOwner::Group(1),
            OffsetOwner::External(1),
        ];
        for (op, owner) in (1..).zip(kept) {
            assert_eq!(
                apply(&mut partition, op, store_capped(owner, 4, 3)),
                WriteResult::Done
            );
        }
        let new = [
            OffsetOwner::Consumer(2),
            OffsetOwner::Group(2),
            OffsetOwner::External(2),
        ];
        for (op, owner) in (4..).zip(new) {
            let verdict = apply(&mut partition, op, store_capped(owner, 4, 3));
            assert_eq!(verdict, TOO_MANY, "{owner:?}");
        }
        assert_eq!(
            partition.offsets().len(),
            3,
            "a refused store keeps nothing"
        );
        // Every kind's existing key is still written, by a node with a lower limit too.
        for (op, owner) in (7..).zip(kept) {
            let verdict = apply(&mut partition, op, store_capped(owner, 9, 2));
            assert_eq!(verdict, WriteResult::Done, "{owner:?}");
            assert_eq!(partition.offset(owner, CREATED_AT_UNKNOWN), Some(9));
        }
        // A store journaled before the limit existed sets none.
        let unlimited = store(OffsetOwner::Consumer(3), 1, 1);
        assert_eq!(apply(&mut partition, 10, unlimited), WriteResult::Done);
        assert_eq!(partition.offsets().len(), 4);
    }

    #[test]
    fn a_deleted_offset_key_frees_its_place_at_the_limit() {
        let mut partition = Partition::new(0);
        apply(
            &mut partition,
            1,
            store_capped(OffsetOwner::Consumer(1), 4, 2),
        );
        apply(&mut partition, 2, store_capped(OffsetOwner::Group(1), 4, 2));
        let consumer_2 = store_capped(OffsetOwner::Consumer(2), 4, 2);
        assert_eq!(apply(&mut partition, 3, consumer_2), TOO_MANY);
        // A consumer's delete frees one.
        let delete = delete_by(OffsetOwner::Consumer(1), 1, CREATED_AT_UNKNOWN);
        assert_eq!(apply(&mut partition, 4, delete), WriteResult::Done);
        let consumer_2 = store_capped(OffsetOwner::Consumer(2), 4, 2);
        assert_eq!(apply(&mut partition, 5, consumer_2), WriteResult::Done);
        let external_2 = store_capped(OffsetOwner::External(2), 4, 2);
        assert_eq!(apply(&mut partition, 6, external_2), TOO_MANY);
        // So does a group's deletion.
        assert_eq!(
            apply(&mut partition, 7, delete_group(1, 20)),
            WriteResult::Done
        );
        let external_2 = store_capped(OffsetOwner::External(2), 4, 2);
        assert_eq!(apply(&mut partition, 8, external_2), WriteResult::Done);
    }

    /// Every replica, and every replay of the journal over a restored checkpoint, applies the
    /// same ops to the same keys: each store is answered as it first was, and a store of a key
    /// that was accepted (a client's resend under a new request number) is written again.
    #[test]
    fn a_replayed_or_resent_offset_store_is_answered_as_it_first_was() {
        let writes = || {
            [
                store_capped(OffsetOwner::Consumer(1), 1, 2),
                store_capped(OffsetOwner::Consumer(2), 1, 2),
                store_capped(OffsetOwner::Consumer(3), 1, 2),
                store_capped(OffsetOwner::Consumer(2), 5, 2),
                delete_by(OffsetOwner::Consumer(1), 1, CREATED_AT_UNKNOWN),
                store_capped(OffsetOwner::Consumer(3), 1, 2),
                store_capped(OffsetOwner::Consumer(3), 1, 2),
                store_capped(OffsetOwner::Group(7), 1, 2),
            ]
        };
        let expected = [
            WriteResult::Done,
            WriteResult::Done,
            TOO_MANY,
            WriteResult::Done,
            WriteResult::Done,
            WriteResult::Done,
            WriteResult::Done,
            TOO_MANY,
        ];
        let mut first = Partition::new(0);
        let verdicts: Vec<_> = (1..)
            .zip(writes())
            .map(|(op, write)| apply(&mut first, op, write))
            .collect();
        assert_eq!(verdicts, expected);
        // A replica restarted from its checkpoint at op 3 replays the rest of its journal.
        let mut at_3 = Partition::new(0);
        for (op, write) in (1..=3).zip(writes()) {
            apply(&mut at_3, op, write);
        }
        let mut replayed = Partition::new(0);
        replayed.restore(&at_3.encode_state(), 0).unwrap();
        for (op, write) in (1..).zip(writes()).skip(3) {
            let verdict = apply(&mut replayed, op, write);
            assert_eq!(verdict, expected[op as usize - 1], "op {op}");
        }
        assert_eq!(replayed.offsets(), first.offsets());
    }

    fn delete_by(owner: OffsetOwner, resolved_at: u64, owner_created_at: u64) -> PartitionWrite {
        PartitionWrite::DeleteOffset {
            owner,
            resolved_at,
            owner_created_at,
        }
    }

    fn delete_group(group: u32, metadata_op: u64) -> PartitionWrite {
        PartitionWrite::DeleteGroupOffsets { group, metadata_op }
    }

    #[test]
    fn a_group_deletion_removes_both_slots_once_and_never_a_later_groups_offsets() {
        // The partition was created by metadata op 3.
        let mut partition = Partition::new(3);
        apply(&mut partition, 1, store(OffsetOwner::Group(0), 4, 5));
        apply(&mut partition, 2, store(OffsetOwner::External(0), 900, 5));
        apply(&mut partition, 3, store(OffsetOwner::External(1), 5, 5));
        assert_eq!(
            partition.offsets().len(),
            3,
            "kind 2 and kind 3 are separate slots"
        );
        // Older than the partition: nothing of it can be here.
        apply(&mut partition, 4, delete_group(0, 2));
        assert_eq!(partition.offsets().len(), 3);
        apply(&mut partition, 5, delete_group(0, 10));
        assert_eq!(
            partition.offsets().keys().copied().collect::<Vec<_>>(),
            vec![OffsetOwner::External(1)],
            "group 0's kind-2 and kind-3 offsets went, group 1's stayed"
        );
        // A write resolved before the deletion (in flight across it) is refused.
        assert_eq!(
            apply(&mut partition, 6, store(OffsetOwner::Group(0), 7, 9)),
            WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
        );
        let delete = delete_by(OffsetOwner::External(0), 9, CREATED_AT_UNKNOWN);
        assert_eq!(
            apply(&mut partition, 7, delete),
            WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
        );
        assert_eq!(partition.offset(OffsetOwner::Group(0), 0), None);
        // A group created later with id 0 stores again; the same deletion submitted again (a
        // restart finishing it) and an older one change nothing.
        apply(&mut partition, 8, store(OffsetOwner::External(0), 12, 11));
        apply(&mut partition, 9, delete_group(0, 10));
        apply(&mut partition, 10, delete_group(0, 9));
        assert_eq!(partition.offset(OffsetOwner::External(0), 0), Some(12));
        // Group 1's deletion is its own.
        apply(&mut partition, 11, delete_group(1, 8));
        assert_eq!(partition.offset(OffsetOwner::External(1), 0), None);
        assert_eq!(partition.offset(OffsetOwner::External(0), 0), Some(12));
        apply(&mut partition, 12, delete_group(0, 12));
        assert_eq!(partition.offset(OffsetOwner::External(0), 0), None);
        // Plain consumers are never refused.
        assert_eq!(
            apply(&mut partition, 13, store(OffsetOwner::Consumer(0), 1, 0)),
            WriteResult::Done
        );
    }

    /// Group 0's first instance (created at metadata op 4) is deleted at op 9 and a second
    /// created at op 12; a node whose model lags resolves a store for the first at op 8, and
    /// it commits after the second instance's acknowledged store, before the deletion reached
    /// the partition. It is refused: the second instance keeps reading its own offset.
    #[test]
    fn a_deleted_groups_late_store_never_replaces_the_recreated_groups_offset() {
        let refused = WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound);
        for owner in [OffsetOwner::Group(0), OffsetOwner::External(0)] {
            let mut partition = Partition::new(3);
            // The second instance's store, then the first one's late store.
            let writes = [
                (store_by(owner, 5, 6, 4), WriteResult::Done),
                (store_by(owner, 2, 13, 12), WriteResult::Done),
                (store_by(owner, 7, 8, 4), refused),
            ];
            for (op, (write, expected)) in (1..).zip(writes) {
                assert_eq!(
                    apply(&mut partition, op, write),
                    expected,
                    "{owner:?} op {op}"
                );
            }
            assert_eq!(partition.offset(owner, 12), Some(2), "{owner:?}");
            // The deletion arrives: the second instance's offset, resolved after it, stays.
            apply(&mut partition, 4, delete_group(0, 9));
            assert_eq!(partition.offset(owner, 12), Some(2), "{owner:?}");
            // The second instance stores again; a third (created at op 20) replaces it.
            for (op, write) in [
                (5, store_by(owner, 3, 14, 12)),
                (6, store_by(owner, 1, 21, 20)),
            ] {
                assert_eq!(apply(&mut partition, op, write), WriteResult::Done);
            }
            assert_eq!(partition.offset(owner, 20), Some(1), "{owner:?}");
            // A reader resolved at a stale view (the second instance) is not served the
            // third's offset.
            assert_eq!(partition.offset(owner, 12), None, "{owner:?}");
        }
    }

    /// A delete finds only its own instance's offset: another instance's (a deleted one's
    /// not swept yet, or a later one's) is left as it is and the delete answers
    /// ConsumerOffsetNotFound, decided by the committed op alone.
    #[test]
    fn a_delete_by_another_instance_of_the_group_removes_nothing() {
        let owner = OffsetOwner::Group(0);
        let mut partition = Partition::new(3);
        apply(&mut partition, 1, store_by(owner, 5, 6, 4));
        let not_found = WriteResult::Failed(ErrorCode::ConsumerOffsetNotFound);
        // The instance created at op 12 deletes: the first instance's offset is not its own.
        assert_eq!(
            apply(&mut partition, 2, delete_by(owner, 13, 12)),
            not_found
        );
        assert_eq!(partition.offset(owner, 4), Some(5), "left as it was");
        // The second instance stores; the first one's late delete (its deletion not applied
        // here yet) removes nothing.
        apply(&mut partition, 3, store_by(owner, 2, 13, 12));
        assert_eq!(apply(&mut partition, 4, delete_by(owner, 8, 4)), not_found);
        assert_eq!(partition.offset(owner, 12), Some(2));
        assert_eq!(
            apply(&mut partition, 5, delete_by(owner, 14, 12)),
            WriteResult::Done
        );
        assert_eq!(partition.offset(owner, 12), None);
        // An offset stored before creation ops were kept, resolved before the instance's
        // creation: an earlier instance's, so not found either.
        apply(&mut partition, 6, store(owner, 5, 6));
        assert_eq!(
            apply(&mut partition, 7, delete_by(owner, 14, 12)),
            not_found
        );
        // A delete of an owner whose creation op is unknown removes it, as it always did.
        let unknown = delete_by(owner, 14, CREATED_AT_UNKNOWN);
        assert_eq!(apply(&mut partition, 8, unknown), WriteResult::Done);
        assert_eq!(partition.offsets().len(), 0);
    }

    /// Offsets journaled or checkpointed before creation ops were kept, and writes of owners
    /// whose creation op is unknown, are judged as before: no instance check.
    #[test]
    fn an_unknown_creation_op_judges_nothing() {
        let owner = OffsetOwner::Group(0);
        let mut partition = Partition::new(3);
        apply(&mut partition, 1, store_by(owner, 5, 13, 12));
        // A store of an owner whose creation op is unknown replaces it.
        assert_eq!(
            apply(&mut partition, 2, store(owner, 6, 14)),
            WriteResult::Done
        );
        assert_eq!(partition.offset(owner, 12), Some(6));
        assert_eq!(partition.offset(owner, CREATED_AT_UNKNOWN), Some(6));
        // A known instance's store replaces an offset of unknown creation.
        assert_eq!(
            apply(&mut partition, 3, store_by(owner, 7, 8, 4)),
            WriteResult::Done
        );
        // A reader of unknown creation is served an offset of a known instance.
        assert_eq!(partition.offset(owner, CREATED_AT_UNKNOWN), Some(7));
        // A checkpoint written before creation ops were kept restores them unknown: the
        // resolution op rule alone judges reads.
        let state = partition.encode_state();
        let v2 = &state[..state.len() - (4 + 8)];
        let mut restored = Partition::new(3);
        restored.restore(v2, 0).unwrap();
        assert_eq!(restored.offset(owner, 4), Some(7));
        assert_eq!(
            restored.offset(owner, 12),
            None,
            "resolved at 8, before op 12"
        );
        assert_eq!(
            apply(&mut restored, 4, store_by(owner, 1, 9, 4)),
            WriteResult::Done,
            "nothing known to refuse it by"
        );
        // A store journaled before owner_created_at existed (`StoreOffsetOpV1`: group 0,
        // offset 3, resolved at op 8) replaces a known instance's offset, as it always did.
        apply(&mut partition, 4, store_by(owner, 9, 30, 25));
        #[rustfmt::skip]
        let v1 = Bytes::from_static(&[
            2, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0,
        ]);
        let store = Operation::StoreConsumerOffset.to_repr();
        let applied = partition.apply(5, store, &v1, &FakeLog::default());
        assert!(matches!(applied, Applied::Reply(WriteResult::Done)));
        assert_eq!(partition.offset(owner, 4), Some(3));
    }

    #[test]
    fn a_sweep_finds_the_offsets_of_groups_not_live_and_names_its_metadata_op() {
        // Created by metadata op 3; group 0 stored at 5 and 6, group 1 at 5, group 2 at 30.
        let mut partition = Partition::new(3);
        apply(&mut partition, 1, store(OffsetOwner::Group(0), 4, 5));
        apply(&mut partition, 2, store(OffsetOwner::External(0), 9, 6));
        apply(&mut partition, 3, store(OffsetOwner::Group(1), 2, 5));
        apply(&mut partition, 4, store(OffsetOwner::Consumer(0), 1, 5));
        apply(&mut partition, 5, store(OffsetOwner::Group(2), 1, 30));
        // At metadata op 20 only group 1 lives: group 0's two slots are orphaned, group 2's
        // offset was resolved after 20 (a group this model has not heard of yet) and stays.
        let live = BTreeMap::from([(1, 0)]);
        assert_eq!(partition.orphaned_group_offsets(&live, 20), vec![(0, 20)]);
        apply(&mut partition, 6, delete_group(0, 20));
        assert_eq!(partition.orphaned_group_offsets(&live, 20), vec![]);
        assert_eq!(partition.offset(OffsetOwner::Group(0), 0), None);
        assert_eq!(partition.offset(OffsetOwner::External(0), 0), None);
        // Once the model is at 40 without group 2, its offset is orphaned too.
        assert_eq!(partition.orphaned_group_offsets(&live, 40), vec![(2, 40)]);
        apply(&mut partition, 7, delete_group(2, 40));
        assert_eq!(partition.offset(OffsetOwner::Group(2), 0), None);
        // Plain consumers and live groups are never listed.
        assert_eq!(partition.orphaned_group_offsets(&live, 50), vec![]);
        assert_eq!(partition.offset(OffsetOwner::Consumer(0), 0), Some(1));
        assert_eq!(partition.offset(OffsetOwner::Group(1), 0), Some(2));
    }

    #[test]
    fn a_sweep_finds_a_recreated_groups_inherited_offsets_and_names_its_creation() {
        let mut partition = Partition::new(3);
        // A group 0 stored at 5; it was deleted and a new group 0 created at 12, and the
        // deletion never reached this partition.
        apply(&mut partition, 1, store(OffsetOwner::Group(0), 4, 5));
        apply(&mut partition, 2, store(OffsetOwner::External(0), 7, 13));
        let live = BTreeMap::from([(0, 12)]);
        assert_eq!(partition.orphaned_group_offsets(&live, 20), vec![(0, 12)]);
        apply(&mut partition, 3, delete_group(0, 12));
        assert_eq!(partition.offset(OffsetOwner::Group(0), 0), None);
        assert_eq!(
            partition.offset(OffsetOwner::External(0), 0),
            Some(7),
            "the new group's own offset stays"
        );
        assert_eq!(partition.orphaned_group_offsets(&live, 20), vec![]);
        // A write resolved against the deleted group, still in flight, is refused.
        assert_eq!(
            apply(&mut partition, 4, store(OffsetOwner::Group(0), 8, 11)),
            WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)
        );
        // A creation op not known (0) judges nothing.
        apply(&mut partition, 5, store(OffsetOwner::Group(1), 4, 5));
        let unknown = BTreeMap::from([(0, 12), (1, 0)]);
        assert_eq!(partition.orphaned_group_offsets(&unknown, 20), vec![]);
    }

    #[test]
    fn an_offset_resolved_before_its_groups_creation_is_never_served_to_that_group() {
        let mut partition = Partition::new(0);
        let empty = FakeLog::default();
        let Applied::Append { base_offset, .. } =
            partition.apply(1, send_operation(), &batch(10, true), &empty)
        else {
            panic!("a send appends");
        };
        partition.appended(base_offset, 10);
        let log = FakeLog {
            first_offset: 0,
            next_offset: 10,
        };
        // Group 0 stored 6 at metadata op 5; it was deleted and a new group 0 created at op
        // 12, and the deletion has not reached this partition (no sweep ran yet).
        apply(&mut partition, 2, store(OffsetOwner::Group(0), 6, 5));
        apply(&mut partition, 3, store(OffsetOwner::External(0), 8, 5));
        let next = |partition: &Partition, owner, owner_created_at_op| {
            let start = StartAt::Next {
                owner,
                owner_created_at_op,
            };
            partition.poll_range(start, 3, &log).start
        };
        for owner in [OffsetOwner::Group(0), OffsetOwner::External(0)] {
            assert_eq!(partition.offset(owner, 12), None, "{owner:?}");
        }
        assert_eq!(
            next(&partition, OffsetOwner::Group(0), 12),
            0,
            "from the first"
        );
        // The group that stored it (created at or before op 5) still reads it.
        assert_eq!(partition.offset(OffsetOwner::Group(0), 5), Some(6));
        assert_eq!(next(&partition, OffsetOwner::Group(0), 5), 7);
        // The new group's own store is its offset.
        apply(&mut partition, 4, store(OffsetOwner::Group(0), 2, 12));
        assert_eq!(partition.offset(OffsetOwner::Group(0), 12), Some(2));
        assert_eq!(next(&partition, OffsetOwner::Group(0), 12), 3);
        // An offset resolved at an unknown op is served, as the sweep keeps it.
        let unknown = store(OffsetOwner::External(0), 9, RESOLVED_AT_UNKNOWN);
        apply(&mut partition, 5, unknown);
        assert_eq!(partition.offset(OffsetOwner::External(0), 12), Some(9));
    }

    #[test]
    fn a_deletion_keeps_offsets_resolved_after_it_and_removes_unknown_ones() {
        let mut partition = Partition::new(0);
        apply(&mut partition, 1, store(OffsetOwner::Group(0), 4, 25));
        apply(
            &mut partition,
            2,
            store(OffsetOwner::External(0), 9, RESOLVED_AT_UNKNOWN),
        );
        // A sweep at metadata op 20 (its model had not seen group 0 created at 22 yet).
        apply(&mut partition, 3, delete_group(0, 20));
        assert_eq!(partition.offset(OffsetOwner::Group(0), 0), Some(4));
        assert_eq!(
            partition.offset(OffsetOwner::External(0), 0),
            None,
            "stored before resolution ops were kept: goes as it always did"
        );
        // An offset resolved at an unknown op under a live group is never judged inherited.
        apply(
            &mut partition,
            4,
            store(OffsetOwner::External(0), 9, RESOLVED_AT_UNKNOWN),
        );
        let live = BTreeMap::from([(0, 22)]);
        assert_eq!(partition.orphaned_group_offsets(&live, 30), vec![]);
    }

    #[test]
    fn a_session_retirement_names_its_clients_for_the_group_once_and_changes_no_offset() {
        let mut partition = Partition::new(0);
        apply(&mut partition, 1, store(OffsetOwner::Consumer(1), 4, 1));
        let identity = |client_id| iggy_generated::payloads::SessionIdentity {
            client_id,
            session: 2,
            metadata_watermark: 9,
        };
        let retire = PartitionWrite::RetireSessions {
            sessions: vec![identity(21), identity(22)],
        };
        assert_eq!(apply(&mut partition, 2, retire), WriteResult::Done);
        assert_eq!(partition.take_retired(), vec![21, 22]);
        assert!(partition.take_retired().is_empty(), "taken once");
        apply(&mut partition, 3, store(OffsetOwner::Consumer(2), 5, 1));
        assert!(
            partition.take_retired().is_empty(),
            "other ops retire nobody"
        );
        assert_eq!(partition.offsets().len(), 2);
    }

    #[test]
    fn checkpoint_state_keeps_kind_3_and_the_group_deletions() {
        let mut partition = Partition::new(0);
        apply(&mut partition, 1, store(OffsetOwner::Group(0), 4, 1));
        apply(
            &mut partition,
            2,
            store(OffsetOwner::External(0), u64::MAX, 1),
        );
        apply(&mut partition, 3, store(OffsetOwner::Consumer(9), 1, 1));
        apply(&mut partition, 4, delete_group(5, 40));
        apply(&mut partition, 5, delete_group(6, 41));
        let state = partition.encode_state();

        let mut restored = Partition::new(0);
        assert_eq!(restored.restore(&state, 0), Ok(None));
        assert_eq!(restored.state, partition.state);
        apply(&mut restored, 6, store(OffsetOwner::External(5), 1, 45));
        apply(&mut restored, 7, delete_group(5, 40));
        assert_eq!(restored.offset(OffsetOwner::External(5), 0), Some(1));

        // A checkpoint written before the group deletions (and the three offsets' resolution,
        // creation and storing ops) were kept.
        let old = &state[..state.len() - 3 * (4 + 3 * 8) - (4 + 2 * 12)];
        let mut restored = Partition::new(0);
        restored.restore(old, 0).unwrap();
        assert_eq!(restored.offsets(), partition.offsets());
        assert!(restored.state.group_deletions.is_empty());
        // A truncated record is refused.
        let torn = &state[..state.len() - 1];
        assert!(Partition::new(0).restore(torn, 0).is_err());
    }

    #[test]
    fn a_restored_next_offset_past_the_log_is_reported_and_cut_to_the_log() {
        let mut partition = Partition::new(0);
        let log = FakeLog {
            first_offset: 0,
            next_offset: 9,
        };
        assert!(matches!(
            partition.apply(1, send_operation(), &batch(9, true), &log),
            Applied::Reply(WriteResult::Appended {
                base_offset: 0,
                count: 9
            })
        ));
        let state = partition.encode_state();
        let mut restored = Partition::new(0);
        assert_eq!(restored.restore(&state, 4), Ok(Some(9)));
        assert_eq!(restored.committed_next_offset(100), 4);
    }

    #[test]
    fn the_primary_refuses_a_stored_offset_past_the_log_s_end_except_an_external_group_s() {
        let mut partition = Partition::new(0);
        let admits = |partition: &Partition, owner, offset, log_next_offset| {
            let write = store(owner, offset, 1);
            let committed = 1;
            partition.admits(
                write.operation(),
                &write.encode(),
                committed,
                log_next_offset,
            )
        };
        let refused = Err(ErrorCode::InvalidOffset);
        // A partition that never held a message takes no offset, 0 included.
        assert_eq!(admits(&partition, OffsetOwner::Consumer(1), 0, 0), refused);
        let log = FakeLog::default();
        let Applied::Append { .. } = partition.apply(1, send_operation(), &batch(3, true), &log)
        else {
            panic!("appended");
        };
        partition.appended(0, 3);
        for owner in [OffsetOwner::Consumer(1), OffsetOwner::Group(1)] {
            assert_eq!(admits(&partition, owner, 2, 3), Ok(()), "{owner:?}");
            assert_eq!(admits(&partition, owner, 3, 3), refused, "{owner:?}");
            assert_eq!(admits(&partition, owner, u64::MAX, 3), refused, "{owner:?}");
            // A batch in the log whose op has not committed is not held yet.
            assert_eq!(admits(&partition, owner, 3, 5), refused, "{owner:?}");
        }
        let external = OffsetOwner::External(1);
        assert_eq!(admits(&partition, external, u64::MAX, 3), Ok(()));
        // Other writes are not judged here.
        let send = send_operation();
        assert_eq!(partition.admits(send, &batch(1, true), 1, 3), Ok(()));
        // Sends stowed as prepared at ops 2 and 3 (offsets 3..5 and 5..9): the first committed
        // and not applied yet (a backup may have served it), the second not committed.
        partition.stowed(2, 3, 2);
        partition.stowed(3, 5, 4);
        let write = store(OffsetOwner::Consumer(1), 4, 1);
        let (operation, body) = (write.operation(), write.encode());
        assert_eq!(partition.admits(operation, &body, 2, 9), Ok(()));
        let write = store(OffsetOwner::Consumer(1), 5, 1);
        let refused_past_commit = partition.admits(write.operation(), &write.encode(), 2, 9);
        assert_eq!(refused_past_commit, refused);
    }

    #[test]
    fn a_send_is_appended_once_and_a_bad_batch_never_takes_offsets() {
        let mut partition = Partition::new(0);
        let mut log = FakeLog::default();
        // Journaled whole at the log's end: the log appends it, then the core counts it.
        let Applied::Append {
            base_offset: 0,
            base_timestamp: 17,
            ..
        } = partition.apply(1, send_operation(), &batch(3, true), &log)
        else {
            panic!("a send at the log's end is appended");
        };
        assert_eq!(partition.committed_next_offset(u64::MAX), 0);
        assert_eq!(
            partition.appended(0, 3),
            WriteResult::Appended {
                base_offset: 0,
                count: 3
            }
        );
        // A replay whose batch is already in the log (it holds offsets up to 5): counted, not
        // appended again.
        let mut replay = Partition::new(0);
        log.next_offset = 5;
        assert!(matches!(
            replay.apply(1, send_operation(), &batch(3, true), &log),
            Applied::Reply(WriteResult::Appended {
                base_offset: 0,
                count: 3
            })
        ));
        // A malformed batch is refused even below the log's end, and takes no offsets.
        assert!(matches!(
            replay.apply(2, send_operation(), &batch(2, false), &log),
            Applied::Reply(WriteResult::Failed(ErrorCode::InvalidMessagesSize))
        ));
        assert!(matches!(
            replay.apply(3, send_operation(), &batch(2, true), &log),
            Applied::Reply(WriteResult::Appended {
                base_offset: 3,
                count: 2
            })
        ));
        assert_eq!(replay.unaccounted_from(log.next_offset), None);
        assert_eq!(replay.unaccounted_from(8), Some(5));
    }

    #[test]
    fn a_stowed_send_is_served_only_once_applied_and_a_journal_truncation_takes_it_back() {
        let mut partition = Partition::new(0);
        let mut log = FakeLog::default();
        assert!(
            partition
                .stow(send_operation(), &batch(0, true), &log)
                .is_none(),
            "an empty batch is journaled whole"
        );
        assert!(
            partition
                .stow(send_operation(), &batch(1, false), &log)
                .is_none()
        );
        let store = store(OffsetOwner::Consumer(1), 0, 0);
        assert!(
            partition
                .stow(store.operation(), &store.encode(), &log)
                .is_none()
        );
        for (op, count) in [(1, 4), (2, 2), (3, 1)] {
            let stow = partition
                .stow(send_operation(), &batch(count, true), &log)
                .expect("a valid send is stowed");
            assert_eq!(stow.base_offset, log.next_offset);
            let stand_in = StowedBatch::decode_fixed(&stow.stand_in).unwrap();
            assert_eq!(
                (
                    stand_in.base_offset,
                    stand_in.message_count,
                    stand_in.length
                ),
                (log.next_offset, count, 256)
            );
            assert_eq!(stow.count, count);
            partition.stowed(op, stow.base_offset, stow.count);
            log.next_offset += u64::from(count);
        }
        // Stowed and journaled, not committed (a rejoining replica's journal): accounted for.
        assert_eq!(partition.unaccounted_from(log.next_offset), None);
        assert_eq!(
            partition.unaccounted_from(log.next_offset + 1),
            Some(log.next_offset)
        );
        let range = partition.poll_range(StartAt::First, 10, &log);
        assert_eq!(range.count, 0, "nothing is committed yet");
        assert!(matches!(
            partition.apply(1, send_operation(), &batch(4, true), &log),
            Applied::Reply(WriteResult::Appended {
                base_offset: 0,
                count: 4
            })
        ));
        assert_eq!(
            partition.poll_range(StartAt::First, 10, &log),
            PollRange {
                start: 0,
                count: 4,
                current_offset: 3
            }
        );
        // The journal drops ops 3 and later: the log drops op 3's batch.
        assert_eq!(partition.unstow_after(2), Some(6));
        assert_eq!(partition.unstow_after(2), None);
        log.next_offset = 6;
        assert!(matches!(
            partition.apply(2, send_operation(), &batch(2, true), &log),
            Applied::Reply(WriteResult::Appended {
                base_offset: 4,
                count: 2
            })
        ));
    }

    #[test]
    fn a_send_whose_segment_was_retired_is_accounted_for_and_retirement_is_idempotent() {
        let mut partition = Partition::new(0);
        let log = FakeLog {
            first_offset: 10,
            next_offset: 12,
        };
        let stand_in = |base_offset, message_count| StowedBatch {
            base_offset,
            length: 256,
            received_partition_id: 0,
            received_base_offset: 0,
            received_checksum: 0,
            message_count,
        };
        assert!(!partition.retire_if_deleted(3, &stand_in(10, 2).to_bytes(), 10));
        assert!(partition.retire_if_deleted(1, &stand_in(0, 6).to_bytes(), 10));
        // Not applied yet (a replica of a larger group applies once it rejoined), the retired
        // send accounts for its offsets: the log is not cut below them.
        assert_eq!(partition.unaccounted_from(6), None);
        assert_eq!(partition.unaccounted_from(7), Some(6));
        // Written before the stand-in carried its count: it lies below the log.
        assert!(partition.retire_if_deleted(2, &stand_in(6, 0).to_bytes(), 10));
        let retired = partition.apply(1, send_operation(), &Bytes::new(), &log);
        assert!(matches!(
            retired,
            Applied::Reply(WriteResult::Appended {
                base_offset: 0,
                count: 6
            })
        ));
        assert_eq!(
            partition.unaccounted_from(12),
            None,
            "a count-less stand-in"
        );
        partition.apply(2, send_operation(), &Bytes::new(), &log);
        assert_eq!(partition.committed_next_offset(log.next_offset), 10);
        let retire = PartitionWrite::RetireSegments {
            keep_from: 10,
            planned_at: 2,
        };
        for op in [3, 4] {
            assert!(matches!(
                partition.apply(op, retire.operation(), &retire.encode(), &log),
                Applied::Retire { keep_from: 10 }
            ));
        }
    }

    #[test]
    fn a_replicated_partition_retires_only_what_every_replica_holds() {
        let solo = Partition::new(0);
        assert_eq!(
            solo.retirable_below(),
            u64::MAX,
            "a group of one is not bounded"
        );
        let mut partition = Partition::new(0);
        partition.bound_retirement_by_replicas();
        let empty = FakeLog::default();
        for (op, count) in [(1, 4), (2, 3), (3, 5)] {
            let Applied::Append { base_offset, .. } =
                partition.apply(op, send_operation(), &batch(count, true), &empty)
            else {
                panic!("a send appends");
            };
            partition.appended(base_offset, count);
        }
        assert_eq!(
            partition.retirable_below(),
            0,
            "no replica is known to hold anything"
        );
        partition.may_retire_through(1);
        assert_eq!(partition.retirable_below(), 4);
        partition.may_retire_through(2);
        assert_eq!(partition.retirable_below(), 7);
        // Held everywhere up to the last op applied: its end is the partition's.
        partition.may_retire_through(3);
        assert_eq!(partition.retirable_below(), 12);
        apply(&mut partition, 4, store(OffsetOwner::Consumer(1), 1, 0));
        partition.may_retire_through(4);
        assert_eq!(partition.retirable_below(), 12);
        // A restart from a checkpoint at op 4: its offsets are everywhere once op 4 is.
        let mut restored = Partition::new(0);
        restored.bound_retirement_by_replicas();
        restored.restore(&partition.encode_state(), 12).unwrap();
        restored.restored_at(4);
        restored.may_retire_through(3);
        assert_eq!(
            restored.retirable_below(),
            0,
            "a replica may lag behind the checkpoint"
        );
        restored.may_retire_through(4);
        assert_eq!(restored.retirable_below(), 12);
    }

    /// A log retired past the partition's committed end (a `keep_from` past it deleted stowed
    /// sends not committed yet) serves nothing, from any start, and never an uncommitted send.
    #[test]
    fn a_poll_of_a_log_retired_past_its_committed_end_serves_nothing() {
        let mut partition = Partition::new(0);
        let empty = FakeLog::default();
        let Applied::Append { base_offset, .. } =
            partition.apply(1, send_operation(), &batch(4, true), &empty)
        else {
            panic!("a send appends");
        };
        partition.appended(base_offset, 4);
        apply(&mut partition, 2, store(OffsetOwner::Consumer(1), 1, 0));
        let log = FakeLog {
            first_offset: 8,
            next_offset: 12,
        };
        for start in [
            StartAt::Offset(2),
            StartAt::Next {
                owner: OffsetOwner::Consumer(1),
                owner_created_at_op: 0,
            },
            StartAt::First,
            StartAt::Last,
        ] {
            let range = partition.poll_range(start, 5, &log);
            assert_eq!((range.count, range.current_offset), (0, 3), "{start:?}");
        }
    }

    #[test]
    fn a_group_offset_no_live_group_owns_holds_no_segment_back() {
        let mut partition = Partition::new(0);
        // Group 1 stored 4 at metadata op 5, then was deleted and a new group 1 created at 10;
        // group 2 stored 6 at op 5 and was deleted; group 3 stored 8 at op 25, a creation
        // the planner's model (op 20) has not applied yet.
        apply(&mut partition, 1, store(OffsetOwner::Group(1), 4, 5));
        apply(&mut partition, 2, store(OffsetOwner::Group(2), 6, 5));
        apply(&mut partition, 3, store(OffsetOwner::Group(3), 8, 25));
        let live = BTreeMap::from([(1, 10)]);
        assert_eq!(partition.retirement_floor(&live, 20), 8);
        // The new group 1's own offset holds its segments back.
        apply(&mut partition, 4, store(OffsetOwner::Group(1), 3, 12));
        assert_eq!(partition.retirement_floor(&live, 20), 3);
    }

    #[test]
    fn only_consumers_and_iggy_groups_hold_segments_back() {
        let mut partition = Partition::new(0);
        let live = BTreeMap::from([(1, 0)]);
        assert_eq!(partition.retirement_floor(&live, 3), u64::MAX);
        apply(&mut partition, 1, store(OffsetOwner::External(1), 2, 0));
        assert_eq!(partition.retirement_floor(&live, 3), u64::MAX);
        apply(&mut partition, 2, store(OffsetOwner::Group(1), 9, 0));
        apply(&mut partition, 3, store(OffsetOwner::Consumer(1), 7, 0));
        assert_eq!(partition.retirement_floor(&live, 3), 7);
        let log = FakeLog {
            first_offset: 0,
            next_offset: 0,
        };
        let next = partition.poll_range(
            StartAt::Next {
                owner: OffsetOwner::Consumer(1),
                owner_created_at_op: 0,
            },
            1,
            &log,
        );
        assert_eq!(next.count, 0);
    }

    /// A retirement planned by a replica that had not applied the latest offset stores (the
    /// metadata primary plans a DeleteSegments from its own copy of a partition it does not
    /// lead): every replica applies it held back to what those stores have not committed.
    #[test]
    fn an_offset_stored_after_a_retirements_plan_holds_it_back_at_apply() {
        let log = FakeLog {
            first_offset: 0,
            next_offset: 100,
        };
        let retire = |keep_from, planned_at| {
            let write = PartitionWrite::RetireSegments {
                keep_from,
                planned_at,
            };
            (write.operation(), write.encode())
        };
        let mut partition = Partition::new(0);
        apply(&mut partition, 1, store(OffsetOwner::Consumer(1), 40, 0));
        apply(&mut partition, 2, store(OffsetOwner::External(2), 5, 0));
        assert_eq!(partition.applied(), 2);
        // Planned at op 2: consumer 1 had committed 40, which the plan kept to.
        let (operation, body) = retire(41, 2);
        let applied = partition.apply(3, operation, &body, &log);
        assert!(matches!(applied, Applied::Retire { keep_from: 41 }));
        // Consumer 1 went back to 10 (op 4) and group 3 stored 20 (op 5) after a plan at op 3.
        apply(&mut partition, 4, store(OffsetOwner::Consumer(1), 10, 0));
        apply(&mut partition, 5, store(OffsetOwner::Group(3), 20, 0));
        let (operation, body) = retire(60, 3);
        let applied = partition.apply(6, operation, &body, &log);
        assert!(matches!(applied, Applied::Retire { keep_from: 11 }));
        // A plan at op 4 saw consumer 1's store, not group 3's.
        let (operation, body) = retire(60, 4);
        let applied = partition.apply(7, operation, &body, &log);
        assert!(matches!(applied, Applied::Retire { keep_from: 21 }));
        // Kind 3 stores hold nothing back, and a retention pass is held by no offset.
        apply(&mut partition, 8, store(OffsetOwner::External(2), 1, 0));
        let (operation, body) = retire(60, 7);
        let applied = partition.apply(9, operation, &body, &log);
        assert!(matches!(applied, Applied::Retire { keep_from: 60 }));
        let (operation, body) = retire(60, NO_OFFSET_HOLD);
        let applied = partition.apply(10, operation, &body, &log);
        assert!(matches!(applied, Applied::Retire { keep_from: 60 }));
        // The storing ops survive a checkpoint: a replica restored from one holds back alike.
        let mut restored = Partition::new(0);
        restored.restore(&partition.encode_state(), 100).unwrap();
        restored.restored_at(10);
        assert_eq!(restored.applied(), 10);
        let (operation, body) = retire(60, 3);
        let applied = restored.apply(11, operation, &body, &log);
        assert!(matches!(applied, Applied::Retire { keep_from: 11 }));
    }
}
