//! Nodes that host the metadata group and the partition groups its ops create, as the
//! server's nodes do, under one fault plan per node.
//!
//! Each group is its own [`Cluster`] (the metadata group's of [`MetadataMachine`]s, one per
//! partition incarnation of [`PartitionMachine`](crate::PartitionMachine)s), and the
//! [`NodeWorld`] steps them in lockstep on one clock. Replica `i` of every group lives on node `i`:
//!
//! - a partition group's replica exists on a node only once the node's metadata replica
//!   applied the op that created the incarnation (each node at its own time): the node's
//!   shell formats it then, in the view the creation chose (`created_view`, as the server's
//!   `consensus/plane.rs`), preferring that view's primary; it stops and its files are
//!   deleted when the node applies the delete (or its start-up or state-transfer
//!   reconciliation finds the incarnation deleted); an incarnation a node's directories hold
//!   but whose creating op its replayed model does not reach yet waits, files kept, until
//!   that op is applied again (the server's start-up rules, in [`MetadataMachine`]);
//! - every replica exchanges the server's frames (`Cluster::with_frames`): encoded by the
//!   replica codec (`iggy_vsr::codec`) with the sender's `FrameContext` (the metadata group's,
//!   or a partition's group id from the ids and its incarnation) and decoded with the receiving
//!   replica's. A node routes partition frames by ids
//!   (stream, topic, partition), as the server's bus routes by group id: a frame of an
//!   incarnation the receiving node does not run (not created there yet, deleted, while an
//!   older or newer incarnation of the same ids runs there) goes to the replica of the
//!   incarnation it runs, whose codec must refuse it (counted); what the codec lets through (a
//!   PrepareOk, whose layout names no incarnation: the core judges the entry checksum it
//!   carries) reaches that replica, so a codec that took another incarnation's frames shows as
//!   divergence in the groups' checkers; a node running no incarnation of the ids drops it, as
//!   the bus drops a frame of no group;
//! - the faults are the node's: a crash takes every replica it hosts down at once (each
//!   loses its unsynced writes), a restart reopens the metadata replica and then, from its
//!   replayed model, the partition replicas; a cut isolates all of them; about half the seeds
//!   crash every node at once; at most `f` nodes are down at a time;
//! - on half the seeds (those of an even thousand) every group checkpoints past a laggard and
//!   the laggard catches up by state transfer: the metadata group past four checkpoint
//!   policies of journal, the partition groups as soon as a checkpoint is due, their clients
//!   retiring segments often, and on most of those seeds one node stays down for hundreds of
//!   ticks, so its partition replicas (or those created while it was away) copy a peer's log,
//!   restarting it past what the group retired;
//! - the metadata workload also creates and deletes consumer groups (two names per topic, so
//!   ids are reused and groups recreated); each incarnation's clients learn its topic's groups
//!   as committed, store offsets under them as resolved at some view (now and then a stale
//!   one), and carry each group deletion to the partition late (the server's
//!   `DeleteGroupOffsets`), so a recreated group's partitions may still hold its
//!   predecessor's offset;
//! - the metadata workload creates and deletes streams, topics and partitions from small
//!   pools of names and ids, so ids are reused, and often deletes a live topic's last partition
//!   and then adds it back (`with_partition_churn`), so a recreated partition's frames meet its
//!   old incarnation's on nodes that lag; each incarnation has its own clients sending
//!   to its group from the tick its create committed until its delete committed, with
//!   message ids unique in the run.
//!
//! The checks: each group's own (committed prefixes agree, every acknowledged send reads back
//! at its offsets, in order, once, on every replica that committed it; the metadata
//! reference); after every tick, every node whose metadata replica is up runs exactly the
//! partition incarnations its model holds live (so a deleted incarnation's replica has stopped
//! on every node that applied the delete); a message is served only by the incarnation that
//! committed it (its id is unique in the run, and each incarnation's reads are checked
//! against its own history); at the end, nodes at the same metadata commit run the same
//! incarnations, and once every replica of a live partition group is up at one commit (a
//! laggard caught up, by repair or transfer), they serve the same committed end and hold the
//! same stamped records where their logs overlap. Each partition's offsets are checked after
//! every tick (see [`crate::workload`]): every replica holds what the committed stores and group
//! deletions leave, and a live group is never served an offset resolved before its creation.

