//! The I/O shell around one consensus group: an actor task owning a sans-IO `iggy_vsr::Replica`,
//! its journal and its state machine. Requests arrive by message, so the group needs no lock:
//! everything it owns is touched by its own task only.
//!
//! Requests that arrive together are prepared together and made durable with one journal
//! sync (group commit) before any of them is acknowledged.

use crate::consensus::core::{CheckpointPolicy, GroupCore, Pending, Step};
pub use crate::consensus::core::{Durability, Outcome};
use bytes::Bytes;
use futures_channel::{mpsc, oneshot};
use futures_util::StreamExt;
use iggy_vsr::{Config, Entry, Refusal};

/// Where a group's prepares are journaled.
pub trait Journal {
    /// Appends `entry` (ops are appended in order, after any truncation), with `stand_in` in
    /// place of its body when the state machine stowed the body (see [`StateMachine::stow`]).
    fn append(
        &mut self,
        entry: &Entry,
        stand_in: Option<&Bytes>,
    ) -> impl Future<Output = std::io::Result<()>>;
    /// Makes every appended entry durable.
    fn sync(&mut self) -> impl Future<Output = std::io::Result<()>>;
    /// Drops every entry above `op`.
    fn truncate_after(&mut self, op: u64) -> impl Future<Output = std::io::Result<()>>;
    /// Drops every entry: a durable checkpoint at `op` covers them all.
    fn reset_after_checkpoint(&mut self, op: u64) -> impl Future<Output = std::io::Result<()>>;
    /// Bytes the journal holds.
    fn len_bytes(&self) -> u64;
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
    /// The replica evicted `client` from its client table (a newer client needed the room).
    fn evicted(&mut self, _client: u128) {}
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
    pub path: std::path::PathBuf,
    /// Checkpoint once the journal holds this many bytes (or the replica this many bytes of
    /// op bodies in memory)...
    pub journal_bytes: u64,
    /// ...or this many ops.
    pub journal_ops: usize,
}

/// A checkpoint file: `[u32 len][replica checkpoint][u32 len][state][u64 xxh3 of all before]`.
/// Written to a temporary file, fsynced and renamed, so a crash leaves the old or the new one.
// TODO(spec): declare this record in a storage spec and generate it.
pub async fn write_checkpoint(
    path: &std::path::Path,
    replica: &[u8],
    state: &[u8],
) -> std::io::Result<()> {
    use std::hash::Hasher;
    let mut bytes = Vec::with_capacity(16 + replica.len() + state.len());
    for part in [replica, state] {
        bytes.extend_from_slice(&(part.len() as u32).to_le_bytes());
        bytes.extend_from_slice(part);
    }
    let mut hasher = twox_hash::XxHash3_64::new();
    hasher.write(&bytes);
    bytes.extend_from_slice(&hasher.finish().to_le_bytes());
    let temporary = path.with_extension("tmp");
    let compio::BufResult(written, _) = compio::fs::write(&temporary, bytes).await;
    written?;
    compio::fs::File::open(&temporary).await?.sync_all().await?;
    compio::fs::rename(&temporary, path).await?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads a checkpoint file: the replica's checkpoint and the state machine's bytes.
pub async fn read_checkpoint(
    path: &std::path::Path,
) -> std::io::Result<Option<(iggy_vsr::Checkpoint, Vec<u8>)>> {
    use std::hash::Hasher;
    let bytes = match compio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let corrupt = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("checkpoint {}: {why}", path.display()),
        )
    };
    let (body, sum) = bytes.split_at(
        bytes
            .len()
            .checked_sub(8)
            .ok_or_else(|| corrupt("truncated"))?,
    );
    let mut hasher = twox_hash::XxHash3_64::new();
    hasher.write(body);
    if hasher.finish().to_le_bytes() != sum {
        return Err(corrupt("checksum mismatch"));
    }
    let mut parts = Vec::new();
    let mut rest = body;
    for _ in 0..2 {
        let len = u32::from_le_bytes(
            rest.get(..4)
                .ok_or_else(|| corrupt("truncated"))?
                .try_into()
                .unwrap(),
        ) as usize;
        let part = rest.get(4..4 + len).ok_or_else(|| corrupt("truncated"))?;
        parts.push(part.to_vec());
        rest = &rest[4 + len..];
    }
    let state = parts.pop().expect("two parts");
    let replica =
        iggy_vsr::Checkpoint::decode(&parts[0]).map_err(|error| corrupt(&format!("{error:?}")))?;
    Ok(Some((replica, state)))
}

type Submit = Pending<oneshot::Sender<Outcome>>;

enum Job<R> {
    Write(Submit),
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
}

/// A handle to a running group; cheap to clone.
pub struct GroupHandle<R> {
    jobs: mpsc::UnboundedSender<Job<R>>,
}

impl<R> Clone for GroupHandle<R> {
    fn clone(&self) -> Self {
        GroupHandle {
            jobs: self.jobs.clone(),
        }
    }
}

impl<R> GroupHandle<R> {
    /// Submits a client request and waits for its commit (or refusal).
    pub async fn submit(&self, client: u128, request: u64, operation: u8, body: Bytes) -> Outcome {
        let (done, wait) = oneshot::channel();
        let job = Job::Write(Submit {
            client,
            request,
            operation,
            body,
            waiter: done,
        });
        if self.jobs.unbounded_send(job).is_err() {
            return Outcome::Failed;
        }
        wait.await.unwrap_or(Outcome::Failed)
    }

    /// Submits a request of one of the node's own clients, which the group numbers (above its
    /// latest committed one), and waits for its commit (or refusal).
    pub async fn submit_next(&self, client: u128, operation: u8, body: Bytes) -> Outcome {
        let (done, wait) = oneshot::channel();
        let job = Job::WriteNext {
            client,
            operation,
            body,
            done,
        };
        if self.jobs.unbounded_send(job).is_err() {
            return Outcome::Failed;
        }
        wait.await.unwrap_or(Outcome::Failed)
    }

