//! A consensus group's part in the replica plane, in a cluster: its replica clock, the frames
//! it takes from and sends to its peers (through `iggy_vsr::codec` on the lossy bus), the commit
//! announcements of a primary, and forwarding (`forward`): Registers, Logouts and writes a
//! backup relays to the primary, and the sessions it reports bound on it. The group's task
//! (`group.rs`) owns one per group of more than one and calls it; a group of one has none.

use super::figures::GroupRole;
use super::forward::{Forward, is_forward};
use super::link_liveness::PeerStatus;
use super::plane::Peers;
use super::replica_bus::Inbound;
use super::replica_clock::{Lapse, ReplicaClock};
use super::transfer::{Transfer, is_transfer};
use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::StreamExt;
use iggy_generated::frames::{
    ForwardLogoutOutcome, ForwardRegisterOutcome, ForwardWriteOutcome, GenericHeader,
    METADATA_GROUP, Operation,
};
use iggy_metadata::retirement::RetirementReport;
use iggy_vsr::group::{GroupCore, Outcome, Pending};
use iggy_vsr::{Message, Refusal, Replica, Status};
use std::collections::HashMap;
use std::time::Instant;

/// Ticks a forwarded register waits for the primary's verdict (5 s at the 50 ms tick).
const FORWARD_TIMEOUT_TICKS: u64 = 100;

type Core = GroupCore<oneshot::Sender<Outcome>>;

/// What woke a group of a cluster besides its node's jobs.
pub enum Wake {
    Frame(Inbound),
    /// The group's sleep ran out: a tick is due.
    Tick,
    /// The bus is gone (the node is stopping).
    Gone,
}

/// A frame only the group's task can act on: its state machine's (the metadata group's
/// sessions, a state transfer) or a write it submits itself.
pub enum SessionFrame {
    /// A backup's Logout for the primary to commit: the state machine tells whether the
    /// session is live and builds the op's body ([`GroupPlane::commit_forwarded_logout`]).
    Logout(ForwardedLogout),
    /// Sessions `from` reports bound on it, as (client, session).
    Held {
        from: u8,
        sessions: Vec<(u128, u64)>,
    },
    /// Part of the report of ended sessions a replica's partition copies no longer hold.
    Retired(RetirementReport),
    /// A state-transfer frame from `from` (a partition group's): the group's task serves or
    /// follows it with its state machine and files.
    Transfer { from: u8, transfer: Transfer },
    /// A backup's ForwardWrite for this primary to submit as the client's own request: the
    /// group's task submits it as any write (held behind an op that changes admission).
    Write(Pending<oneshot::Sender<Outcome>>),
}

/// A Logout a backup forwarded.
#[derive(Debug, PartialEq, Eq)]
pub struct ForwardedLogout {
    pub from: u8,
    pub client: u128,
    pub nonce: u128,
    pub session: u64,
    pub request: u64,
}

pub struct GroupPlane {
    peers: Peers,
    /// The replica's clock: ticks since the group opened, and the next one due.
    clock: ReplicaClock,
    /// Forwards sent to the primary and not answered yet, by nonce.
    forwarded: HashMap<u128, Forwarded>,
    next_nonce: u128,
    /// The last prepare frame sent, by (view, commit, op, entry checksum).
    last_prepare: Option<((u32, u64, u64, u64), Bytes)>,
    /// Per replica of the group: the highest commit a frame sent to it named (a prepare, a
    /// heartbeat or an announcement), so an announcement skips a peer a prepare already told.
    told: Vec<u64>,
    /// A partition group's commit announcement waits for this tick (see `announce_commit`).
    announce_at: Option<u64>,
    /// The role last written to the log.
    logged_role: Option<GroupRole>,
    /// Frames of another incarnation of this group's id, said at most once per interval.
    other_incarnation: super::log_limit::Throttled,
}

