//! The decisions of one consensus group, sans-IO: a [`GroupCore`] owns the [`Replica`], the
//! requests waiting for their commit, the requests held until their client's implicit register
//! commits, the journal-sync batching (group commit) and the checkpoint policy. It takes inputs
//! (a submitted request, a peer's message, a tick, "journaled", "synced", "applied") and hands
//! out [`Step`]s for the shell to carry out; it never awaits, reads a clock or touches a file,
//! so a test drives it with plain calls (see the tests below), the simulator runs it on virtual
//! time (`sim::cluster`), and the server's compio task is a loop that performs each step.

use crate::message::{Message, ReplicaId};
use crate::{
    Action, Checkpoint, Config, Entry, OPERATION_REGISTER, ReadBack, Refusal, Replica, Status,
    ViewState,
};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

/// Durability of acknowledged writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Journaled (written to the OS) before the reply; survives a process crash.
    Replicated,
    /// Journal fsynced before the reply; survives a machine crash.
    Persisted,
}

/// The answer to a submitted write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        op: u64,
        reply: Bytes,
    },
    Refused(Refusal),
    /// No verdict, nothing acknowledged: the group stopped before answering, or its replica
    /// stopped leading with the request in its pipeline (the next primary may commit it).
    Failed,
}

/// A client request waiting to be proposed, with whatever the shell uses to answer it.
pub struct Pending<W> {
    pub client: u128,
    pub request: u64,
    pub operation: u8,
    pub body: Bytes,
    pub waiter: W,
}

/// When a group takes a checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointPolicy {
    /// Once the journal holds this many bytes (or the replica this many bytes of op bodies in
    /// memory)...
    pub journal_bytes: u64,
    /// ...or this many ops.
    pub journal_ops: usize,
}

/// A journal size past which a group whose laggards can catch up by state transfer (a
/// partition group) checkpoints without waiting for them (see
/// [`GroupCore::checkpoint_past_laggards`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalBound {
    /// Bytes in the journal (or of op bodies held in memory)...
    pub bytes: u64,
    /// ...or ops.
    pub ops: usize,
}

/// What the shell must do next. Steps that end in an input say which.
#[derive(Debug)]
pub enum Step<W> {
    /// Journal `entry` (its body stowed by the state machine, or in the record), then call
    /// [`GroupCore::journaled`].
    Journal { op: u64, entry: Entry },
    /// Make every journaled op durable (journal and stowed bodies), then call
    /// [`GroupCore::synced`].
    Sync,
    /// Drop every journaled op above `after_op` and its stowed body.
    Truncate { after_op: u64 },
    /// Apply the committed op to the state machine, then call [`GroupCore::applied`].
    Apply {
        op: u64,
        client: u128,
        operation: u8,
        body: Bytes,
    },
    /// A register committed at `op`: the state machine records the session.
    Registered { op: u64, client: u128, body: Bytes },
    /// Send `message` to the group's replica `to`.
    Send { to: ReplicaId, message: Message },
    /// Read the journaled op `op` back (a stowed body from where the state machine stowed it),
    /// then call [`GroupCore::read_back`] with what was found, telling a body a committed
    /// retirement deleted ([`ReadBack::Retired`]) from one that could not be read: a peer
    /// needs an op whose body was released.
    ReadBack { op: u64 },
    /// Durably write the group's view state (two alternating slots, fsynced), then call
    /// [`GroupCore::view_persisted`]. Every journal write and truncation handed out before it
    /// is already durable (a `Sync` precedes it), so the persisted log view never names a log
    /// the journal does not hold. Only groups of more than one replica ever persist a view.
    PersistView { state: ViewState },
    /// Hand `outcome` to the waiter.
    Answer { waiter: W, outcome: Outcome },
}

pub struct GroupCore<W> {
    replica: Replica,
    durability: Durability,
    waiting: HashMap<(u128, u64), Vec<W>>,
    /// Whether the replica led its group (normal status, primary) when last looked at.
    was_leading: bool,
    /// Requests held back until their client's implicit register commits.
    registering: HashMap<u128, Vec<Pending<W>>>,
    /// Whether this group registers unknown clients itself (partition groups do; the metadata
    /// group registers them through an explicit login).
    implicit_register: bool,
    policy: Option<CheckpointPolicy>,
    /// Set for groups whose laggards catch up by state transfer: past this journal size a
    /// checkpoint no longer waits for `checkpoint_safe`.
    past_laggards: Option<JournalBound>,
    /// Body bytes of the ops prepared since the last checkpoint, even when the journal file
    /// holds only stand-ins: a replica with peers holds them in memory until a checkpoint, and
    /// a recovery reads stowed ones back from the log, so the checkpoint byte limit bounds both.
    held_bytes: u64,
    /// The op of the newest checkpoint known durable: the one the group opened from, or the
    /// last one the shell reported with [`Self::checkpointed`]. The replica's own checkpoint op
    /// moves at [`Self::checkpoint_record`], before the shell has written the checkpoint.
    durable_checkpoint: u64,
    /// Journaled ops not yet reported written to the replica (group commit: one sync for all).
    unsynced: Vec<u64>,
    /// Whether one of `unsynced` must be fsynced whatever the group's durability.
    must_sync: bool,
    /// A truncation was handed out since the last sync.
    truncated: bool,
    /// A view state to persist once the journal handed out before it is synced.
    persist_after_sync: Option<ViewState>,
    /// A step was handed out whose input has not arrived yet.
    awaiting: Option<Awaiting>,
    answers: VecDeque<(W, Outcome)>,
    /// The latest request number handed out by [`Self::next_request`], per client.
    issued: HashMap<u128, u64>,
    /// The client table capacity the group had committed when it opened, and the configured one.
    limits_at_open: (Option<usize>, usize),
    /// Applied ops whose effects outside the replicated state (the metadata group's partition
    /// opens and deletes) the shell still runs, in op order (see
    /// [`Self::applied_with_effects`]).
    effects_running: VecDeque<u64>,
    /// Answers of committed ops at or above the first of `effects_running`, held until their
    /// effects are done (see [`Self::effects_done`]), with the op each answers.
    held: Vec<(u64, W, Outcome)>,
    /// The field the primary stamps as it prepares, if any ([`Self::stamp_prepares`]).
    prepare_stamp: Option<PrepareStamp>,
}

/// A u64 field of one operation's request bodies that the primary stamps with the time.
struct PrepareStamp {
    operation: u8,
    at: usize,
    /// The time the shell last gave.
    clock: u64,
    /// The last stamp: the next is never below it.
    last: u64,
}

