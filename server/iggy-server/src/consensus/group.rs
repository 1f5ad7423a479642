//! The I/O shell around one consensus group: an actor task owning a sans-IO `iggy_vsr::Replica`,
//! its journal and its state machine. Requests arrive by message, so the group needs no lock:
//! everything it owns is touched by its own task only.
//!
//! Requests that arrive together are prepared together and made durable with one journal
//! sync (group commit) before any of them is acknowledged.
//!
//! A group with a directory keeps its view state there (`consensus/view_file.rs`), written only
//! when the replica's view changes: never in a group of one, whose view stays 0.
//!
//! Storage is fail-stop: the journal, the state machine's files and the checkpoint slots stop
//! the process when a write or fsync fails (`iggy_storage::fail_stop`), so a group never
//! acknowledges, or goes on accepting, after its disk failed.

use crate::consensus::figures::{GroupFigures, GroupKind, checkpoint_taken};
use crate::consensus::group_plane::{GroupPlane, SessionFrame, Wake};
use crate::consensus::link_liveness::PeerStatus;
use crate::consensus::plane::Peers;
use crate::consensus::replica_bus::Inbound;
use crate::consensus::transfer::{
    Accepted, ChunkVerdict, Fetch, METADATA_CHECKPOINT_ARTIFACT, Offer, Offered, Transfer,
};
use bytes::Bytes;
use futures_channel::{mpsc, oneshot};
use futures_util::StreamExt;
use iggy_metadata::retirement::RetirementReport;
use iggy_vsr::group::{CheckpointPolicy, GroupCore, JournalBound, Pending, Step};
pub use iggy_vsr::group::{Durability, Outcome};
use iggy_vsr::{Config, Entry, ReadBack, Refusal, ViewState};

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

impl JournalEntry {
    pub fn entry(&self) -> &Entry {
        match self {
            JournalEntry::Whole(entry) | JournalEntry::Stowed(entry) => entry,
        }
    }
}

/// Where a group's prepares are journaled. A failed write or fsync stops the process.
pub trait Journal {
    /// Appends `entry` (ops are appended in order, after any truncation), with `stand_in` in
    /// place of its body when the state machine stowed the body (see [`StateMachine::stow`]).
    /// An error is an entry the journal cannot hold.
    fn append(
        &mut self,
        entry: &Entry,
        stand_in: Option<&Bytes>,
    ) -> impl Future<Output = std::io::Result<()>>;
    /// Makes every appended entry durable.
    fn sync(&mut self) -> impl Future<Output = ()>;
    /// Drops every entry above `op`.
    fn truncate_after(&mut self, op: u64) -> impl Future<Output = ()>;
    /// Drops the entries a durable checkpoint at `op` covers (all of them in a group of one; a
    /// larger group may hold ops above it, which the journal keeps).
    fn reset_after_checkpoint(&mut self, op: u64) -> impl Future<Output = ()>;
    /// Empties the journal, to continue after the checkpoint at `op` whose entry has
    /// `checksum` (installed by state transfer: none of the journal's records are needed).
    fn reset_to(&mut self, op: u64, checksum: u64) -> impl Future<Output = ()>;
    /// Bytes the journal holds.
    fn len_bytes(&self) -> u64;
    /// The record of `op` read back (see [`crate::consensus::wal::FileJournal::read`]).
    fn read(&self, op: u64) -> impl Future<Output = Option<JournalEntry>>;
    /// Cuts what follows the last entry, for a graceful stop (see
    /// [`crate::consensus::wal::FileJournal::trim`]); later appends go on after it.
    fn trim(&mut self) -> impl Future<Output = ()> {
        async {}
    }
}

/// The deterministic state a group replicates.
pub trait StateMachine {
    /// A read served by the group's task, in order with the writes.
    type Read;
    /// Applies the committed `op`; the returned bytes are the reply, cached for replays.
    fn apply(
        &mut self,
        op: u64,
        client: u128,
        operation: u8,
        body: Bytes,
    ) -> impl Future<Output = Bytes>;
    /// Whether the op [`Self::apply`] just applied left effects outside the replicated state
    /// running (the metadata machine's partition opens and deletes, which its own task carries
    /// out in op order): the group keeps serving its peers meanwhile, and answers that op and
    /// the later ones once [`Self::effects_done`] reports them done.
    fn effects_running(&mut self) -> bool {
        false
    }
    /// Resolves with the op through which every op's running effects are done, each time that
    /// moves; never for a machine whose effects are done within [`Self::apply`].
    fn effects_done(&mut self) -> impl Future<Output = u64> {
        std::future::pending()
    }
    /// A register committed at `op` (the session number).
    fn registered(&mut self, op: u64, client: u128, body: &Bytes);
    /// Whether an op of `operation` must be fsynced before it is acknowledged, whatever the
    /// group's own policy (a topic that asks for persisted messages or offsets).
    fn persisted(&self, _operation: u8) -> bool {
        false
    }
    /// The clients whose sessions the op just applied ended (an ordered retirement): their
    /// client-table slots free up with that op. Decided from the op alone.
    fn take_retired(&mut self) -> Vec<u128> {
        Vec::new()
    }
    /// Makes the effects of every applied op durable and returns the state a checkpoint keeps.
    fn checkpoint(&mut self) -> impl Future<Output = std::io::Result<Vec<u8>>> {
        async { Ok(Vec::new()) }
    }
    /// Every journaled op has been replayed after a start. An error refuses the group: what
    /// the state machine found on disk is not what the journal accounts for.
    fn replayed(&mut self) -> impl Future<Output = Result<(), String>> {
        async { Ok(()) }
    }
    /// Serves a read.
    fn read(&mut self, read: Self::Read) -> impl Future<Output = ()>;

    /// `(operation, byte offset)` of a u64 in client requests' bodies that the primary stamps
    /// with [`Self::stamp_clock`] as it prepares them (a partition's batch `base_timestamp`), so
    /// the stamps follow the op order; `None` for a machine that stamps nothing.
    const PREPARE_STAMP: Option<(u8, usize)> = None;

    /// The time a prepare is stamped with now (see [`Self::PREPARE_STAMP`]).
    fn stamp_clock(&self) -> u64 {
        0
    }

    /// Whether the primary judges client requests again as it prepares them ([`Self::admits`]);
    /// a machine that does not (a partition's) has its writes go straight to the core.
    const JUDGES_ADMISSION: bool = false;

    /// Whether a committed op of `operation` may change what [`Self::admits`] says of later
    /// requests (a revocation, for the metadata machine): the primary prepares no client
    /// request behind such an op until it applied it, so each is judged by the state it left.
    fn changes_admission(&self, _operation: u8) -> bool {
        false
    }

    /// Judges a client's request as the primary is about to prepare it, by the state every op
    /// before it left (none still unapplied changes admission; `committed` is the highest op
    /// known committed, the ops above the applied ones up to it included): `Err` with the reply
    /// it gets instead (nothing is prepared). The node judged it once on arrival; the state may
    /// have moved since.
    fn admits(
        &self,
        _client: u128,
        _operation: u8,
        _body: &[u8],
        _committed: u64,
    ) -> Result<(), Bytes> {
        Ok(())
    }

    /// The body of the Logout op that ends `client`'s session `session`, which a backup
    /// forwarded to this primary; `None` when that session is not live here (it ended already,
    /// so there is nothing to commit). Only a machine with sessions has any.
    fn forwarded_logout(&self, _client: u128, _session: u64) -> Option<Bytes> {
        None
    }

    /// Peer replica `from` reports these (client, session) pairs bound to its connections:
    /// they are active although no connection of this node holds them.
    fn sessions_held_by_peer(&mut self, _from: u8, _sessions: &[(u128, u64)]) {}

    /// A peer replica's report (or part of it) of the ended sessions its partition copies no
    /// longer hold, received by this metadata primary.
    fn retirement_reported(&mut self, _report: RetirementReport) {}

