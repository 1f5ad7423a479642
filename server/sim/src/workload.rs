//! The partition's clients and the checker of its history.
//!
//! Clients send batches of 1 to 6 messages (each message id unique in the run), now and then a
//! malformed batch (refused, taking no offsets), store consumer and group offsets, retire
//! segments (`DeleteSegments` below a `keep_from` that is 0, an acknowledged offset, or past
//! the committed end), and end their sessions with a `RetireSessions` op. Every committed op's
//! reply feeds a [`History`]: the message committed at each offset (offsets dense from 0, each
//! message id once), the next offset after each op, the stored offsets and the retirement
//! point (the highest `keep_from` committed: below it any replica may have deleted messages).
//! The checks:
//!
//! - every acknowledged send names the offsets its messages got, holding exactly the bytes
//!   sent, in order;
//! - after every step, each live replica's committed next offset is the history's at its
//!   commit; its log's first offset lies at or below the retirement point (a retirement
//!   deleted no message at or above its `keep_from`) and never moves back below its committed
//!   end (a retired message never returns); a poll on a replica in normal status (random
//!   start: offset, first, last, timestamp, a consumer's next) returns exactly the committed
//!   messages of its range, so never an uncommitted one nor one lost and replaced; every 64
//!   ticks and at the end, each live replica's whole log from its first offset to its
//!   committed end is read back and compared (dense, each message once, with its bytes);
//! - after every step, each live replica holds exactly the consumer and group offsets the
//!   committed stores and group deletions up to its commit leave, by the server's rule (a store
//!   of a group whose deletion applied here after the op it was resolved at is refused, and so
//!   is one of a group created before the group whose offset is kept; a deletion removes the
//!   offsets of groups created before it), so stored offsets are linearizable per owner;
//!   every committed store's reply is the rule's;
//! - with consumer groups ([`PartitionWorkload::with_consumer_groups`], the node simulation:
//!   the metadata group creates and deletes them, ids reused, and the clients store under
//!   groups of a view they resolved, now and then a stale one, and carry deletions to the
//!   partition late; a recreated group's id gets a store by its live group, then a late one by
//!   the deleted group, before that group's deletion reaches the partition), a live group is
//!   served, directly or as a `Next` poll's start, only its own offset (stored by the group
//!   its creation op names, or where that is unknown resolved at or after it): never the
//!   offset a deleted group with the same id stored, and a deleted group's late store never
//!   replaces the live group's acknowledged one;
//! - at the end, every acknowledged send is read back at its offsets from the replica's first
//!   on every replica that committed it, and a replica that applied every op holds the
//!   history's consumer offsets.

use crate::log::{SimLog, frame_end};
use crate::machine::{MachineFigures, PartitionMachine};
use bytes::Bytes;
use iggy_generated::errors::ErrorCode;
use iggy_generated::frames::{BatchHeader, MessageFrameHeader};
use iggy_generated::payloads::SessionIdentity;
use iggy_partition::{
    CREATED_AT_UNKNOWN, KEYS_UNLIMITED, KeptOffset, NO_OFFSET_HOLD, OffsetOwner, PartitionWrite,
    RESOLVED_AT_UNKNOWN, StartAt, WriteResult,
};
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::machine::{NodeView, Workload};
use iggy_vsr::{Entry, Status};
use std::collections::{BTreeMap, HashMap};

/// What one client request does.
#[derive(Clone, Debug)]
enum Request {
    /// A well-formed batch of these message frames.
    Send {
        frames: Vec<Bytes>,
    },
    /// A batch whose length field lies: refused, taking no offsets.
    Malformed,
    Store {
        owner: OffsetOwner,
        offset: u64,
        /// The metadata op the owner was resolved at (a group's: when it existed).
        resolved_at: u64,
        /// The metadata op that created the group instance resolved (0: a consumer).
        owner_created_at: u64,
        /// The offset keys the proposing node's configuration allows (0: no limit); proposers
        /// differ, as nodes configured differently would.
        keys_max: u32,
    },
    /// A consumer group's deletion at metadata op `metadata_op` reaching this partition (the
    /// server's `DeleteGroupOffsets` effect, or its sweep).
    DeleteGroupOffsets {
        group: u32,
        metadata_op: u64,
    },
    /// Retire the segments below `keep_from`, as planned by a replica that had applied every
    /// op up to `planned_at` (offsets stored later hold it back; `NO_OFFSET_HOLD`: none do).
    Retire {
        keep_from: u64,
        planned_at: u64,
    },
    Logout,
}

/// A request as first made: retries send the same bytes.
#[derive(Clone, Debug)]
struct Planned {
    request: Request,
    operation: u8,
    body: Bytes,
}

/// Counts of what a run exercised.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Sends acknowledged to their client, each checked against the history.
    pub sends_acknowledged: u64,
    /// Messages in those sends.
    pub messages_acknowledged: u64,
    /// Messages committed (the history's length).
    pub messages_committed: u64,
    /// Malformed batches refused.
    pub malformed_refused: u64,
    /// Offset stores acknowledged, and of them refused because their group was deleted; of
    /// those, stores of a deleted instance committed after a later instance with its id
    /// stored (refused as the later one's offset is kept: its deletion had not applied here).
    pub stores_acknowledged: u64,
    pub stores_refused: u64,
    pub stores_superseded: u64,
    /// Offset stores acknowledged as refused because they needed a new key where the partition
    /// kept as many as their limit (TooManyConsumerOffsets).
    pub stores_at_key_limit: u64,
    /// Group deletions committed (the server's `DeleteGroupOffsets`).
    pub group_deletions_committed: u64,
    /// Offset reads checked against the committed stores, and of them reads by a group whose
    /// id held an earlier group's offset (which must not be served).
    pub offset_reads: u64,
    pub inherited_offsets_withheld: u64,
    /// Segment retirements committed, and of them past the committed end at the time.
    pub retirements_committed: u64,
    pub retirements_past_end: u64,
    /// Retirements committed that offsets stored after their plan held back.
    pub retirements_held_by_later_stores: u64,
    /// Polls checked, and the messages they returned.
    pub polls: u64,
    pub messages_polled: u64,
    /// Whole committed logs read back and compared.
    pub full_reads: u64,
    /// Over every replica's logs and restarts.
    pub machines: MachineFigures,
}

/// The committed history every replica must agree with.
#[derive(Debug, Default)]
pub struct History {
    /// The frame of the message committed at each offset (dense from 0).
    messages: Vec<Bytes>,
    /// The offset of each committed message id.
    ids: HashMap<u128, u64>,
    /// The next offset after each committed op that appended.
    next_after: BTreeMap<u64, u64>,
    /// Consumer and group offsets after the latest committed op, with the metadata op each
    /// was resolved at.
    offsets: BTreeMap<OffsetOwner, KeptOffset>,
    /// The offsets after each committed op that changed them.
    offsets_after: BTreeMap<u64, BTreeMap<OffsetOwner, KeptOffset>>,
    /// Per group id, the metadata op of its latest deletion applied here.
    group_deletions: BTreeMap<u32, u64>,
    /// The metadata op that created the partition: an earlier group deletion never reaches it.
    created_at_op: u64,
    /// The highest `keep_from` of a committed segment retirement: messages below it may be
    /// gone from any replica's log, every one at or above it must stay.
    retired_below: u64,
    /// The latest op applied.
    last_op: u64,
    /// Stores refused because a later instance of their group id holds the offset.
    superseded_stores: u64,
}

