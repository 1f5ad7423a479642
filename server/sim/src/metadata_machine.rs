//! The real metadata state machine ([`iggy_metadata::machine`] over a [`Metadata`] model),
//! driven the way the server's shell drives it (`iggy-server`'s `runtime/metadata_machine.rs`):
//! a committed register records the session, a committed op is applied and its effects run
//! once the cluster reports them due (`Machine::effects_done`, in op order, as the server's
//! effects task runs them beside the group),
//! a checkpoint is the encoded snapshot, a restart decodes it and replays the journal, and a
//! state transfer installs a peer's snapshot and reconciles the directories with the server's
//! own plan ([`iggy_metadata::reconcile::plan_after_transfer`]).
//!
//! Two differences from the server, both in the shell, never in the model:
//! - the server's disk effects open and delete partition directories; here the "disk" is the
//!   map of partition directories the effects left (one per key, named by its incarnation, with
//!   the incarnation last opened per key as the namespace record), and an effect that does not
//!   fit it (a delete naming another incarnation than the one on disk, an open over a live
//!   directory) is recorded as a fault for the checker. A restart keeps the directories as the
//!   server's start-up reconciliation does (one whose creating op lies above the replayed
//!   commit waits for that op; a delete the replay applied removes one), and an open is refused
//!   where the server's `prepare_partition_dir` refuses it. The node simulation
//!   ([`crate::node`]) runs a partition group for each directory its node's machine holds;
//! - the server releases an ended session's client-table slot by a later `FinalizeSession` op
//!   that the node itself submits once no partition holds a slot of the session; the simulated
//!   cluster has no node-submitted ops, so a committed logout releases the slot of its client at
//!   once.

use bytes::Bytes;
use iggy_generated::frames::Operation;
use iggy_generated::storage::MetadataSnapshot;
use iggy_metadata::machine::{self as metadata_machine, SYSTEM_CLIENT};
use iggy_metadata::reconcile::{TransferAction, created_op, plan_after_transfer};
use iggy_metadata::{Effect, Metadata, PartitionKey};
use iggy_vsr::Entry;
use iggy_vsr::sim::Rng;
use iggy_vsr::sim::machine::{self, Journaled, Machine};
use iggy_wire::{WireDecode, WireEncode};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// What one replica's metadata machine went through.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetadataFigures {
    /// Restarts that restored a checkpoint's snapshot.
    pub snapshots_restored: u64,
    /// Peers' snapshots installed by state transfer, and the directories their plans
    /// discarded.
    pub snapshots_transferred: u64,
    pub transfer_discards: u64,
    /// Partition directories opened and deleted by applied ops' effects.
    pub partitions_opened: u64,
    pub partitions_deleted: u64,
}

/// One replica's metadata: the model, the partition directories its effects left, and the
/// snapshots it took or restored (for the checker to compare across replicas).
#[derive(Debug, Default)]
pub struct MetadataMachine {
    model: Metadata,
    /// The latest op applied or registered (or the checkpoint restored).
    applied_op: u64,
    /// The partition directories on the simulated disk: key → incarnation.
    disk: BTreeMap<PartitionKey, u64>,
    /// Effects that did not fit the disk, described.
    disk_faults: Vec<String>,
    /// Between a restart and the end of its replay: no disk effect runs (as in the server,
    /// the directories are reconciled with the final model once).
    replaying: bool,
    /// Per key, the incarnation last opened there (the server's namespace `created.revision`,
    /// which outlives the directory's delete): an incarnation whose directory is gone is
    /// never opened again over no files.
    published: BTreeMap<PartitionKey, u64>,
    /// The partition deletes the replay applied: (key, incarnation).
    replay_deletes: HashSet<(PartitionKey, u64)>,
    /// Applied ops' disk effects not run yet, in op order: as the server's effects task, they
    /// run once the cluster reports them due (`Machine::effects_done`); a crash loses them.
    effects_pending: VecDeque<(u64, Effect)>,
    /// Each checkpoint taken and each snapshot restored: (the model's commit, canonical bytes).
    snapshots: Vec<(u64, Vec<u8>)>,
    figures: MetadataFigures,
}

