//! The replica state machine: normal operation, view change, rejoining after a restart and
//! prepare repair.
//!
//! Inputs are the `on_*` methods; outputs are drained with `poll_action` after every input.
//! The replica never performs I/O and never reads a clock: time is `on_tick(now_ticks)`.

use crate::checkpoint::Checkpoint;
use crate::client_table::{ClientTable, NODE_CLIENTS_MIN, Registration, RequestCheck};
use crate::journal::{Base, Journal};
use crate::message::{
    Entry, Log, Message, OPERATION_NOMINATE_LIMITS, OPERATION_REGISTER, ReplicaId,
    nominated_clients_max,
};
use crate::view_state::ViewState;
use bytes::Bytes;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Prepares a primary sends for one `RequestPrepare` (the op asked for and those after it).
const REPAIR_PREPARES_MAX: u64 = 8;

/// `RequestPrepare`s a new primary has out at once while it fetches the bodies of the canonical
/// log (each for `REPAIR_PREPARES_MAX` ops, spread over the DoViewChange senders that hold them):
/// a lagging primary gathers a few hundred ops per round trip, well inside a view change's
/// timeout, without flooding one link.
const FETCH_REQUESTS_MAX: u64 = 8;

/// A new primary that installed the canonical log's headers and waits for the bodies it lacks
/// before it starts its view.
#[derive(Clone, Debug)]
struct BodyFetch {
    /// The highest commit the DoViewChange quorum named.
    commit: u64,
    /// Every DoViewChange log heard in this view: who holds which body.
    logs: BTreeMap<ReplicaId, Log>,
    /// Per awaited op, the holders that answered that a retirement deleted its body
    /// (`Message::BodyRetired`): never asked for it again in this view.
    retired: BTreeMap<u64, BTreeSet<ReplicaId>>,
}

/// Why a replica due to lead the view it changes to has not started it (see
/// `Replica::leading_stalled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeadingStalled {
    /// It found it cannot start the view and asks to move on (`Replica::cannot_lead`).
    GaveUp,
    /// It waits for bodies of the log it installed.
    FetchingBodies,
    /// It could not install its DoViewChange quorum's log without state transfer.
    NeedsStateTransfer,
    /// It has not heard a DoViewChange quorum yet.
    Voting,
}

/// Static configuration of one replica in one consensus group.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of replicas in the group (1, 3, 5, ...).
    pub replica_count: u8,
    /// This replica's index.
    pub replica: ReplicaId,
    /// Bound of the client table.
    pub clients_table_max: usize,
    /// Bound of uncommitted prepares at the primary.
    pub pipeline_max: usize,
    /// Primary heartbeat (Commit message) period while the group has something in flight or
    /// a backup to bring up to date; an idle group heartbeats at
    /// [`Config::idle_heartbeat_ticks`].
    pub heartbeat_ticks: u64,
    /// Silence from the primary after which a backup asks its peers for a pre-vote (plus a
    /// stagger of a tenth of it per replica id, so backups do not all start at once); also the
    /// time after which a stalled view change asks to move on to the next view, and the silence
    /// after which a replica grants a peer's pre-vote.
    pub view_change_timeout_ticks: u64,
    /// Retransmission period for prepares, view-change and rejoin messages.
    pub resend_ticks: u64,
    /// The replica this group prefers as its primary (a partition's creation view spreads
    /// them over the nodes): another primary hands the group back to it once it is caught up
    /// (see `Replica::maybe_hand_over`). `None`: whoever leads keeps leading.
    pub preferred_primary: Option<ReplicaId>,
    /// How long the preferred replica must have been heard without a break (since it came
    /// back from a crash or a partition) before the group is handed back to it: its clients
    /// reconnect to it on their own backoff, and a group handed back at once waits for them.
    pub hand_back_settle_ticks: u64,
    /// This replica's journal and view state may be older than what it acknowledged and voted
    /// for (its data directory was restored from a copy, or replaced): it takes no part in a
    /// view change (no pre-vote asked or granted, no StartViewChange, no DoViewChange) until
    /// it installs the whole log of a view from that view's primary. A committed op is on a
    /// quorum; counted in a view change without it, this replica could make the quorum that
    /// discards it. Ignored in a group of one.
    pub restored: bool,
}

impl Config {
    /// Defaults for `replica` in a group of `replica_count`.
    pub fn new(replica_count: u8, replica: ReplicaId) -> Self {
        assert!(replica_count >= 1 && replica < replica_count);
        Config {
            replica_count,
            replica,
            clients_table_max: 64,
            pipeline_max: 16,
            heartbeat_ticks: 5,
            view_change_timeout_ticks: 30,
            resend_ticks: 8,
            preferred_primary: None,
            hand_back_settle_ticks: 30,
            restored: false,
        }
    }

    fn quorum(&self) -> usize {
        usize::from(self.replica_count) / 2 + 1
    }

    /// The heartbeat period of an idle group (nothing in flight, every backup holding the
    /// whole log and told where the group stands): a quarter of the view-change timeout, so a
    /// backup still hears four heartbeats before it would suspect the primary. A node of many
    /// idle partitions otherwise spends its CPU on their heartbeats and answers.
    pub fn idle_heartbeat_ticks(&self) -> u64 {
        (self.view_change_timeout_ticks / 4).max(self.heartbeat_ticks)
    }

    /// Silence after which this replica replaces the primary (as a backup, or when rejoining):
    /// the view-change timeout plus a stagger in proportion to it, so the backups of a silent
    /// primary do not all start competing view changes in the same tick, whatever the tick.
    fn silence_timeout_ticks(&self) -> u64 {
        self.view_change_timeout_ticks
            + self.view_change_timeout_ticks / 10 * u64::from(self.replica)
    }
}

/// Replica status, as in Viewstamped Replication Revisited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Serving the current view.
    Normal,
    /// Moving to a new view.
    ViewChange,
    /// Restarted (or unable to install a log without state transfer): a backup that acks
    /// nothing until a `StartView` of its view or a later one installs the group's log.
    Recovering,
}

/// A pre-vote this replica is asking for: the view it would move to and when each peer granted
/// it. Only grants younger than the view-change timeout count, so a quorum is one that lost the
/// primary together, not at different times.
#[derive(Clone, Debug)]
struct PreVoteRound {
    view: u32,
    asked_at: u64,
    granted_at: BTreeMap<ReplicaId, u64>,
}

/// Why a client request was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// This replica is in normal status and not the primary of its view `view`: try `primary`.
    /// Only a replica serving a view names its primary, so a client never follows a stale
    /// route from a replica that is changing views.
    NotPrimary { view: u32, primary: ReplicaId },
    /// This replica is changing views or recovering: it knows no primary it could name. Retry
    /// after a pause (a transient refusal, never a redirect).
    NotReady,
    /// The request number is older than the client's latest committed request.
    RequestTooOld,
    /// Every slot of the client table is taken by a live session or a register still in the
    /// pipeline; retry once a session has retired.
    ClientsTableFull,
    /// The client never registered, its register has not committed, or it was retired.
    SessionUnknown,
    /// The pipeline is full; retry later.
    Busy,
}

/// An output of the replica, to be executed by the shell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `message` to replica `to`.
    Send { to: ReplicaId, message: Message },
    /// Durably record `state` (after every journal write and truncation emitted before it is
    /// durable: the log must already be the one `state.log_view` names), then call
    /// `on_view_persisted(state)`. Until then no message naming the new view is sent.
    PersistView { state: ViewState },
    /// Durably write `entry` at `op` in the journal, then call `on_write_done(op)`.
    WritePrepare { op: u64, entry: Entry },
    /// Remove every journal entry with an op greater than `after_op` (no callback; ordered
    /// with respect to the writes around it).
    TruncateJournal { after_op: u64 },
    /// A peer needs the committed op `op`, whose body this replica released from memory: read
    /// the entry back from the journal (a stowed body from where it was stowed), then call
    /// `on_read_back(op, entry)`.
    ReadBack { op: u64 },
    /// Apply `operation`/`body` at `op` to the state machine, then call
    /// `on_committed_reply(op, reply)`. At most one `Commit` is outstanding at a time.
    Commit {
        op: u64,
        client: u128,
        request: u64,
        operation: u8,
        body: Bytes,
    },
    /// A register committed at `op` (the session number): the state machine records the session
    /// from `body`. Emitted on every replica, in op order with `Commit`s; needs no answer. A
    /// register committed at capacity registers nothing and emits nothing (the primary refuses
    /// it with `Refusal::ClientsTableFull`).
    Registered { op: u64, client: u128, body: Bytes },
    /// Answer `client`'s `request` with `reply` (committed at `op`).
    Reply {
        client: u128,
        request: u64,
        op: u64,
        reply: Bytes,
    },
    /// Refuse `client`'s `request`.
    Refuse {
        client: u128,
        request: u64,
        refusal: Refusal,
    },
}

/// What reading a released body back ([`Action::ReadBack`]) found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadBack {
    /// The entry as journaled, its body restored.
    Read(Entry),
    /// The state machine deleted the body on purpose (a committed retirement of its messages):
    /// this replica can never serve it again. The replica wants a checkpoint past it
    /// ([`Replica::checkpoint_wanted`]), after which the peer that asked is answered as for any
    /// checkpointed op.
    Retired,
    /// The body could not be read (damaged, or lost with the machine): the peers that asked
    /// ask again.
    Unreadable,
}

/// Why a replica cannot join the group's log without state transfer (which its shell performs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTransferNeeded {
    /// This replica's highest applied op.
    pub commit_min: u64,
    /// The other replica's checkpoint: ops `commit_min + 1..=checkpoint` are no longer available
    /// from it, and this replica does not hold a matching entry at `checkpoint`.
    pub checkpoint: u64,
}