/// An offset store as journaled.
#[derive(Clone, Copy, Debug)]
pub struct StoreOffset {
    pub owner: OffsetOwner,
    pub offset: u64,
    /// The metadata op the owner was resolved at.
    pub resolved_at: u64,
    /// The metadata op that created the owner group instance (0: a consumer, or unknown).
    pub owner_created_at: u64,
    /// The offset keys the partition may keep for a new key to be stored (0: no limit).
    pub keys_max: u32,
}

impl History {
    /// Op `op` appended `frames` at `base_offset`.
    pub fn commit_send(
        &mut self,
        op: u64,
        base_offset: u64,
        frames: &[Bytes],
    ) -> Result<(), String> {
        if base_offset != self.messages.len() as u64 {
            return Err(format!(
                "op {op} appended at offset {base_offset}, but the next offset is {}",
                self.messages.len()
            ));
        }
        for frame in frames {
            let offset = self.messages.len() as u64;
            if let Some(earlier) = self.ids.insert(message_id(frame), offset) {
                return Err(format!(
                    "op {op}: message {} committed at offsets {earlier} and {offset}",
                    message_id(frame)
                ));
            }
            self.messages.push(frame.clone());
        }
        self.next_after.insert(op, self.messages.len() as u64);
        Ok(())
    }

    /// The outcome of a committed offset store, as the server's rule has it: refused when the
    /// owner is a group whose deletion applied here came after the op the store was resolved
    /// at (the group it named is gone), or when the offset kept is of a later instance of the
    /// group id than the store's (the store's instance is gone, its deletion not applied here
    /// yet: a later instance's acknowledged offset is never replaced by it); kept otherwise.
    /// A creation op not known (0) tells no instance from another. Refused too when its owner
    /// has no offset here and the partition keeps `keys_max` or more (TooManyConsumerOffsets).
    pub fn commit_store(&mut self, op: u64, store: StoreOffset) -> WriteResult {
        let StoreOffset {
            owner,
            offset,
            resolved_at,
            owner_created_at,
            keys_max,
        } = store;
        let deleted = match owner {
            OffsetOwner::Consumer(_) => None,
            OffsetOwner::Group(group) | OffsetOwner::External(group) => {
                self.group_deletions.get(&group)
            }
        };
        if deleted.is_some_and(|deleted| *deleted > resolved_at) {
            return WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound);
        }
        if let Some(kept) = self.offsets.get(&owner)
            && owner_created_at != CREATED_AT_UNKNOWN
            && owner_created_at < kept.created_at
        {
            self.superseded_stores += 1;
            return WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound);
        }
        if keys_max != KEYS_UNLIMITED
            && !self.offsets.contains_key(&owner)
            && self.offsets.len() >= keys_max as usize
        {
            return WriteResult::Failed(ErrorCode::TooManyConsumerOffsets);
        }
        let kept = KeptOffset {
            offset,
            resolved_at,
            created_at: owner_created_at,
            stored_at: op,
        };
        self.offsets.insert(owner, kept);
        self.offsets_after.insert(op, self.offsets.clone());
        WriteResult::Done
    }

    /// Whether `kept` is the offset of the instance of its group id created at metadata op
    /// `created_at_op`: the same creation op where both are known; otherwise resolved at or
    /// after `created_at_op` (a store resolved before it was an earlier instance's).
    fn of_instance(kept: &KeptOffset, created_at_op: u64) -> bool {
        match (kept.created_at, created_at_op) {
            (CREATED_AT_UNKNOWN, _) | (_, CREATED_AT_UNKNOWN) => kept.resolved_at >= created_at_op,
            (created_at, reader) => created_at == reader,
        }
    }

    /// A group's deletion at metadata op `metadata_op` committed: applied when it is later
    /// than the partition's creation and the group's latest deletion here, removing the
    /// group's offsets resolved before it (a later group's stay).
    pub fn commit_group_deletion(&mut self, op: u64, group: u32, metadata_op: u64) {
        let latest = self.group_deletions.get(&group).copied().unwrap_or(0);
        if metadata_op <= self.created_at_op || metadata_op <= latest {
            return;
        }
        self.group_deletions.insert(group, metadata_op);
        // An instance created before the deletion is gone by it (its creation op, where
        // known, or its resolution op, before which it was created).
        for owner in [OffsetOwner::Group(group), OffsetOwner::External(group)] {
            if self
                .offsets
                .get(&owner)
                .is_some_and(|kept| match kept.created_at {
                    CREATED_AT_UNKNOWN => {
                        kept.resolved_at < metadata_op || kept.resolved_at == RESOLVED_AT_UNKNOWN
                    }
                    created_at => created_at < metadata_op,
                })
            {
                self.offsets.remove(&owner);
            }
        }
        self.offsets_after.insert(op, self.offsets.clone());
    }

    /// The offsets kept once every op up to `op` is applied (`None`: none yet).
    pub fn offsets_at(&self, op: u64) -> Option<&BTreeMap<OffsetOwner, KeptOffset>> {
        self.offsets_after
            .range(..=op)
            .next_back()
            .map(|(_, offsets)| offsets)
    }

    /// The offset served to `owner`, created by metadata op `created_at_op` (0 for a
    /// consumer), once every op up to `op` is applied: the latest stored, unless another
    /// instance of the group id stored it ([`History::of_instance`]).
    pub fn served_offset(&self, op: u64, owner: OffsetOwner, created_at_op: u64) -> Option<u64> {
        let kept = *self.offsets_at(op)?.get(&owner)?;
        History::of_instance(&kept, created_at_op).then_some(kept.offset)
    }

    /// A segment retirement below `keep_from`, planned at op `planned_at`, committed: held
    /// back to the first message an offset stored after `planned_at` has not committed (kind 3
    /// offsets hold nothing back). Returns where it retires below.
    pub fn commit_retirement(&mut self, keep_from: u64, planned_at: u64) -> u64 {
        let held_from = self
            .offsets
            .iter()
            .filter(|(owner, kept)| {
                !matches!(owner, OffsetOwner::External(_)) && kept.stored_at > planned_at
            })
            .map(|(_, kept)| kept.offset + 1)
            .min()
            .unwrap_or(u64::MAX);
        let keep_from = keep_from.min(held_from);
        self.retired_below = self.retired_below.max(keep_from);
        keep_from
    }

    /// A replica's log holds messages from `first_offset`: no retirement may have deleted a
    /// message at or above the committed retirement point.
    pub fn check_first_offset(&self, first_offset: u64) -> Result<(), String> {
        match first_offset <= self.retired_below {
            true => Ok(()),
            false => Err(format!(
                "the log starts at offset {first_offset}, past the retirement point {}: \
                 messages no retirement removed are gone",
                self.retired_below
            )),
        }
    }

    /// The next offset once every op up to `op` is applied.
    pub fn next_offset_at(&self, op: u64) -> u64 {
        self.next_after
            .range(..=op)
            .next_back()
            .map_or(0, |(_, next)| *next)
    }

    /// A read of `expected` messages from `start` returned `messages`: they must be exactly the
    /// committed ones at those offsets.
    pub fn check_read(
        &self,
        start: u64,
        expected: u32,
        messages: &[(u64, Bytes)],
    ) -> Result<(), String> {
        if messages.len() != expected as usize {
            return Err(format!(
                "a read of {expected} messages from offset {start} returned {}",
                messages.len()
            ));
        }
        for (position, (offset, frame)) in messages.iter().enumerate() {
            if *offset != start + position as u64 {
                return Err(format!(
                    "a read from offset {start} returned offset {offset} at position {position}"
                ));
            }
            match self.messages.get(*offset as usize) {
                Some(committed) if committed == frame => {}
                Some(_) => {
                    return Err(format!(
                        "offset {offset} holds other bytes than the message committed there"
                    ));
                }
                None => return Err(format!("offset {offset} was never committed")),
            }
        }
        Ok(())
    }
}