/// How often frames of another incarnation of a group's id are said (see `on_frame`).
const OTHER_INCARNATION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl GroupPlane {
    pub fn new(peers: Peers) -> Self {
        let clock = ReplicaClock::new(peers.tick, Instant::now());
        GroupPlane {
            peers,
            clock,
            forwarded: HashMap::new(),
            // Per process: a verdict meant for a forward of an earlier run never matches.
            next_nonce: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos())
                << 32,
            last_prepare: None,
            told: Vec::new(),
            announce_at: None,
            logged_role: None,
            other_incarnation: super::log_limit::Throttled::new(OTHER_INCARNATION_INTERVAL),
        }
    }

    /// Whether the link with `peer`'s node is up and heard (see `BusSender::status`).
    pub fn peer_status(&self, peer: u8) -> PeerStatus {
        self.peers.bus.status(peer)
    }

    /// The view a group created just now formats in (see `Peers::created_view`).
    pub fn created_view(&self) -> Option<u32> {
        self.peers.created_view
    }

    /// The most bytes of a checkpoint slot one state-transfer frame carries.
    pub fn transfer_chunk_bytes(&self) -> u32 {
        self.peers.transfer_chunk_bytes
    }

    /// The next peer frame, or the replica clock's due tick.
    pub async fn wait(&mut self) -> Wake {
        use futures_util::future::{Either, select};
        let due = std::pin::pin!(compio::time::sleep_until(self.clock.wake_at()));
        match select(self.peers.inbound.next(), due).await {
            Either::Left((Some(frame), _)) => Wake::Frame(frame),
            Either::Left((None, _)) => Wake::Gone,
            Either::Right(((), _)) => Wake::Tick,
        }
    }

    /// A frame already waiting, taken with the jobs already queued (group commit).
    pub fn waiting_frame(&mut self) -> Option<Inbound> {
        self.peers.inbound.try_recv().ok()
    }

    /// Brings the replica's clock to the present as the group wakes (see
    /// [`ReplicaClock::advance`]): the core's timers, then forwards the primary never answered
    /// give up, and so do those sent to the primary of a view this replica serves no more (a
    /// primary that died or was deposed answers nothing: their clients send them again to the
    /// new one at once instead of waiting out the timeout). Whether the clock moved.
    pub fn advance(&mut self, core: &mut Core) -> bool {
        let Some(now) = self.clock.advance(Instant::now()) else {
            return false;
        };
        core.on_tick(now);
        let serving = Self::serving_view(core.replica());
        let expired: Vec<u128> = self
            .forwarded
            .iter()
            .filter(|(_, sent)| sent.deadline <= now || serving.is_some_and(|v| v > sent.view))
            .map(|(nonce, _)| *nonce)
            .collect();
        for nonce in expired {
            if let Some(sent) = self.forwarded.remove(&nonce) {
                let _ = sent.done.send(sent.unanswered.outcome());
            }
        }
        true
    }

    /// When the replica's `in_touch` lapses in real time: its evidence (a quorum's
    /// acknowledgements, the primary's last frame) is a view-change timeout before the tick
    /// it lapses at, and as old as the ticks since plus what the clock slipped since.
    pub fn in_touch_lapse(&self, replica: &Replica) -> Lapse {
        let until = replica.in_touch_until();
        let evidence = until.saturating_sub(replica.config().view_change_timeout_ticks);
        self.clock.lapse(until, evidence)
    }

    /// Sets the tick the group sleeps until: the first its replica, its forwards, its commit
    /// announcement or the shell's own work (`shell_due`: a state transfer's) is due at.
    pub fn schedule(&mut self, core: &Core, shell_due: u64) {
        let next = self.clock.ticks() + 1;
        let serving = Self::serving_view(core.replica());
        let forwards = self.forwarded.values().map(|sent| match serving {
            Some(view) if view > sent.view => next,
            _ => sent.deadline,
        });
        let due = forwards
            .chain(self.announce_at)
            .fold(core.replica().next_tick_due().min(shell_due), u64::min);
        self.clock.schedule(due);
    }

    fn serving_view(replica: &Replica) -> Option<u32> {
        (replica.status() == Status::Normal).then(|| replica.view())
    }

    /// A frame from a peer: a consensus message for the core, or a forward; a session frame
    /// the state machine must see is handed back.
    pub fn on_frame(&mut self, core: &mut Core, frame: Inbound) -> Option<SessionFrame> {
        if is_forward(frame.command) {
            return self.on_forward(core, frame);
        }
        if is_transfer(frame.command) {
            return match super::transfer::decode(&self.peers.frames, &frame) {
                Ok(transfer) => Some(SessionFrame::Transfer {
                    from: frame.from,
                    transfer,
                }),
                Err(error) => {
                    tracing::warn!(
                        "group {:#x}: {:?} from replica {}: {error}",
                        self.peers.frames.group,
                        frame.command,
                        frame.from
                    );
                    None
                }
            };
        }
        match iggy_vsr::codec::decode(&self.peers.frames, &frame) {
            Ok(message) => core.on_message(frame.from, message),
            // A partition deleted and created again under its ids while a replica was down:
            // until that replica applied both, it and its peers refuse each other's frames.
            // Expected after every such restart, so information, not a warning.
            Err(error @ iggy_vsr::codec::CodecError::Incarnation { .. }) => {
                if let Some(held_back) = self.other_incarnation.due(Instant::now()) {
                    let since = match held_back {
                        0 => String::new(),
                        n => format!("; {n} more such frames since the last line"),
                    };
                    tracing::info!(
                        "group {:#x}: frame {:?} from replica {}: {error} (a partition \
                         deleted and created again while one of the two was behind{since})",
                        self.peers.frames.group,
                        frame.command,
                        frame.from
                    );
                }
            }
            // Checked frames from an admitted peer: a mismatch here is a stale partition
            // incarnation or a bug, never worth the link.
            Err(error) => tracing::warn!(
                "group {:#x}: frame {:?} from replica {}: {error}",
                self.peers.frames.group,
                frame.command,
                frame.from
            ),
        }
        None
    }

    /// Sends the core's message to replica `to`. Lossy by design: a full queue or a down link
    /// drops the frame and the replica's timers send it again.
    pub fn send(&mut self, to: u8, message: &Message) {
        // A prepare goes to every backup in a row: its frame (a copy of the body) is built
        // once and shared.
        let key = match message {
            Message::Prepare {
                view,
                commit,
                entry,
            } => Some((*view, *commit, entry.op, entry.checksum)),
            _ => None,
        };
        if let Message::Prepare { commit, .. } | Message::Commit { commit, .. } = message {
            self.note_told(to, *commit);
        }
        let frame = match (&self.last_prepare, key) {
            (Some((last, frame)), Some(key)) if *last == key => frame.clone(),
            _ => {
                let frame = iggy_vsr::codec::encode(&self.peers.frames, message);
                if let Some(key) = key {
                    self.last_prepare = Some((key, frame.clone()));
                }
                frame
            }
        };
        if let Err(error) = self.peers.bus.send(to, frame) {
            tracing::trace!(
                "group {:#x}: {} to replica {to} dropped: {error:?}",
                self.peers.frames.group,
                message.name()
            );
        }
    }

    /// Sends a state-transfer frame to replica `to`, in `view`. Lossy like every replica frame:
    /// the transfer asks again after a timeout.
    pub fn send_transfer(&mut self, to: u8, view: u32, transfer: &Transfer) {
        let frame = super::transfer::encode(&self.peers.frames, view, transfer);
        if let Err(error) = self.peers.bus.send(to, frame) {
            tracing::debug!(
                "group {:#x}: state transfer frame to replica {to} dropped: {error:?}",
                self.peers.frames.group
            );
        }
    }

    /// A nonce no earlier frame of this process used (a forward's or a transfer's).
    pub fn next_nonce(&mut self) -> u128 {
        self.next_nonce += 1;
        self.next_nonce
    }

    /// Ticks of the replica clock since the group opened.
    pub fn ticks(&self) -> u64 {
        self.clock.ticks()
    }

    /// The group's id on the wire.
    pub fn group_id(&self) -> u64 {
        self.peers.frames.group
    }

    /// A primary tells its backups about a commit sooner than its next heartbeat (up to
    /// `commit_broadcast_interval` later), so backups apply what it committed: the metadata
    /// group at once (a new partition's group, a session a client binds next on another
    /// node); a partition group at the next tick (50 ms), since under load the next prepare
    /// carries the commit first and nothing is sent for it. A peer a frame already told is
    /// skipped. The message is the replica's own heartbeat, sent only in a view already
    /// durable here.
    pub fn announce_commit(&mut self, replica: &Replica) {
        let (view, commit) = (replica.view(), replica.commit_max());
        let leads = replica.status() == Status::Normal && replica.is_primary();
        let me = replica.replica();
        let behind: Vec<u8> = (0..replica.config().replica_count)
            .filter(|peer| *peer != me && self.told(*peer) < commit)
            .collect();
        if !leads || replica.persisted_view_state().view != view || behind.is_empty() {
            self.announce_at = None;
            return;
        }
        if self.peers.frames.group != METADATA_GROUP {
            let ticks = self.clock.ticks();
            let due = *self.announce_at.get_or_insert(ticks + 1);
            if ticks < due {
                return;
            }
        }
        self.announce_at = None;
        let announce = Message::Commit {
            view,
            commit,
            checkpoint_safe: replica.checkpoint_safe(),
        };
        let frame = iggy_vsr::codec::encode(&self.peers.frames, &announce);
        for peer in behind {
            self.note_told(peer, commit);
            let _ = self.peers.bus.send(peer, frame.clone());
        }
    }

    fn told(&self, peer: u8) -> u64 {
        self.told.get(usize::from(peer)).copied().unwrap_or(0)
    }

    fn note_told(&mut self, peer: u8, commit: u64) {
        let peer = usize::from(peer);
        if self.told.len() <= peer {
            self.told.resize(peer + 1, 0);
        }
        self.told[peer] = self.told[peer].max(commit);
    }

    /// Logs the replica's role when it changed (the first one too: operators and the cluster
    /// tests read every group's role from these lines).
    pub fn log_role(&mut self, role: GroupRole, replica: &Replica) {
        if self.logged_role.replace(role) == Some(role) {
            return;
        }
        tracing::info!(
            "group {:#x}: replica {} is {:?} in view {} (primary {}), op {}, commit {}{}{}",
            self.peers.frames.group,
            replica.replica(),
            role.status,
            replica.view(),
            role.primary,
            replica.op(),
            replica.commit_max(),
            match (role.status, role.in_touch) {
                (Status::Normal, false) => ", out of touch with its primary or quorum",
                _ => "",
            },
            match role.muted {
                true => ", restored: votes in no view change until it holds a view's log",
                false => "",
            }
        );
    }

    /// A register of a backup in normal status goes to its primary; during a view change it is
    /// refused for now (a transient refusal). Hands it back when this replica leads.
    pub fn forward_register(
        &mut self,
        replica: &Replica,
        pending: Pending<oneshot::Sender<Outcome>>,
        user_id: u32,
    ) -> Option<Pending<oneshot::Sender<Outcome>>> {
        let leads = replica.status() == Status::Normal && replica.is_primary();
        if leads {
            return Some(pending);
        }
        if replica.status() != Status::Normal {
            let _ = pending.waiter.send(Outcome::Refused(Refusal::Busy));
            return None;
        }
        self.next_nonce += 1;
        let nonce = self.next_nonce;
        let forward = Forward::Register {
            client: pending.client,
            nonce,
            user_id,
            record: pending.body,
        };
        self.send_forward(
            replica,
            &forward,
            nonce,
            pending.waiter,
            Unanswered::Refused,
        );
        None
    }

    /// A client write this replica cannot commit (it does not lead its group) goes to the
    /// primary of its view when it knows that one alive; refused for now otherwise. Hands it
    /// back when this replica leads.
    pub fn forward_write(
        &mut self,
        replica: &Replica,
        pending: Pending<oneshot::Sender<Outcome>>,
    ) -> Option<Pending<oneshot::Sender<Outcome>>> {
        self.relay(
            replica,
            pending,
            Unanswered::MayHaveCommitted,
            |pending, nonce| {
                let forward = Forward::Write {
                    client: pending.client,
                    nonce,
                    request: pending.request,
                    operation: pending.operation,
                    body: pending.body,
                };
                (forward, pending.waiter)
            },
        )
    }

    /// Hands `pending` back when this replica leads its group; otherwise sends the forward
    /// `make` builds from it (under a fresh nonce) to the primary of the view, or refuses it
    /// for now when this replica knows no primary alive. `unanswered` is what its client is
    /// told when the primary never answers.
    fn relay<R: Relayed>(
        &mut self,
        replica: &Replica,
        pending: R,
        unanswered: Unanswered,
        make: impl FnOnce(R, u128) -> (Forward, oneshot::Sender<Outcome>),
    ) -> Option<R> {
        if replica.status() == Status::Normal && replica.is_primary() {
            return Some(pending);
        }
        if replica.status() != Status::Normal || !replica.in_touch() {
            let _ = pending.into_waiter().send(Outcome::Refused(Refusal::Busy));
            return None;
        }
        self.next_nonce += 1;
        let nonce = self.next_nonce;
        let (forward, waiter) = make(pending, nonce);
        self.send_forward(replica, &forward, nonce, waiter, unanswered);
        None
    }

    /// A Logout of a backup goes to the metadata primary as the client's own request `request`
    /// of `session` (a retry is answered from the client table); refused for now when this
    /// replica knows no primary alive. Hands it back when this replica leads.
    pub fn forward_logout(
        &mut self,
        replica: &Replica,
        pending: Pending<oneshot::Sender<Outcome>>,
        session: u64,
    ) -> Option<Pending<oneshot::Sender<Outcome>>> {
        self.relay(replica, pending, Unanswered::Refused, |pending, nonce| {
            let forward = Forward::Logout {
                client: pending.client,
                nonce,
                session,
                request: pending.request,
            };
            (forward, pending.waiter)
        })
    }

    /// Asks the metadata primary what it knows committed (CommitQuestion). Refused for now
    /// when this replica knows no primary alive; handed back when it leads.
    pub fn ask_primary_commit(
        &mut self,
        replica: &Replica,
        done: oneshot::Sender<Outcome>,
    ) -> Option<oneshot::Sender<Outcome>> {
        self.relay(replica, done, Unanswered::Refused, |done, nonce| {
            (Forward::CommitQuestion { nonce }, done)
        })
    }

    /// A backup in normal status tells the primary of its view which sessions are bound on it
    /// (as (client, session)), so the primary does not expire them. No reply: a report lost
    /// is made good by the next one.
    pub fn report_sessions(&mut self, replica: &Replica, sessions: &[(u128, u64)]) {
        if replica.status() != Status::Normal || replica.is_primary() {
            return;
        }
        let view = replica.view();
        let primary = replica.primary_of(view);
        for frame in super::forward::session_heartbeats(&self.peers.frames, view, sessions) {
            if self.peers.bus.send(primary, frame).is_err() {
                tracing::debug!("a session report to replica {primary} dropped");
                return;
            }
        }
    }

    /// A backup in normal status tells the primary of its view which ended sessions none of
    /// its partition copies holds, for the partition set of its model's `revision` (the whole
    /// report, an empty one included: it replaces the previous one). No reply: the next pass
    /// reports again.
    pub fn report_retirement(
        &mut self,
        replica: &Replica,
        revision: u64,
        sessions: &[(u128, u64)],
    ) {
        if replica.status() != Status::Normal || replica.is_primary() {
            return;
        }
        let view = replica.view();
        let primary = replica.primary_of(view);
        let frames =
            super::forward::retirement_progress(&self.peers.frames, view, revision, sessions);
        for frame in frames {
            if self.peers.bus.send(primary, frame).is_err() {
                tracing::debug!("a retirement report to replica {primary} dropped");
                return;
            }
        }
    }

    /// The primary's side of a forwarded Logout: `body` is the op the state machine built for
    /// the session, `None` when that session is no longer live (ended by an earlier logout,
    /// its lease, or a retry of this one): nothing to commit, and the verdict names the
    /// commit after which it is gone.
    pub fn commit_forwarded_logout(
        &mut self,
        core: &mut Core,
        logout: ForwardedLogout,
        body: Option<Bytes>,
    ) {
        let replica = core.replica();
        let (view, commit) = (replica.view(), replica.commit_max());
        let (bus, frames) = (self.peers.bus.clone(), self.peers.frames);
        let ForwardedLogout {
            from,
            client,
            nonce,
            request,
            ..
        } = logout;
        let verdict = move |commit, outcome| {
            let result = Forward::LogoutResult {
                nonce,
                client,
                commit,
                outcome,
            };
            let _ = bus.send(from, super::forward::encode(&frames, view, &result));
        };
        if replica.status() != Status::Normal || !replica.is_primary() {
            return verdict(0, ForwardLogoutOutcome::NotPrimary);
        }
        // A primary that has not applied its view's log (after a restart of every replica,
        // the session's own Register among it) cannot tell a live session from an ended one:
        // the backup's client tries again.
        if !replica.applied_view_log() {
            return verdict(0, ForwardLogoutOutcome::InProgress);
        }
        let Some(body) = body else {
            return verdict(commit, ForwardLogoutOutcome::Ok);
        };
        let (waiter, answer) = oneshot::channel();
        core.submit(Pending {
            client,
            request,
            operation: Operation::Logout.to_repr(),
            body,
            waiter,
        });
        compio::runtime::spawn(async move {
            let (commit, outcome) = match answer.await {
                Ok(Outcome::Committed { op, .. }) => (op, ForwardLogoutOutcome::Ok),
                Ok(Outcome::Refused(refusal)) => (0, logout_refusal(&refusal)),
                Ok(Outcome::Failed) | Err(_) => (0, ForwardLogoutOutcome::Canceled),
            };
            verdict(commit, outcome)
        })
        .detach();
    }

    /// Sends `forward` to the primary of this replica's view and keeps `waiter` for its
    /// verdict (by `nonce`, until the forward times out, when it is told `unanswered`); a
    /// frame the bus refuses is a transient refusal now.
    fn send_forward(
        &mut self,
        replica: &Replica,
        forward: &Forward,
        nonce: u128,
        waiter: oneshot::Sender<Outcome>,
        unanswered: Unanswered,
    ) {
        let view = replica.view();
        let frame = super::forward::encode(&self.peers.frames, view, forward);
        if self
            .peers
            .bus
            .send(replica.primary_of(view), frame)
            .is_err()
        {
            let _ = waiter.send(Outcome::Refused(Refusal::Busy));
            return;
        }
        let sent = Forwarded {
            done: waiter,
            deadline: self.clock.ticks() + FORWARD_TIMEOUT_TICKS,
            view,
            unanswered,
        };
        self.forwarded.insert(nonce, sent);
    }

    /// The primary's side of a ForwardWrite: the request to commit as the client's own (so a
    /// retry is answered from the client table), whose verdict goes back once it is answered.
    fn commit_forwarded_write(
        &mut self,
        core: &mut Core,
        from: u8,
        write: Forward,
    ) -> Option<SessionFrame> {
        let Forward::Write {
            client,
            nonce,
            request,
            operation,
            body,
        } = write
        else {
            return None;
        };
        let replica = core.replica();
        let view = replica.view();
        let (bus, frames) = (self.peers.bus.clone(), self.peers.frames);
        let verdict = move |op, outcome, reply| {
            let result = Forward::WriteResult {
                nonce,
                op,
                outcome,
                reply,
            };
            let _ = bus.send(from, super::forward::encode(&frames, view, &result));
        };
        if replica.status() != Status::Normal || !replica.is_primary() {
            verdict(0, ForwardWriteOutcome::NotPrimary, Bytes::new());
            return None;
        }
        let (waiter, answer) = oneshot::channel();
        compio::runtime::spawn(async move {
            let (op, outcome, reply) = match answer.await {
                Ok(Outcome::Committed { op, reply }) => (op, ForwardWriteOutcome::Committed, reply),
                Ok(Outcome::Refused(refusal)) => {
                    let outcome = match refusal {
                        Refusal::NotPrimary { .. } => ForwardWriteOutcome::NotPrimary,
                        Refusal::RequestTooOld => ForwardWriteOutcome::RequestTooOld,
                        Refusal::SessionUnknown => ForwardWriteOutcome::SessionUnknown,
                        _ => ForwardWriteOutcome::Busy,
                    };
                    (0, outcome, Bytes::new())
                }
                Ok(Outcome::Failed) | Err(_) => (0, ForwardWriteOutcome::Failed, Bytes::new()),
            };
            verdict(op, outcome, reply)
        })
        .detach();
        Some(SessionFrame::Write(Pending {
            client,
            request,
            operation,
            body,
            waiter,
        }))
    }

    /// A forwarding frame: a backup's request to commit (as primary), the primary's verdict on
    /// one this replica forwarded, or a backup's session report. What only the state machine
    /// can judge is handed back.
    fn on_forward(&mut self, core: &mut Core, frame: Inbound) -> Option<SessionFrame> {
        let forward = match super::forward::decode(&self.peers.frames, &frame) {
            Ok(forward) => forward,
            Err(error) => {
                tracing::warn!(
                    "forward {:?} from replica {}: {error}",
                    frame.command,
                    frame.from
                );
                return None;
            }
        };
        match forward {
            Forward::Logout {
                client,
                nonce,
                session,
                request,
            } => {
                return Some(SessionFrame::Logout(ForwardedLogout {
                    from: frame.from,
                    client,
                    nonce,
                    session,
                    request,
                }));
            }
            Forward::CommitQuestion { nonce } => {
                let replica = core.replica();
                let leads = replica.status() == Status::Normal && replica.is_primary();
                let answer = Forward::CommitAnswer {
                    nonce,
                    commit: leads.then(|| replica.commit_max()),
                };
                let answer = super::forward::encode(&self.peers.frames, replica.view(), &answer);
                let _ = self.peers.bus.send(frame.from, answer);
            }
            Forward::CommitAnswer { nonce, commit } => {
                let outcome = match commit {
                    Some(op) => Outcome::Committed {
                        op,
                        reply: Bytes::new(),
                    },
                    // The primary moved: the client tries again.
                    None => Outcome::Refused(Refusal::Busy),
                };
                self.answer_forward(nonce, outcome);
            }
            Forward::SessionHeartbeat { sessions, .. } => {
                // Only the metadata primary expires sessions; it alone needs to know.
                let replica = core.replica();
                if replica.status() == Status::Normal && replica.is_primary() {
                    return Some(SessionFrame::Held {
                        from: frame.from,
                        sessions,
                    });
                }
            }
            Forward::RetirementProgress {
                revision,
                incomplete,
                sessions,
            } => {
                // Only the metadata primary releases slots; a report counts in the view it was
                // sent in (the evidence drops another).
                let replica = core.replica();
                let sent_in = GenericHeader::decode_fixed(&frame.header[..]).map(|h| h.view);
                if let (true, Ok(view)) = (
                    replica.status() == Status::Normal && replica.is_primary(),
                    sent_in,
                ) {
                    return Some(SessionFrame::Retired(RetirementReport {
                        replica: frame.from,
                        view: u64::from(view),
                        revision,
                        sessions,
                        incomplete,
                    }));
                }
            }
            Forward::LogoutResult {
                nonce,
                commit,
                outcome,
                ..
            } => self.answer_forward(nonce, logout_outcome(commit, outcome)),
            write @ Forward::Write { .. } => {
                return self.commit_forwarded_write(core, frame.from, write);
            }
            Forward::WriteResult {
                nonce,
                op,
                outcome,
                reply,
            } => self.answer_forward(nonce, write_outcome(op, outcome, reply)),
            Forward::Register {
                client,
                nonce,
                user_id: _,
                record,
            } => {
                let replica = core.replica();
                let view = replica.view();
                let (bus, frames, backup) = (self.peers.bus.clone(), self.peers.frames, frame.from);
                let verdict = move |session, outcome| {
                    let result = Forward::RegisterResult {
                        nonce,
                        client,
                        session,
                        outcome,
                    };
                    let _ = bus.send(backup, super::forward::encode(&frames, view, &result));
                };
                if replica.status() != Status::Normal || !replica.is_primary() {
                    verdict(0, ForwardRegisterOutcome::NotPrimary);
                    return None;
                }
                let (waiter, answer) = oneshot::channel();
                core.submit(Pending {
                    client,
                    request: 0,
                    operation: iggy_vsr::OPERATION_REGISTER,
                    body: record,
                    waiter,
                });
                compio::runtime::spawn(async move {
                    let outcome = match answer.await {
                        Ok(Outcome::Committed { op, .. }) => (op, ForwardRegisterOutcome::Ok),
                        Ok(Outcome::Refused(Refusal::NotPrimary { .. })) => {
                            (0, ForwardRegisterOutcome::NotPrimary)
                        }
                        Ok(Outcome::Refused(_)) => (0, ForwardRegisterOutcome::PipelineFull),
                        Ok(Outcome::Failed) | Err(_) => (0, ForwardRegisterOutcome::Canceled),
                    };
                    verdict(outcome.0, outcome.1)
                })
                .detach();
            }
            Forward::RegisterResult {
                nonce,
                session,
                outcome,
                ..
            } => self.answer_forward(nonce, register_outcome(session, outcome)),
        }
        None
    }

    /// Hands the primary's verdict to whoever waits for forward `nonce`; a verdict for a
    /// forward that already timed out (or of an earlier run) finds nobody.
    fn answer_forward(&mut self, nonce: u128, outcome: Outcome) {
        if let Some(sent) = self.forwarded.remove(&nonce) {
            let _ = sent.done.send(outcome);
        }
    }
}