    /// Called before `entry` is journaled. A machine that keeps the body in its own files
    /// anyway (a partition's log) writes it there now and returns a short stand-in for the
    /// journal record, so the bytes are written once; `None` journals the body itself. A
    /// stowed body must be in place before the op commits, be made durable by
    /// [`Self::sync_stowed`], and be dropped again by [`Self::unstow_after`].
    fn stow(&mut self, _entry: &Entry) -> impl Future<Output = std::io::Result<Option<Bytes>>> {
        async { Ok(None) }
    }
    /// Makes every stowed body durable (the journal's own sync covers the stand-ins).
    fn sync_stowed(&mut self) -> impl Future<Output = std::io::Result<()>> {
        async { Ok(()) }
    }
    /// The journal dropped every op after `op`: drops their stowed bodies.
    fn unstow_after(&mut self, _op: u64) -> impl Future<Output = std::io::Result<()>> {
        async { Ok(()) }
    }
    /// A retirement may delete the messages of the ops up to `op` (the group's
    /// `retirable_through`: every replica holds them, or the group checkpointed past those
    /// that do not, which catch up by state transfer); called after each drive in a group of
    /// more than one.
    fn may_retire_through(&mut self, _op: u64) {}
    /// The op `stand_in` journals, its body read back from where [`Self::stow`] put it;
    /// [`ReadBack::Retired`] when a committed retirement deleted it (the group then checkpoints
    /// past it), [`ReadBack::Unreadable`] when it is damaged or lost. (`&mut`: a read may open
    /// a file, as a partition's log opens a closed segment's.)
    fn read_stowed(&mut self, _stand_in: &Entry) -> impl Future<Output = ReadBack> {
        async { ReadBack::Unreadable }
    }

    /// Whether a replica of this machine's group that fell behind the others' checkpoints
    /// catches up by copying a peer's checkpoint (and a partition's log: state transfer).
    fn transfers_state(&self) -> bool {
        false
    }
    /// Serving a state transfer: whole committed records of the log from the batch base
    /// offset `offset` on, up to `max_bytes` (at least one record), and the offset they start
    /// at; when `offset` is no longer held, no records and the first offset that is. (`&mut`
    /// as for [`Self::read_stowed`].)
    fn transfer_records(
        &mut self,
        offset: u64,
        _max_bytes: u32,
    ) -> impl Future<Output = (u64, Bytes)> {
        async move { (offset, Bytes::new()) }
    }
    /// Receiving: about to copy a peer's checkpoint whose state is `state`. Drops what this
    /// replica holds beyond what it committed, and returns where its log continues from and
    /// where `state`'s log ends (an empty range when the state is all there is to copy).
    fn transfer_begin(
        &mut self,
        _state: &[u8],
    ) -> impl Future<Output = Result<(u64, u64), String>> {
        async { Err("this state machine transfers no state".to_string()) }
    }
    /// Receiving: where the log starts (past its end when it holds nothing, as for a state
    /// machine without one).
    fn transfer_log_start(&self) -> u64 {
        u64::MAX
    }
    /// Receiving, when the peers no longer hold the offset the log starts from: committed
    /// retirements the offered checkpoint carries deleted the offsets below `offset`, which
    /// this log still holds. Deletes them here as those retirements' apply would.
    fn transfer_retire_below(&mut self, _offset: u64) -> impl Future<Output = Result<(), String>> {
        async { Err("this state machine transfers no state".to_string()) }
    }
    /// Receiving, when the peers no longer hold the offset the log continues from: committed
    /// retirements deleted every offset the log holds and those up to `offset`, the peers'
    /// first retained one. Discards the log and restarts it empty at `offset`, durably, before
    /// the copy goes on from there.
    fn transfer_restart_at(&mut self, _offset: u64) -> impl Future<Output = Result<(), String>> {
        async { Err("this state machine transfers no state".to_string()) }
    }
    /// Appends records a peer sent (checked by the codec, in order from the log's end);
    /// returns the log's new end.
    fn transfer_append(&mut self, _records: Bytes) -> impl Future<Output = Result<u64, String>> {
        async { Err("this state machine transfers no state".to_string()) }
    }
    /// Restores `state` over the copied log: the machine is now as of the checkpoint at `op`.
    fn transfer_install(
        &mut self,
        _op: u64,
        _state: &[u8],
    ) -> impl Future<Output = Result<(), String>> {
        async { Err("this state machine transfers no state".to_string()) }
    }
}

/// The error a client gets for a refused request.
pub fn refusal_error(refusal: &Refusal) -> iggy_generated::errors::ErrorCode {
    use iggy_generated::errors::ErrorCode;
    match refusal {
        Refusal::NotPrimary { .. } => ErrorCode::NotPrimary,
        Refusal::RequestTooOld => ErrorCode::RequestTooOld,
        // The client must register again.
        Refusal::SessionUnknown => ErrorCode::Unauthenticated,
        Refusal::ClientsTableFull | Refusal::Busy => ErrorCode::TransientNotAccepted,
        #[allow(unreachable_patterns)]
        _ => ErrorCode::TransientNotAccepted,
    }
}

/// Where a group keeps its checkpoint, and when it takes one.
pub struct Checkpointing {
    /// The kind of group, for its checkpoint duration metric.
    pub kind: GroupKind,
    /// The two alternating checkpoint files (see `iggy_storage::checkpoint`).
    pub slots: iggy_storage::checkpoint::CheckpointSlots,
    /// Checkpoint once the journal holds this many bytes (or the replica this many bytes of
    /// op bodies in memory)...
    pub journal_bytes: u64,
    /// ...or this many ops.
    pub journal_ops: usize,
    /// Past this journal size the group checkpoints without waiting for a replica that stays
    /// behind, which then catches up by state transfer.
    pub past_laggards: Option<JournalBound>,
}

/// A checkpoint whose slot its own task writes and fsyncs.
struct Writing {
    /// The op it is taken at.
    op: u64,
    /// When it was taken, for its duration metric.
    started: std::time::Instant,
    /// The slots, back once the slot is durable.
    durable: oneshot::Receiver<iggy_storage::checkpoint::CheckpointSlots>,
}

/// What a group's core is opened with, kept to open it again over a transferred checkpoint.
#[derive(Clone, Copy)]
struct CoreSettings {
    durability: Durability,
    implicit_register: bool,
    policy: Option<CheckpointPolicy>,
    past_laggards: Option<JournalBound>,
    /// The field the primary stamps with the time as it prepares ([`StateMachine::PREPARE_STAMP`]).
    prepare_stamp: Option<(u8, usize)>,
}

impl CoreSettings {
    fn open(
        &self,
        config: Config,
        checkpoint: Option<iggy_vsr::Checkpoint>,
        entries: Vec<Entry>,
        view_state: ViewState,
    ) -> GroupCore<oneshot::Sender<Outcome>> {
        let mut core = GroupCore::open(
            config,
            checkpoint,
            entries,
            view_state,
            self.durability,
            self.implicit_register,
            self.policy,
        );
        self.apply(&mut core);
        core
    }

    fn apply(&self, core: &mut GroupCore<oneshot::Sender<Outcome>>) {
        if let Some(bound) = self.past_laggards {
            core.checkpoint_past_laggards(bound);
        }
        if let Some((operation, at)) = self.prepare_stamp {
            core.stamp_prepares(operation, at);
        }
    }
}

/// The checkpoint a group in `dir` starts from (the newest valid slot) and the slots to write
/// next. The caller opens the journal with [`crate::wal::FileJournal::open_after_checkpoint`].
pub async fn load_checkpoint(
    dir: &std::path::Path,
) -> Result<iggy_storage::checkpoint::Start<iggy_vsr::Checkpoint>, iggy_storage::StorageError> {
    iggy_storage::checkpoint::load(dir, |bytes| {
        let checkpoint =
            iggy_vsr::Checkpoint::decode(bytes).map_err(|error| format!("{error:?}"))?;
        let op = checkpoint.op;
        Ok((checkpoint, op))
    })
    .await
}

type Submit = Pending<oneshot::Sender<Outcome>>;

/// The op of an outcome the primary refused before preparing it ([`StateMachine::admits`]):
/// nothing committed, and the reply holds the rejection the client gets.
pub const NOT_PREPARED: u64 = 0;

/// Ticks before a state transfer that failed is tried again (5 s at the 50 ms tick).
const TRANSFER_RETRY_TICKS: u64 = 100;

