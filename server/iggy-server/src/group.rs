//! The I/O shell around one consensus group: an actor task owning a sans-IO `iggy_vsr::Replica`,
//! its journal and its state machine. Requests arrive by message, so the group needs no lock:
//! everything it owns is touched by its own task only.
//!
//! Requests that arrive together are prepared together and made durable with one journal
//! sync (group commit) before any of them is acknowledged.

use bytes::Bytes;
use futures_channel::{mpsc, oneshot};
use futures_util::StreamExt;
use iggy_vsr::{Action, Config, Entry, OPERATION_REGISTER, Refusal, Replica};
use std::collections::HashMap;

/// Where a group's prepares are journaled.
pub trait Journal {
    /// Appends `entry` (ops are appended in order, after any truncation).
    fn append(&mut self, entry: &Entry) -> impl Future<Output = std::io::Result<()>>;
    /// Makes every appended entry durable.
    fn sync(&mut self) -> impl Future<Output = std::io::Result<()>>;
    /// Drops every entry above `op`.
    fn truncate_after(&mut self, op: u64) -> impl Future<Output = std::io::Result<()>>;
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
    /// Serves a read.
    fn read(&mut self, read: Self::Read) -> impl Future<Output = ()>;
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

/// The answer to a submitted write.
#[derive(Debug, Clone)]
pub enum Outcome {
    Committed {
        op: u64,
        reply: Bytes,
    },
    Refused(Refusal),
    /// The journal failed; nothing was acknowledged.
    Failed,
}

struct Submit {
    client: u128,
    request: u64,
    operation: u8,
    body: Bytes,
    done: oneshot::Sender<Outcome>,
}

enum Job<R> {
    Write(Submit),
    Read(R),
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
            done,
        });
        if self.jobs.unbounded_send(job).is_err() {
            return Outcome::Failed;
        }
        wait.await.unwrap_or(Outcome::Failed)
    }

    /// Queues a read behind the writes already submitted. False if the group stopped.
    pub fn read(&self, read: R) -> bool {
        self.jobs.unbounded_send(Job::Read(read)).is_ok()
    }
}

/// Durability of acknowledged writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Journaled (written to the OS) before the reply; survives a process crash.
    Replicated,
    /// Journal fsynced before the reply; survives a machine crash.
    Persisted,
}

/// One group's task state.
pub struct Group<J: Journal, S: StateMachine> {
    replica: Replica,
    journal: J,
    state: S,
    durability: Durability,
    waiting: HashMap<(u128, u64), Vec<oneshot::Sender<Outcome>>>,
    /// Requests held back until their client's implicit register commits.
    registering: HashMap<u128, Vec<Submit>>,
    /// Whether this group registers unknown clients itself (partition groups do; the metadata
    /// group registers them through an explicit login).
    implicit_register: bool,
}

impl<J: Journal, S: StateMachine> Group<J, S> {
    /// Opens the group over its recovered journal prefix and replays it into `state`.
    pub async fn open(
        config: Config,
        journal: J,
        entries: Vec<Entry>,
        state: S,
        durability: Durability,
        implicit_register: bool,
    ) -> Self {
        let nonce = entries.len() as u64 + 1;
        let replica = Replica::open(config, entries, nonce);
        let mut group = Group {
            replica,
            journal,
            state,
            durability,
            waiting: HashMap::new(),
            registering: HashMap::new(),
            implicit_register,
        };
        group.drive().await;
        group
    }

    pub fn state(&self) -> &S {
        &self.state
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
        while let Some(job) = jobs.next().await {
            self.accept(job).await;
            // Group commit: take everything already queued before driving the journal.
            while let Ok(Some(job)) = jobs.try_next() {
                self.accept(job).await;
            }
            self.drive().await;
        }
    }

    async fn accept(&mut self, job: Job<S::Read>) {
        match job {
            Job::Read(read) => {
                // Reads observe every write accepted before them.
                self.drive().await;
                self.state.read(read).await;
            }
            Job::Write(submit) => self.on_submit(submit),
        }
    }

    fn on_submit(&mut self, submit: Submit) {
        let known = self.replica.clients().get(submit.client).is_some();
        if self.implicit_register && !known && submit.operation != OPERATION_REGISTER {
            let queue = self.registering.entry(submit.client).or_default();
            if queue.is_empty() {
                self.replica
                    .on_request(submit.client, 0, OPERATION_REGISTER, Bytes::new());
            }
            queue.push(submit);
            return;
        }
        self.forward(submit);
    }

    fn forward(&mut self, submit: Submit) {
        let Submit {
            client,
            request,
            operation,
            body,
            done,
        } = submit;
        self.waiting
            .entry((client, request))
            .or_default()
            .push(done);
        self.replica.on_request(client, request, operation, body);
    }

    /// Executes the replica's actions until it has nothing left to do.
    async fn drive(&mut self) {
        let mut unsynced = Vec::new();
        let mut must_sync = false;
        loop {
            let Some(action) = self.replica.poll_action() else {
                if unsynced.is_empty() {
                    return;
                }
                let sync = must_sync || self.durability == Durability::Persisted;
                must_sync = false;
                if sync && self.journal.sync().await.is_err() {
                    return self.journal_failed();
                }
                for op in unsynced.drain(..) {
                    self.replica.on_write_done(op);
                }
                continue;
            };
            match action {
                Action::WritePrepare { op, entry } => {
                    if self.journal.append(&entry).await.is_err() {
                        return self.journal_failed();
                    }
                    must_sync |= self.state.persisted(entry.operation);
                    unsynced.push(op);
                }
                Action::TruncateJournal { after_op } => {
                    if self.journal.truncate_after(after_op).await.is_err() {
                        return self.journal_failed();
                    }
                }
                Action::Commit {
                    op,
                    client,
                    operation,
                    body,
                    ..
                } => {
                    let reply = self.state.apply(op, client, operation, body).await;
                    self.replica.on_committed_reply(op, reply);
                }
                Action::Registered { op, client, body } => {
                    self.state.registered(op, client, &body);
                    if let Some(held) = self.registering.remove(&client) {
                        for submit in held {
                            self.forward(submit);
                        }
                    }
                }
                Action::Reply {
                    client,
                    request,
                    op,
                    reply,
                } => {
                    self.answer(client, request, Outcome::Committed { op, reply });
                }
                Action::Refuse {
                    client,
                    request,
                    refusal,
                } => {
                    if let Some(held) = self.registering.remove(&client) {
                        for submit in held {
                            let _ = submit.done.send(Outcome::Refused(refusal.clone()));
                        }
                    }
                    self.answer(client, request, Outcome::Refused(refusal));
                }
                // A group of one has no peers.
                Action::Send { .. } => {}
                Action::Evicted { client } => {
                    self.state.evicted(client);
                    for submit in self.registering.remove(&client).unwrap_or_default() {
                        let _ = submit.done.send(Outcome::Refused(Refusal::SessionUnknown));
                    }
                }
            }
        }
    }

    fn answer(&mut self, client: u128, request: u64, outcome: Outcome) {
        if let Some(waiters) = self.waiting.remove(&(client, request)) {
            for waiter in waiters {
                let _ = waiter.send(outcome.clone());
            }
        }
    }

    /// A journal write failed: nothing unsynced may be acknowledged, so every waiter fails and
    /// the group stops accepting (the operator must look at the disk).
    fn journal_failed(&mut self) {
        tracing::error!("journal write failed; failing every pending request of this group");
        for (_, waiters) in self.waiting.drain() {
            for waiter in waiters {
                let _ = waiter.send(Outcome::Failed);
            }
        }
    }
}