/// A forward waiting for its primary's verdict.
struct Forwarded {
    /// Whoever waits for the verdict.
    done: oneshot::Sender<Outcome>,
    /// The tick it gives up at.
    deadline: u64,
    /// The view whose primary it went to.
    view: u32,
    /// What its client is told when no verdict comes.
    unanswered: Unanswered,
}

/// What a forward's client is told when the primary never answered within
/// `FORWARD_TIMEOUT_TICKS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unanswered {
    /// Refused for now (58): a register or logout the client makes again is harmless.
    Refused,
    /// Uncertain (the primary may have committed it and lost only the verdict): a write the
    /// client must replay under the same request number, never resend as a new one (the HTTP
    /// client resends a 503 as a new request, which would write twice).
    MayHaveCommitted,
}

impl Unanswered {
    fn outcome(self) -> Outcome {
        match self {
            Unanswered::Refused => Outcome::Refused(Refusal::Busy),
            Unanswered::MayHaveCommitted => Outcome::Failed,
        }
    }
}

/// What the relaying replica's client is told of the primary's verdict on its write.
fn write_outcome(op: u64, outcome: ForwardWriteOutcome, reply: Bytes) -> Outcome {
    match outcome {
        ForwardWriteOutcome::Committed => Outcome::Committed { op, reply },
        ForwardWriteOutcome::RequestTooOld => Outcome::Refused(Refusal::RequestTooOld),
        ForwardWriteOutcome::SessionUnknown => Outcome::Refused(Refusal::SessionUnknown),
        ForwardWriteOutcome::Failed => Outcome::Failed,
        // The primary moved or is busy: the client tries again.
        ForwardWriteOutcome::NotPrimary | ForwardWriteOutcome::Busy => {
            Outcome::Refused(Refusal::Busy)
        }
    }
}