/// A replica's log's first offset moved from `previous` to `first_offset` with its committed
/// end at `committed_next`: it only moves back when the log restarted past its committed end
/// (a truncation of stowed sends a retirement had already removed), never to bring back a
/// retired message.
pub fn check_first_moves_forward(
    previous: u64,
    first_offset: u64,
    committed_next: u64,
) -> Result<(), String> {
    match first_offset >= previous || first_offset >= committed_next {
        true => Ok(()),
        false => Err(format!(
            "the log's first offset moved back from {previous} to {first_offset}, below its \
             committed end {committed_next}: retired messages came back"
        )),
    }
}

/// The partition workload of one seed.
#[derive(Debug)]
pub struct PartitionWorkload {
    seed: u64,
    rng: Rng,
    requests: HashMap<(u128, u64), Planned>,
    history: History,
    /// Acknowledged sends: (op, base offset, frames).
    acknowledged: Vec<(u64, u64, Vec<Bytes>)>,
    next_message_id: u128,
    /// Each replica's log's first offset at the last check.
    first_offsets: Vec<u64>,
    /// The timestamp of the next batch, in microseconds.
    clock: u64,
    /// Of the requests, the percent that retire segments.
    retire_percent: u64,
    /// With consumer groups from the metadata group: what the clients know of them.
    groups: Option<GroupViews>,
    figures: Figures,
}

/// The consumer groups of the partition's topic as the metadata group committed them, seen
/// over time: a client resolves a group at some node's (maybe stale) view of them.
#[derive(Debug, Default)]
struct GroupViews {
    /// (metadata op, group id → the op that created it), oldest first, one per change.
    views: Vec<(u64, BTreeMap<u32, u64>)>,
    /// Group deletions (group, metadata op) after the partition's creation, each carried to
    /// the partition by one request, at a time of the client's choosing.
    known: std::collections::BTreeSet<(u32, u64)>,
    pending: std::collections::VecDeque<(u32, u64)>,
    /// Group ids for which a late store of a deleted instance was planned (see
    /// [`GroupViews::recreated_store`]): their deletions are no longer held back.
    late_stores_planned: std::collections::BTreeSet<u32>,
    /// Live instances of recreated group ids (id, creation op) a store was planned for.
    stored: std::collections::BTreeSet<(u32, u64)>,
}

impl GroupViews {
    /// With a group id recreated (an older view holds an instance of it that the latest view
    /// replaced), the store that makes the late-store case: first one by the live instance
    /// (resolved at the latest view), then one by the deleted instance, as a node whose model
    /// lags resolves it (at the latest view where it lived), which commits after the live
    /// instance's store and, as its deletion is held back, before that deletion reaches the
    /// partition. `None` once both were planned. Returns (owner, resolved at, created at).
    fn recreated_store(&mut self) -> Option<(OffsetOwner, u64, u64)> {
        let (latest_op, latest) = self.views.last()?;
        let (group, op, created_at, live) =
            self.views.iter().rev().skip(1).find_map(|(op, groups)| {
                groups.iter().find_map(|(group, created_at)| {
                    let live = *latest.get(group)?;
                    (live > *created_at && !self.late_stores_planned.contains(group)).then_some((
                        *group,
                        *op,
                        *created_at,
                        live,
                    ))
                })
            })?;
        if self.stored.insert((group, live)) {
            return Some((OffsetOwner::Group(group), *latest_op, live));
        }
        self.late_stores_planned.insert(group);
        Some((OffsetOwner::Group(group), op, created_at))
    }

    /// Whether the deletion of `group` at metadata op `metadata_op` is held back: a later
    /// instance of the id lives and no late store of the deleted one was planned yet, so the
    /// deleted instance's store may commit after the later one's, before its deletion.
    fn holds_back(&self, (group, metadata_op): (u32, u64)) -> bool {
        let recreated = self
            .views
            .last()
            .is_some_and(|(_, latest)| latest.get(&group).is_some_and(|at| *at > metadata_op));
        recreated && !self.late_stores_planned.contains(&group)
    }
}

impl PartitionWorkload {
    /// The workload for `seed` (its own random stream, apart from the faults').
    pub fn new(seed: u64) -> Self {
        PartitionWorkload {
            seed,
            rng: Rng::new(seed ^ 0x9a27_1710),
            requests: HashMap::new(),
            history: History::default(),
            acknowledged: Vec::new(),
            next_message_id: 1,
            first_offsets: Vec::new(),
            clock: 1_000_000,
            retire_percent: 7,
            groups: None,
            figures: Figures::default(),
        }
    }

    /// The same workload for a partition created by metadata op `created_at_op` whose
    /// topic's consumer groups the metadata group creates and deletes: group offsets are
    /// stored under the groups of a view the client resolved them at (now and then a stale
    /// one), group deletions are carried to the partition late, and reads are checked with
    /// the reading group's creation op ([`PartitionWorkload::observe_groups`]).
    pub fn with_consumer_groups(mut self, created_at_op: u64) -> Self {
        self.history.created_at_op = created_at_op;
        self.groups = Some(GroupViews::default());
        self
    }

    /// The metadata group committed op `metadata_op`, after which the topic's groups are
    /// `groups` (id → creation op) and its group deletions `deletions` (group, op).
    pub fn observe_groups(
        &mut self,
        metadata_op: u64,
        groups: &BTreeMap<u32, u64>,
        deletions: impl Iterator<Item = (u32, u64)>,
    ) {
        let created_at_op = self.history.created_at_op;
        let Some(views) = self.groups.as_mut() else {
            return;
        };
        if views.views.last().is_none_or(|(_, last)| last != groups) {
            views.views.push((metadata_op, groups.clone()));
        }
        for deletion in deletions {
            if deletion.1 > created_at_op && views.known.insert(deletion) {
                views.pending.push_back(deletion);
            }
        }
    }

    /// The topic's groups now: id → creation op.
    fn live_groups(&self) -> BTreeMap<u32, u64> {
        self.groups
            .as_ref()
            .and_then(|views| views.views.last())
            .map(|(_, groups)| groups.clone())
            .unwrap_or_default()
    }

    /// An offset store's owner, the op it was resolved at and the op that created it: a
    /// consumer, or (with groups) a group of the latest view or, now and then, of an older one
    /// (a node that lags).
    fn plan_owner(&mut self) -> (OffsetOwner, u64, u64) {
        let id = self.rng.below(3) as u32;
        let Some(views) = self.groups.as_ref() else {
            let owner = match self.rng.chance(50) {
                true => OffsetOwner::Consumer(id),
                false => OffsetOwner::Group(id),
            };
            return (owner, 0, CREATED_AT_UNKNOWN);
        };
        if views.views.is_empty() || self.rng.chance(40) {
            return (OffsetOwner::Consumer(id), 0, CREATED_AT_UNKNOWN);
        }
        let last = views.views.len() - 1;
        let index = match self.rng.chance(70) {
            true => last,
            false => self.rng.below(last as u64 + 1) as usize,
        };
        let (op, groups) = &views.views[index];
        let ids: Vec<(u32, u64)> = groups.iter().map(|(id, at)| (*id, *at)).collect();
        match ids.get(self.rng.below(ids.len() as u64 + 1) as usize) {
            Some((group, created_at)) => (OffsetOwner::Group(*group), *op, *created_at),
            None => (OffsetOwner::Consumer(id), 0, CREATED_AT_UNKNOWN),
        }
    }