enum Job<R> {
    /// The state machine's running effects are done through this op.
    EffectsDone(u64),
    /// The checkpoint slot being written is durable (the slots come back to the group); `None`
    /// when the writing task was dropped, the runtime stopping.
    CheckpointWritten(Option<iggy_storage::checkpoint::CheckpointSlots>),
    Write(Submit),
    /// A client write committed here when this replica leads, else relayed to the primary of
    /// its view (a cluster's ForwardWrite).
    WriteAnywhere(Submit),
    /// A request of one of the node's own clients, numbered by the group.
    WriteNext {
        client: u128,
        operation: u8,
        body: Bytes,
        done: oneshot::Sender<Outcome>,
    },
    Read(R),
    /// Whether the client's request number is at or below its latest committed one.
    Committed {
        client: u128,
        request: u64,
        done: oneshot::Sender<bool>,
    },
    /// Finish what was accepted before, close the group's files, then answer.
    Stop(oneshot::Sender<()>),
    /// Fsync the journal behind the jobs accepted before and cut what follows its last entry
    /// (the shutdown drain), then answer.
    SyncJournal(oneshot::Sender<()>),
    /// Hand the group to a caught-up backup when this replica leads it (a graceful stop);
    /// answers whether it asked one.
    StepDown(oneshot::Sender<bool>),
    /// The node can (false) or cannot (true) serve as a primary now: see
    /// [`GroupHandle::decline_to_lead`].
    DeclineToLead(bool, oneshot::Sender<bool>),
    /// The client table's clients and their sessions, after the jobs accepted before.
    Clients(oneshot::Sender<Vec<(u128, u64)>>),
    /// The highest request number of the client this replica holds, committed or prepared.
    LatestRequest {
        client: u128,
        done: oneshot::Sender<u64>,
    },
    /// A session register the node checked the credentials of: committed here when this
    /// replica leads, else forwarded to the primary (metadata group only).
    Register {
        client: u128,
        user_id: u32,
        record: Bytes,
        done: oneshot::Sender<Outcome>,
    },
    /// A Logout of `session`, committed here when this replica leads, else forwarded to the
    /// primary (metadata group only).
    Logout {
        submit: Submit,
        session: u64,
    },
    /// The op the primary of the view knew committed when it answered (metadata group only):
    /// asked of it as a backup, this replica's own when it leads. Nothing is committed.
    PrimaryCommit {
        done: oneshot::Sender<Outcome>,
    },
    /// Sessions bound on this node, reported to the primary when this replica is a backup.
    ReportSessions(Vec<(u128, u64)>),
    ReportRetirement {
        revision: u64,
        sessions: Vec<(u128, u64)>,
    },
    /// A frame from a peer replica of the group.
    Peer(Inbound),
    /// The replica's clock advanced one tick.
    Tick,
}

/// A handle to a running group; cheap to clone.
pub struct GroupHandle<R> {
    jobs: mpsc::UnboundedSender<Job<R>>,
    figures: std::sync::Arc<GroupFigures>,
    /// The highest op a write relayed through this node for its clients was acknowledged at
    /// (see [`GroupHandle::note_relayed`]).
    relayed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R> Clone for GroupHandle<R> {
    fn clone(&self) -> Self {
        GroupHandle {
            jobs: self.jobs.clone(),
            figures: self.figures.clone(),
            relayed: self.relayed.clone(),
        }
    }
}

impl<R> GroupHandle<R> {
    /// The view and commit the group's task last published (readable from any thread).
    pub fn figures(&self) -> &GroupFigures {
        &self.figures
    }

    /// Whether the group's task has stopped (its partition deleted, the node stopping): it
    /// answers nothing more, so a write is not sent to it again.
    pub fn stopped(&self) -> bool {
        self.jobs.is_closed()
    }

    /// [`Self::figures`], to keep beyond this handle.
    pub fn shared_figures(&self) -> std::sync::Arc<GroupFigures> {
        self.figures.clone()
    }

    /// Records that a write this node took for a client that cannot route (HTTP) was
    /// acknowledged at `op`: reads this node serves such clients from its own replica wait
    /// until the group applied it here (read-your-writes on a backup).
    pub fn note_relayed(&self, op: u64) {
        self.relayed
            .fetch_max(op, std::sync::atomic::Ordering::Relaxed);
    }