impl MetadataMachine {
    /// The model.
    pub fn model(&self) -> &Metadata {
        &self.model
    }

    /// The partition directories on the simulated disk.
    pub fn disk(&self) -> &BTreeMap<PartitionKey, u64> {
        &self.disk
    }

    /// Effects that did not fit the disk.
    pub fn disk_faults(&self) -> &[String] {
        &self.disk_faults
    }

    /// Every snapshot taken or restored, in order: (the model's commit, canonical bytes).
    pub fn snapshots(&self) -> &[(u64, Vec<u8>)] {
        &self.snapshots
    }

    pub fn figures(&self) -> MetadataFigures {
        self.figures
    }

    /// Whether applied ops' disk effects wait to run: the directories lag the model.
    pub fn effects_pending(&self) -> bool {
        !self.effects_pending.is_empty()
    }

    /// The model, for a test that damages it.
    pub fn model_mut(&mut self) -> &mut Metadata {
        &mut self.model
    }

    /// The partitions whose groups run here: the directories of incarnations created by an op
    /// the model holds (a directory a restart kept for an op not applied again yet waits).
    pub fn running_partitions(&self) -> BTreeMap<PartitionKey, u64> {
        self.disk
            .iter()
            .filter(|(_, incarnation)| created_op(**incarnation) <= self.model.commit)
            .map(|(key, incarnation)| (*key, *incarnation))
            .collect()
    }

    /// The live partitions whose groups must run here: all of them but one whose directory
    /// holds a newer incarnation (created by an op a restart has not applied again yet: the
    /// server refuses to open the older one over it, and its delete, replayed next, leaves
    /// the newer directory alone).
    pub fn partitions_to_run(&self) -> BTreeMap<PartitionKey, u64> {
        let mut live = self.model.live_partitions();
        live.retain(|key, incarnation| !self.refused(key, *incarnation));
        live
    }

    /// Whether opening `incarnation` at `key` is refused, as the server's
    /// `prepare_partition_dir` refuses it: over a newer incarnation's directory, or with no
    /// directory when this incarnation or a later one was opened here before (its delete was
    /// applied here, by an op a restart or a transfer has not applied again yet: it must not
    /// start over empty, with another history; `SIM_SEED=3005` with 5 nodes, where a quorum of
    /// nodes restarted from a checkpoint before the delete, fails if only this incarnation's
    /// own record refuses).
    fn refused(&self, key: &PartitionKey, incarnation: u64) -> bool {
        self.disk.get(key) != Some(&incarnation)
            && (self.newer_on_disk(key, incarnation)
                || self
                    .published
                    .get(key)
                    .is_some_and(|published| *published >= incarnation))
    }

    fn newer_on_disk(&self, key: &PartitionKey, incarnation: u64) -> bool {
        self.disk
            .get(key)
            .is_some_and(|found| created_op(*found) > created_op(incarnation))
    }

    /// Runs one effect on the simulated disk, as the server's `run_effect` does on its own.
    fn run_effect(&mut self, op: u64, effect: Effect) {
        match effect {
            Effect::OpenPartition {
                stream,
                topic,
                partition,
                incarnation,
            } => {
                let key = (stream, topic, partition);
                self.figures.partitions_opened += 1;
                if self.refused(&key, incarnation) {
                    return;
                }
                self.published.insert(key, incarnation);
                // The same incarnation's directory is one a restart kept for this op: the
                // server opens it with its data.
                if let Some(found) = self.disk.insert(key, incarnation)
                    && found != incarnation
                {
                    self.disk_faults.push(format!(
                        "op {op} opens partition {key:?} incarnation {incarnation} over the \
                         live incarnation {found}"
                    ));
                }
            }
            Effect::DeletePartition {
                stream,
                topic,
                partition,
                incarnation,
            } => {
                let key = (stream, topic, partition);
                match self.disk.get(&key) {
                    Some(found) if *found == incarnation => {
                        self.disk.remove(&key);
                    }
                    // The server removes a directory only when it names the incarnation (one
                    // a restart found deleted already, or a newer one, stays).
                    _ if self.refused(&key, incarnation) => {}
                    // Deleting by key alone would destroy another incarnation's data.
                    found => self.disk_faults.push(format!(
                        "op {op} deletes partition {key:?} incarnation {incarnation}, the \
                         disk holds {found:?}"
                    )),
                }
                self.figures.partitions_deleted += 1;
            }
            // Consumer-group offsets are not simulated in the partitions.
            Effect::DeleteGroupOffsets { .. } | Effect::ReleaseSessionSlots { .. } => {}
        }
    }
}