/// What the backup's client is told of the primary's verdict on its Register.
fn register_outcome(session: u64, outcome: ForwardRegisterOutcome) -> Outcome {
    match outcome {
        ForwardRegisterOutcome::Ok => Outcome::Committed {
            op: session,
            reply: Bytes::copy_from_slice(&session.to_le_bytes()),
        },
        ForwardRegisterOutcome::Unauthenticated => Outcome::Refused(Refusal::SessionUnknown),
        // The primary moved or is busy: the client tries again.
        _ => Outcome::Refused(Refusal::Busy),
    }
}

/// The verdict a primary sends for a forwarded Logout its core refused.
fn logout_refusal(refusal: &Refusal) -> ForwardLogoutOutcome {
    match refusal {
        Refusal::NotPrimary { .. } | Refusal::NotReady => ForwardLogoutOutcome::NotPrimary,
        Refusal::RequestTooOld => ForwardLogoutOutcome::RequestTooOld,
        Refusal::Busy | Refusal::ClientsTableFull => ForwardLogoutOutcome::PipelineFull,
        // The client table holds no such client: its session was retired.
        Refusal::SessionUnknown => ForwardLogoutOutcome::Canceled,
        #[allow(unreachable_patterns)]
        _ => ForwardLogoutOutcome::PipelineFull,
    }
}