impl PrepareStamp {
    /// `body` with the field stamped: in place when the body is its buffer's only holder, else
    /// in a copy. A body too short to hold the field goes as it is (the state machine refuses it).
    fn stamped(&mut self, body: Bytes) -> Bytes {
        if body.len() < self.at + 8 {
            return body;
        }
        self.last = self.last.max(self.clock);
        let mut body = bytes::BytesMut::from(body);
        body[self.at..self.at + 8].copy_from_slice(&self.last.to_le_bytes());
        body.freeze()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Journaled(u64),
    Synced,
    Applied(u64),
    ViewPersisted(ViewState),
}

impl<W> GroupCore<W> {
    /// A group over its recovered journal prefix (and checkpoint) and its durable view state
    /// (`ViewState::default()` when none was persisted); [`Self::poll`] then replays the prefix
    /// as `Apply` steps. A replica of a larger group rejoins as a backup (see
    /// [`Replica::open_from_checkpoint`]).
    pub fn open(
        config: Config,
        checkpoint: Option<Checkpoint>,
        entries: Vec<Entry>,
        view_state: ViewState,
        durability: Durability,
        implicit_register: bool,
        policy: Option<CheckpointPolicy>,
    ) -> Self {
        let held_bytes = entries.iter().map(|entry| entry.body.len() as u64).sum();
        let replica = match checkpoint {
            Some(checkpoint) => {
                Replica::open_from_checkpoint(config, checkpoint, entries, view_state)
            }
            None => Replica::open(config, entries, view_state),
        };
        GroupCore::over(replica, held_bytes, durability, implicit_register, policy)
    }

    /// The first start of a new group: every replica formats an empty log in view 0 and starts
    /// in normal status (a later start is [`Self::open`], which recovers).
    pub fn format(
        config: Config,
        durability: Durability,
        implicit_register: bool,
        policy: Option<CheckpointPolicy>,
    ) -> Self {
        GroupCore::format_in_view(config, 0, durability, implicit_register, policy)
    }

    /// [`Self::format`] in `view` ([`Replica::format_in_view`]): a group created while the
    /// cluster runs starts with the primary its creation chose.
    pub fn format_in_view(
        config: Config,
        view: u32,
        durability: Durability,
        implicit_register: bool,
        policy: Option<CheckpointPolicy>,
    ) -> Self {
        GroupCore::over(
            Replica::format_in_view(config, view),
            0,
            durability,
            implicit_register,
            policy,
        )
    }

    fn over(
        mut replica: Replica,
        held_bytes: u64,
        durability: Durability,
        implicit_register: bool,
        policy: Option<CheckpointPolicy>,
    ) -> Self {
        let configured_clients_max = replica.config().clients_table_max;
        // The seed's rule: the first op a group commits nominates its limits; after that the
        // configuration no longer changes them. (A group from before nominations commits one
        // now.)
        let committed_clients_max = replica.clients().nominated();
        replica.nominate_limits(configured_clients_max);
        let durable_checkpoint = replica.checkpoint_op();
        GroupCore {
            replica,
            durability,
            waiting: HashMap::new(),
            was_leading: false,
            registering: HashMap::new(),
            implicit_register,
            policy,
            past_laggards: None,
            held_bytes,
            durable_checkpoint,
            unsynced: Vec::new(),
            must_sync: false,
            truncated: false,
            persist_after_sync: None,
            awaiting: None,
            answers: VecDeque::new(),
            issued: HashMap::new(),
            limits_at_open: (committed_clients_max, configured_clients_max),
            effects_running: VecDeque::new(),
            held: Vec::new(),
            prepare_stamp: None,
        }
    }

    /// Has the primary stamp a field of the bodies of `operation` as it prepares them: the u64
    /// at byte `at` (a partition's batch `base_timestamp`) becomes the time
    /// [`Self::set_stamp_clock`] last gave, never below the last stamp, so a group's stamps
    /// follow its op order. (Stamped on arrival instead, a request held for its client's
    /// register, or slower on its way, would be prepared after requests stamped later.)
    pub fn stamp_prepares(&mut self, operation: u8, at: usize) {
        self.prepare_stamp = Some(PrepareStamp {
            operation,
            at,
            clock: 0,
            last: 0,
        });
    }

    /// The time the next prepares are stamped with ([`Self::stamp_prepares`]).
    pub fn set_stamp_clock(&mut self, now: u64) {
        if let Some(stamp) = &mut self.prepare_stamp {
            stamp.clock = now;
        }
    }

    /// The committed client table capacity and the configured one, when they differ at open (the
    /// committed one is kept).
    pub fn limits_mismatch(&self) -> Option<(usize, usize)> {
        match self.limits_at_open {
            (Some(committed), configured) if committed != configured => {
                Some((committed, configured))
            }
            _ => None,
        }
    }

    /// A client request. An unknown client of a group that registers implicitly is registered
    /// first; its requests wait for that register.
    pub fn submit(&mut self, pending: Pending<W>) {
        let known = self.replica.clients().get(pending.client).is_some();
        if self.implicit_register && !known && pending.operation != OPERATION_REGISTER {
            let queue = self.registering.entry(pending.client).or_default();
            if queue.is_empty() {
                self.replica
                    .on_request(pending.client, 0, OPERATION_REGISTER, Bytes::new());
            }
            queue.push(pending);
            return;
        }
        self.forward(pending);
    }

    fn forward(&mut self, pending: Pending<W>) {
        let Pending {
            client,
            request,
            operation,
            body,
            waiter,
        } = pending;
        let body = match &mut self.prepare_stamp {
            Some(stamp) if stamp.operation == operation && self.replica.is_primary() => {
                stamp.stamped(body)
            }
            _ => body,
        };
        self.waiting
            .entry((client, request))
            .or_default()
            .push(waiter);
        self.replica.on_request(client, request, operation, body);
    }