    /// The offset-key limit a store carries: mostly none, now and then 1 to 5, so stores of
    /// the few owners planned meet it and proposers disagree on it.
    fn plan_keys_max(&mut self) -> u32 {
        match self.rng.chance(25) {
            true => 1 + self.rng.below(5) as u32,
            false => KEYS_UNLIMITED,
        }
    }

    /// Now and then, with groups, a store of a recreated group id ([`GroupViews::recreated_store`]).
    fn plan_recreated_store(&mut self) -> Option<(OffsetOwner, u64, u64)> {
        let views = self.groups.as_mut()?;
        match self.rng.chance(40) {
            true => views.recreated_store(),
            false => None,
        }
    }

    /// The same workload retiring segments in `percent` of its requests (7 by default), so
    /// that a replica left behind finds its peers retired what it lacks.
    pub fn with_retire_percent(mut self, percent: u64) -> Self {
        assert!(percent <= 40, "sends and stores stay the bulk");
        self.retire_percent = percent;
        self
    }

    /// The same workload numbering its messages from `first` on, so messages of different
    /// partitions (a deleted one and the next one under its ids) never share an id.
    pub fn with_message_ids_from(mut self, first: u128) -> Self {
        self.next_message_id = first;
        self
    }

    /// What the run exercised.
    pub fn figures(&self) -> Figures {
        Figures {
            messages_committed: self.history.messages.len() as u64,
            stores_superseded: self.history.superseded_stores,
            ..self.figures.clone()
        }
    }

    fn fail(&self, what: String) -> ! {
        panic!("seed {}: partition checker: {what}", self.seed)
    }

    fn plan(&mut self, client: u128, logout: bool) -> Planned {
        self.clock += 1 + self.rng.below(1_000);
        let roll = self.rng.below(100);
        // A deletion whose id was recreated is held back, mostly, until a late store of the
        // deleted instance was planned.
        let hold = self.groups.is_some() && self.rng.chance(90);
        let deletion = self.groups.as_ref().and_then(|views| {
            let front = views.pending.front().copied()?;
            (!hold || !views.holds_back(front)).then_some(front)
        });
        let request = if logout {
            Request::Logout
        } else if let Some((group, metadata_op)) = deletion.filter(|_| roll.is_multiple_of(3)) {
            self.groups.as_mut().expect("groups").pending.pop_front();
            Request::DeleteGroupOffsets { group, metadata_op }
        } else if let Some((owner, resolved_at, owner_created_at)) = self.plan_recreated_store() {
            let offset = self.rng.below(self.history.messages.len() as u64 + 1);
            Request::Store {
                owner,
                offset,
                resolved_at,
                owner_created_at,
                keys_max: self.plan_keys_max(),
            }
        } else if roll < 55 {
            let count = 1 + self.rng.below(6);
            let frames = (0..count)
                .map(|index| {
                    let id = self.next_message_id;
                    self.next_message_id += 1;
                    let payload: Vec<u8> = (0..self.rng.below(48))
                        .map(|_| self.rng.next_u64() as u8)
                        .collect();
                    let headers_length = if self.rng.chance(20) {
                        self.rng.below(12) as usize
                    } else {
                        0
                    };
                    frame(id, index as u32, &payload, &vec![0xab; headers_length])
                })
                .collect();
            Request::Send { frames }
        } else if roll < 60 {
            Request::Malformed
        } else if roll < 60 + self.retire_percent {
            Request::Retire {
                keep_from: self.plan_keep_from(),
                planned_at: self.plan_planned_at(),
            }
        } else {
            let (owner, resolved_at, owner_created_at) = self.plan_owner();
            let offset = self.rng.below(self.history.messages.len() as u64 + 1);
            Request::Store {
                owner,
                offset,
                resolved_at,
                owner_created_at,
                keys_max: self.plan_keys_max(),
            }
        };
        let write = match &request {
            Request::Send { frames } => PartitionWrite::Send {
                batch: batch_of_frames(self.clock, frames),
            },
            Request::Malformed => {
                let mut batch = batch_of_frames(self.clock, &[frame(0, 0, b"m", b"")]).to_vec();
                let length = BatchHeader::BATCH_LENGTH_OFFSET;
                batch[length] = batch[length].wrapping_add(1);
                PartitionWrite::Send {
                    batch: batch.into(),
                }
            }
            Request::Store {
                owner,
                offset,
                resolved_at,
                owner_created_at,
                keys_max,
            } => PartitionWrite::StoreOffset {
                owner: *owner,
                offset: *offset,
                resolved_at: *resolved_at,
                owner_created_at: *owner_created_at,
                keys_max: *keys_max,
            },
            Request::DeleteGroupOffsets { group, metadata_op } => {
                PartitionWrite::DeleteGroupOffsets {
                    group: *group,
                    metadata_op: *metadata_op,
                }
            }
            Request::Retire {
                keep_from,
                planned_at,
            } => PartitionWrite::RetireSegments {
                keep_from: *keep_from,
                planned_at: *planned_at,
            },
            Request::Logout => PartitionWrite::RetireSessions {
                sessions: vec![SessionIdentity {
                    client_id: client,
                    session: 1,
                    metadata_watermark: 0,
                }],
            },
        };
        Planned {
            request,
            operation: write.operation(),
            body: write.encode(),
        }
    }

    /// Where a segment retirement keeps the log from: now and then 0 (nothing to delete) or
    /// past the committed end (segments of sends prepared but not committed may go), mostly an
    /// acknowledged message's offset.
    fn plan_keep_from(&mut self) -> u64 {
        let committed = self.history.messages.len() as u64;
        match self.rng.below(8) {
            0 => 0,
            1 | 2 => committed + 1 + self.rng.below(24),
            _ if self.acknowledged.is_empty() => self.rng.below(committed + 1),
            _ => {
                let index = self.rng.below(self.acknowledged.len() as u64) as usize;
                let (_, base_offset, frames) = &self.acknowledged[index];
                base_offset + self.rng.below(frames.len() as u64 + 1)
            }
        }
    }

    /// The op a retirement is planned at: as by a retention pass (no offset holds it back), or
    /// by a replica that applied the history's last op or lags a few ops behind it (the
    /// metadata primary planning from its copy of a partition it does not lead), so offset
    /// stores it did not see hold it back when it is applied.
    fn plan_planned_at(&mut self) -> u64 {
        match self.rng.below(4) {
            0 => NO_OFFSET_HOLD,
            _ => self.history.last_op.saturating_sub(self.rng.below(6)),
        }
    }