use crate::machine::MachineFigures;
use crate::{MetadataMachine, MetadataWorkload, PartitionMachine, PartitionWorkload};
use iggy_generated::frames::{Command, METADATA_GROUP};
use iggy_metadata::PartitionKey;
use iggy_metadata::reconcile::created_op;
use iggy_vsr::codec::{CodecError, FrameContext, partition_group};
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::cluster::{Cluster, Summary};
use iggy_vsr::{ReplicaId, Status};
use std::collections::BTreeMap;

/// The cluster id the nodes' partition frames carry.
const CLUSTER: u128 = 0x5eed_0c1a_5700;

/// Of the metadata requests, the percent that create or delete consumer groups.
const GROUP_PERCENT: u64 = 30;
/// Of the metadata requests, the percent that delete or add one partition of a live topic, so
/// partitions come back under their ids while their old incarnation still runs somewhere.
const PARTITION_CHURN_PERCENT: u64 = 25;

/// The size of a run.
#[derive(Clone, Copy, Debug)]
pub struct NodeSettings {
    /// Metadata clients and the requests each makes.
    pub metadata_clients: u8,
    pub metadata_requests: u64,
    /// Clients of each partition incarnation and the requests each makes (abandoned when the
    /// incarnation is deleted).
    pub partition_clients: u8,
    pub partition_requests: u64,
    /// On the seeds whose groups checkpoint past laggards: the requests of each partition
    /// client, enough for its group to leave a node that is down behind.
    pub partition_requests_past_laggards: u64,
    /// Faults until this tick, then a healed network.
    pub fault_ticks: u64,
    /// The run fails if the clients are not done by this tick.
    pub ticks_max: u64,
}

/// What a run went through.
#[derive(Clone, Debug, Default)]
pub struct NodeFigures {
    /// Metadata ops committed, partition creates and deletes acknowledged, ids reused.
    pub metadata_ops: u64,
    pub metadata_creates_acknowledged: u64,
    pub metadata_deletes_acknowledged: u64,
    pub ids_reused: u64,
    /// Partition incarnations created, deleted, and created under ids an earlier one held.
    pub incarnations: u64,
    pub incarnations_deleted: u64,
    pub incarnations_reusing_ids: u64,
    /// Partition replicas formatted, reopened after a node restart, and discarded.
    pub replicas_formatted: u64,
    pub replicas_reopened: u64,
    pub replicas_discarded: u64,
    /// Partition ops committed, sends acknowledged and their messages.
    pub partition_ops: u64,
    pub sends_acknowledged: u64,
    pub messages_acknowledged: u64,
    /// Node crashes (each takes every group it hosts down), of them in restarts of every
    /// node at once, and cuts.
    pub node_crashes: u64,
    pub restarts_all: u64,
    pub cuts: u64,
    /// Metadata state transfers.
    pub state_transfers: u64,
    /// Metadata ops whose partition opens and deletes ran ticks after their apply (on the
    /// seeds with slow effects, as a slow disk or a wide topic makes them in the server).
    pub metadata_slow_effects: u64,
    /// Long outages: a node down for hundreds of ticks while its peers' groups go on.
    pub long_outages: u64,
    /// Partition groups: checkpoints taken past a laggard, state transfers installed, of them
    /// those whose log restarted at the peer's first offset (the group retired every offset
    /// the laggard held), the batches copied, and transfers refused because the peer retired
    /// past the offered state's end.
    pub partition_checkpoints_past_laggards: u64,
    pub partition_state_transfers: u64,
    /// The transfers the partition machines installed (the groups' count, checked).
    pub partition_machine_transfers: u64,
    pub partition_transfer_log_restarts: u64,
    pub partition_transfer_batches_copied: u64,
    pub partition_transfers_refused: u64,
    /// Partition groups: views their primary gave up at once, unable to start them, and view
    /// changes that timed out instead, fetching a body a holder found retired or needing state
    /// transfer (see `Summary::views_given_up`).
    pub partition_views_given_up: u64,
    pub partition_fetches_timed_out_on_retired: u64,
    pub partition_views_timed_out_for_transfer: u64,
    /// Segment retirements applied on partition replicas (a transfer's peer deleted segments).
    pub partition_retirements: u64,
    /// Live partition groups whose replicas were compared at the end: same commit, same
    /// records.
    pub partition_groups_compared: u64,
    /// Consumer groups: deletions committed in the metadata group; in the partitions, offset
    /// stores acknowledged and refused (their group deleted), group deletions committed,
    /// offset reads checked, and of them reads where the group's id held an earlier group's
    /// offset (withheld); stores of a deleted group committed after a later group with its id
    /// stored (refused, not replacing that group's offset).
    pub consumer_group_deletions: u64,
    pub offset_stores_acknowledged: u64,
    pub offset_stores_refused: u64,
    pub offset_stores_superseded: u64,
    pub group_offset_deletions: u64,
    pub offset_reads: u64,
    pub inherited_offsets_withheld: u64,
    /// Partition packets of one incarnation that reached a node running another incarnation
    /// of the same ids: frames the codec refused (`CodecError::Incarnation`), and
    /// acknowledgements it let through to the other incarnation's replica (a PrepareOk names no
    /// incarnation: the core judges the entry checksum it carries).
    pub frames_of_other_incarnations_refused: u64,
    pub acks_of_other_incarnations_passed: u64,
    /// Partition packets that reached a node running no incarnation of their ids (dropped).
    pub frames_of_no_running_group: u64,
}