/// What the backup's client is told of the primary's verdict on its Logout.
fn logout_outcome(commit: u64, outcome: ForwardLogoutOutcome) -> Outcome {
    match outcome {
        ForwardLogoutOutcome::Ok => Outcome::Committed {
            op: commit,
            reply: Bytes::new(),
        },
        ForwardLogoutOutcome::RequestTooOld | ForwardLogoutOutcome::OperationMismatch => {
            Outcome::Refused(Refusal::RequestTooOld)
        }
        // The session is gone on the primary: as on a single node, the client must register
        // again (retrying the logout could only meet the same verdict).
        ForwardLogoutOutcome::Canceled => Outcome::Refused(Refusal::SessionUnknown),
        // The primary moved, is busy or has it in flight: the client tries again.
        ForwardLogoutOutcome::NotPrimary
        | ForwardLogoutOutcome::PipelineFull
        | ForwardLogoutOutcome::InProgress => Outcome::Refused(Refusal::Busy),
    }
}

/// What [`GroupPlane::relay`] carries to the primary: a client's request, or a question that
/// is none (the commit question), each with the waiter its verdict goes to.
trait Relayed {
    fn into_waiter(self) -> oneshot::Sender<Outcome>;
}

impl Relayed for Pending<oneshot::Sender<Outcome>> {
    fn into_waiter(self) -> oneshot::Sender<Outcome> {
        self.waiter
    }
}