/// One Viewstamped Replication replica of one consensus group.
#[derive(Debug)]
pub struct Replica {
    config: Config,
    status: Status,
    view: u32,
    log_view: u32,
    journal: Journal,
    /// Highest op known committed.
    commit_max: u64,
    /// Highest op applied (reply recorded).
    commit_min: u64,
    commit_in_flight: Option<u64>,
    clients: ClientTable,
    /// The client table as of the journal base (the latest checkpoint).
    base_clients: ClientTable,
    /// Replies of the ops executed above the journal base, to roll `base_clients` forward.
    executed: BTreeMap<u64, Bytes>,
    /// Clients the op being applied retires (see `retire_with_commit`).
    retiring: Vec<u128>,
    /// Clients retired by the ops executed above the journal base, to roll `base_clients`
    /// forward.
    retired: BTreeMap<u64, Vec<u128>>,
    /// Set when a log from another replica could not be installed for lack of state transfer.
    state_transfer: Option<StateTransferNeeded>,
    /// The view state the shell reported durable.
    persisted: ViewState,
    /// The view state being persisted (at most one write in flight).
    persisting: Option<ViewState>,
    /// Messages waiting for the current view state to be durable.
    held: Vec<(ReplicaId, Message)>,
    /// Recovering after a restart (not for lack of state transfer): a silent primary is
    /// replaced after the view-change timeout, as a backup's would be.
    rejoin_times_out: bool,
    /// Opened restored ([`Config::restored`]) and not yet holding its view's log, from its
    /// primary, through the highest commit that primary announced: votes in no view change.
    muted: bool,
    /// While muted: the highest commit the primary of a view announced to this replica (not
    /// capped at its journal's head as `commit_max` is).
    announced_commit: u64,
    /// When the current rejoin started (set at the first tick after it began).
    rejoin_since: Option<u64>,
    /// The pre-vote being asked for, while this replica wants to leave its view.
    pre_vote: Option<PreVoteRound>,
    /// The latest repair request: the first op asked for and when.
    repair_asked: Option<(u64, u64)>,
    /// New primary only, while it fetches the bodies of the canonical log.
    body_fetch: Option<BodyFetch>,
    /// The primary of the view this replica changes to found it cannot start that view: it
    /// cannot install its DoViewChange quorum's log without state transfer, or no holder can
    /// serve a body the log needs. It asks to move on to the next view at once (led by another
    /// replica, perhaps one that holds the log) instead of waiting for the view change to time
    /// out: nothing is discarded, the next view's DoViewChange quorum decides the log again.
    cannot_lead: bool,
    /// Set by the node while it cannot serve as this group's primary (it cannot judge its
    /// clients' grants: `Replica::set_declines_to_lead`): a hand-over to it is ignored.
    declines_to_lead: bool,
    /// Primary only: replicas that acknowledged each uncommitted op in this view.
    prepare_oks: BTreeMap<u64, BTreeSet<ReplicaId>>,
    /// Primary only, per replica: the highest op it acknowledged holding durably (with every op
    /// before it) in this view's log. Reset with each view: an ack of an earlier view's log may
    /// name entries a later view replaced.
    durable_acks: Vec<u64>,
    /// Primary: the tick each replica last acknowledged anything in this view (backups answer
    /// every Commit heartbeat with their durable head), to tell a primary that still leads a
    /// quorum from one cut off from it (`leads_quorum`). `None`: not heard since this replica
    /// opened (a replica formatted primary of its group's creation view, late perhaps, after
    /// the group moved on, leads nobody until its backups answer).
    acked_at: Vec<Option<u64>>,
    /// When each replica was heard again after a silence (more than two heartbeats): a
    /// hand-back to the preferred replica waits `hand_back_settle_ticks` from then.
    heard_since: Vec<Option<u64>>,
    /// The highest op known to be committed and held durably by every replica (see
    /// [`Replica::checkpoint_safe`]). Only grows: once every replica holds a committed op, it
    /// keeps holding it (its entry is in every later view's log) until it checkpoints past it.
    checkpoint_safe: u64,
    start_view_change_from: BTreeSet<ReplicaId>,
    do_view_change_from: BTreeMap<ReplicaId, (u32, u64, Log)>,
    do_view_change_sent: bool,
    now: u64,
    /// When this replica last heard from the primary of its view or of a later one (a Prepare,
    /// a Commit, a StartView). A restarted replica has heard none: it grants pre-votes at once.
    heard_from_primary_at: u64,
    /// The view of that primary: once this replica moves past it, it no longer counts.
    heard_primary_view: u32,
    /// A view whose primary the shell told this backup is down ([`Replica::suspect_primary`]):
    /// until that primary is heard, it counts as silent in that view.
    primary_suspected_in: Option<u32>,
    view_change_started_at: u64,
    /// When this replica last started leading a view.
    primary_since: u64,
    /// The head of the log this replica's view started with, as it entered the view normal
    /// (`applied_view_log`).
    view_start_op: u64,
    /// Normal primary: the last tick it led a quorum (`leads_quorum`), or its first tick as
    /// primary. A view-change timeout later without one it goes quiet (`quiet`).
    quorum_led_at: Option<u64>,
    /// Quiet primary: the backups whose pre-votes reached it, with the tick of the latest.
    /// It answers them with a heartbeat only once those of the last view-change timeout make
    /// a quorum with it: fewer could not make it lead again, and would only keep hearing a
    /// primary that leads nothing (in a group of five, one backup on its side of a split).
    quiet_askers: BTreeMap<ReplicaId, u64>,
    /// When this primary last asked its preferred replica to take the group over.
    transfer_sent_at: Option<u64>,
    /// The backups this primary asked to take the group over as it stepped down, and in which
    /// view: stepping down again in that view asks one it has not asked yet (the one asked may
    /// decline, and would be asked forever).
    stepped_down_to: (u32, Vec<ReplicaId>),
    /// When the primary's next Commit heartbeat is due: at its first tick once opened (so a
    /// primary of the creation view hears its backups at once), then every `heartbeat_ticks`,
    /// or every `idle_heartbeat_ticks` while the group idles (`idles`).
    next_heartbeat_at: u64,
    /// The period the last heartbeat was scheduled with: a backup heard within two of them
    /// counts as heard lately (`heard_lately`).
    heartbeat_period: u64,
    /// The commit and `checkpoint_safe` the last heartbeat announced.
    heartbeat_told: (u64, u64),
    resent_at: u64,
    actions: VecDeque<Action>,
    /// Committed ops whose bodies were released (`release_committed_bodies`).
    released_through: u64,
    /// Released ops being read back for peers: who asked, and the view to send them in.
    reading_back: BTreeMap<u64, Vec<(ReplicaId, u32)>>,
    /// Ops whose bodies were read back [`ReadBack::Retired`], with the peers that asked: they
    /// are answered once a checkpoint covers the op (see [`Replica::checkpoint_wanted`]).
    retired_asked: BTreeMap<u64, Vec<(ReplicaId, u32)>>,
    /// Entries this replica was opened with whose bodies do not rebuild their checksums, by op
    /// with the entry's checksum: the shell drops damaged records, so these are stand-ins for
    /// bodies the state machine retired before the restart (a partition's journal keeps a short
    /// stand-in for a batch its log holds, and a segment deletion removed the batch). Such a
    /// body is never sent as the op's: a peer that needs it is answered as for a retired one.
    bodies_retired: BTreeMap<u64, u64>,
}

impl Replica {
    /// Opens a replica over the valid prefix of its durable journal (ops `1..=n`, torn tail
    /// already dropped by the shell) and its durable view state (`ViewState::default()` when
    /// none was ever persisted).
    ///
    /// A group of one commits its whole journal at once (every written entry had its quorum).
    /// A larger group rejoins as a backup (see `open_from_checkpoint`). Either way the replica
    /// re-emits `Commit` for every op from 1 on: the shell applies them to a fresh state
    /// machine. Same as `open_from_checkpoint` with an empty checkpoint.
    pub fn open(config: Config, journal_entries: Vec<Entry>, view_state: ViewState) -> Self {
        Replica::open_from_checkpoint(config, Checkpoint::default(), journal_entries, view_state)
    }

    /// Opens a replica from its latest durable `checkpoint`, the valid prefix of the journal
    /// after it (`suffix` holds ops `checkpoint.op + 1..=n`, in order) and its durable view
    /// state. The client table is restored from the checkpoint; `Commit` is replayed only for
    /// ops above `checkpoint.op` (the shell's state machine is restored to `checkpoint.op` by
    /// the shell). A group of one commits the whole suffix.
    ///
    /// A replica of a larger group rejoins as a backup in `Status::Recovering`: it acks and
    /// commits nothing until it installs a `StartView` of its persisted view or a later one,
    /// which it asks the primary of its view for (`RequestStartView`). It still takes part in
    /// view changes: its journal holds every op it ever acknowledged and its view state every
    /// view it voted in. The primary of the persisted view does not resume leading (it may have
    /// lost prepares its backups hold), it starts a view change to the next view.
    pub fn open_from_checkpoint(
        config: Config,
        checkpoint: Checkpoint,
        suffix: Vec<Entry>,
        view_state: ViewState,
    ) -> Self {
        let mut replica = Replica::restored(config, checkpoint, suffix, view_state);
        if replica.is_solo() {
            replica.commit_max = replica.journal.op();
            replica.commit_advance();
        } else if replica.primary_of(replica.view) == replica.config.replica && !replica.muted {
            replica.start_view_change(replica.view + 1);
        } else {
            replica.request_start_view();
        }
        replica
    }

    /// The replica's state as persisted, before it does anything.
    fn restored(
        config: Config,
        checkpoint: Checkpoint,
        suffix: Vec<Entry>,
        view_state: ViewState,
    ) -> Self {
        let base = Base {
            op: checkpoint.op,
            view: checkpoint.view,
            checksum: checkpoint.checksum,
        };
        let bodies_retired = suffix
            .iter()
            .filter(|entry| !entry.is_valid())
            .map(|entry| (entry.op, entry.checksum))
            .collect();
        let journal = Journal::from_entries(base, suffix);
        // An install of a later view's log may have reached the journal before the view state
        // naming it did (the shell persists the view after the journal): never stay below a
        // view our own entries were prepared in.
        let view = journal
            .entries()
            .iter()
            .map(|entry| entry.view)
            .max()
            .unwrap_or(0)
            .max(checkpoint.view)
            .max(view_state.view);
        let clients = ClientTable::from_rows(
            config.clients_table_max,
            checkpoint.clients_max,
            checkpoint.clients,
        );
        let solo = config.replica_count == 1;
        let durable_acks = vec![0; usize::from(config.replica_count)];
        let acked_at = vec![None; usize::from(config.replica_count)];
        let heard_since = vec![None; usize::from(config.replica_count)];
        let heartbeat_period = config.heartbeat_ticks;
        Replica {
            base_clients: clients.clone(),
            clients,
            executed: BTreeMap::new(),
            retiring: Vec::new(),
            retired: BTreeMap::new(),
            state_transfer: None,
            persisted: view_state,
            persisting: None,
            held: Vec::new(),
            rejoin_times_out: true,
            muted: config.restored && !solo,
            announced_commit: 0,
            rejoin_since: None,
            pre_vote: None,
            repair_asked: None,
            stepped_down_to: (0, Vec::new()),
            body_fetch: None,
            cannot_lead: false,
            declines_to_lead: false,
            config,
            status: if solo {
                Status::Normal
            } else {
                Status::Recovering
            },
            view,
            // A group of one's log is its own: the view it was prepared in is its log's view.
            log_view: if solo { view } else { view_state.log_view },
            commit_max: checkpoint.op,
            commit_min: checkpoint.op,
            commit_in_flight: None,
            journal,
            prepare_oks: BTreeMap::new(),
            durable_acks,
            acked_at,
            heard_since,
            checkpoint_safe: 0,
            start_view_change_from: BTreeSet::new(),
            do_view_change_from: BTreeMap::new(),
            do_view_change_sent: false,
            now: 0,
            heard_from_primary_at: 0,
            heard_primary_view: view,
            primary_suspected_in: None,
            view_change_started_at: 0,
            primary_since: 0,
            view_start_op: 0,
            quorum_led_at: None,
            quiet_askers: BTreeMap::new(),
            transfer_sent_at: None,
            next_heartbeat_at: 0,
            heartbeat_period,
            heartbeat_told: (0, 0),
            resent_at: 0,
            actions: VecDeque::new(),
            released_through: checkpoint.op,
            reading_back: BTreeMap::new(),
            retired_asked: BTreeMap::new(),
            bodies_retired,
        }
    }

    /// Checkpoints at `op` (at most `commit_min`): forgets the journal entries at or below `op`
    /// and returns the replicated state through `op` for the shell to persist.
    ///
    /// Call it once the state machine's effects of every op `<= op` are durable; after the
    /// returned checkpoint is durable, the shell may drop its journal prefix `<= op`. A later
    /// `open_from_checkpoint(config, checkpoint, suffix, view_state)` resumes from it. `op` below the
    /// previous checkpoint is not allowed; `op` equal to it returns the same checkpoint again.
    pub fn checkpoint(&mut self, op: u64) -> Checkpoint {
        assert!(op <= self.commit_min, "checkpoint above commit_min");
        let base = self.journal.base();
        assert!(op >= base.op, "checkpoint below the previous checkpoint");
        for at in base.op + 1..=op {
            let entry = self.journal.get(at).expect("committed op held");
            if entry.operation == OPERATION_REGISTER {
                self.base_clients.register(entry.client, at);
            } else if entry.operation == OPERATION_NOMINATE_LIMITS {
                if let Some(clients_max) = nominated_clients_max(&entry.body) {
                    self.base_clients.nominate(clients_max);
                }
            } else if let Some(reply) = self.executed.remove(&at) {
                self.base_clients
                    .record(entry.client, entry.request, at, reply);
            }
            for client in self.retired.remove(&at).unwrap_or_default() {
                self.base_clients.retire(client);
            }
        }
        self.journal.forget_through(op);
        self.bodies_retired = self.bodies_retired.split_off(&(op + 1));
        debug_assert!(op < self.commit_min || self.base_clients == self.clients);
        self.answer_retired_asked();
        let base = self.journal.base();
        Checkpoint {
            op,
            view: base.view,
            checksum: base.checksum,
            clients: self.base_clients.rows(),
            clients_max: self.base_clients.nominated(),
        }
    }

    /// A replica of a freshly formatted group (empty journal, view 0, normal status). Use
    /// `open` for every later start.
    pub fn new(config: Config) -> Self {
        let mut replica = Replica::restored(
            config,
            Checkpoint::default(),
            Vec::new(),
            ViewState::default(),
        );
        replica.status = replica.formatted_status();
        replica
    }