    /// The next step, or `None` when nothing is left to do until an input arrives.
    pub fn poll(&mut self) -> Option<Step<W>> {
        loop {
            if let Some((waiter, outcome)) = self.answers.pop_front() {
                return Some(Step::Answer { waiter, outcome });
            }
            if self.awaiting.is_some() {
                return None;
            }
            if let Some(state) = self.persist_after_sync.take() {
                self.awaiting = Some(Awaiting::ViewPersisted(state));
                return Some(Step::PersistView { state });
            }
            let Some(action) = self.replica.poll_action() else {
                if self.answer_deposed() {
                    continue;
                }
                if self.unsynced.is_empty() {
                    return None;
                }
                if std::mem::take(&mut self.must_sync) || self.durability == Durability::Persisted {
                    self.awaiting = Some(Awaiting::Synced);
                    return Some(Step::Sync);
                }
                self.writes_done();
                continue;
            };
            match action {
                Action::WritePrepare { op, entry } => {
                    self.held_bytes += entry.body.len() as u64;
                    self.awaiting = Some(Awaiting::Journaled(op));
                    return Some(Step::Journal { op, entry });
                }
                Action::TruncateJournal { after_op } => {
                    self.truncated = true;
                    return Some(Step::Truncate { after_op });
                }
                Action::PersistView { state } => {
                    if self.unsynced.is_empty() && !self.truncated {
                        self.awaiting = Some(Awaiting::ViewPersisted(state));
                        return Some(Step::PersistView { state });
                    }
                    // The log the state names must be durable first, whatever the durability.
                    self.persist_after_sync = Some(state);
                    self.awaiting = Some(Awaiting::Synced);
                    return Some(Step::Sync);
                }
                Action::Commit {
                    op,
                    client,
                    operation,
                    body,
                    ..
                } => {
                    self.awaiting = Some(Awaiting::Applied(op));
                    return Some(Step::Apply {
                        op,
                        client,
                        operation,
                        body,
                    });
                }
                Action::Registered { op, client, body } => {
                    for pending in self.registering.remove(&client).unwrap_or_default() {
                        self.forward(pending);
                    }
                    return Some(Step::Registered { op, client, body });
                }
                Action::Reply {
                    client,
                    request,
                    op,
                    reply,
                } => {
                    let outcome = Outcome::Committed { op, reply };
                    if self
                        .effects_running
                        .front()
                        .is_some_and(|first| *first <= op)
                    {
                        // Committed, but what the op did outside the model is not done yet: a
                        // client told "created" uses the partitions at once, one told
                        // "deleted" finds the files gone.
                        for waiter in self.waiting.remove(&(client, request)).unwrap_or_default() {
                            self.held.push((op, waiter, outcome.clone()));
                        }
                    } else {
                        self.answer(client, request, outcome);
                    }
                }
                Action::Refuse {
                    client,
                    request,
                    refusal,
                } => {
                    for pending in self.registering.remove(&client).unwrap_or_default() {
                        let outcome = Outcome::Refused(refusal.clone());
                        self.answers.push_back((pending.waiter, outcome));
                    }
                    self.answer(client, request, Outcome::Refused(refusal));
                }
                Action::Send { to, message } => return Some(Step::Send { to, message }),
                Action::ReadBack { op } => return Some(Step::ReadBack { op }),
            }
        }
    }

    /// Answers the requests this replica accepted while it led its group, once it no longer
    /// does (a view change began, or another primary's view was installed): only a primary
    /// replies to a commit, so they would wait forever, even for an op the next primary
    /// commits. An accepted request is `Failed` (not acknowledged; the next primary may still
    /// commit it, which a retry under the same request number learns from the client table);
    /// one held for its client's register was never proposed: `NotReady`. Checked once the
    /// replica's own actions are done, so a refusal it just emitted is answered as such.
    /// A replica that starts leading proposes the configured limits if the group committed
    /// none yet (a cluster's first primary is elected after its replicas opened, when none of
    /// them led and proposed). Whether it has more to do.
    fn answer_deposed(&mut self) -> bool {
        let leading = self.replica.status() == Status::Normal && self.replica.is_primary();
        let (elected, deposed) = (!self.was_leading && leading, self.was_leading && !leading);
        self.was_leading = leading;
        if elected {
            self.replica.nominate_limits(self.limits_at_open.1);
            return true;
        }
        if !deposed || (self.waiting.is_empty() && self.registering.is_empty()) {
            return false;
        }
        for waiter in self.waiting.drain().flat_map(|(_, waiters)| waiters) {
            self.answers.push_back((waiter, Outcome::Failed));
        }
        for pending in self.registering.drain().flat_map(|(_, held)| held) {
            let outcome = Outcome::Refused(Refusal::NotReady);
            self.answers.push_back((pending.waiter, outcome));
        }
        true
    }

    fn answer(&mut self, client: u128, request: u64, outcome: Outcome) {
        for waiter in self.waiting.remove(&(client, request)).unwrap_or_default() {
            self.answers.push_back((waiter, outcome.clone()));
        }
    }

    fn writes_done(&mut self) {
        for op in std::mem::take(&mut self.unsynced) {
            self.replica.on_write_done(op);
        }
    }

    /// The entry of `op` is in the journal; `must_sync` when its state machine asks for an
    /// fsync before the acknowledgement whatever the group's durability.
    pub fn journaled(&mut self, op: u64, must_sync: bool) {
        debug_assert_eq!(self.awaiting, Some(Awaiting::Journaled(op)));
        self.awaiting = None;
        self.must_sync |= must_sync;
        self.unsynced.push(op);
    }

    /// Every journaled op is durable.
    pub fn synced(&mut self) {
        debug_assert_eq!(self.awaiting, Some(Awaiting::Synced));
        self.awaiting = None;
        self.truncated = false;
        self.must_sync = false;
        self.writes_done();
    }

    /// The view state of the last [`Step::PersistView`] is durable: messages naming it may go.
    pub fn view_persisted(&mut self, state: ViewState) {
        debug_assert_eq!(self.awaiting, Some(Awaiting::ViewPersisted(state)));
        self.awaiting = None;
        self.replica.on_view_persisted(state);
    }

    /// The committed `op` was applied; `reply` is cached for retries and sent to the waiters.
    /// `retired` are the clients whose sessions the op ended: their client-table slots free up
    /// with it (the state machine decides them from the op alone, so every replica agrees).
    pub fn applied(&mut self, op: u64, reply: Bytes, retired: &[u128]) {
        debug_assert_eq!(self.awaiting, Some(Awaiting::Applied(op)));
        self.awaiting = None;
        if !retired.is_empty() {
            self.replica.retire_with_commit(retired);
        }
        self.replica.on_committed_reply(op, reply);
    }

    /// [`Self::applied`] for an op whose effects outside the replicated state (the metadata
    /// group's partition opens and deletes, which wait for disks) the shell goes on running after
    /// the model change, in op order, while the group keeps serving its peers: a replica that
    /// awaited them would send no heartbeat and answer no prepare for as long, and a slow
    /// apply would change the group's view. The answers of this op and every later one wait
    /// until [`Self::effects_done`] reports the effects through them done, and no checkpoint is
    /// taken meanwhile (see [`Self::checkpoint_due`]).
    pub fn applied_with_effects(&mut self, op: u64, reply: Bytes, retired: &[u128]) {
        debug_assert!(self.effects_running.back().is_none_or(|last| *last < op));
        self.effects_running.push_back(op);
        self.applied(op, reply, retired);
    }

    /// The effects of every op through `op` that [`Self::applied_with_effects`] handed out are
    /// done: the answers held for them go out with the next [`Self::poll`].
    pub fn effects_done(&mut self, op: u64) {
        while self
            .effects_running
            .front()
            .is_some_and(|first| *first <= op)
        {
            self.effects_running.pop_front();
        }
        let first = self.effects_running.front().copied();
        let (ready, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(op, _, _)| first.is_none_or(|first| *op < first));
        self.held = held;
        self.answers.extend(
            ready
                .into_iter()
                .map(|(_, waiter, outcome)| (waiter, outcome)),
        );
    }

    /// The first applied op whose effects still run (see [`Self::applied_with_effects`]).
    pub fn effects_running(&self) -> Option<u64> {
        self.effects_running.front().copied()
    }

    /// Answers held until running effects are done (none once none run).
    pub fn answers_held(&self) -> usize {
        self.held.len()
    }

