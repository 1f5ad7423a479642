//! What the simulator needs from a replicated state machine and from the clients that drive
//! it, so the same cluster (replicas, faults, consensus checkers) runs a model machine or a
//! real one (the `iggy-sim` crate runs `iggy_partition::Partition`).
//!
//! A [`Machine`] is one replica's state machine together with the files it keeps beside the
//! journal (a partition's log): the cluster performs each `GroupCore` step on it as the
//! server's shell does, and crashes it with the replica. A [`Workload`] makes the clients'
//! requests, learns every committed op and every acknowledged reply, and checks the machines
//! after every step.

use super::Rng;
use crate::message::{Entry, Fnv};
use crate::replica::{ReadBack, Replica};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A journal record as the simulated storage gives it back at a restart: the entry with the
/// body that was journaled, which is the machine's stand-in when `stowed`.
#[derive(Clone, Debug)]
pub struct Journaled {
    pub entry: Entry,
    /// The body is the stand-in [`Machine::journal`] returned, not the request body.
    pub stowed: bool,
}

/// The result of applying a committed op.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Cached in the client table and sent to the client.
    pub reply: Bytes,
    /// The clients whose sessions the op ends (their client-table slots free up with it).
    pub retired: Vec<u128>,
}

/// One replica's state machine and its own storage, driven by the cluster.
pub trait Machine {
    /// `Step::Journal`: the op is about to be journaled. A machine that keeps the body in its
    /// own storage writes it there now and returns the stand-in to journal instead.
    fn journal(&mut self, entry: &Entry) -> Option<Bytes>;
    /// `Step::Sync` finished: every write the machine made so far is durable.
    fn sync(&mut self);
    /// `Step::Truncate`: the journal drops every op after `after_op`.
    fn truncate(&mut self, after_op: u64);
    /// `Step::Registered`: a committed register opened `client`'s session at `op` (the
    /// server's metadata machine records the session; others keep nothing per session).
    fn registered(&mut self, _op: u64, _client: u128, _body: &Bytes) {}
    /// Before each `Step::Apply`: no peer that can catch up without state transfer will ask
    /// this one for the bodies of the ops through `op` (`GroupCore::retirable_through`: every
    /// replica's journal or checkpoint durably holds them, or the group checkpointed past the
    /// replicas that do not). A machine that deletes bodies it stowed (a partition's segment
    /// retirement) deletes only those.
    fn may_retire_through(&mut self, _op: u64) {}
    /// `Step::Apply` of a committed op.
    fn apply(&mut self, op: u64, client: u128, operation: u8, body: &Bytes) -> Applied;
    /// The effects outside the replicated state of every op applied through `op` are due now,
    /// in op order (with [`super::cluster::Cluster::with_slow_effects`], some ticks after their
    /// apply, when the cluster reports them done to the core). A machine that defers them, as
    /// the server's metadata machine runs its partition opens and deletes beside its group,
    /// runs them now; a crash before loses them.
    fn effects_done(&mut self, _op: u64) {}
    /// The state a checkpoint at `op` keeps, with every applied op's effects made durable;
    /// `None` when the machine cannot give the state as of `op` now (the cluster tries later).
    fn checkpoint(&mut self, op: u64) -> Option<Vec<u8>>;
    /// The replica crashed: volatile state is gone and writes not yet durable are lost (some
    /// may survive, as a disk's cache flushes on its own).
    fn crash(&mut self, rng: &mut Rng);
    /// The replica restarts from the checkpoint (its op and the state [`Machine::checkpoint`]
    /// gave; `None`: no checkpoint) and the valid journal records after it. Returns the
    /// entries to open the replica with: a prefix of `records` with their bodies restored
    /// (the cluster truncates the journal after it).
    fn restart(&mut self, checkpoint: Option<(u64, &[u8])>, records: Vec<Journaled>) -> Vec<Entry>;
    /// The replica was opened and has replayed what it could.
    fn replayed(&mut self);
    /// `Step::ReadBack`: the entry `record` journals, its body read back from where
    /// [`Machine::journal`] stowed it; [`ReadBack::Retired`] when a committed retirement
    /// deleted it, [`ReadBack::Unreadable`] when it is gone otherwise.
    fn read_back(&mut self, record: &Journaled) -> ReadBack {
        match record.stowed {
            true => ReadBack::Unreadable,
            false => ReadBack::Read(record.entry.clone()),
        }
    }
    /// Whether a replica left behind by its peers' checkpoints can take a peer's checkpoint
    /// ([`Machine::transfer`]): the checkpoint state, and whatever it keeps beside the journal
    /// copied from the peer (the server's metadata machine keeps nothing else; a partition
    /// copies the log the state covers). Only then may the cluster checkpoint past laggards
    /// ([`super::cluster::Cluster::with_state_transfer`]).
    fn transfers_state(&self) -> bool {
        false
    }
    /// State transfer: the state `state` of the checkpoint at `op` of `source` (a peer in
    /// normal status, whose own storage the machine may copy, as the server's shell copies a
    /// partition's log chunk by chunk) replaces the machine's, with the effects a start from it
    /// would have (the replica's journal is empty after it). `Err` when the copy cannot be
    /// completed over `source` now (it retired past the state's end): nothing changed, and the
    /// cluster tries again later. Called only when [`Machine::transfers_state`].
    fn transfer(&mut self, op: u64, _state: &[u8], _source: &Self) -> Result<(), String> {
        unreachable!("state transfer to op {op} of a machine that transfers no state")
    }
}