/// One partition incarnation's group over the nodes.
struct PartitionGroup {
    key: PartitionKey,
    cluster: Cluster<PartitionWorkload>,
    /// Per node: its replica's files exist (running or down).
    files: Vec<bool>,
    /// Per node: it discarded its replica at least once.
    discarded: Vec<bool>,
    /// The delete committed: the clients stopped.
    deleted: bool,
}

/// Per node, its replica of a group as (status, commit), `None` while it is down.
type ReplicaStates = Vec<Option<(Status, u64)>>;

/// The nodes of one seed.
pub struct NodeWorld {
    seed: u64,
    rng: Rng,
    settings: NodeSettings,
    replica_count: u8,
    now: u64,
    faults: bool,
    metadata: Cluster<MetadataWorkload>,
    /// Partition groups by incarnation.
    groups: BTreeMap<u64, PartitionGroup>,
    /// Per node while it is down: the tick it restarts at.
    down_until: Vec<Option<u64>>,
    /// Per node: the tick its cut ends.
    cut_until: Vec<u64>,
    restart_all_at: Option<u64>,
    /// With state transfer, on some seeds: (tick, node, ticks down) of one long outage.
    long_outage: Option<(u64, usize, u64)>,
    /// Partition groups checkpoint past a laggard, which catches up by state transfer.
    state_transfer: bool,
    figures: NodeFigures,
}