    /// Every client in the group's client table with its session number, the node's own
    /// clients left out: what an ordered retirement compares with the live sessions.
    pub fn clients(&self) -> Vec<(u128, u64)> {
        self.replica
            .clients()
            .rows()
            .into_iter()
            .filter(|(client, _)| *client < crate::NODE_CLIENTS_MIN)
            .map(|(client, session)| (client, session.session))
            .collect()
    }

    /// A message from the group's replica `from`.
    pub fn on_message(&mut self, from: ReplicaId, message: Message) {
        self.replica.on_message(from, message);
    }

    /// Time advanced to `now_ticks` (heartbeats, retransmissions, view-change timeouts).
    pub fn on_tick(&mut self, now_ticks: u64) {
        self.replica.on_tick(now_ticks);
    }

    /// Proposes the group's limits when it is the primary and none is committed or pending
    /// (see [`Replica::nominate_limits`]).
    pub fn nominate_limits(&mut self, clients_max: usize) {
        self.replica.nominate_limits(clients_max);
    }

    /// Hands the group to a caught-up backup before this replica stops (see
    /// [`Replica::step_down`]); the message goes out with the next [`Self::poll`].
    pub fn step_down(&mut self) -> Option<ReplicaId> {
        self.replica.step_down()
    }

    /// See [`Replica::set_declines_to_lead`].
    pub fn set_declines_to_lead(&mut self, declines: bool) {
        self.replica.set_declines_to_lead(declines);
    }

    /// See [`Replica::suspect_primary`].
    pub fn suspect_primary(&mut self) {
        self.replica.suspect_primary();
    }

    /// The replica, to read its state.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The next request number of one of the node's own clients (a retention pass): above its
    /// latest committed request and above every number handed out before.
    pub fn next_request(&mut self, client: u128) -> u64 {
        let committed = self
            .replica
            .clients()
            .get(client)
            .map_or(0, |session| session.request);
        let issued = self.issued.entry(client).or_insert(0);
        *issued = (*issued).max(committed) + 1;
        *issued
    }

    /// Whether `request` of `client` was already committed: a retry whose reply the replica
    /// replays, so checks against today's state must not refuse it.
    pub fn already_committed(&self, client: u128, request: u64) -> bool {
        self.replica
            .clients()
            .get(client)
            .is_some_and(|session| request <= session.request)
    }

    /// The state machine applied the committed ops: their bodies (a send's batch: the received
    /// buffer) go back to the allocator now, not at the next checkpoint; a peer that still
    /// needs one gets it read back ([`Step::ReadBack`]).
    pub fn release_applied_bodies(&mut self) {
        self.replica.release_committed_bodies();
    }

    /// What reading back the op [`Step::ReadBack`] asked for found. A body a committed
    /// retirement deleted makes a checkpoint due (see [`Self::checkpoint_due`]).
    pub fn read_back(&mut self, op: u64, read: ReadBack) {
        self.replica.on_read_back(op, read);
    }

    /// The op to checkpoint at, once the journal (`journal_bytes` on disk) has grown past the
    /// policy.
    ///
    /// A group of one checkpoints at its last op once every prepared op is committed. A larger
    /// group checkpoints at the highest op it applied that is also at or below
    /// [`Replica::checkpoint_safe`] (held durably by every replica), so no replica ever needs an
    /// op another one forgot; and only when that releases at least half of the journal, so a
    /// replica that lags does not cause a checkpoint per op it catches up. A replica that
    /// stays down would hold every other replica's checkpoints back (their journals growing
    /// until it returns); a group set to [`Self::checkpoint_past_laggards`] instead checkpoints
    /// at its `commit_min` once the journal passes that bound, and the laggard catches up by
    /// state transfer.
    ///
    /// Such a group also checkpoints at its `commit_min` whatever its journal holds once a
    /// peer asked for a body a committed retirement deleted here ([`ReadBack::Retired`], see
    /// [`Replica::checkpoint_wanted`]): that peer can only catch up by state transfer, which
    /// the checkpoint sends it to.
    pub fn checkpoint_due(&self, journal_bytes: u64) -> Option<u64> {
        let policy = self.policy?;
        let replica = &self.replica;
        // One checkpoint is written at a time.
        if self.checkpoint_writing() {
            return None;
        }
        // A checkpoint is the state as of every applied op, and a start replays only the ops
        // after it: one taken before an op's effects are done would leave them undone after a
        // crash (a deleted partition's directory kept), where the journal's replay redoes them.
        if !self.effects_running.is_empty() {
            return None;
        }
        if self.past_laggards.is_some() && replica.checkpoint_wanted().is_some() {
            return Some(replica.commit_min());
        }
        let bytes = journal_bytes.max(self.held_bytes);
        let grown = bytes >= policy.journal_bytes || replica.journal_len() >= policy.journal_ops;
        if !grown {
            return None;
        }
        if replica.is_solo() {
            let op = replica.op();
            return (op != 0 && replica.commit_min() == op).then_some(op);
        }
        let past_bound = self
            .past_laggards
            .is_some_and(|bound| bytes >= bound.bytes || replica.journal_len() >= bound.ops);
        let safe = if past_bound {
            replica.commit_min()
        } else {
            replica.checkpoint_safe()
        };
        let op = safe.min(replica.commit_min());
        let released = op.saturating_sub(replica.checkpoint_op());
        (released > 0 && 2 * released >= replica.journal_len() as u64).then_some(op)
    }

    /// Whether the shell should take no new request until the running effects are done: the
    /// journal has grown to twice the checkpoint policy while effects held every checkpoint
    /// back ([`Self::checkpoint_due`] waits for them). Clients whose effectful ops (topic
    /// creates and deletes) arrive faster than their effects finish would otherwise keep the
    /// effects running, and the checkpoint from being taken, for as long as they keep on: the
    /// journal, its replay at start and the headers held in memory would grow without bound.
    /// Effects run in op order and take no new work, so the wait ends.
    pub fn requests_wait_for_effects(&self, journal_bytes: u64) -> bool {
        let Some(policy) = self.policy else {
            return false;
        };
        if self.effects_running.is_empty() || self.checkpoint_writing() {
            return false;
        }
        let bytes = journal_bytes.max(self.held_bytes);
        bytes >= policy.journal_bytes.saturating_mul(2)
            || self.replica.journal_len() >= policy.journal_ops.saturating_mul(2)
    }

    /// Lets the group checkpoint above [`Replica::checkpoint_safe`] once its journal reaches
    /// `bound` (see [`Self::checkpoint_due`]): for groups whose state machine can hand its
    /// state to a replica that needs state transfer (the server's metadata and partition
    /// groups). Other groups keep waiting for every replica.
    pub fn checkpoint_past_laggards(&mut self, bound: JournalBound) {
        self.past_laggards = Some(bound);
    }