    /// A formatted replica is normal, unless restored and the primary of its view: it may
    /// have led that view before its disk was lost, so it leads nothing and waits for a later
    /// view its peers elect without it.
    fn formatted_status(&self) -> Status {
        match self.muted && self.primary_of(self.view) == self.config.replica {
            true => Status::Recovering,
            false => Status::Normal,
        }
    }

    /// A replica of a group created in `view`: every replica of the group formats the same
    /// view (the op that created the group decides it, so groups spread their first primaries
    /// over the replicas), with an empty journal and normal status. The view state is
    /// persisted before the first message naming the view leaves. Use `open` for every later
    /// start.
    pub fn format_in_view(config: Config, view: u32) -> Self {
        let mut replica = Replica::new(config);
        replica.view = view;
        replica.log_view = view;
        replica.heard_primary_view = view;
        replica.status = replica.formatted_status();
        replica
    }

    /// The shell knows this backup's primary to be down (its node unreachable when the group
    /// was formatted in this view, say): the primary counts as silent until it is heard, so
    /// this backup asks for pre-votes, and grants them, at once rather than after the silence
    /// timeout. A group created while its first primary's node is down then elects another
    /// within a few resends, not a heartbeat timeout later. Liveness only: a view change is
    /// safe at any time, and a pre-vote still needs a quorum that does not hear the primary.
    pub fn suspect_primary(&mut self) {
        if self.config.replica_count > 1 && self.status == Status::Normal && !self.is_primary() {
            self.primary_suspected_in = Some(self.view);
        }
    }

    /// Whether this backup counts its view's primary as down ([`Replica::suspect_primary`]).
    fn suspects_primary(&self) -> bool {
        self.primary_suspected_in == Some(self.view)
            && self.status == Status::Normal
            && !self.is_primary()
    }

    // ----- getters -----

    /// Whether this replica knows its view's primary to be alive and leading: as the primary,
    /// [`Self::leads_quorum`]; as a backup in normal status, having heard from its primary
    /// within the view-change timeout. A replica that is not in touch may name a primary that
    /// no longer leads, so it must not send clients there.
    pub fn in_touch(&self) -> bool {
        match self.status {
            Status::Normal if self.is_primary() => self.leads_quorum(),
            Status::Normal => {
                self.is_solo()
                    || (!self.suspects_primary()
                        && self.now
                            < self.heard_from_primary_at + self.config.view_change_timeout_ticks)
            }
            Status::ViewChange | Status::Recovering => false,
        }
    }

    /// Whether this replica applied every op of the log its view started with. Those ops may
    /// have committed in an earlier view, and been answered to clients; a new view commits
    /// them again before anything else, and until this replica applied them, what it serves
    /// is older than what clients were told: after a restart of every replica a group's commit
    /// starts from its checkpoint, so every replica's state is older than what it answered
    /// before, for a round trip. A replica serves reads only past this.
    pub fn applied_view_log(&self) -> bool {
        self.commit_min >= self.view_start_op
    }

    /// The first tick at which [`Self::in_touch`] no longer holds unless this replica hears
    /// from its peers first: 0 when it does not hold now, `u64::MAX` when it always holds (a
    /// group of one). The shell turns it into an instant, counting the time its clock fell
    /// behind since (a stall the replica's time slipped over), so a primary stopped past the
    /// view-change timeout does not serve as one once it runs again.
    pub fn in_touch_until(&self) -> u64 {
        if !self.in_touch() {
            return 0;
        }
        match self.status {
            Status::Normal if self.is_solo() => u64::MAX,
            Status::Normal if self.is_primary() => self.leads_quorum_until(),
            Status::Normal => self.heard_from_primary_at + self.config.view_change_timeout_ticks,
            Status::ViewChange | Status::Recovering => 0,
        }
    }

    /// Whether this replica leads its view with a quorum in touch: the primary in normal
    /// status whose backups (enough of them for a quorum, counting itself) acknowledged
    /// something within the view-change timeout. A primary cut off from its group keeps its
    /// view (nobody tells it otherwise) but no longer claims to lead; a group of one always
    /// leads.
    pub fn leads_quorum(&self) -> bool {
        if self.status != Status::Normal || !self.is_primary() {
            return false;
        }
        if self.is_solo() {
            return true;
        }
        let me = usize::from(self.config.replica);
        let recent = |at: Option<u64>| {
            at.is_some_and(|at| self.now < at + self.config.view_change_timeout_ticks)
        };
        let in_touch = (0..self.acked_at.len())
            .filter(|&r| r == me || recent(self.acked_at[r]))
            .count();
        in_touch >= self.config.quorum()
    }

    /// Current status.
    /// The configuration the replica was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// While set, this replica takes no group handed over to it (a preferred-primary
    /// hand-back, another primary's step-down): its node cannot serve as a primary now (a
    /// node that cannot judge its clients' grants would refuse every write). It still votes
    /// and, elected the primary of a view change as usual, leads; the node then steps it down.
    /// A behaviour of this node alone, which no peer's state depends on.
    pub fn set_declines_to_lead(&mut self, declines: bool) {
        self.declines_to_lead = declines;
    }

    /// Whether this replica, opened restored, still waits for a whole view's log before it
    /// votes in view changes ([`Config::restored`]).
    pub fn is_muted(&self) -> bool {
        self.muted
    }

    pub fn status(&self) -> Status {
        self.status
    }
    /// Current view.
    pub fn view(&self) -> u32 {
        self.view
    }
    /// Highest op in the log.
    pub fn op(&self) -> u64 {
        self.journal.op()
    }
    /// Highest op applied to the state machine.
    pub fn commit_min(&self) -> u64 {
        self.commit_min
    }
    /// Highest op known committed.
    pub fn commit_max(&self) -> u64 {
        self.commit_max
    }
    /// The log's entries this replica has not applied yet (above [`Self::commit_min`]): as the
    /// primary, the ops its next prepare goes behind.
    pub fn unapplied(&self) -> &[Entry] {
        self.journal.entries_after(self.commit_min)
    }
    /// The log entry at `op` (`None` at or below the latest checkpoint).
    pub fn entry(&self, op: u64) -> Option<&Entry> {
        self.journal.get(op)
    }
    /// The checksum of the log's entry at `op`: held, awaited (its header installed, its body
    /// not arrived yet) or the checkpoint's; `None` below the checkpoint or past the log.
    pub fn checksum_at(&self, op: u64) -> Option<u64> {
        self.journal
            .checksum_at(op)
            .or_else(|| self.journal.header_at(op).map(|header| header.checksum))
    }
    /// Drops the bodies of committed, applied entries from memory (registers and limit
    /// nominations keep theirs): a send's batch need not stay in memory until the next
    /// checkpoint, which in a group of more than one waits for every replica. A peer that
    /// still needs one (a lagging backup's repair, a new primary's body fetch) gets it read
    /// back ([`Action::ReadBack`]). Checksums stay, so the log still chains.
    pub fn release_committed_bodies(&mut self) {
        if self.commit_min > self.released_through {
            self.journal
                .release_bodies(self.released_through + 1, self.commit_min);
            self.released_through = self.commit_min;
        }
    }

    /// What reading op `op` back after [`Action::ReadBack`] found. An entry is sent to every
    /// peer waiting for it when it is the entry this replica holds at `op`; an unreadable one
    /// is not (the peers ask again); a retired one waits for a checkpoint past it (see
    /// [`Self::checkpoint_wanted`]).
    pub fn on_read_back(&mut self, op: u64, read: ReadBack) {
        let Some(waiting) = self.reading_back.remove(&op) else {
            return;
        };
        let entry = match read {
            ReadBack::Read(entry) => entry,
            ReadBack::Unreadable => return,
            ReadBack::Retired => {
                // A retirement deletes only the messages of applied ops.
                debug_assert!(
                    op <= self.commit_min,
                    "op {op} retired before it was applied"
                );
                self.tell_fetching_primary_retired(op, &waiting);
                self.retired_asked.entry(op).or_default().extend(waiting);
                self.answer_retired_asked();
                return;
            }
        };
        let Some(held) = self.journal.get(op) else {
            return;
        };
        if entry.header() != held.header() || !entry.is_valid() {
            return;
        }
        for (to, view) in waiting {
            let message = Message::Prepare {
                view,
                commit: self.commit_max,
                entry: entry.clone(),
            };
            self.send(to, message);
        }
    }

    /// The op a checkpoint must reach (at `commit_min`, which is at or above it) before this
    /// replica can answer every peer that asked for a body it retired: `None` when none did.
    ///
    /// A group that checkpoints past laggards retires messages up to its own checkpoint (see
    /// `GroupCore::retirable_through`), and the committed retirement deletes them on every
    /// replica, also on one that has not checkpointed that far: its journal still names ops
    /// whose bodies are gone. Without a checkpoint past them, a laggard repairing from it would
    /// ask forever; after one, the primary answers with its log (a `StartView` based above the
    /// laggard, which turns to state transfer).
    pub fn checkpoint_wanted(&self) -> Option<u64> {
        let (op, _) = self.retired_asked.last_key_value()?;
        debug_assert!(*op > self.journal.base().op && *op <= self.commit_min);
        Some(*op)
    }

    /// Answers the peers that asked for a retired body once a checkpoint covers its op: the
    /// primary sends a lagging backup its log, as for a repair of any checkpointed op (the
    /// backup installs it or turns to state transfer). A backup that was serving a new
    /// primary's body fetch told it at once instead (see `tell_fetching_primary_retired`).
    fn answer_retired_asked(&mut self) {
        let base = self.journal.base().op;
        let above = self.retired_asked.split_off(&(base + 1));
        let covered = std::mem::replace(&mut self.retired_asked, above);
        let mut answered = BTreeSet::new();
        for (to, view) in covered.into_values().flatten() {
            if self.is_primary() && view == self.view && answered.insert(to) {
                self.send_start_view(to);
            }
        }
    }

    /// A backup asked for `op` by the new primary of its view (`waiting`: the peers that asked)
    /// whose body a retirement deleted: tells that primary at once (`Message::BodyRetired`), so
    /// it asks another holder or, with none left, gives the view up instead of waiting for the
    /// view change to time out (a primary's own repairs of a laggard are answered once a
    /// checkpoint covers the op, see `answer_retired_asked`).
    fn tell_fetching_primary_retired(&mut self, op: u64, waiting: &[(ReplicaId, u32)]) {
        if self.is_primary() {
            return;
        }
        let primary = self.primary_of(self.view);
        if waiting.iter().any(|(to, _)| *to == primary) {
            let message = Message::BodyRetired {
                view: self.view,
                op,
                replica: self.config.replica,
            };
            self.send(primary, message);
        }
    }

    /// Sends the held entry `op` to `to` as a prepare of `view`, reading its body back first
    /// when it was released.
    fn send_entry(&mut self, to: ReplicaId, view: u32, op: u64) {
        if self.body_retired(op) {
            self.tell_fetching_primary_retired(op, &[(to, view)]);
            // Answered once a checkpoint covers it, as a retired body read back is; until this
            // replica applied it, the peer asks again.
            if op <= self.commit_min {
                let asked = self.retired_asked.entry(op).or_default();
                if !asked.contains(&(to, view)) {
                    asked.push((to, view));
                }
                self.answer_retired_asked();
            }
            return;
        }
        let entry = self.journal.get(op).expect("op in log");
        let released = op <= self.released_through
            && entry.operation != OPERATION_REGISTER
            && entry.operation != OPERATION_NOMINATE_LIMITS;
        if released {
            let waiting = self.reading_back.entry(op).or_default();
            if waiting.is_empty() {
                self.actions.push_back(Action::ReadBack { op });
            }
            if !waiting.contains(&(to, view)) {
                waiting.push((to, view));
            }
            return;
        }
        let message = Message::Prepare {
            view,
            commit: self.commit_max,
            entry: entry.clone(),
        };
        self.send(to, message);
    }

    /// Whether the entry held at `op` is one this replica was opened with and whose body was
    /// retired (see `bodies_retired`).
    fn body_retired(&self, op: u64) -> bool {
        self.bodies_retired
            .get(&op)
            .is_some_and(|checksum| self.journal.checksum_at(op) == Some(*checksum))
    }