/// A replica as the workload's checker sees it: `None` while crashed.
pub struct NodeView<'a, M> {
    pub replica: Option<&'a Replica>,
    pub machine: &'a M,
}

/// The clients' requests and the checker of the machines' histories.
pub trait Workload {
    type Machine: Machine;
    /// A formatted (empty) machine for replica `replica` of a group of `replica_count`.
    fn machine(&self, replica_count: u8, replica: u8) -> Self::Machine;
    /// The body of `client`'s register (retries ask again and must get the same).
    fn register(&mut self, client: u128) -> Bytes {
        Bytes::from(format!("c{client}r0"))
    }
    /// The operation and body of request `request` of `client` (retries ask again and must get
    /// the same); `logout`: the request that ends the session.
    fn request(&mut self, client: u128, request: u64, logout: bool) -> (u8, Bytes);
    /// Op `op` committed (first time any replica applied it), with the reply every replica
    /// must give. Called in op order for applied ops (registers are not applied).
    fn committed(&mut self, op: u64, entry: &Entry, reply: &Bytes);
    /// `client`'s request `request` was acknowledged as committed at `op` with `reply`.
    fn acknowledged(&mut self, client: u128, request: u64, op: u64, reply: &Bytes);
    /// After every step: checks the machines (the consensus checkers already ran).
    fn check_step(&mut self, seed: u64, now: u64, nodes: &[NodeView<'_, Self::Machine>]);
    /// At the end, once every client finished: the full check.
    fn check_end(&mut self, seed: u64, nodes: &[NodeView<'_, Self::Machine>]);
}

/// Operation code of a model logout: applying it ends the session of the op's client.
pub const OPERATION_LOGOUT: u8 = 2;

const INITIAL_STATE: u64 = 0x1234_5678;

/// The model machine: its state is a hash of every applied body; the reply is the new state.
/// It keeps nothing beside the journal, so a restart rebuilds it from the checkpoint.
#[derive(Debug)]
pub struct ModelMachine {
    state: u64,
    /// State after each applied op above the latest checkpoint taken.
    states: BTreeMap<u64, u64>,
    /// State at the latest checkpoint taken.
    checkpoint_state: u64,
}

impl Default for ModelMachine {
    fn default() -> Self {
        ModelMachine {
            state: INITIAL_STATE,
            states: BTreeMap::new(),
            checkpoint_state: INITIAL_STATE,
        }
    }
}

impl Machine for ModelMachine {
    fn journal(&mut self, _entry: &Entry) -> Option<Bytes> {
        None
    }

    fn sync(&mut self) {}

    fn truncate(&mut self, _after_op: u64) {}

    fn apply(&mut self, op: u64, client: u128, operation: u8, body: &Bytes) -> Applied {
        let mut hash = Fnv::new();
        hash.write(&self.state.to_le_bytes());
        hash.write(body);
        self.state = hash.finish();
        self.states.insert(op, self.state);
        // Decided from the committed op alone, like the server's logout.
        let retired = if operation == OPERATION_LOGOUT {
            vec![client]
        } else {
            Vec::new()
        };
        Applied {
            reply: Bytes::copy_from_slice(&self.state.to_le_bytes()),
            retired,
        }
    }

    fn checkpoint(&mut self, op: u64) -> Option<Vec<u8>> {
        let state = self
            .states
            .range(..=op)
            .next_back()
            .map_or(self.checkpoint_state, |(_, state)| *state);
        self.states.retain(|at, _| *at > op);
        self.checkpoint_state = state;
        Some(state.to_le_bytes().to_vec())
    }

    fn crash(&mut self, _rng: &mut Rng) {}

    fn restart(&mut self, checkpoint: Option<(u64, &[u8])>, records: Vec<Journaled>) -> Vec<Entry> {
        let state = checkpoint.map_or(INITIAL_STATE, |(_, bytes)| {
            u64::from_le_bytes(bytes.try_into().expect("an 8-byte model state"))
        });
        *self = ModelMachine {
            state,
            states: BTreeMap::new(),
            checkpoint_state: state,
        };
        records
            .into_iter()
            .map(|record| {
                assert!(!record.stowed, "the model machine stows nothing");
                record.entry
            })
            .collect()
    }

    fn replayed(&mut self) {}
}

/// Clients of the model machine: request bodies name the client and request; the checks are
/// the cluster's own (replies agree with the committed log).
#[derive(Debug, Default)]
pub struct ModelWorkload;

impl Workload for ModelWorkload {
    type Machine = ModelMachine;

    fn machine(&self, _replica_count: u8, _replica: u8) -> ModelMachine {
        ModelMachine::default()
    }

    fn request(&mut self, client: u128, request: u64, logout: bool) -> (u8, Bytes) {
        let operation = if logout { OPERATION_LOGOUT } else { 1 };
        (operation, Bytes::from(format!("c{client}r{request}")))
    }

    fn committed(&mut self, _op: u64, _entry: &Entry, _reply: &Bytes) {}

    fn acknowledged(&mut self, _client: u128, _request: u64, _op: u64, _reply: &Bytes) {}

    fn check_step(&mut self, _seed: u64, _now: u64, _nodes: &[NodeView<'_, ModelMachine>]) {}

    fn check_end(&mut self, _seed: u64, _nodes: &[NodeView<'_, ModelMachine>]) {}
}