impl NodeWorld {
    /// `replica_count` nodes for `seed`; on half the seeds (those of an even thousand) the
    /// metadata group checkpoints past a laggard, which catches up by state transfer.
    pub fn new(seed: u64, replica_count: u8, settings: NodeSettings) -> Self {
        let mut metadata = Cluster::with_workload(
            seed,
            replica_count,
            settings.metadata_clients,
            settings.metadata_requests,
            MetadataWorkload::new(seed)
                .with_consumer_groups(GROUP_PERCENT)
                .with_partition_churn(PARTITION_CHURN_PERCENT),
        )
        .faults_from_shell()
        .with_frames(FrameContext {
            cluster: CLUSTER,
            sender: 0,
            group: METADATA_GROUP,
            incarnation: 0,
        });
        let state_transfer = (seed / 1_000).is_multiple_of(2);
        if state_transfer {
            metadata = metadata.with_state_transfer();
        }
        // On half the seeds (a stream of its own) a quarter of the metadata ops' partition
        // opens and deletes run up to three view-change timeouts after their apply, as the
        // server's effects task runs them beside the group: each node's partitions lag its
        // model meanwhile, and a crash loses the effects its restart's replay redoes.
        if Rng::new(seed ^ 0x5105_e11e).chance(50) {
            metadata = metadata.with_slow_effects(25, 90);
        }
        // The node fault plan has its own stream, apart from every group's network.
        let mut rng = Rng::new(seed ^ 0x0de5_f417);
        let restart_all_at = rng.chance(50).then(|| 100 + rng.below(1_200));
        let long_outage = (state_transfer && rng.chance(60)).then(|| {
            let node = rng.below(u64::from(replica_count)) as usize;
            (50 + rng.below(600), node, 300 + rng.below(500))
        });
        NodeWorld {
            seed,
            rng,
            settings,
            replica_count,
            now: 0,
            faults: true,
            metadata,
            groups: BTreeMap::new(),
            down_until: vec![None; usize::from(replica_count)],
            cut_until: vec![0; usize::from(replica_count)],
            restart_all_at,
            long_outage,
            state_transfer,
            figures: NodeFigures::default(),
        }
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "seed {}: node checker at tick {}: {what}",
            self.seed, self.now
        )
    }

    /// Runs until every client is done, settles, checks and sums up.
    pub fn run(mut self) -> NodeFigures {
        while !self.clients_done() {
            if self.now >= self.settings.ticks_max {
                let waiting: Vec<_> = self
                    .groups
                    .iter()
                    .filter(|(_, group)| !group.cluster.clients_done())
                    .map(|(incarnation, group)| {
                        let replicas: Vec<_> = (0..usize::from(self.replica_count))
                            .map(|node| {
                                group
                                    .cluster
                                    .replica(node)
                                    .map(|r| (r.status(), r.view(), r.op(), r.commit_min()))
                            })
                            .collect();
                        (*incarnation, group.key, replicas)
                    })
                    .collect();
                self.fail(format!(
                    "the clients did not finish: metadata {}, partitions {waiting:?}",
                    self.metadata.clients_done()
                ));
            }
            if self.now == self.settings.fault_ticks {
                self.heal();
            }
            self.step();
        }
        if self.faults {
            self.heal();
        }
        self.settle();
        self.check_end();
        self.check_partition_replicas_agree();
        self.finish()
    }

    fn clients_done(&self) -> bool {
        self.metadata.clients_done() && self.groups.values().all(|g| g.cluster.clients_done())
    }

    fn heal(&mut self) {
        self.faults = false;
        self.metadata.heal();
        for group in self.groups.values_mut() {
            group.cluster.heal();
        }
        for until in self.down_until.iter_mut().flatten() {
            *until = self.now;
        }
        self.cut_until.iter_mut().for_each(|until| *until = 0);
    }

    /// One tick: the node faults, the metadata group, each node's partitions brought in line
    /// with what its metadata replica applied, the partition groups, the node checks.
    fn step(&mut self) {
        self.now += 1;
        self.inject_faults();
        self.metadata.step();
        assert_eq!(self.metadata.now(), self.now, "the groups step in lockstep");
        // Every node runs the metadata group: its frames reach only a node that is down, which
        // drops them, as a stopped process does.
        drop(self.metadata.take_unhosted());
        self.note_deletes();
        for node in 0..usize::from(self.replica_count) {
            self.reconcile(node);
        }
        self.tell_groups();
        for group in self.groups.values_mut() {
            group.cluster.step();
            assert_eq!(group.cluster.now(), self.now, "the groups step in lockstep");
        }
        self.route_by_ids();
        self.check_step();
    }

    fn up(&self, node: usize) -> bool {
        self.down_until[node].is_none()
    }

    fn inject_faults(&mut self) {
        for node in 0..usize::from(self.replica_count) {
            if self.down_until[node].is_some_and(|at| at <= self.now) {
                self.down_until[node] = None;
                // The partition replicas reopen once the metadata replica replayed.
                self.metadata.reopen_replica(node);
            }
        }
        if !self.faults {
            return;
        }
        if let Some((at, node, ticks)) = self.long_outage
            && at == self.now
        {
            let down = self.down_until.iter().filter(|d| d.is_some()).count();
            if self.up(node) && down < (usize::from(self.replica_count) - 1) / 2 {
                self.figures.long_outages += 1;
                self.crash(node);
                self.down_until[node] = Some(self.now + ticks);
            }
        }
        if self.restart_all_at == Some(self.now) {
            self.figures.restarts_all += 1;
            for node in 0..usize::from(self.replica_count) {
                if self.up(node) {
                    self.crash(node);
                }
            }
            return;
        }
        if self.rng.chance(2) {
            let node = self.rng.below(u64::from(self.replica_count)) as usize;
            let down = self.down_until.iter().filter(|d| d.is_some()).count();
            let tolerated = (usize::from(self.replica_count) - 1) / 2;
            if self.up(node) && down < tolerated {
                self.crash(node);
            }
        }
        if self.rng.chance(1) {
            let node = self.rng.below(u64::from(self.replica_count)) as usize;
            let until = self.now + 10 + self.rng.below(80);
            self.figures.cuts += 1;
            self.cut_until[node] = self.cut_until[node].max(until);
            self.metadata.cut_off(node, until);
            for group in self.groups.values_mut() {
                group.cluster.cut_off(node, until);
            }
        }
    }

    /// Node `node` crashes: every replica it hosts goes down with its unsynced writes lost.
    fn crash(&mut self, node: usize) {
        self.figures.node_crashes += 1;
        self.down_until[node] = Some(self.now + 1 + self.rng.below(40));
        self.metadata.crash_replica(node);
        for group in self.groups.values_mut() {
            group.cluster.crash_replica(node);
        }
    }

    /// Incarnations whose delete committed: their clients stop.
    fn note_deletes(&mut self) {
        let (op, live) = self.metadata.workload().committed_partitions();
        for (incarnation, group) in &mut self.groups {
            if !group.deleted
                && created_op(*incarnation) <= op
                && live.get(&group.key) != Some(incarnation)
            {
                group.deleted = true;
                group.cluster.abandon_clients();
                self.figures.incarnations_deleted += 1;
            }
        }
    }

    /// Tells each live incarnation's clients the consumer groups of its topic as committed
    /// now, and the group deletions its partition must carry out.
    fn tell_groups(&mut self) {
        let workload = self.metadata.workload();
        let (op, groups) = workload.committed_groups();
        let deletions = workload.group_deletions().to_vec();
        let none = BTreeMap::new();
        for group in self.groups.values_mut().filter(|group| !group.deleted) {
            let (s, t, _) = group.key;
            let topic_groups = groups.get(&(s, t)).unwrap_or(&none);
            let topic_deletions = deletions
                .iter()
                .filter(|(ds, dt, _, _)| (*ds, *dt) == (s, t))
                .map(|(_, _, g, op)| (*g, *op));
            group
                .cluster
                .workload_mut()
                .observe_groups(op, topic_groups, topic_deletions);
        }
    }

    /// Brings node `node`'s partition replicas in line with its metadata replica, as the
    /// server's effects and reconciliations do: a directory gone is a replica discarded, an
    /// incarnation to run is formatted (no files) or reopened (after a restart).
    fn reconcile(&mut self, node: usize) {
        if self.metadata.replica(node).is_none() {
            return;
        }
        let machine = self.metadata.machine(node);
        let running = machine.running_partitions();
        let disk = machine.disk().clone();
        for (key, incarnation) in &running {
            if !self.groups.contains_key(incarnation) {
                self.new_group(*key, *incarnation);
            }
        }
        for (incarnation, group) in &mut self.groups {
            let on_disk = disk.get(&group.key) == Some(incarnation);
            if !on_disk && group.files[node] {
                // The replica's figures go with it.
                let machine = group.cluster.machine(node).figures();
                add_transfer_figures(&mut self.figures, &machine);
                group.cluster.discard_replica(node);
                group.files[node] = false;
                group.discarded[node] = true;
                self.figures.replicas_discarded += 1;
            }
            let run = running.get(&group.key) == Some(incarnation);
            if !run || group.cluster.replica(node).is_some() {
                continue;
            }
            if group.files[node] {
                group.cluster.reopen_replica(node);
                self.figures.replicas_reopened += 1;
            } else {
                let view = created_view(*incarnation, group.key.2, self.replica_count);
                if group.discarded[node] {
                    // Its files were deleted: starting over empty would serve a deleted
                    // incarnation again, with another history.
                    panic!(
                        "seed {}: node {node} opens incarnation {incarnation:#x} of {:?} again \
                         over no files after deleting it",
                        self.seed, group.key
                    );
                }
                group.cluster.format_replica(node, view);
                group.files[node] = true;
                self.figures.replicas_formatted += 1;
            }
        }
    }

    /// The group of a partition incarnation a node just created: its clients start now.
    fn new_group(&mut self, key: PartitionKey, incarnation: u64) {
        let seed = self.seed ^ incarnation.rotate_left(17);
        let mut workload = PartitionWorkload::new(seed)
            .with_message_ids_from(u128::from(incarnation) << 64)
            .with_consumer_groups(created_op(incarnation));
        if self.state_transfer {
            workload = workload.with_retire_percent(20);
        }
        let view = created_view(incarnation, key.2, self.replica_count);
        let preferred = (view % u32::from(self.replica_count)) as ReplicaId;
        let requests = match self.state_transfer {
            true => self.settings.partition_requests_past_laggards,
            false => self.settings.partition_requests,
        };
        // Stepped once more this tick, after the node shells.
        let mut cluster = Cluster::with_workload(
            seed,
            self.replica_count,
            self.settings.partition_clients,
            requests,
            workload,
        )
        .hosted_by_shell(self.now - 1, Some(preferred))
        .with_frames(FrameContext {
            cluster: CLUSTER,
            sender: 0,
            group: partition_group(key),
            incarnation,
        });
        if self.state_transfer {
            // A partition group's clients make a few requests only: it checkpoints past a
            // laggard as soon as a checkpoint is due, so outages leave replicas behind.
            cluster = cluster.with_state_transfer_past(1);
        }
        for (node, until) in self.cut_until.iter().enumerate() {
            if *until > self.now {
                cluster.cut_off(node, *until);
            }
        }
        if !self.faults {
            cluster.heal();
        }
        self.figures.incarnations += 1;
        let reused = self.groups.values().any(|group| group.key == key);
        self.figures.incarnations_reusing_ids += u64::from(reused);
        let nodes = usize::from(self.replica_count);
        let group = PartitionGroup {
            key,
            cluster,
            files: vec![false; nodes],
            discarded: vec![false; nodes],
            deleted: false,
        };
        self.groups.insert(incarnation, group);
    }

    /// Routes the partition frames that reached a node not running their incarnation, as the
    /// server's node does: by ids to the incarnation of those ids the node runs, whose replica's
    /// codec judges the frame (see the module's notes).
    fn route_by_ids(&mut self) {
        let mut frames = Vec::new();
        for (incarnation, group) in &mut self.groups {
            for (from, to, frame) in group.cluster.take_unhosted() {
                frames.push((group.key, *incarnation, from, to, frame));
            }
        }
        for (key, incarnation, from, to, frame) in frames {
            let node = usize::from(to);
            if !self.up(node) {
                continue;
            }
            let running = self
                .groups
                .iter_mut()
                .find(|(_, group)| group.key == key && group.cluster.replica(node).is_some());
            let Some((running, group)) = running else {
                self.figures.frames_of_no_running_group += 1;
                continue;
            };
            let running = *running;
            match group.cluster.receive_frame(to, from, &frame) {
                Err(CodecError::Incarnation { .. }) => {
                    self.figures.frames_of_other_incarnations_refused += 1;
                }
                Err(refused) => self.fail(format!(
                    "node {node}: a frame of incarnation {incarnation:#x} of {key:?} refused by \
                     incarnation {running:#x} as {refused}, not as another incarnation's"
                )),
                Ok(Command::PrepareOk) => self.figures.acks_of_other_incarnations_passed += 1,
                // Let through to the replica: the groups' checkers judge what it does with it.
                Ok(_) => {}
            }
        }
    }

    /// The incarnations node `node` runs.
    fn hosted(&self, node: usize) -> BTreeMap<PartitionKey, u64> {
        self.groups
            .iter()
            .filter(|(_, group)| group.cluster.replica(node).is_some())
            .map(|(incarnation, group)| (group.key, *incarnation))
            .collect()
    }

    /// Every node whose metadata replica is up runs exactly the incarnations its model holds
    /// live (a newer incarnation's directory aside, see [`MetadataMachine`]); a node that is
    /// down runs none.
    fn check_step(&self) {
        for node in 0..usize::from(self.replica_count) {
            let hosted = self.hosted(node);
            let Some(replica) = self.metadata.replica(node) else {
                if !hosted.is_empty() {
                    self.fail(format!("node {node} is down, yet runs {hosted:?}"));
                }
                continue;
            };
            let machine: &MetadataMachine = self.metadata.machine(node);
            // While applied ops' effects wait, the node runs what they left so far.
            let expected = match machine.effects_pending() {
                true => machine.running_partitions(),
                false => machine.partitions_to_run(),
            };
            if hosted != expected {
                self.fail(format!(
                    "node {node} at metadata commit {} runs partitions {hosted:?}, its model \
                     holds {expected:?} live",
                    replica.commit_min()
                ));
            }
        }
    }

    /// After the load: runs until every node is up with its metadata replica in normal
    /// status at the same commit, its partitions brought in line.
    fn settle(&mut self) {
        let deadline = self.now + 2_000;
        loop {
            let commits: ReplicaStates = (0..usize::from(self.replica_count))
                .map(|node| {
                    self.metadata
                        .replica(node)
                        .map(|r| (r.status(), r.commit_min()))
                })
                .collect();
            let normal = commits
                .iter()
                .all(|c| c.is_some_and(|(status, _)| status == Status::Normal));
            let equal = commits
                .iter()
                .all(|c| c.map(|c| c.1) == commits[0].map(|c| c.1));
            let partitions = self.unsettled_partition_groups();
            // A node whose applied ops' effects still wait has not opened or deleted their
            // partitions yet.
            let effects_waiting: Vec<usize> = (0..usize::from(self.replica_count))
                .filter(|node| self.metadata.machine(*node).effects_pending())
                .collect();
            if normal && equal && partitions.is_empty() && effects_waiting.is_empty() {
                return;
            }
            if self.now >= deadline {
                self.fail(format!(
                    "the replicas did not settle: metadata {commits:?}, partitions \
                     {partitions:?}, effects waiting on nodes {effects_waiting:?}"
                ));
            }
            self.step();
        }
    }

    /// The live partition groups some of whose replicas are down, not in normal status, or at
    /// another commit than the others (a laggard still catching up, by repair or state
    /// transfer): each replica's (status, commit), by incarnation.
    fn unsettled_partition_groups(&self) -> Vec<(u64, ReplicaStates)> {
        self.groups
            .iter()
            .filter(|(_, group)| !group.deleted)
            .filter_map(|(incarnation, group)| {
                let replicas: Vec<_> = (0..usize::from(self.replica_count))
                    .map(|node| {
                        let replica = group.cluster.replica(node)?;
                        Some((replica.status(), replica.commit_min()))
                    })
                    .collect();
                let settled = replicas.iter().all(|replica| {
                    replica.is_some_and(|(status, commit)| {
                        status == Status::Normal && Some(commit) == replicas[0].map(|r| r.1)
                    })
                });
                (!settled).then_some((*incarnation, replicas))
            })
            .collect()
    }

    /// Every replica of a live partition group, settled at one commit, holds the same
    /// committed records where their logs overlap (a replica that caught up by state transfer
    /// holds the peer's records byte for byte) and the same committed end.
    fn check_partition_replicas_agree(&mut self) {
        for (incarnation, group) in &self.groups {
            if group.deleted {
                continue;
            }
            let machines: Vec<_> = (0..usize::from(self.replica_count))
                .map(|node| group.cluster.machine(node))
                .collect();
            let end = machines[0].committed_next_offset();
            let first = machines.iter().map(|m| m.first_offset()).max().unwrap_or(0);
            let overlap = |machine: &PartitionMachine| -> Vec<(u64, bytes::Bytes)> {
                let mut records = machine.log().records_below(end);
                records.retain(|(base_offset, _)| *base_offset >= first.min(end));
                records
            };
            let records = overlap(machines[0]);
            for (node, machine) in machines.iter().enumerate().skip(1) {
                if machine.committed_next_offset() != end {
                    self.fail(format!(
                        "incarnation {incarnation:#x}: node {node} serves up to offset {}, node 0 \
                         up to {end}, at the same commit",
                        machine.committed_next_offset()
                    ));
                }
                if overlap(machine) != records {
                    self.fail(format!(
                        "incarnation {incarnation:#x}: node {node} holds other records than node \
                         0 in offsets {first}..{end}"
                    ));
                }
            }
            self.figures.partition_groups_compared += 1;
        }
    }

    /// Nodes at the same metadata commit run the same incarnations, and every live
    /// incarnation runs on every node at the latest commit.
    fn check_end(&self) {
        let mut by_commit: BTreeMap<u64, (usize, BTreeMap<PartitionKey, u64>)> = BTreeMap::new();
        for node in 0..usize::from(self.replica_count) {
            let commit = self.metadata.replica(node).map_or(0, |r| r.commit_min());
            let hosted = self.hosted(node);
            match by_commit.get(&commit) {
                Some((first, theirs)) if *theirs != hosted => self.fail(format!(
                    "at metadata commit {commit} node {first} runs {theirs:?}, node {node} \
                     {hosted:?}"
                )),
                Some(_) => {}
                None => {
                    by_commit.insert(commit, (node, hosted));
                }
            }
        }
        let (_, (_, latest)) = by_commit.last_key_value().expect("a node");
        for (incarnation, group) in &self.groups {
            if !group.deleted && latest.get(&group.key) != Some(incarnation) {
                self.fail(format!("live incarnation {incarnation} runs nowhere"));
            }
        }
    }

    /// Each group's end checks, and the figures.
    fn finish(self) -> NodeFigures {
        let mut figures = self.figures;
        let seed = self.seed;
        for (_, group) in self.groups {
            let (summary, workload): (Summary, PartitionWorkload) = group.cluster.finish();
            let partition = workload.figures();
            figures.partition_ops += summary.committed;
            figures.sends_acknowledged += partition.sends_acknowledged;
            figures.messages_acknowledged += partition.messages_acknowledged;
            figures.partition_checkpoints_past_laggards += summary.checkpoints_past_laggards;
            figures.partition_state_transfers += summary.state_transfers;
            figures.partition_transfers_refused += summary.transfers_refused;
            figures.partition_views_given_up += summary.views_given_up;
            figures.partition_views_timed_out_for_transfer += summary.views_timed_out_for_transfer;
            figures.partition_fetches_timed_out_on_retired += summary.fetches_timed_out_on_retired;
            add_transfer_figures(&mut figures, &partition.machines);
            figures.offset_stores_acknowledged += partition.stores_acknowledged;
            figures.offset_stores_refused += partition.stores_refused;
            figures.offset_stores_superseded += partition.stores_superseded;
            figures.group_offset_deletions += partition.group_deletions_committed;
            figures.offset_reads += partition.offset_reads;
            figures.inherited_offsets_withheld += partition.inherited_offsets_withheld;
            figures.partition_retirements += partition.machines.retirements;
        }
        assert_eq!(
            figures.partition_machine_transfers, figures.partition_state_transfers,
            "seed {seed}: every transfer a partition group installed is its machine's"
        );
        figures.consumer_group_deletions = self.metadata.workload().group_deletions().len() as u64;
        let (summary, workload) = self.metadata.finish();
        let metadata = workload.figures();
        figures.metadata_ops = summary.committed;
        figures.state_transfers = summary.state_transfers;
        figures.metadata_slow_effects = summary.slow_effects;
        figures.metadata_creates_acknowledged = metadata.creates_acknowledged;
        figures.metadata_deletes_acknowledged = metadata.deletes_acknowledged;
        figures.ids_reused = metadata.ids_reused;
        figures
    }
}