impl Relayed for oneshot::Sender<Outcome> {
    fn into_waiter(self) -> oneshot::Sender<Outcome> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::group::refusal_error;
    use iggy_generated::errors::ErrorCode;

    /// The error a client gets for a Logout it sent to a backup, refused by the primary's core
    /// with `refusal`.
    fn forwarded(refusal: Refusal) -> ErrorCode {
        match logout_outcome(7, logout_refusal(&refusal)) {
            Outcome::Refused(refusal) => refusal_error(&refusal),
            other => panic!("{refusal:?} came back as {other:?}"),
        }
    }

    #[test]
    fn a_forwarded_logout_refused_by_the_primary_gets_the_error_a_single_node_gives() {
        for refusal in [
            Refusal::SessionUnknown,
            Refusal::RequestTooOld,
            Refusal::Busy,
        ] {
            assert_eq!(
                forwarded(refusal.clone()),
                refusal_error(&refusal),
                "{refusal:?}"
            );
        }
        // The backup cannot name the primary: the client pauses and tries again (58), rather
        // than looking for a newer view (89).
        let moved = [
            Refusal::NotReady,
            Refusal::ClientsTableFull,
            Refusal::NotPrimary {
                view: 3,
                primary: 1,
            },
        ];
        for refusal in moved {
            assert_eq!(forwarded(refusal), ErrorCode::TransientNotAccepted);
        }
        let committed = logout_outcome(7, ForwardLogoutOutcome::Ok);
        assert!(matches!(committed, Outcome::Committed { op: 7, .. }));
    }