    /// The highest op whose messages a retirement (retention, DeleteSegments) may delete: one
    /// no replica that can still catch up by repair lacks, and committed.
    ///
    /// That is [`Replica::checkpoint_safe`] (every replica holds it durably), and in a group
    /// set to [`Self::checkpoint_past_laggards`] also this replica's checkpoint op. Why the
    /// checkpoint is safe: it is at most `commit_min`, so committed; a replica whose journal
    /// holds the entry at it needs from its peers only later ops, whose messages lie above;
    /// one that does not cannot install this replica's log (its checkpoint is the log's base)
    /// and catches up by state transfer, which restarts its log at the first kept segment. So
    /// a replica left down long enough for the group to checkpoint past it no longer holds
    /// retention back on the live ones. The bound is this replica's alone (the others'
    /// checkpoint ops do not travel), and the replicas reach the journal bound at slightly
    /// different ops (or at different ones: the bound is each node's configuration), so the
    /// replica the laggard repairs from (its primary, after a view change, or now, when a
    /// backup planned the retirement: a DeleteSegments is planned by the metadata primary's
    /// replica) may not have checkpointed past the laggard yet when the committed retirement
    /// deletes, there too, a batch the laggard asks for. Its shell reads that body back as
    /// [`ReadBack::Retired`], and it checkpoints at once ([`Self::checkpoint_due`]) and answers
    /// the laggard with its log, which starts above it: the laggard turns to state transfer
    /// then, not once further ops happen to move that replica's checkpoint.
    pub fn retirable_through(&self) -> u64 {
        let safe = self.replica.checkpoint_safe();
        if self.past_laggards.is_none() {
            return safe;
        }
        // Only a durable checkpoint: a crash before the one being written is durable restarts
        // from the older one, whose journal replay needs the messages above it.
        safe.max(self.durable_checkpoint)
    }

    /// The replicas a checkpoint at `op` leaves behind, as far as this replica knows: on a
    /// primary, those whose acknowledged durable log ends below `op` (they will need state
    /// transfer); a backup knows none.
    pub fn left_behind(&self, op: u64) -> Vec<ReplicaId> {
        let replica = &self.replica;
        (0..replica.config().replica_count)
            .filter(|peer| {
                replica
                    .acknowledged_through(*peer)
                    .is_some_and(|acked| acked < op)
            })
            .collect()
    }

    /// The replica's part of a checkpoint at `op` (its client table and position), encoded;
    /// the replica's in-memory log up to `op` is released.
    pub fn checkpoint_record(&mut self, op: u64) -> Vec<u8> {
        self.replica.checkpoint(op).encode()
    }

    /// The checkpoint [`Self::checkpoint_record`] returned is durable and the journal emptied up
    /// to its op (it keeps the ops above it: a larger group's, and any the group prepared while
    /// the shell wrote the checkpoint).
    pub fn checkpointed(&mut self) {
        self.held_bytes = self.replica.held_body_bytes();
        self.durable_checkpoint = self.replica.checkpoint_op();
    }