/// The snapshot's bytes in a canonical order: the model keeps its sessions in a hash map, so
/// two replicas with the same sessions may encode them in different orders.
pub fn canonical_snapshot(model: &Metadata) -> Vec<u8> {
    let encoded = iggy_metadata::snapshot::encode(model);
    let mut snapshot = MetadataSnapshot::decode_exact(&encoded).expect("a snapshot just encoded");
    snapshot.sessions.sort_by_key(|session| session.client);
    snapshot.to_wire_bytes()
}

impl Machine for MetadataMachine {
    fn journal(&mut self, _entry: &Entry) -> Option<Bytes> {
        None
    }

    fn sync(&mut self) {}

    fn truncate(&mut self, _after_op: u64) {}

    fn registered(&mut self, op: u64, client: u128, body: &Bytes) {
        assert!(op > self.applied_op, "ops are registered in order");
        self.applied_op = op;
        metadata_machine::register(&mut self.model, op, client, body)
            .expect("the workload's registers carry a session record");
    }

    fn apply(&mut self, op: u64, client: u128, operation: u8, body: &Bytes) -> machine::Applied {
        assert!(op > self.applied_op, "ops are applied in order");
        self.applied_op = op;
        let (reply, effects) =
            metadata_machine::apply(&mut self.model, op, client, operation, body);
        let mut retired = Vec::new();
        for effect in effects {
            match effect {
                Effect::ReleaseSessionSlots { clients } => retired.extend(clients),
                Effect::DeletePartition {
                    stream,
                    topic,
                    partition,
                    incarnation,
                } if self.replaying => {
                    let key = (stream, topic, partition);
                    self.replay_deletes.insert((key, incarnation));
                }
                _ if self.replaying => {}
                effect => self.effects_pending.push_back((op, effect)),
            }
        }
        // See the module doc: the logout's slot is released with it.
        if operation == Operation::Logout.to_repr() && client != SYSTEM_CLIENT {
            retired.push(client);
        }
        machine::Applied { reply, retired }
    }

    fn effects_done(&mut self, op: u64) {
        while let Some((effect_op, _)) = self.effects_pending.front()
            && *effect_op <= op
        {
            let (effect_op, effect) = self.effects_pending.pop_front().expect("just seen");
            self.run_effect(effect_op, effect);
        }
    }

    /// As the server: the snapshot now, taken only when `op` is the op applied (or registered)
    /// last. Not merely when nothing above `op` was applied: the core may have committed `op`
    /// (a register, say) while its step still waits behind a sync. Never while applied ops'
    /// effects wait (the core takes no checkpoint then): their ops must stay in the journal,
    /// whose replay reconciles the directories after a crash.
    fn checkpoint(&mut self, op: u64) -> Option<Vec<u8>> {
        assert!(
            self.effects_pending.is_empty(),
            "a checkpoint at op {op} while the effects of ops {:?} wait",
            self.effects_pending
                .iter()
                .map(|(op, _)| op)
                .collect::<Vec<_>>()
        );
        if op != self.applied_op {
            return None;
        }
        let encoded = iggy_metadata::snapshot::encode(&self.model);
        self.snapshots
            .push((self.model.commit, canonical_snapshot(&self.model)));
        Some(encoded)
    }

    fn crash(&mut self, _rng: &mut Rng) {
        self.effects_pending.clear();
    }