    /// Why the primary of the view this replica changes to has not started it (for the
    /// simulator's figures): `None` when this replica is not that primary.
    pub(crate) fn leading_stalled(&self) -> Option<LeadingStalled> {
        if self.status != Status::ViewChange || self.primary_of(self.view) != self.config.replica {
            return None;
        }
        Some(if self.cannot_lead {
            LeadingStalled::GaveUp
        } else if self.body_fetch.is_some() {
            LeadingStalled::FetchingBodies
        } else if self.state_transfer.is_some() {
            LeadingStalled::NeedsStateTransfer
        } else {
            LeadingStalled::Voting
        })
    }

    /// Whether the group has no other replica.
    pub fn is_solo(&self) -> bool {
        self.config.replica_count == 1
    }

    /// Bytes of entry bodies held in memory.
    pub fn held_body_bytes(&self) -> u64 {
        self.journal
            .entries()
            .iter()
            .map(|entry| entry.body.len() as u64)
            .sum()
    }

    pub fn journal_len(&self) -> usize {
        self.journal.len()
    }
    /// Op of the latest checkpoint (0 when none): entries at or below it are forgotten.
    pub fn checkpoint_op(&self) -> u64 {
        self.journal.base().op
    }
    /// The highest op this replica may checkpoint at (together with its own `commit_min`)
    /// without leaving any replica of the group in need of state transfer: an op known to be
    /// committed and held durably by every replica's journal (or checkpoint). The primary
    /// computes it from the PrepareOks of its view and announces it in its Commit heartbeats;
    /// a replica that never heard one, or restarted since, knows 0. A group of one holds every
    /// op it committed.
    pub fn checkpoint_safe(&self) -> u64 {
        if self.is_solo() {
            self.commit_max
        } else {
            self.checkpoint_safe
        }
    }
    /// On the primary in normal status, the highest op `replica` acknowledged holding durably
    /// (with every op before it) in this view (its own durable prefix for itself); `None` on
    /// any other replica, which does not track acknowledgements.
    pub fn acknowledged_through(&self, replica: ReplicaId) -> Option<u64> {
        if !self.is_primary() || self.is_solo() {
            return None;
        }
        if replica == self.config.replica {
            return Some(self.journal.durable_through());
        }
        self.durable_acks.get(usize::from(replica)).copied()
    }
    /// Set while this replica cannot catch up with the group without state transfer (another
    /// replica checkpointed past the ops it is missing). Cleared once a log installs.
    pub fn state_transfer_needed(&self) -> Option<StateTransferNeeded> {
        self.state_transfer
    }
    /// The client table.
    pub fn clients(&self) -> &ClientTable {
        &self.clients
    }
    /// The highest request number of `client` this replica holds: committed (its client
    /// table) or prepared above its commit (its journal), 0 if none.
    pub fn latest_request(&self, client: u128) -> u64 {
        let committed = self
            .clients
            .get(client)
            .map_or(0, |session| session.request);
        let prepared = self
            .journal
            .entries_after(self.commit_min)
            .iter()
            .filter(|entry| entry.client == client)
            .map(|entry| entry.request)
            .max()
            .unwrap_or(0);
        committed.max(prepared)
    }
    /// This replica's index.
    pub fn replica(&self) -> ReplicaId {
        self.config.replica
    }
    /// Primary of `view`.
    pub fn primary_of(&self, view: u32) -> ReplicaId {
        (view % u32::from(self.config.replica_count)) as ReplicaId
    }
    /// True when this replica is the primary of its view and in normal status.
    pub fn is_primary(&self) -> bool {
        self.status == Status::Normal && self.primary_of(self.view) == self.config.replica
    }