    /// The highest op [`GroupHandle::note_relayed`] recorded (0 before any). A new incarnation
    /// of a partition is a new group with a new handle, so no op of an older one lingers here.
    pub fn relayed_watermark(&self) -> u64 {
        self.relayed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Submits a client request and waits for its commit (or refusal).
    pub async fn submit(&self, client: u128, request: u64, operation: u8, body: Bytes) -> Outcome {
        let submit = |waiter| {
            Job::Write(Submit {
                client,
                request,
                operation,
                body,
                waiter,
            })
        };
        self.ask(submit, Outcome::Failed).await
    }

    /// [`Self::submit`], relayed to the group's primary when this replica does not lead it.
    pub async fn submit_anywhere(
        &self,
        client: u128,
        request: u64,
        operation: u8,
        body: Bytes,
    ) -> Outcome {
        let submit = |waiter| {
            Job::WriteAnywhere(Submit {
                client,
                request,
                operation,
                body,
                waiter,
            })
        };
        self.ask(submit, Outcome::Failed).await
    }

    /// Submits a request of one of the node's own clients, which the group numbers (above its
    /// latest committed one), and waits for its commit (or refusal).
    pub async fn submit_next(&self, client: u128, operation: u8, body: Bytes) -> Outcome {
        let submit = |done| Job::WriteNext {
            client,
            operation,
            body,
            done,
        };
        self.ask(submit, Outcome::Failed).await
    }

    /// Registers a session for `client` (its register record built from `user_id`'s checked
    /// credentials) and waits for the commit: on a backup of a cluster the metadata primary
    /// commits it (a forward over the replica plane). The outcome's `op` is the session.
    pub async fn register(&self, client: u128, user_id: u32, record: Bytes) -> Outcome {
        let register = |done| Job::Register {
            client,
            user_id,
            record,
            done,
        };
        self.ask(register, Outcome::Failed).await
    }

    /// Submits `client`'s Logout of `session` (request `request`, op body `body`) and waits for
    /// the commit: on a backup of a cluster the metadata primary commits it (a forward over
    /// the replica plane), and the outcome's `op` is the commit after which the session is
    /// gone.
    pub async fn logout(&self, client: u128, request: u64, session: u64, body: Bytes) -> Outcome {
        let logout = |waiter| Job::Logout {
            submit: Submit {
                client,
                request,
                operation: iggy_generated::frames::Operation::Logout.to_repr(),
                body,
                waiter,
            },
            session,
        };
        self.ask(logout, Outcome::Failed).await
    }

    /// What the group's primary knew committed when it answered (this replica's own commit when
    /// it leads); `None` for now when this replica knows no primary alive. A replica that
    /// applied it has seen every write acknowledged, through any node, before it asked.
    pub async fn primary_commit(&self) -> Option<u64> {
        match self
            .ask(|done| Job::PrimaryCommit { done }, Outcome::Failed)
            .await
        {
            Outcome::Committed { op, .. } => Some(op),
            Outcome::Refused(_) | Outcome::Failed => None,
        }
    }

    /// Tells the group's primary which sessions are bound on this node (a backup's session
    /// heartbeat); nothing happens on the primary itself or in a group of one.
    pub fn report_sessions(&self, sessions: Vec<(u128, u64)>) {
        let _ = self.jobs.unbounded_send(Job::ReportSessions(sessions));
    }

    /// Tells the group's primary which ended sessions this node's partition copies no longer
    /// hold, for the partition set of its model's `revision`; nothing happens on the primary
    /// itself or in a group of one.
    pub fn report_retirement(&self, revision: u64, sessions: Vec<(u128, u64)>) {
        let _ = self
            .jobs
            .unbounded_send(Job::ReportRetirement { revision, sessions });
    }

    /// Queues a read behind the writes already submitted. False if the group stopped.
    pub fn read(&self, read: R) -> bool {
        self.jobs.unbounded_send(Job::Read(read)).is_ok()
    }

    /// Stops the group: jobs queued before this one are handled, later ones fail, and the
    /// group's files are closed when this returns. A group already stopped returns at once.
    pub async fn stop(&self) {
        self.ask(Job::Stop, ()).await
    }

    /// When this replica leads the group, asks a caught-up backup to take it over (the node is
    /// stopping: its peers need not wait out the heartbeat timeout); whether it asked one.
    pub async fn step_down(&self) -> bool {
        self.ask(Job::StepDown, false).await
    }

    /// While `declines`, the replica takes no group handed to it, and, leading the group now,
    /// hands it to a caught-up backup (`iggy_vsr::Replica::set_declines_to_lead`): the node
    /// cannot judge its clients' grants (`consensus/grant_lease.rs`). Whether it asked a backup.
    pub async fn decline_to_lead(&self, declines: bool) -> bool {
        self.ask(|done| Job::DeclineToLead(declines, done), false)
            .await
    }

    /// Fsyncs the group's journal behind the jobs queued before (the shutdown drain: records
    /// written to the OS only, under the replicated policy, become durable).
    pub async fn sync_journal(&self) {
        self.ask(Job::SyncJournal, ()).await
    }

    /// The clients in the group's client table (the node's own left out) with their session
    /// numbers; empty when the group has stopped.
    pub async fn clients(&self) -> Vec<(u128, u64)> {
        self.ask(Job::Clients, Vec::new()).await
    }

    /// The highest request number of `client` this replica holds (committed, or prepared
    /// above its commit); 0 when none, or when the group has stopped.
    pub async fn latest_request(&self, client: u128) -> u64 {
        self.ask(|done| Job::LatestRequest { client, done }, 0)
            .await
    }

    /// Whether `request` of `client` was already committed: a retry whose reply the replica
    /// replays, so checks against today's state must not refuse it.
    pub async fn already_committed(&self, client: u128, request: u64) -> bool {
        let ask = |done| Job::Committed {
            client,
            request,
            done,
        };
        self.ask(ask, false).await
    }

    /// Queues the job `make` builds around an answer channel and waits for the answer, or
    /// returns `gone` when the group has stopped (the job is refused or dropped unanswered).
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Job<R>, gone: T) -> T {
        let (done, answer) = oneshot::channel();
        if self.jobs.unbounded_send(make(done)).is_err() {
            return gone;
        }
        answer.await.unwrap_or(gone)
    }
}

/// One group's task: the sans-IO core and the I/O it asks for.
pub struct Group<J: Journal, S: StateMachine> {
    core: GroupCore<oneshot::Sender<Outcome>>,
    journal: J,
    state: S,
    /// Where the checkpoint goes (the core decides when); lent to the task writing one.
    slots: Option<iggy_storage::checkpoint::CheckpointSlots>,
    /// The checkpoint being written and fsynced by its own task, while the group goes on.
    writing: Option<Writing>,
    /// The group's directory (the checkpoint slots'), for messages.
    dir: Option<std::path::PathBuf>,
    /// The kind of group its checkpoints are timed as.
    kind: GroupKind,
    /// The replica's view and commit, published after each drive for the metrics.
    figures: std::sync::Arc<GroupFigures>,
    /// The view state's slots, beside the checkpoint's.
    view: Option<super::view_file::ViewFile>,
    /// The group's part in the replica plane, in a cluster; `None` in a group of one.
    plane: Option<GroupPlane>,
    /// What the core was opened with, to open it again after a state transfer.
    settings: CoreSettings,
    /// The newest durable checkpoint (its op and slot bytes), served to a replica that needs
    /// state transfer; read from the slots at the first request after a start or a checkpoint.
    served: Option<(u64, Bytes)>,
    /// The checkpoint slots offered in chunks, one per peer that asked.
    lent_slots: crate::consensus::transfer::LentSlots,
    /// The state transfer under way on this replica, when it fell behind its peers'
    /// checkpoints.
    fetch: Option<Fetch>,
    /// No transfer starts before this tick: after one that failed, a while.
    transfer_paused_until: u64,
    /// The offer being copied (and the record bytes copied so far), installed once the log
    /// holds it.
    pending_offer: Option<(Offer, u64)>,
    /// Client requests held back, in order, while an op that changes admission waits to be
    /// applied ahead of them (see [`StateMachine::changes_admission`]).
    held: std::collections::VecDeque<Submit>,
}

impl<J: Journal, S: StateMachine> Group<J, S> {
    /// Opens the group over its recovered journal prefix and replays it into `state`.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        config: Config,
        journal: J,
        checkpoint: Option<iggy_vsr::Checkpoint>,
        entries: Vec<Entry>,
        state: S,
        durability: Durability,
        implicit_register: bool,
        checkpointing: Option<Checkpointing>,
        limit_name: &str,
        peers: Option<Peers>,
    ) -> Result<Self, String> {
        let policy = checkpointing.as_ref().map(|c| CheckpointPolicy {
            journal_bytes: c.journal_bytes,
            journal_ops: c.journal_ops,
        });
        let settings = CoreSettings {
            durability,
            implicit_register,
            policy,
            past_laggards: checkpointing.as_ref().and_then(|c| c.past_laggards),
            prepare_stamp: S::PREPARE_STAMP,
        };
        // The view the replica last spoke in: it must never forget one across a restart. State
        // it cannot read refuses the group (the metadata's refuses the start), its files kept:
        // guessing a view could vote twice in one, and stopping the process would stop every
        // other group with it, at every restart.
        let (view_state, view) = match &checkpointing {
            Some(c) => {
                let dir = c.slots.dir();
                let cluster = super::cluster::node_cluster();
                let (state, file) = super::view_file::ViewFile::load(dir, cluster, config.replica)
                    .map_err(|error| {
                        format!(
                            "the view state cannot be read: {error}; the group is not served \
                             and its files are left as they are (restore the data directory \
                             from a backup, or replace this node's disk as README \"Replace a \
                             cluster node's disk\" says)"
                        )
                    })?;
                (state, Some(file))
            }
            None => (ViewState::default(), None),
        };
        let plane = peers.map(GroupPlane::new);
        let created_view = plane.as_ref().and_then(GroupPlane::created_view);
        let core = match created_view {
            Some(view) if checkpoint.is_none() && entries.is_empty() && view_state.view == 0 => {
                let mut core =
                    GroupCore::format_in_view(config, view, durability, implicit_register, policy);
                settings.apply(&mut core);
                // Created while its first primary's node is down: the backups that find it
                // unreachable elect another at once, instead of stalling the partition's first
                // writes for a heartbeat timeout.
                let primary = core.replica().primary_of(view);
                if let Some(plane) = &plane
                    && primary != core.replica().replica()
                    && plane.peer_status(primary) == PeerStatus::Unreachable
                {
                    core.suspect_primary();
                }
                core
            }
            _ => settings.open(config, checkpoint, entries, view_state),
        };
        if let Some((committed, configured)) = core.limits_mismatch() {
            tracing::warn!(
                "{limit_name} is {configured} in the configuration, but the group of {} committed {committed} with its first op; keeping {committed}",
                checkpointing
                    .as_ref()
                    .map_or("a consensus group".into(), |c| c
                        .slots
                        .dir()
                        .display()
                        .to_string()),
            );
        }
        let mut group = Group {
            core,
            journal,
            state,
            kind: checkpointing
                .as_ref()
                .map_or(GroupKind::Partition, |c| c.kind),
            dir: checkpointing.as_ref().map(|c| c.slots.dir().to_path_buf()),
            slots: checkpointing.map(|c| c.slots),
            writing: None,
            figures: Default::default(),
            view,
            plane,
            settings,
            served: None,
            lent_slots: crate::consensus::transfer::LentSlots::default(),
            fetch: None,
            transfer_paused_until: 0,
            pending_offer: None,
            held: Default::default(),
        };
        group.drive().await;
        group.core.release_applied_bodies();
        group.state.replayed().await?;
        Ok(group)
    }