    /// A poll on a random replica in normal status, checked against the history.
    fn poll(&mut self, nodes: &[NodeView<'_, PartitionMachine>]) {
        let index = self.rng.below(nodes.len() as u64) as usize;
        let node = &nodes[index];
        if node.replica.is_none_or(|r| r.status() != Status::Normal) {
            return;
        }
        let next = node.machine.committed_next_offset();
        let start = match self.rng.below(5) {
            0 => StartAt::Offset(self.rng.below(next + 3)),
            1 => StartAt::First,
            2 => StartAt::Last,
            3 => StartAt::Timestamp(1_000_000 + self.rng.below(self.clock - 1_000_000 + 1)),
            _ => {
                let groups = self.live_groups();
                let group = match groups.is_empty() {
                    true => None,
                    false => groups
                        .iter()
                        .nth(self.rng.below(groups.len() as u64 + 1) as usize),
                };
                let (owner, owner_created_at_op) = match group {
                    Some((group, created_at_op)) => (OffsetOwner::Group(*group), *created_at_op),
                    None => (OffsetOwner::Consumer(self.rng.below(3) as u32), 0),
                };
                StartAt::Next {
                    owner,
                    owner_created_at_op,
                }
            }
        };
        let count = self.rng.below(12) as u32;
        let (range, messages) = node.machine.poll(start, count);
        if let (
            StartAt::Next {
                owner,
                owner_created_at_op,
            },
            Some(replica),
        ) = (start, node.replica)
        {
            // After the offset the owner itself stored, else from the first message.
            let first = node.machine.first_offset();
            let served =
                self.history
                    .served_offset(replica.commit_min(), owner, owner_created_at_op);
            let from = served.map_or(first, |offset| offset + 1).max(first);
            if count > 0 && range.start != from.min(next) {
                self.fail(format!(
                    "replica {index} poll {start:?} starts at {}, after the committed offset \
                     {served:?} it is {from}",
                    range.start
                ));
            }
        }
        if range.start + u64::from(range.count) > next {
            self.fail(format!(
                "replica {index} served offsets up to {} past its committed {next}",
                range.start + u64::from(range.count)
            ));
        }
        if let Err(why) = self.history.check_read(range.start, range.count, &messages) {
            self.fail(format!("replica {index} poll {start:?}: {why}"));
        }
        self.figures.polls += 1;
        self.figures.messages_polled += messages.len() as u64;
    }

    /// Reads each live replica's whole committed log back, from its first offset.
    fn read_all(&mut self, nodes: &[NodeView<'_, PartitionMachine>]) {
        for (index, node) in nodes.iter().enumerate() {
            if node.replica.is_none() {
                continue;
            }
            let next = node.machine.committed_next_offset();
            let first = node.machine.first_offset().min(next);
            let count = (next - first) as u32;
            let (range, messages) = node.machine.poll(StartAt::First, count);
            if let Err(why) = self.history.check_read(first, count, &messages) {
                self.fail(format!("replica {index} full read ({range:?}): {why}"));
            }
            self.figures.full_reads += 1;
        }
    }

    /// Each live replica holds the offsets the committed stores and group deletions up to its
    /// commit leave (so stored offsets are linearizable per owner), and with groups, serves a
    /// live group only an offset resolved at or after the group's creation: never the offset a
    /// deleted group with the same id stored.
    fn check_offsets(&mut self, nodes: &[NodeView<'_, PartitionMachine>]) {
        let empty = BTreeMap::new();
        let live_groups = self
            .groups
            .as_ref()
            .and_then(|views| views.views.last())
            .map_or(&empty, |(_, groups)| groups);
        let no_offsets = BTreeMap::new();
        let (mut reads, mut withheld) = (0, 0);
        for (index, node) in nodes.iter().enumerate() {
            let Some(replica) = node.replica else {
                continue;
            };
            let commit = replica.commit_min();
            let expected = self.history.offsets_at(commit).unwrap_or(&no_offsets);
            let held = node.machine.core().offsets();
            let same = held.len() == expected.len()
                && held
                    .iter()
                    .zip(expected)
                    .all(|((owner, offset), (committed, kept))| {
                        owner == committed && *offset == kept.offset
                    });
            if !same {
                self.fail(format!(
                    "replica {index} at commit {commit} holds offsets {held:?}, the committed \
                     stores leave {expected:?}"
                ));
            }
            for (group, created_at_op) in live_groups {
                let owner = OffsetOwner::Group(*group);
                let served = node.machine.core().offset(owner, *created_at_op);
                reads += 1;
                let kept = expected.get(&owner);
                let inherited = kept.filter(|kept| !History::of_instance(kept, *created_at_op));
                if let (Some(offset), Some(kept)) = (served, inherited) {
                    self.fail(format!(
                        "replica {index} at commit {commit}: group {group} created at metadata \
                         op {created_at_op} reads offset {offset}, stored by another group \
                         its id named (created at op {}, resolved at op {})",
                        kept.created_at, kept.resolved_at
                    ));
                }
                withheld += u64::from(inherited.is_some());
                let expected = self.history.served_offset(commit, owner, *created_at_op);
                if served != expected {
                    self.fail(format!(
                        "replica {index} at commit {commit}: group {group} (created at op \
                         {created_at_op}) reads offset {served:?}, the committed stores {expected:?}"
                    ));
                }
            }
        }
        self.figures.offset_reads += reads;
        self.figures.inherited_offsets_withheld += withheld;
    }

    /// Each live replica's log starts at or below the retirement point, and its first offset
    /// never moves back below its committed end.
    fn check_first_offsets(&mut self, nodes: &[NodeView<'_, PartitionMachine>]) {
        self.first_offsets.resize(nodes.len(), 0);
        for (index, node) in nodes.iter().enumerate() {
            if node.replica.is_none() {
                continue;
            }
            let first = node.machine.first_offset();
            let next = node.machine.committed_next_offset();
            let previous = self.first_offsets[index];
            let checked = self
                .history
                .check_first_offset(first)
                .and_then(|()| check_first_moves_forward(previous, first, next));
            if let Err(why) = checked {
                self.fail(format!("replica {index}: {why}"));
            }
            self.first_offsets[index] = first;
        }
    }
}

impl Workload for PartitionWorkload {
    type Machine = PartitionMachine;

    fn machine(&self, replica_count: u8, _replica: u8) -> PartitionMachine {
        PartitionMachine::new(replica_count).created_at_op(self.history.created_at_op)
    }

    fn request(&mut self, client: u128, request: u64, logout: bool) -> (u8, Bytes) {
        if !self.requests.contains_key(&(client, request)) {
            let planned = self.plan(client, logout);
            self.requests.insert((client, request), planned);
        }
        let planned = &self.requests[&(client, request)];
        (planned.operation, planned.body.clone())
    }

    fn committed(&mut self, op: u64, entry: &Entry, reply: &Bytes) {
        self.history.last_op = op;
        let result = WriteResult::decode(reply);
        match PartitionWrite::decode(entry.operation, &entry.body) {
            Some(PartitionWrite::Send { batch }) => match result {
                WriteResult::Appended { base_offset, count } => {
                    let frames = frames_of(&batch);
                    if frames.len() != count as usize {
                        self.fail(format!(
                            "op {op} appended {count} of {} messages",
                            frames.len()
                        ));
                    }
                    if let Err(why) = self.history.commit_send(op, base_offset, &frames) {
                        self.fail(why);
                    }
                }
                WriteResult::Failed(ErrorCode::InvalidMessagesSize)
                    if SimLog::check(batch.clone()).is_none() => {}
                other => self.fail(format!("op {op}: a send committed as {other:?}")),
            },
            Some(PartitionWrite::StoreOffset {
                owner,
                offset,
                resolved_at,
                owner_created_at,
                keys_max,
            }) => {
                let store = StoreOffset {
                    owner,
                    offset,
                    resolved_at,
                    owner_created_at,
                    keys_max,
                };
                let expected = self.history.commit_store(op, store);
                if result != expected {
                    self.fail(format!(
                        "op {op}: an offset store of {owner:?} (created at {owner_created_at}) \
                         resolved at {resolved_at} committed as {result:?}, the rule says \
                         {expected:?}"
                    ));
                }
            }
            Some(PartitionWrite::DeleteGroupOffsets { group, metadata_op })
                if result == WriteResult::Done =>
            {
                self.figures.group_deletions_committed += 1;
                self.history.commit_group_deletion(op, group, metadata_op);
            }
            Some(PartitionWrite::RetireSegments {
                keep_from,
                planned_at,
            }) if result == WriteResult::Done => {
                self.figures.retirements_committed += 1;
                let committed = self.history.messages.len() as u64;
                self.figures.retirements_past_end += u64::from(keep_from > committed);
                let held_from = self.history.commit_retirement(keep_from, planned_at);
                self.figures.retirements_held_by_later_stores += u64::from(held_from < keep_from);
            }
            Some(PartitionWrite::RetireSessions { .. }) if result == WriteResult::Done => {}
            _ => self.fail(format!("op {op}: unexpected operation {}", entry.operation)),
        }
    }

    fn acknowledged(&mut self, client: u128, request: u64, op: u64, reply: &Bytes) {
        let Some(planned) = self.requests.get(&(client, request)) else {
            self.fail(format!("client {client} request {request} was never made"));
        };
        let request_made = planned.request.clone();
        match (request_made, WriteResult::decode(reply)) {
            (Request::Send { frames }, WriteResult::Appended { base_offset, count }) => {
                if count as usize != frames.len() {
                    self.fail(format!(
                        "op {op} acknowledged {count} of {} messages",
                        frames.len()
                    ));
                }
                let read: Vec<(u64, Bytes)> = (base_offset..).zip(frames.iter().cloned()).collect();
                if let Err(why) = self.history.check_read(base_offset, count, &read) {
                    self.fail(format!("acknowledged send at op {op}: {why}"));
                }
                self.figures.sends_acknowledged += 1;
                self.figures.messages_acknowledged += u64::from(count);
                self.acknowledged.push((op, base_offset, frames));
            }
            (Request::Malformed, WriteResult::Failed(ErrorCode::InvalidMessagesSize)) => {
                self.figures.malformed_refused += 1;
            }
            (Request::Store { .. }, WriteResult::Done) => self.figures.stores_acknowledged += 1,
            (Request::Store { .. }, WriteResult::Failed(ErrorCode::ConsumerGroupIdNotFound)) => {
                self.figures.stores_refused += 1;
            }
            (Request::Store { .. }, WriteResult::Failed(ErrorCode::TooManyConsumerOffsets)) => {
                self.figures.stores_at_key_limit += 1;
            }
            (
                Request::Retire { .. } | Request::Logout | Request::DeleteGroupOffsets { .. },
                WriteResult::Done,
            ) => {}
            (request, result) => self.fail(format!(
                "client {client} request {request:?} acknowledged as {result:?}"
            )),
        }
    }

    fn check_step(&mut self, _seed: u64, now: u64, nodes: &[NodeView<'_, PartitionMachine>]) {
        for (index, node) in nodes.iter().enumerate() {
            let Some(replica) = node.replica else {
                continue;
            };
            let expected = self.history.next_offset_at(replica.commit_min());
            let next = node.machine.committed_next_offset();
            if next != expected {
                self.fail(format!(
                    "replica {index} at commit {} serves up to offset {next}, the history {expected}",
                    replica.commit_min()
                ));
            }
        }
        self.check_first_offsets(nodes);
        self.check_offsets(nodes);
        if self.rng.chance(25) {
            self.poll(nodes);
        }
        if now.is_multiple_of(64) {
            self.read_all(nodes);
        }
    }

    fn check_end(&mut self, _seed: u64, nodes: &[NodeView<'_, PartitionMachine>]) {
        self.read_all(nodes);
        for node in nodes {
            let machine = node.machine.figures();
            let total = &mut self.figures.machines;
            total.retirements += machine.retirements;
            total.retirements_bounded += machine.retirements_bounded;
            total.segments_retired += machine.segments_retired;
            total.messages_retired += machine.messages_retired;
            total.stowed_restored += machine.stowed_restored;
            total.stowed_retired += machine.stowed_retired;
            total.journals_cut += machine.journals_cut;
            total.unaccounted_dropped += machine.unaccounted_dropped;
            total.transfers += machine.transfers;
            total.transfer_log_restarts += machine.transfer_log_restarts;
            total.transfer_batches_copied += machine.transfer_batches_copied;
            total.transfers_overtaken += machine.transfers_overtaken;
        }
        for (index, node) in nodes.iter().enumerate() {
            let Some(replica) = node.replica else {
                continue;
            };
            let first = node.machine.first_offset();
            for (op, base_offset, frames) in &self.acknowledged {
                // Messages below the log's first offset were retired (the per-step checks
                // hold that offset at or below the retirement point).
                let retired = first.saturating_sub(*base_offset).min(frames.len() as u64);
                if replica.commit_min() < *op || retired == frames.len() as u64 {
                    continue;
                }
                let kept = &frames[retired as usize..];
                let (_, messages) = node
                    .machine
                    .poll(StartAt::Offset(base_offset + retired), kept.len() as u32);
                let sent: Vec<&Bytes> = kept.iter().collect();
                let read: Vec<&Bytes> = messages.iter().map(|(_, frame)| frame).collect();
                if read != sent {
                    self.fail(format!(
                        "replica {index}: the send acknowledged at op {op} does not read back at offset {base_offset}"
                    ));
                }
            }
            let offsets: BTreeMap<OffsetOwner, u64> = self
                .history
                .offsets
                .iter()
                .map(|(owner, kept)| (*owner, kept.offset))
                .collect();
            if replica.commit_min() >= self.history.last_op
                && node.machine.core().offsets() != offsets
            {
                self.fail(format!("replica {index} holds other consumer offsets"));
            }
        }
    }
}

/// A message frame: the spec's 48-byte header, then the payload and user headers.
pub fn frame(id: u128, offset_delta: u32, payload: &[u8], headers: &[u8]) -> Bytes {
    let header = MessageFrameHeader {
        checksum: 0,
        id,
        offset_delta,
        timestamp_delta: 0,
        user_headers_length: headers.len() as u32,
        payload_length: payload.len() as u32,
    };
    [&header.to_bytes()[..], payload, headers].concat().into()
}

/// A batch of `frames` stamped at `timestamp`, as a producer sends it.
pub fn batch_of_frames(timestamp: u64, frames: &[Bytes]) -> Bytes {
    let length = BatchHeader::SIZE + frames.iter().map(Bytes::len).sum::<usize>();
    let header = BatchHeader {
        partition_id: 0,
        base_offset: 0,
        base_timestamp: timestamp,
        origin_timestamp: timestamp,
        batch_length: length as u64,
        batch_checksum: 0,
        message_count: frames.len() as u32,
    };
    let mut batch = header.to_bytes().to_vec();
    frames
        .iter()
        .for_each(|frame| batch.extend_from_slice(frame));
    batch.into()
}

/// A batch of messages `(id, payload)` stamped at `timestamp`.
pub fn encode_batch<'a>(
    timestamp: u64,
    messages: impl IntoIterator<Item = (u128, &'a [u8])>,
) -> Bytes {
    let frames: Vec<Bytes> = messages
        .into_iter()
        .enumerate()
        .map(|(index, (id, payload))| frame(id, index as u32, payload, b""))
        .collect();
    batch_of_frames(timestamp, &frames)
}

/// The frames of a well-formed batch.
fn frames_of(batch: &Bytes) -> Vec<Bytes> {
    let Some(checked) = SimLog::check(batch.clone()) else {
        return Vec::new();
    };
    let mut position = BatchHeader::SIZE;
    (0..checked.count)
        .map(|_| {
            let end = frame_end(batch, position).expect("a checked batch");
            let frame = batch.slice(position..end);
            position = end;
            frame
        })
        .collect()
}

fn message_id(frame: &[u8]) -> u128 {
    MessageFrameHeader::decode_fixed(&frame[..MessageFrameHeader::SIZE]).map_or(0, |h| h.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::appended;
    use iggy_vsr::sim::machine::Machine;

    fn send(machine: &mut PartitionMachine, op: u64, id: u128) -> (u64, Vec<Bytes>) {
        let frames = vec![
            frame(id, 0, b"first", b""),
            frame(id + 1, 1, b"second", b"h"),
        ];
        let body = batch_of_frames(5, &frames);
        let operation = PartitionWrite::Send {
            batch: body.clone(),
        }
        .operation();
        let reply = machine.apply(op, 1, operation, &body).reply;
        let (base_offset, count) = appended(&reply).expect("appended");
        assert_eq!(count, 2);
        (base_offset, frames)
    }

    /// The checker is not vacuous: a replica whose log holds one flipped byte, or that serves
    /// a message at the wrong offset, or a message never committed, fails the read check.
    #[test]
    fn a_corrupted_or_misplaced_read_fails_the_checker() {
        let mut machine = PartitionMachine::new(3);
        let mut history = History::default();
        for (op, id) in [(1, 10), (2, 20)] {
            let (base_offset, frames) = send(&mut machine, op, id);
            history.commit_send(op, base_offset, &frames).unwrap();
        }
        let (range, messages) = machine.poll(StartAt::First, 10);
        assert_eq!(range.count, 4);
        history
            .check_read(range.start, range.count, &messages)
            .unwrap();

        machine.log_mut().corrupt(2);
        let (range, messages) = machine.poll(StartAt::First, 10);
        let error = history
            .check_read(range.start, range.count, &messages)
            .unwrap_err();
        assert!(error.contains("offset 2 holds other bytes"), "{error}");

        let mut shifted = messages.clone();
        shifted.remove(0);
        assert!(
            history.check_read(0, 3, &shifted).is_err(),
            "a message at the wrong offset"
        );
        assert!(
            history.check_read(0, 4, &messages[..3]).is_err(),
            "a short read"
        );
        let uncommitted = [(4, frame(99, 0, b"x", b""))];
        let error = history.check_read(4, 1, &uncommitted).unwrap_err();
        assert!(error.contains("never committed"), "{error}");
    }

    /// The real retirement passes the checker and deletes only whole segments below its
    /// `keep_from`; a planted one that deletes a segment holding messages at or above it fails
    /// the checker, and so does a first offset that moves back below the committed end.
    #[test]
    fn a_retirement_that_deletes_a_kept_message_fails_the_checker() {
        let mut machine = PartitionMachine::new(3);
        let mut history = History::default();
        for op in 1..=10 {
            let (base_offset, frames) = send(&mut machine, op, u128::from(op) * 10);
            history.commit_send(op, base_offset, &frames).unwrap();
        }
        assert!(
            machine.log_mut().segment_count() >= 3,
            "the sends rolled segments"
        );
        let retire = PartitionWrite::RetireSegments {
            keep_from: 10,
            planned_at: NO_OFFSET_HOLD,
        };
        let reply = machine
            .apply(11, 1, retire.operation(), &retire.encode())
            .reply;
        assert_eq!(WriteResult::decode(&reply), WriteResult::Done);
        assert_eq!(
            machine.first_offset(),
            0,
            "no op is known held by every replica"
        );
        assert_eq!(machine.figures().retirements_bounded, 1);
        machine.may_retire_through(10);
        for op in [12, 13] {
            let reply = machine
                .apply(op, 1, retire.operation(), &retire.encode())
                .reply;
            assert_eq!(WriteResult::decode(&reply), WriteResult::Done);
        }
        history.commit_retirement(10, NO_OFFSET_HOLD);
        let first = machine.first_offset();
        assert!(first > 0 && first <= 10, "first offset {first}");
        assert_eq!(
            machine.figures().retirements,
            1,
            "a replay deletes nothing more"
        );
        assert_eq!(machine.figures().messages_retired, first);
        history.check_first_offset(first).unwrap();
        let next = machine.committed_next_offset();
        assert_eq!(next, 20);
        let (range, messages) = machine.poll(StartAt::First, (next - first) as u32);
        assert_eq!(range.start, first);
        history
            .check_read(first, (next - first) as u32, &messages)
            .unwrap();

        machine.log_mut().drop_oldest_segment();
        let error = history
            .check_first_offset(machine.first_offset())
            .unwrap_err();
        assert!(error.contains("past the retirement point 10"), "{error}");

        let error = check_first_moves_forward(8, 0, 20).unwrap_err();
        assert!(error.contains("retired messages came back"), "{error}");
        check_first_moves_forward(0, 8, 20).unwrap();
        check_first_moves_forward(24, 20, 20).unwrap();
    }

    /// An offset write of [`replay_offset_writes`].
    #[derive(Clone, Copy)]
    enum OffsetWrite {
        Store(StoreOffset),
        /// Group 0's deletion at this metadata op.
        GroupDeletion(u64),
    }

    fn store_of(owner: OffsetOwner, offset: u64, resolved_at: u64, created_at: u64) -> OffsetWrite {
        OffsetWrite::Store(StoreOffset {
            owner,
            offset,
            resolved_at,
            owner_created_at: created_at,
            keys_max: KEYS_UNLIMITED,
        })
    }

    /// Replays `writes` on the real machine and the history, asserting they agree on every
    /// reply and on what groups 0 created at metadata ops 4 and 12 read; returns the history.
    fn replay_offset_writes(writes: &[OffsetWrite]) -> History {
        let mut machine = PartitionMachine::new(3).created_at_op(3);
        let mut history = History {
            created_at_op: 3,
            ..History::default()
        };
        let group = OffsetOwner::Group(0);
        for (index, write) in writes.iter().copied().enumerate() {
            let op = index as u64 + 1;
            let (write, expected) = match write {
                OffsetWrite::Store(store) => {
                    let write = PartitionWrite::StoreOffset {
                        owner: store.owner,
                        offset: store.offset,
                        resolved_at: store.resolved_at,
                        owner_created_at: store.owner_created_at,
                        keys_max: store.keys_max,
                    };
                    (write, history.commit_store(op, store))
                }
                OffsetWrite::GroupDeletion(metadata_op) => {
                    history.commit_group_deletion(op, 0, metadata_op);
                    let write = PartitionWrite::DeleteGroupOffsets {
                        group: 0,
                        metadata_op,
                    };
                    (write, WriteResult::Done)
                }
            };
            let reply = machine
                .apply(op, 1, write.operation(), &write.encode())
                .reply;
            assert_eq!(WriteResult::decode(&reply), expected, "op {op}");
            for created_at_op in [4, 12] {
                assert_eq!(
                    machine.core().offset(group, created_at_op),
                    history.served_offset(op, group, created_at_op),
                    "op {op}, group created at {created_at_op}"
                );
            }
        }
        history
    }

    /// The checker's rule for group offsets agrees with the real partition's on a history of
    /// a group deleted and its id reused: a store resolved before the deletion is refused once
    /// it applied, the recreated group is never served its predecessor's offset, and a late
    /// store of the deleted group (its deletion not applied yet) is kept but withheld.
    #[test]
    fn a_recreated_groups_reads_never_serve_the_deleted_groups_offset() {
        let group = OffsetOwner::Group(0);
        // Group 0 (created at metadata op 4) stores; it is deleted at op 9 and a new group 0
        // created at op 12; a lagging node resolves a store for the old one at op 8.
        let history = replay_offset_writes(&[
            store_of(group, 5, 6, 4),
            store_of(group, 7, 8, 4),
            OffsetWrite::GroupDeletion(9),
            store_of(group, 2, 8, 4),
            store_of(group, 4, 13, 12),
            store_of(OffsetOwner::Consumer(0), 1, 0, 0),
        ]);
        assert_eq!(history.served_offset(3, group, 12), None, "deleted at op 9");
        assert_eq!(history.served_offset(5, group, 12), Some(4));
        assert_eq!(
            history.served_offset(6, OffsetOwner::Consumer(0), 0),
            Some(1)
        );
        // Before the deletion reached the partition, the old group's late store is kept,
        // and withheld from the group created at op 12.
        let history = replay_offset_writes(&[store_of(group, 7, 8, 4)]);
        assert_eq!(history.served_offset(1, group, 12), None);
        assert_eq!(history.served_offset(1, group, 4), Some(7));
    }

    /// The gap the instance check closes: the recreated group (created at op 12) stores, then
    /// the deleted group's late store (resolved at op 8, on a lagging node) commits before the
    /// deletion (op 9) reached the partition. The rule refuses it, so the recreated group
    /// keeps its acknowledged offset; a partition that let the late store replace it would
    /// fail the checker (its reply and the offset it serves differ from the history's).
    #[test]
    fn a_deleted_groups_late_store_never_replaces_the_recreated_groups_offset() {
        let group = OffsetOwner::Group(0);
        let history = replay_offset_writes(&[
            store_of(group, 4, 13, 12),
            store_of(group, 7, 8, 4),
            OffsetWrite::GroupDeletion(9),
        ]);
        assert_eq!(history.superseded_stores, 1);
        assert_eq!(history.served_offset(2, group, 12), Some(4));
        assert_eq!(history.served_offset(3, group, 12), Some(4));
        assert_eq!(history.served_offset(2, group, 4), None);
    }

    /// A machine with sends at ops `1..=sends` (two messages each), segments retired below
    /// `keep_from` by op `sends + 1` (every op held by the group), and a checkpoint there.
    fn checkpointed_source(sends: u64, keep_from: u64) -> (PartitionMachine, u64, Vec<u8>) {
        let mut source = PartitionMachine::new(3);
        for op in 1..=sends {
            send(&mut source, op, u128::from(op) * 10);
        }
        source.may_retire_through(sends);
        let retire = PartitionWrite::RetireSegments {
            keep_from,
            planned_at: NO_OFFSET_HOLD,
        };
        source.apply(sends + 1, 1, retire.operation(), &retire.encode());
        let state = source
            .checkpoint(sends + 1)
            .expect("the state as of the op");
        (source, sends + 1, state)
    }

    /// State transfer as the server's shell does it: the laggard's log continues from the
    /// peer's records up to the state's end, byte for byte; when the group retired what the
    /// laggard holds, its log restarts at the peer's first offset; when the peer retired past
    /// the state's end, the transfer is refused and the laggard is left as it was.
    #[test]
    fn a_laggard_copies_the_peers_log_up_to_the_state_restarting_past_what_was_retired() {
        let (source, op, state) = checkpointed_source(10, 0);
        let mut laggard = PartitionMachine::new(3);
        send(&mut laggard, 1, 10);
        laggard.transfer(op, &state, &source).unwrap();
        assert_eq!(laggard.committed_next_offset(), 20);
        assert_eq!(
            laggard.log().records_below(20),
            source.log().records_below(20)
        );
        assert_eq!(laggard.figures().transfer_log_restarts, 0);
        assert_eq!(laggard.figures().transfer_batches_copied, 9);

        let (source, op, state) = checkpointed_source(10, 10);
        let first = source.first_offset();
        assert!(first > 2, "the group retired the laggard's messages");
        let mut laggard = PartitionMachine::new(3);
        send(&mut laggard, 1, 10);
        laggard.transfer(op, &state, &source).unwrap();
        assert_eq!(laggard.first_offset(), first);
        assert_eq!(
            laggard.log().records_below(20),
            source.log().records_below(20)
        );
        assert_eq!(laggard.figures().transfer_log_restarts, 1);

        // The state of op 5 ends at offset 8; the peer went on and retired below 16.
        let (mut source, op, state) = checkpointed_source(4, 0);
        for op in 6..=10 {
            send(&mut source, op, u128::from(op) * 10);
        }
        source.may_retire_through(10);
        let retire = PartitionWrite::RetireSegments {
            keep_from: 16,
            planned_at: NO_OFFSET_HOLD,
        };
        source.apply(11, 1, retire.operation(), &retire.encode());
        assert!(source.first_offset() > 8, "retired past the state's end");
        let mut laggard = PartitionMachine::new(3);
        send(&mut laggard, 1, 10);
        let error = laggard.transfer(op, &state, &source).unwrap_err();
        assert!(error.contains("past the state's end 8"), "{error}");
        assert_eq!(
            (laggard.first_offset(), laggard.committed_next_offset()),
            (0, 2),
            "a refused transfer changes nothing"
        );
        assert_eq!(laggard.figures().transfers_overtaken, 1);
    }

    /// A transfer restarted a laggard's log at its peer's first offset (the group had retired
    /// every offset below it), then the laggard crashed before installing the state: its log
    /// now starts past its committed end. A later offer whose state ends below that first
    /// offset needs nothing from the peer's log: the log restarts at the state's end, and the
    /// messages a committed retirement deleted do not come back from a peer that still holds
    /// them.
    #[test]
    fn a_laggard_whose_log_starts_past_the_offered_state_copies_nothing_back() {
        let (retired_source, op, state) = checkpointed_source(10, 16);
        let mut laggard = PartitionMachine::new(3);
        send(&mut laggard, 1, 10);
        laggard.transfer(op, &state, &retired_source).unwrap();
        let first = laggard.first_offset();
        laggard.restart(None, Vec::new());
        assert_eq!(laggard.committed_next_offset(), 0);
        let (source, op, state) = checkpointed_source(4, 0);
        let until = source.committed_next_offset();
        assert!(
            first > until,
            "the log starts at {first}, past the state's end {until}"
        );
        let copied = laggard.figures().transfer_batches_copied;

        laggard.transfer(op, &state, &source).unwrap();
        assert_eq!(
            (laggard.first_offset(), laggard.committed_next_offset()),
            (until, until)
        );
        assert_eq!(laggard.figures().transfer_batches_copied, copied);
        check_first_moves_forward(first, laggard.first_offset(), until).unwrap();
    }

    /// A history refuses a gap in the offsets and a message committed twice.
    #[test]
    fn the_history_refuses_a_gap_and_a_duplicate_message() {
        let mut history = History::default();
        let frames = vec![frame(1, 0, b"a", b"")];
        history.commit_send(1, 0, &frames).unwrap();
        assert!(
            history
                .commit_send(2, 5, &[frame(2, 0, b"b", b"")])
                .is_err()
        );
        let error = history.commit_send(3, 1, &frames).unwrap_err();
        assert!(error.contains("committed at offsets 0 and 1"), "{error}");
        assert_eq!(history.next_offset_at(1), 1);
        assert_eq!(history.next_offset_at(0), 0);
    }

    /// A malformed batch is refused by the real machine and takes no offsets.
    #[test]
    fn a_malformed_batch_takes_no_offsets() {
        let mut workload = PartitionWorkload::new(1);
        let mut machine = PartitionMachine::new(1);
        let mut planned = workload.plan(7, false);
        while !matches!(planned.request, Request::Malformed) {
            planned = workload.plan(7, false);
        }
        let reply = machine.apply(1, 7, planned.operation, &planned.body).reply;
        assert_eq!(
            WriteResult::decode(&reply),
            WriteResult::Failed(ErrorCode::InvalidMessagesSize)
        );
        assert_eq!(machine.committed_next_offset(), 0);
    }
}