    fn restart(&mut self, checkpoint: Option<(u64, &[u8])>, records: Vec<Journaled>) -> Vec<Entry> {
        self.model = Metadata::default();
        self.applied_op = 0;
        if let Some((op, snapshot)) = checkpoint {
            self.model =
                iggy_metadata::snapshot::decode(snapshot).expect("a snapshot the machine wrote");
            self.applied_op = op;
            self.snapshots
                .push((self.model.commit, canonical_snapshot(&self.model)));
            self.figures.snapshots_restored += 1;
        }
        self.replaying = true;
        self.replay_deletes.clear();
        records
            .into_iter()
            .map(|record| {
                assert!(!record.stowed, "the metadata machine stows nothing");
                record.entry
            })
            .collect()
    }

    /// The directories are brought in line with the replayed model, by the server's start-up
    /// rules (`runtime/reconcile.rs`): the live partitions' incarnations stay or open (over a
    /// directory of another incarnation, which goes); any other directory goes only when a
    /// replayed delete named its incarnation, and is kept otherwise (its creating op lies
    /// above the replayed commit: it runs again once that op is applied again).
    fn replayed(&mut self) {
        self.replaying = false;
        let live = self.model.live_partitions();
        let deletes = std::mem::take(&mut self.replay_deletes);
        self.disk.retain(|key, incarnation| {
            live.contains_key(key) || !deletes.contains(&(*key, *incarnation))
        });
        for (key, incarnation) in live {
            if !self.refused(&key, incarnation) {
                self.disk.insert(key, incarnation);
                self.published.insert(key, incarnation);
            }
        }
    }

    fn transfers_state(&self) -> bool {
        true
    }

    /// As the server: the snapshot replaces the model, and the plan the server runs decides
    /// the directories (every directory here has a running partition, as on a started server).
    /// A plan that keeps a directory, or opens over a live one, leaves the disk unlike the
    /// model, which the checker reports.
    fn transfer(&mut self, op: u64, state: &[u8], _source: &Self) -> Result<(), String> {
        assert!(
            self.effects_pending.is_empty(),
            "the running effects end before a transfer replaces the model"
        );
        let model = iggy_metadata::snapshot::decode(state).expect("a snapshot a peer wrote");
        assert_eq!(model.commit, op, "a snapshot of its checkpoint's op");
        let running = self.running_partitions();
        self.model = model;
        self.applied_op = op;
        self.replaying = false;
        self.snapshots
            .push((self.model.commit, canonical_snapshot(&self.model)));
        self.figures.snapshots_transferred += 1;
        let live = self.model.live_partitions();
        let on_disk: Vec<(PartitionKey, Option<u64>)> = self
            .disk
            .iter()
            .map(|(key, incarnation)| (*key, Some(*incarnation)))
            .collect();
        for action in plan_after_transfer(&live, op, &running, &on_disk) {
            match action {
                // A directory here is its running partition: the discard that follows (or the
                // keep) decides what happens to it.
                TransferAction::Stop { .. } | TransferAction::Keep { .. } => {}
                TransferAction::Discard { key, revision } => {
                    if self.disk.get(&key) == Some(&revision) {
                        self.disk.remove(&key);
                        self.figures.transfer_discards += 1;
                    }
                }
                TransferAction::Open { key, incarnation } => {
                    let effect = Effect::OpenPartition {
                        stream: key.0,
                        topic: key.1,
                        partition: key.2,
                        incarnation,
                    };
                    self.run_effect(op, effect);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggy_metadata::machine::session_record;

    /// The core may have committed a register whose step still waits behind a sync: a
    /// checkpoint at that op is refused until the register reached the model, so the snapshot
    /// never lacks a session its checkpoint's client table holds.
    #[test]
    fn a_checkpoint_waits_for_the_op_it_names() {
        let mut machine = MetadataMachine::default();
        let record = session_record(0, 0, [3; 32]);
        machine.registered(2, 1000, &record);
        assert!(
            machine.checkpoint(3).is_none(),
            "op 3 is not registered yet"
        );
        machine.registered(3, 1001, &record);
        let snapshot = machine.checkpoint(3).expect("the state as of op 3");
        let restored = iggy_metadata::snapshot::decode(&snapshot).unwrap();
        assert!(restored.sessions.get(1001).is_some());
        assert_eq!(
            machine.snapshots().last().map(|(commit, _)| *commit),
            Some(3)
        );
    }
}