    /// Queues a read behind the writes already submitted. False if the group stopped.
    pub fn read(&self, read: R) -> bool {
        self.jobs.unbounded_send(Job::Read(read)).is_ok()
    }

    /// Stops the group: jobs queued before this one are handled, later ones fail, and the
    /// group's files are closed when this returns. A group already stopped returns at once.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.jobs.unbounded_send(Job::Stop(done)).is_ok() {
            let _ = stopped.await;
        }
    }

    /// Whether `request` of `client` was already committed: a retry whose reply the replica
    /// replays, so checks against today's state must not refuse it.
    pub async fn already_committed(&self, client: u128, request: u64) -> bool {
        let (done, answer) = oneshot::channel();
        if self
            .jobs
            .unbounded_send(Job::Committed {
                client,
                request,
                done,
            })
            .is_err()
        {
            return false;
        }
        answer.await.unwrap_or(false)
    }
}

/// One group's task: the sans-IO core and the I/O it asks for.
pub struct Group<J: Journal, S: StateMachine> {
    core: GroupCore<oneshot::Sender<Outcome>>,
    journal: J,
    state: S,
    /// Where the checkpoint goes (the core decides when).
    checkpoint_path: Option<std::path::PathBuf>,
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
    ) -> Self {
        let policy = checkpointing.as_ref().map(|c| CheckpointPolicy {
            journal_bytes: c.journal_bytes,
            journal_ops: c.journal_ops,
        });
        let core = GroupCore::open(
            config,
            checkpoint,
            entries,
            durability,
            implicit_register,
            policy,
        );
        if let Some((committed, configured)) = core.limits_mismatch() {
            tracing::warn!(
                "{limit_name} is {configured} in the configuration, but the group of {} committed {committed} with its first op; keeping {committed}",
                checkpointing
                    .as_ref()
                    .and_then(|c| c.path.parent())
                    .map_or("a consensus group".into(), |dir| dir.display().to_string()),
            );
        }
        let mut group = Group {
            core,
            journal,
            state,
            checkpoint_path: checkpointing.map(|c| c.path),
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
        let (Some(path), Some(op)) = (
            self.checkpoint_path.clone(),
            self.core.checkpoint_due(self.journal.len_bytes()),
        ) else {
            return;
        };
        let state = match self.state.checkpoint().await {
            Ok(state) => state,
            Err(error) => {
                return tracing::error!(
                    "checkpoint {}: state not durable: {error}",
                    path.display()
                );
            }
        };
        let replica = self.core.checkpoint_record(op);
        if let Err(error) = write_checkpoint(&path, &replica, &state).await {
            // The journal still holds every op; the next attempt retries.
            return tracing::error!("checkpoint {}: {error}", path.display());
        }
        if let Err(error) = self.journal.reset_after_checkpoint(op).await {
            tracing::error!(
                "checkpoint {}: journal not emptied: {error}",
                path.display()
            );
        }
        self.core.checkpointed();
    }

    /// Spawns the group's task on the current compio runtime.
    pub fn spawn(self) -> GroupHandle<S::Read>
    where
        J: 'static,
        S: 'static,
    {
        let (jobs, receiver) = mpsc::unbounded();
        compio::runtime::spawn(self.run(receiver)).detach();
        GroupHandle { jobs }
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job<S::Read>>) {
        let stopped = 'run: loop {
            let Some(mut job) = jobs.next().await else {
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
                    Err(_) => break,
                }
            }
            self.drive().await;
            self.core.release_applied_bodies();
            self.maybe_checkpoint().await;
        };
        // Jobs behind the stop fail; the journal and the state machine's files close here.
        drop(jobs);
        drop(self);
        if let Some(done) = stopped {
            let _ = done.send(());
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
            Job::Committed {
                client,
                request,
                done,
            } => {
                self.drive().await;
                let _ = done.send(self.core.already_committed(client, request));
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
                        Err(error) => {
                            tracing::error!("op {op}: body not stored: {error}");
                            self.journal_failed();
                            continue;
                        }
                    };
                    if self
                        .journal
                        .append(&entry, stand_in.as_ref())
                        .await
                        .is_err()
                    {
                        self.journal_failed();
                        continue;
                    }
                    let must_sync = self.state.persisted(entry.operation);
                    self.core.journaled(op, must_sync);
                }
                Step::Sync => {
                    let (journal, stowed) =
                        futures_util::future::join(self.journal.sync(), self.state.sync_stowed())
                            .await;
                    if journal.is_err() || stowed.is_err() {
                        self.journal_failed();
                        continue;
                    }
                    self.core.synced();
                }
                Step::Truncate { after_op } => {
                    if self.journal.truncate_after(after_op).await.is_err()
                        || self.state.unstow_after(after_op).await.is_err()
                    {
                        self.journal_failed();
                    }
                }
                Step::Apply {
                    op,
                    client,
                    operation,
                    body,
                } => {
                    let reply = self.state.apply(op, client, operation, body).await;
                    self.core.applied(op, reply);
                }
                Step::Registered { op, client, body } => {
                    self.state.registered(op, client, &body);
                }
                Step::Evicted { client } => self.state.evicted(client),
                Step::Answer { waiter, outcome } => {
                    let _ = waiter.send(outcome);
                }
            }
        }
    }

    /// A journal write failed: nothing unsynced may be acknowledged, so every waiter fails and
    /// the group stops accepting (the operator must look at the disk).
    fn journal_failed(&mut self) {
        tracing::error!("journal write failed; failing every pending request of this group");
        self.core.failed();
    }
}
