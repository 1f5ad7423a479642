//! A simulated cluster: replicas, clients, faulty network and storage, and the checkers. Each
//! node runs the server's own [`GroupCore`] (the replica with its waiting requests, group-commit
//! syncs and retirements) and performs its steps as the server's shell does, on virtual time,
//! over a state machine and its clients ([`Workload`]: the model machine by default, or a real
//! one such as the partition's in the `iggy-sim` crate).

use super::Rng;
use super::machine::{Machine, ModelWorkload, NodeView, Workload};
use super::packet::{PacketOptions, PacketSimulator};
use super::storage::Storage;
use crate::checkpoint::Checkpoint;
use crate::codec::{self, CodecError, FrameContext, Inbound};
use crate::group::{CheckpointPolicy, Durability, GroupCore, JournalBound, Outcome, Pending, Step};
use crate::message::{Entry, Message, OPERATION_REGISTER, ReplicaId};
use crate::replica::{Config, LeadingStalled, ReadBack, Refusal, Replica, Status};
use crate::view_state::ViewState;
use bytes::Bytes;
use iggy_generated::frames::Command;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The most ticks a state transfer's copy of a peer's checkpoint takes (a couple of view-change
/// timeouts): long enough for the group to checkpoint and retire again meanwhile.
const COPY_TICKS_MAX: u64 = 120;

/// A state transfer's copy under way: the peer's checkpoint (and state) chosen when it began,
/// installed once the copy's virtual time has passed, over what the peer's machine holds then
/// (the group went on meanwhile, and may have retired past the state's end: the machine
/// refuses the transfer, `Overtaken` in the server, and a newer checkpoint is copied).
struct Copying {
    peer: usize,
    checkpoint: Checkpoint,
    state: Vec<u8>,
    done_at: u64,
}

/// A packet on the simulated network.
#[derive(Clone, Debug)]
enum Packet {
    Replica {
        from: ReplicaId,
        to: ReplicaId,
        message: Message,
    },
    /// A replica message as the replica codec wrote it ([`Cluster::with_frames`]).
    Frame {
        from: ReplicaId,
        to: ReplicaId,
        frame: Bytes,
    },
    Request {
        to: ReplicaId,
        client: u128,
        request: u64,
        operation: u8,
        body: Bytes,
    },
    Response {
        client: u128,
        request: u64,
        outcome: Outcome,
    },
}

#[derive(Debug)]
struct Client {
    /// Current client id: a new one per session, since a retired session's requests may or
    /// may not have executed and must not be retried under a later session.
    id: u128,
    /// Id of the first session; later sessions add `incarnation << 64`.
    base_id: u128,
    incarnation: u64,
    /// Request number within the current session (0: registering).
    request: u64,
    /// Whether the request in flight is the session's logout.
    logging_out: bool,
    /// Requests (numbers 1 and up) answered, over every session.
    completed: u64,
    requests_total: u64,
    target: ReplicaId,
    sent_at: Option<u64>,
    retry_at: u64,
}

/// What a node's core waits on: the client request it answers.
type Waiter = (u128, u64);

struct Node<M> {
    core: Option<GroupCore<Waiter>>,
    /// The core asked for a sync that the storage has not finished yet.
    sync_pending: bool,
    /// The view state the core asked to persist, until the storage has written it.
    view_pending: Option<ViewState>,
    storage: Storage,
    /// The state machine and whatever it keeps beside the journal.
    machine: M,
    restart_at: u64,
    checked_commit: u64,
    /// Left the group for good (its node's shell discarded the replica and its files): no
    /// checker waits for it to hold anything.
    discarded: bool,
    /// With [`Cluster::with_slow_effects`]: applied ops whose effects still run, in op order,
    /// with the tick they are done at.
    effects: VecDeque<(u64, u64)>,
}

/// Outcome summary of one seed.
#[derive(Debug)]
pub struct Summary {
    /// Ops committed (canonical log length).
    pub committed: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Ticks simulated.
    pub ticks: u64,
    /// Highest view reached by any replica.
    pub view_max: u32,
    /// Checkpoints taken (over all replicas).
    pub checkpoints: u64,
    /// Client sessions retired by a committed logout (canonical).
    pub retirements: u64,
    /// Registers refused because the client table was full.
    pub refused_full: u64,
    /// Restarts of every replica at once.
    pub restarts_all: u64,
    /// View states persisted (over all replicas).
    pub views_persisted: u64,
    /// Released entries read back from storage for a peer (over all replicas).
    pub read_backs: u64,
    /// With a preferred primary: whether another replica led at the end of the load and
    /// handed the group back to it.
    pub handed_back: bool,
    /// The most views any replica climbed while cut off from every other node (counted from
    /// its view when the cut began, or when it restarted during the cut).
    pub cut_off_view_rise_max: u32,
    /// With state transfer: checkpoints taken above the op every replica was known to hold
    /// (over all replicas), and transfers installed.
    pub checkpoints_past_laggards: u64,
    pub state_transfers: u64,
    /// Transfers a machine could not complete over the chosen peer (it retired past the
    /// offered state's end), tried again later.
    pub transfers_refused: u64,
    /// Views a replica due to lead gave up at once, unable to start them (see
    /// `Replica::cannot_lead`); view changes whose primary instead timed out, fetching bodies
    /// after a holder found one it was asked for retired, or needing state transfer.
    pub views_given_up: u64,
    pub fetches_timed_out_on_retired: u64,
    pub views_timed_out_for_transfer: u64,
    /// With [`Cluster::with_stale_acks`]: acknowledgements of another log sent to primaries.
    pub stale_acks: u64,
    /// With [`Cluster::with_slow_effects`]: ops applied with effects that ran for ticks after
    /// (over all replicas).
    pub slow_effects: u64,
}

/// The simulated world for one seed.
pub struct Cluster<W: Workload = ModelWorkload> {
    seed: u64,
    rng: Rng,
    now: u64,
    replica_count: u8,
    nodes: Vec<Node<W::Machine>>,
    /// The clients' requests and the state machine's checker.
    workload: W,
    clients: Vec<Client>,
    network: PacketSimulator<Packet>,
    /// Canonical committed log: op → (entry, reply).
    canonical: BTreeMap<u64, (Entry, Bytes)>,
    crashes: u64,
    restarts: u64,
    faults: bool,
    /// Per replica: tick until which it is cut off from every other node.
    isolated_until: Vec<u64>,
    /// Per replica while cut off: its view when the cut began (or when it restarted during it).
    cut_off_view: Vec<Option<u32>>,
    cut_off_view_rise_max: u32,
    /// A long cut of one replica, if any: (replica, first tick, last tick). Long enough for many
    /// view-change timeouts, so a replica that raised its view on every timeout would run away.
    long_cut_off: Option<(usize, u64, u64)>,
    clients_table_max: usize,
    /// The replica the group prefers as its primary, if any.
    preferred_primary: Option<ReplicaId>,
    /// Checkpoint once this many ops are committed above the previous checkpoint.
    checkpoint_every: u64,
    /// With a small client table: a session logs out after this many requests, freeing its
    /// slot for a waiting client.
    logout_every: Option<u64>,
    /// Per checkpoint op: the encoded checkpoint; identical on every replica.
    checkpoints: BTreeMap<u64, Vec<u8>>,
    /// Checkpoints taken, sessions retired and registers refused at capacity.
    checkpoints_taken: u64,
    retired_total: u64,
    refused_full: u64,
    /// The tick at which every replica crashes at once (losing unsynced writes), if any.
    restart_all_at: Option<u64>,
    /// Per tick, the chance in percent that a replica with journal writes in flight crashes
    /// (besides the random crashes), so crashes meet unsynced writes often.
    crash_writing_percent: u64,
    restarts_all: u64,
    views_persisted: u64,
    read_backs: u64,
    /// With state transfer ([`Cluster::with_state_transfer`]): the journal bound past which a
    /// replica checkpoints without a laggard, which then takes a peer's checkpoint whole.
    past_laggards: Option<JournalBound>,
    checkpoints_past_laggards: u64,
    state_transfers: u64,
    transfers_refused: u64,
    /// With state transfer: per replica, the copy of a peer's checkpoint under way.
    copies: Vec<Option<Copying>>,
    /// Views in which a backup found a body the new primary asked it for retired.
    fetch_retired_views: BTreeSet<u32>,
    /// Per (replica, view) whose primary asked to leave it unstarted: why it had not started.
    views_abandoned: BTreeMap<(usize, u32), LeadingStalled>,
    /// Crashes, restarts and cuts come from the node shell hosting this group
    /// ([`Cluster::faults_from_shell`]), never from the cluster's own fault stream.
    shell_faults: bool,
    /// The group is gone (its partition deleted): its clients stop asking.
    clients_abandoned: bool,
    /// With [`Cluster::with_stale_acks`]: the stream of acks of another log, and how many
    /// reached a primary.
    stale_acks: Option<Rng>,
    stale_acks_sent: u64,
    /// With [`Cluster::with_frames`]: the group's frame context (its `sender` set per
    /// replica), and the frames that reached a node where this group's replica does not run, as
    /// (from, to, frame), for the shell to route by the group's ids ([`Cluster::take_unhosted`]).
    frames: Option<FrameContext>,
    unhosted: Vec<(ReplicaId, ReplicaId, Bytes)>,
    /// With [`Cluster::with_slow_effects`]: the stream deciding which applied ops have effects
    /// and for how long (its own, so the fault stream stays as it was), the percent of ops
    /// that have some and the most ticks they run; and how many ran.
    slow_effects: Option<(Rng, u64, u64)>,
    slow_effects_applied: u64,
}

impl Cluster<ModelWorkload> {
    /// A cluster of `replica_count` replicas and `client_count` clients for `seed`, over the
    /// model state machine.
    pub fn new(seed: u64, replica_count: u8, client_count: u8, requests_per_client: u64) -> Self {
        Cluster::with_workload(
            seed,
            replica_count,
            client_count,
            requests_per_client,
            ModelWorkload,
        )
    }
}

impl<W: Workload> Cluster<W> {
    /// A cluster of `replica_count` replicas and `client_count` clients for `seed`, whose
    /// requests, state machines and their checks come from `workload`.
    pub fn with_workload(
        seed: u64,
        replica_count: u8,
        client_count: u8,
        requests_per_client: u64,
        workload: W,
    ) -> Self {
        // Configuration choices come from their own stream so the fault stream stays as it was.
        let mut choices = Rng::new(seed ^ 0x00c0_ffee);
        let clients_table_max = if choices.chance(30) {
            usize::from(client_count.max(2) - 1)
        } else {
            64
        };
        let checkpoint_every = 2 + choices.below(12);
        let logout_every =
            (clients_table_max < usize::from(client_count)).then(|| 1 + choices.below(6));
        let restart_all_at = choices.chance(50).then(|| 100 + choices.below(1_200));
        let long_cut_off = choices.chance(40).then(|| {
            let start = 50 + choices.below(700);
            let replica = choices.below(u64::from(replica_count)) as usize;
            (replica, start, start + 300 + choices.below(400))
        });
        // Half the groups prefer a primary (as a partition prefers its creation view's), which
        // whoever else leads hands the group back to once it is caught up.
        let preferred_primary = (replica_count > 1 && choices.chance(50))
            .then(|| choices.below(u64::from(replica_count)) as ReplicaId);
        let mut rng = Rng::new(seed);
        let options = PacketOptions {
            drop_percent: rng.below(10),
            duplicate_percent: rng.below(10),
            delay_min_ticks: 1,
            delay_max_ticks: 1 + rng.below(6),
        };
        let nodes = (0..replica_count)
            .map(|replica| Node {
                core: Some(GroupCore::format(
                    config(replica_count, replica, clients_table_max, preferred_primary),
                    Durability::Persisted,
                    false,
                    Some(checkpoint_policy(checkpoint_every)),
                )),
                sync_pending: false,
                view_pending: None,
                storage: Storage::default(),
                machine: workload.machine(replica_count, replica),
                restart_at: 0,
                checked_commit: 0,
                discarded: false,
                effects: VecDeque::new(),
            })
            .collect();
        let clients = (0..client_count)
            .map(|index| Client {
                id: 1000 + u128::from(index),
                base_id: 1000 + u128::from(index),
                incarnation: 0,
                request: 0,
                logging_out: false,
                completed: 0,
                requests_total: requests_per_client,
                target: 0,
                sent_at: None,
                retry_at: 0,
            })
            .collect();
        Cluster {
            seed,
            rng,
            now: 0,
            replica_count,
            nodes,
            workload,
            clients,
            network: PacketSimulator::new(options),
            canonical: BTreeMap::new(),
            crashes: 0,
            restarts: 0,
            faults: true,
            isolated_until: vec![0; usize::from(replica_count)],
            cut_off_view: vec![None; usize::from(replica_count)],
            cut_off_view_rise_max: 0,
            long_cut_off,
            clients_table_max,
            preferred_primary,
            checkpoint_every,
            logout_every,
            checkpoints: BTreeMap::new(),
            checkpoints_taken: 0,
            retired_total: 0,
            refused_full: 0,
            restart_all_at,
            crash_writing_percent: 0,
            restarts_all: 0,
            views_persisted: 0,
            read_backs: 0,
            past_laggards: None,
            checkpoints_past_laggards: 0,
            state_transfers: 0,
            transfers_refused: 0,
            copies: (0..replica_count).map(|_| None).collect(),
            fetch_retired_views: BTreeSet::new(),
            views_abandoned: BTreeMap::new(),
            shell_faults: false,
            stale_acks: None,
            stale_acks_sent: 0,
            clients_abandoned: false,
            frames: None,
            unhosted: Vec::new(),
            slow_effects: None,
            slow_effects_applied: 0,
        }
    }

    /// The same world as one group of several on each node ([`Cluster::faults_from_shell`]),
    /// where a replica exists only once its node's shell creates it: every replica starts
    /// absent (no core, no files) until [`Cluster::format_replica`], at tick `now`,
    /// preferring `preferred_primary` as its leader.
    pub fn hosted_by_shell(mut self, now: u64, preferred_primary: Option<ReplicaId>) -> Self {
        self = self.faults_from_shell();
        self.now = now;
        self.preferred_primary = preferred_primary;
        for index in 0..self.nodes.len() {
            self.absent(index);
            self.nodes[index].discarded = false;
        }
        self
    }

    /// The same world where crashes, restarts and cuts come only from the shell of the nodes
    /// that host this group beside others ([`Cluster::crash_replica`],
    /// [`Cluster::reopen_replica`], [`Cluster::cut_off`]), so one node's fault reaches every
    /// group it hosts; the network still drops, duplicates and reorders by the group's seed.
    pub fn faults_from_shell(mut self) -> Self {
        self.shell_faults = true;
        self.restart_all_at = None;
        self.long_cut_off = None;
        self.crash_writing_percent = 0;
        self
    }

    /// Replica `index` with no core and no files, which only the shell brings back.
    fn absent(&mut self, index: usize) {
        let machine = self.workload.machine(self.replica_count, index as u8);
        let node = &mut self.nodes[index];
        node.core = None;
        node.sync_pending = false;
        node.view_pending = None;
        node.storage = Storage::default();
        node.machine = machine;
        node.restart_at = u64::MAX;
        node.checked_commit = 0;
        node.effects.clear();
        self.cancel_copies_from(index);
    }

    /// The shell creates replica `index` with new files (its node applied the op that created
    /// the group, or opens it over no files): an empty log in `view`, in normal status.
    pub fn format_replica(&mut self, index: usize, view: u32) {
        self.absent(index);
        let config = config(
            self.replica_count,
            index as u8,
            self.clients_table_max,
            self.preferred_primary,
        );
        let mut core = GroupCore::format_in_view(
            config,
            view,
            Durability::Persisted,
            false,
            Some(checkpoint_policy(self.checkpoint_every)),
        );
        // The server's shell suspects the primary of a group created while its node is
        // unreachable (`GroupCore::suspect_primary`); here a third of the formats do, whether
        // the primary is down or not: a suspicion only hastens a view change, which must stay
        // safe at any time.
        if self.rng.chance(33) {
            core.suspect_primary();
        }
        self.nodes[index].core = Some(core);
        self.nodes[index].discarded = false;
    }

    /// The shell's node crashed: replica `index` loses its volatile state and unsynced
    /// writes, and stays down until [`Cluster::reopen_replica`].
    pub fn crash_replica(&mut self, index: usize) {
        if self.nodes[index].core.is_some() {
            self.crash(index);
        }
    }

    /// The shell opens replica `index` again from its files (at the next step).
    pub fn reopen_replica(&mut self, index: usize) {
        assert!(
            !self.nodes[index].discarded,
            "a discarded replica has no files"
        );
        if self.nodes[index].core.is_none() {
            self.nodes[index].restart_at = self.now;
        }
    }

    /// The shell stops replica `index` and deletes its files (its node applied the delete
    /// of the group, or found it deleted): the replica leaves the group for good.
    pub fn discard_replica(&mut self, index: usize) {
        self.absent(index);
        self.nodes[index].discarded = true;
    }

    /// The same world where replica messages travel as the server's frames: encoded by the
    /// replica codec with `context` (the sender set to the sending replica) and decoded by the
    /// receiving replica's, which must take every frame of its own group. A frame reaching a
    /// node where this group's replica does not run is kept for the shell
    /// ([`Cluster::take_unhosted`]).
    pub fn with_frames(mut self, context: FrameContext) -> Self {
        self.frames = Some(context);
        self
    }

    /// With [`Cluster::with_frames`]: the frames delivered since the last call to a node that
    /// does not run this group's replica (not created there yet, deleted, or down), as (from,
    /// to, frame). The shell routes them as the server's node does, by the group's ids, to
    /// whichever incarnation of those ids the node runs ([`Cluster::receive_frame`]).
    pub fn take_unhosted(&mut self) -> Vec<(ReplicaId, ReplicaId, Bytes)> {
        std::mem::take(&mut self.unhosted)
    }

    /// A frame from replica `from` the shell routed to replica `to` (of this group or another
    /// with the same ids): decoded with the replica's own frame context, and what the codec
    /// lets through reaches the replica as a peer's message. The frame's command, or the
    /// codec's refusal. Nothing reaches a replica that does not run.
    ///
    /// # Panics
    /// Without [`Cluster::with_frames`].
    pub fn receive_frame(
        &mut self,
        to: ReplicaId,
        from: ReplicaId,
        frame: &Bytes,
    ) -> Result<Command, CodecError> {
        let context = FrameContext {
            sender: to,
            ..self.frames.expect("a group whose replicas exchange frames")
        };
        let inbound = Inbound::unverified(from, context.group, frame).expect("a whole frame");
        let message = codec::decode(&context, &inbound)?;
        let index = usize::from(to);
        if let Some(core) = self.nodes[index].core.as_mut() {
            core.on_message(from, message);
            self.drain(index);
        }
        Ok(inbound.command)
    }

    /// The group is gone: its clients stop asking (their requests may or may not commit).
    pub fn abandon_clients(&mut self) {
        self.clients_abandoned = true;
    }

    /// Whether every client finished (or was abandoned).
    pub fn clients_done(&self) -> bool {
        self.clients_abandoned || self.clients.iter().all(|c| c.done(self.logout_every))
    }

    /// Replica `index`, `None` while it is down or absent.
    pub fn replica(&self, index: usize) -> Option<&Replica> {
        self.nodes[index].replica()
    }

    /// Replica `index`'s state machine (with its files).
    pub fn machine(&self, index: usize) -> &W::Machine {
        &self.nodes[index].machine
    }

    /// Replica `index`'s state machine, for a test that damages it.
    pub fn machine_mut(&mut self, index: usize) -> &mut W::Machine {
        &mut self.nodes[index].machine
    }

    /// The clients' workload and its checker.
    pub fn workload(&self) -> &W {
        &self.workload
    }

    /// The clients' workload, for a shell that tells it what the group's clients learn.
    pub fn workload_mut(&mut self) -> &mut W {
        &mut self.workload
    }

    /// The current tick.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The same world where a group checkpoints past a replica that stays behind once its
    /// journal holds four times the checkpoint policy (as the server's groups do), and the
    /// laggard takes a reachable peer's latest durable checkpoint ([`Machine::transfer`]: the
    /// state, and what the machine copies from that peer's own storage) and rejoins. The copy
    /// is lossless here (the server's goes over the replica plane) but takes virtual time
    /// (up to `COPY_TICKS_MAX` ticks), during which the group goes on: a peer that retires
    /// past the offered state's end meanwhile makes the machine refuse the transfer, and a
    /// newer checkpoint is copied. The checkers then hold the transferred replica to the
    /// canonical log from the checkpoint on. Only for machines that transfer state
    /// ([`Machine::transfers_state`]).
    pub fn with_state_transfer(self) -> Self {
        self.with_state_transfer_past(4)
    }

    /// [`Cluster::with_state_transfer`] past a journal of `policies` times the checkpoint
    /// policy (at least 1): a small bound leaves a replica behind after a short outage.
    pub fn with_state_transfer_past(mut self, policies: u64) -> Self {
        assert!(
            self.nodes.iter().all(|node| node.machine.transfers_state()),
            "state transfer needs machines that take a peer's checkpoint"
        );
        assert!(policies >= 1, "the bound lies past the checkpoint policy");
        let ops = usize::try_from(policies * self.checkpoint_every).expect("a small policy");
        let bound = JournalBound {
            bytes: u64::MAX,
            ops,
        };
        for core in self.nodes.iter_mut().filter_map(|node| node.core.as_mut()) {
            core.checkpoint_past_laggards(bound);
        }
        self.past_laggards = Some(bound);
        self
    }

    /// The same world where PrepareOks of another log under the group's id reach its primary:
    /// on the server, a deleted partition incarnation's backups, whose PrepareOk frames carry
    /// no incarnation and reach the recreated group's replicas. Now and then, every other
    /// replica acknowledges each op the primary has not committed, in the primary's view, with
    /// another entry's checksum; they must never complete a commit quorum (the checkers catch
    /// an op committed without a quorum holding it once the primary crashes).
    pub fn with_stale_acks(mut self) -> Self {
        self.stale_acks = Some(Rng::new(self.seed ^ 0x057a_1eac));
        self
    }

    /// Acknowledgements of another log's entries, sent to the primary now and then.
    fn send_stale_acks(&mut self) {
        let Some(rng) = self.stale_acks.as_mut() else {
            return;
        };
        if !rng.chance(20) {
            return;
        }
        for index in 0..self.nodes.len() {
            let Some(replica) = self.nodes[index].replica() else {
                continue;
            };
            if !replica.is_primary() || replica.status() != Status::Normal {
                continue;
            }
            let view = replica.view();
            let acks: Vec<Message> = (replica.commit_max() + 1..=replica.op())
                .flat_map(|op| {
                    let other = replica.checksum_at(op).unwrap_or(0) ^ 0x5eed;
                    (0..self.replica_count)
                        .filter(move |from| usize::from(*from) != index)
                        .map(move |from| Message::PrepareOk {
                            view,
                            op,
                            checksum: other,
                            replica: from,
                        })
                })
                .collect();
            self.stale_acks_sent += acks.len() as u64;
            for ack in acks {
                let Message::PrepareOk { replica: from, .. } = ack else {
                    unreachable!("an ack");
                };
                self.nodes[index]
                    .core
                    .as_mut()
                    .expect("a live primary")
                    .on_message(from, ack);
                self.drain(index);
                if self.nodes[index].core.is_none() {
                    break;
                }
            }
        }
    }

    /// The same world where, besides the random crashes, each tick a replica with journal
    /// writes in flight crashes with `percent` chance (within the `f` limit): crashes then
    /// often meet writes a sync has not covered yet.
    pub fn crash_while_writing(mut self, percent: u64) -> Self {
        self.crash_writing_percent = percent;
        self
    }

    /// A replica with journal writes in flight, chosen to crash this tick (never when
    /// `crash_writing_percent` is 0, and then without drawing from the fault stream).
    fn writing_replica_to_crash(&mut self) -> Option<usize> {
        if self.crash_writing_percent == 0 {
            return None;
        }
        let writing: Vec<usize> = (0..self.nodes.len())
            .filter(|index| self.nodes[*index].storage.prepares_pending())
            .collect();
        let index = *writing.get(self.rng.below(writing.len() as u64 + 1) as usize)?;
        self.rng.chance(self.crash_writing_percent).then_some(index)
    }

    /// The same world with every replica crashing at once at tick `at` (and at no other tick).
    pub fn restart_all_at(mut self, at: u64) -> Self {
        self.restart_all_at = Some(at);
        self
    }

    /// `percent` of the applied ops on every replica have effects outside the replicated state
    /// that run for up to `ticks_max` ticks after the apply, in op order, as the server's
    /// metadata group runs its partition opens and deletes
    /// ([`GroupCore::applied_with_effects`]): the replica goes on meanwhile, its answers wait
    /// for the effects, and it takes no checkpoint while any run. A crash loses the running
    /// effects (the server's start redoes them from the journal).
    pub fn with_slow_effects(mut self, percent: u64, ticks_max: u64) -> Self {
        let rng = Rng::new(self.seed ^ 0x0eff_ec75);
        self.slow_effects = Some((rng, percent, ticks_max.max(1)));
        self
    }

    /// Runs: faults for `fault_ticks`, then a healed network until every client is done.
    /// Panics (with the seed) on any checker failure or lack of progress.
    pub fn run(self, fault_ticks: u64, ticks_max: u64) -> Summary {
        self.run_workload(fault_ticks, ticks_max).0
    }

    /// [`Cluster::run`], also handing back the workload (with whatever it counted).
    pub fn run_workload(mut self, fault_ticks: u64, ticks_max: u64) -> (Summary, W) {
        while self.now < ticks_max {
            if self.now == fault_ticks {
                self.heal();
            }
            self.step();
            if self.clients_done() {
                break;
            }
        }
        self.finish()
    }

    /// The views abandoned unstarted by their primary for a reason `counted` accepts.
    fn abandoned(&self, counted: impl Fn(u32, LeadingStalled) -> bool) -> u64 {
        self.views_abandoned
            .iter()
            .filter(|((_, view), why)| counted(*view, **why))
            .count() as u64
    }

    /// Ends the run once the clients are done: the full checks (the workload's end check
    /// too) and the summary. Panics (with the seed) if a client has not finished.
    pub fn finish(mut self) -> (Summary, W) {
        let done = self.clients_done();
        assert!(
            done,
            "seed {}: clients did not finish by tick {}: {:?}",
            self.seed, self.now, self.clients
        );
        // A group whose shell does not host every replica (deleted, or not created on a node
        // yet) has no one to hand back to.
        let hosted_everywhere = self.nodes.iter().all(|node| node.core.is_some());
        let handed_back = (!self.shell_faults || (hosted_everywhere && !self.clients_abandoned))
            && self.settle_on_preferred_primary();
        self.check_all();
        for (index, node) in self.nodes.iter().enumerate() {
            if let Some(core) = &node.core
                && node.effects.is_empty()
            {
                assert_eq!(
                    core.answers_held(),
                    0,
                    "seed {}: replica {index} holds answers with no effects running",
                    self.seed
                );
            }
        }
        let views: Vec<_> = self.nodes.iter().map(Node::view).collect();
        self.workload.check_end(self.seed, &views);
        let view_max = self
            .nodes
            .iter()
            .filter_map(Node::replica)
            .map(|r| r.view())
            .max()
            .unwrap_or(0);
        let summary = Summary {
            committed: self.canonical.len() as u64,
            crashes: self.crashes,
            ticks: self.now,
            view_max,
            checkpoints: self.checkpoints_taken,
            retirements: self.retired_total,
            refused_full: self.refused_full,
            restarts_all: self.restarts_all,
            views_persisted: self.views_persisted,
            read_backs: self.read_backs,
            handed_back,
            cut_off_view_rise_max: self.cut_off_view_rise_max,
            checkpoints_past_laggards: self.checkpoints_past_laggards,
            state_transfers: self.state_transfers,
            transfers_refused: self.transfers_refused,
            views_given_up: self.abandoned(|_, why| why == LeadingStalled::GaveUp),
            fetches_timed_out_on_retired: self.abandoned(|view, why| {
                why == LeadingStalled::FetchingBodies && self.fetch_retired_views.contains(&view)
            }),
            views_timed_out_for_transfer: self
                .abandoned(|_, why| why == LeadingStalled::NeedsStateTransfer),
            stale_acks: self.stale_acks_sent,
            slow_effects: self.slow_effects_applied,
        };
        (summary, self.workload)
    }

    /// With a preferred primary, once the load is done and the network healed: runs until
    /// every replica is up, in normal status and led by the preferred one (panics if that does
    /// not happen within a bound: the hand-over is a liveness promise). Returns whether another
    /// replica led when the load ended.
    fn settle_on_preferred_primary(&mut self) -> bool {
        let Some(preferred) = self.preferred_primary else {
            return false;
        };
        let led_by_preferred = |cluster: &Self| {
            cluster.nodes.iter().all(|node| {
                node.replica().is_some_and(|replica| {
                    replica.status() == Status::Normal
                        && replica.primary_of(replica.view()) == preferred
                })
            })
        };
        let other_led = !led_by_preferred(self);
        let deadline = self.now + 2_000;
        while !led_by_preferred(self) {
            assert!(
                self.now < deadline,
                "seed {}: the group was not handed back to its preferred primary {preferred}: {:?}",
                self.seed,
                self.nodes
                    .iter()
                    .map(|node| node.replica().map(|r| (
                        r.status(),
                        r.view(),
                        r.op(),
                        r.commit_min()
                    )))
                    .collect::<Vec<_>>()
            );
            self.step();
        }
        other_led
    }

    /// Cuts replica `index` off from every other node until tick `until` (or longer, if it
    /// already is), noting its view when a new cut begins.
    pub fn cut_off(&mut self, index: usize, until: u64) {
        if !self.isolated(index as u8) {
            self.cut_off_view[index] = self.nodes[index].replica().map(Replica::view);
        }
        self.isolated_until[index] = self.isolated_until[index].max(until);
    }

    /// Ends the faults: no more drops, duplicates or cuts, and crashed replicas restart
    /// (the shell's, with [`Cluster::faults_from_shell`]).
    pub fn heal(&mut self) {
        self.faults = false;
        self.isolated_until.iter_mut().for_each(|until| *until = 0);
        self.network.options.drop_percent = 0;
        self.network.options.duplicate_percent = 0;
        if self.shell_faults {
            return;
        }
        for index in 0..self.nodes.len() {
            if self.nodes[index].core.is_none() {
                self.nodes[index].restart_at = self.now;
            }
        }
    }

    /// One tick: faults, every replica's timers and storage, the packets due, the clients,
    /// the checkers and the checkpoints due.
    pub fn step(&mut self) {
        self.now += 1;
        self.inject_crashes();
        if self.faults && !self.shell_faults && self.replica_count > 1 && self.rng.chance(1) {
            let index = self.rng.below(u64::from(self.replica_count)) as usize;
            let until = self.now + 10 + self.rng.below(80);
            self.cut_off(index, until);
        }
        if let Some((index, start, end)) = self.long_cut_off
            && self.faults
            && self.replica_count > 1
            && self.now == start
        {
            self.cut_off(index, end);
        }
        for index in 0..self.nodes.len() {
            let now = self.now;
            let node = &mut self.nodes[index];
            if node.core.is_none() {
                if now >= node.restart_at {
                    self.restarts += 1;
                    let (checkpoint, records) = node.storage.open();
                    let config = config(
                        self.replica_count,
                        index as u8,
                        self.clients_table_max,
                        self.preferred_primary,
                    );
                    let (checkpoint, state) = match checkpoint {
                        None => (None, None),
                        Some((checkpoint, state)) => (Some(checkpoint), Some(state)),
                    };
                    node.checked_commit = checkpoint.as_ref().map_or(0, |c| c.op);
                    let journaled = records.len();
                    let restored = state.as_deref().map(|state| (node.checked_commit, state));
                    let entries = node.machine.restart(restored, records);
                    assert!(entries.len() <= journaled);
                    if entries.len() < journaled {
                        // The machine found a record it cannot restore (its body was lost
                        // with unsynced writes): the journal ends before it, as the server's.
                        let after_op = node.checked_commit + entries.len() as u64;
                        node.storage.truncate(after_op);
                    }
                    let view_state = node.storage.view_state(index as u8);
                    let mut core = GroupCore::open(
                        config,
                        checkpoint,
                        entries,
                        view_state,
                        Durability::Persisted,
                        false,
                        Some(checkpoint_policy(self.checkpoint_every)),
                    );
                    if let Some(bound) = self.past_laggards {
                        core.checkpoint_past_laggards(bound);
                    }
                    node.core = Some(core);
                    node.sync_pending = false;
                    node.view_pending = None;
                    if now < self.isolated_until[index] {
                        // A restarted primary of its persisted view starts a view change at
                        // once (it must not resume that view): one view per restart.
                        let view = node.core.as_ref().unwrap().replica().view();
                        self.cut_off_view[index] = Some(view);
                    }
                    self.drain(index);
                    if let Some(node) = self.nodes.get_mut(index)
                        && node.core.is_some()
                    {
                        node.machine.replayed();
                    }
                }
                continue;
            }
            node.storage.tick(now);
            let core = node.core.as_mut().unwrap();
            // As the server's shell: the core learns its checkpoint is durable once written.
            if core.checkpoint_writing() && !node.storage.checkpoint_pending() {
                core.checkpointed();
            }
            if node.sync_pending && !node.storage.prepares_pending() {
                node.sync_pending = false;
                node.machine.sync();
                core.synced();
            }
            if let Some(state) = node.view_pending
                && !node.storage.view_pending()
            {
                node.view_pending = None;
                core.view_persisted(state);
            }
            let mut effects_done = None;
            while node.effects.front().is_some_and(|(_, at)| *at <= now) {
                effects_done = node.effects.pop_front().map(|(op, _)| op);
            }
            if let Some(op) = effects_done {
                node.machine.effects_done(op);
                core.effects_done(op);
            }
            // A tick before the one the replica says is due changes nothing (the server's
            // shell sleeps through them).
            let due = core.replica().next_tick_due();
            let before = (now < due).then(|| core.replica().tick_state());
            core.on_tick(now);
            if let Some(before) = before {
                let after = core.replica().tick_state();
                assert!(
                    before == after,
                    "seed {}: replica {index}'s tick {now}, before its due tick {due}, changed \
                     {before:?} to {after:?}",
                    self.seed
                );
            }
            // The shell proposes its limits now and then (only a primary without a committed
            // or pending nomination prepares one), so nominations meet view changes, crashes
            // and checkpoints.
            if now % 97 == (index as u64) * 13 {
                core.nominate_limits(self.clients_table_max);
            }
            self.drain(index);
            self.maybe_transfer(index);
        }
        for packet in self.network.deliver(self.now) {
            self.deliver(packet);
        }
        self.send_stale_acks();
        self.tick_clients();
        self.check_step();
        self.take_checkpoints();
    }

    /// Checkpoints replicas whose core says a checkpoint is due (its policy: `checkpoint_every`
    /// ops in the journal). A group of one checkpoints at (or a little below) its commit; a
    /// larger group where the core's own rule puts it, at or below the op its primary found
    /// held durably by every replica, and the checker confirms that every replica's storage
    /// (a crashed one's too) would still hold that op after a restart, so no replica ever needs
    /// an op another one forgot (that needs state transfer).
    fn take_checkpoints(&mut self) {
        let solo = self.replica_count == 1;
        for index in 0..self.nodes.len() {
            let now = self.now;
            let node = &mut self.nodes[index];
            let Some(core) = node.core.as_mut() else {
                continue;
            };
            let Some(due) = core.checkpoint_due(0) else {
                continue;
            };
            let replica = core.replica();
            let op = if solo {
                // Sometimes below the commit, so the client table is rolled forward to the op.
                due.saturating_sub(self.seed % 3)
            } else {
                due
            };
            if op <= replica.checkpoint_op() {
                continue;
            }
            let Some(state) = node.machine.checkpoint(op) else {
                continue;
            };
            if !solo {
                let safe = self.nodes[index]
                    .replica()
                    .map_or(0, Replica::checkpoint_safe);
                if self.past_laggards.is_some() && op > safe {
                    // Past a laggard: it will need state transfer, which the check rules out.
                    self.checkpoints_past_laggards += 1;
                } else {
                    self.check_held_everywhere(index, op);
                }
            }
            let node = &mut self.nodes[index];
            let core = node.core.as_mut().unwrap();
            let replica = core.replica();
            let journal_before = replica.journal_len();
            let bytes = core.checkpoint_record(op);
            assert_eq!(core.replica().checkpoint_op(), op);
            assert!(core.replica().journal_len() <= journal_before);
            let at = now + 1 + self.rng.below(3);
            node.storage.write_checkpoint(at, op, bytes.clone(), state);
            self.checkpoints_taken += 1;
            let seed = self.seed;
            match self.checkpoints.get(&op) {
                Some(canonical) => assert!(
                    *canonical == bytes,
                    "seed {seed}: replica {index} checkpoint at op {op} differs"
                ),
                None => {
                    self.checkpoints.insert(op, bytes);
                }
            }
        }
    }

    /// With state transfer: when replica `index` needs it, copies the latest durable
    /// checkpoint of a peer it can reach that serves its group (normal status) and that is at
    /// or past the checkpoint it needs, as the server's shell does: the machine takes the
    /// state, the storage the checkpoint (its journal emptied), and the core opens again from
    /// it and rejoins. The copy takes virtual time (see [`Copying`]); it goes on while both
    /// replicas stay up and waits while the replica's own writes are in flight or either is
    /// cut off.
    fn maybe_transfer(&mut self, index: usize) {
        let Some(bound) = self.past_laggards else {
            return;
        };
        let node = &self.nodes[index];
        let Some(needed) = node.replica().and_then(Replica::state_transfer_needed) else {
            // It caught up otherwise: a copy under way is of no use.
            self.copies[index] = None;
            return;
        };
        if node.sync_pending || node.view_pending.is_some() || self.isolated(index as ReplicaId) {
            return;
        }
        let own_checkpoint = node.storage.checkpoint_op();
        let Some(copy) = self.copies[index].take() else {
            let source = (0..self.nodes.len())
                .filter(|peer| *peer != index && !self.isolated(*peer as ReplicaId))
                .find_map(|peer| {
                    let replica = self.nodes[peer].replica()?;
                    if replica.status() != Status::Normal {
                        return None;
                    }
                    let (checkpoint, state) = self.nodes[peer].storage.open().0?;
                    let worth =
                        checkpoint.op >= needed.checkpoint && checkpoint.op > own_checkpoint;
                    worth.then_some((peer, checkpoint, state))
                });
            if let Some((peer, checkpoint, state)) = source {
                let done_at = self.now + 1 + self.rng.below(COPY_TICKS_MAX);
                self.copies[index] = Some(Copying {
                    peer,
                    checkpoint,
                    state,
                    done_at,
                });
            }
            return;
        };
        // Completed even when the group checkpointed past it meanwhile (the replica then needs
        // a later one): the state installed is a committed prefix, and a copy abandoned each
        // time the group checkpoints would never complete under load.
        if copy.checkpoint.op <= own_checkpoint {
            return;
        }
        if self.now < copy.done_at || self.isolated(copy.peer as ReplicaId) {
            self.copies[index] = Some(copy);
            return;
        }
        // As the server's shell: the running effects end before the state is replaced.
        if let Some(&(op, _)) = self.nodes[index].effects.back() {
            self.nodes[index].effects.clear();
            self.nodes[index].machine.effects_done(op);
            if let Some(core) = self.nodes[index].core.as_mut() {
                core.effects_done(op);
            }
            self.drain(index);
        }
        let Copying {
            peer,
            checkpoint,
            state,
            ..
        } = copy;
        let op = checkpoint.op;
        let config = config(
            self.replica_count,
            index as u8,
            self.clients_table_max,
            self.preferred_primary,
        );
        let (node, source) = node_and_peer(&mut self.nodes, index, peer);
        let view_state = node
            .replica()
            .expect("a live replica")
            .persisted_view_state();
        if node.machine.transfer(op, &state, &source.machine).is_err() {
            // The peer retired past the state's end: a newer checkpoint will do.
            self.transfers_refused += 1;
            return;
        }
        node.storage
            .install_checkpoint(op, checkpoint.encode(), state);
        node.checked_commit = op;
        let mut core = GroupCore::open(
            config,
            Some(checkpoint),
            Vec::new(),
            view_state,
            Durability::Persisted,
            false,
            Some(checkpoint_policy(self.checkpoint_every)),
        );
        core.checkpoint_past_laggards(bound);
        node.core = Some(core);
        self.state_transfers += 1;
        // Its machine's log was replaced: a copy from it starts over.
        self.cancel_copies_from(index);
        self.drain(index);
    }

    /// Replica `index` lost or replaced what it held (a crash, a discard, a transfer of its
    /// own): its copy under way and the copies others take from it start over.
    fn cancel_copies_from(&mut self, index: usize) {
        self.copies[index] = None;
        for copy in &mut self.copies {
            if copy.as_ref().is_some_and(|copy| copy.peer == index) {
                *copy = None;
            }
        }
    }

    /// A replica cut off from every other node never raises its view: leaving a view on a
    /// timeout needs a quorum's pre-vote, which it cannot reach (a restart during the cut may
    /// add one view, counted from the restart).
    fn check_cut_off_views(&mut self) {
        for index in 0..self.nodes.len() {
            if !self.isolated(index as u8) {
                self.cut_off_view[index] = None;
                continue;
            }
            let Some(view) = self.nodes[index].replica().map(Replica::view) else {
                continue;
            };
            let Some(cut_off_view) = self.cut_off_view[index] else {
                continue;
            };
            let rise = view.saturating_sub(cut_off_view);
            self.cut_off_view_rise_max = self.cut_off_view_rise_max.max(rise);
            assert!(
                rise == 0,
                "seed {}: replica {index} raised its view from {cut_off_view} to {view} while \
                 cut off from every other replica",
                self.seed
            );
        }
    }

    /// A checkpoint at `op` by replica `index` leaves every replica able to follow: a restart
    /// of any of them would find the committed entry at `op` in its journal, or a checkpoint
    /// at or past it.
    fn check_held_everywhere(&self, index: usize, op: u64) {
        let seed = self.seed;
        let (entry, _) = self.canonical.get(&op).unwrap_or_else(|| {
            panic!("seed {seed}: replica {index} checkpoints at op {op}, never committed")
        });
        for (holder, node) in self.nodes.iter().enumerate() {
            if node.discarded {
                continue;
            }
            assert!(
                node.storage.holds(op, entry.checksum),
                "seed {seed}: replica {index} checkpoints at op {op}, which replica {holder} \
                 does not hold durably"
            );
        }
    }

    fn inject_crashes(&mut self) {
        if self.faults && self.restart_all_at == Some(self.now) {
            // Every replica at once: pending writes (journal, checkpoint, view state) are lost
            // or torn everywhere, so no replica can learn the views from another.
            self.restarts_all += 1;
            for index in 0..self.nodes.len() {
                if self.nodes[index].core.is_some() {
                    self.crash(index);
                }
            }
            return;
        }
        if !self.faults || self.shell_faults {
            return;
        }
        let index = if self.rng.chance(2) {
            self.rng.below(u64::from(self.replica_count)) as usize
        } else if let Some(index) = self.writing_replica_to_crash() {
            index
        } else {
            return;
        };
        let faulty = self
            .nodes
            .iter()
            .filter(|n| match n.replica() {
                None => true,
                Some(r) => r.status() == crate::replica::Status::Recovering,
            })
            .count();
        let tolerated = (usize::from(self.replica_count) - 1) / 2;
        let solo = self.replica_count == 1;
        if self.nodes[index].core.is_none() || (!solo && faulty >= tolerated) {
            return;
        }
        self.crash(index);
    }

    /// Crashes replica `index`: volatile state and pending writes are lost; it restarts later.
    fn crash(&mut self, index: usize) {
        self.crashes += 1;
        let mut restart_at = self.now + 1 + self.rng.below(40);
        if self.shell_faults {
            restart_at = u64::MAX;
        }
        let node = &mut self.nodes[index];
        node.core = None;
        node.sync_pending = false;
        node.view_pending = None;
        node.effects.clear();
        node.restart_at = restart_at;
        node.storage.crash(&mut self.rng);
        node.machine.crash(&mut self.rng);
        self.cancel_copies_from(index);
    }

    /// Performs the node's steps until its core has nothing to do (or waits for storage).
    fn drain(&mut self, index: usize) {
        for _ in 0..100_000 {
            let node = &mut self.nodes[index];
            let Some(core) = node.core.as_mut() else {
                return;
            };
            let Some(step) = core.poll() else {
                // As the server's shell does after each drive: applied bodies leave memory, and
                // a peer that needs one gets it read back.
                core.release_applied_bodies();
                return;
            };
            match step {
                Step::Send { to, message } => {
                    // The view a message names is durable on its sender before it leaves, so a
                    // restart (even of every replica) never forgets a vote or a view it acked in.
                    // (A RequestStartView names the view of the primary it asks, and a pre-vote
                    // the view its sender would move to: neither is a view the sender entered.)
                    let durable = node.storage.view_state(index as u8);
                    let log_view = match &message {
                        Message::DoViewChange { log_view, .. } => Some(*log_view),
                        Message::Prepare { view, .. }
                        | Message::PrepareOk { view, .. }
                        | Message::StartView { view, .. } => Some(*view),
                        _ => None,
                    };
                    assert!(
                        (matches!(
                            message,
                            Message::RequestStartView { .. }
                                | Message::PreVote { .. }
                                | Message::PreVoteGranted { .. }
                        ) || message.view() <= durable.view)
                            && log_view.is_none_or(|log_view| log_view <= durable.log_view),
                        "seed {}: replica {index} sent {message:?} before persisting its view \
                         (durable {durable:?})",
                        self.seed
                    );
                    if let Message::PreVote { .. } = message {
                        let replica = core.replica();
                        if let Some(why) = replica.leading_stalled() {
                            // The first pre-vote of the round says why it began.
                            self.views_abandoned
                                .entry((index, replica.view()))
                                .or_insert(why);
                        }
                    }
                    let from = index as u8;
                    let packet = match self.frames {
                        Some(context) => Packet::Frame {
                            from,
                            to,
                            frame: codec::encode(
                                &FrameContext {
                                    sender: from,
                                    ..context
                                },
                                &message,
                            ),
                        },
                        None => Packet::Replica { from, to, message },
                    };
                    self.network.submit(&mut self.rng, self.now, packet);
                }
                Step::Journal { op, entry } => {
                    let at = self.now + 1 + self.rng.below(3);
                    let stand_in = node.machine.journal(&entry);
                    node.storage.write(at, entry, stand_in);
                    core.journaled(op, false);
                }
                // Durable once the storage has finished every queued write (see `step`).
                Step::Sync if node.storage.prepares_pending() => node.sync_pending = true,
                Step::Sync => {
                    node.machine.sync();
                    core.synced();
                }
                Step::Truncate { after_op } => {
                    node.storage.truncate(after_op);
                    node.machine.truncate(after_op);
                }
                Step::ReadBack { op } => {
                    let read = match node.storage.read(op) {
                        Some(record) => node.machine.read_back(&record),
                        None => ReadBack::Unreadable,
                    };
                    self.read_backs += 1;
                    let replica = core.replica();
                    if read == ReadBack::Retired
                        && replica.status() == Status::ViewChange
                        && replica.primary_of(replica.view()) != replica.replica()
                    {
                        // Only the new primary's body fetch asks a replica changing views.
                        self.fetch_retired_views.insert(replica.view());
                    }
                    core.read_back(op, read);
                }
                // The core synced the journal before handing this out (see `Storage`).
                Step::PersistView { state } => {
                    let at = self.now + 1 + self.rng.below(3);
                    node.storage.write_view(at, index as u8, state);
                    node.view_pending = Some(state);
                    self.views_persisted += 1;
                }
                Step::Apply {
                    op,
                    client,
                    operation,
                    body,
                } => {
                    node.machine.may_retire_through(core.retirable_through());
                    let applied = node.machine.apply(op, client, operation, &body);
                    let entry = core.replica().entry(op).unwrap().clone();
                    let fresh = self.check_commit(index, op, &entry, &applied.reply);
                    if fresh {
                        self.workload.committed(op, &entry, &applied.reply);
                        self.retired_total += u64::from(!applied.retired.is_empty());
                    }
                    let now = self.now;
                    let effects_until =
                        self.slow_effects.as_mut().and_then(|(rng, percent, max)| {
                            rng.chance(*percent).then(|| now + 1 + rng.below(*max))
                        });
                    let node = &mut self.nodes[index];
                    let core = node.core.as_mut().unwrap();
                    // Done in op order: never before the effects of an earlier op.
                    let after = node.effects.back().map(|(_, at)| *at);
                    match (effects_until, after) {
                        (Some(until), _) => {
                            node.effects.push_back((op, until.max(after.unwrap_or(0))));
                            self.slow_effects_applied += 1;
                            core.applied_with_effects(op, applied.reply, &applied.retired);
                        }
                        // Quick effects behind slow ones run with the last of them (the core
                        // holds this op's answer behind theirs already).
                        (None, Some(after)) => {
                            node.effects.push_back((op, after));
                            core.applied(op, applied.reply, &applied.retired);
                        }
                        (None, None) => {
                            node.machine.effects_done(op);
                            core.applied(op, applied.reply, &applied.retired);
                        }
                    }
                }
                Step::Registered { op, client, body } => {
                    node.machine.registered(op, client, &body);
                }
                Step::Answer {
                    waiter: (client, request),
                    outcome,
                } => {
                    if outcome == Outcome::Refused(Refusal::ClientsTableFull) {
                        self.refused_full += 1;
                    }
                    self.check_response(client, request, &outcome);
                    let packet = Packet::Response {
                        client,
                        request,
                        outcome,
                    };
                    self.network.submit(&mut self.rng, self.now, packet);
                }
            }
        }
        panic!(
            "seed {}: replica {index} produced unbounded steps",
            self.seed
        );
    }

    fn isolated(&self, replica: ReplicaId) -> bool {
        self.now < self.isolated_until[usize::from(replica)]
    }

    fn deliver(&mut self, packet: Packet) {
        let cut = match &packet {
            Packet::Replica { from, to, .. } | Packet::Frame { from, to, .. } => {
                self.isolated(*from) || self.isolated(*to)
            }
            Packet::Request { to, .. } => self.isolated(*to),
            Packet::Response { .. } => false,
        };
        if cut {
            return;
        }
        match packet {
            Packet::Replica { from, to, message } => {
                let index = usize::from(to);
                if let Some(core) = self.nodes[index].core.as_mut() {
                    core.on_message(from, message);
                    self.drain(index);
                }
            }
            Packet::Frame { from, to, frame } => {
                if self.nodes[usize::from(to)].core.is_none() {
                    self.unhosted.push((from, to, frame));
                    return;
                }
                // Every frame a replica sends its own group is whole: an entry whose body does
                // not rebuild its checksum (a retired batch's stand-in sent as its body) fails.
                if let Err(refused) = self.receive_frame(to, from, &frame) {
                    panic!(
                        "seed {}: replica {to} refuses a frame of its own group from replica \
                         {from}: {refused}",
                        self.seed
                    );
                }
            }
            Packet::Request {
                to,
                client,
                request,
                operation,
                body,
            } => {
                let index = usize::from(to);
                if let Some(core) = self.nodes[index].core.as_mut() {
                    core.submit(Pending {
                        client,
                        request,
                        operation,
                        body,
                        waiter: (client, request),
                    });
                    self.drain(index);
                }
            }
            Packet::Response {
                client,
                request,
                outcome,
            } => self.on_response(client, request, outcome),
        }
    }

    fn on_response(&mut self, client_id: u128, request: u64, outcome: Outcome) {
        let count = self.replica_count;
        let now = self.now;
        // Responses to an earlier session of a client are ignored.
        let Some(client) = self.clients.iter_mut().find(|c| c.id == client_id) else {
            return;
        };
        match outcome {
            Outcome::Committed { op, reply } if request == client.request => {
                if request > 0 {
                    client.completed += 1;
                    self.workload.acknowledged(client_id, request, op, &reply);
                }
                client.sent_at = None;
                client.retry_at = now + self.rng.below(30);
                if client.logging_out {
                    client.new_session(now);
                } else {
                    client.request += 1;
                }
            }
            // Retired (its logout's reply was lost): start a new session under a new id.
            Outcome::Refused(Refusal::SessionUnknown) if client.request > 0 => {
                if client.logging_out {
                    client.completed += 1;
                }
                client.new_session(now);
            }
            Outcome::Refused(refusal) if request == client.request => {
                match refusal {
                    Refusal::NotPrimary { primary, .. } => {
                        client.target = if primary == client.target {
                            (primary + 1) % count
                        } else {
                            primary
                        };
                    }
                    // Changing views or recovering: ask another replica after the pause.
                    Refusal::NotReady => client.target = (client.target + 1) % count,
                    Refusal::Busy | Refusal::ClientsTableFull => {}
                    other => panic!("seed {}: unexpected refusal {other:?}", self.seed),
                }
                client.sent_at = None;
                client.retry_at = now + 3;
            }
            _ => {}
        }
    }

    fn tick_clients(&mut self) {
        let count = self.replica_count;
        for index in 0..self.clients.len() {
            let client = &mut self.clients[index];
            if self.clients_abandoned || client.done(self.logout_every) {
                continue;
            }
            if let Some(sent_at) = client.sent_at {
                if self.now < sent_at + 60 {
                    continue;
                }
                client.target = (client.target + 1) % count;
            } else if self.now < client.retry_at {
                continue;
            }
            client.sent_at = Some(self.now);
            // A finished client logs out too, or its slot would never come back.
            let finished = client.completed >= client.requests_total;
            client.logging_out = self
                .logout_every
                .is_some_and(|every| client.request > 0 && (finished || client.request > every));
            let (id, request, target) = (client.id, client.request, client.target);
            let (operation, body) = if request == 0 {
                (OPERATION_REGISTER, self.workload.register(id))
            } else {
                self.workload.request(id, request, client.logging_out)
            };
            let packet = Packet::Request {
                to: target,
                client: id,
                request,
                operation,
                body,
            };
            self.network.submit(&mut self.rng, self.now, packet);
        }
    }

    // ----- checkers -----

    /// A Commit at `op` must carry the same entry and produce the same reply on every replica.
    /// Whether it is the first time `op` commits anywhere.
    fn check_commit(&mut self, index: usize, op: u64, entry: &Entry, reply: &Bytes) -> bool {
        let seed = self.seed;
        match self.canonical.get(&op) {
            Some((canonical, canonical_reply)) => {
                assert_eq!(
                    canonical.checksum, entry.checksum,
                    "seed {seed}: replica {index} committed a different op {op}"
                );
                assert_eq!(
                    canonical_reply, reply,
                    "seed {seed}: replica {index} diverged at op {op}"
                );
                false
            }
            None => {
                self.canonical.insert(op, (entry.clone(), reply.clone()));
                true
            }
        }
    }

    /// A client reply must be the canonical reply of a committed op of that client and request.
    fn check_response(&mut self, client: u128, request: u64, outcome: &Outcome) {
        let seed = self.seed;
        let Outcome::Committed { op, reply } = outcome else {
            return;
        };
        if request == 0 {
            assert_eq!(
                reply.as_ref(),
                op.to_le_bytes(),
                "seed {seed}: session number is the register op"
            );
            return;
        }
        let (entry, canonical_reply) = self
            .canonical
            .get(op)
            .unwrap_or_else(|| panic!("seed {seed}: reply for uncommitted op {op}"));
        assert_eq!(
            (entry.client, entry.request),
            (client, request),
            "seed {seed}: reply for a different request"
        );
        assert_eq!(
            canonical_reply, reply,
            "seed {seed}: reply differs from the committed reply"
        );
    }

    /// After every step: committed prefixes agree with the canonical log (registers included).
    fn check_step(&mut self) {
        let seed = self.seed;
        self.check_cut_off_views();
        for index in 0..self.nodes.len() {
            let node = &mut self.nodes[index];
            let Some(replica) = node.core.as_ref().map(GroupCore::replica) else {
                continue;
            };
            assert!(
                self.past_laggards.is_some() || replica.state_transfer_needed().is_none(),
                "seed {seed}: replica {index} needs state transfer: the sim checkpointed too far"
            );
            assert!(
                replica.clients().len() <= self.clients_table_max,
                "seed {seed}: replica {index} client table over its bound"
            );
            assert!(
                replica
                    .clients()
                    .nominated()
                    .is_none_or(|max| max == self.clients_table_max),
                "seed {seed}: replica {index} nominated another capacity"
            );
            let from = node.checked_commit.max(replica.checkpoint_op()) + 1;
            for op in from..=replica.commit_min() {
                let entry = replica
                    .entry(op)
                    .unwrap_or_else(|| panic!("seed {seed}: committed op {op} lost"));
                match self.canonical.get(&op) {
                    Some((canonical, _)) => assert_eq!(
                        canonical.checksum, entry.checksum,
                        "seed {seed}: replica {index} op {op} differs"
                    ),
                    None => {
                        self.canonical.insert(
                            op,
                            (entry.clone(), Bytes::copy_from_slice(&op.to_le_bytes())),
                        );
                    }
                }
            }
            node.checked_commit = replica.commit_min();
        }
        if self.now.is_multiple_of(64) {
            self.check_all();
        }
        let views: Vec<_> = self.nodes.iter().map(Node::view).collect();
        self.workload.check_step(seed, self.now, &views);
    }

    /// Full check: every committed op is still in every committed prefix, and no client request
    /// was executed twice.
    fn check_all(&self) {
        let seed = self.seed;
        for (index, node) in self.nodes.iter().enumerate() {
            let Some(replica) = node.replica() else {
                continue;
            };
            for op in replica.checkpoint_op() + 1..=replica.commit_min() {
                let entry = replica
                    .entry(op)
                    .unwrap_or_else(|| panic!("seed {seed}: op {op} lost at {index}"));
                let (canonical, _) = &self.canonical[&op];
                assert_eq!(
                    canonical.checksum, entry.checksum,
                    "seed {seed}: replica {index} op {op} changed"
                );
            }
        }
        // Each session has its own client id, so a (client, request) pair executes once ever.
        let mut executed: BTreeMap<(u128, u64), u64> = BTreeMap::new();
        for (op, (entry, _)) in &self.canonical {
            if let Some(previous) = executed.insert((entry.client, entry.request), *op) {
                panic!(
                    "seed {seed}: request {:?} committed twice (ops {previous} and {op})",
                    (entry.client, entry.request)
                );
            }
        }
    }
}

/// Node `index` mutably beside its peer `peer`'s.
fn node_and_peer<M>(nodes: &mut [Node<M>], index: usize, peer: usize) -> (&mut Node<M>, &Node<M>) {
    assert_ne!(index, peer, "a replica transfers from a peer");
    if index < peer {
        let (low, high) = nodes.split_at_mut(peer);
        (&mut low[index], &high[0])
    } else {
        let (low, high) = nodes.split_at_mut(index);
        (&mut high[0], &low[peer])
    }
}

/// Checkpoint once the journal holds `every` ops (the sim's journal has no byte size).
fn checkpoint_policy(every: u64) -> CheckpointPolicy {
    CheckpointPolicy {
        journal_bytes: u64::MAX,
        journal_ops: every as usize,
    }
}

fn config(
    replica_count: u8,
    replica: ReplicaId,
    clients_table_max: usize,
    preferred_primary: Option<ReplicaId>,
) -> Config {
    let mut config = Config::new(replica_count, replica);
    config.clients_table_max = clients_table_max;
    config.preferred_primary = preferred_primary;
    config
}

impl Client {
    /// Every request answered, and with a small client table the last session logged out.
    fn done(&self, logout_every: Option<u64>) -> bool {
        self.completed >= self.requests_total && (logout_every.is_none() || self.request == 0)
    }

    /// The session ended (logged out, or found retired): the next one registers under a new id.
    fn new_session(&mut self, now: u64) {
        self.incarnation += 1;
        self.id = self.base_id + (u128::from(self.incarnation) << 64);
        self.request = 0;
        self.logging_out = false;
        self.sent_at = None;
        self.retry_at = now + 1;
    }
}

impl<M> Node<M> {
    fn replica(&self) -> Option<&Replica> {
        self.core.as_ref().map(GroupCore::replica)
    }

    fn view(&self) -> NodeView<'_, M> {
        NodeView {
            replica: self.replica(),
            machine: &self.machine,
        }
    }
}