    /// Whether the shell is writing a checkpoint ([`Self::checkpoint_record`] was called, and
    /// [`Self::checkpointed`] not yet): the group goes on preparing, committing and answering
    /// meanwhile, but takes no other checkpoint and retires nothing on its account.
    pub fn checkpoint_writing(&self) -> bool {
        self.replica.checkpoint_op() > self.durable_checkpoint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carries out steps like the shell would, with an in-memory journal and a state machine
    /// that replies with the op's body reversed; returns the answers in order.
    struct Shell {
        journal: Vec<u64>,
        syncs: usize,
        applied: Vec<u64>,
        registered: Vec<u128>,
        answers: Vec<(u32, Outcome)>,
        /// Stop before handing back this input, to look at the core mid-way.
        hold_sync: bool,
        /// Applies ops as ops whose effects go on running (`applied_with_effects`).
        effects: bool,
    }

    impl Shell {
        fn new() -> Self {
            Shell {
                journal: Vec::new(),
                syncs: 0,
                applied: Vec::new(),
                registered: Vec::new(),
                answers: Vec::new(),
                hold_sync: false,
                effects: false,
            }
        }

        /// Runs until the core is idle (or waits for a held sync); whether a sync is held.
        fn run(&mut self, core: &mut GroupCore<u32>) -> bool {
            while let Some(step) = core.poll() {
                match step {
                    Step::Journal { op, .. } => {
                        self.journal.push(op);
                        core.journaled(op, false);
                    }
                    Step::Sync if self.hold_sync => return true,
                    Step::Sync => {
                        self.syncs += 1;
                        core.synced();
                    }
                    Step::Truncate { after_op } => self.journal.retain(|op| *op <= after_op),
                    Step::Apply { op, body, .. } => {
                        self.applied.push(op);
                        let reply: Vec<u8> = body.iter().rev().copied().collect();
                        match self.effects {
                            true => core.applied_with_effects(op, reply.into(), &[]),
                            false => core.applied(op, reply.into(), &[]),
                        }
                    }
                    Step::Registered { client, .. } => self.registered.push(client),
                    Step::Send { .. } | Step::ReadBack { .. } => {
                        panic!("a group of one has no peer")
                    }
                    Step::PersistView { .. } => panic!("a group of one never changes view"),
                    Step::Answer { waiter, outcome } => self.answers.push((waiter, outcome)),
                }
            }
            false
        }
    }

    fn core(durability: Durability, implicit_register: bool) -> GroupCore<u32> {
        GroupCore::open(
            Config::new(1, 0),
            None,
            Vec::new(),
            ViewState::default(),
            durability,
            implicit_register,
            Some(CheckpointPolicy {
                journal_bytes: 1 << 20,
                journal_ops: 4,
            }),
        )
    }

    fn request(client: u128, request: u64, body: &'static [u8], waiter: u32) -> Pending<u32> {
        Pending {
            client,
            request,
            operation: 200,
            body: Bytes::from_static(body),
            waiter,
        }
    }

    #[test]
    fn a_primary_stamps_bodies_as_it_prepares_them_so_stamps_follow_op_order() {
        let mut core = core(Durability::Replicated, true);
        core.stamp_prepares(200, 2);
        let body = |tag: u8| Bytes::from(vec![tag, tag, 0, 0, 0, 0, 0, 0, 0, 0]);
        // Journals every step's entry and hands back each op's inputs; the stamped bodies by
        // their first byte, in op order.
        let mut journaled = Vec::new();
        let run = |core: &mut GroupCore<u32>, journaled: &mut Vec<(u8, u64, *const u8)>| {
            while let Some(step) = core.poll() {
                match step {
                    Step::Journal { op, entry } => {
                        if entry.operation == 200 {
                            let stamp = u64::from_le_bytes(entry.body[2..10].try_into().unwrap());
                            journaled.push((entry.body[0], stamp, entry.body.as_ptr()));
                        }
                        core.journaled(op, false);
                    }
                    Step::Sync => core.synced(),
                    Step::Apply { op, .. } => core.applied(op, Bytes::new(), &[]),
                    _ => {}
                }
            }
        };
        core.set_stamp_clock(50);
        core.submit(Pending {
            client: 1,
            request: 1,
            operation: 200,
            body: body(1),
            waiter: 1,
        });
        run(&mut core, &mut journaled);
        // Client 2's first request waits for its register; client 1's, submitted later at a
        // later time, is prepared first.
        core.set_stamp_clock(100);
        core.submit(Pending {
            client: 2,
            request: 1,
            operation: 200,
            body: body(2),
            waiter: 2,
        });
        core.set_stamp_clock(200);
        let unique = body(3);
        let unique_at = unique.as_ptr();
        core.submit(Pending {
            client: 1,
            request: 2,
            operation: 200,
            body: unique,
            waiter: 3,
        });
        run(&mut core, &mut journaled);
        // The clock steps back: no stamp goes below the last.
        core.set_stamp_clock(150);
        core.submit(Pending {
            client: 1,
            request: 3,
            operation: 200,
            body: body(4),
            waiter: 4,
        });
        // Another operation is not stamped.
        core.submit(Pending {
            client: 1,
            request: 4,
            operation: 201,
            body: body(5),
            waiter: 5,
        });
        run(&mut core, &mut journaled);
        let stamps: Vec<(u8, u64)> = journaled
            .iter()
            .map(|&(tag, stamp, _)| (tag, stamp))
            .collect();
        assert_eq!(stamps, vec![(1, 50), (3, 200), (2, 200), (4, 200)]);
        // A body that is its buffer's only holder is stamped in place, not copied.
        assert_eq!(journaled[1].2, unique_at);
    }

    #[test]
    fn a_primary_that_stops_leading_answers_what_it_accepted() {
        let mut core = GroupCore::format(Config::new(3, 0), Durability::Replicated, true, None);
        // Client 7's first request waits for its register, which waits for a quorum.
        core.submit(request(7, 1, b"ab", 10));
        let mut answers = Vec::new();
        let drive = |core: &mut GroupCore<u32>, answers: &mut Vec<(u32, Outcome)>| {
            while let Some(step) = core.poll() {
                match step {
                    Step::Journal { op, .. } => core.journaled(op, false),
                    Step::Sync => core.synced(),
                    Step::PersistView { state } => core.view_persisted(state),
                    Step::Answer { waiter, outcome } => answers.push((waiter, outcome)),
                    _ => {}
                }
            }
        };
        drive(&mut core, &mut answers);
        assert!(answers.is_empty(), "nothing decided yet: {answers:?}");
        // Replica 1 leads view 1 with an empty log: the register is gone, never committed.
        let start_view = Message::StartView {
            view: 1,
            commit: 0,
            log: crate::Log::of_entries(0, 0, &[]),
        };
        core.on_message(1, start_view);
        drive(&mut core, &mut answers);
        assert_eq!(
            answers,
            [(10, Outcome::Refused(Refusal::NotReady))],
            "a request held for its register was never proposed"
        );

        // The primary of view 0 accepted a register (prepared, no quorum yet); a view change
        // takes the lead away: the request is answered, whatever becomes of the op.
        let mut core = GroupCore::format(Config::new(3, 0), Durability::Replicated, false, None);
        core.submit(Pending {
            client: 8,
            request: 0,
            operation: OPERATION_REGISTER,
            body: Bytes::new(),
            waiter: 20,
        });
        let mut answers = Vec::new();
        drive(&mut core, &mut answers);
        assert!(answers.is_empty(), "{answers:?}");
        core.on_message(
            1,
            Message::StartViewChange {
                view: 1,
                replica: 1,
            },
        );
        core.on_message(
            2,
            Message::StartViewChange {
                view: 1,
                replica: 2,
            },
        );
        drive(&mut core, &mut answers);
        assert_eq!(core.replica().status(), Status::ViewChange);
        assert_eq!(answers, [(20, Outcome::Failed)]);
    }

    #[test]
    fn an_unknown_client_is_registered_first_and_its_requests_commit_in_order_with_one_sync() {
        let mut core = core(Durability::Persisted, true);
        let mut shell = Shell::new();
        core.submit(request(7, 1, b"ab", 10));
        core.submit(request(7, 2, b"cd", 11));
        shell.run(&mut core);
        assert_eq!(shell.registered, [7]);
        // The group's limits nomination (op 1), the register (op 2), then both requests
        // prepared together.
        assert_eq!(shell.journal, [1, 2, 3, 4]);
        assert_eq!(shell.applied, [3, 4]);
        assert_eq!(
            shell.answers,
            [
                (
                    10,
                    Outcome::Committed {
                        op: 3,
                        reply: Bytes::from_static(b"ba")
                    }
                ),
                (
                    11,
                    Outcome::Committed {
                        op: 4,
                        reply: Bytes::from_static(b"dc")
                    }
                ),
            ]
        );
        // One sync for the nomination and the register, one for the two requests (group
        // commit).
        assert_eq!(shell.syncs, 2);
    }

    #[test]
    fn under_persisted_durability_nothing_is_applied_or_answered_before_the_sync() {
        let mut core = core(Durability::Persisted, false);
        let mut shell = Shell::new();
        core.submit(Pending {
            operation: OPERATION_REGISTER,
            ..request(7, 0, b"", 1)
        });
        shell.run(&mut core);
        core.submit(request(7, 1, b"xy", 2));
        shell.hold_sync = true;
        assert!(shell.run(&mut core), "the sync is asked for");
        assert_eq!(shell.journal, [1, 2, 3]);
        assert!(!shell.applied.contains(&3));
        assert!(shell.answers.iter().all(|(waiter, _)| *waiter != 2));
        // Until synced, the core hands out nothing more.
        assert!(core.poll().is_none());
        core.synced();
        shell.hold_sync = false;
        shell.run(&mut core);
        assert_eq!(
            shell.answers.last(),
            Some(&(
                2,
                Outcome::Committed {
                    op: 3,
                    reply: Bytes::from_static(b"yx")
                }
            ))
        );
    }

    #[test]
    fn under_replicated_durability_no_sync_is_asked_for() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        core.submit(request(3, 1, b"a", 1));
        shell.run(&mut core);
        assert_eq!(shell.syncs, 0);
        assert!(matches!(
            shell.answers[..],
            [(1, Outcome::Committed { op: 3, .. })]
        ));
    }

    #[test]
    fn a_retried_request_gets_the_cached_reply_without_a_second_apply() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        core.submit(request(3, 1, b"once", 1));
        shell.run(&mut core);
        assert!(core.already_committed(3, 1));
        assert!(!core.already_committed(3, 2));
        core.submit(request(3, 1, b"once", 2));
        shell.run(&mut core);
        assert_eq!(shell.applied, [3], "applied once");
        assert_eq!(shell.answers[0].1, shell.answers[1].1);
    }