/// A partition replica's state-transfer figures, added to the run's.
fn add_transfer_figures(figures: &mut NodeFigures, machine: &MachineFigures) {
    figures.partition_machine_transfers += machine.transfers;
    figures.partition_transfer_log_restarts += machine.transfer_log_restarts;
    figures.partition_transfer_batches_copied += machine.transfer_batches_copied;
}

/// The view a partition's group is created in (the server's `consensus/plane.rs`): its
/// creating op plus the partition id, so the primaries spread over the nodes.
fn created_view(incarnation: u64, partition: u32, replica_count: u8) -> u32 {
    ((created_op(incarnation) + u64::from(partition)) % u64::from(replica_count)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: NodeSettings = NodeSettings {
        metadata_clients: 3,
        metadata_requests: 30,
        partition_clients: 1,
        partition_requests: 8,
        partition_requests_past_laggards: 20,
        fault_ticks: 1_500,
        ticks_max: 30_000,
    };

    /// A world of three nodes stepped until some node runs a partition incarnation; that
    /// node and incarnation (of the first seed whose clients create one).
    fn world_running_a_partition() -> (NodeWorld, usize, u64) {
        for seed in 1..20 {
            let mut world = NodeWorld::new(seed, 3, SETTINGS);
            while world.now < 5_000 {
                world.step();
                for node in 0..3 {
                    // With effects waiting, the check compares with what they left so far.
                    if world.metadata.machine(node).effects_pending() {
                        continue;
                    }
                    if let Some(incarnation) = world.hosted(node).values().next() {
                        return (world, node, *incarnation);
                    }
                }
            }
        }
        panic!("no partition was created");
    }

    /// The node check is not vacuous: a node that stops running a partition its model holds
    /// live fails it, and so does a node still running one its model no longer holds.
    #[test]
    fn a_node_running_other_incarnations_than_its_model_fails_the_checker() {
        let (mut world, node, incarnation) = world_running_a_partition();
        world.check_step();
        let group = world.groups.get_mut(&incarnation).unwrap();
        group.cluster.discard_replica(node);
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.check_step()));
        let error = *stopped.unwrap_err().downcast::<String>().unwrap();
        assert!(
            error.contains(&format!("node {node} at metadata commit")),
            "{error}"
        );

        let (mut world, node, incarnation) = world_running_a_partition();
        let key = world.groups[&incarnation].key;
        // A planted model where the partition is gone, its replica still running.
        let model = world.metadata.machine_mut(node).model_mut();
        model
            .streams
            .get_mut(&key.0)
            .and_then(|stream| stream.topics.get_mut(&key.1))
            .and_then(|topic| topic.partitions.remove(&key.2))
            .expect("the partition is in the model");
        let running = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| world.check_step()));
        let error = *running.unwrap_err().downcast::<String>().unwrap();
        assert!(error.contains("runs partitions"), "{error}");
    }
}