    /// Next output, if any. Drain after every input.
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.actions.is_empty() {
            // Last, after the journal writes of the same input: the view state must not name
            // a log the journal does not hold yet.
            let state = self.view_state();
            if !self.is_solo() && self.persisting.is_none() && self.persisted != state {
                self.persisting = Some(state);
                return Some(Action::PersistView { state });
            }
        }
        self.actions.pop_front()
    }

    /// The view state last reported durable (`on_view_persisted`).
    pub fn persisted_view_state(&self) -> ViewState {
        self.persisted
    }

    /// The shell made `state` (the last `PersistView`) durable. Messages held for it are sent
    /// once the replica's current view state is durable (it may have moved on meanwhile: then
    /// the next `PersistView` follows).
    pub fn on_view_persisted(&mut self, state: ViewState) {
        assert_eq!(
            self.persisting.take(),
            Some(state),
            "only the PersistView handed out is reported durable"
        );
        self.persisted = state;
        if self.persisted == self.view_state() {
            for (to, message) in std::mem::take(&mut self.held) {
                self.actions.push_back(Action::Send { to, message });
            }
        }
    }

    // ----- inputs -----

    /// A client request. Only the primary accepts it; duplicates replay the cached reply. A
    /// backup in normal status refuses it with `NotPrimary` (naming its view's primary); a
    /// replica changing views or recovering with `NotReady`, since the view it would name may
    /// be stale.
    pub fn on_request(&mut self, client: u128, request: u64, operation: u8, body: Bytes) {
        if !self.is_primary() {
            let refusal = if self.status == Status::Normal {
                Refusal::NotPrimary {
                    view: self.view,
                    primary: self.primary_of(self.view),
                }
            } else {
                Refusal::NotReady
            };
            return self.refuse(client, request, refusal);
        }
        let register = operation == OPERATION_REGISTER;
        let pipelined = self.journal.entries_after(self.commit_min);
        let mut pipelined = pipelined.iter().filter(|entry| entry.client == client);
        if pipelined
            .clone()
            .any(|entry| entry.request == request || register)
        {
            return; // Already being prepared; the reply follows its commit.
        }
        // A newer request of this client is being prepared: this one may never commit after
        // it (the client table only moves forward), and it must not be left unanswered.
        let newer_pipelined = pipelined.any(|entry| entry.request > request);
        match self.clients.check(client, request, register) {
            RequestCheck::Duplicate { op, reply } => {
                self.actions.push_back(Action::Reply {
                    client,
                    request,
                    op,
                    reply,
                });
                return;
            }
            RequestCheck::TooOld => return self.refuse(client, request, Refusal::RequestTooOld),
            RequestCheck::SessionUnknown => {
                // A register still in the pipeline (e.g. re-prepared after a view change) is
                // not a missing session: ask the client to retry.
                let registering = self
                    .journal
                    .entries_after(self.commit_min)
                    .iter()
                    .any(|entry| entry.client == client && entry.operation == OPERATION_REGISTER);
                // Only a primary in touch with a quorum knows a session is gone: one formatted
                // late in its group's creation view (its node applied the create after the
                // group moved on) or cut off names no session it has not heard of, and the
                // client must not abandon a session the group holds on its word.
                let refusal = if registering {
                    Refusal::Busy
                } else if !self.leads_quorum() {
                    Refusal::NotReady
                } else {
                    Refusal::SessionUnknown
                };
                return self.refuse(client, request, refusal);
            }
            RequestCheck::New if newer_pipelined => {
                return self.refuse(client, request, Refusal::RequestTooOld);
            }
            RequestCheck::New => {}
        }
        if register {
            // Live sessions and the registers in the pipeline hold every slot: refused until a
            // session retires (a register that still reached a full table commits as a no-op).
            let registers_pending = self
                .journal
                .entries_after(self.commit_min)
                .iter()
                .filter(|entry| entry.operation == OPERATION_REGISTER)
                .count();
            let counted = client < NODE_CLIENTS_MIN;
            if counted && self.clients.counted() + registers_pending >= self.clients.clients_max() {
                return self.refuse(client, request, Refusal::ClientsTableFull);
            }
        }
        if (self.journal.op() - self.commit_max) as usize >= self.config.pipeline_max {
            return self.refuse(client, request, Refusal::Busy);
        }
        self.prepare(client, request, operation, body);
    }

    /// As the primary: appends the next op to the journal (the shell writes it) and sends it
    /// to the other replicas, whose PrepareOks then count towards its quorum.
    fn prepare(&mut self, client: u128, request: u64, operation: u8, body: Bytes) {
        let entry = Entry::new(
            self.journal.op() + 1,
            self.view,
            client,
            request,
            operation,
            body,
        );
        self.append_and_write(entry.clone());
        // A pipeline that was empty starts its retransmission timer now (a shell that sleeps
        // through an idle group's ticks does not keep it current; a dense clock would have).
        if self.prepare_oks.is_empty() {
            self.resent_at = self.now;
        }
        // No longer idle: the heartbeat that announces this op's commit goes out at the
        // active period.
        self.next_heartbeat_at = self
            .next_heartbeat_at
            .min(self.now + self.config.heartbeat_ticks);
        self.prepare_oks.insert(entry.op, BTreeSet::new());
        for to in self.others() {
            let message = Message::Prepare {
                view: self.view,
                commit: self.commit_max,
                entry: entry.clone(),
            };
            self.send(to, message);
        }
    }

    /// Proposes the group's limits (the client table's capacity from the configuration) unless
    /// the group has committed a nomination or one is being prepared. Only a primary proposes;
    /// the first nomination committed wins (see [`OPERATION_NOMINATE_LIMITS`]).
    pub fn nominate_limits(&mut self, clients_max: usize) {
        let pending = self
            .journal
            .entries_after(self.commit_min)
            .iter()
            .any(|entry| entry.operation == OPERATION_NOMINATE_LIMITS);
        if !self.is_primary() || self.clients.nominated().is_some() || pending || clients_max == 0 {
            return;
        }
        let clients_max = u32::try_from(clients_max).expect("client table capacity fits u32");
        let body = Bytes::copy_from_slice(&clients_max.to_le_bytes());
        self.prepare(0, 0, OPERATION_NOMINATE_LIMITS, body);
    }

    /// The shell finished the journal write for `op`.
    pub fn on_write_done(&mut self, op: u64) {
        let durable_before = self.journal.durable_through();
        if !self.journal.write_done(op) || self.status != Status::Normal {
            return;
        }
        self.acknowledge_durable(durable_before);
        self.maybe_unmute();
    }

    /// The `Commit` being applied ends the sessions of `clients` (a logout or an expiry that
    /// every earlier op of theirs has been retired behind): once its reply is recorded, their
    /// client-table slots are free. Called by the shell between the `Commit` and its
    /// `on_committed_reply`, from the committed op alone, so every replica retires the same
    /// clients at the same op. Retiring the op's own client drops its retry protection with it:
    /// a retry of that request is answered as from an unknown session.
    pub fn retire_with_commit(&mut self, clients: &[u128]) {
        assert!(
            self.commit_in_flight.is_some(),
            "retirements belong to the Commit being applied"
        );
        self.retiring.extend_from_slice(clients);
    }

    /// The state machine applied the `Commit` at `op` and produced `reply`.
    pub fn on_committed_reply(&mut self, op: u64, reply: Bytes) {
        assert_eq!(
            self.commit_in_flight,
            Some(op),
            "replies must answer the outstanding Commit"
        );
        self.commit_in_flight = None;
        let entry = self
            .journal
            .get(op)
            .expect("committed entry present")
            .clone();
        self.clients
            .record(entry.client, entry.request, op, reply.clone());
        self.executed.insert(op, reply.clone());
        if !self.retiring.is_empty() {
            let retiring = std::mem::take(&mut self.retiring);
            for client in &retiring {
                self.clients.retire(*client);
            }
            self.retired.insert(op, retiring);
        }
        self.commit_min = op;
        if self.is_primary() {
            let (client, request) = (entry.client, entry.request);
            self.actions.push_back(Action::Reply {
                client,
                request,
                op,
                reply,
            });
        }
        self.commit_advance();
    }

    /// Virtual time advanced to `now_ticks` (must not go backwards).
    pub fn on_tick(&mut self, now_ticks: u64) {
        assert!(now_ticks >= self.now, "time went backwards");
        self.now = now_ticks;
        if self.config.replica_count == 1 {
            return;
        }
        if self.status != Status::Normal || !self.is_primary() {
            self.quorum_led_at = None;
        }
        // Every way of leaving a view on a timeout goes through a pre-vote: a replica that
        // cannot reach a quorum keeps its view however long it stays cut off.
        let leaving = match self.status {
            Status::Recovering => {
                let since = *self.rejoin_since.get_or_insert(self.now);
                if self.now >= self.resent_at + self.config.resend_ticks {
                    self.request_start_view();
                }
                // Nobody answered as the primary of our view or a later one: replace it, as a
                // backup that stopped hearing from its primary would.
                let silent_since = since.max(self.heard_from_primary_at);
                self.rejoin_times_out
                    && self.now >= silent_since + self.config.silence_timeout_ticks()
                    && !self.hears_primary()
            }
            Status::ViewChange => {
                if self.now >= self.resent_at + self.config.resend_ticks {
                    self.resent_at = self.now;
                    self.broadcast_start_view_change();
                    self.do_view_change_sent = false;
                    self.maybe_send_do_view_change();
                    self.request_bodies();
                }
                let stalled = self.now
                    >= self.view_change_started_at + self.config.view_change_timeout_ticks
                    || self.cannot_lead;
                stalled && !self.hears_primary()
            }
            Status::Normal if self.is_primary() => {
                self.tick_primary();
                self.maybe_hand_over();
                false
            }
            Status::Normal => {
                self.suspects_primary()
                    || self.now >= self.heard_from_primary_at + self.config.silence_timeout_ticks()
            }
        };
        if leaving && !self.muted {
            self.ask_pre_vote(self.view + 1);
        } else {
            self.pre_vote = None;
        }
    }

    /// The first tick at which [`Replica::on_tick`] may do more than move the clock: a
    /// heartbeat or retransmission due, a timeout that would start a pre-vote or a view
    /// change, the last tick a primary leads its quorum (and the next, when it stops), the
    /// tick a backup stops hearing its primary ([`Replica::in_touch`]). Ticks before it change nothing, so a
    /// shell may skip them and sleep until this one, or until a message arrives (ticking to
    /// the present first): an idle group then wakes once per heartbeat, not once per tick.
    /// Always after the present tick; `u64::MAX` for a group of one (it has no timers).
    pub fn next_tick_due(&self) -> u64 {
        if self.config.replica_count == 1 {
            return u64::MAX;
        }
        let next = self.now + 1;
        let resend = self.resent_at + self.config.resend_ticks;
        let hears_until = match self.heard_primary_view >= self.view {
            true => self.heard_from_primary_at + self.config.view_change_timeout_ticks,
            false => 0,
        };
        // When `on_tick` would find this replica leaving its view, if nothing arrives first.
        let leaving_at = match self.status {
            Status::Recovering => {
                let Some(since) = self.rejoin_since else {
                    return next;
                };
                let silent_since = since.max(self.heard_from_primary_at);
                let leaves = self
                    .rejoin_times_out
                    .then(|| (silent_since + self.config.silence_timeout_ticks()).max(hears_until));
                let due = leaves.map_or(resend, |at| at.min(resend));
                return self.with_pre_vote(due.max(next), leaves);
            }
            Status::ViewChange => {
                let stalled = match self.cannot_lead {
                    true => next,
                    false => self.view_change_started_at + self.config.view_change_timeout_ticks,
                };
                let leaves = stalled.max(hears_until);
                return self.with_pre_vote(resend.min(leaves).max(next), Some(leaves));
            }
            Status::Normal if self.is_primary() => {
                return self.with_pre_vote(self.primary_tick_due().max(next), None);
            }
            Status::Normal if self.suspects_primary() => next,
            Status::Normal => self.heard_from_primary_at + self.config.silence_timeout_ticks(),
        };
        // A backup also wakes as it stops being in touch with its primary (`in_touch`), so the
        // shell's figures stop sending clients to a primary it no longer hears.
        let out_of_touch = match hears_until > self.now {
            true => hears_until,
            false => u64::MAX,
        };
        self.with_pre_vote(leaving_at.min(out_of_touch).max(next), Some(leaving_at))
    }

    /// What a tick may change besides the clock and the last tick the primary led its quorum,
    /// with the actions queued: the simulator checks that a tick before
    /// [`Replica::next_tick_due`] leaves it as it was.
    pub(crate) fn tick_state(&self) -> impl PartialEq + std::fmt::Debug + use<> {
        (
            (self.status, self.view, self.log_view, self.muted),
            self.primary_suspected_in,
            self.pre_vote
                .as_ref()
                .map(|round| (round.view, round.asked_at)),
            (
                self.resent_at,
                self.next_heartbeat_at,
                self.transfer_sent_at,
            ),
            self.rejoin_since,
            self.actions.len(),
        )
    }

    /// `due`, or sooner for the pre-vote round: asked again every `resend_ticks` while this
    /// replica is leaving its view (from `leaving_at` on), dropped at the next tick otherwise.
    fn with_pre_vote(&self, due: u64, leaving_at: Option<u64>) -> u64 {
        let next = self.now + 1;
        let leaving = !self.muted && leaving_at.is_some_and(|at| at <= next);
        let round = match (&self.pre_vote, leaving) {
            (Some(round), true) if round.view == self.view + 1 => {
                round.asked_at + self.config.resend_ticks
            }
            (None, false) => u64::MAX,
            _ => next,
        };
        due.min(round.max(next))
    }

    /// A Normal primary's next due tick: its heartbeat, a retransmission of the pipeline, the
    /// hand-over to its preferred replica, the last tick it leads its quorum.
    fn primary_tick_due(&self) -> u64 {
        let next = self.now + 1;
        let Some(led_at) = self.quorum_led_at else {
            return next;
        };
        // Kept exact as a dense clock would: the last tick `leads_quorum` holds. Past it the
        // primary goes quiet a view-change timeout after it last led (`quiet`), and sends
        // nothing on its timers until a backup is heard again.
        let leads = self.leads_quorum();
        let (mut due, quiet_from) = match leads {
            true => (self.leads_quorum_until().saturating_sub(1), u64::MAX),
            false => (u64::MAX, led_at + self.config.view_change_timeout_ticks),
        };
        let mut timer = |at: u64| {
            if at.max(next) < quiet_from {
                due = due.min(at);
            }
        };
        timer(self.next_heartbeat_at);
        if !self.prepare_oks.is_empty() {
            timer(self.resent_at + self.config.resend_ticks);
        }
        if let Some(preferred) = self.config.preferred_primary
            && preferred != self.config.replica
        {
            let may_hand_over = self.may_hand_over_from(preferred);
            let caught_up = self
                .durable_acks
                .get(usize::from(preferred))
                .is_some_and(|acked| *acked >= self.journal.op());
            if self.now < may_hand_over {
                due = due.min(may_hand_over);
            } else if caught_up && self.heard_lately(preferred) {
                let again = self
                    .transfer_sent_at
                    .map_or(next, |at| at + self.config.resend_ticks);
                due = due.min(again);
            }
        }
        due
    }

    /// The first tick at which `leads_quorum` no longer holds unless a backup acknowledges
    /// something first: a view-change timeout after the latest acknowledgement among enough
    /// backups for a quorum with this primary.
    fn leads_quorum_until(&self) -> u64 {
        let me = usize::from(self.config.replica);
        let backups_needed = self.config.quorum().saturating_sub(1);
        if backups_needed == 0 {
            return u64::MAX;
        }
        let backups = || {
            (0..self.acked_at.len())
                .filter(move |&r| r != me)
                .filter_map(|r| self.acked_at[r])
        };
        // The latest acknowledgement that enough backups made at it or later (no allocation:
        // a group has a handful of replicas and this runs at every wake of the group).
        let latest = backups()
            .filter(|&at| backups().filter(|&other| other >= at).count() >= backups_needed)
            .max();
        latest.map_or(0, |at| at + self.config.view_change_timeout_ticks)
    }

    /// A message from replica `from`.
    pub fn on_message(&mut self, from: ReplicaId, message: Message) {
        if from >= self.config.replica_count || from == self.config.replica {
            return;
        }
        // A recovering replica goes through the same handlers: it acks nothing (it is not in
        // normal status), answers a primary's Prepare or Commit with a RequestStartView, installs
        // a StartView of its view or a later one, and takes part in view changes.
        match message {
            Message::Prepare {
                view,
                commit,
                entry,
            } => self.on_prepare(from, view, commit, entry),
            Message::PrepareOk {
                view,
                op,
                checksum,
                replica,
            } => self.on_prepare_ok(view, op, checksum, replica),
            Message::Commit {
                view,
                commit,
                checkpoint_safe,
            } => self.on_commit(from, view, commit, checkpoint_safe),
            Message::PreVote { view, replica } => self.on_pre_vote(view, replica),
            Message::PreVoteGranted { view, replica } => self.on_pre_vote_granted(view, replica),
            Message::StartViewChange { view, replica } => self.on_start_view_change(view, replica),
            Message::DoViewChange {
                view,
                replica,
                log_view,
                commit,
                log,
            } => self.on_do_view_change(view, replica, log_view, commit, log),
            Message::StartView { view, commit, log } => self.on_start_view(view, commit, log),
            Message::RequestPrepare { view, op, replica } => {
                self.on_request_prepare(view, op, replica)
            }
            Message::BodyRetired { view, op, replica } => self.on_body_retired(view, op, replica),
            Message::RequestStartView { view, replica } => {
                // A restarted replica asks for the view it persisted; a later view's StartView
                // serves it as well.
                if view <= self.view && self.is_primary() {
                    self.send_start_view(replica);
                } else if self.is_primary() {
                    self.catch_up_to_view(view);
                }
            }
            Message::PrimaryTransfer {
                view,
                target_view,
                target,
                ..
            } if target == self.config.replica => self.on_primary_transfer(from, view, target_view),
            Message::PrimaryTransfer { .. } => {}
        }
    }
}

// ----- private: normal operation -----
impl Replica {
    fn others(&self) -> Vec<ReplicaId> {
        (0..self.config.replica_count)
            .filter(|r| *r != self.config.replica)
            .collect()
    }

    /// Sends `message`, or holds it until the current view state is durable: no message
    /// naming a view leaves before the view (and the log's view) is persisted.
    fn send(&mut self, to: ReplicaId, message: Message) {
        debug_assert_ne!(to, self.config.replica);
        if self.persisted == self.view_state() {
            self.actions.push_back(Action::Send { to, message });
        } else {
            self.held.push((to, message));
        }
    }

    /// The view state the replica is in now (persisted or not).
    fn view_state(&self) -> ViewState {
        ViewState {
            view: self.view,
            log_view: self.log_view,
        }
    }

    fn refuse(&mut self, client: u128, request: u64, refusal: Refusal) {
        self.actions.push_back(Action::Refuse {
            client,
            request,
            refusal,
        });
    }

    fn append_and_write(&mut self, entry: Entry) {
        let op = entry.op;
        self.journal.append(entry.clone());
        self.actions.push_back(Action::WritePrepare { op, entry });
    }

    /// The journal's durable prefix grew past `after` (in normal status): count the newly
    /// durable ops (primary), or tell the primary (backup) about each one above our commit and,
    /// when the whole prefix is committed already, about its head, so the primary still learns
    /// how far our journal reaches (`checkpoint_safe`).
    fn acknowledge_durable(&mut self, after: u64) {
        let through = self.journal.durable_through();
        if through <= after {
            return;
        }
        if self.is_primary() {
            let me = self.config.replica;
            for op in after + 1..=through {
                let checksum = self.checksum_at(op).unwrap_or(0);
                self.on_prepare_ok(self.view, op, checksum, me);
            }
            return;
        }
        for op in (after + 1).max(self.commit_max + 1)..=through {
            self.send_prepare_ok(op);
        }
        if through <= self.commit_max {
            self.send_prepare_ok(through);
        }
    }

    /// Backup: tells the primary that our journal holds its log durably through `op`. Not
    /// before our log is the view's log (`log_view == view`): until every body of it arrived an
    /// ack would vouch for a log this replica cannot report in a view change.
    fn send_prepare_ok(&mut self, op: u64) {
        if self.log_view != self.view {
            return;
        }
        let primary = self.primary_of(self.view);
        let message = Message::PrepareOk {
            view: self.view,
            op,
            checksum: self.checksum_at(op).unwrap_or(0),
            replica: self.config.replica,
        };
        self.send(primary, message);
    }