    #[test]
    fn a_group_opened_with_another_configured_capacity_keeps_the_committed_one() {
        let mut first = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        shell.run(&mut first);
        assert_eq!(first.limits_mismatch(), None);
        let record = first.checkpoint_record(1);
        let checkpoint = Checkpoint::decode(&record).unwrap();
        let mut config = Config::new(1, 0);
        config.clients_table_max = 3;
        let reopened: GroupCore<u32> = GroupCore::open(
            config,
            Some(checkpoint),
            Vec::new(),
            ViewState::default(),
            Durability::Replicated,
            true,
            None,
        );
        assert_eq!(reopened.limits_mismatch(), Some((64, 3)));
    }

    #[test]
    fn the_nodes_own_requests_are_numbered_above_everything_committed_or_issued() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        assert_eq!(core.next_request(9), 1);
        assert_eq!(core.next_request(9), 2, "issued, not yet committed");
        core.submit(request(5, 7, b"x", 1));
        shell.run(&mut core);
        assert_eq!(core.next_request(5), 8, "above the committed request");
    }

    #[test]
    fn the_latest_request_of_a_client_counts_committed_and_prepared_ones() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        core.submit(request(5, 7, b"x", 1));
        shell.run(&mut core);
        assert_eq!(core.replica().latest_request(5), 7, "committed");
        assert_eq!(core.replica().latest_request(6), 0, "no request");
        let log = view_2_log(|op| op * 10);
        let mut backup = backup_entering_view_2(&log);
        prepare_in_view_2(&mut backup, log);
        drain_steps(&mut backup);
        assert_eq!(
            backup.replica().latest_request(9),
            20,
            "prepared, not yet committed"
        );
    }

    #[test]
    fn a_view_state_is_persisted_only_after_the_log_it_names_is_synced_whatever_the_durability() {
        let log = view_2_log(|op| op);
        let mut core = backup_entering_view_2(&log);
        assert_eq!(
            drain_steps(&mut core),
            ["persist 2/0", "send request_prepare 2"],
            "the view is entered; its log is not held yet"
        );
        prepare_in_view_2(&mut core, log);
        assert_eq!(
            drain_steps(&mut core),
            [
                "journal 1",
                "journal 2",
                "sync",
                "persist 2/2",
                "send prepare_ok 2",
                "send prepare_ok 2",
            ]
        );
    }

    /// Ops 1 and 2 of view 2, client 9's requests `request(op)`.
    fn view_2_log(request: impl Fn(u64) -> u64) -> Vec<Entry> {
        (1..=2)
            .map(|op| Entry::new(op, 2, 9, request(op), 5, Bytes::from_static(b"x")))
            .collect()
    }

    /// Replica 1 of 3, told by view 2's primary (replica 2) that `log` is the view's log, none
    /// of whose entries it holds yet.
    fn backup_entering_view_2(log: &[Entry]) -> GroupCore<u32> {
        let mut core: GroupCore<u32> =
            GroupCore::format(Config::new(3, 1), Durability::Replicated, false, None);
        let start_view = Message::StartView {
            view: 2,
            commit: 0,
            log: crate::Log::of_entries(0, 0, log),
        };
        core.on_message(2, start_view);
        core
    }

    /// `log`'s entries, prepared by view 2's primary, reach `core`.
    fn prepare_in_view_2(core: &mut GroupCore<u32>, log: Vec<Entry>) {
        for entry in log {
            let prepare = Message::Prepare {
                view: 2,
                commit: 0,
                entry,
            };
            core.on_message(2, prepare);
        }
    }

    /// Performs `core`'s steps at once (every write and sync durable), naming each.
    fn drain_steps(core: &mut GroupCore<u32>) -> Vec<String> {
        let mut steps = Vec::new();
        while let Some(step) = core.poll() {
            match step {
                Step::Journal { op, .. } => {
                    steps.push(format!("journal {op}"));
                    core.journaled(op, false);
                }
                Step::Truncate { after_op } => steps.push(format!("truncate {after_op}")),
                Step::Sync => {
                    steps.push("sync".into());
                    core.synced();
                }
                Step::PersistView { state } => {
                    steps.push(format!("persist {}/{}", state.view, state.log_view));
                    core.view_persisted(state);
                }
                Step::Send { to, message } => steps.push(format!("send {} {to}", message.name())),
                other => panic!("unexpected {other:?}"),
            }
        }
        steps
    }

    #[test]
    fn a_checkpoint_is_due_once_the_journal_outgrows_the_policy_and_everything_committed() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        core.submit(request(1, 1, b"a", 1));
        shell.run(&mut core);
        assert_eq!(core.checkpoint_due(0), None, "3 ops of 4");
        assert_eq!(core.checkpoint_due(1 << 20), Some(3), "the byte limit");
        core.submit(request(1, 2, b"b", 2));
        shell.run(&mut core);
        assert_eq!(core.checkpoint_due(0), Some(4), "the op limit");
        let record = core.checkpoint_record(4);
        assert!(!record.is_empty());
        core.checkpointed();
    }

    #[test]
    fn a_group_of_one_answers_requests_while_its_checkpoint_is_written_and_takes_no_other() {
        let mut core = core(Durability::Persisted, true);
        let mut shell = Shell::new();
        core.submit(request(1, 1, b"a", 1));
        core.submit(request(1, 2, b"b", 2));
        shell.run(&mut core);
        assert_eq!(core.checkpoint_due(0), Some(4));
        core.checkpoint_record(4);
        // The shell writes and fsyncs the checkpoint; meanwhile a request commits and is
        // answered (fsynced in its journal, the group being persisted).
        assert!(core.checkpoint_writing());
        core.submit(request(1, 3, b"c", 3));
        shell.run(&mut core);
        assert_eq!(shell.answers.last().map(|(waiter, _)| *waiter), Some(3));
        assert!(matches!(
            shell.answers.last(),
            Some((_, Outcome::Committed { op: 5, .. }))
        ));
        assert_eq!(
            core.checkpoint_due(1 << 20),
            None,
            "one checkpoint is written at a time"
        );
        core.checkpointed();
        assert!(!core.checkpoint_writing());
        assert_eq!(core.checkpoint_due(1 << 20), Some(5));
    }

    #[test]
    fn requests_wait_for_running_effects_once_they_held_the_checkpoint_back_twice_its_size() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        // Every op runs effects that outlast the next request: no checkpoint can be taken.
        shell.effects = true;
        let mut request_number = 0;
        while core.replica().journal_len() < 8 {
            assert!(
                !core.requests_wait_for_effects(0),
                "below twice the policy's 4 ops: {}",
                core.replica().journal_len()
            );
            request_number += 1;
            core.submit(request(1, request_number, b"x", request_number as u32));
            shell.run(&mut core);
            assert_eq!(core.checkpoint_due(0), None);
        }
        assert!(core.requests_wait_for_effects(0));
        // Once the effects are done the checkpoint is due, and requests are taken again.
        core.effects_done(core.replica().op());
        assert!(!core.requests_wait_for_effects(0));
        let op = core.replica().op();
        assert_eq!(core.checkpoint_due(0), Some(op));
        core.checkpoint_record(op);
        core.checkpointed();
        // Bytes count too: past twice the policy's bytes, one op's running effects hold
        // requests back.
        request_number += 1;
        core.submit(request(1, request_number, b"y", request_number as u32));
        shell.run(&mut core);
        assert!(core.replica().journal_len() < 8);
        assert!(!core.requests_wait_for_effects(1 << 20));
        assert!(core.requests_wait_for_effects(2 << 20));
    }

    #[test]
    fn an_op_whose_effects_run_is_answered_once_they_are_done_and_later_answers_wait_behind_it() {
        let mut core = core(Durability::Replicated, true);
        let mut shell = Shell::new();
        core.submit(request(1, 1, b"a", 1));
        shell.run(&mut core);
        assert_eq!(shell.answers.len(), 1);
        // Op 4 applies to the model; its effects go on running in the shell.
        shell.effects = true;
        core.submit(request(1, 2, b"b", 2));
        shell.run(&mut core);
        assert_eq!(shell.applied, [3, 4]);
        assert_eq!(
            shell.answers.len(),
            1,
            "op 4 is not answered before its effects"
        );
        assert_eq!(core.effects_running(), Some(4));
        assert_eq!(
            core.checkpoint_due(1 << 20),
            None,
            "no checkpoint holds a state whose effects are not done"
        );
        // Op 5 has no effects of its own, but comes after op 4's: its answer waits too.
        shell.effects = false;
        core.submit(request(1, 3, b"c", 3));
        shell.run(&mut core);
        assert_eq!(shell.applied, [3, 4, 5]);
        assert_eq!(shell.answers.len(), 1);
        // A retry of op 5 is answered from the client table, after the effects too.
        core.submit(request(1, 3, b"c", 4));
        shell.run(&mut core);
        assert_eq!(shell.answers.len(), 1);
        core.effects_done(4);
        assert_eq!(core.effects_running(), None);
        shell.run(&mut core);
        let answered: Vec<(u32, u64)> = shell
            .answers
            .iter()
            .map(|(waiter, outcome)| match outcome {
                Outcome::Committed { op, .. } => (*waiter, *op),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(answered, [(1, 3), (2, 4), (3, 5), (4, 5)]);
        assert_eq!(core.checkpoint_due(1 << 20), Some(5));
        // With nothing running, a retry is answered at once.
        core.submit(request(1, 3, b"c", 5));
        shell.run(&mut core);
        assert_eq!(shell.answers.len(), 5);
    }

    #[test]
    fn a_primary_whose_effects_run_sends_heartbeats_and_commits_later_ops() {
        // Replica 0 leads view 0 of three; replica 1 acknowledges what it prepares.
        let mut core: GroupCore<u32> =
            GroupCore::format(Config::new(3, 0), Durability::Replicated, false, None);
        let heartbeat = core.replica().config().heartbeat_ticks;
        let mut now = 0;
        let mut answers = Vec::new();
        let mut commits_sent = 0;
        let run = |core: &mut GroupCore<u32>, effects: bool, answers: &mut Vec<_>| {
            let mut sends = 0;
            while let Some(step) = core.poll() {
                match step {
                    Step::Journal { op, .. } => core.journaled(op, false),
                    Step::Sync => core.synced(),
                    Step::Apply { op, .. } if effects => {
                        core.applied_with_effects(op, Bytes::new(), &[])
                    }
                    Step::Apply { op, .. } => core.applied(op, Bytes::new(), &[]),
                    Step::Send {
                        to: 1,
                        message: Message::Prepare { view, entry, .. },
                    } => core.on_message(
                        1,
                        Message::PrepareOk {
                            view,
                            op: entry.op,
                            checksum: entry.checksum,
                            replica: 1,
                        },
                    ),
                    Step::Send {
                        message: Message::Commit { .. },
                        ..
                    } => sends += 1,
                    Step::Answer { waiter, outcome } => answers.push((waiter, outcome)),
                    _ => {}
                }
            }
            sends
        };
        let register = |client: u128, waiter: u32| Pending {
            client,
            request: 0,
            operation: OPERATION_REGISTER,
            body: Bytes::new(),
            waiter,
        };
        run(&mut core, false, &mut answers);
        core.submit(register(8, 0));
        run(&mut core, false, &mut answers);
        assert_eq!(answers.len(), 1, "registered: {answers:?}");
        answers.clear();
        core.submit(request(8, 1, b"x", 1));
        run(&mut core, true, &mut answers);
        let first = core.effects_running().expect("the op's effects run");
        assert!(answers.is_empty(), "{answers:?}");
        // While they run, time passes: the primary's heartbeats go out, and it commits a later
        // op (whose answer waits behind the running effects).
        for _ in 0..heartbeat * 4 {
            now += 1;
            core.on_tick(now);
            commits_sent += run(&mut core, false, &mut answers);
        }
        assert!(commits_sent >= 4, "heartbeats sent: {commits_sent}");
        core.submit(request(8, 2, b"y", 2));
        run(&mut core, false, &mut answers);
        assert_eq!(core.replica().commit_min(), first + 1);
        assert_eq!(core.replica().status(), Status::Normal);
        assert!(answers.is_empty(), "{answers:?}");
        core.effects_done(first);
        run(&mut core, false, &mut answers);
        let ops: Vec<(u32, Option<u64>)> = answers
            .iter()
            .map(|(waiter, outcome)| match outcome {
                Outcome::Committed { op, .. } => (*waiter, Some(*op)),
                _ => (*waiter, None),
            })
            .collect();
        assert_eq!(ops, [(1, Some(first)), (2, Some(first + 1))]);
    }

    #[test]
    fn a_checkpoint_counts_for_retirement_only_once_it_is_durable() {
        // A backup of a group whose laggards catch up by state transfer: what it may retire
        // reaches up to its own checkpoint, but a crash before the checkpoint being written is
        // durable restarts from the older one, whose journal replay needs those messages.
        let log = view_2_log(|op| op);
        let mut core = backup_entering_view_2(&log);
        core.checkpoint_past_laggards(JournalBound { bytes: 1, ops: 1 });
        prepare_in_view_2(&mut core, log);
        let commit = Message::Commit {
            view: 2,
            commit: 2,
            checkpoint_safe: 0,
        };
        core.on_message(2, commit);
        while let Some(step) = core.poll() {
            match step {
                Step::Journal { op, .. } => core.journaled(op, false),
                Step::Sync => core.synced(),
                Step::Apply { op, .. } => core.applied(op, Bytes::new(), &[]),
                Step::PersistView { state } => core.view_persisted(state),
                _ => {}
            }
        }
        assert_eq!(core.replica().commit_min(), 2);
        assert_eq!(core.retirable_through(), 0);
        core.checkpoint_record(2);
        assert_eq!(
            core.retirable_through(),
            0,
            "the checkpoint at op 2 is being written"
        );
        core.checkpointed();
        assert_eq!(core.retirable_through(), 2);
    }
}