    /// Takes a checkpoint when the core says one is due: the state machine makes its effects
    /// durable, and a task of its own writes and fsyncs the checkpoint slot while the group goes
    /// on preparing, committing and answering (see [`Self::checkpoint_written`] for what waits
    /// for it).
    async fn maybe_checkpoint(&mut self) {
        if self.slots.is_none() {
            return;
        }
        let Some(op) = self.core.checkpoint_due(self.journal.len_bytes()) else {
            return;
        };
        // The state machine's checkpoint is its state now, as of every applied op: a larger
        // group's core may name an op below that (the op every replica holds), and then waits
        // for a moment when the two meet.
        if op != self.core.replica().commit_min() {
            return;
        }
        let started = std::time::Instant::now();
        let state = match self.state.checkpoint().await {
            Ok(state) => state,
            Err(error) => {
                return tracing::error!(
                    "checkpoint in {}: state not durable: {error}",
                    self.dir.clone().unwrap_or_default().display()
                );
            }
        };
        let replica = self.core.checkpoint_record(op);
        let Some(mut slots) = self.slots.take() else {
            return;
        };
        let left_behind = self.core.left_behind(op);
        if !left_behind.is_empty() {
            tracing::info!(
                "{}: checkpoint at op {op} leaves replicas {left_behind:?} behind: they catch up by state transfer",
                slots.dir().display()
            );
        }
        let (written, durable) = oneshot::channel();
        compio::runtime::spawn(async move {
            slots.write(&replica, &state).await;
            let _ = written.send(slots);
        })
        .detach();
        self.writing = Some(Writing {
            op,
            started,
            durable,
        });
        // A checkpoint taken for a peer that asked for a retired body answers it now: it sends
        // the peer to state transfer, which is served once the checkpoint is durable.
        self.drive().await;
    }

    /// The checkpoint slot is durable: what relies on it may go on. The journal drops the ops
    /// it covers (until now the journal was what a start needed), a state transfer may ship it,
    /// and a retirement may count it (`GroupCore::retirable_through`).
    async fn checkpoint_written(
        &mut self,
        slots: Option<iggy_storage::checkpoint::CheckpointSlots>,
    ) {
        let Some(writing) = self.writing.take() else {
            return;
        };
        // Without its slots (the runtime stopping) the group takes no further checkpoint.
        let Some(slots) = slots else {
            return;
        };
        self.slots = Some(slots);
        // A peer's state transfer loads the new slot when it asks (rarely, unlike checkpoints).
        self.served = None;
        self.journal.reset_after_checkpoint(writing.op).await;
        self.core.checkpointed();
        checkpoint_taken(self.kind, writing.started.elapsed());
    }

    /// Waits until the state machine's running effects are done, answering the requests that
    /// waited for them: before the group stops, and before a state transfer replaces the state.
    async fn finish_effects(&mut self) {
        while self.core.effects_running().is_some() {
            let op = self.state.effects_done().await;
            self.core.effects_done(op);
            self.drive().await;
        }
    }

    /// Waits until the checkpoint being written (if any) is durable: before the group uses its
    /// slots otherwise (a state transfer's install or offer) and before it stops.
    async fn finish_checkpoint(&mut self) {
        if let Some(writing) = self.writing.as_mut() {
            let slots = (&mut writing.durable).await.ok();
            self.checkpoint_written(slots).await;
        }
    }