    /// A Normal primary that has led no quorum for a view-change timeout (none acknowledged
    /// anything for twice that): it sends no heartbeat and resends no prepare until a backup
    /// is back (it answers a backup's pre-vote with a heartbeat). A primary whose frames reach
    /// its backups while theirs never reach it (a one-way loss) would otherwise keep them
    /// hearing a primary that commits nothing, and no backup would ever replace it.
    fn quiet(&self) -> bool {
        self.quorum_led_at
            .is_some_and(|at| self.now >= at + self.config.view_change_timeout_ticks)
    }

    fn tick_primary(&mut self) {
        if self.quorum_led_at.is_none() || self.leads_quorum() {
            self.quorum_led_at = Some(self.now);
        }
        if self.quiet() {
            return;
        }
        if self.now >= self.next_heartbeat_at {
            self.heartbeat_period = match self.idles() {
                true => self.config.idle_heartbeat_ticks(),
                false => self.config.heartbeat_ticks,
            };
            self.next_heartbeat_at = self.now + self.heartbeat_period;
            self.heartbeat_told = (self.commit_max, self.checkpoint_safe);
            for to in self.others() {
                self.send(
                    to,
                    Message::Commit {
                        view: self.view,
                        commit: self.commit_max,
                        checkpoint_safe: self.checkpoint_safe,
                    },
                );
            }
        }
        // An empty pipeline's timer is restarted by its next prepare (see `prepare`).
        if !self.prepare_oks.is_empty() && self.now >= self.resent_at + self.config.resend_ticks {
            self.resent_at = self.now;
            let pending: Vec<(u64, BTreeSet<ReplicaId>)> = self
                .prepare_oks
                .iter()
                .map(|(op, oks)| (*op, oks.clone()))
                .collect();
            for (op, oks) in pending {
                // The backups that hold it ack it with their log; the others repair it.
                if self.body_retired(op) {
                    continue;
                }
                let entry = self.journal.get(op).expect("pipeline op in log").clone();
                for to in self.others().into_iter().filter(|r| !oks.contains(r)) {
                    let message = Message::Prepare {
                        view: self.view,
                        commit: self.commit_max,
                        entry: entry.clone(),
                    };
                    self.send(to, message);
                }
            }
        }
    }

    /// Whether this Normal primary's group idles: nothing in flight, everything committed, every
    /// backup acknowledged holding the whole log durably in this view, the last heartbeat
    /// announced the commit and `checkpoint_safe` as they stand, and no hand-over to a preferred
    /// replica pending (it waits for that replica heard lately). Its heartbeats then only keep
    /// the backups from suspecting it, and go out at the idle period.
    fn idles(&self) -> bool {
        let op = self.journal.op();
        self.prepare_oks.is_empty()
            && self.commit_max == op
            && self.heartbeat_told == (self.commit_max, self.checkpoint_safe)
            && (0..self.config.replica_count)
                .filter(|r| *r != self.config.replica)
                .all(|r| {
                    self.durable_acks
                        .get(usize::from(r))
                        .is_some_and(|acked| *acked >= op)
                })
            && self
                .config
                .preferred_primary
                .is_none_or(|preferred| preferred == self.config.replica)
    }

    /// A primary that is not the group's preferred one hands the group over to it (asks it to
    /// start the view change to the next view it leads; again every `resend_ticks` until that
    /// happens), once it has led for a view-change timeout (a
    /// view does not flap) and the preferred replica holds every op of this view durably (the
    /// change then loses no time waiting for it). A view change like any other: the
    /// DoViewChange quorum keeps every op, and if the preferred replica fails meanwhile the
    /// view times out as usual.
    fn maybe_hand_over(&mut self) {
        let Some(preferred) = self.config.preferred_primary else {
            return;
        };
        if preferred == self.config.replica || self.now < self.may_hand_over_from(preferred) {
            return;
        }
        let index = usize::from(preferred);
        let caught_up = self
            .durable_acks
            .get(index)
            .is_some_and(|acked| *acked >= self.journal.op());
        if !caught_up || !self.heard_lately(preferred) {
            return;
        }
        if self
            .transfer_sent_at
            .is_some_and(|at| self.now < at + self.config.resend_ticks)
        {
            return;
        }
        self.transfer_sent_at = Some(self.now);
        self.transfer_to(preferred);
    }

    /// When a hand-back to `preferred` may start: once this primary has led for a view-change
    /// timeout (a view does not flap), and `preferred` has been heard for the settle time.
    fn may_hand_over_from(&self, preferred: ReplicaId) -> u64 {
        let led = self.primary_since + self.config.view_change_timeout_ticks;
        let settled = self
            .heard_since
            .get(usize::from(preferred))
            .copied()
            .flatten()
            .map_or(u64::MAX, |since| since + self.config.hand_back_settle_ticks);
        led.max(settled)
    }

    /// Whether `replica` acknowledged something within two heartbeats (as the primary knows:
    /// a view counts every backup heard as it starts), at the period the last one went out with.
    fn heard_lately(&self, replica: ReplicaId) -> bool {
        self.acked_at
            .get(usize::from(replica))
            .copied()
            .flatten()
            .is_some_and(|at| self.now < at + self.heartbeat_period * 2)
    }

    /// Asks `target` to take the group over: to start the view change to the next view it
    /// leads (a PrimaryTransfer).
    fn transfer_to(&mut self, target: ReplicaId) {
        let mut target_view = self.view + 1;
        while self.primary_of(target_view) != target {
            target_view += 1;
        }
        let message = Message::PrimaryTransfer {
            view: self.view,
            target_view,
            target,
            replica: self.config.replica,
        };
        self.send(target, message);
    }

    /// As the Normal primary of a group with peers, about to stop (a graceful shutdown) or
    /// declining to lead: hands the group to the backup that acknowledged the most of its log
    /// among those heard lately (the lowest id on a tie), asking it, as the preferred-primary
    /// hand-over does, to start the view change to the next view it leads. Its peers then need
    /// not wait out the heartbeat timeout before electing a primary. Asked again in the same
    /// view (the backup declined, or has not acted yet), it asks the next such backup it has
    /// not asked, then starts over. Returns the replica asked; `None` when this replica does
    /// not lead or heard no backup (nothing it could hand over).
    pub fn step_down(&mut self) -> Option<ReplicaId> {
        if self.status != Status::Normal || !self.is_primary() || self.is_solo() {
            return None;
        }
        let mut candidates: Vec<ReplicaId> = self
            .others()
            .into_iter()
            .filter(|replica| self.heard_lately(*replica))
            .collect();
        candidates.sort_by_key(|replica| {
            let acked = self.durable_acks.get(usize::from(*replica)).copied();
            (std::cmp::Reverse(acked.unwrap_or(0)), *replica)
        });
        let (view, asked) = &mut self.stepped_down_to;
        if *view != self.view {
            *view = self.view;
            asked.clear();
        }
        let target = match candidates.iter().find(|replica| !asked.contains(replica)) {
            Some(&target) => target,
            None => {
                asked.clear();
                *candidates.first()?
            }
        };
        asked.push(target);
        self.transfer_to(target);
        Some(target)
    }

    /// The primary of our view hands the group to us: start the view change to `target_view`
    /// (ours), as if we had suspected it.
    fn on_primary_transfer(&mut self, from: ReplicaId, view: u32, target_view: u32) {
        if self.muted
            || self.declines_to_lead
            || view != self.view
            || self.status != Status::Normal
            || from != self.primary_of(view)
            || target_view <= view
            || self.primary_of(target_view) != self.config.replica
        {
            return;
        }
        self.start_view_change(target_view);
    }

    fn on_prepare(&mut self, from: ReplicaId, view: u32, commit: u64, entry: Entry) {
        if self.body_fetch.is_some() && view <= self.view {
            // A DoViewChange sender serving a body of the canonical log we install.
            return self.on_fetched_body(entry);
        }
        if !self.accept_from_primary(from, view) {
            return;
        }
        if !entry.is_valid() {
            return;
        }
        let op = entry.op;
        if op <= self.journal.op() {
            // Duplicate (or repair overlap): re-acknowledge if durable.
            let same = self.journal.get(op).map(|ours| ours.checksum) == Some(entry.checksum);
            if same && op <= self.journal.durable_through() && op > self.commit_max {
                self.send_prepare_ok(op);
            }
        } else if self.journal.awaiting() {
            // Only the body the installed header names joins the log; the primary's next op
            // waits above the awaited ones.
            if op == self.journal.head_op() + 1 {
                self.journal.push_awaited(entry);
            } else if op <= self.journal.head_op() && self.journal.fill(entry) {
                self.write_filled();
                if !self.journal.awaiting() {
                    self.complete_backup_log();
                }
            }
            self.request_prepare();
        } else if op == self.journal.op() + 1 {
            self.append_and_write(entry);
        } else {
            self.request_prepare();
        }
        self.learn_commit(commit);
    }

    /// Writes the awaited entries whose bodies arrived, in op order from the first awaited op.
    fn write_filled(&mut self) {
        for entry in self.journal.take_filled() {
            let op = entry.op;
            self.actions.push_back(Action::WritePrepare { op, entry });
        }
    }

    /// A backup in normal status holds every body of its view's log (every write for it
    /// emitted): the log is now the view's, so the view state names it (persisted after those
    /// writes) and the backup acknowledges its durable prefix. Until then it acknowledges
    /// nothing: a log view names a log its journal holds whole, as a restart finds it.
    fn complete_backup_log(&mut self) {
        debug_assert!(!self.journal.awaiting());
        if self.status == Status::Normal && !self.is_primary() && self.log_view != self.view {
            self.log_view = self.view;
            self.acknowledge_durable(self.journal.base().op);
            self.maybe_unmute();
        }
    }

    fn on_commit(&mut self, from: ReplicaId, view: u32, commit: u64, checkpoint_safe: u64) {
        if self.accept_from_primary(from, view) {
            self.learn_commit(commit);
            // A fact about every replica's journal, true for good once true (see the field).
            self.checkpoint_safe = self.checkpoint_safe.max(checkpoint_safe);
            // Answer the heartbeat with our durable head: an idle primary learns that it
            // still leads a quorum (and how far our journal reaches).
            if self.status == Status::Normal {
                self.send_prepare_ok(self.journal.durable_through());
            }
        }
    }

    /// True when a message from the primary of `view` should be processed; handles lagging.
    fn accept_from_primary(&mut self, from: ReplicaId, view: u32) -> bool {
        if view < self.view || from != self.primary_of(view) {
            return false;
        }
        // A primary of our view or a later one is alive: no pre-vote of ours, or granted by us.
        self.heard_from_primary(view);
        if view > self.view || self.status != Status::Normal {
            let message = Message::RequestStartView {
                view,
                replica: self.config.replica,
            };
            self.send(from, message);
            return false;
        }
        true
    }

    fn learn_commit(&mut self, commit: u64) {
        if self.muted {
            self.announced_commit = self.announced_commit.max(commit);
        }
        if commit > self.journal.op() || self.journal.awaiting() {
            self.request_prepare();
        }
        let commit = commit.min(self.journal.op());
        self.commit_max = self.commit_max.max(commit);
        // Even when `commit` is no news: installing a log checkpointed above our commit raised
        // `commit_max` to its base already, and an idle group sends no higher commit.
        self.commit_advance();
        self.maybe_unmute();
    }

    /// A restored replica votes again once it is a backup in normal status whose journal holds
    /// its view's log durably through every commit the primary announced to it: every op
    /// committed before then is in its journal, so a view-change quorum counting it holds them.
    fn maybe_unmute(&mut self) {
        if self.muted
            && self.status == Status::Normal
            && !self.is_primary()
            && self.log_view == self.view
            && !self.journal.awaiting()
            && self.journal.durable_through() >= self.announced_commit
        {
            self.muted = false;
        }
    }

    /// Asks the primary for the prepares after our log's head, unless a request covering that
    /// op is still outstanding (younger than `resend_ticks`). Every prepare a lagging backup
    /// receives would otherwise ask for the next `REPAIR_PREPARES_MAX` again, multiplying the
    /// repair traffic until the links' queues drop it; one request per batch streams a long
    /// catch-up at a batch per round trip.
    fn request_prepare(&mut self) {
        let op = self.journal.op() + 1;
        if let Some((asked, at)) = self.repair_asked
            && (asked..asked + REPAIR_PREPARES_MAX).contains(&op)
            && self.now < at + self.config.resend_ticks
        {
            return;
        }
        self.repair_asked = Some((op, self.now));
        let primary = self.primary_of(self.view);
        let message = Message::RequestPrepare {
            view: self.view,
            op,
            replica: self.config.replica,
        };
        self.send(primary, message);
    }

