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
use crate::consensus::plane::Peers;
use crate::consensus::replica_bus::Inbound;
use bytes::Bytes;
use futures_channel::{mpsc, oneshot};
use futures_util::StreamExt;
use iggy_vsr::group::{CheckpointPolicy, GroupCore, Pending, Step};
pub use iggy_vsr::group::{Durability, Outcome};
use iggy_vsr::{Config, Entry, Refusal, ViewState};

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
    /// Bytes the journal holds.
    fn len_bytes(&self) -> u64;
    /// The record of `op` read back (see [`crate::consensus::wal::FileJournal::read`]).
    fn read(&self, op: u64) -> impl Future<Output = Option<JournalEntry>>;
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
    /// Every journaled op has been replayed after a start.
    fn replayed(&mut self) -> impl Future<Output = ()> {
        async {}
    }
    /// Serves a read.
    fn read(&mut self, read: Self::Read) -> impl Future<Output = ()>;

    /// The body of the Logout op that ends `client`'s session `session`, which a backup
    /// forwarded to this primary; `None` when that session is not live here (it ended already,
    /// so there is nothing to commit). Only a machine with sessions has any.
    fn forwarded_logout(&self, _client: u128, _session: u64) -> Option<Bytes> {
        None
    }

    /// Peer replica `from` reports these (client, session) pairs bound to its connections:
    /// they are active although no connection of this node holds them.
    fn sessions_held_by_peer(&mut self, _from: u8, _sessions: &[(u128, u64)]) {}

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
    /// Every replica of the group holds the ops up to `op` (its `checkpoint_safe`); called
    /// after each drive in a group of more than one.
    fn held_everywhere(&mut self, _op: u64) {}
    /// The op `stand_in` journals, its body read back from where [`Self::stow`] put it; `None`
    /// when it is gone (a retired segment) or damaged.
    fn read_stowed(&self, _stand_in: &Entry) -> impl Future<Output = Option<Entry>> {
        async { None }
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

enum Job<R> {
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
    /// Fsync the journal behind the jobs accepted before, then answer.
    SyncJournal(oneshot::Sender<()>),
    /// The client table's clients and their sessions, after the jobs accepted before.
    Clients(oneshot::Sender<Vec<(u128, u64)>>),
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
    /// Sessions bound on this node, reported to the primary when this replica is a backup.
    ReportSessions(Vec<(u128, u64)>),
    /// A frame from a peer replica of the group.
    Peer(Inbound),
    /// The replica's clock advanced one tick.
    Tick,
}

/// A handle to a running group; cheap to clone.
pub struct GroupHandle<R> {
    jobs: mpsc::UnboundedSender<Job<R>>,
    figures: std::sync::Arc<GroupFigures>,
}

impl<R> Clone for GroupHandle<R> {
    fn clone(&self) -> Self {
        GroupHandle {
            jobs: self.jobs.clone(),
            figures: self.figures.clone(),
        }
    }
}

impl<R> GroupHandle<R> {
    /// The view and commit the group's task last published (readable from any thread).
    pub fn figures(&self) -> &GroupFigures {
        &self.figures
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

    /// Tells the group's primary which sessions are bound on this node (a backup's session
    /// heartbeat); nothing happens on the primary itself or in a group of one.
    pub fn report_sessions(&self, sessions: Vec<(u128, u64)>) {
        let _ = self.jobs.unbounded_send(Job::ReportSessions(sessions));
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
    /// Where the checkpoint goes (the core decides when).
    slots: Option<iggy_storage::checkpoint::CheckpointSlots>,
    /// The kind of group its checkpoints are timed as.
    kind: GroupKind,
    /// The replica's view and commit, published after each drive for the metrics.
    figures: std::sync::Arc<GroupFigures>,
    /// The view state's slots, beside the checkpoint's.
    view: Option<super::view_file::ViewFile>,
    /// The group's part in the replica plane, in a cluster; `None` in a group of one.
    plane: Option<GroupPlane>,
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
    ) -> Self {
        let policy = checkpointing.as_ref().map(|c| CheckpointPolicy {
            journal_bytes: c.journal_bytes,
            journal_ops: c.journal_ops,
        });
        // The view the replica last spoke in: it must never forget one across a restart.
        let (view_state, view) = match &checkpointing {
            Some(c) => {
                let dir = c.slots.dir();
                let cluster = super::cluster::node_cluster();
                match super::view_file::ViewFile::load(dir, cluster, config.replica) {
                    Ok((state, file)) => (state, Some(file)),
                    Err(error) => iggy_storage::fail_stop::fail_stop(
                        "read the view state",
                        dir,
                        &std::io::Error::other(error),
                    ),
                }
            }
            None => (ViewState::default(), None),
        };
        let plane = peers.map(GroupPlane::new);
        let created_view = plane.as_ref().and_then(GroupPlane::created_view);
        let core = match created_view {
            Some(view) if checkpoint.is_none() && entries.is_empty() && view_state.view == 0 => {
                GroupCore::format_in_view(config, view, durability, implicit_register, policy)
            }
            _ => GroupCore::open(
                config,
                checkpoint,
                entries,
                view_state,
                durability,
                implicit_register,
                policy,
            ),
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
            slots: checkpointing.map(|c| c.slots),
            figures: Default::default(),
            view,
            plane,
        };
        group.drive().await;
        group.core.release_applied_bodies();
        group.state.replayed().await;
        group
    }

    /// Takes a checkpoint when the core says one is due: the state machine makes its effects
    /// durable, the checkpoint is written, and the journal and the replica's in-memory log are
    /// emptied.
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
                let dir = self.slots.as_ref().map(|slots| slots.dir().to_path_buf());
                return tracing::error!(
                    "checkpoint in {}: state not durable: {error}",
                    dir.unwrap_or_default().display()
                );
            }
        };
        let replica = self.core.checkpoint_record(op);
        let Some(slots) = &mut self.slots else {
            return;
        };
        slots.write(&replica, &state).await;
        // Only after the checkpoint is durable: until then the journal is what a start needs.
        self.journal.reset_after_checkpoint(op).await;
        self.core.checkpointed();
        checkpoint_taken(self.kind, started.elapsed());
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
        GroupHandle { jobs, figures }
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job<S::Read>>) {
        let stopped = 'run: loop {
            let Some(mut job) = self.next_job(&mut jobs).await else {
                break None;
            };
            // Group commit: take everything already queued before driving the journal.
            loop {
                if let Some(done) = self.accept(job).await {
                    self.drive().await;
                    break 'run Some(done);
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
                self.state
                    .held_everywhere(self.core.replica().checkpoint_safe());
            }
            self.maybe_checkpoint().await;
        };
        // Jobs behind the stop fail; the journal and the state machine's files close here.
        drop(jobs);
        drop(self);
        if let Some(done) = stopped {
            let _ = done.send(());
        }
    }

    /// The next job: a request from the node, or, in a cluster, a peer's frame or a tick of
    /// the replica's clock. `None` once the node dropped every handle.
    async fn next_job(
        &mut self,
        jobs: &mut mpsc::UnboundedReceiver<Job<S::Read>>,
    ) -> Option<Job<S::Read>> {
        use futures_util::future::{Either, select};
        let Some(plane) = self.plane.as_mut() else {
            return jobs.next().await;
        };
        let woken = {
            let outside = std::pin::pin!(plane.wait());
            match select(jobs.next(), outside).await {
                Either::Left((job, _)) => return job,
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
        match job {
            Job::Read(read) => {
                // Reads observe every write accepted before them.
                self.drive().await;
                self.state.read(read).await;
            }
            Job::Write(submit) => self.core.submit(submit),
            Job::WriteAnywhere(submit) => {
                self.drive().await;
                let submit = match &mut self.plane {
                    Some(plane) => plane.forward_write(self.core.replica(), submit),
                    None => Some(submit),
                };
                if let Some(submit) = submit {
                    self.core.submit(submit);
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
                let _ = done.send(());
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
            Job::Tick => {
                if let Some(plane) = &mut self.plane {
                    plane.tick(&mut self.core);
                }
            }
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
            Job::ReportSessions(sessions) => {
                if let Some(plane) = &mut self.plane {
                    plane.report_sessions(self.core.replica(), &sessions);
                }
            }
            Job::Peer(frame) => {
                let Some(plane) = &mut self.plane else {
                    return None;
                };
                match plane.on_frame(&mut self.core, frame) {
                    Some(SessionFrame::Logout(logout)) => {
                        let body = self.state.forwarded_logout(logout.client, logout.session);
                        plane.commit_forwarded_logout(&mut self.core, logout, body);
                    }
                    Some(SessionFrame::Held { from, sessions }) => {
                        self.state.sessions_held_by_peer(from, &sessions)
                    }
                    None => {}
                }
            }
        }
        None
    }

    /// Carries out the core's steps until it has nothing left to do.
    async fn drive(&mut self) {
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
                    let entry = match self.journal.read(op).await {
                        Some(JournalEntry::Whole(entry)) => Some(entry),
                        Some(JournalEntry::Stowed(stand_in)) => {
                            self.state.read_stowed(&stand_in).await
                        }
                        None => None,
                    };
                    if entry.is_none() {
                        tracing::warn!("op {op} could not be read back for a peer");
                    }
                    self.core.read_back(op, entry);
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
                    self.core.applied(op, reply, &retired);
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
        self.figures.publish(self.core.replica());
        if let Some(plane) = &mut self.plane {
            plane.announce_commit(self.core.replica());
            plane.log_role(self.figures.role(), self.core.replica());
        }
    }

    /// The replica prepared an op the group cannot make durable (the files stop the process
    /// themselves when a write or fsync fails; this is a record they refused). Failing its
    /// waiters and accepting on would wedge the group behind an op that is never written, so
    /// the process stops like on a storage failure.
    fn stop_failed(&self, operation: &str, error: &std::io::Error) -> ! {
        let dir = self
            .slots
            .as_ref()
            .map_or(std::path::Path::new("<group>"), |slots| slots.dir());
        iggy_storage::fail_stop::fail_stop(operation, dir, error)
    }
}