    /// Spawns the group's task on the current compio runtime.
    pub fn spawn(self) -> GroupHandle<S::Read>
    where
        J: 'static,
        S: 'static,
    {
        let (jobs, receiver) = mpsc::unbounded();
        let figures = self.figures.clone();
        compio::runtime::spawn(self.run(receiver)).detach();
        GroupHandle {
            jobs,
            figures,
            relayed: Default::default(),
        }
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job<S::Read>>) {
        let stopped = 'run: loop {
            let Some(mut job) = self.next_job(&mut jobs).await else {
                break None;
            };
            self.advance_clock();
            // Group commit: take everything already queued before driving the journal.
            loop {
                if let Some(done) = self.accept(job).await {
                    self.drive().await;
                    break 'run Some(done);
                }
                if self
                    .core
                    .requests_wait_for_effects(self.journal.len_bytes())
                {
                    break;
                }
                match jobs.try_recv() {
                    Ok(next) => job = next,
                    Err(_) => match self.plane.as_mut().and_then(GroupPlane::waiting_frame) {
                        Some(frame) => job = Job::Peer(frame),
                        None => break,
                    },
                }
            }
            self.drive().await;
            self.core.release_applied_bodies();
            if self.plane.is_some() {
                self.state.may_retire_through(self.core.retirable_through());
            }
            self.maybe_checkpoint().await;
            self.maybe_start_transfer();
            self.schedule_clock();
        };
        self.finish_effects().await;
        self.finish_checkpoint().await;
        self.journal.trim().await;
        // Jobs behind the stop fail; the journal and the state machine's files close here.
        drop(jobs);
        drop(self);
        if let Some(done) = stopped {
            let _ = done.send(());
        }
    }

    /// The next job: a request from the node, or, in a cluster, a peer's frame or a tick of
    /// the replica's clock, or the checkpoint being written became durable (first, so a busy
    /// group does not hold its journal's reuse back), or the state machine's running effects
    /// moved on. `None` once the node dropped every handle.
    async fn next_job(
        &mut self,
        jobs: &mut mpsc::UnboundedReceiver<Job<S::Read>>,
    ) -> Option<Job<S::Read>> {
        use futures_util::future::{Either, select};
        if let Some(writing) = self.writing.as_mut() {
            match writing.durable.try_recv() {
                Ok(Some(slots)) => return Some(Job::CheckpointWritten(Some(slots))),
                Ok(None) => {}
                Err(_) => return Some(Job::CheckpointWritten(None)),
            }
        }
        let effects_running = self.core.effects_running().is_some();
        // Requests wait while running effects keep an overdue checkpoint back (see
        // `GroupCore::requests_wait_for_effects`); what the group's own work reports and its
        // peers' frames do not.
        let hold = self
            .core
            .requests_wait_for_effects(self.journal.len_bytes());
        let requests = async {
            match hold {
                true => std::future::pending().await,
                false => jobs.next().await,
            }
        };
        let (writing, state) = (&mut self.writing, &mut self.state);
        let written = async {
            match writing.as_mut() {
                Some(writing) => Job::CheckpointWritten((&mut writing.durable).await.ok()),
                None => std::future::pending().await,
            }
        };
        let effects = async {
            match effects_running {
                true => Job::EffectsDone(state.effects_done().await),
                false => std::future::pending().await,
            }
        };
        // What the group's own work reports: a checkpoint durable, effects done.
        let own = async {
            match select(std::pin::pin!(written), std::pin::pin!(effects)).await {
                Either::Left((job, _)) | Either::Right((job, _)) => job,
            }
        };
        let Some(plane) = self.plane.as_mut() else {
            return match select(std::pin::pin!(requests), std::pin::pin!(own)).await {
                Either::Left((job, _)) => job,
                Either::Right((own, _)) => Some(own),
            };
        };
        let woken = {
            let outside = std::pin::pin!(plane.wait());
            match select(
                select(std::pin::pin!(requests), std::pin::pin!(own)),
                outside,
            )
            .await
            {
                Either::Left((Either::Left((job, _)), _)) => return job,
                Either::Left((Either::Right((own, _)), _)) => return Some(own),
                Either::Right((woken, _)) => woken,
            }
        };
        match woken {
            Wake::Frame(frame) => Some(Job::Peer(frame)),
            Wake::Tick => Some(Job::Tick),
            // The node is stopping: go on serving its jobs.
            Wake::Gone => {
                self.plane = None;
                jobs.next().await
            }
        }
    }

    /// Handles one job; a stop request is handed back to the run loop.
    async fn accept(&mut self, job: Job<S::Read>) -> Option<oneshot::Sender<()>> {
        if S::PREPARE_STAMP.is_some() {
            self.core.set_stamp_clock(self.state.stamp_clock());
        }
        match job {
            Job::EffectsDone(op) => self.core.effects_done(op),
            Job::CheckpointWritten(slots) => self.checkpoint_written(slots).await,
            Job::Read(read) => {
                // Reads observe every write accepted before them.
                self.drive().await;
                self.state.read(read).await;
            }
            Job::Write(submit) => self.submit(submit),
            Job::WriteAnywhere(submit) => {
                self.drive().await;
                let submit = match &mut self.plane {
                    Some(plane) => plane.forward_write(self.core.replica(), submit),
                    None => Some(submit),
                };
                if let Some(submit) = submit {
                    self.submit(submit);
                }
            }
            Job::WriteNext {
                client,
                operation,
                body,
                done,
            } => {
                // Committed state decides the number: catch up first.
                self.drive().await;
                let request = self.core.next_request(client);
                self.core.submit(Pending {
                    client,
                    request,
                    operation,
                    body,
                    waiter: done,
                });
            }
            Job::Stop(done) => return Some(done),
            Job::SyncJournal(done) => {
                self.drive().await;
                self.journal.sync().await;
                self.journal.trim().await;
                let _ = done.send(());
            }
            Job::StepDown(done) => {
                let _ = done.send(self.step_down().await);
            }
            Job::DeclineToLead(declines, done) => {
                self.core.set_declines_to_lead(declines);
                let asked = declines && self.step_down().await;
                let _ = done.send(asked);
            }
            Job::Committed {
                client,
                request,
                done,
            } => {
                self.drive().await;
                let _ = done.send(self.core.already_committed(client, request));
            }
            Job::Clients(done) => {
                self.drive().await;
                let _ = done.send(self.core.clients());
            }
            Job::LatestRequest { client, done } => {
                self.drive().await;
                let _ = done.send(self.core.replica().latest_request(client));
            }
            // The clock moved as the group woke (`advance_clock`).
            Job::Tick => {}
            Job::Register {
                client,
                user_id,
                record,
                done,
            } => {
                self.drive().await;
                let pending = Pending {
                    client,
                    request: 0,
                    operation: iggy_vsr::OPERATION_REGISTER,
                    body: record,
                    waiter: done,
                };
                // A backup of a cluster forwards it to the primary.
                let pending = match &mut self.plane {
                    Some(plane) => plane.forward_register(self.core.replica(), pending, user_id),
                    None => Some(pending),
                };
                if let Some(pending) = pending {
                    self.core.submit(pending);
                }
            }
            Job::Logout { submit, session } => {
                self.drive().await;
                let submit = match &mut self.plane {
                    Some(plane) => plane.forward_logout(self.core.replica(), submit, session),
                    None => Some(submit),
                };
                if let Some(submit) = submit {
                    self.core.submit(submit);
                }
            }
            Job::PrimaryCommit { done } => {
                self.drive().await;
                let done = match &mut self.plane {
                    Some(plane) => plane.ask_primary_commit(self.core.replica(), done),
                    None => Some(done),
                };
                if let Some(done) = done {
                    let op = self.core.replica().commit_max();
                    let reply = Bytes::new();
                    let _ = done.send(Outcome::Committed { op, reply });
                }
            }
            Job::ReportSessions(sessions) => {
                if let Some(plane) = &mut self.plane {
                    plane.report_sessions(self.core.replica(), &sessions);
                }
            }
            Job::ReportRetirement { revision, sessions } => {
                if let Some(plane) = &mut self.plane {
                    plane.report_retirement(self.core.replica(), revision, &sessions);
                }
            }
            Job::Peer(frame) => {
                let Some(plane) = &mut self.plane else {
                    return None;
                };
                // While the log is copied the replica's own consensus stays still: nothing may
                // truncate or write the log under the copy.
                let copying = self.fetch.as_ref().is_some_and(Fetch::copying);
                if copying && !crate::consensus::transfer::is_transfer(frame.command) {
                    return None;
                }
                match plane.on_frame(&mut self.core, frame) {
                    Some(SessionFrame::Transfer { from, transfer }) => {
                        self.on_transfer(from, transfer).await;
                    }
                    Some(SessionFrame::Logout(logout)) => {
                        let body = self.state.forwarded_logout(logout.client, logout.session);
                        plane.commit_forwarded_logout(&mut self.core, logout, body);
                    }
                    Some(SessionFrame::Held { from, sessions }) => {
                        self.state.sessions_held_by_peer(from, &sessions)
                    }
                    Some(SessionFrame::Retired(report)) => self.state.retirement_reported(report),
                    Some(SessionFrame::Write(submit)) => self.submit(submit),
                    None => {}
                }
            }
        }
        None
    }

    /// Brings the replica's clock to the present as the group wakes, with the timers of the
    /// state transfer it runs.
    fn advance_clock(&mut self) {
        let Some(plane) = &mut self.plane else {
            return;
        };
        if !plane.advance(&mut self.core) {
            return;
        }
        let now = plane.ticks();
        let view = self.core.replica().view();
        let needed = self.core.replica().state_transfer_needed().is_some();
        if !needed && self.fetch.as_ref().is_some_and(|fetch| !fetch.copying()) {
            self.fetch = None;
        }
        if let Some((to, transfer)) = self.fetch.as_mut().and_then(|fetch| fetch.on_tick(now)) {
            plane.send_transfer(to, view, &transfer);
        }
    }

    /// Sets when the group wakes next if nothing comes: what its replica and plane have due,
    /// and the state transfer's resend or retry.
    fn schedule_clock(&mut self) {
        let Some(plane) = &mut self.plane else {
            return;
        };
        let needed = self.core.replica().state_transfer_needed().is_some();
        let transfer_due = match &self.fetch {
            Some(fetch) if !needed && !fetch.copying() => plane.ticks() + 1,
            Some(fetch) => fetch.due(),
            None if needed => self.transfer_paused_until,
            None => u64::MAX,
        };
        plane.schedule(&self.core, transfer_due);
    }

    /// Starts a state transfer when the replica reports it cannot join its group's log
    /// without one (its peers checkpointed past what it holds) and its state machine can take
    /// one: the primary of its view is asked first, then the other peers in turn.
    fn maybe_start_transfer(&mut self) {
        let Some(needed) = self.core.replica().state_transfer_needed() else {
            return;
        };
        if self.fetch.is_some() || !self.state.transfers_state() {
            return;
        }
        let Some(plane) = &mut self.plane else {
            return;
        };
        if plane.ticks() < self.transfer_paused_until {
            return;
        }
        let replica = self.core.replica();
        let (me, view) = (replica.replica(), replica.view());
        let count = replica.config().replica_count;
        let primary = replica.primary_of(view);
        let mut peers: Vec<u8> = (0..count).filter(|peer| *peer != me).collect();
        peers.sort_by_key(|peer| *peer != primary);
        let nonce = plane.next_nonce();
        let (fetch, to, request) = Fetch::start(nonce, peers, needed.checkpoint, plane.ticks());
        tracing::info!(
            "group {:#x}: replica {me} applied op {} but its peers checkpointed at op {}: state transfer, asking replica {to}",
            plane.group_id(),
            needed.commit_min,
            needed.checkpoint
        );
        plane.send_transfer(to, view, &request);
        self.fetch = Some(fetch);
    }

    /// A state-transfer frame from replica `from`: a peer's request this replica serves, or an
    /// answer to this replica's own transfer.
    async fn on_transfer(&mut self, from: u8, transfer: Transfer) {
        match transfer {
            Transfer::Request { nonce } => self.serve_target(from, nonce).await,
            Transfer::RequestChunk {
                nonce,
                artifact,
                offset,
                max_bytes,
            } => {
                let records = if artifact == METADATA_CHECKPOINT_ARTIFACT {
                    self.slot_chunk(nonce, offset, max_bytes).await
                } else {
                    let (held, records) = self.state.transfer_records(offset, max_bytes).await;
                    (held, records)
                };
                let (offset, records) = records;
                let chunk = Transfer::Chunk {
                    nonce,
                    artifact,
                    offset,
                    records,
                };
                let view = self.core.replica().view();
                if let Some(plane) = &mut self.plane {
                    plane.send_transfer(from, view, &chunk);
                }
            }
            Transfer::Target {
                checkpoint_op,
                ref slot,
                ..
            } => {
                if self.core.replica().state_transfer_needed().is_none() {
                    // The replica caught up meanwhile (a log it could install after all).
                    self.fetch = None;
                    return;
                }
                let accepted = self
                    .fetch
                    .as_mut()
                    .and_then(|f| f.on_target(from, &transfer));
                match accepted {
                    Some(Accepted::Offer(offer)) => self.begin_copy(offer).await,
                    Some(Accepted::Ask(to, request)) => {
                        if let (Offered::InChunks { length, .. }, Some(plane)) = (slot, &self.plane)
                        {
                            tracing::info!(
                                "group {:#x}: state transfer from replica {from}: the checkpoint at op {checkpoint_op} ({length} bytes) comes in pieces",
                                plane.group_id()
                            );
                        }
                        self.send_transfer(to, &request);
                    }
                    None => {}
                }
            }
            Transfer::Chunk { .. } => {
                let (Some(fetch), Some(plane)) = (self.fetch.as_mut(), self.plane.as_ref()) else {
                    return;
                };
                match fetch.on_chunk(from, &transfer, plane.ticks()) {
                    ChunkVerdict::Ignored => {}
                    ChunkVerdict::Ask(to, request) => self.send_transfer(to, &request),
                    ChunkVerdict::Fetched(offer) => self.begin_copy(offer).await,
                    ChunkVerdict::Restart { asked, held_from } => {
                        self.restart_copy(from, asked, held_from).await;
                    }
                    ChunkVerdict::Probed { retired_below } => {
                        self.probed(from, retired_below).await;
                    }
                    ChunkVerdict::Overtaken {
                        asked,
                        held_from,
                        until,
                    } => {
                        let Some(plane) = &self.plane else {
                            return;
                        };
                        tracing::warn!(
                            "group {:#x}: state transfer from replica {from}: the peer holds offsets from {held_from} on, past the offered checkpoint's end {until} (this replica's log ends at {asked}); asking again for a newer checkpoint",
                            plane.group_id()
                        );
                        self.fetch = None;
                        self.pending_offer = None;
                        self.transfer_paused_until = plane.ticks() + TRANSFER_RETRY_TICKS;
                    }
                    ChunkVerdict::Append(records) => {
                        if let Some((_, copied)) = &mut self.pending_offer {
                            *copied += records.len() as u64;
                        }
                        let appended = self.state.transfer_append(records).await;
                        self.continue_copy(appended).await;
                    }
                }
            }
        }
    }

    /// Answers a peer's request for a state-transfer target with this replica's newest durable
    /// checkpoint, when it serves its group (normal status) and has one.
    async fn serve_target(&mut self, to: u8, nonce: u128) {
        let replica = self.core.replica();
        let (view, commit_max) = (replica.view(), replica.commit_max());
        // A checkpoint being written is not durable yet: it is not shipped, and the slots are
        // lent to its task (the peer asks again).
        let serving = replica.status() == iggy_vsr::Status::Normal
            && self.state.transfers_state()
            && self.writing.is_none();
        if serving && self.served.is_none() {
            self.served = self.load_served().await;
        }
        let Some(plane) = &mut self.plane else {
            return;
        };
        let metadata = plane.group_id() == iggy_generated::frames::METADATA_GROUP;
        let target = match &self.served {
            Some((op, slot)) if serving => {
                let offered =
                    crate::consensus::transfer::offer(slot, plane.transfer_chunk_bytes(), metadata);
                if matches!(offered, Offered::InChunks { .. }) {
                    self.lent_slots.lend(to, nonce, slot.clone());
                }
                Transfer::Target {
                    nonce,
                    checkpoint_op: *op,
                    commit_max,
                    slot: offered,
                    transient: false,
                }
            }
            _ => Transfer::Target {
                nonce,
                checkpoint_op: 0,
                commit_max,
                slot: Offered::Nothing,
                transient: true,
            },
        };
        plane.send_transfer(to, view, &target);
    }

    /// The bytes of the checkpoint slot offered in chunks to transfer `nonce` from byte
    /// `offset`, up to `max_bytes` and one frame's budget; none when none was offered to it.
    async fn slot_chunk(&mut self, nonce: u128, offset: u64, max_bytes: u32) -> (u64, Bytes) {
        let budget = self
            .plane
            .as_ref()
            .map_or(max_bytes, GroupPlane::transfer_chunk_bytes);
        (
            offset,
            self.lent_slots.chunk(nonce, offset, max_bytes.min(budget)),
        )
    }

    /// Sends a state-transfer frame to `to` in the replica's view.
    fn send_transfer(&mut self, to: u8, transfer: &Transfer) {
        let view = self.core.replica().view();
        if let Some(plane) = &mut self.plane {
            plane.send_transfer(to, view, transfer);
        }
    }

    /// The newest valid checkpoint in the group's slots, as slot bytes.
    async fn load_served(&self) -> Option<(u64, Bytes)> {
        let start = load_checkpoint(self.dir.as_ref()?).await.ok()?;
        let loaded = start.checkpoint?;
        let slot = iggy_storage::checkpoint::encode(&loaded.replica.encode(), &loaded.state);
        Some((loaded.op, slot.into()))
    }

    /// An offer accepted: the state machine drops what it did not commit and says how far its
    /// log reaches; the copy starts there.
    async fn begin_copy(&mut self, offer: Offer) {
        let begun = self.state.transfer_begin(&offer.state).await;
        let (Some(fetch), Some(plane)) = (self.fetch.as_mut(), self.plane.as_mut()) else {
            return;
        };
        let (next, until) = match begun {
            Ok(range) => range,
            Err(why) => {
                tracing::error!(
                    "group {:#x}: the checkpoint at op {} from replica {} cannot be installed: {why}",
                    plane.group_id(),
                    offer.checkpoint.op,
                    offer.from
                );
                self.fetch = None;
                self.transfer_paused_until = plane.ticks() + TRANSFER_RETRY_TICKS;
                return;
            }
        };
        let view = self.core.replica().view();
        let first = self.state.transfer_log_start();
        let asked = fetch.begin(first, next, until, plane.ticks());
        self.pending_offer = Some((offer, 0));
        match asked {
            Some((to, request)) => plane.send_transfer(to, view, &request),
            None => self.install_transfer().await,
        }
    }

    /// The peer no longer holds `asked`, where this replica's log ends, and holds from
    /// `held_from` on: the group retired everything the log holds by committed ops, so the log
    /// restarts empty at `held_from` and the copy goes on from there. A crash before the
    /// install restarts from the old checkpoint, whose journal replay drops the copied records
    /// it does not account for, and transfers again.
    async fn restart_copy(&mut self, from: u8, asked: u64, held_from: u64) {
        let restarted = self.state.transfer_restart_at(held_from).await;
        if let Err(why) = restarted {
            let dir = self.dir.clone();
            let error = std::io::Error::other(why);
            iggy_storage::fail_stop::fail_stop(
                "restart the log for a transfer",
                &dir.unwrap_or_default(),
                &error,
            )
        }
        let (Some(fetch), Some(plane)) = (self.fetch.as_mut(), self.plane.as_mut()) else {
            return;
        };
        tracing::info!(
            "group {:#x}: state transfer from replica {from}: the group retired offsets below {held_from} (this replica's log ended at {asked}); the log restarts empty at {held_from}",
            plane.group_id()
        );
        let view = self.core.replica().view();
        match fetch.restarted(held_from, plane.ticks()) {
            Some((to, request)) => plane.send_transfer(to, view, &request),
            None => self.install_transfer().await,
        }
    }

    /// The probe of where the log starts was answered: a peer whose first retained offset lies
    /// above it retired what this log holds below that offset by committed ops the offered
    /// checkpoint carries (never replayed here), so those segments go here too before the copy
    /// goes on (else this replica would keep and serve them, and its segments would differ).
    async fn probed(&mut self, from: u8, retired_below: Option<u64>) {
        if let Some(offset) = retired_below {
            if let Err(why) = self.state.transfer_retire_below(offset).await {
                let dir = self.dir.clone();
                let error = std::io::Error::other(why);
                iggy_storage::fail_stop::fail_stop(
                    "retire the log for a transfer",
                    &dir.unwrap_or_default(),
                    &error,
                )
            }
            if let Some(plane) = &self.plane {
                tracing::info!(
                    "group {:#x}: state transfer from replica {from}: the group retired offsets below {offset}, which this replica's log still held; deleted here",
                    plane.group_id()
                );
            }
        }
        let (Some(fetch), Some(plane)) = (self.fetch.as_mut(), self.plane.as_mut()) else {
            return;
        };
        let view = self.core.replica().view();
        match fetch.probed(plane.ticks()) {
            Some((to, request)) => plane.send_transfer(to, view, &request),
            None => self.install_transfer().await,
        }
    }

    /// Records were appended (or failed to be): the next chunk, or the install once the log
    /// reached the offered state's end.
    async fn continue_copy(&mut self, appended: Result<u64, String>) {
        let (Some(fetch), Some(plane)) = (self.fetch.as_mut(), self.plane.as_mut()) else {
            return;
        };
        let next = match appended {
            Ok(next) => next,
            Err(why) => {
                let dir = self.dir.clone();
                let error = std::io::Error::other(why);
                let dir = dir.unwrap_or_default();
                iggy_storage::fail_stop::fail_stop("append transferred records", &dir, &error)
            }
        };
        let view = self.core.replica().view();
        match fetch.appended(next, plane.ticks()) {
            Some((to, request)) => plane.send_transfer(to, view, &request),
            None => self.install_transfer().await,
        }
    }

    /// The log reached the offered checkpoint's state: the checkpoint goes into this replica's
    /// slots, the journal restarts after it, the state machine takes the state, and the core
    /// opens again from it and rejoins its group (asking for a StartView, as after a restart).
    /// Requests waiting on the old core fail: none of them was acknowledged.
    async fn install_transfer(&mut self) {
        self.fetch = None;
        let Some((offer, copied)) = self.pending_offer.take() else {
            return;
        };
        // The slots are lent to a checkpoint being written: it finishes first; and the effects
        // of the ops applied here run to their end before the state is replaced.
        self.finish_effects().await;
        self.finish_checkpoint().await;
        let Some(slots) = &mut self.slots else {
            return;
        };
        // The copied log is durable before the checkpoint that counts it: a crash in between
        // restarts from the old checkpoint and journal, which drop the records they do not
        // account for, and transfers again.
        if let Err(why) = self
            .state
            .transfer_install(offer.checkpoint.op, &offer.state)
            .await
        {
            let error = std::io::Error::other(why);
            iggy_storage::fail_stop::fail_stop(
                "install a transferred checkpoint",
                slots.dir(),
                &error,
            );
        }
        slots.write(&offer.replica, &offer.state).await;
        let checkpoint = offer.checkpoint;
        self.journal
            .reset_to(checkpoint.op, checkpoint.checksum)
            .await;
        let replica = self.core.replica();
        let (config, view_state) = (replica.config().clone(), replica.persisted_view_state());
        let op = checkpoint.op;
        self.core = self
            .settings
            .open(config, Some(checkpoint), Vec::new(), view_state);
        self.served = None;
        tracing::info!(
            "group {:#x}: state transfer from replica {} to op {op} ({copied} bytes)",
            self.plane.as_ref().map_or(0, GroupPlane::group_id),
            offer.from
        );
        self.drive().await;
    }

    /// Hands the group to a caught-up backup when this replica leads it in a cluster, after the
    /// actions queued before; whether it asked one (`GroupHandle::step_down`).
    async fn step_down(&mut self) -> bool {
        self.drive().await;
        let asked = self.plane.is_some() && self.core.step_down().is_some();
        self.drive().await;
        asked
    }

    /// A client's write, as this replica's core would take it: held back while an op that
    /// changes admission is unapplied ahead of it (or requests held before it wait), judged by
    /// the state machine once nothing is, then submitted.
    fn submit(&mut self, submit: Submit) {
        if !S::JUDGES_ADMISSION {
            return self.core.submit(submit);
        }
        if !self.held.is_empty() || self.admission_changes_ahead() {
            self.held.push_back(submit);
            return;
        }
        self.admit(submit);
    }

    /// Whether this replica leads and an op it has not applied yet changes admission.
    fn admission_changes_ahead(&self) -> bool {
        let replica = self.core.replica();
        replica.status() == iggy_vsr::Status::Normal
            && replica.is_primary()
            && replica
                .unapplied()
                .iter()
                .any(|entry| self.state.changes_admission(entry.operation))
    }

    fn admit(&mut self, submit: Submit) {
        let replica = self.core.replica();
        let leads = replica.status() == iggy_vsr::Status::Normal && replica.is_primary();
        let committed = replica.commit_max();
        if leads
            && let Err(reply) =
                self.state
                    .admits(submit.client, submit.operation, &submit.body, committed)
        {
            let op = NOT_PREPARED;
            let _ = submit.waiter.send(Outcome::Committed { op, reply });
            return;
        }
        self.core.submit(submit);
    }

    /// Submits the held requests nothing holds back any more (all of them once this replica
    /// no longer leads: its core refuses them, and their clients go to the new primary).
    /// Whether it submitted any.
    fn release_held(&mut self) -> bool {
        let mut released = false;
        while !self.held.is_empty() && !self.admission_changes_ahead() {
            let submit = self.held.pop_front().expect("not empty");
            self.admit(submit);
            released = true;
        }
        released
    }

    /// Carries out the core's steps until it has nothing left to do, submitting the held
    /// requests nothing holds back any more on the way.
    async fn drive(&mut self) {
        loop {
            self.run_steps().await;
            if !self.release_held() {
                break;
            }
        }
        let in_touch = match &self.plane {
            Some(plane) => plane.in_touch_lapse(self.core.replica()),
            None => crate::consensus::replica_clock::Lapse::Never,
        };
        self.figures.publish(self.core.replica(), in_touch);
        if let Some(plane) = &mut self.plane {
            plane.announce_commit(self.core.replica());
            plane.log_role(self.figures.role(), self.core.replica());
        }
    }

    /// Works through the core's steps until it waits for an input.
    async fn run_steps(&mut self) {
        while let Some(step) = self.core.poll() {
            match step {
                Step::Journal { op, entry } => {
                    let stand_in = match self.state.stow(&entry).await {
                        Ok(stand_in) => stand_in,
                        Err(error) => self.stop_failed(&format!("stow op {op}"), &error),
                    };
                    if let Err(error) = self.journal.append(&entry, stand_in.as_ref()).await {
                        self.stop_failed(&format!("journal op {op}"), &error);
                    }
                    let must_sync = self.state.persisted(entry.operation);
                    self.core.journaled(op, must_sync);
                }
                Step::Sync => {
                    let ((), stowed) =
                        futures_util::future::join(self.journal.sync(), self.state.sync_stowed())
                            .await;
                    if let Err(error) = stowed {
                        self.stop_failed("fsync stowed bodies", &error);
                    }
                    self.core.synced();
                }
                Step::ReadBack { op } => {
                    let read = match self.journal.read(op).await {
                        Some(JournalEntry::Whole(entry)) => ReadBack::Read(entry),
                        Some(JournalEntry::Stowed(stand_in)) => {
                            self.state.read_stowed(&stand_in).await
                        }
                        None => ReadBack::Unreadable,
                    };
                    match read {
                        ReadBack::Read(_) => {}
                        ReadBack::Retired => tracing::debug!(
                            "op {op}, asked for by a peer, was retired here: checkpointing past it"
                        ),
                        ReadBack::Unreadable => {
                            tracing::warn!("op {op} could not be read back for a peer")
                        }
                    }
                    self.core.read_back(op, read);
                }
                Step::Truncate { after_op } => {
                    self.journal.truncate_after(after_op).await;
                    if let Err(error) = self.state.unstow_after(after_op).await {
                        self.stop_failed(
                            &format!("drop stowed bodies after op {after_op}"),
                            &error,
                        );
                    }
                }
                Step::Apply {
                    op,
                    client,
                    operation,
                    body,
                } => {
                    let reply = self.state.apply(op, client, operation, body).await;
                    let retired = self.state.take_retired();
                    if self.state.effects_running() {
                        self.core.applied_with_effects(op, reply, &retired);
                    } else {
                        self.core.applied(op, reply, &retired);
                    }
                }
                Step::Registered { op, client, body } => {
                    self.state.registered(op, client, &body);
                }
                // The core synced the journal before handing this out.
                Step::PersistView { state } => {
                    match &mut self.view {
                        Some(view) => view.persist(state).await,
                        None => {
                            let error = std::io::Error::other("a group without a directory");
                            self.stop_failed("persist the view state", &error)
                        }
                    }
                    self.core.view_persisted(state);
                }
                Step::Send { to, message } => match &mut self.plane {
                    Some(plane) => plane.send(to, &message),
                    None => tracing::error!(
                        "consensus group of one asked to reach replica {to}: no peers"
                    ),
                },
                Step::Answer { waiter, outcome } => {
                    let _ = waiter.send(outcome);
                }
            }
        }
    }

    /// The replica prepared an op the group cannot make durable (the files stop the process
    /// themselves when a write or fsync fails; this is a record they refused). Failing its
    /// waiters and accepting on would wedge the group behind an op that is never written, so
    /// the process stops like on a storage failure.
    fn stop_failed(&self, operation: &str, error: &std::io::Error) -> ! {
        let dir = self
            .dir
            .as_deref()
            .unwrap_or(std::path::Path::new("<group>"));
        iggy_storage::fail_stop::fail_stop(operation, dir, error)
    }
}