    fn on_request_prepare(&mut self, view: u32, op: u64, replica: ReplicaId) {
        if view != self.view {
            return;
        }
        if !self.is_primary() {
            // The new primary of our view fetches the bodies our DoViewChange named.
            if replica == self.primary_of(view) {
                self.serve_bodies(op, replica);
            }
            return;
        }
        if op <= self.journal.base().op {
            // Checkpointed here: send the whole log; the requester installs it if it holds our
            // checkpoint entry, and otherwise needs state transfer.
            self.send_start_view(replica);
            return;
        }
        let last = self.journal.op().min(op + REPAIR_PREPARES_MAX - 1);
        for repair in op..=last {
            self.send_entry(replica, self.view, repair);
        }
    }

    /// Sends the held entries `op..` (a repair batch) to the new primary that asked: as
    /// prepares of our log view's log, which is where they come from.
    fn serve_bodies(&mut self, op: u64, to: ReplicaId) {
        let first = op.max(self.journal.base().op + 1);
        let last = self.journal.op().min(op + REPAIR_PREPARES_MAX - 1);
        for served in first..=last {
            self.send_entry(to, self.log_view, served);
        }
    }

    fn on_prepare_ok(&mut self, view: u32, op: u64, checksum: u64, replica: ReplicaId) {
        if view != self.view || !self.is_primary() {
            return;
        }
        // The ack vouches for the sender's entry at `op`: for another entry it is about
        // another log (a deleted partition incarnation's, under the same group id), and past
        // this log about none of this view's. Below the checkpoint the entry is forgotten and
        // the ack can only move the replica's durable reach up to ops committed already.
        match self.checksum_at(op) {
            Some(ours) if ours != checksum => return,
            None if op > self.journal.head_op() => return,
            _ => {}
        }
        if !self.heard_lately(replica)
            && let Some(since) = self.heard_since.get_mut(usize::from(replica))
        {
            *since = Some(self.now);
        }
        if let Some(at) = self.acked_at.get_mut(usize::from(replica)) {
            *at = Some(self.now);
        }
        if let Some(acked) = self.durable_acks.get_mut(usize::from(replica)) {
            *acked = (*acked).max(op);
        }
        self.advance_checkpoint_safe();
        // The ack vouches for the sender's whole prefix through `op` in this view's log, so it
        // counts for every uncommitted op up to it: a backup that checkpointed ops this
        // primary does not know committed (its DoViewChange quorum named a lower commit)
        // acknowledges only above its checkpoint, and those ops would otherwise wait forever.
        let mut counted = false;
        for (_, oks) in self.prepare_oks.range_mut(..=op) {
            oks.insert(replica);
            counted = true;
        }
        if !counted {
            return;
        }
        let quorum = self.config.quorum();
        let me = self.config.replica;
        // Commit in op order: the front of the pipeline with a quorum including ourselves.
        while let Some((front, oks)) = self.prepare_oks.first_key_value() {
            if oks.len() < quorum || !oks.contains(&me) {
                break;
            }
            assert_eq!(*front, self.commit_max + 1);
            self.commit_max = *front;
            self.prepare_oks.pop_first();
        }
        self.advance_checkpoint_safe();
        self.commit_advance();
    }

    /// Primary: raises `checkpoint_safe` to the highest op that is committed and that every
    /// replica acknowledged holding durably in this view.
    ///
    /// Why that op `s` stays safe for good: `s <= commit_max` is committed, so its entry (and
    /// every one before it) is in the log of every later view, and no replica ever truncates
    /// it (an installed log differs from a holder's journal only above the committed ops).
    /// Every replica acknowledged this view's log through `s`, and this view's log holds the
    /// committed entries, so every replica's journal holds them durably (a crash keeps them),
    /// unless it checkpointed past them. A log based on any checkpoint at or below `s` is
    /// therefore installable everywhere, without state transfer. That some replica has not
    /// applied `s` yet does not matter: it applies it from its own journal.
    fn advance_checkpoint_safe(&mut self) {
        if self.is_solo() || !self.is_primary() {
            return;
        }
        let me = usize::from(self.config.replica);
        let held_everywhere = (0..self.durable_acks.len())
            .map(|replica| {
                if replica == me {
                    self.journal.durable_through()
                } else {
                    self.durable_acks[replica]
                }
            })
            .min()
            .expect("a replica");
        self.checkpoint_safe = self
            .checkpoint_safe
            .max(held_everywhere.min(self.commit_max));
    }

    /// Applies committed ops in order, one outstanding `Commit` at a time.
    fn commit_advance(&mut self) {
        while self.commit_in_flight.is_none() && self.commit_min < self.commit_max {
            let op = self.commit_min + 1;
            let entry = self.journal.get(op).expect("committed op in log").clone();
            if entry.operation == OPERATION_NOMINATE_LIMITS {
                // Executed by the replica, identically everywhere; no client waits for it.
                if let Some(clients_max) = nominated_clients_max(&entry.body) {
                    self.clients.nominate(clients_max);
                }
                self.commit_min = op;
                continue;
            }
            if entry.operation == OPERATION_REGISTER {
                let registration = self.clients.register(entry.client, op);
                self.commit_min = op;
                if let Registration::New { .. } = registration {
                    self.actions.push_back(Action::Registered {
                        op,
                        client: entry.client,
                        body: entry.body.clone(),
                    });
                }
                if self.is_primary() {
                    match registration.session() {
                        Some(session) => self.actions.push_back(Action::Reply {
                            client: entry.client,
                            request: entry.request,
                            op: session,
                            reply: Bytes::copy_from_slice(&session.to_le_bytes()),
                        }),
                        None => self.refuse(entry.client, entry.request, Refusal::ClientsTableFull),
                    }
                }
                continue;
            }
            let session = self.clients.get(entry.client);
            let fresh = session.is_some_and(|s| entry.request > s.request);
            if !fresh {
                // Unregistered (e.g. retired while the request was in the pipeline) or stale:
                // skipped identically on every replica.
                self.commit_min = op;
                if session.is_none() && self.is_primary() {
                    self.refuse(entry.client, entry.request, Refusal::SessionUnknown);
                }
                continue;
            }
            self.commit_in_flight = Some(op);
            self.actions.push_back(Action::Commit {
                op,
                client: entry.client,
                request: entry.request,
                operation: entry.operation,
                body: entry.body,
            });
        }
    }
}

// ----- private: view change -----
impl Replica {
    fn start_view_change(&mut self, view: u32) {
        assert!(view > self.view || self.status != Status::ViewChange);
        self.pre_vote = None;
        self.repair_asked = None;
        self.body_fetch = None;
        self.cannot_lead = false;
        self.view = view;
        self.status = Status::ViewChange;
        self.view_change_started_at = self.now;
        self.resent_at = self.now;
        self.prepare_oks.clear();
        self.durable_acks.fill(0);
        self.start_view_change_from.clear();
        self.do_view_change_from.clear();
        self.do_view_change_sent = false;
        self.start_view_change_from.insert(self.config.replica);
        self.broadcast_start_view_change();
        self.maybe_send_do_view_change();
    }

    /// Asks the others whether they too lost the primary before moving to `view` (again every
    /// `resend_ticks` while the round lasts). A quorum of grants, this replica's own included,
    /// starts the view change; until then nothing changes, not even the view.
    fn ask_pre_vote(&mut self, view: u32) {
        debug_assert_eq!(view, self.view + 1);
        let now = self.now;
        match &mut self.pre_vote {
            Some(round) if round.view == view => {
                if now < round.asked_at + self.config.resend_ticks {
                    return;
                }
                round.asked_at = now;
            }
            _ => {
                self.pre_vote = Some(PreVoteRound {
                    view,
                    asked_at: now,
                    granted_at: BTreeMap::new(),
                });
            }
        }
        let me = self.config.replica;
        for to in self.others() {
            // Sent at once, not held for a durable view state: a pre-vote votes in nothing, and
            // the view it names is one its sender has not entered.
            let message = Message::PreVote { view, replica: me };
            self.actions.push_back(Action::Send { to, message });
        }
    }

    /// A peer asks whether we lost the primary too. We grant unless we are the primary serving
    /// our view or heard from the primary of our view (or a later one) within the view-change
    /// timeout: a replica that still hears its primary never helps replace it. A primary grants
    /// only a pre-vote past its view's next one while no quorum is in touch with it: the asker
    /// was in a later view, so this primary's view was superseded (it was formatted in its
    /// group's creation view after its peers moved on, say), its backups drop its frames, and
    /// refused, a group down to it and one backup could never leave the dead primary's view.
    fn on_pre_vote(&mut self, view: u32, replica: ReplicaId) {
        if self.muted {
            return;
        }
        let superseded_primary =
            self.is_primary() && view > self.view.saturating_add(1) && !self.leads_quorum();
        if self.is_primary() && !superseded_primary && self.quiet() {
            // The askers reach us: a heartbeat to them alone lets them hear us and answer, and
            // we lead again; one to every backup would keep a backup that does not reach us
            // hearing us, so refusing the asker's pre-vote. Only once they are enough for a
            // quorum with us (`quiet_askers`).
            let (now, fresh_ticks) = (self.now, self.config.view_change_timeout_ticks);
            self.quiet_askers.insert(replica, now);
            self.quiet_askers.retain(|_, at| now < *at + fresh_ticks);
            if self.quiet_askers.len() + 1 < self.config.quorum() {
                return;
            }
            let askers: Vec<ReplicaId> = self.quiet_askers.keys().copied().collect();
            for asker in askers {
                let heartbeat = Message::Commit {
                    view: self.view,
                    commit: self.commit_max,
                    checkpoint_safe: self.checkpoint_safe,
                };
                self.send(asker, heartbeat);
            }
            return;
        }
        if (self.is_primary() && !superseded_primary) || self.hears_primary() {
            return;
        }
        let message = Message::PreVoteGranted {
            view,
            replica: self.config.replica,
        };
        self.actions.push_back(Action::Send {
            to: replica,
            message,
        });
    }

    /// Whether the primary of our view or of a later one was heard within the view-change
    /// timeout (a replica changing views has not heard the primary of the view it moves to).
    fn hears_primary(&self) -> bool {
        !self.suspects_primary()
            && self.heard_primary_view >= self.view
            && self.now < self.heard_from_primary_at + self.config.view_change_timeout_ticks
    }

    fn heard_from_primary(&mut self, view: u32) {
        debug_assert!(view >= self.view);
        self.heard_from_primary_at = self.now;
        self.heard_primary_view = view;
        self.primary_suspected_in = None;
        self.pre_vote = None;
    }

    fn on_pre_vote_granted(&mut self, view: u32, replica: ReplicaId) {
        let quorum = self.config.quorum();
        let (now, fresh_ticks) = (self.now, self.config.view_change_timeout_ticks);
        let Some(round) = self.pre_vote.as_mut().filter(|round| round.view == view) else {
            return;
        };
        round.granted_at.insert(replica, now);
        round.granted_at.retain(|_, at| now < *at + fresh_ticks);
        if round.granted_at.len() + 1 >= quorum {
            self.start_view_change(view);
        }
    }

    fn broadcast_start_view_change(&mut self) {
        for to in self.others() {
            self.send(
                to,
                Message::StartViewChange {
                    view: self.view,
                    replica: self.config.replica,
                },
            );
        }
    }

    fn on_start_view_change(&mut self, view: u32, replica: ReplicaId) {
        if self.muted {
            return;
        }
        if view < self.view || (view == self.view && self.status == Status::Normal) {
            return;
        }
        if view > self.view || self.status == Status::Recovering {
            self.start_view_change(view);
        }
        self.start_view_change_from.insert(replica);
        self.maybe_send_do_view_change();
    }

    fn maybe_send_do_view_change(&mut self) {
        if self.do_view_change_sent || self.start_view_change_from.len() < self.config.quorum() {
            return;
        }
        self.do_view_change_sent = true;
        let me = self.config.replica;
        let log = self.log();
        let primary = self.primary_of(self.view);
        if primary == me {
            self.on_do_view_change(self.view, me, self.log_view, self.commit_max, log);
        } else {
            let message = Message::DoViewChange {
                view: self.view,
                replica: me,
                log_view: self.log_view,
                commit: self.commit_max,
                log,
            };
            self.send(primary, message);
        }
    }