    #[test]
    fn an_unanswered_write_forward_is_uncertain_and_an_unanswered_session_forward_refused() {
        // A write the primary may have committed: 57, replayed under its number, never 58.
        assert_eq!(Unanswered::MayHaveCommitted.outcome(), Outcome::Failed);
        assert_eq!(
            Unanswered::Refused.outcome(),
            Outcome::Refused(Refusal::Busy)
        );
        assert_eq!(
            refusal_error(&Refusal::Busy),
            ErrorCode::TransientNotAccepted
        );
    }

    #[test]
    fn a_forwarded_write_or_register_verdict_maps_to_what_its_client_is_told() {
        let reply = Bytes::from_static(b"reply");
        assert_eq!(
            write_outcome(9, ForwardWriteOutcome::Committed, reply.clone()),
            Outcome::Committed { op: 9, reply }
        );
        for (verdict, refusal) in [
            (ForwardWriteOutcome::RequestTooOld, Refusal::RequestTooOld),
            (ForwardWriteOutcome::SessionUnknown, Refusal::SessionUnknown),
            (ForwardWriteOutcome::NotPrimary, Refusal::Busy),
            (ForwardWriteOutcome::Busy, Refusal::Busy),
        ] {
            assert_eq!(
                write_outcome(9, verdict, Bytes::new()),
                Outcome::Refused(refusal)
            );
        }
        assert_eq!(
            write_outcome(9, ForwardWriteOutcome::Failed, Bytes::new()),
            Outcome::Failed
        );
        assert_eq!(
            register_outcome(4, ForwardRegisterOutcome::Ok),
            Outcome::Committed {
                op: 4,
                reply: Bytes::copy_from_slice(&4u64.to_le_bytes())
            }
        );
        assert_eq!(
            register_outcome(4, ForwardRegisterOutcome::Unauthenticated),
            Outcome::Refused(Refusal::SessionUnknown)
        );
    }
}