    fn on_do_view_change(
        &mut self,
        view: u32,
        replica: ReplicaId,
        log_view: u32,
        commit: u64,
        log: Log,
    ) {
        if self.muted || view < self.view || self.primary_of(view) != self.config.replica {
            return;
        }
        if view == self.view && self.status == Status::Recovering {
            return; // Left this view for lack of state transfer; only a later one is joined.
        }
        if view == self.view && self.status == Status::Normal {
            // Already started this view: the sender missed StartView.
            self.send_start_view(replica);
            return;
        }
        if view > self.view {
            self.start_view_change(view);
        }
        if let Some(fetch) = self.body_fetch.as_mut() {
            // The quorum has decided the log; a late sender is one more holder of its bodies.
            fetch.logs.insert(replica, log);
            return;
        }
        self.do_view_change_from
            .insert(replica, (log_view, commit, log));
        if self.do_view_change_from.len() < self.config.quorum() {
            return;
        }
        let commit = self
            .do_view_change_from
            .values()
            .map(|(_, commit, _)| *commit)
            .max()
            .unwrap();
        // Logs of the same log view and length hold the same entries (each is that view's log
        // up to its op); of those, the one checkpointed lowest is the likeliest this replica
        // can install without state transfer.
        let (_, _, best) = self
            .do_view_change_from
            .values()
            .max_by_key(|(log_view, _, log)| (*log_view, log.op(), Reverse(log.base)))
            .unwrap()
            .clone();
        let logs = std::mem::take(&mut self.do_view_change_from)
            .into_iter()
            .map(|(replica, (_, _, log))| (replica, log))
            .collect();
        if !self.install_log(best) {
            // Another replica, one that holds the log from our commit on, may lead the next.
            self.give_up_leading();
            return;
        }
        if self.journal.awaiting() {
            // Start the view once every body of its log is held (and written): the sender of
            // the chosen log holds them all, and the others that share a header hold that one.
            self.body_fetch = Some(BodyFetch {
                commit,
                logs,
                retired: BTreeMap::new(),
            });
            self.request_bodies();
            return;
        }
        self.start_view_as_primary(commit);
    }

    /// New primary: asks the DoViewChange senders for the bodies of the canonical log it
    /// lacks, a repair batch per request, each from a sender whose log holds that op's header
    /// (in turn, so the batches spread over them), at most `FETCH_REQUESTS_MAX` at once.
    fn request_bodies(&mut self) {
        let Some(fetch) = self.body_fetch.as_ref() else {
            return;
        };
        if self.cannot_lead {
            return;
        }
        let me = self.config.replica;
        let mut requests = Vec::new();
        let mut next = self.journal.unfilled_from(self.journal.op() + 1);
        let mut turn = 0usize;
        while let Some(op) = next {
            if requests.len() as u64 >= FETCH_REQUESTS_MAX {
                break;
            }
            let holders = self.body_holders(fetch, op);
            if holders.is_empty() {
                // Every holder answered that the body was retired (`on_body_retired`).
                break;
            }
            requests.push((holders[turn % holders.len()], op));
            turn += 1;
            next = self.journal.unfilled_from(op + REPAIR_PREPARES_MAX);
        }
        for (to, op) in requests {
            let message = Message::RequestPrepare {
                view: self.view,
                op,
                replica: me,
            };
            self.send(to, message);
        }
    }

    /// The peers to ask for the awaited body of `op`: the DoViewChange senders whose logs name
    /// its header (any other replica when none does), less those that answered it was retired.
    fn body_holders(&self, fetch: &BodyFetch, op: u64) -> Vec<ReplicaId> {
        let me = self.config.replica;
        let header = self.journal.header_at(op).expect("an awaited op");
        let retired = fetch.retired.get(&op);
        let named: Vec<ReplicaId> = fetch
            .logs
            .iter()
            .filter(|(replica, log)| **replica != me && log.header_at(op) == Some(&header))
            .map(|(replica, _)| *replica)
            .collect();
        let candidates = if named.is_empty() {
            self.others()
        } else {
            named
        };
        candidates
            .into_iter()
            .filter(|replica| retired.is_none_or(|retired| !retired.contains(replica)))
            .collect()
    }

    /// New primary: `replica` cannot serve the awaited body of `op`, a retirement deleted it
    /// there. Another holder is asked; when none is left, this replica cannot complete the
    /// view's log (a body is taken only when it rebuilds its header's checksum) and gives the
    /// view up; a replica that holds the log (the op applied, its body no longer needed) can
    /// lead the next.
    fn on_body_retired(&mut self, view: u32, op: u64, replica: ReplicaId) {
        if view != self.view || self.journal.unfilled_from(op) != Some(op) {
            return;
        }
        let Some(mut fetch) = self.body_fetch.take() else {
            return;
        };
        fetch.retired.entry(op).or_default().insert(replica);
        let served = !self.body_holders(&fetch, op).is_empty();
        self.body_fetch = Some(fetch);
        if served {
            self.request_bodies();
        } else {
            self.give_up_leading();
        }
    }

    /// This replica cannot start the view it is to lead (see `cannot_lead`): asks its peers
    /// to move on to the next view now, through the pre-vote a timed-out view change sends.
    fn give_up_leading(&mut self) {
        self.cannot_lead = true;
        if !self.hears_primary() {
            self.ask_pre_vote(self.view + 1);
        }
    }

    /// New primary: a body for the canonical log. Taken only when it matches an awaited
    /// header; once every body is held, the view starts.
    fn on_fetched_body(&mut self, entry: Entry) {
        if !self.journal.fill(entry) {
            return;
        }
        // Progress: the view change is not stalled while bodies arrive.
        self.view_change_started_at = self.now;
        self.write_filled();
        if !self.journal.awaiting() {
            let fetch = self.body_fetch.take().expect("fetching");
            self.start_view_as_primary(fetch.commit);
        }
    }

    /// New primary holding every body of the canonical log (its writes emitted): starts the
    /// view with `commit`, the highest commit of its DoViewChange quorum.
    fn start_view_as_primary(&mut self, commit: u64) {
        debug_assert!(!self.journal.awaiting());
        self.status = Status::Normal;
        self.primary_since = self.now;
        self.view_start_op = self.journal.op();
        self.quorum_led_at = Some(self.now);
        self.transfer_sent_at = None;
        self.log_view = self.view;
        self.prepare_oks.clear();
        self.durable_acks.fill(0);
        // The quorum of DoViewChanges that elected us was just heard from.
        self.acked_at.fill(Some(self.now));
        // Counted as heard again from now: a replica back within two heartbeats of the view
        // start is not seen coming back, so its settle time runs from here.
        self.heard_since.fill(Some(self.now));
        self.commit_max = self.commit_max.max(commit.min(self.journal.op()));
        for op in self.commit_max + 1..=self.journal.op() {
            self.prepare_oks.insert(op, BTreeSet::new());
        }
        for to in self.others() {
            self.send_start_view(to);
        }
        self.next_heartbeat_at = self.now + self.config.heartbeat_ticks;
        self.heartbeat_period = self.config.heartbeat_ticks;
        self.resent_at = self.now;
        self.acknowledge_durable(self.commit_max);
        self.commit_advance();
    }

    fn send_start_view(&mut self, to: ReplicaId) {
        let message = Message::StartView {
            view: self.view,
            commit: self.commit_max,
            log: self.log(),
        };
        self.send(to, message);
    }

    /// This replica's log: the headers of the entries above its checkpoint whose bodies it
    /// holds (never an awaited op: a DoViewChange names only bodies its sender can serve, and
    /// an awaited op is not part of the log its log view names).
    fn log(&self) -> Log {
        let base = self.journal.base();
        Log::of_entries(base.op, base.checksum, self.journal.entries())
    }

    fn on_start_view(&mut self, view: u32, commit: u64, log: Log) {
        if view < self.view || self.primary_of(view) == self.config.replica {
            return;
        }
        // A log checkpointed above what we applied is ours to follow only while we hold its
        // checkpoint entry (and so the ops below it); otherwise `install_log` says we need
        // state transfer, even when our log (awaited bodies included) is not shorter.
        let follows_ours = log.base <= self.commit_min
            || self.journal.checksum_at(log.base) == Some(log.base_checksum);
        if view == self.view
            && self.status == Status::Normal
            && log.op() <= self.journal.head_op()
            && follows_ours
        {
            // Already in this view, and our log (a prefix of the primary's) is not shorter.
            return;
        }
        self.body_fetch = None;
        if !self.install_log(log) {
            self.recover_for_state_transfer();
            return;
        }
        self.view = view;
        self.status = Status::Normal;
        self.view_start_op = self.journal.op();
        self.heard_from_primary(view);
        self.repair_asked = None;
        self.prepare_oks.clear();
        // The log view stays the previous one until every body of this view's log is held (see
        // `complete_backup_log`); it never goes down.
        if !self.journal.awaiting() {
            self.log_view = view;
        }
        self.learn_commit(commit);
        self.acknowledge_durable(self.journal.base().op);
    }

    /// Replaces the log above the checkpoint, never below what this replica already applied.
    /// Returns false (log unchanged, `state_transfer` set) when `log` starts above our commit
    /// and we do not hold the sender's checkpoint entry, so our own entries up to it cannot be
    /// vouched for: catching up needs state transfer.
    fn install_log(&mut self, log: Log) -> bool {
        if log.base > self.commit_min {
            // Ops commit_min+1..=log.base are committed (the sender checkpointed them). Our
            // entries there are those ops exactly when we hold the same entry at log.base: a
            // log that holds (op, view) holds the prefix the primary of that view had.
            if self.journal.checksum_at(log.base) != Some(log.base_checksum) {
                self.state_transfer = Some(StateTransferNeeded {
                    commit_min: self.commit_min,
                    checkpoint: log.base,
                });
                return false;
            }
            self.commit_max = self.commit_max.max(log.base);
        }
        assert!(
            log.op() >= self.commit_min,
            "a canonical log lost committed ops"
        );
        self.state_transfer = None;
        if let Some(first_dropped) = self.journal.replace(log.base, log.headers) {
            assert!(
                first_dropped > self.commit_min,
                "a canonical log rewrote committed ops"
            );
            self.actions.push_back(Action::TruncateJournal {
                after_op: first_dropped - 1,
            });
        }
        // Bodies that arrived for headers this log names again.
        self.write_filled();
        if self.commit_max > self.journal.op() {
            self.commit_max = self.journal.op().max(self.commit_min);
        }
        true
    }
}

// ----- private: rejoining -----
impl Replica {
    /// Asks for the `StartView` of our view (its primary answers; any later view's primary
    /// answers the Prepare or Commit we then hear from it the same way; the primary of a lower
    /// view moves the group past ours).
    fn request_start_view(&mut self) {
        self.resent_at = self.now;
        // To every peer: the group may lead a lower view than ours, whose primary is not the
        // one our view names (see `catch_up_to_view`).
        for to in self.others() {
            let message = Message::RequestStartView {
                view: self.view,
                replica: self.config.replica,
            };
            self.send(to, message);
        }
    }

    /// A replica asks to rejoin in `view`, above ours: it entered a view change the others
    /// never joined (its votes were lost, then it restarted) and can never come back to a
    /// lower view, so the group moves past it, keeping this primary: a view change to the next
    /// view this replica leads, which the asking replica joins.
    fn catch_up_to_view(&mut self, view: u32) {
        let mut next = view + 1;
        while self.primary_of(next) != self.config.replica {
            next += 1;
        }
        self.start_view_change(next);
    }

    /// A log could not be installed for lack of state transfer: leave the protocol (no acks)
    /// and wait for a `StartView` we can install. No timeout here: a replica that cannot
    /// catch up must not keep replacing primaries that serve the others.
    fn recover_for_state_transfer(&mut self) {
        // Also when rejoining after a restart: the group is alive, we just cannot follow it.
        self.rejoin_times_out = false;
        if self.status == Status::Recovering {
            return;
        }
        self.status = Status::Recovering;
        self.rejoin_since = None;
        self.prepare_oks.clear();
        self.request_start_view();
    }
}
